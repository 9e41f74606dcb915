"""Observability: the lag gauges sampled from Redis, the periodic stats line, and the same
figures as a Prometheus registry (served by leaderboard.metrics_server, ``GET /metrics``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterator, Sequence

import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric, SummaryMetricFamily
from prometheus_client.registry import Collector

from leaderboard import GameConfig, RedisClient, now_ms

from .consumer import GROUP
from .stats import Stats, stats_line
from .stream import REDIS_DOWN, sleep_unless

log = logging.getLogger("scorer.stats")

_HELP = {
    "applied": "Submissions applied by the function library",
    "duplicates": "Submissions whose id had already been applied",
    "dead_letters": "Submissions refused and moved to the dead-letter stream",
    "banned": "Submissions of banned players refused (also counted as dead letters)",
    "batches": "Batches applied (one FCALL each)",
    "claimed": "Entries claimed from replicas that stopped acknowledging",
    "published": "Snapshots published",
    "badges_awarded": "Badges awarded",
    "closed": "Close events added for ended window periods and tournaments",
    "redis_errors": "Redis calls failed for Redis down (each retried with backoff)",
    "durable_unavailable": "Durable-log writes refused by an unavailable store (each retried)",
}


class StatsCollector(Collector):
    """Exposes a Stats object as it is at scrape time (no second set of counters to keep in step)."""

    def __init__(self, stats: Stats) -> None:
        self.stats = stats

    def collect(self) -> Iterator[Metric]:
        s = self.stats
        for name, text in _HELP.items():
            yield CounterMetricFamily(f"lb_scorer_{name}", text, value=getattr(s, name))
        yield GaugeMetricFamily("lb_scorer_backlog", "Submissions waiting (not yet applied)", value=s.backlog)
        yield GaugeMetricFamily("lb_scorer_pending", "Submissions delivered, not yet acknowledged", value=s.pending)
        yield GaugeMetricFamily(
            "lb_scorer_oldest_age_seconds", "Age of the oldest submission waiting", value=s.oldest_age_s
        )
        yield GaugeMetricFamily(
            "lb_scorer_publisher", "Publish leases this replica holds (one per game it publishes)", value=s.publisher
        )
        yield SummaryMetricFamily(
            "lb_scorer_durable_commit_seconds",
            "Durable-log commits of applied batches: their count and time together",
            count_value=s.durable_commits,
            sum_value=s.durable_commit_s,
        )


def registry_for(stats: Stats) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=True)
    registry.register(StatsCollector(stats))
    return registry


async def sample_lag(redis: RedisClient, config: GameConfig, stats: Stats, now: Callable[[], int] = now_ms) -> None:
    """Backlog, pending and the oldest waiting entry's age. Each acknowledgement trims the stream
    below the oldest entry still to apply (lb_ack), so its first entry is the oldest waiting; the
    backlog is the group's count (not delivered + pending), as the stream may still hold
    acknowledged entries newer than a pending one (its length, if the group cannot count)."""
    stream = config.keys.submissions
    async with redis.pipeline(transaction=False) as pipe:
        pipe.xlen(stream)
        pipe.xrange(stream, count=1)
        pipe.xinfo_groups(stream)
        try:
            length, first, groups = await pipe.execute()
        except aioredis.ResponseError:  # no stream yet
            stats.backlog = stats.pending = 0
            stats.oldest_age_s = 0.0
            return
    ours = [g for g in groups if g["name"] == GROUP]
    stats.pending = sum(int(g["pending"]) for g in ours)
    lag = ours[0].get("lag") if ours else None
    stats.backlog = int(length) if lag is None else int(lag) + stats.pending
    if first:
        stamp = int(first[0][0].split("-")[0])
        stats.oldest_age_s = max(0.0, (now() - stamp) / 1000)
    else:
        stats.oldest_age_s = 0.0


class Monitor:
    """Samples the lag gauges every second and logs the stats line every ``interval_s``; with
    several games, the gauges add up their queues (the oldest age is the oldest of all)."""

    def __init__(self, redis: RedisClient, configs: Sequence[GameConfig], stats: Stats, interval_s: float) -> None:
        self.redis = redis
        self.configs = configs
        self.stats = stats
        self.interval_s = interval_s

    async def run(self, stop: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        before, since = self.stats.copy(), loop.time()
        while not await sleep_unless(stop, 1.0):
            with contextlib.suppress(*REDIS_DOWN):  # the workers log outages; gauges keep old values
                await self.sample()
            elapsed = loop.time() - since
            if self.interval_s and elapsed >= self.interval_s:
                log.info("%s", stats_line(self.stats, before, elapsed))
                before, since = self.stats.copy(), loop.time()

    async def sample(self) -> None:
        parts = [Stats() for _ in self.configs]
        for config, part in zip(self.configs, parts, strict=True):
            await sample_lag(self.redis, config, part)
        self.stats.backlog = sum(p.backlog for p in parts)
        self.stats.pending = sum(p.pending for p in parts)
        self.stats.oldest_age_s = max(p.oldest_age_s for p in parts)
