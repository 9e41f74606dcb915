"""The measuring of a socket phase (I/O): open the sockets, read the counters, clocks and /proc
before and after a window, collect every client process's report. ``loadtest.figures`` turns
what this gathers into figures.

The window: sockets open (ramp), settle, then ``duration`` seconds during which every snapshot
published on the board's channel is recorded by a monitor subscription; after a grace period for
stragglers, and as long as the client processes are still catching up on what reached them
(``catch_up``), each client process reports, per snapshot of the window, how many of its sockets
got it and when. A socket counts for loss if it was open for the whole window.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from redis.exceptions import RedisError

from leaderboard import GameConfig, connect
from leaderboard.keys import GLOBAL_SCOPE

from . import probes
from .figures import GRACE, PhaseSamples, Probe
from .flood import Flood, Window
from .progress import Progress, Watch
from .swarm import Swarm
from .target import SnapshotMonitor, Target, cpu_s, rss_bytes, wait_s

CATCH_UP = 30.0  # at most this long more for the client processes to read what reached them
SETTLE = 1.5  # seconds after the ramp before measuring (welcomes, stored snapshots, allocations)


def channel_of(game: str, window: str) -> str:
    return GameConfig(game=game).keys.snapshot_channel(window, GLOBAL_SCOPE)


def swarm_of(args: argparse.Namespace, target: Target, url: str, **extra: Any) -> Swarm:
    """The client processes of a run: ``--sockets`` at ``--connect-rate`` over ``--clients``
    processes, ``--players-share`` of them players with tokens."""
    return Swarm(
        url,
        sockets=args.sockets,
        rate=args.connect_rate,
        workers=args.clients,
        token_secret=target.jwt_secret if args.players_share > 0 else "",
        token_share=args.players_share,
        player_prefix=target.player_prefix,
        nice=args.client_nice,
        ca_file=args.ca_file,
        **extra,
    )


async def catch_up(swarm: Swarm, expected: list[str], since: float) -> float:
    """Wait while the client processes are still reading the window's snapshots: on one host
    they share the cores with the gateways and can run seconds behind, and a delivery should
    count lost only if it never comes. Until none is missing, the count has not fallen for 3 s,
    or ``CATCH_UP``; the seconds waited. The window's CPU figures are taken before this."""
    started = time.monotonic()
    missing = best = await swarm.missing(expected, since)
    fell_at = started
    while missing and time.monotonic() - started < CATCH_UP:
        await asyncio.sleep(0.5)
        missing = await swarm.missing(expected, since)
        if missing < best:
            best, fell_at = missing, time.monotonic()
        elif time.monotonic() - fell_at >= 3.0:
            break
    return time.monotonic() - started


async def measure_phase(
    label: str,
    url: str,
    pids: list[int],
    target: Target,
    args: argparse.Namespace,
    monitor: SnapshotMonitor,
    flood: Flood | None,
    progress: Progress,
    first_source: int = 2,
    balancer_pids: list[int] | None = None,
    spread: list[str] | None = None,
) -> PhaseSamples:
    """Open the sockets, measure ``args.duration`` seconds, collect the reports.

    ``balancer_pids``: haproxy in front; its CPU and memory are read apart from the gateways'.
    ``spread``: the client processes connect to these URLs in turn (each gateway directly)."""
    balancer_pids = balancer_pids or []
    rss_idle = rss_bytes(pids)
    lb_rss_idle = rss_bytes(balancer_pids)
    swarm = swarm_of(args, target, url, first_source=first_source, spread=spread or ())
    async with swarm:
        watch = Watch(label, progress, [swarm], flood)
        ramp_limit = args.sockets / max(args.connect_rate, 1) + 30 if args.connect_rate > 0 else 60
        await watch.run(ramp_limit, until=lambda: swarm.totals()["opened"] + swarm.totals()["failed"] >= swarm.sockets)
        ramp = swarm.totals()
        for warning in sorted(swarm.priority_warnings):
            progress.note(warning)
        await watch.run(SETTLE)
        rss_conn = rss_bytes(pids)
        probe0 = await _probe(target, label)
        lb_rss_conn = rss_bytes(balancer_pids)
        cpu0, t0, before = cpu_s(pids), time.time(), swarm.totals()
        wait0, clients0 = wait_s(pids), swarm.stalls()
        lb_cpu0 = cpu_s(balancer_pids)
        window = Window(flood) if flood is not None else None
        if window is not None:
            await window.__aenter__()
        await watch.run(args.duration)
        t1 = time.time()
        if window is not None:
            await window.__aexit__()
        after = swarm.totals()
        probe1 = await _probe(target, label)
        await watch.run(GRACE)
        cpu1, final = cpu_s(pids), swarm.totals()
        wait1, clients1, t_end = wait_s(pids), swarm.stalls(), time.time()
        worst_gc, worst_lag = swarm.worst_stalls(t0, t_end)
        lb_cpu1 = cpu_s(balancer_pids)
        progress.end()
        expected = monitor.between(t0, t1)
        caught_up_s = await catch_up(swarm, [k for k, _ in expected], since=t0)
        reports = await swarm.report([k for k, _ in expected], since=t0)
    return PhaseSamples(
        label=label,
        url=url,
        pids=pids,
        sockets=args.sockets,
        client_nice=args.client_nice,
        processes=len(swarm.procs),
        priority_warnings=sorted(swarm.priority_warnings),
        started=swarm.started,
        ramp=ramp,
        before=before,
        after=after,
        final=final,
        t0=t0,
        t1=t1,
        t_end=t_end,
        cpu=(cpu0, cpu1),
        wait=(wait0, wait1),
        rss=(rss_idle, rss_conn),
        clients=(clients0, clients1),
        worst_gc=worst_gc,
        worst_lag=worst_lag,
        expected=expected,
        caught_up_s=caught_up_s,
        reports=reports,
        timeline=watch.timeline,
        unmeasured=target.gateways_unmeasured,
        balancer_pids=balancer_pids,
        balancer_cpu=(lb_cpu0, lb_cpu1),
        balancer_rss=(lb_rss_idle, lb_rss_conn),
        submissions=window.figures() if window is not None else None,
        probes=(probe0, probe1) if probe0 is not None and probe1 is not None else None,
        metrics_known=target.fleet is not None,
    )


async def _probe(target: Target, label: str) -> Probe | None:
    """The fleet's own counters (gateways' /metrics, Redis's FCALL_RO time); None for the naive
    gateway or when Redis does not answer INFO."""
    if label != "gateway":
        return None
    redis = connect(target.redis_url)
    try:
        return await probes.gateways(target), await probes.fcall_ro(redis)
    except (RedisError, OSError):
        return None
    finally:
        await redis.aclose()
