"""Removing a run's synthetic players from a Redis this tool did not start.

A gateway serves one game (``LB_GAME``), so a load test against a running fleet has to write into
the game that fleet serves. Every player a run makes up is named ``lt-<run>-<index>``
(``run_prefix()``), so after the run they can be found and removed without touching anyone
else: from every board of the game (with the top N republished where they stood in it), from the
profiles and from the badges. What cannot be taken back is said so in the report: the
distinct-player counts (HyperLogLog) keep them, the activity stream keeps their entries until it
is trimmed, and announcements already sent stay sent.

The removal waits first (bounded) until the scorer has applied every submission the run queued:
one applied after the removal would put its player back. ``python -m loadtest`` does all this
itself at the end of a run; by hand (when that removal failed, and said so)::

    python -m loadtest.cleanup --redis-url redis://127.0.0.1:6379/0 --game arena --prefix lt-0123456789-
"""

from __future__ import annotations

import argparse
import asyncio
import re
import secrets
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import cast

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from leaderboard import GameConfig, RedisClient, connect
from leaderboard.settings import argument_parser, redis_url_arg, unreachable
from leaderboard.submission import entry_fields

SCAN_COUNT = 1000
PREFIX = re.compile(r"lt-[0-9a-f]{10}-")  # what run_prefix() makes: nothing wider may be removed by hand


def run_prefix() -> str:
    """The player-id prefix of one run: unique, so no real player can match it."""
    return f"lt-{secrets.token_hex(5)}-"


@dataclass(slots=True)
class Cleanup:
    removed: int = 0  # (board, player) memberships removed
    boards: int = 0  # boards that held some of the run's players
    republished: int = 0  # boards whose top N held some of them: the scorer republishes those
    profiles: int = 0
    still_queued: int = 0  # submissions of the run the scorer had not applied when the wait ended

    def line(self) -> str:
        text = (
            f"{self.removed:,} from {self.boards:,} boards ({self.republished:,} top lists republished), "
            f"{self.profiles:,} profiles; distinct-player counts and the activity stream keep them"
        )
        if self.still_queued:
            text += (
                f". WARNING: {self.still_queued:,} submissions of this run were still queued (is a scorer running?): "
                "their players will reappear when they are applied"
            )
        return text


async def wait_applied(redis: RedisClient, config: GameConfig, prefix: str, timeout: float) -> int:
    """Wait until every entry queued so far has been applied (the scorer deletes what it applied,
    in queue order); how many of the run's own (players starting with ``prefix``) were still
    queued when ``timeout`` ran out (0: all applied)."""
    stream = config.keys.submissions
    last = await _stream_last_id(redis, stream)
    if last is None:
        return 0  # no queue at all: nothing was submitted
    deadline = time.monotonic() + timeout
    while await redis.xrange(stream, "-", last, count=1):
        if time.monotonic() >= deadline:
            return sum(
                [1 async for fields in _entries(redis, stream, last) if fields.get("player", "").startswith(prefix)]
            )
        await asyncio.sleep(0.1)  # the scorer's progress is only visible by polling Redis
    return 0


async def _entries(redis: RedisClient, stream: str, last: str) -> AsyncIterator[dict[str, str]]:
    start = "-"
    while batch := cast(list[tuple[str, dict[str, str]]], await redis.xrange(stream, start, last, count=SCAN_COUNT)):
        for _, fields in batch:
            yield entry_fields(fields)  # by name, whichever form the entry came in
        start = "(" + batch[-1][0]


async def _stream_last_id(redis: RedisClient, stream: str) -> str | None:
    if not await redis.exists(stream):
        return None
    info = await redis.xinfo_stream(stream)
    return str(info["last-generated-id"])


async def remove_players(redis: RedisClient, config: GameConfig, prefix: str) -> Cleanup:
    """Remove every player whose id starts with ``prefix`` from the game's boards, profiles and
    badges; a board whose top N held one of them gets its version bumped, so the scorer
    publishes its top N again without them at its next tick."""
    if not prefix or any(c in prefix for c in "*?[]\\"):
        raise ValueError(f"a cleanup prefix must be plain text, got {prefix!r}")
    keys, done = config.keys, Cleanup()
    boards_prefix = keys.board("", "", "")[: -len("::")]  # lb:{game}:board:
    async for key in redis.scan_iter(match=_glob(boards_prefix) + "*", count=SCAN_COUNT, _type="zset"):
        members = [m async for m, _ in redis.zscan_iter(key, match=_glob(prefix) + "*", count=SCAN_COUNT)]
        if not members:
            continue
        async with redis.pipeline(transaction=True) as pipe:
            # the top N read in the same transaction as the removal: no write can slip between
            pipe.zrange(key, 0, config.top_n - 1, desc=True)
            for i in range(0, len(members), SCAN_COUNT):
                pipe.zrem(key, *members[i : i + SCAN_COUNT])
            top, *removed = await pipe.execute()
        done.boards += 1
        done.removed += sum(removed)
        if any(str(m).startswith(prefix) for m in top):
            window, period, scope = key[len(boards_prefix) :].split(":", 2)
            await redis.hincrby(keys.versions, f"{window}:{period}:{scope}", 1)
            done.republished += 1
    profiles = [p async for p, _ in redis.hscan_iter(keys.profiles, match=_glob(prefix) + "*", count=SCAN_COUNT)]
    for i in range(0, len(profiles), SCAN_COUNT):
        done.profiles += await redis.hdel(keys.profiles, *profiles[i : i + SCAN_COUNT])
    badges = [k async for k in redis.scan_iter(match=_glob(keys.badges(prefix)) + "*", count=SCAN_COUNT)]
    for i in range(0, len(badges), SCAN_COUNT):
        await redis.delete(*badges[i : i + SCAN_COUNT])
    return done


async def clean_up(redis: RedisClient, config: GameConfig, prefix: str, *, wait: float) -> Cleanup:
    """Wait (at most ``wait`` s) for the run's submissions to be applied, then remove its players."""
    still_queued = await wait_applied(redis, config, prefix, wait)
    done = await remove_players(redis, config, prefix)
    done.still_queued = still_queued
    return done


def _glob(text: str) -> str:
    """``text`` as a literal inside a Redis glob pattern (the game's hash tag has braces only,
    but a glob's special characters must never widen what is matched)."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def _prefix(text: str) -> str:
    if not PREFIX.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"expected a run's prefix as it printed it (lt-<10 hex digits>-), got {text!r}"
        )
    return text


def main(argv: list[str] | None = None) -> int:
    p = argument_parser("python -m loadtest.cleanup", __doc__ or "")
    p.add_argument("--redis-url", required=True, type=redis_url_arg, help="the fleet's Redis")
    p.add_argument("--game", required=True, help="the game the run wrote into")
    p.add_argument("--prefix", required=True, type=_prefix, help="the run's player-id prefix (lt-<10 hex digits>-)")
    p.add_argument("--wait", type=float, default=10.0, help="longest wait for the scorer to apply what is queued (s)")
    args = p.parse_args(argv)
    try:
        config = GameConfig(game=args.game)
    except ValueError as exc:
        p.error(str(exc))

    async def go() -> Cleanup:
        redis = connect(args.redis_url)
        try:
            return await clean_up(redis, config, args.prefix, wait=args.wait)
        finally:
            await redis.aclose()

    try:
        done = asyncio.run(go())
    except (RedisConnectionError, RedisTimeoutError) as exc:
        print(f"error: {unreachable(args.redis_url, exc, env=False)}", file=sys.stderr)
        return 1
    print(f"synthetic players removed: {done.line()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
