"""``python -m scorer``: run a scorer replica (consumer, publisher, badge worker, metrics).
``python -m scorer submit --player mia --points 120``: file one submission into the queue.
``python -m scorer status --id m-1``: what became of a submission (applied, pending, refused, unknown).
``python -m scorer tournament create|join|list``: live tournaments (boards ``t-<id>``).
``python -m scorer board create|list|show|update|delete``: board definitions (docs/data-model.md);
``board apply FILES...``: boards as code (scorer/boardfiles.py).
``python -m scorer top``: a board's top N, read as the socket and the HTTP API read it.
``python -m scorer ban|unban|correct|profile ...``: operator actions (docs/operations.md);
``deadletters list|requeue|drop`` and ``audit``: scorer/operations.py.
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
import logging
import os
import signal
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

import orjson
from redis.exceptions import AuthenticationError, ConnectionError, ResponseError, TimeoutError

from leaderboard import (
    BacklogFull,
    BadRequest,
    InvalidSubmission,
    Leaderboard,
    Submission,
    connect,
    now_ms,
)
from leaderboard import protocol as p
from leaderboard.audit import AuditedModeration
from leaderboard.errors import Banned, InvalidBoard, InvalidInput, NotReplicated, TournamentError
from leaderboard.gctune import fewer_collections
from leaderboard.moderation import Moderation
from leaderboard.profiles import Profile
from leaderboard.queue import Queue
from leaderboard.settings import argument_parser, load_or_exit, redacted, unreachable

from . import boardcommands, operations
from .cli import REDIS_URL_HELP, Answer, Command, Subparsers, UsageError, redis_option
from .cli import parser as _parser
from .durable import StoreError, open_store
from .durable.records import PARTS
from .operations import default_actor
from .rebuild import RebuildRefused, rebuild
from .service import Scorer
from .settings import ScorerSettings

log = logging.getLogger("scorer")


# A command's expected failures: the line it prints (on stderr) and its exit status, for the
# first class that matches; anything else is a bug, raised. Redis trouble: ``failure``.
FAILURES: tuple[tuple[tuple[type[Exception], ...], Callable[[Any], str], int], ...] = (
    # the code a client of the socket or the HTTP API is told for the same refusal (docs/protocol.md)
    (
        (InvalidSubmission, InvalidInput, InvalidBoard, Banned, BadRequest, TournamentError, p.ProtocolError),
        lambda e: f"refused: {'bad_message' if e.code == 'bad_request' else e.code}: {e.message}",
        2,
    ),
    ((BacklogFull,), lambda e: f"backlog full: {e.message}", 3),
    ((NotReplicated,), lambda e: f"not replicated: {e.message}", 4),
    ((RebuildRefused,), lambda e: f"refused: {e}", 3),
    ((UsageError,), str, 2),
    ((StoreError,), str, 1),
)


def failure(settings: ScorerSettings, exc: Exception) -> Answer | None:
    """The line and exit status for ``exc`` raised by a command, or None for a bug."""
    if isinstance(exc, ConnectionError | TimeoutError | AuthenticationError):
        return Answer(unreachable(settings.redis_url, exc), 1)
    if isinstance(exc, ResponseError):  # an error reply of Redis itself: without the library, or a bug
        if "function" not in str(exc).lower():
            return None
        return Answer(
            f"Redis at {redacted(settings.redis_url)} has no leaderboard library loaded: start a scorer "
            f"(python -m scorer) against it first ({exc})",
            1,
        )
    for classes, line, exit_status in FAILURES:
        if isinstance(exc, classes):
            return Answer(line(exc), exit_status)
    return None


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argument_parser("python -m scorer", __doc__ or "", ScorerSettings)
    p.add_argument("--burst", action="store_true", help="exit once the queue is drained")
    p.add_argument("--redis-url", default=argparse.SUPPRESS, help=REDIS_URL_HELP)
    sub = p.add_subparsers(dest="command", metavar="{" + ",".join(COMMANDS) + "}")
    for command in COMMANDS.values():
        command.build(sub, p.epilog or "")
    return p.parse_args(argv)


# ---------------------------------------------------------------- submit, status


def _submit_parser(sub: Subparsers, epilog: str) -> None:
    s = _parser(sub, "submit", "file one submission into the queue", "File one submission into the queue.", epilog)
    s.add_argument("--player", required=True, help="player id")
    s.add_argument("--points", help="points (a whole number); with --board, --values instead")
    s.add_argument("--id", help="submission id (default: a random one)")
    s.add_argument("--ts", help="timestamp, ms since the epoch (default: now)")
    s.add_argument("--op", choices=("best", "incr", "set"), help="write operator (default: the game's)")
    s.add_argument("--name", help="display name")
    s.add_argument("--region", help="region scope, e.g. eu")
    s.add_argument("--mode", help="mode scope, e.g. ranked")
    s.add_argument("--tournament", help="tournament id: the slip counts on that tournament's boards only")
    s.add_argument("--board", help="defined board id: the slip counts on that board only (board create)")
    s.add_argument(
        "--values",
        help="the board's key values, comma-separated, e.g. 12,81250: a defined board's (--board), or the game's "
        "boards' when their stored default keeps key values",
    )
    s.add_argument("--meta", help="metadata of the entry (e.g. a replay id), where its board keeps some")
    s.add_argument("--game", help="game to submit to (default: the first of LB_GAMES, else LB_GAME)")
    redis_option(s)


async def submit(settings: ScorerSettings, args: argparse.Namespace) -> str:
    if (args.points is None) == (args.values is None) or (args.board is not None and args.values is None):
        raise UsageError(
            "submit takes --points, or --values: with --board for a defined board, without it for the game's "
            "boards when their stored default keeps key values"
        )
    fields = {"id": args.id or uuid.uuid4().hex, "player": args.player, "ts": args.ts or str(now_ms())}
    for key in ("points", "op", "name", "region", "mode", "tournament", "board", "values", "meta"):
        if getattr(args, key):
            fields[key] = getattr(args, key)
    if args.board:  # speedrun, board:speedrun or board:tower:region:eu, as the socket and the HTTP API name it
        try:
            fields = p.with_board(fields, args.board)
        except p.ProtocolError as exc:
            raise InvalidSubmission(exc.code, exc.message) from None
    served = {c.game: c for c in settings.game.served}
    config = served.get(args.game or next(iter(served)))
    if config is None:
        raise InvalidSubmission("unknown_game", f"game {args.game!r} is not served here ({', '.join(served)})")
    sub = Submission.parse(fields)  # the queue checks the clock and the game's limits
    redis = connect(settings.redis_url, pool=settings.redis_pool)
    try:
        queue = Queue(redis, config)
        stream_id = await queue.submit(sub)
        what = f"{sub.points} points" if not sub.values else f"board {sub.board or 'default'}: {args.values}"
        return f"queued {sub.id}: player {sub.player}, {what} (stream entry {stream_id})"
    finally:
        await redis.aclose()


class _Wait(argparse.Action):
    """``status --wait``: bounded, else a usage error."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, value: Any, *_: Any) -> None:
        if not 0 <= value <= 600:
            parser.error("--wait is 0..600 s")
        setattr(namespace, self.dest, value)


