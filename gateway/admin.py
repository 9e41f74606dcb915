"""Operator actions on the gateway's metrics address (``LB_GW_METRICS_HOST``/``_PORT``), never on
the players' port.

``POST /admin/shed?count=N[&over=S]`` closes N of this process's sockets (at most all) with 1012
``rebalance``, in the drain's staggered batches over S seconds (default ``LB_GW_DRAIN_WINDOW``).
Their clients reconnect through the balancer, whose leastconn sends them to the emptier gateways:
``python -m fleet rebalance`` evens a fleet out after a rolling restart this way. Answers JSON:

* 202 ``{"shedding": n, "over_s": s, "connections": open}``: started, returns at once;
* 400 ``{"error": "bad_request", "message": …}``: a missing or bad parameter (nothing closed);
* 409 ``{"error": "draining" | "busy", …}``: the gateway drains, or a shed is still running.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from urllib.parse import parse_qs

import orjson

SHED_PATH = "/admin/shed"
MAX_OVER_S = 600.0


class ShedRefused(ValueError):
    """A shed request that changes nothing; ``code`` is stable."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def parse_shed(query: str, default_over: float) -> tuple[int, float]:
    """``count`` and ``over`` from the query string; ShedRefused ``bad_request`` when invalid."""
    try:
        args = parse_qs(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError:
        raise ShedRefused("bad_request", "malformed query string") from None
    unknown = set(args) - {"count", "over"}
    if unknown or any(len(v) != 1 for v in args.values()):
        raise ShedRefused("bad_request", "parameters are count (required) and over, once each")
    count_text = args.get("count", [""])[0]
    if not count_text.isascii() or not count_text.isdigit() or len(count_text) > 9:
        raise ShedRefused("bad_request", "count must be a whole number of sockets")
    over = default_over
    if "over" in args:
        try:
            over = float(args["over"][0])
        except ValueError:
            over = math.nan
        if not 0 <= over <= MAX_OVER_S:  # NaN fails too
            raise ShedRefused("bad_request", f"over must be 0..{MAX_OVER_S:.0f} seconds")
    return int(count_text), over


def shed_action(
    shed: Callable[[int, float], int], connections: Callable[[], int], default_over: float
) -> Callable[[str], tuple[bytes, bytes]]:
    """The ``POST /admin/shed`` handler for ``MetricsServer(actions=…)``, over a gateway's
    ``shed(count, over_s)`` (RuntimeError "draining" / "busy" when it refuses)."""

    def handle(query: str) -> tuple[bytes, bytes]:
        try:
            count, over = parse_shed(query, default_over)
            try:
                started = shed(count, over)
            except RuntimeError as exc:
                raise ShedRefused(str(exc), f"not shedding: {exc}") from None
        except ShedRefused as exc:
            status = b"400 Bad Request" if exc.code == "bad_request" else b"409 Conflict"
            return status, orjson.dumps({"error": exc.code, "message": str(exc)})
        return b"202 Accepted", orjson.dumps({"shedding": started, "over_s": over, "connections": connections()})

    return handle
