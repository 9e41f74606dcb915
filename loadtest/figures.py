"""A run's figures from what it measured (pure: no I/O; ``loadtest.measure`` and
``loadtest.modes`` do the measuring).

A socket phase's samples (``PhaseSamples``: counters, clocks and /proc readings taken before and
after the window, and every client process's report) become its figures and chart series; a
storm's or a rolling restart's client reports become theirs. The figures are the JSON report's,
key for key.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from fleet.rollout import Step

from . import probes
from .stats import cdf_points, per_second, summary

GRACE = 2.0  # seconds after the window for the last snapshot's stragglers (in the CPU window too)

# what a socket phase reads from the gateway processes themselves (/proc): None when none is known
GATEWAY_PROCESS_FIGURES = (
    "gateway_cpu_ms_per_1k_deliveries",
    "gateway_cpu_pct",
    "gateway_rss_mb",
    "gateway_rss_kb_per_conn",
    "gateway_wait_pct",
)

Report = dict[str, Any]  # one client process's report (``Worker.report``)
Probe = tuple[dict[str, float], tuple[float, float]]  # the gateways' /metrics, Redis's FCALL_RO (calls, µs)


def nothing_published(*, rate: float, accepted: int, backlog_growth: int, tenth: int | None) -> str:
    """Why no snapshot of the watched board was published in a measured window, from what the run
    saw (the feed's ``rate``, the submissions the queue ``accepted`` from it and how much the queue
    grew meanwhile, the points of the board's 10th place if it has ten): a window without a
    snapshot measured nothing, which a report must say instead of "0 / 0 deliveries"."""
    if not rate:
        return "no feed (--feed-rate 0), and nothing else changed the board's top 10"
    if not accepted:
        return "the queue accepted none of the feed's submissions (backlog full, or Redis refused them)"
    if backlog_growth >= accepted:
        return f"no scorer applied the {accepted:,} submissions fed (the queue grew by {backlog_growth:,})"
    if tenth is not None:
        return (
            f"the board's top 10 is established (10th place: {tenth:,} points) and the feed's slips did not "
            "reach it, so it never changed; --feed-into-top starts each feed player at its 10th place"
        )
    return "the board's top 10 did not change"


@dataclass
class PhaseSamples:
    """What one socket phase measured. ``before`` / ``after`` / ``final``: the client processes'
    counters at the window's start, its end and after the grace; the CPU and wait readings span
    the window and the grace, the RSS ones are idle (before the sockets) and connected."""

    label: str
    url: str
    pids: list[int]  # the gateway processes measured (none: not known, with --url)
    sockets: int  # asked for
    client_nice: int
    processes: int  # client processes
    priority_warnings: list[str]
    started: float  # wall time the client processes started
    ramp: dict[str, int]  # counters once every socket opened or failed
    before: dict[str, int]
    after: dict[str, int]
    final: dict[str, int]
    t0: float  # the window, wall time
    t1: float
    t_end: float  # after the grace
    cpu: tuple[float, float]  # the gateways' CPU seconds at t0 and at t_end
    wait: tuple[float, float]  # ... and their run-queue wait seconds
    rss: tuple[int, int]  # the gateways' RSS idle and with the sockets open
    clients: tuple[dict[str, float], dict[str, float]]  # the client processes' stalls at t0 and t_end
    worst_gc: float  # the client processes' longest GC pause and loop stall in the window, s
    worst_lag: float
    expected: list[tuple[str, int]]  # (snapshot key, ts ms) published in the window
    caught_up_s: float
    reports: list[Report]
    timeline: list[dict[str, float]] = field(default_factory=list)
    unmeasured: str = ""  # why no gateway process is known
    balancer_pids: list[int] = field(default_factory=list)
    balancer_cpu: tuple[float, float] = (0.0, 0.0)
    balancer_rss: tuple[int, int] = (0, 0)
    submissions: dict[str, float] | None = None  # the flood's window figures (mixed mode)
    probes: tuple[Probe, Probe] | None = None  # the fleet's own counters before and after the window
    metrics_known: bool = True  # the gateways' /metrics addresses are known (a private fleet)


def phase_figures(m: PhaseSamples) -> tuple[dict[str, Any], dict[str, Any]]:
    """(figures, chart series) of a socket phase."""
    reports = m.reports
    per: dict[str, list[float]] = {}
    latencies: list[float] = []
    read_latencies: list[float] = []
    gateways: dict[str, int] = {}
    for rep in reports:
        latencies.extend(rep["latencies"])
        read_latencies.extend(rep["read_latencies"])
        for gw, n in rep["gateways"].items():
            gateways[gw or "?"] = gateways.get(gw or "?", 0) + n
        for key, (count, first, last) in rep["per_snapshot"].items():
            agg = per.setdefault(key, [0, math.inf, -math.inf])
            agg[0] += count
            if count:
                agg[1], agg[2] = min(agg[1], first), max(agg[2], last)
    # the ramp's real duration: from the swarm's start to the last socket's 101
    ramp_opens = [t for rep in reports for t, _ in rep["open_events"] if t <= m.t0]
    connect_s = max(ramp_opens, default=m.started) - m.started
    spreads = [(last - first) * 1000 for count, first, last in per.values() if count]
    # per snapshot, in publish order: (first arrival, last arrival) after its ts, ms. A tick
    # that every socket got late (first arrival late) was held up before any gateway wrote it;
    # a late last arrival with an early first is that tick's fan-out
    built = dict(m.expected)
    ticks = [
        (round((per[key][1] - ts / 1000) * 1000), round((per[key][2] - ts / 1000) * 1000))
        for key, ts in sorted(built.items(), key=lambda kv: kv[1])
        if per.get(key, [0])[0]
    ]
    deliveries = int(sum(v[0] for v in per.values()))
    eligible = sum(r["eligible"] for r in reports)
    seconds = m.t1 - m.t0
    cpu_ms = (m.cpu[1] - m.cpu[0]) * 1000
    before, after, final, ramp = m.before, m.after, m.final, m.ramp
    messages = final["frames"] - before["frames"]  # every message of the CPU window
    opened = ramp["opened"]
    rss_idle, rss_conn = m.rss
    clients0, clients1 = m.clients
    figures: dict[str, Any] = {
        "target": m.label,
        "url": m.url,
        "gateway_pids": m.pids,
        "sockets": m.sockets,
        "opened": opened,
        "connect_failures": ramp["failed"],
        "refused_503": ramp["refused"],
        "failed_connect": ramp["failed_connect"],  # no TCP connection
        "failed_timeout": ramp["failed_timeout"],  # no 101 within the handshake timeout
        "failed_closed": ramp["failed_closed"],  # closed by the server before its 101
        "connect_seconds": connect_s,
        "connect_rate": opened / max(connect_s, 1e-6),
        "sockets_per_gateway": gateways,
        "window_seconds": seconds,
        "snapshots": len(m.expected),
        "deliveries": deliveries,
        "expected_deliveries": eligible * len(m.expected),
        "lost": sum(r["missing"] for r in reports),
        # how long after the grace the client processes took to read what had reached them
        "catch_up_s": round(m.caught_up_s, 1),
        # of the deliveries, those read together with a later tick: stamped with its arrival
        "stamped_late": sum(r["stamped_late"] for r in reports),
        "sockets_eligible": eligible,
        "sockets_complete": sum(r["complete"] for r in reports),
        "sockets_dropped": after["drops"] - before["drops"],
        # publish -> arrival (the kernel's receive timestamp: when the gateway delivered it) ...
        "latency_ms": summary(latencies),
        # ... and -> read by the client processes, which share the cores with the gateways here
        "read_latency_ms": summary(read_latencies),
        "spread_ms": summary(spreads),
        "ticks_ms": ticks,
        "rank_pushes": after["ranks"] - before["ranks"],
        "announces": after["announces"] - before["announces"],
        "msgs_per_s": (after["frames"] - before["frames"]) / max(seconds, 1e-6),
        # every message the gateway wrote in the CPU window (snapshots, announces, rank pushes)
        "messages_in_cpu_window": messages,
        "gateway_cpu_ms_per_1k_deliveries": cpu_ms / messages * 1000 if messages > 0 else math.nan,
        "gateway_cpu_pct": cpu_ms / 10 / max(seconds + GRACE, 1e-6),
        "gateway_rss_mb": rss_conn / 2**20,
        "gateway_rss_kb_per_conn": (rss_conn - rss_idle) / 1024 / max(opened, 1),
        # the time the gateways were runnable but waited for a core, % of one core over the window
        "gateway_wait_pct": (m.wait[1] - m.wait[0]) * 100 / max(seconds + GRACE, 1e-6),
        "gateways_unmeasured": "",
        # the instrument's own share and stalls: its client processes share the cores here
        "clients": {
            "processes": m.processes,
            "nice": m.client_nice,  # of the process and of its own autogroup (wsworker.yield_cores)
            "priority_warnings": sorted(m.priority_warnings),
            "cpu_pct": (clients1["cpu_s"] - clients0["cpu_s"]) * 100 / max(m.t_end - m.t0, 1e-6),
            "wait_pct": (clients1["wait_s"] - clients0["wait_s"]) * 100 / max(m.t_end - m.t0, 1e-6),
            "gc_pauses": clients1["gc_n"] - clients0["gc_n"],
            "gc_pause_ms": (clients1["gc_s"] - clients0["gc_s"]) * 1000,
            "gc_pause_max_ms": m.worst_gc * 1000,
            "loop_lag_max_ms": m.worst_lag * 1000,
        },
    }
    if not m.pids:
        # no gateway process is known (--url, a balancer on its port): nothing to measure, and
        # not zero either; the rows say why
        why = m.unmeasured or "no gateway process is known"
        figures.update(dict.fromkeys(GATEWAY_PROCESS_FIGURES), gateways_unmeasured=f"not available with --url: {why}")
    if m.balancer_pids:
        lb_cpu_ms = (m.balancer_cpu[1] - m.balancer_cpu[0]) * 1000
        figures["balancer_pids"] = m.balancer_pids
        figures["balancer_cpu_ms_per_1k_deliveries"] = lb_cpu_ms / messages * 1000 if messages else math.nan
        figures["balancer_cpu_pct"] = lb_cpu_ms / 10 / max(seconds + GRACE, 1e-6)
        figures["balancer_rss_kb_per_conn"] = (m.balancer_rss[1] - m.balancer_rss[0]) / 1024 / max(opened, 1)
    if m.submissions is not None:
        figures["submissions"] = m.submissions
    if m.probes is not None:
        (gw0, (calls0, usec0)), (gw1, (calls1, usec1)) = m.probes
        calls = calls1 - calls0
        figures["fleet"] = probes.window_figures(
            gw0,
            gw1,
            {"redis_rank_reads": calls, "redis_usec_per_rank_read": (usec1 - usec0) / calls if calls else math.nan},
        )
        if "gateway_writes" not in figures["fleet"]:
            figures["fleet"]["gateways_unmeasured"] = (
                "not available: no gateway's /metrics answered"
                if m.metrics_known
                else "not available with --url: the gateways' /metrics addresses are not known"
            )
    series = {"timeline": m.timeline, "latency_cdf": cdf_points(latencies)}
    return figures, series


def storm_figures(
    reports: list[Report], t_kill: float, *, sockets: int, others: int, victim_pid: int
) -> dict[str, Any]:
    """A storm's figures from the client reports: the victims are the sockets dropped at or
    after the kill, back at their next open."""
    back: list[float] = []
    never = 0
    gateways: dict[str, int] = {}
    for rep in reports:
        opens: dict[int, list[float]] = {}
        for t, idx in rep["open_events"]:
            opens.setdefault(idx, []).append(t)
        for t, idx, gw in rep["drop_events"]:
            if t < t_kill:
                continue
            gateways[gw] = gateways.get(gw, 0) + 1
            later = [x for x in opens.get(idx, []) if x > t]
            if later:
                back.append(min(later) - t_kill)
            else:
                never += 1
    victims = len(back) + never
    back.sort()
    attempts = sorted(t - t_kill for rep in reports for t in rep["attempt_times"] if t >= t_kill)
    t99 = (
        back[max(0, math.ceil(0.99 * victims) - 1)] if victims and len(back) >= math.ceil(0.99 * victims) else math.nan
    )
    t100 = back[-1] if victims and not never else math.nan
    per_s = per_second([t_kill + x for x in back], t_kill)
    window_s = max(1, math.ceil(back[-1])) if back else 1
    avg = len(back) / window_s
    peak = max(per_s, default=0)
    return {
        "sockets_on_victim": sockets,
        "other_sockets": others,
        "victim_pid": victim_pid,
        "victims": victims,
        "victims_by_gateway": gateways,
        "reconnected": len(back),
        "never_back": never,
        "t99_s": t99,
        "t100_s": t100,
        "reconnects_per_s": per_s,
        "peak_reconnects_per_s": peak,
        "avg_reconnects_per_s": avg,
        "peak_over_avg": peak / avg if avg else math.nan,
        "attempts": len(attempts),
        "attempts_per_s": per_second([t_kill + x for x in attempts], t_kill),
        "refused_503": sum(r["refused"] for r in reports),
        "time_to_reconnect_s": summary(back),
    }


def rollout_figures(
    reports: list[Report],
    t0: float,
    t_done: float,
    *,
    sockets: int,
    gateways: int,
    balancers: int,
    steps: list[Step],
    refused_before: int,
    snapshots: int,
) -> dict[str, Any]:
    """A rolling restart's figures from the client reports (the restart from ``t0`` to
    ``t_done``; ``refused_before``: the 503s counted before it)."""
    drops = sorted(t for rep in reports for t, _, _ in rep["drop_events"] if t >= t0)
    reopens = sorted(t for rep in reports for t, _ in rep["open_events"] if t >= t0)
    per_s = per_second(reopens, t0)
    seconds = max(1, math.ceil(t_done - t0))
    avg = len(reopens) / seconds
    peak = max(per_s, default=0)
    gaps = [g for rep in reports for g in rep["max_gaps"]]
    return {
        "sockets": sockets,
        "gateways": gateways,
        "balancers": balancers,
        "rollout_seconds": t_done - t0,
        "steps": [asdict(s) for s in steps],
        "drops": len(drops),
        "reconnects": len(reopens),
        "reconnects_per_s": per_s,
        "peak_reconnects_per_s": peak,
        "avg_reconnects_per_s": avg,
        "peak_over_avg": peak / avg if avg else math.nan,
        "attempts": sum(1 for rep in reports for t in rep["attempt_times"] if t >= t0),
        "refused_503": sum(r["refused"] for r in reports) - refused_before,
        "longest_gap_s": summary(gaps),
        "snapshots_published": snapshots,
        "sockets_moved": sum(r["moved"] for r in reports),
        "snapshots_missed_after_reconnect": sum(r["moved_missed"] for r in reports),
        "snapshots_missed_by_sockets_never_moved": sum(r["missing"] for r in reports),
        "sockets_lost": sum(r["not_open"] for r in reports),
    }