def _status_parser(sub: Subparsers, epilog: str) -> None:
    st = _parser(
        sub,
        "status",
        "what became of a submission: applied, pending, refused (with its code) or unknown",
        "What became of a submission, by its id: applied, pending (in the queue), refused (dead-lettered, with "
        "its code and message) or unknown (never received, or older than LB_IDEMPOTENCY_S). Exit status 0 "
        "applied, 5 pending, 6 refused, 7 unknown.",
        epilog,
    )
    st.add_argument("--id", required=True, help="submission id")
    st.add_argument(
        "--wait",
        type=float,
        default=0.0,
        action=_Wait,
        metavar="SECONDS",
        help="while the submission is pending, ask again for up to this long (default 0: answer at once)",
    )
    st.add_argument("--game", help="the submission's game (default: the first of LB_GAMES, else LB_GAME)")
    redis_option(st)


# Exit status of ``status`` per answer: a script can branch on it without parsing the line.
STATUS_EXIT = {"applied": 0, "pending": 5, "refused": 6, "unknown": 7}


async def status(settings: ScorerSettings, args: argparse.Namespace) -> Answer:
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
        why = f": {found.code}: {found.message}" if found.status == "refused" else ""
        return Answer(f"{found.id}: {found.status}{why}", STATUS_EXIT[found.status])
    finally:
        await redis.aclose()


