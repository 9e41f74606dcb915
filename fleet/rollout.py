"""Rolling restart: every gateway in turn, so that no player is lost and no two gateways are down;
then every HTTP API process in turn, the same way (drained in the balancer first, it finishes the
requests under way and exits, and is started again).

For each gateway: the balancer stops sending it new players (runtime API ``state drain``), the
gateway gets SIGTERM and drains (its players are closed with 1012 in staggered batches and come
back through the balancer to the others), its supervisor — the fleet, or systemd's
``Restart=always`` in production — starts it again, and once its ``/readyz`` answers 200 the
balancer is told ``state ready`` and must see it UP (its own health checks) before the next one.

``python -m fleet rollout`` does this for the fleet running on a data directory (it reads
``<data dir>/fleet.json``, which ``./dev run --balancer haproxy`` writes); with ``--rebalance`` it
then evens the gateways' sockets out (fleet/rebalance.py): the balancer never moves an open socket,
so the gateway restarted last would stay empty.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from leaderboard.settings import argument_parser

from . import rebalance
from .children import http_ok, listening_pids
from .haproxy import Runtime
from .layout import Layout, Member, load_layout

log = logging.getLogger("fleet.rollout")


@dataclass(frozen=True, slots=True)
class Step:
    gateway: str
    old_pid: int
    new_pid: int
    drained_s: float  # SIGTERM to exit: the gateway's drain
    restarted_s: float  # exit to /readyz
    back_in_s: float  # state ready to UP in every balancer


async def rollout(
    layout: Layout,
    *,
    drain_timeout: float = 60.0,
    start_timeout: float = 60.0,
    on_step: Callable[[Step], None] | None = None,
) -> list[Step]:
    """Restart every gateway of ``layout`` in turn, then every HTTP API process; the steps, in
    order. Raises RuntimeError (and stops there, the process left as it is) if one does not come
    back in time."""
    balancers = [Runtime(path) for path in layout.stats_sockets]
    steps = []
    for gw in (*layout.gateways, *layout.apis):
        step = await _restart(gw, balancers, drain_timeout, start_timeout)
        steps.append(step)
        if on_step is not None:
            on_step(step)
    return steps


async def _restart(gw: Member, balancers: list[Runtime], drain_timeout: float, start_timeout: float) -> Step:
    pid = _pid_of(gw)
    if pid is None:
        raise RuntimeError(f"{gw.name}: no process listens on its metrics port {gw.metrics_port}")
    # New players go elsewhere first; the ones it holds stay until its own drain closes them.
    for b in balancers:
        await b.set_state(gw.name, "drain", gw.backend)
    t0 = time.monotonic()
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    await _until(lambda: not _alive(pid), drain_timeout, f"{gw.name} (pid {pid}) did not exit after its drain")
    t1 = time.monotonic()

    async def ready() -> bool:
        new = _pid_of(gw)
        return new is not None and new != pid and await http_ok(gw.host, gw.port, "/readyz")

    await _until_async(ready, start_timeout, f"{gw.name} was not started again and ready")
    t2 = time.monotonic()
    for b in balancers:
        await b.set_state(gw.name, "ready", gw.backend)

    async def up_everywhere() -> bool:
        states = [(await b.servers(gw.backend)).get(gw.name, {}).get("status", "") for b in balancers]
        return all(state == "UP" for state in states)  # not "UP 1/2": a check failed, going down

    await _until_async(up_everywhere, start_timeout, f"the balancer does not see {gw.name} UP")
    t3 = time.monotonic()
    return Step(gw.name, pid, _pid_of(gw) or 0, t1 - t0, t2 - t1, t3 - t2)


def _pid_of(gw: Member) -> int | None:
    pids = listening_pids(gw.metrics_port)
    return pids[0] if pids else None


def _alive(pid: int) -> bool:
    """Running, not a zombie waiting for its parent to reap it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


async def _until(check: Callable[[], bool], timeout: float, failure: str) -> None:
    async def wrapped() -> bool:
        return check()

    await _until_async(wrapped, timeout, failure)


async def _until_async(check: Callable[[], Awaitable[bool]], timeout: float, failure: str) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{failure} within {timeout:.0f} s")
        await asyncio.sleep(0.05)


def main(argv: Sequence[str] | None = None, *, data_dir: str = "var") -> int:
    p = argument_parser("python -m fleet rollout", (__doc__ or "").split("\n\n")[0])
    p.add_argument(
        "--data-dir", default=os.environ.get("LB_DATA_DIR", data_dir), help="the running fleet's data directory"
    )
    p.add_argument("--drain-timeout", type=float, default=60.0, help="seconds a gateway may take to drain")
    p.add_argument("--start-timeout", type=float, default=60.0, help="seconds a gateway may take to be ready again")
    p.add_argument("--rebalance", action="store_true", help="then even the sockets out (python -m fleet rebalance)")
    rebalance.add_options(p)
    args = p.parse_args(argv)
    rebalance.check_options(p, args)
    logging.basicConfig(level="INFO", format="%(asctime)s %(name)s %(levelname)s %(message)s")
    layout = load_layout(Path(args.data_dir) / "fleet.json")
    if layout is None:
        return 1

    def show(step: Step) -> None:
        print(
            f"{step.gateway}: pid {step.old_pid} drained in {step.drained_s:.1f} s, pid {step.new_pid} ready "
            f"{step.restarted_s:.1f} s later, back in the balancer after {step.back_in_s:.1f} s",
            flush=True,
        )

    try:
        steps = asyncio.run(
            rollout(layout, drain_timeout=args.drain_timeout, start_timeout=args.start_timeout, on_step=show)
        )
    except (RuntimeError, OSError) as exc:
        print(f"rollout stopped: {exc}", file=sys.stderr)
        return 1
    print(f"rolled {len(steps)} processes ({len(layout.gateways)} gateways, {len(layout.apis)} HTTP API)", flush=True)
    if not args.rebalance:
        return 0
    try:
        result = asyncio.run(
            rebalance.rebalance(
                layout.gateways, over_s=args.over, tolerance=args.tolerance, timeout=args.settle_timeout
            )
        )
    except RuntimeError as exc:
        print(f"rebalance stopped: {exc}", file=sys.stderr)
        return 1
    print(rebalance.show(result), flush=True)
    return 0 if result.settled else 1
