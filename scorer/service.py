"""One scorer replica: the consumer, the publisher, the badge worker (and, with a durable log, the
journal worker) of each game it serves (``LB_GAMES``: each game's stream is consumed and each
game's publish lease competed for on its own), and the metrics, with one lifecycle::

    async with Scorer(settings) as scorer:    # connected, library loaded, workers running
        await scorer.wait()                    # until stopped (or drained, with burst=True)

``close()`` is idempotent, and a start that fails part-way is closed before its error propagates
(``leaderboard.lifecycle``); signals are handled by ``__main__``, not here.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Callable

from leaderboard import Leaderboard, RedisClient, connect, now_ms
from leaderboard.backoff import redis_backoff
from leaderboard.lifecycle import Service
from leaderboard.metrics_server import MetricsServer
from leaderboard.settings import redacted

from .auditlog import AuditWorker
from .badges import BadgeWorker
from .consumer import Consumer
from .durable import open_store
from .durable.recorder import Recorder
from .journal import JournalWorker
from .metrics import Monitor, registry_for
from .publisher import Publisher
from .settings import ScorerSettings
from .stats import Stats
from .stream import REDIS_DOWN, sleep_unless

log = logging.getLogger("scorer")


class Scorer(Service):
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
        per_game = [dataclasses.replace(settings, game=config) for config in settings.game.served]
        # Each stream-reading loop holds a connection for its blocking read (LB_SCORER_BLOCK_MS):
        # the pool gets one per loop on top of LB_REDIS_POOL_SIZE, so the reads never starve the
        # rest (the publisher's reads, the acknowledgements) however many games a replica serves.
        # (with a durable log: the journal's and the audit log's loops)
        readers = len(per_game) * (settings.concurrency + int(settings.badges) + 2 * int(bool(settings.durable_url)))
        pool = dataclasses.replace(settings.redis_pool, size=settings.redis_pool.size + readers)
        self.redis: RedisClient = connect(settings.redis_url, pool=pool, health_check_interval=30)
        # The durable score log (LB_DURABLE_URL): one store, a recorder per game
        store = open_store(settings.durable_url) if settings.durable_url else None
        days, every = settings.durable_retention_days, settings.durable_compact_s
        self.recorders: list[Recorder] = []
        if store is not None:
            self.recorders = [
                Recorder(store, s.game, retention_days=days, compact_every_s=every, stats=self.stats) for s in per_game
            ]
        recorders: list[Recorder | None] = [*self.recorders] or [None] * len(per_game)
        self.consumers = [
            Consumer(self.redis, s, self.stats, now=now, recorder=rec)
            for s, rec in zip(per_game, recorders, strict=True)
        ]
        # the journal of operator actions, profiles, tournaments and closes, into the same log
        self.journals = [
            JournalWorker(self.redis, s, rec, self.stats)
            for s, rec in zip(per_game, recorders, strict=True)
            if rec is not None
        ]
        # the moderators' audit log, kept in the same log (auditlog.py)
        self.audits = [
            AuditWorker(self.redis, s, rec) for s, rec in zip(per_game, recorders, strict=True) if rec is not None
        ]
        self.publishers = [Publisher(self.redis, s, self.stats, now=now) for s in per_game] if settings.publish else []
        self.badges = [BadgeWorker(self.redis, s, self.stats) for s in per_game] if settings.badges else []
        self.monitor = Monitor(self.redis, settings.game.served, self.stats, settings.stats_interval_s)
        self.metrics = (
            MetricsServer(registry_for(self.stats), settings.metrics_host, settings.metrics_port, ready=self.ready)
            if settings.metrics_port
            else None
        )
        self._stop = asyncio.Event()  # stop reading new work
        self._consuming: list[asyncio.Task[None]] = []
        self._others: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        if self.metrics is not None:
            port = await self.metrics.start()
            log.info("metrics on http://%s:%d/metrics", self.settings.metrics_host, port)
        if not await self._load_library():
            return  # stopped while waiting for Redis: nothing was started, wait() returns at once
        for recorder in self.recorders:
            await recorder.open()
        self._consuming = [asyncio.create_task(c.run(self._stop, burst=self.burst)) for c in self.consumers]
        self._consuming += [asyncio.create_task(j.run(self._stop, burst=self.burst)) for j in self.journals]
        self._consuming += [asyncio.create_task(a.run(self._stop, burst=self.burst)) for a in self.audits]
        workers = [self.monitor.run(self._stop), *(p.run(self._stop) for p in self.publishers)]
        workers += [b.run(self._stop) for b in self.badges]
        if self.settings.durable_compact_s:
            workers += [recorder.run(self._stop) for recorder in self.recorders]
        self._others = [asyncio.create_task(w) for w in workers]
        log.info(
            "scorer %s started: game %s, windows %s, batch %d%s",
            self.settings.name,
            ",".join(c.game for c in self.settings.game.served),
            ",".join(self.settings.game.windows),
            self.settings.batch,
            " (burst)" if self.burst else "",
        )

    def ready(self) -> bool:
        """The readiness probe's answer (``GET /readyz`` beside ``/metrics``): the library is loaded,
        the workers run and no stop was asked for."""
        return bool(self._consuming) and not self._stop.is_set()

    async def _load_library(self) -> bool:
        """Load the function library, waiting for Redis if it is not up yet (never crash-loop);
        False if stopped first."""
        backoff = redis_backoff()
        while True:
            try:
                # Once per process: FUNCTION LOAD goes to every master of a cluster, and replicas
                # (promoted ones included) get the library by replication.
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
        """Until the consumers return: stopped, or (burst) drained; any worker's crash is raised."""
        if not self._consuming:
            assert self._stop.is_set(), "start() first"
            return
        pending = {*self._consuming, *self._others}
        while any(task in pending for task in self._consuming):
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                task.result()  # a worker that died of a bug takes the replica down, loudly

    def stop(self) -> None:
        """Stop reading new work; in-flight batches are still finished and acknowledged."""
        self._stop.set()

    async def _close(self) -> None:
        """Ordered shutdown."""
        self._stop.set()
        tasks = [*self._consuming, *self._others]
        # In-flight batches first: they were read, so they are finished and acknowledged.
        _, late = await asyncio.wait(tasks, timeout=self.settings.graceful_timeout_s) if tasks else ((), ())
        for task in late:
            task.cancel()  # stuck on a Redis that is gone: their entries stay pending, claimed later
        await asyncio.gather(*tasks, return_exceptions=True)
        # Then hand the lease over at once instead of letting another replica wait for its expiry.
        for publisher in self.publishers:
            if publisher.leader:
                with contextlib.suppress(*REDIS_DOWN):
                    await publisher.release()
        for recorder in self.recorders:
            await recorder.close()  # after the consumers: their last batches were recorded
        if self.metrics is not None:
            await self.metrics.close()
        await self.redis.aclose()
        log.info("scorer %s stopped", self.settings.name)
