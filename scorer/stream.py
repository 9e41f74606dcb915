"""Consumer-group plumbing shared by the submissions consumer and the badge worker.

A ``GroupWorker`` reads batches from one stream through one consumer group and hands each batch
to ``handle()``, which must apply it and acknowledge it. What it guarantees:

* at-least-once: an entry is acknowledged only by ``handle()``, after its effect is written; a
  replica that dies leaves its entries pending, and any live replica claims them (XAUTOCLAIM)
  once they have been idle for ``claim_idle_ms``. Handlers are idempotent, which turns
  at-least-once into exactly-once effects;
* Redis unavailable: the worker waits with capped, jittered exponential backoff and tries again;
  a batch already read is retried until it is handled (never dropped, never acked unapplied);
* stop: after ``stop`` is set no new batch is read; the batch in flight is finished first.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ReadOnlyError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from leaderboard import Leaderboard, RedisClient
from leaderboard.backoff import redis_backoff
from leaderboard.errors import LibraryMismatch
from leaderboard.loading import with_library
from leaderboard.transport import Command, execute_packed

from .settings import ScorerSettings
from .stats import Stats

# Errors that mean "Redis is not there right now" (down, restarting, loading, failing over):
# retried with backoff. Everything else is a bug or bad data and is not hidden by a retry.
REDIS_DOWN: tuple[type[BaseException], ...] = (
    RedisConnectionError,  # includes BusyLoadingError
    RedisTimeoutError,
    ReadOnlyError,
    OSError,
    # The library in Redis is a newer release's (an upgrade under way): the batch waits, queued,
    # until this replica is replaced, rather than be refused by a library that misreads it.
    LibraryMismatch,
)

Batch = list[tuple[str, dict[str, str]]]
T = TypeVar("T")


def _fields(pairs: list[str]) -> dict[str, str]:
    """An entry's field, value list as a dict; nearly every submission's is one pair (its slip)."""
    return {pairs[0]: pairs[1]} if len(pairs) == 2 else dict(zip(pairs[::2], pairs[1::2], strict=True))


async def sleep_unless(event: asyncio.Event, seconds: float) -> bool:
    """Sleep up to ``seconds``; return True early if ``event`` is set."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), seconds)
    return event.is_set()


