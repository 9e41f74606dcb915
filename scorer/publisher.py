"""The snapshot publisher: once per tick, the replica holding the lease publishes the top N of
every board whose top-N version changed, and of every board whose window rolled over.

Each snapshot is built once (``leaderboard.snapshot.build``), published on the board's period-less channel and
stored as the board's latest, together with the record of what was published, in one call of
``lb_publish`` that first checks the lease: a replica that stalled past its lease publishes
nothing, and one that takes the lease over continues from the record instead of republishing
every board.

Only the current period of each window is published: a late submission for yesterday bumps
yesterday's version, but the channel carries today's board.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import cast

import redis.asyncio as aioredis

from leaderboard import Leaderboard, Publication, now_ms, snapshot
from leaderboard.backoff import redis_backoff

from .settings import ScorerSettings
from .stats import Stats
from .stream import REDIS_DOWN, sleep_unless

log = logging.getLogger("scorer.publisher")


@dataclass(frozen=True, slots=True)
class Due:
    """A board to publish: its current period and top-N version (0: no write yet)."""

    window: str
    scope: str
    period: str
    version: int


def due_boards(
    periods: Mapping[str, str],
    versions: Mapping[str, str],
    published: Mapping[tuple[str, str], tuple[str, int]],
) -> list[Due]:
    """Which boards to publish this tick (pure).

    ``periods``: window -> current period label. ``versions``: the versions hash
    (``<window>:<period>:<scope>`` -> version). ``published``: (window, scope) -> (period,
    version) last published. A board is due when its current (period, version) differs from
    what was last published: its top N changed, or its window rolled over (then, with no write
    in the new period yet, the new board is empty and its version is 0).
    """
    want: dict[tuple[str, str], tuple[str, int]] = {}
    for field, version in versions.items():
        window, period, scope = field.split(":", 2)  # scopes may hold a colon (region:eu)
        if periods.get(window) == period:
            want[window, scope] = (period, int(version))
    for window, scope in published:
        current = periods.get(window)
        if current is not None and (window, scope) not in want:
            want[window, scope] = (current, 0)
    return [
        Due(window, scope, period, version)
        for (window, scope), (period, version) in sorted(want.items())
        if published.get((window, scope)) != (period, version)
    ]


class Publisher:
    def __init__(
        self,
        redis: aioredis.Redis,
        settings: ScorerSettings,
        stats: Stats | None = None,
        *,
        now: Callable[[], int] = now_ms,
        owner: str | None = None,
    ) -> None:
        self.redis = redis
        self.settings = settings
        self.config = settings.game
        self.keys = settings.game.keys
        self.lb = Leaderboard(redis, settings.game)
        self.stats = stats or Stats()
        self.now = now
        self.owner = owner or settings.name
        # What was last published; loaded from Redis when the lease is won, None while not held.
        self.published: dict[tuple[str, str], tuple[str, int]] | None = None
        self._periods: dict[str, str] = {}
        self._refreshed = 0.0  # monotonic time of the last refresh of the latest snapshots' TTLs

    @property
    def leader(self) -> bool:
        return self.published is not None

    async def tick(self) -> list[Due]:
        """Take or renew the lease, then publish what is due; returns what was published."""
        if not await self.lb.lease(self.owner, self.settings.lease_ttl_ms):
            if self.published is not None:
                log.info("publish lease lost to another replica")
            self.published = None
            self.stats.publisher = False
            return []
        if self.published is None:
            self.published = await self._load_published()
            self.stats.publisher = True
            log.info("publish lease taken (%s)", self.owner)

        now = self.now()
        periods = {w.name: w.period(now).label for w in self.config.window_specs}
        versions = cast(dict[str, str], await self.redis.hgetall(self.keys.versions))
        due = due_boards(periods, versions, self.published)
        if due:
            await self._publish(due, now)
        if self._periods and periods != self._periods:
            await self._prune(versions, periods)
        self._periods = periods
        if time.monotonic() - self._refreshed > self.settings.snapshot_ttl_s / 2:
            await self._refresh_latest()
        return due

    async def release(self) -> None:
        """Give the lease up at once (on shutdown), so another replica need not wait it out."""
        await self.lb.lease(self.owner, self.settings.lease_ttl_ms, release=True)
        self.published = None
        self.stats.publisher = False

    async def run(self, stop: asyncio.Event) -> None:
        interval = self.settings.tick_ms / 1000
        loop = asyncio.get_running_loop()
        next_tick = loop.time()
        backoff = redis_backoff()
        while not stop.is_set():
            try:
                await self.tick()
                backoff.reset()
            except REDIS_DOWN as exc:
                # Whoever holds the lease when Redis is back publishes; the record of what was
                # published lives in Redis, so nothing is lost by forgetting it here.
                if backoff.attempt == 0:
                    log.warning("publisher: redis unavailable (%s); retrying", exc)
                self.published = None
                self.stats.publisher = False
                if await sleep_unless(stop, backoff.next_delay()):
                    break
                next_tick = loop.time()
                continue
            # A fixed cadence, not "sleep a tick after the work": publish lag stays within one
            # tick however long a tick's work takes.
            next_tick += interval
            if next_tick < loop.time():
                next_tick = loop.time()
            if await sleep_unless(stop, next_tick - loop.time()):
                break

    async def _publish(self, due: list[Due], now: int) -> None:
        assert self.published is not None
        # Reads first, concurrently: one round trip's worth of latency for all changed boards.
        tops = await asyncio.gather(*(self.lb.top(d.window, d.scope, n=self.config.top_n, at=now) for d in due))
        publications = [
            Publication(
                d.window, d.scope, d.period, d.version, snapshot.build(d.scope, top, version=d.version, ts_ms=now)
            )
            for d, top in zip(due, tops, strict=True)
        ]
        # Fenced by the lease inside Redis: if this replica stalled past its lease and another took
        # over, nothing is published and this one steps down.
        if not await self.lb.publish(self.owner, self.settings.snapshot_ttl_s, publications):
            log.info("publish lease lost before publishing; nothing published")
            self.published = None
            self.stats.publisher = False
            return
        for d in due:
            self.published[d.window, d.scope] = (d.period, d.version)
        self.stats.published += len(due)

    async def _load_published(self) -> dict[tuple[str, str], tuple[str, int]]:
        raw = cast(dict[str, str], await self.redis.hgetall(self.keys.published))
        out = {}
        for field, value in raw.items():
            window, _, scope = field.partition(":")
            period, _, version = value.rpartition(":")
            if window in self.config.windows and version.isdigit():
                out[window, scope] = (period, int(version))
        return out

    async def _prune(self, versions: Mapping[str, str], periods: Mapping[str, str]) -> None:
        """At a rollover, forget the versions of past periods (only current ones are published);
        a late write to a past period recreates its field, which the next rollover prunes."""
        stale = [f for f in versions if periods.get(f.split(":", 2)[0]) != f.split(":", 2)[1]]
        if stale:
            await self.redis.hdel(self.keys.versions, *stale)

    async def _refresh_latest(self) -> None:
        """Keep the stored latest snapshot of boards that simply did not change alive."""
        assert self.published is not None
        if self.published:
            async with self.redis.pipeline(transaction=False) as pipe:
                for window, scope in self.published:
                    pipe.expire(self.keys.latest(window, scope), self.settings.snapshot_ttl_s)
                await pipe.execute()
        self._refreshed = time.monotonic()
