"""A rolling restart, then a rebalance, of gateways behind haproxy: ``python -m bench.rebalance``.

A private fleet (embedded redis-server, a scorer, ``--gateways`` gateways on 127.0.0.2, .3, …
behind one haproxy) with the gateways' production drain settings unless told otherwise
(``LB_GW_DRAIN_DELAY`` 2 s, ``LB_GW_DRAIN_WINDOW`` 10 s), and ``--sockets`` spectators through
haproxy that reconnect as the product's clients do (after a 1012, a random wait in [0, 1 s]:
``leaderboard.backoff``). Once all are open: a rolling restart (``fleet.rollout``) — the time of
each gateway's steps and the counts it leaves — then ``fleet.rebalance`` — its time and the counts
after — and at the end how many sockets did not come back (lost for good).

Unless ``--no-write``, the figures are recorded in bench/results/rebalance.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from bench import results
from fleet import demo
from fleet.rebalance import Rebalance, counts, rebalance
from fleet.rollout import Step, rollout
from fleet.supervisor import Fleet, FleetSettings
from leaderboard import GameConfig
from leaderboard.backoff import Backoff
from leaderboard.settings import argument_parser

GAME = GameConfig(game="rebalance")


@dataclass
class Client:
    """One spectator: reconnects after every close, counts its 1012 closes by reason."""

    connected: asyncio.Event = field(default_factory=asyncio.Event)
    closes: dict[str, int] = field(default_factory=dict)

    async def run(self, url: str, stop: asyncio.Event) -> None:
        backoff = Backoff()
        while not stop.is_set():
            code: int | None = None
            try:
                async with connect(url, open_timeout=10, close_timeout=2, max_queue=4) as ws:
                    orjson.loads(await ws.recv())  # welcome
                    backoff.reset()
                    self.connected.set()
                    with contextlib.suppress(ConnectionClosed):
                        async for _ in ws:
                            pass
                    code = ws.close_code
                    reason = ws.close_reason or ""
                    self.closes[reason] = self.closes.get(reason, 0) + 1
            except (OSError, InvalidStatus, TimeoutError, ConnectionClosed):
                pass
            self.connected.clear()
            if not stop.is_set():
                await asyncio.sleep(backoff.next_delay(close_code=code))


def spread(before: dict[str, int]) -> str:
    return " / ".join(str(n) for n in before.values())


async def until_open(clients: list[Client], within: float) -> tuple[float, int]:
    """Seconds until every client is connected, or ``within`` if some are not; how many are not."""
    t0 = time.monotonic()
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(within):
            await asyncio.gather(*(c.connected.wait() for c in clients))
    return time.monotonic() - t0, sum(not c.connected.is_set() for c in clients)


async def all_open(clients: list[Client], within: float) -> None:
    if missing := (await until_open(clients, within))[1]:
        raise RuntimeError(f"{missing} clients not connected after {within:.0f} s")


async def run(args: argparse.Namespace) -> tuple[int, dict[str, Any]]:
    """The exit status (1: the rebalance did not settle or sockets were lost) and the figures."""
    env = (("LB_GAME", GAME.game), ("LB_GW_DRAIN_DELAY", f"{args.drain_delay:g}"))
    with tempfile.TemporaryDirectory(prefix="bench-rebalance-") as tmp:
        settings = FleetSettings(
            data_dir=Path(tmp),
            port=0,
            gateways=args.gateways,
            balancer="haproxy",
            demo_tokens=False,
            log_level="WARNING",
            drain_window=args.drain_window,
            env=env,
        )
        async with Fleet(settings) as fleet:
            traffic = asyncio.create_task(demo.traffic(fleet.redis_url, GAME, 50, seed=1))
            stop = asyncio.Event()
            clients = [Client() for _ in range(args.sockets)]
            tasks = []
            try:
                for i, c in enumerate(clients):
                    tasks.append(asyncio.create_task(c.run(fleet.ws_url, stop)))
                    if i % 50 == 49:
                        await asyncio.sleep(0.1)  # 500/s: below the gateways' connection-rate cap
                await all_open(clients, args.max_wait)
                layout = fleet.layout()
                start = await counts(layout.gateways)
                t0 = time.monotonic()
                steps = await rollout(layout, drain_timeout=args.max_wait, start_timeout=args.max_wait)
                rollout_s = time.monotonic() - t0
                await all_open(clients, args.max_wait)
                after_rollout = await counts(layout.gateways)
                result = await rebalance(
                    layout.gateways, over_s=args.over, tolerance=args.tolerance, timeout=args.max_wait
                )
                back_s, lost = await until_open(clients, args.max_wait)
                final = await counts(layout.gateways)
                figures = report(args, start, steps, rollout_s, after_rollout, result, final, clients, lost, back_s)
            finally:
                stop.set()
                for task in tasks:
                    task.cancel()
                # bounded: the fleet's shutdown comes next whatever a client does
                _, stuck = await asyncio.wait(tasks, timeout=10)
                if stuck:
                    print(f"{len(stuck)} clients did not stop within 10 s", file=sys.stderr)
                traffic.cancel()
                await asyncio.gather(traffic, return_exceptions=True)
    return (0 if result.settled and lost == 0 else 1), figures


def report(
    args: argparse.Namespace,
    start: dict[str, int],
    steps: list[Step],
    rollout_s: float,
    after_rollout: dict[str, int],
    result: Rebalance,
    final: dict[str, int],
    clients: list[Client],
    lost: int,
    back_s: float,
) -> dict[str, Any]:
    """Print the run's table; its figures."""
    names = " / ".join(start)
    settled = "" if result.settled else " (NOT SETTLED)"
    rows = [
        ("gateways / sockets", f"{len(start)} / {args.sockets}"),
        ("drain delay / window (s)", f"{args.drain_delay:g} / {args.drain_window:g}"),
        (f"sockets before ({names})", spread(start)),
        ("rolling restart took (s)", f"{rollout_s:.1f}"),
        *[
            (f"  {s.gateway}: drain / ready / UP (s)", f"{s.drained_s:.1f} / {s.restarted_s:.1f} / {s.back_in_s:.1f}")
            for s in steps
        ],
        (f"sockets after the restart ({names})", spread(after_rollout)),
        ("rebalance: shed", ", ".join(f"{k} {v}" for k, v in result.shed.items()) or "nothing"),
        (f"sockets after the rebalance ({names})", spread(final)),
        (f"rebalance took (s), --over {args.over:g}", f"{result.seconds:.1f}{settled}"),
        ("closed by the rebalance (1012 rebalance)", f"{sum(c.closes.get('rebalance', 0) for c in clients)}"),
        ("sockets lost for good", f"{lost} (all back {back_s:.1f} s after the rebalance)"),
    ]
    print("| figure | value |\n|---|---|")
    for name, value in rows:
        print(f"| {name} | {value} |", flush=True)
    return {
        "gateways": len(start),
        "sockets": args.sockets,
        "before": start,
        "rollout_s": rollout_s,
        "steps_s": {s.gateway: {"drain": s.drained_s, "ready": s.restarted_s, "up": s.back_in_s} for s in steps},
        "after_rollout": after_rollout,
        "shed": result.shed,
        "after_rebalance": final,
        "rebalance_s": result.seconds,
        "settled": result.settled,
        "closed_by_rebalance": sum(c.closes.get("rebalance", 0) for c in clients),
        "lost": lost,
        "all_back_s": back_s,
    }