class GroupWorker:
    """Base class: subclasses implement ``handle(batch)`` and ``name_for_logs``."""

    log = logging.getLogger("scorer")

    def __init__(
        self,
        redis: RedisClient,
        settings: ScorerSettings,
        *,
        stream: str,
        group: str,
        concurrency: int = 1,
        start_id: str = "0",
        stats: Stats | None = None,
    ) -> None:
        self.redis = redis
        self.stats = stats or Stats()
        self.lb = Leaderboard(redis, settings.game)
        self.stream = stream
        self.group = group
        self.consumer = settings.name
        self.batch = settings.batch
        self.block_ms = settings.block_ms
        self.claim_idle_ms = settings.claim_idle_ms
        self.concurrency = concurrency
        self.start_id = start_id  # where a newly created group starts reading
        # consumer names idle this long with nothing pending are removed (0: never)
        self.forget_after_ms = settings.forget_after_s * 1000
        self._claim_cursor = "0-0"
        self._next_claim = 0.0  # loop time of the next XAUTOCLAIM scan
        self._next_forget = 0.0
        self._down_since: float | None = None
        self._down_for = ""  # what the wait under way is for, said again when it ends

    async def handle(self, batch: Batch) -> None:
        raise NotImplementedError

    # ------------------------------------------------------------------ reading

    async def ensure_group(self) -> None:
        try:
            await self.redis.xgroup_create(self.stream, self.group, id=self.start_id, mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    async def read(self) -> Batch:
        """The next batch: entries dead replicas left pending (when a scan is due), else new ones."""
        loop = asyncio.get_running_loop()
        if self.forget_after_ms and loop.time() >= self._next_forget:
            self._next_forget = loop.time() + max(1.0, self.forget_after_ms / 4000)
            await self._forget()
        if loop.time() >= self._next_claim:
            # Scan at most twice per idle timeout: an entry is then claimed at most 1.5 timeouts
            # after its reader died, and a busy stream is not scanned on every read.
            self._next_claim = loop.time() + self.claim_idle_ms / 2000
            claimed = await self._claim()
            if claimed:
                self._next_claim = 0.0  # more may be waiting: keep claiming before reading new
                return claimed
        # Sent packed and its reply taken as hiredis parsed it: redis-py's own parse of XREADGROUP
        # built each entry's dict through Python helpers, about 1 µs of the scorer's per entry.
        read = ("XREADGROUP", "GROUP", self.group, self.consumer, "COUNT", self.batch, "BLOCK", self.block_ms)
        [reply] = await self._call(execute_packed, self.redis, (*read, "STREAMS", self.stream, ">"))
        if not reply:
            return []
        # RESP2 replies are [[stream, entries]]; RESP3 ones {stream: entries}
        entries: Any = reply[0][1] if isinstance(reply, list) else next(iter(reply.values()))
        return [(sid, _fields(pairs)) for sid, pairs in entries if pairs is not None]

    async def _claim(self) -> Batch:
        reply: Any = await self._call(
            self.redis.xautoclaim,
            self.stream,
            self.group,
            self.consumer,
            self.claim_idle_ms,
            start_id=self._claim_cursor,
            count=self.batch,
        )
        cursor, entries = reply[0], reply[1]
        self._claim_cursor = cursor
        deleted = reply[2] if len(reply) > 2 else []
        if deleted:  # pending ids whose entries no longer exist: nothing left to apply
            await self.redis.xack(self.stream, self.group, *deleted)
        return [(sid, fields) for sid, fields in entries if fields is not None]

    async def _forget(self) -> None:
        """Remove the names of replicas that are gone (lb_forget: idle, nothing pending)."""
        removed = await self.lb.forget(self.stream, self.group, idle_ms=self.forget_after_ms, keep=self.consumer)
        if removed:
            self.log.info(
                "%s: removed %d consumer names of gone replicas: %s",
                self.group,
                len(removed),
                ", ".join(map(str, removed)),
            )

    async def _call(self, fn: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
        try:
            return await fn(*args, **kwargs)
        except ResponseError as exc:
            if "NOGROUP" not in str(exc) and "UNBLOCKED" not in str(exc):
                raise
            # The stream or group vanished (FLUSHALL, a Redis restart without persistence), or
            # was deleted under a blocked read (UNBLOCKED; on a cluster, also when its slot
            # moves to another node: the group is found there, through MOVED)
            await self.ensure_group()
            return await fn(*args, **kwargs)

    async def acknowledge(self, *commands: Command) -> None:
        """Send the acknowledgement (``lb_ack``, alone or inside the caller's MULTI). A node that
        restarted without persistence has lost the function library: load it there and send
        again (a MULTI's other commands then run twice; its dead letters were lost with the rest)."""

        async def send() -> None:
            replies = await execute_packed(self.redis, *commands)
            for reply in replies[-1] if commands[0][0] == "MULTI" else ():
                if isinstance(reply, Exception):  # errors inside EXEC come back as values
                    raise reply

        await with_library(self.redis, self.stream, send)

    async def drained(self) -> bool:
        """Nothing pending in the whole group. Called right after a read found nothing new, so
        together they mean drained: no entry undelivered, none delivered and unacknowledged."""
        info = await self.redis.xpending(self.stream, self.group)
        return not int(info["pending"])

    # ------------------------------------------------------------------ running

    async def run(self, stop: asyncio.Event | None = None, *, burst: bool = False) -> None:
        """Work until ``stop`` is set (or, in burst mode, until the stream is drained)."""
        stop = stop or asyncio.Event()
        await self._until_done(self.ensure_group, stop)
        await asyncio.gather(*(self._loop(stop, burst) for _ in range(self.concurrency)))

    async def _loop(self, stop: asyncio.Event, burst: bool) -> None:
        while not stop.is_set():
            batch = await self._until_done(self.read, stop)
            if batch:
                # Read means delivered to us: finish it even if stop was set meanwhile.
                await self._until_done(functools.partial(self.handle, batch), None)
            elif batch is not None and burst and await self._until_done(self.drained, stop):
                return

    async def _until_done(self, op: Callable[[], Awaitable[T]], stop: asyncio.Event | None) -> T | None:
        """Run ``op`` until it succeeds, backing off while Redis is down; None if stopped first."""
        backoff = redis_backoff()
        while True:
            try:
                result = await op()
            except REDIS_DOWN as exc:
                self.stats.redis_errors += 1
                loop_time = asyncio.get_running_loop().time()
                if self._down_since is None:
                    self._down_since = loop_time
                    mismatch = isinstance(exc, LibraryMismatch)
                    self._down_for = "the function library matches again" if mismatch else "redis is back"
                    why = f"waiting: {exc}" if mismatch else f"redis unavailable ({exc})"
                    self.log.warning("%s: %s; retrying with backoff", self.group, why)
                if await sleep_unless(stop or asyncio.Event(), backoff.next_delay()):
                    return None
                continue
            if self._down_since is not None:
                down = asyncio.get_running_loop().time() - self._down_since
                self._down_since = None
                self.log.info("%s: %s after %.1f s", self.group, self._down_for, down)
            return result
