"""Values held in the process for a short time, read once however many requests ask: the HTTP
API's copy of each board's published snapshot (seed 001, "Caching top-N").

A value is read at most once per ``ttl`` seconds per key, and one read is in flight per key at a
time (the requests that arrive meanwhile await it: no stampede when it expires). When a read
fails, the last value is served for up to ``stale`` seconds more, with its age; after that the
error is the caller's. At most ``size`` keys are held (the oldest read goes first), so requests
for ever new boards cannot grow the process::

    held = Held(redis.get, ttl=1.0, stale=10.0)
    value, age = await held.get("arena:latest:weekly:global")
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

from redis.exceptions import RedisError

V = TypeVar("V")


class Held(Generic[V]):
    def __init__(
        self,
        read: Callable[[str], Awaitable[V]],
        *,
        ttl: float,
        stale: float,
        size: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._read = read
        self.ttl, self.stale, self.size = ttl, stale, size
        self._clock = clock
        self._held: dict[str, tuple[float, V]] = {}  # key -> (read at, value), oldest first
        self._reading: dict[str, asyncio.Future[V]] = {}
        # answers by where they came from (the API's metrics): held, read (awaited a read), stale
        self.served_held = self.served_read = self.served_stale = 0

    async def get(self, key: str) -> tuple[V, float]:
        """The key's value and its age in seconds (0: just read)."""
        now = self._clock()
        held = self._held.get(key)
        if held is not None and now - held[0] < self.ttl:
            self.served_held += 1
            return held[1], now - held[0]
        self.served_read += 1
        reading = self._reading.get(key)
        if reading is None:
            reading = self._reading[key] = asyncio.ensure_future(self._refresh(key))
            reading.add_done_callback(lambda done: self._done(key, done))
        try:
            # shielded: a request that goes away does not cancel the read the others await
            return await asyncio.shield(reading), 0.0
        except (RedisError, OSError):
            if held is not None and now - held[0] < self.ttl + self.stale:
                self.served_stale += 1
                return held[1], now - held[0]
            raise

    def put(self, key: str, value: V) -> None:
        """Hold ``value`` as just read (what pub/sub held when it went down: watch.py)."""
        self._held.pop(key, None)
        self._held[key] = (self._clock(), value)

    def _done(self, key: str, reading: asyncio.Future[V]) -> None:
        self._reading.pop(key, None)
        if not reading.cancelled():
            reading.exception()  # its error is answered to the requests that awaited it, not logged

    async def _refresh(self, key: str) -> V:
        value = await self._read(key)
        self._held.pop(key, None)  # re-inserted last: the dict stays oldest first
        self._held[key] = (self._clock(), value)
        while len(self._held) > self.size:
            del self._held[next(iter(self._held))]
        return value
