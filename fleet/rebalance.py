"""Evening out the gateways' sockets: after a rolling restart the last gateway restarted is empty
(300 / 300 / 0), and the balancer's leastconn never moves a socket that is open.

``python -m fleet rebalance`` reads each gateway's open sockets (``lb_gw_connections`` on its
metrics address), computes the fleet's mean, and asks every gateway more than ``--tolerance`` of
the mean above it to shed its excess (``POST /admin/shed``, gateway/admin.py): the gateway closes
that many sockets with 1012 ``rebalance`` in the drain's staggered batches over ``--over``
seconds, and their clients' jittered reconnects go through the balancer to the emptiest
gateways. A gateway at or near the mean sheds nothing; no gateway is taken out of the balancer.
It then waits until the counts are within the tolerance and the sockets are back, and prints the
counts before and after. ``python -m fleet rollout --rebalance`` runs it after the last restart.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import math
import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import orjson

from leaderboard.settings import argument_parser

from .layout import Member, load_layout

log = logging.getLogger("fleet.rebalance")

SLACK = 5  # sockets: below this, a difference from the mean is noise, never worth a reconnect


def tolerated(mean: float, tolerance: float) -> float:
    """How far from the mean a gateway may be and still count as balanced."""
    return max(tolerance * mean, SLACK)


def plan(counts: Mapping[str, int], tolerance: float) -> dict[str, int]:
    """Sockets each gateway should shed: its excess over the (rounded up) mean when it is more
    than tolerated above the mean; gateways not listed shed nothing."""
    if not counts:
        return {}
    mean = sum(counts.values()) / len(counts)
    excess = {name: n - math.ceil(mean) for name, n in counts.items()}
    return {name: e for name, e in excess.items() if e > tolerated(mean, tolerance)}


def balanced(counts: Mapping[str, int], tolerance: float) -> bool:
    mean = sum(counts.values()) / max(len(counts), 1)
    return all(abs(n - mean) <= tolerated(mean, tolerance) for n in counts.values())


@dataclass(frozen=True, slots=True)
class Rebalance:
    before: dict[str, int]
    shed: dict[str, int]  # asked of each gateway (those above the mean)
    after: dict[str, int]
    seconds: float  # the first request to the counts settled
    settled: bool  # within the tolerance, every shed socket back, before the timeout


async def _http(member: Member, method: str, target: str, timeout: float = 5.0) -> tuple[int, bytes]:
    """One request to a gateway's metrics address; status and body. OSError/TimeoutError when
    it does not answer."""
    async with asyncio.timeout(timeout):
        reader, writer = await asyncio.open_connection(member.metrics_host, member.metrics_port)
        try:
            request = f"{method} {target} HTTP/1.1\r\nHost: {member.metrics_host}\r\nConnection: close\r\n\r\n"
            writer.write(request.encode())
            raw = await reader.read()
        finally:
            writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    status = head.split(b" ", 2)[1:2]
    if not status or not status[0].isdigit():
        raise OSError(f"{member.name}: not an HTTP answer from {member.metrics_host}:{member.metrics_port}")
    return int(status[0]), body


async def connections(member: Member) -> int:
    """The gateway's open sockets, from its ``/metrics``."""
    try:
        status, body = await _http(member, "GET", "/metrics")
    except (OSError, TimeoutError) as exc:
        raise RuntimeError(f"{member.name}: no metrics at {member.metrics_host}:{member.metrics_port} ({exc})") from exc
    for line in body.decode(errors="replace").splitlines():
        name, _, value = line.partition(" ")
        if status == 200 and name == "lb_gw_connections":
            return int(float(value))
    raise RuntimeError(f"{member.name}: {member.metrics_host}:{member.metrics_port} is not a gateway's metrics")


async def counts(gateways: Sequence[Member]) -> dict[str, int]:
    found = await asyncio.gather(*(connections(g) for g in gateways))
    return {g.name: n for g, n in zip(gateways, found, strict=True)}


