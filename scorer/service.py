"""One scorer replica: the consumer, the publisher, the badge worker and the metrics, with one
lifecycle::

    async with Scorer(settings) as scorer:    # connected, library loaded, workers running
        await scorer.wait()                    # until stopped (or drained, with burst=True)

``close()`` is idempotent; signals are handled by ``__main__``, not here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from types import TracebackType

from leaderboard import Leaderboard, RedisClient, connect, now_ms
from leaderboard.backoff import redis_backoff
from leaderboard.metrics_server import MetricsServer
from leaderboard.settings import redacted

from .badges import BadgeWorker
from .consumer import Consumer
from .metrics import Monitor, registry_for
from .publisher import Publisher
from .settings import ScorerSettings
from .stats import Stats
from .stream import REDIS_DOWN, sleep_unless

log = logging.getLogger("scorer")


class Scorer:
    def __init__(
        self,
        settings: ScorerSettings,
        *,
        burst: bool = False,
        now: Callable[[], int] = now_ms,
    ) -> None:
        self.settings = settings
        self.burst = burst  # return once the queue is drained (scripts, tests, catch-up jobs)
        self.stats = Stats()
        self.redis: RedisClient = connect(settings.redis_url, health_check_interval=30)
        self.consumer = Consumer(self.redis, settings, self.stats, now=now)
        self.publisher = Publisher(self.redis, settings, self.stats, now=now) if settings.publish else None
        self.badges = BadgeWorker(self.redis, settings, self.stats) if settings.badges else None
        self.monitor = Monitor(self.redis, settings.game, self.stats, settings.stats_interval_s)
        self.metrics = (
            MetricsServer(registry_for(self.stats), settings.metrics_host, settings.metrics_port)
            if settings.metrics_port
            else None
        )
        self._stop = asyncio.Event()  # stop reading new work
        self._consuming: asyncio.Task[None] | None = None
        self._others: list[asyncio.Task[None]] = []
        self._closed = False

    async def start(self) -> None:
        if self.metrics is not None:
            port = await self.metrics.start()
            log.info("metrics on http://%s:%d/metrics", self.settings.metrics_host, port)
        if not await self._load_library():
            return  # stopped while waiting for Redis: nothing was started, wait() returns at once
        self._consuming = asyncio.create_task(self.consumer.run(self._stop, burst=self.burst))
        workers = [self.monitor.run(self._stop)]
        if self.publisher is not None:
            workers.append(self.publisher.run(self._stop))
        if self.badges is not None:
            workers.append(self.badges.run(self._stop))
        self._others = [asyncio.create_task(w) for w in workers]
        log.info(
            "scorer %s started: game %s, windows %s, batch %d%s",
            self.settings.name,
            self.settings.game.game,
            ",".join(self.settings.game.windows),
            self.settings.batch,
            " (burst)" if self.burst else "",
        )

    async def _load_library(self) -> bool:
        """Load the function library, waiting for Redis if it is not up yet (never crash-loop);
        False if stopped first."""
        backoff = redis_backoff()
        while True:
            try:
                await Leaderboard(self.redis, self.settings.game).load()
                return True
            except REDIS_DOWN as exc:
                if backoff.attempt == 0:
                    log.warning(
                        "redis at %s unavailable at start (%s); waiting for it", redacted(self.settings.redis_url), exc
                    )
                if await sleep_unless(self._stop, backoff.next_delay()):
                    return False

    async def wait(self) -> None:
        """Until the consumer returns: stopped, or (burst) drained; any worker's crash is raised."""
        if self._consuming is None:
            assert self._stop.is_set(), "start() first"
            return
        pending = {self._consuming, *self._others}
        while self._consuming in pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                task.result()  # a worker that died of a bug takes the replica down, loudly

    def stop(self) -> None:
        """Stop reading new work; in-flight batches are still finished and acknowledged."""
        self._stop.set()

    async def close(self) -> None:
        """Ordered, idempotent shutdown."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        tasks = [t for t in (self._consuming, *self._others) if t is not None]
        # In-flight batches first: they were read, so they are finished and acknowledged.
        _, late = await asyncio.wait(tasks, timeout=self.settings.graceful_timeout_s) if tasks else ((), ())
        for task in late:
            task.cancel()  # stuck on a Redis that is gone: their entries stay pending, claimed later
        await asyncio.gather(*tasks, return_exceptions=True)
        # Then hand the lease over at once instead of letting another replica wait for its expiry.
        if self.publisher is not None and self.publisher.leader:
            with contextlib.suppress(*REDIS_DOWN):
                await self.publisher.release()
        if self.metrics is not None:
            await self.metrics.close()
        await self.redis.aclose()
        log.info("scorer %s stopped", self.settings.name)

    async def __aenter__(self) -> Scorer:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()