def main(argv: list[str] | None = None) -> int:
    p = argument_parser("python -m bench.rebalance", (__doc__ or "").split("\n\n")[1])
    p.add_argument("--sockets", type=int, default=600, help="spectators through haproxy")
    p.add_argument("--gateways", type=int, default=3, help="gateway processes behind haproxy")
    p.add_argument("--drain-delay", type=float, default=2.0, help="LB_GW_DRAIN_DELAY of the gateways (s)")
    p.add_argument("--drain-window", type=float, default=10.0, help="LB_GW_DRAIN_WINDOW of the gateways (s)")
    p.add_argument("--over", type=float, default=10.0, help="the rebalance's shedding window (s)")
    p.add_argument("--tolerance", type=float, default=0.1, help="the rebalance's tolerance (share of the mean)")
    p.add_argument("--max-wait", type=float, default=120.0, help="longest wait for any step (s)")
    results.add_no_write(p)
    args = p.parse_args(argv)
    if not 1 <= args.sockets <= 5_000 or not 2 <= args.gateways <= 16:
        p.error("--sockets is 1..5000 (one process holds them), --gateways 2..16")
    if min(args.drain_delay, args.drain_window, args.over, args.tolerance) < 0 or not 0 < args.max_wait <= 600:
        p.error("delays, windows and the tolerance are at least 0; --max-wait 0..600 s")
    status, figures = asyncio.run(run(args))
    results.save("rebalance", figures, args, module="bench.rebalance", argv=argv)
    return status


if __name__ == "__main__":
    sys.exit(main())