# ---------------------------------------------------------------- operator actions
# ban, unban, correct, profile: each one atomic call of the function library, applied at once
# (not queued), recorded in the activity stream with --actor and --reason.

ACTOR_HELP = "who does it, recorded with the action (default: user@host)"


def _operator_parser(sub: Subparsers, epilog: str, name: str, text: str) -> argparse.ArgumentParser:
    c = _parser(sub, name, text, text[0].upper() + text[1:] + ".", epilog)
    c.add_argument("--player", required=True, help="player id")
    redis_option(c)
    return c


def _ban_parser(sub: Subparsers, epilog: str) -> None:
    c = _operator_parser(
        sub, epilog, "ban", "remove a player from every board of the game and refuse their submissions"
    )
    c.add_argument("--reason", required=True, help="why, recorded with the ban")
    c.add_argument("--actor", help=ACTOR_HELP)


def _unban_parser(sub: Subparsers, epilog: str) -> None:
    c = _operator_parser(sub, epilog, "unban", "lift a ban (removed scores are not restored)")
    c.add_argument("--reason", default="", help="why, recorded with the unban")
    c.add_argument("--actor", help=ACTOR_HELP)


def _correct_parser(sub: Subparsers, epilog: str) -> None:
    c = _operator_parser(
        sub, epilog, "correct", "set a player's points (higher or lower) on the current period of every window"
    )
    what = c.add_mutually_exclusive_group(required=True)
    what.add_argument("--points", help="the corrected points (a whole number)")
    what.add_argument("--values", help="a defined board's key values, comma-separated (with --scope board:<id>)")
    what.add_argument("--remove", action="store_true", help="take the player off the defined boards --scope names")
    c.add_argument("--meta", help="with --values: the entry's metadata ('' clears it; default: kept)")
    c.add_argument("--reason", required=True, help="why, recorded with the correction")
    c.add_argument("--actor", help=ACTOR_HELP)
    c.add_argument("--window", help="only this window, or a tournament's t-<id> (default: every window of the game)")
    c.add_argument("--period", help="with --window: previous, or a label such as 2026-W48 (default: the current)")
    c.add_argument(
        "--scope", action="append", help="board scope, repeatable (default: global and every scope the player is on)"
    )


def _profile_parser(sub: Subparsers, epilog: str) -> None:
    c = _operator_parser(sub, epilog, "profile", "set a player's display name, avatar and country ('' clears a field)")
    c.add_argument("--name", help="display name (NFC-normalised; 1-64 bytes, no control characters)")
    c.add_argument("--avatar", help="avatar image URL (https only, at most 256 bytes)")
    c.add_argument("--country", help="ISO 3166-1 alpha-2 country code, e.g. FR")


def _shown(before: int | tuple[int, ...] | None) -> str:
    """A correction's value before, as the command line takes it."""
    if before is None:
        return "-"
    return ",".join(map(str, before)) if isinstance(before, tuple) else str(before)