async def shed(member: Member, count: int, over_s: float) -> int:
    """Ask one gateway to shed ``count`` sockets over ``over_s``; how many it will close."""
    try:
        status, body = await _http(member, "POST", f"/admin/shed?count={count}&over={over_s:g}")
    except (OSError, TimeoutError) as exc:
        raise RuntimeError(f"{member.name}: shed request failed ({exc})") from exc
    answer = orjson.loads(body) if body.startswith(b"{") else {"error": body[:80].decode(errors="replace")}
    if status != 202:
        raise RuntimeError(f"{member.name}: shed refused ({status} {answer.get('error')})")
    return int(answer["shedding"])


async def rebalance(
    gateways: Sequence[Member], *, over_s: float = 10.0, tolerance: float = 0.1, timeout: float = 60.0
) -> Rebalance:
    """Shed each gateway's excess over the mean, then wait (``over_s`` + at most ``timeout``)
    until the counts are within the tolerance and the total is back. RuntimeError, before any
    socket is closed, when a gateway's count cannot be read."""
    t0 = time.monotonic()
    before = await counts(gateways)
    asked = plan(before, tolerance)
    by_name = {g.name: g for g in gateways}
    shedding = {name: await shed(by_name[name], n, over_s) for name, n in asked.items()}
    if not shedding:
        return Rebalance(before, {}, before, 0.0, True)
    log.info("shedding %s over %.0f s (before: %s)", shedding, over_s, before)
    total = sum(before.values())
    deadline = t0 + over_s + timeout
    while True:
        now = await counts(gateways)
        elapsed = time.monotonic() - t0
        # the whole window first: batches still to come would unbalance it again
        if elapsed >= over_s and balanced(now, tolerance) and sum(now.values()) >= total - SLACK:
            return Rebalance(before, shedding, now, elapsed, True)
        if time.monotonic() > deadline:
            return Rebalance(before, shedding, now, elapsed, False)
        await asyncio.sleep(0.2)


def show(result: Rebalance) -> str:
    names = list(result.before)
    line = " / ".join(f"{result.before[n]}" for n in names) + " -> " + " / ".join(f"{result.after[n]}" for n in names)
    if not result.shed:
        return f"balanced already ({' / '.join(names)}: {line.partition(' ->')[0]}): nothing shed"
    asked = ", ".join(f"{n} {k}" for n, k in result.shed.items())
    state = "in" if result.settled else "NOT settled after"
    return f"{' / '.join(names)}: {line} sockets (shed {asked}); {state} {result.seconds:.1f} s"


def add_options(p: argparse.ArgumentParser) -> None:
    """The rebalance options, shared by ``fleet rebalance`` and ``fleet rollout --rebalance``."""
    p.add_argument("--over", type=float, default=10.0, help="seconds over which a gateway sheds its excess")
    p.add_argument(
        "--tolerance", type=float, default=0.1, help="a gateway this share of the mean above it sheds (default 0.1)"
    )
    p.add_argument(
        "--settle-timeout", type=float, default=60.0, help="seconds to wait, after --over, for the counts to settle"
    )


def check_options(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if not 0 <= args.over <= 600 or not 0 <= args.tolerance <= 10 or not 0 <= args.settle_timeout <= 3600:
        p.error("--over is 0..600 s, --tolerance 0..10, --settle-timeout 0..3600 s")


def main(argv: Sequence[str] | None = None, *, data_dir: str = "var") -> int:
    p = argument_parser("python -m fleet rebalance", (__doc__ or "").split("\n\n")[1])
    p.add_argument(
        "--data-dir", default=os.environ.get("LB_DATA_DIR", data_dir), help="the running fleet's data directory"
    )
    p.add_argument("--layout", default="", help="the fleet's layout file (default: <data dir>/fleet.json)")
    add_options(p)
    args = p.parse_args(argv)
    check_options(p, args)
    logging.basicConfig(level="INFO", format="%(asctime)s %(name)s %(levelname)s %(message)s")
    layout = load_layout(Path(args.layout or Path(args.data_dir) / "fleet.json"))
    if layout is None:
        return 1
    try:
        result = asyncio.run(
            rebalance(layout.gateways, over_s=args.over, tolerance=args.tolerance, timeout=args.settle_timeout)
        )
    except RuntimeError as exc:
        print(f"rebalance stopped: {exc}", file=sys.stderr)
        return 1
    print(show(result), flush=True)
    return 0 if result.settled else 1
