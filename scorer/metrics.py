"""Observability: the lag gauges sampled from Redis, the periodic stats line, and the same
figures as Prometheus metrics on a small HTTP endpoint (``GET /metrics``).

The endpoint is served by asyncio in the scorer's own loop rather than prometheus_client's
thread server, so it starts and stops with the scorer like everything else it owns.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterator

import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from leaderboard import GameConfig, now_ms

from .consumer import GROUP
from .stats import Stats, stats_line
from .stream import REDIS_DOWN, sleep_unless

log = logging.getLogger("scorer.stats")

_HELP = {
    "applied": "Submissions applied by the function library",
    "duplicates": "Submissions whose id had already been applied",
    "dead_letters": "Submissions refused and moved to the dead-letter stream",
    "batches": "Batches applied (one FCALL each)",
    "claimed": "Entries claimed from replicas that stopped acknowledging",
    "published": "Snapshots published",
    "badges_awarded": "Badges awarded",
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
        yield GaugeMetricFamily("lb_scorer_publisher", "1 if this replica holds the publish lease", value=s.publisher)


def registry_for(stats: Stats) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=True)
    registry.register(StatsCollector(stats))
    return registry


async def sample_lag(redis: aioredis.Redis, config: GameConfig, stats: Stats, now: Callable[[], int] = now_ms) -> None:
    """Backlog, pending and the oldest waiting entry's age: the stream holds only entries not yet
    applied (the consumer deletes what it acknowledges), so its first entry is the oldest."""
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
    stats.backlog = int(length)
    stats.pending = sum(int(g["pending"]) for g in groups if g["name"] == GROUP)
    if first:
        stamp = int(first[0][0].split("-")[0])
        stats.oldest_age_s = max(0.0, (now() - stamp) / 1000)
    else:
        stats.oldest_age_s = 0.0


class Monitor:
    """Samples the lag gauges every second and logs the stats line every ``interval_s``."""

    def __init__(self, redis: aioredis.Redis, config: GameConfig, stats: Stats, interval_s: float) -> None:
        self.redis = redis
        self.config = config
        self.stats = stats
        self.interval_s = interval_s

    async def run(self, stop: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        before, since = self.stats.copy(), loop.time()
        while not await sleep_unless(stop, 1.0):
            with contextlib.suppress(*REDIS_DOWN):  # the workers log outages; gauges keep old values
                await sample_lag(self.redis, self.config, self.stats)
            elapsed = loop.time() - since
            if self.interval_s and elapsed >= self.interval_s:
                log.info("%s", stats_line(self.stats, before, elapsed))
                before, since = self.stats.copy(), loop.time()


class MetricsServer:
    """``GET /metrics`` over plain HTTP/1.1 (one request per connection)."""

    def __init__(self, stats: Stats, host: str, port: int) -> None:
        self.registry = registry_for(stats)
        self.host = host
        self.port = port
        self._server: asyncio.Server | None = None

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._serve, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]  # the real one when 0 was asked for
        return self.port

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5.0)
            parts = head.split(b" ", 2)
            if len(parts) >= 2 and parts[0] == b"GET" and parts[1].split(b"?")[0] == b"/metrics":
                body, status = generate_latest(self.registry), b"200 OK"
            else:
                body, status = b"not found\n", b"404 Not Found"
            writer.write(
                b"HTTP/1.1 " + status + b"\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
                b"Content-Length: " + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body
            )
            await writer.drain()
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            pass
        finally:
            writer.close()