async def operate(settings: ScorerSettings, args: argparse.Namespace) -> str:
    """Run one operator command; the line to print."""
    redis = connect(settings.redis_url, pool=settings.redis_pool)
    try:
        lb = Leaderboard(redis, settings.game)
        await lb.load()  # the library may be older than this command (or absent): operators need the new one
        mod = AuditedModeration(lb)
        actor = getattr(args, "actor", None) or default_actor()
        if args.command == "ban":
            result = await mod.ban(args.player, actor=actor, reason=args.reason)
            top = f"top {settings.game.top_n}"
            return f"banned {args.player}: removed from {result.boards} boards ({result.top_changed} {top}s changed)"
        if args.command == "unban":
            was = await mod.unban(args.player, actor=actor, reason=args.reason)
            return f"unbanned {args.player}" if was else f"{args.player} was not banned: nothing changed"
        if args.command == "correct":
            values = None if args.values is None else args.values.split(",")
            rows = await mod.correct(
                args.player,
                args.points,
                actor=actor,
                reason=args.reason,
                window_name=args.window,
                period=args.period,
                scopes=args.scope,
                values=values,
                metadata=args.meta,
                remove=args.remove,
            )
            after = args.points if args.points is not None else args.values or "(removed)"
            boards = ", ".join(
                f"{c.board.window} {c.board.period} {c.board.scope}: "
                f"{_shown(c.keys if c.keys is not None else c.previous)} -> {after} (#{c.rank or '-'})"
                for c in rows
            )
            return f"corrected {args.player}: {boards}"
        profile = Profile.parse({k: v for k in ("name", "avatar", "country") if (v := getattr(args, k)) is not None})
        stored = await mod.set_profile(args.player, profile)
        return f"profile of {args.player}: {orjson.dumps(stored).decode()}"
    finally:
        await redis.aclose()


# ---------------------------------------------------------------- rebuild, rank-index


def _rebuild_parser(sub: Subparsers, epilog: str) -> None:
    b = _parser(
        sub,
        "rebuild",
        "restore the boards from the durable score log into an empty Redis",
        "Restore every board and window, the distinct-player counts, the profiles, the idempotency memory and "
        "what the journaled actions left (bans and their tombstones, corrections, tournaments and entrants, "
        "close markers and finals, badges) from the durable score log (LB_DURABLE_URL) into an empty Redis. "
        "Stop the scorers first.",
        epilog,
    )
    b.add_argument("--force", action="store_true", help="write over a Redis that already holds data of the game")
    b.add_argument("--batch", type=int, default=1000, help="submissions per lb_submit call (default 1000)")
    b.add_argument(
        "--replay",
        type=int,
        default=None,
        help="the newest submissions sent through lb_submit, the rest folded (default: LB_ACTIVITY_MAXLEN, "
        "which restores the activity feed)",
    )
    b.add_argument(
        "--workers",
        type=int,
        default=2,
        choices=PARTS,
        help="processes folding the log, each a share of the players (default 2; 1: folded in this process)",
    )
    redis_option(b)


async def rebuild_command(settings: ScorerSettings, args: argparse.Namespace) -> str:
    if not settings.durable_url:
        raise UsageError("rebuild reads the durable score log: set LB_DURABLE_URL")
    if args.batch < 1 or (args.replay is not None and args.replay < 0):
        raise UsageError("--batch must be at least 1 and --replay at least 0")
    store = open_store(settings.durable_url)
    # no read timeout: computing a restored board's rank companions is one O(N) call, seconds
    # on a board of a million members
    redis = connect(settings.redis_url, pool=settings.redis_pool, socket_timeout=None)
    try:
        await store.open()
        restored = await rebuild(
            redis, store, settings.game, force=args.force, batch=args.batch, replay=args.replay, workers=args.workers
        )
        return "\n".join(restored.lines())
    finally:
        await redis.aclose()
        await store.close()


