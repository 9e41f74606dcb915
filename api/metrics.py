"""Prometheus metrics of one HTTP API process (``GET /metrics`` on ``LB_API_METRICS_PORT``, its
own address, never the API's port): requests by method and status, and where each lookup of a
published top N was answered from (pushed by pub/sub, held, read from Redis, served stale while
Redis failed; a request the fast path cannot answer looks up twice, there and in its route).

Counted as plain integers on the request path and turned into metrics at scrape time, as the
scorer's are (scorer/metrics.py): the held ``GET top`` answers in tens of microseconds, and a
labelled prometheus_client counter would take a lock on each.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .held import Held
from .watch import Watch


class Requests:
    """ASGI middleware, outermost: counts each answer by method and status as it starts."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.counts: Counter[tuple[str, int]] = Counter()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def counted(message: Message) -> None:
            if message["type"] == "http.response.start":
                self.counts[scope["method"], message["status"]] += 1
            await send(message)

        return await self.app(scope, receive, counted)


class ApiCollector(Collector):
    def __init__(self, requests: Requests, held: Held[str | None], watches: Iterable[Watch]) -> None:
        self.requests, self.held, self.watches = requests, held, tuple(watches)

    def collect(self) -> Iterator[Metric]:
        requests = CounterMetricFamily("lb_api_requests", "HTTP requests answered", labels=["method", "code"])
        for (method, status), count in sorted(self.requests.counts.items()):
            requests.add_metric([method, str(status)], count)
        yield requests
        tops = CounterMetricFamily(
            "lb_api_top_lookups",
            "published top N lookups by source: live (pushed by pub/sub), held (within LB_API_TOP_TTL),"
            " read (from Redis), stale (held past the TTL while Redis failed)",
            labels=["source"],
        )
        tops.add_metric(["live"], sum(w.live_hits for w in self.watches))
        tops.add_metric(["held"], self.held.served_held)
        tops.add_metric(["read"], self.held.served_read)
        tops.add_metric(["stale"], self.held.served_stale)
        yield tops


def registry(requests: Requests, held: Held[str | None], watches: Iterable[Watch]) -> CollectorRegistry:
    r = CollectorRegistry(auto_describe=True)
    r.register(ApiCollector(requests, held, watches))
    return r
