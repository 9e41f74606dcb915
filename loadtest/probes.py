"""What the fleet itself says about a measured window: its gateways' ``/metrics`` and Redis's
command statistics, read before and after, so the report can give per-window figures the client
side cannot see (socket writes, own-rank push lag, Redis time per rank read).

Only a private fleet's gateways are scraped (their metrics ports are known); against ``--url``
the gateway figures are left out.
"""

from __future__ import annotations

import asyncio
import math
import urllib.request
from typing import Any

from redis.asyncio.cluster import RedisCluster

from leaderboard.transport import RedisClient

from .target import Target

_SUMMED = ("lb_gw_writes_total", "lb_gw_deliveries_total", "lb_gw_rank_pushes_total")
_LAG = "lb_gw_rank_push_lag_seconds"
# where a snapshot's time goes inside the gateways: from its ts to the fan-out's start (the
# scorer's publish, Redis, the gateway's loop reaching it), then the write to every socket; and
# the garbage collections that stood the loops still meanwhile
_PUBSUB_LAG = "lb_gw_pubsub_lag_seconds"
_WRITE = "lb_gw_broadcast_seconds"
# ... and from its ts to the end of its write to every socket: when the gateways had delivered it
# to the kernel, whenever the client processes got round to reading it
_WRITTEN = "lb_gw_written_lag_seconds"
_GC = "lb_gw_gc_pause_seconds"
_HISTOGRAMS = (_LAG, _PUBSUB_LAG, _WRITE, _WRITTEN, _GC)


def parse(text: str) -> dict[str, float]:
    """Samples of a Prometheus text page, labels kept in the name (``name{le="0.5"}``)."""
    samples: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, value = line.rpartition(" ")
        try:
            samples[name] = float(value)
        except ValueError:
            continue
    return samples


def _scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        return parse(reply.read().decode())


async def gateways(target: Target) -> dict[str, float]:
    """The gateways' counters and the lag histogram's buckets, summed over processes."""
    if target.fleet is None:
        return {}
    pages = await asyncio.gather(
        *(asyncio.to_thread(_scrape, port) for port in target.fleet.addresses.gateway_metrics_ports.values()),
        return_exceptions=True,
    )
    total: dict[str, float] = {}
    for page in pages:
        if isinstance(page, BaseException):
            continue
        for name, value in page.items():
            if name in _SUMMED or name.startswith(_HISTOGRAMS):
                total[name] = total.get(name, 0.0) + value
    return total


def quantile_bucket(buckets: dict[float, float], q: float) -> tuple[float, float]:
    """The bounds (lower, upper] of the histogram bucket holding quantile ``q`` (cumulative
    counts): all a histogram knows of it. The lags' buckets are 50 ms wide (gateway/metrics.py)."""
    count = buckets.get(math.inf, 0.0)
    if count <= 0:
        return math.nan, math.nan
    lower = 0.0
    for bound in sorted(buckets):
        if buckets[bound] >= q * count:
            return lower, bound
        lower = bound
    return lower, math.inf


def quantile(buckets: dict[float, float], q: float) -> float:
    """The upper bound of the histogram bucket holding quantile ``q``."""
    return quantile_bucket(buckets, q)[1]


def _buckets(delta: dict[str, float], histogram: str) -> dict[float, float]:
    """A histogram's cumulative bucket counts (upper bound -> count), over every label set."""
    buckets: dict[float, float] = {}
    head = histogram + "_bucket{"
    for name, value in delta.items():
        if name.startswith(head):
            le = name.index('le="') + 4
            bound = name[le : name.index('"', le)]
            key = math.inf if bound == "+Inf" else float(bound)
            buckets[key] = buckets.get(key, 0.0) + value
    return buckets


def _total(delta: dict[str, float], name: str) -> float:
    """A sample's value summed over its label sets (``name`` or ``name{…}``)."""
    return sum(v for k, v in delta.items() if k == name or k.startswith(name + "{"))


def window_figures(before: dict[str, float], after: dict[str, float], redis: dict[str, Any]) -> dict[str, Any]:
    """Per-window gateway and Redis figures (deltas of what ``gateways`` and ``commandstats`` read);
    Redis's alone when no gateway was read (against ``--url``)."""
    if not after:
        return dict(redis)
    delta = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
    buckets = _buckets(delta, _LAG)
    pubsub, write, written = _buckets(delta, _PUBSUB_LAG), _buckets(delta, _WRITE), _buckets(delta, _WRITTEN)
    figures: dict[str, Any] = {
        "gateway_writes": delta.get("lb_gw_writes_total", math.nan),
        "gateway_deliveries": delta.get("lb_gw_deliveries_total", math.nan),
        "gateway_rank_pushes": delta.get("lb_gw_rank_pushes_total", math.nan),
        "rank_lag_count": buckets.get(math.inf, 0.0),
        # (lower, upper] of the bucket holding the percentile: 50 ms wide up to 5 s
        "rank_lag_p50_s": quantile_bucket(buckets, 0.5),
        "rank_lag_p99_s": quantile_bucket(buckets, 0.99),
        "rank_lag_mean_s": delta.get(_LAG + "_sum", math.nan) / delta[_LAG + "_count"]
        if delta.get(_LAG + "_count")
        else math.nan,
        "pubsub_lag_p50_s": quantile_bucket(pubsub, 0.5),
        "pubsub_lag_p99_s": quantile_bucket(pubsub, 0.99),
        # one observation per snapshot per gateway: its p99 is the worst tick-writes but one in 100
        "written_lag_p50_s": quantile_bucket(written, 0.5),
        "written_lag_p99_s": quantile_bucket(written, 0.99),
        "written_lag_max_s": quantile_bucket(written, 1.0),
        "written_lag_count": written.get(math.inf, 0.0),
        "write_p50_le_s": quantile(write, 0.5) if write else math.nan,
        "write_p99_le_s": quantile(write, 0.99) if write else math.nan,
        "gc_pauses": _total(delta, _GC + "_count"),
        "gc_pause_ms": _total(delta, _GC + "_sum") * 1000,
        # of which full collections (generation 2: every object of every connection is scanned)
        "gc_full": delta.get(_GC + '_count{generation="2"}', 0.0),
        "gc_full_ms": delta.get(_GC + '_sum{generation="2"}', 0.0) * 1000,
        "gc_pause_max_le_s": quantile(gc, 1.0) if (gc := _buckets(delta, _GC)) else math.nan,
    }
    figures.update(redis)
    return figures


async def fcall_ro(redis: RedisClient) -> tuple[float, float]:
    """(calls, microseconds) of FCALL_RO so far: the gateways' reads (own ranks, top N) and the
    scorer's (top N for its snapshots), summed over the nodes when the fleet's Redis is a cluster."""
    stats: dict[str, Any]
    if isinstance(redis, RedisCluster):
        # a cluster client asks one node unless told: every node's (a node each), replicas' too
        stats = await redis.info("commandstats", target_nodes=RedisCluster.ALL_NODES)
    else:
        stats = await redis.info("commandstats")
    single = any(key.startswith("cmdstat_") for key in stats)  # one node's reply, not a reply per node
    nodes = [stats] if single else list(stats.values())
    calls = usec = 0.0
    for node in nodes:
        entry = node.get("cmdstat_fcall_ro") if isinstance(node, dict) else None
        if isinstance(entry, dict):
            calls += float(entry.get("calls", 0))
            usec += float(entry.get("usec", 0))
    return calls, usec