def _rank_index_parser(sub: Subparsers, epilog: str) -> None:
    x = _parser(
        sub,
        "rank-index",
        "rebuild the boards' rank companions (after an upgrade or a switch to dense ranks)",
        "Rebuild each board's histogram, and in dense mode its distinct points, from its members: every board "
        "of the game that exists (all periods and scopes, the defined boards too), or those of --window. "
        "One O(N) atomic call per board "
        "(seconds per million members, Redis serving nothing else meanwhile); the scorers may keep running.",
        epilog,
    )
    x.add_argument("--window", action="append", help="only this window (repeatable; a tournament's t-<id> too)")
    redis_option(x)


async def rank_index(settings: ScorerSettings, args: argparse.Namespace) -> str:
    """Rebuild the rank companions of every board of the game (or of ``--window``); a line per
    board, then the total."""
    # no read timeout: one board's rebuild is one O(N) call, seconds on a million members
    redis = connect(settings.redis_url, pool=settings.redis_pool, socket_timeout=None)
    try:
        lb = Leaderboard(redis, settings.game)
        await lb.load()  # lb_rank_rebuild may be newer than the library loaded
        await lb.boards.refresh()  # a stored default's windows (a season) and encoding are the game's
        windows = set(args.window or ())
        for name in windows:
            await lb.window_of(name)  # an unknown window is refused before anything is written
        mod = Moderation(lb)
        boards = sorted(await mod.boards() | await mod.defined_boards(), key=lambda b: (b.window, b.period, b.scope))
        lines, rebuilt, members = [], 0, 0
        for b in boards:
            if windows and b.window not in windows:
                continue
            where = f"{b.window} {b.period} {b.scope}"
            try:
                mode = (await lb.board_period(b.window, b.scope, period_name=b.period)).mode
                n = await lb.rebuild_rank_index(b.window, b.scope, period=b.period)
            except (BadRequest, TournamentError) as exc:  # a window no longer kept, a period past reading
                lines.append(f"{where}: skipped ({exc})")
                continue
            rebuilt, members = rebuilt + 1, members + n
            lines.append(f"{where}: {n:,} members ({mode})")
        return "\n".join([*lines, f"rebuilt the rank companions of {rebuilt:,} boards, {members:,} members"])
    finally:
        await redis.aclose()


# ---------------------------------------------------------------- the replica


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
        fewer_collections(settings.gc_threshold)
        await scorer.wait()
    finally:
        await scorer.close()


# In the order ``--help`` lists them.
COMMANDS = {
    command.name: command
    for command in (
        Command("submit", _submit_parser, submit),
        Command("status", _status_parser, status),
        Command("tournament", boardcommands.tournament_parser, boardcommands.tournament),
        Command("board", boardcommands.board_parser, boardcommands.board),
        Command("top", boardcommands.top_parser, boardcommands.top),
        Command("ban", _ban_parser, operate),
        Command("unban", _unban_parser, operate),
        Command("correct", _correct_parser, operate),
        Command("profile", _profile_parser, operate),
        Command("rebuild", _rebuild_parser, rebuild_command),
        Command("rank-index", _rank_index_parser, rank_index),
        Command("deadletters", operations.deadletters_parser, operations.deadletters),
        Command("audit", operations.audit_parser, operations.audit_log),
    )
}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    overrides = {"redis_url": args.redis_url} if "redis_url" in args else {}
    settings = load_or_exit(ScorerSettings, **overrides)
    logging.basicConfig(level=settings.log_level, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if args.command is None:
        asyncio.run(run(settings, args.burst))
        return 0
    try:
        answer = asyncio.run(COMMANDS[args.command].run(settings, args))
    except Exception as exc:
        failed = failure(settings, exc)
        if failed is None:
            raise
        print(failed.text, file=sys.stderr)
        return failed.status
    text, exit_status = (answer, 0) if isinstance(answer, str) else answer
    print(text)
    return exit_status


if __name__ == "__main__":
    sys.exit(main())
