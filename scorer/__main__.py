"""``python -m scorer``: run a scorer replica (consumer, publisher, badge worker, metrics).
``python -m scorer submit --player mia --points 120``: file one submission into the queue.
``python -m scorer status --id m-1``: what became of a submission (applied, pending, refused, unknown).
``python -m scorer tournament create|join|list``: live tournaments (boards ``t-<id>``).
``python -m scorer ban|unban|correct|profile ...``: operator actions (docs/operations.md).
``python -m scorer rebuild``: restore the boards from the durable score log (LB_DURABLE_URL)
into a Redis that lost them.
``python -m scorer rank-index``: rebuild the boards' rank companions (after an upgrade, or after
switching a window to dense ranks).

Configuration comes from ``LB_`` environment variables (README's table). SIGTERM or Ctrl-C: stop
reading, finish and acknowledge the batch in flight, exit 0; a second signal exits at once.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import getpass
import logging
import os
import signal
import socket
import sys
import time
import uuid
from typing import Any

import orjson
from redis.exceptions import AuthenticationError, ConnectionError, ResponseError, TimeoutError

from leaderboard import BacklogFull, BadRequest, InvalidSubmission, Leaderboard, Submission, connect, now_ms
from leaderboard.errors import Banned, InvalidInput, NotReplicated, TournamentError
from leaderboard.moderation import Moderation
from leaderboard.profiles import Profile
from leaderboard.queue import Queue
from leaderboard.results import SubmissionStatus
from leaderboard.settings import HelpFormatter, argument_parser, load_or_exit, redacted, unreachable

from .durable import StoreError, open_store
from .durable.records import PARTS
from .rebuild import RebuildRefused, Restored, rebuild
from .service import Scorer
from .settings import ScorerSettings

log = logging.getLogger("scorer")


REDIS_URL_HELP = "Redis to use (default: LB_REDIS_URL, else redis://127.0.0.1:6379/0)"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argument_parser("python -m scorer", __doc__ or "", ScorerSettings)
    p.add_argument("--burst", action="store_true", help="exit once the queue is drained")
    p.add_argument("--redis-url", default=argparse.SUPPRESS, help=REDIS_URL_HELP)
    sub = p.add_subparsers(
        dest="command", metavar="{submit,status,tournament,ban,unban,correct,profile,rebuild,rank-index}"
    )
    s = sub.add_parser(
        "submit", help="file one submission into the queue", description="File one submission into the queue.",
        formatter_class=HelpFormatter, epilog=p.epilog,  # it loads the same settings as a replica
    )  # fmt: skip
    s.add_argument("--player", required=True, help="player id")
    s.add_argument("--points", required=True, help="points (a whole number)")
    s.add_argument("--id", help="submission id (default: a random one)")
    s.add_argument("--ts", help="timestamp, ms since the epoch (default: now)")
    s.add_argument("--op", choices=("best", "incr", "set"), help="write operator (default: the game's)")
    s.add_argument("--name", help="display name")
    s.add_argument("--region", help="region scope, e.g. eu")
    s.add_argument("--mode", help="mode scope, e.g. ranked")
    s.add_argument("--tournament", help="tournament id: the slip counts on that tournament's boards only")
    s.add_argument("--game", help="game to submit to (default: the first of LB_GAMES, else LB_GAME)")
    s.add_argument("--redis-url", default=argparse.SUPPRESS, help=REDIS_URL_HELP)
    st = sub.add_parser(
        "status", help="what became of a submission: applied, pending, refused (with its code) or unknown",
        description="What became of a submission, by its id: applied, pending (in the queue), refused (dead-"
        "lettered, with its code and message) or unknown (never received, or older than LB_IDEMPOTENCY_S). "
        "Exit status 0 applied, 5 pending, 6 refused, 7 unknown.",
        formatter_class=HelpFormatter, epilog=p.epilog,
    )  # fmt: skip
    st.add_argument("--id", required=True, help="submission id")
    st.add_argument(
        "--wait", type=float, default=0.0, metavar="SECONDS",
        help="while the submission is pending, ask again for up to this long (default 0: answer at once)",
    )  # fmt: skip
    st.add_argument("--game", help="the submission's game (default: the first of LB_GAMES, else LB_GAME)")
    st.add_argument("--redis-url", default=argparse.SUPPRESS, help=REDIS_URL_HELP)
    t = sub.add_parser(
        "tournament", help="create a tournament, enter players, list tournaments",
        description="Live tournaments: boards t-<id> with a start, an end and an entry list.",
        formatter_class=HelpFormatter, epilog=p.epilog,
    )  # fmt: skip
    tsub = t.add_subparsers(dest="action", metavar="{create,join,list}", required=True)
    c = tsub.add_parser("create", help="create a tournament (again with the same bounds: no-op)")
    c.add_argument("id", help="tournament id (1-32 of A-Z a-z 0-9 _ -); its boards are window t-<id>")
    c.add_argument("--start", required=True, help="start: ms since the epoch, or ISO 8601 UTC")
    c.add_argument("--end", required=True, help="end (exclusive): ms since the epoch, or ISO 8601 UTC")
    j = tsub.add_parser("join", help="enter players (before the start or while it runs)")
    j.add_argument("id", help="tournament id")
    j.add_argument("players", nargs="+", help="player ids")
    tsub.add_parser("list", help="every tournament with its start and end")
    for parser in (c, j, t):
        parser.add_argument("--redis-url", default=argparse.SUPPRESS, help=REDIS_URL_HELP)
    _operator_commands(sub, p.epilog or "")
    b = sub.add_parser(
        "rebuild", help="restore the boards from the durable score log into an empty Redis",
        description="Restore every board and window, the distinct-player counts, the profiles, the "
        "idempotency memory and what the journaled actions left (bans and their tombstones, corrections, "
        "tournaments and entrants, close markers and finals, badges) from the durable score log "
        "(LB_DURABLE_URL) into an empty Redis. Stop the scorers first.",
        formatter_class=HelpFormatter, epilog=p.epilog,
    )  # fmt: skip
    b.add_argument("--force", action="store_true", help="write over a Redis that already holds data of the game")
    b.add_argument("--batch", type=int, default=1000, help="submissions per lb_submit call (default 1000)")
    b.add_argument(
        "--replay", type=int, default=None,
        help="the newest submissions sent through lb_submit, the rest folded (default: LB_ACTIVITY_MAXLEN, "
        "which restores the activity feed)",
    )  # fmt: skip
    b.add_argument(
        "--workers", type=int, default=2, choices=PARTS,
        help="processes folding the log, each a share of the players (default 2; 1: folded in this process)",
    )  # fmt: skip
    b.add_argument("--redis-url", default=argparse.SUPPRESS, help=REDIS_URL_HELP)
    x = sub.add_parser(
        "rank-index", help="rebuild the boards' rank companions (after an upgrade or a switch to dense ranks)",
        description="Rebuild each board's histogram, and in dense mode its distinct points, from its members: "
        "every board of the game that exists (all periods and scopes), or those of --window. One O(N) atomic "
        "call per board (seconds per million members, Redis serving nothing else meanwhile); the scorers may "
        "keep running.",
        formatter_class=HelpFormatter, epilog=p.epilog,
    )  # fmt: skip
    x.add_argument("--window", action="append", help="only this window (repeatable; a tournament's t-<id> too)")
    x.add_argument("--redis-url", default=argparse.SUPPRESS, help=REDIS_URL_HELP)
    args = p.parse_args(argv)
    if args.command == "status" and not 0 <= args.wait <= 600:
        st.error("--wait is 0..600 s")
    return args


def parse_time(text: str) -> int:
    """ms since the epoch, given as such or as an ISO 8601 time (UTC unless it says otherwise)."""
    if text.isdigit():
        return int(text)
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"not a time: {text!r} (ms since the epoch, or ISO 8601)") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return int(when.timestamp() * 1000)


async def tournament(settings: ScorerSettings, args: argparse.Namespace) -> str:
    redis = connect(settings.redis_url, pool=settings.redis_pool)
    try:
        lb = Leaderboard(redis, settings.game.served[0])  # with LB_GAMES: the first game
        if args.action == "create":
            spec = await lb.create_tournament(args.id, parse_time(args.start), parse_time(args.end))
            period = spec.period(0)
            return f"tournament {args.id}: board window {spec.name}, {_iso(period.start_ms)} to {_iso(period.end_ms)}"
        if args.action == "join":
            added = await lb.join(args.id, args.players)
            return f"tournament {args.id}: {added} of {len(args.players)} players newly entered"
        lines = []
        for spec in await lb.tournaments():
            period = spec.period(0)
            lines.append(f"{spec.tournament}\t{spec.name}\t{_iso(period.start_ms)}\t{_iso(period.end_ms)}")
        return "\n".join(lines) or "no tournaments"
    finally:
        await redis.aclose()


def _operator_commands(sub: Any, epilog: str) -> None:
    """ban, unban, correct, profile: each one atomic call of the function library, applied at
    once (not queued), recorded in the activity stream with --actor and --reason."""

    def command(name: str, text: str) -> argparse.ArgumentParser:
        c: argparse.ArgumentParser = sub.add_parser(
            name, help=text, description=text[0].upper() + text[1:] + ".", formatter_class=HelpFormatter, epilog=epilog
        )
        c.add_argument("--player", required=True, help="player id")
        c.add_argument("--redis-url", default=argparse.SUPPRESS, help=REDIS_URL_HELP)
        return c

    actor_help = "who does it, recorded with the action (default: user@host)"
    c = command("ban", "remove a player from every board of the game and refuse their submissions")
    c.add_argument("--reason", required=True, help="why, recorded with the ban")
    c.add_argument("--actor", help=actor_help)
    c = command("unban", "lift a ban (removed scores are not restored)")
    c.add_argument("--reason", default="", help="why, recorded with the unban")
    c.add_argument("--actor", help=actor_help)
    c = command("correct", "set a player's points (higher or lower) on the current period of every window")
    c.add_argument("--points", required=True, help="the corrected points (a whole number)")
    c.add_argument("--reason", required=True, help="why, recorded with the correction")
    c.add_argument("--actor", help=actor_help)
    c.add_argument("--window", help="only this window, or a tournament's t-<id> (default: every window of the game)")
    c.add_argument("--period", help="with --window: previous, or a label such as 2026-W48 (default: the current)")
    c.add_argument(
        "--scope", action="append", help="board scope, repeatable (default: global and every scope the player is on)"
    )
    c = command("profile", "set a player's display name, avatar and country ('' clears a field)")
    c.add_argument("--name", help="display name (NFC-normalised; 1-64 bytes, no control characters)")
    c.add_argument("--avatar", help="avatar image URL (https only, at most 256 bytes)")
    c.add_argument("--country", help="ISO 3166-1 alpha-2 country code, e.g. FR")


def _default_actor() -> str:
    return f"{getpass.getuser()}@{socket.gethostname()}"[:64]


async def operate(settings: ScorerSettings, args: argparse.Namespace) -> str:
    """Run one operator command; the line to print."""
    redis = connect(settings.redis_url, pool=settings.redis_pool)
    try:
        lb = Leaderboard(redis, settings.game)
        await lb.load()  # the library may be older than this command (or absent): operators need the new one
        mod = Moderation(lb)
        actor = getattr(args, "actor", None) or _default_actor()
        if args.command == "ban":
            result = await mod.ban(args.player, actor=actor, reason=args.reason)
            top = f"top {settings.game.top_n}"
            return f"banned {args.player}: removed from {result.boards} boards ({result.top_changed} {top}s changed)"
        if args.command == "unban":
            was = await mod.unban(args.player, actor=actor, reason=args.reason)
            return f"unbanned {args.player}" if was else f"{args.player} was not banned: nothing changed"
        if args.command == "correct":
            rows = await mod.correct(
                args.player, args.points, actor=actor, reason=args.reason, window_name=args.window,
                period=args.period, scopes=args.scope,
            )  # fmt: skip
            boards = ", ".join(
                f"{c.board.window} {c.board.period} {c.board.scope}: "
                f"{'-' if c.previous is None else c.previous} -> {args.points} (#{c.rank})"
                for c in rows
            )
            return f"corrected {args.player}: {boards}"
        profile = Profile.parse({k: v for k in ("name", "avatar", "country") if (v := getattr(args, k)) is not None})
        stored = await mod.set_profile(args.player, profile)
        return f"profile of {args.player}: {orjson.dumps(stored).decode()}"
    finally:
        await redis.aclose()


def _iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).isoformat()


async def run(settings: ScorerSettings, burst: bool) -> None:
    loop = asyncio.get_running_loop()
    scorer = Scorer(settings, burst=burst)
    signals = 0

    def on_signal() -> None:
        nonlocal signals
        signals += 1
        if signals == 1:
            log.info("stopping: finishing the batch in flight")
            scorer.stop()
        else:  # a second signal: the operator does not want to wait
            log.warning("second signal: exiting now")
            os._exit(1)

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal)
    try:
        await scorer.start()
        await scorer.wait()
    finally:
        await scorer.close()


async def submit(settings: ScorerSettings, args: argparse.Namespace) -> tuple[Submission, str]:
    fields = {
        "id": args.id or uuid.uuid4().hex,
        "player": args.player,
        "points": args.points,
        "ts": args.ts or str(now_ms()),
    }
    for key in ("op", "name", "region", "mode", "tournament"):
        if getattr(args, key):
            fields[key] = getattr(args, key)
    served = {c.game: c for c in settings.game.served}
    config = served.get(args.game or next(iter(served)))
    if config is None:
        raise InvalidSubmission("unknown_game", f"game {args.game!r} is not served here ({', '.join(served)})")
    sub = Submission.parse(fields)  # the queue checks the clock and the game's limits
    redis = connect(settings.redis_url, pool=settings.redis_pool)
    try:
        queue = Queue(redis, config)
        return sub, await queue.submit(sub)
    finally:
        await redis.aclose()


# Exit status of ``status`` per answer: a script can branch on it without parsing the line.
STATUS_EXIT = {"applied": 0, "pending": 5, "refused": 6, "unknown": 7}


async def status(settings: ScorerSettings, args: argparse.Namespace) -> SubmissionStatus:
    served = {c.game: c for c in settings.game.served}
    config = served.get(args.game or next(iter(served)))
    if config is None:
        raise BadRequest(f"game {args.game!r} is not served here ({', '.join(served)})")
    redis = connect(settings.redis_url)
    try:
        lb = Leaderboard(redis, config)
        found = await lb.status(args.id)
        # The scorer applies a slip within a batch or two; no event tells a client when, so a
        # script that has just submitted asks again (bounded by --wait) rather than sleeping blind.
        deadline = time.monotonic() + max(args.wait, 0.0)
        while found.status == "pending" and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
            found = await lb.status(args.id)
        return found
    finally:
        await redis.aclose()


async def rebuild_command(settings: ScorerSettings, args: argparse.Namespace) -> Restored:
    store = open_store(settings.durable_url)
    # no read timeout: computing a restored board's rank companions is one O(N) call, seconds
    # on a board of a million members
    redis = connect(settings.redis_url, pool=settings.redis_pool, socket_timeout=None)
    try:
        await store.open()
        return await rebuild(
            redis, store, settings.game, force=args.force, batch=args.batch, replay=args.replay, workers=args.workers
        )
    finally:
        await redis.aclose()
        await store.close()


async def rank_index(settings: ScorerSettings, args: argparse.Namespace) -> list[str]:
    """Rebuild the rank companions of every board of the game (or of ``--window``); a line per
    board, then the total."""
    # no read timeout: one board's rebuild is one O(N) call, seconds on a million members
    redis = connect(settings.redis_url, pool=settings.redis_pool, socket_timeout=None)
    try:
        lb = Leaderboard(redis, settings.game)
        await lb.load()  # lb_rank_rebuild may be newer than the library loaded
        windows = set(args.window or ())
        for name in windows:
            await lb.window_of(name)  # an unknown window is refused before anything is written
        boards = sorted(await Moderation(lb).boards(), key=lambda b: (b.window, b.period, b.scope))
        lines, rebuilt, members = [], 0, 0
        for b in boards:
            if windows and b.window not in windows:
                continue
            where = f"{b.window} {b.period} {b.scope}"
            try:
                n = await lb.rebuild_rank_index(b.window, b.scope, period=b.period)
            except (BadRequest, TournamentError) as exc:  # a window no longer kept, a period past reading
                lines.append(f"{where}: skipped ({exc})")
                continue
            rebuilt, members = rebuilt + 1, members + n
            lines.append(f"{where}: {n:,} members ({lb.config.rank_mode_for(b.window)})")
        return [*lines, f"rebuilt the rank companions of {rebuilt:,} boards, {members:,} members"]
    finally:
        await redis.aclose()


def _redis_trouble(settings: ScorerSettings, exc: Exception) -> int:
    """One line and exit status 1 for a Redis an operator command cannot use: unreachable, or
    without the function library. Any other error reply is a bug: raised."""
    if not isinstance(exc, ResponseError):
        print(unreachable(settings.redis_url, exc), file=sys.stderr)
    elif "function" in str(exc).lower():
        print(f"Redis at {redacted(settings.redis_url)} has no leaderboard library loaded: start a scorer "
              f"(python -m scorer) against it first ({exc})", file=sys.stderr)  # fmt: skip
    else:
        raise exc
    return 1


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    overrides = {"redis_url": args.redis_url} if "redis_url" in args else {}
    settings = load_or_exit(ScorerSettings, **overrides)
    logging.basicConfig(level=settings.log_level, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if args.command in ("ban", "unban", "correct", "profile"):
        try:
            print(asyncio.run(operate(settings, args)))
        except (InvalidInput, Banned) as exc:
            print(f"refused: {exc.code}: {exc.message}", file=sys.stderr)
            return 2
        except (ConnectionError, TimeoutError, AuthenticationError, ResponseError) as exc:
            return _redis_trouble(settings, exc)
        return 0
    if args.command == "tournament":
        try:
            print(asyncio.run(tournament(settings, args)))
        except (BadRequest, TournamentError, ValueError) as exc:
            print(f"refused: {exc}", file=sys.stderr)
            return 2
        except (ConnectionError, TimeoutError, AuthenticationError, ResponseError) as exc:
            return _redis_trouble(settings, exc)
        return 0
    if args.command == "submit":
        try:
            sub, stream_id = asyncio.run(submit(settings, args))
        except InvalidSubmission as exc:
            print(f"refused: {exc}", file=sys.stderr)
            return 2
        except BacklogFull as exc:
            print(f"backlog full: {exc}", file=sys.stderr)
            return 3
        except NotReplicated as exc:
            print(f"not replicated: {exc}", file=sys.stderr)
            return 4
        except (ConnectionError, TimeoutError, AuthenticationError, ResponseError) as exc:
            return _redis_trouble(settings, exc)
        print(f"queued {sub.id}: player {sub.player}, {sub.points} points (stream entry {stream_id})")
        return 0
    if args.command == "status":
        try:
            found = asyncio.run(status(settings, args))
        except BadRequest as exc:
            print(f"refused: {exc.message}", file=sys.stderr)
            return 2
        except (ConnectionError, TimeoutError, AuthenticationError, ResponseError) as exc:
            return _redis_trouble(settings, exc)
        why = f": {found.code}: {found.message}" if found.status == "refused" else ""
        print(f"{found.id}: {found.status}{why}")
        return STATUS_EXIT[found.status]
    if args.command == "rebuild":
        if not settings.durable_url:
            print("rebuild reads the durable score log: set LB_DURABLE_URL", file=sys.stderr)
            return 2
        if args.batch < 1 or (args.replay is not None and args.replay < 0):
            print("--batch must be at least 1 and --replay at least 0", file=sys.stderr)
            return 2
        try:
            restored = asyncio.run(rebuild_command(settings, args))
        except RebuildRefused as exc:
            print(f"refused: {exc}", file=sys.stderr)
            return 3
        except StoreError as exc:
            print(str(exc), file=sys.stderr)
            return 1
        except (ConnectionError, TimeoutError, AuthenticationError) as exc:
            print(unreachable(settings.redis_url, exc), file=sys.stderr)
            return 1
        print("\n".join(restored.lines()))
        return 0
    if args.command == "rank-index":
        try:
            print("\n".join(asyncio.run(rank_index(settings, args))))
        except (BadRequest, TournamentError) as exc:
            print(f"refused: {exc}", file=sys.stderr)
            return 2
        except (ConnectionError, TimeoutError, AuthenticationError, ResponseError) as exc:
            return _redis_trouble(settings, exc)
        return 0
    asyncio.run(run(settings, args.burst))
    return 0


if __name__ == "__main__":
    sys.exit(main())
