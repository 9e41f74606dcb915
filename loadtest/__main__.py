"""``python -m loadtest MODE`` — load tests of the leaderboard fleet, on loopback addresses only.

Modes:
  sockets  open N WebSocket connections (ramped, over several client processes and 127.0.0.x
           source addresses) and measure every snapshot's publish→receipt latency at every socket
  submit   flood the scorer's stream at a target rate (or flat out) with long-tailed submissions
  mixed    both at once, for a given duration
  storm    SIGKILL one gateway holding N sockets and measure how its clients come back
  rollout  gateways behind haproxy, N sockets through it, then a rolling restart of every
           gateway: reconnects per second, longest gap between snapshots, snapshots missed
  chaos    every fault (scorer, Redis and gateway kills, bad readers, long property tests)
           against private fleets; writes docs/reliability.md (loadtest/chaos/)

By default a mode starts its own private fleet (embedded redis-server on a free port, a scorer,
``--gateways`` gateway processes on one free port); ``--url``, ``--redis-url`` and ``--game`` target a
running one instead. Every run is bounded in time and count and stops everything it started. In a
Redis it did not start, its synthetic players are removed at the end (loadtest/cleanup.py says
what stays). Reports go to ``loadtest-reports/<mode>-<timestamp>.{json,html}`` (or ``--out STEM``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import math
import os
import resource
import signal
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from leaderboard import GameConfig, connect
from leaderboard.settings import (
    ArgumentParser,
    HelpFormatter,
    describe,
    plain,
    redacted,
    redis_url_arg,
    unreachable,
)

from . import report
from .chaos import add_arguments as chaos_args
from .chaos import main as chaos_main
from .cleanup import clean_up, remove_players, run_prefix
from .flood import BASELINE_GAME
from .modes import Result, run_load, run_rollout, run_storm, run_submit
from .progress import Progress
from .swarm import parse_ws_url, url_game, with_game
from .target import Target, gateway_processes, private_fleet

CLEANUP_BOUND = 120.0  # seconds the removal itself may take, after the wait for the scorer

DEFAULTS: dict[str, dict[str, Any]] = {
    "sockets": {"sockets": 2000, "gateways": 1, "duration": 15.0},
    "mixed": {"sockets": 2000, "gateways": 2, "duration": 30.0, "rate": 2000.0},
    "submit": {"gateways": 1, "duration": 20.0, "rate": 0.0},
    "storm": {"sockets": 5000, "gateways": 4, "duration": 0.0, "rate": 0.0},
    "rollout": {"sockets": 4000, "gateways": 4, "duration": 0.0, "rate": 0.0},
}


def _env_pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.startswith("LB_"):
        raise argparse.ArgumentTypeError("expected LB_NAME=VALUE")
    return key, value


# the private fleet's scorer and gateways inherit the environment: their variables apply too
VARIABLES = (
    describe(GameConfig, only={"LB_GAME"})
    + "\n  (a private fleet's processes also read those of python -m scorer --help and python -m gateway --help)"
)


def parser() -> argparse.ArgumentParser:
    doc = __doc__ or ""
    p = ArgumentParser(
        prog="python -m loadtest",
        description=plain(doc.split("\n\n")[0]),
        epilog=plain(doc.split("\n\n", 1)[1]) + "\n" + VARIABLES,
        formatter_class=HelpFormatter,
    )
    sub = p.add_subparsers(dest="mode", required=True, metavar="MODE")
    helps = {
        "sockets": "many sockets; latency, spread, loss, gateway CPU and RSS per connection",
        "submit": "submission flood; applied per second, backlog",
        "mixed": "sockets and a submission flood together",
        "storm": "kill one gateway and measure the reconnect storm",
        "rollout": "restart every gateway behind haproxy in turn, under load",
    }
    for mode, text in helps.items():
        d = DEFAULTS[mode]
        m = sub.add_parser(mode, help=text, description=text, epilog=VARIABLES, formatter_class=HelpFormatter)
        where = m.add_argument_group("target")
        where.add_argument(
            "--url", help="ws://127.0.0.1:PORT/ws[?game=NAME] of a running fleet (default: start a private one)"
        )
        where.add_argument(
            "--redis-url",
            type=redis_url_arg,
            help="the fleet's Redis (required with --url; without --url: use this "
            "Redis for the private fleet instead of an embedded one)",
        )
        where.add_argument(
            "--gateway-pid",
            type=int,
            action="append",
            default=[],
            help="gateway PID for CPU/RSS (repeatable; default: processes listening on --url's port)",
        )
        where.add_argument(
            "--game",
            help="game the load writes into (key hash tag) and the sockets watch: with --url, one the fleet "
            "serves (its LB_GAME or one of LB_GAMES), given here or as --url's ?game=; a private fleet uses "
            "$LB_GAME or 'loadtest'",
        )
        where.add_argument("--jwt-secret", default="", help="HS256 secret for player tokens against --url")
        where.add_argument(
            "--ca-file", default="", help="with a wss:// --url: trust only this CA (PEM); else the system's CAs"
        )
        where.add_argument(
            "--gateways",
            type=int,
            default=d["gateways"],
            help=f"gateway processes of the private fleet (default {d['gateways']})",
        )
        where.add_argument(
            "--gateway-env",
            type=_env_pair,
            action="append",
            default=[],
            metavar="LB_X=V",
            help="extra setting for the private fleet's processes (repeatable)",
        )
        if mode in ("sockets", "mixed", "rollout"):
            if mode != "rollout":
                where.add_argument(
                    "--balancer",
                    choices=("none", "haproxy"),
                    default="none",
                    help="private fleet: gateways on 127.0.0.2, .3, … behind haproxy (sockets go through it)",
                )
            where.add_argument(
                "--balancers",
                type=int,
                default=0,
                help="haproxy processes on the port (default: enough for the sockets at 80 %% of --balancer-maxconn)",
            )
            where.add_argument(
                "--balancer-maxconn", type=int, default=9_000, help="players per haproxy process (default 9000)"
            )
        load = m.add_argument_group("load")
        if mode != "submit":
            load.add_argument("--sockets", type=int, default=d["sockets"], help=f"sockets (default {d['sockets']})")
            load.add_argument("--connect-rate", type=float, default=1000.0, help="connects per second (0 = flat out)")
            load.add_argument(
                "--clients", type=int, default=0, help="client processes (default: one per 8,000 sockets)"
            )
            load.add_argument(
                "--client-nice",
                type=int,
                default=0,
                help="the client processes' niceness increment, each in a session (autogroup) of its own so it "
                "holds against the fleet's: > 0 lets the fleet, on the same cores, run first "
                "(latencies are taken at arrival, by the kernel, either way) (default 0)",
            )
            load.add_argument(
                "--players-share",
                type=float,
                default=0.0,
                help="share of sockets authenticated as distinct players (0..1; they get rank pushes)",
            )
            load.add_argument("--window", default="weekly", help="the board's window (sockets get global/<window>)")
        if mode in ("submit", "mixed"):
            load.add_argument(
                "--rate",
                type=float,
                default=d["rate"],
                help=f"submissions per second, 0 = flat out (default {d['rate']:.0f})",
            )
        if mode in ("sockets", "storm", "rollout"):
            load.add_argument(
                "--feed-rate",
                type=float,
                default=100.0,
                help="submissions/s that keep the top 10 moving so snapshots flow (default 100; 0 = none); a run "
                "in which no snapshot was published says so (NOTHING MEASURED) and why",
            )
            load.add_argument(
                "--feed-into-top",
                action="store_true",
                help="each feed player's first slip starts at the watched board's 10th place, so the feed moves a "
                "top 10 that is established (a live game's: its slips would never reach it); the run's players "
                "are removed at the end, as always",
            )
        load.add_argument("--players", type=int, default=100_000, help="player population of the submissions")
        load.add_argument(
            "--op",
            default="incr",
            choices=("incr", "best", "set"),
            help="submission operator (default incr: the top 10 moves every tick)",
        )
        if mode not in ("storm", "rollout"):
            load.add_argument(
                "--duration", type=float, default=d["duration"], help=f"measured seconds (default {d['duration']:.0f})"
            )
        if mode == "submit":
            load.add_argument("--warmup", type=float, default=3.0, help="seconds of flood before measuring")
            load.add_argument(
                "--baseline", choices=("single",), help="also measure one FCALL per submission, one at a time"
            )
            load.add_argument("--baseline-seconds", type=float, default=10.0, help="seconds of the baseline")
        if mode in ("sockets", "mixed"):
            load.add_argument(
                "--baseline",
                choices=("naive", "direct"),
                help="run the same load against bench/naive_gateway.py (websockets.broadcast), or with "
                "--balancer haproxy straight to the gateways (what the balancer adds)",
            )
            load.add_argument(
                "--direct-first", action="store_true", help="with --baseline direct: the direct phase first"
            )
        if mode == "rollout":
            load.add_argument(
                "--max-wait",
                type=float,
                default=60.0,
                help="longest wait per gateway, and for everyone to be back (seconds, default 60)",
            )
            load.add_argument(
                "--drain-window",
                type=float,
                default=5.0,
                help="each gateway closes its sockets with 1012 over this many seconds (LB_GW_DRAIN_WINDOW, "
                "default 5; production's default is 10)",
            )
        if mode == "storm":
            load.add_argument(
                "--others",
                type=int,
                default=0,
                help="sockets opened after the other gateways start (spread over all of them)",
            )
            load.add_argument(
                "--max-wait",
                type=float,
                default=60.0,
                help="longest wait for everyone to come back (seconds, default 60)",
            )
            load.add_argument("--victim-pid", type=int, default=0, help="gateway PID to kill (with --url)")
            load.add_argument("--replace", action="store_true", help="start a replacement gateway after the kill")
            load.add_argument(
                "--replace-after", type=float, default=1.0, help="seconds after the kill the replacement starts"
            )
        m.add_argument(
            "--cleanup-wait",
            type=float,
            default=60.0,
            help="against a Redis this tool did not start: longest wait for the scorer to apply the run's "
            "submissions before its synthetic players are removed (seconds, default 60)",
        )
        m.add_argument(
            "--time-limit",
            type=float,
            default=900.0,
            help="hard bound on the whole run in seconds (default 900); then everything is stopped",
        )
        out = m.add_argument_group("output")
        out.add_argument("--out", help="report path stem (default loadtest-reports/<mode>-<timestamp>)")
        out.add_argument("--quiet", action="store_true", help="no live progress line")
    text = "every fault against private fleets, counted against a model; writes docs/reliability.md"
    chaos_args(sub.add_parser("chaos", help=text, description=text, epilog=VARIABLES, formatter_class=HelpFormatter))
    return p


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: it exists
    return True


def target_game(url: str, game: str | None) -> str:
    """The game a run against a running fleet loads: ``--game`` or the URL's ``?game=`` (the same
    if both are given). Never a default: the run adds synthetic players to that game's boards,
    and a guess would put them on a live game (or every socket would wait for snapshots of
    another game, and count them all lost)."""
    named = url_game(url)
    if game and named and game != named:
        raise ValueError(f"--game {game!r} and --url's ?game={named} name different games: give one")
    if not (game or named):
        raise ValueError(
            "--url needs --game (or ?game= in the URL): the game the fleet serves (its LB_GAME, or one of "
            "LB_GAMES). The run adds synthetic players to that game's boards and removes them afterwards"
        )
    return str(game or named)


@contextlib.asynccontextmanager
async def open_target(args: argparse.Namespace) -> AsyncIterator[Target]:
    if args.url:
        if not args.redis_url:
            raise ValueError("--url needs --redis-url (submissions and the snapshot monitor use it)")
        _, port, _ = parse_ws_url(args.url)
        game = target_game(args.url, args.game)
        victim = getattr(args, "victim_pid", 0)
        for pid in [*args.gateway_pid, victim]:
            if pid and not _running(pid):
                raise ValueError(f"no process {pid} (--gateway-pid / --victim-pid)")
        pids, unmeasured = gateway_processes(port, args.gateway_pid)
        if victim:
            gateway_processes(port, [victim])  # storm SIGKILLs it: a gateway, nothing else
        # an unreachable Redis stops the run here, before anything is written or to be removed
        redis = connect(args.redis_url)
        try:
            await redis.ping()
        finally:
            await redis.aclose()
        yield Target(
            ws_url=with_game(args.url, game),
            redis_url=args.redis_url,
            game=game,
            jwt_secret=args.jwt_secret,
            gateway_pids=pids,
            gateways_unmeasured=unmeasured,
            player_prefix=run_prefix(),
            clean_up=True,
        )
        return
    gateways = 1 if args.mode == "storm" else args.gateways  # storm: the others start once the victim is full
    balancer = "haproxy" if args.mode == "rollout" or getattr(args, "balancer", "none") == "haproxy" else ""
    maxconn = getattr(args, "balancer_maxconn", 9_000)
    # SO_REUSEPORT spreads connections over the haproxy processes by a hash, not evenly: a fifth of headroom
    balancers = getattr(args, "balancers", 0) or max(1, math.ceil(getattr(args, "sockets", 0) * 1.2 / maxconn))
    if getattr(args, "baseline", None) == "direct" and not balancer:
        raise ValueError("--baseline direct compares with --balancer haproxy: give both")
    with tempfile.TemporaryDirectory(prefix="loadtest-") as tmp:
        async with private_fleet(
            gateways=gateways,
            redis_url=args.redis_url,
            data_dir=Path(tmp),
            env=dict(args.gateway_env),
            game=args.game or os.environ.get("LB_GAME", "loadtest"),
            balancer=balancer,
            balancers=balancers,
            balancer_maxconn=maxconn,
            drain_window=getattr(args, "drain_window", 1.0),
        ) as target:
            if args.redis_url:
                # the private fleet's processes write into a Redis that outlives the run
                target.player_prefix, target.clean_up = run_prefix(), True
            yield target


async def run(args: argparse.Namespace, progress: Progress) -> Result:
    async with open_target(args) as target:
        progress.note(
            f"{args.mode}: target {target.ws_url} (gateway pids {target.gateway_pids}), "
            f"redis {redacted(target.redis_url)}"
        )
        try:
            result = await run_mode(target, args, progress)
        except BaseException:
            # a failed or interrupted run wrote into that Redis all the same
            if target.clean_up:
                line = await remove_synthetic_players(target, args.cleanup_wait)
                print(f"synthetic players removed: {line}", file=sys.stderr, flush=True)
            raise
        if target.clean_up:
            line = await remove_synthetic_players(target, args.cleanup_wait)
            result.rows.append(("synthetic players removed", line))
            result.figures["cleanup"] = line
        return result


async def run_mode(target: Target, args: argparse.Namespace, progress: Progress) -> Result:
    if args.mode in ("sockets", "mixed"):
        return await run_load(args.mode, target, args, progress)
    if args.mode == "submit":
        return await run_submit(target, args, progress)
    if args.mode == "rollout":
        return await run_rollout(target, args, progress)
    return await run_storm(target, args, progress)


async def remove_synthetic_players(target: Target, wait: float) -> str:
    """The run's players out of the target's game (and the submit baseline's scratch game)."""
    redis = connect(target.redis_url)
    try:
        async with asyncio.timeout(wait + CLEANUP_BOUND):
            done = await clean_up(redis, GameConfig(game=target.game), target.player_prefix, wait=wait)
            scratch = await remove_players(redis, GameConfig(game=BASELINE_GAME), target.player_prefix)
    except (TimeoutError, RedisConnectionError, RedisTimeoutError) as exc:
        return (
            f"FAILED ({exc.__class__.__name__}: {exc}); the run's players are named {target.player_prefix}<n> "
            f"in game {target.game!r}: remove them with python -m loadtest.cleanup"
        )
    finally:
        await redis.aclose()
    done.removed += scratch.removed
    return done.line()


def settings_of(args: argparse.Namespace) -> dict[str, Any]:
    """The run's settings for its reports, secrets left out (and URLs redacted by ``report``)."""
    settings = {k: v for k, v in vars(args).items() if k not in ("jwt_secret",)}
    if "gateway_env" in settings:
        settings["gateway_env"] = [(k, "***" if _secret_var(k) else v) for k, v in settings["gateway_env"]]
    return settings


def _secret_var(name: str) -> bool:
    return "SECRET" in name  # LB_JWT_SECRETS and the like: a URL's password is redacted with the URL


def command_of(argv: list[str]) -> str:
    """The command line for the reports, the token secret (``--jwt-secret``, however abbreviated,
    and a secret ``--gateway-env``) hidden."""
    shown: list[str] = []
    hide_next = False
    for arg in argv:
        option, eq, _ = arg.partition("=")
        if hide_next:
            arg, hide_next = "***", False
        elif len(option) >= 3 and "--jwt-secret".startswith(option):
            arg, hide_next = (f"{option}=***", False) if eq else (arg, True)
        elif eq and option.startswith("LB_") and _secret_var(option):
            arg = f"{option}=***"
        shown.append(arg)
    return "python -m loadtest " + " ".join(shown)


def write_reports(args: argparse.Namespace, result: Result, argv: list[str], started: float) -> Path:
    stamp = dt.datetime.fromtimestamp(started).strftime("%Y%m%d-%H%M%S")
    stem = Path(args.out) if args.out else Path("loadtest-reports") / f"{args.mode}-{stamp}"
    doc = {
        "mode": args.mode,
        "command": command_of(argv),
        "started": dt.datetime.fromtimestamp(started, dt.UTC).isoformat(),
        "seconds": time.time() - started,
        "machine": {"cpus": os.cpu_count(), "nofile_hard": resource.getrlimit(resource.RLIMIT_NOFILE)[1]},
        "settings": settings_of(args),
        "figures": _clean(result.figures),
        "series": _clean(result.series),
    }
    rows = [("command", doc["command"]), *result.rows]
    report.write(stem, doc, rows, result.charts)
    return stem


def _clean(value: Any) -> Any:
    """NaN/inf are not JSON: null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser().parse_args(argv)
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if args.mode == "chaos":
        return chaos_main(args, argv)
    progress = Progress(args.quiet)
    started = time.time()

    async def guarded() -> Result:
        # signals only here: Ctrl-C cancels the run, whose context managers stop what it started
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()

        def interrupt() -> None:
            if task.cancelling():
                os._exit(1)  # a second Ctrl-C: at once (children die with this process)
            task.cancel()

        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, interrupt)
        limit = asyncio.timeout(args.time_limit)
        try:
            async with limit:
                return await run(args, progress)
        except TimeoutError:
            if limit.expired():
                raise
            # a bounded wait inside the run (a client process's report, a fleet's start), not the limit
            raise RuntimeError("a step of the run timed out: the machine may be too busy for this load") from None

    def fail(text: str) -> None:
        progress.end()  # errors are shown even with --quiet: the run did not complete
        print(text, file=sys.stderr, flush=True)

    try:
        result = asyncio.run(guarded())
    except asyncio.CancelledError:
        fail("interrupted: everything started was stopped")
        return 130
    except TimeoutError:
        fail(f"error: the run exceeded --time-limit {args.time_limit:.0f} s; everything was stopped")
        return 1
    except (RedisConnectionError, RedisTimeoutError) as exc:
        fail(f"error: {unreachable(args.redis_url or 'the private fleet redis-server', exc, env=False)}")
        return 1
    except (RuntimeError, ValueError) as exc:
        fail(f"error: {exc}")
        return 1
    stem = write_reports(args, result, argv, started)
    print(report.table([("mode", args.mode), *result.rows]))
    print(f"\nreports: {stem.with_suffix('.json')}  {stem.with_suffix('.html')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
