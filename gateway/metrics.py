"""Prometheus metrics of one gateway process (served at ``/metrics``).

One registry per Gateway object, so tests and several gateways in one process do not share
counters. Hot-path counters are bumped once per fan-out (by the number of sockets), never per
socket. docs/operations.md explains each metric.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

_FAST = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
# Lags are read as percentiles (the load test's p99), so their buckets are 50 ms wide up to 5 s,
# around the 1 s target and the 1 s rank-push hold and well past them: a p99 is then known to
# within 50 ms instead of "somewhere between 1 and 2.5 s". ~100 buckets cost nothing at one
# observation per snapshot (pub/sub, written) or per player's round (rank pushes).
_LAG = (0.001, 0.005, 0.01, 0.025, *(round(0.05 * i, 2) for i in range(1, 101)), 7.5, 10.0)


DROPPED = ("slow", "stalled", "heartbeat")  # why a socket was closed by the gateway (outbound.py)
REFUSED = ("cap", "address", "rate", "draining", "game", "handshakes")  # why a handshake was refused


class Metrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry(auto_describe=True)
        self.connections = Gauge("lb_gw_connections", "open WebSocket connections", registry=r)
        self.accepted = Counter("lb_gw_accepted", "WebSocket connections accepted", registry=r)
        self.refused = Counter(
            "lb_gw_refused",
            "handshakes refused (cap, address, rate, draining, game, handshakes)",
            ["reason"],
            registry=r,
        )
        self.handshakes = Gauge(
            "lb_gw_handshakes", "TCP connections accepted, WebSocket handshake not finished", registry=r
        )
        self.deliveries = Counter("lb_gw_deliveries", "messages written to sockets by fan-out", registry=r)
        self.writes = Counter(
            "lb_gw_writes", "socket writes by fan-out (a tick's messages to one socket: one write)", registry=r
        )
        self.skipped = Counter("lb_gw_skipped", "fan-out messages skipped for a full write buffer", registry=r)
        self.dropped = Counter(
            "lb_gw_dropped", "sockets closed by the gateway (slow, stalled, dead)", ["reason"], registry=r
        )
        self.broadcast_seconds = Histogram(
            "lb_gw_broadcast_seconds",
            "time to write one message to every subscriber",
            buckets=_FAST,
            registry=r,
        )
        self.pubsub_lag_seconds = Histogram(
            "lb_gw_pubsub_lag_seconds",
            "snapshot ts (scorer clock) to fan-out start",
            buckets=_LAG,
            registry=r,
        )
        self.written_lag_seconds = Histogram(
            "lb_gw_written_lag_seconds",
            "snapshot ts (scorer clock) to the end of its write to every subscriber of this process",
            buckets=_LAG,
            registry=r,
        )
        self.rank_push_seconds = Histogram(
            "lb_gw_rank_push_seconds", "one own-rank chunk: read and push", buckets=_LAG, registry=r
        )
        self.rank_push_lag_seconds = Histogram(
            "lb_gw_rank_push_lag_seconds",
            "own-rank push: from its round's due time to its write (the read, then held for a tick's write)",
            buckets=_LAG,
            registry=r,
        )
        self.rank_pushes = Counter("lb_gw_rank_pushes", "rank messages pushed on change", registry=r)
        self.overtaken = Counter("lb_gw_overtaken", "overtaken events pushed", registry=r)
        self.overtaken_limited = Counter(
            "lb_gw_overtaken_limited", "overtaken events not sent: the connection's bound per minute", registry=r
        )
        self.redis_errors = Counter("lb_gw_redis_errors", "failed Redis calls and lost connections", registry=r)
        self.redis_up = Gauge("lb_gw_redis_up", "1 while the pub/sub connection is subscribed", registry=r)
        self.rate_limited = Counter("lb_gw_rate_limited", "client messages refused by the rate limit", registry=r)
        self.bad_input = Counter("lb_gw_bad_input", "client messages answered with an error", registry=r)
        self.draining = Gauge("lb_gw_draining", "1 while draining", registry=r)
        self.ready = Gauge("lb_gw_ready", "1 while /readyz answers 200 (not draining, a game serving)", registry=r)
        self.gc_pause_seconds = Histogram(
            "lb_gw_gc_pause_seconds",
            "garbage collections (the event loop stands still meanwhile), by generation",
            ["generation"],
            buckets=_FAST,
            registry=r,
        )

        # every label a counter is bumped with exists from the start, at 0: a dashboard's rate()
        # and an alert's increase() see a series before the first event, not "no data"
        for reason in DROPPED:
            self.dropped.labels(reason)
        for reason in REFUSED:
            self.refused.labels(reason)

    def render(self) -> bytes:
        return generate_latest(self.registry)
