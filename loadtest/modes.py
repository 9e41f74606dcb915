"""The four load-test modes. Each returns a ``Result``: every figure, the time series behind
the charts, and the terminal rows; ``__main__`` writes the reports.

Measured windows: sockets open (ramp), settle, then ``duration`` seconds during which every
snapshot published on the board's channel is recorded by a monitor subscription; after a grace
period for stragglers, and as long as the client processes are still catching up on what reached
them (``catch_up``), each client process reports, per snapshot of the window, how many of its
sockets got it and when. A socket counts for loss if it was open for the whole window.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from redis.exceptions import RedisError

from fleet.children import listening_pids
from fleet.rollout import Step, rollout
from leaderboard import GameConfig, connect
from leaderboard.keys import GLOBAL_SCOPE

from . import probes, report
from .flood import Flood, Source, Window, one_at_a_time
from .stats import cdf_points, per_second, summary
from .swarm import Swarm
from .target import NaiveGateway, SnapshotMonitor, Target, cpu_s, rss_bytes, wait_listening, wait_s

GRACE = 2.0  # seconds after the window for the last snapshot's stragglers
CATCH_UP = 30.0  # at most this long more for the client processes to read what reached them
SETTLE = 1.5  # seconds after the ramp before measuring (welcomes, stored snapshots, allocations)


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


@dataclass
class Result:
    mode: str
    figures: dict[str, Any] = field(default_factory=dict)
    series: dict[str, Any] = field(default_factory=dict)
    rows: list[tuple[str, Any]] = field(default_factory=list)
    charts: list[str] = field(default_factory=list)


class Progress:
    """One live line on a terminal (rewritten in place); a line every 5 s otherwise."""

    def __init__(self, quiet: bool = False) -> None:
        self.quiet = quiet
        self.tty = sys.stderr.isatty()
        self._last_print = 0.0
        self._dirty = False

    def show(self, text: str) -> None:
        if self.quiet:
            return
        if self.tty:
            sys.stderr.write("\r\033[K" + text)
            sys.stderr.flush()
            self._dirty = True
        elif time.monotonic() - self._last_print >= 5:
            self._last_print = time.monotonic()
            print(text, file=sys.stderr, flush=True)

    def note(self, text: str) -> None:
        self.end()
        if not self.quiet:
            print(text, file=sys.stderr, flush=True)

    def end(self) -> None:
        if self._dirty:
            sys.stderr.write("\n")
            self._dirty = False


class Watch:
    """Once a second: sample the swarms (and the flood) into a timeline and the progress line."""

    def __init__(self, label: str, progress: Progress, swarms: list[Swarm], flood: Flood | None) -> None:
        self.label, self.progress, self.swarms, self.flood = label, progress, swarms, flood
        self.started = time.time()
        self.timeline: list[dict[str, float]] = []
        self._prev: tuple[float, int] | None = None

    async def run(self, seconds: float, until: Callable[[], bool] | None = None) -> None:
        deadline = time.monotonic() + seconds
        next_sample = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            await asyncio.sleep(max(0.0, min(0.1, deadline - time.monotonic())))
            if time.monotonic() >= next_sample or time.monotonic() >= deadline:
                next_sample += 1.0
                await self.sample()
            if until is not None and until():
                return

    async def sample(self) -> None:
        now = time.time()
        opened = sum(s.totals()["open"] for s in self.swarms)
        frames = sum(s.totals()["frames"] for s in self.swarms)
        lat = sorted(x for s in self.swarms for x in s.live_lat[-20000:])
        p99 = lat[min(len(lat) - 1, int(0.99 * len(lat)))] if lat else math.nan
        rate = 0.0
        if self._prev is not None:
            rate = (frames - self._prev[1]) / max(now - self._prev[0], 1e-6)
        self._prev = (now, frames)
        applied = 0.0
        if self.flood is not None:
            _, applied = await self.flood.sample()
        self.timeline.append({"t": now - self.started, "open": opened, "msgs_per_s": rate, "applied_per_s": applied})
        want = sum(s.sockets for s in self.swarms)
        text = f"[{self.label}] {now - self.started:5.0f} s  open {opened:,}/{want:,}  msgs {rate:,.0f}/s"
        if lat:
            text += f"  p99 {p99:,.0f} ms"
        if self.flood is not None:
            text += f"  applied {applied:,.0f}/s"
        self.progress.show(text)


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
        **extra,
    )


async def socket_phase(
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
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Open the sockets, measure ``args.duration`` seconds, report. (figures, series)

    ``balancer_pids``: haproxy in front; its CPU and memory are reported apart from the gateways'.
    ``spread``: the client processes connect to these URLs in turn (each gateway directly)."""
    balancer_pids = balancer_pids or []
    rss_idle = rss_bytes(pids)
    lb_rss_idle = rss_bytes(balancer_pids)
    swarm = swarm_of(args, target, url, first_source=first_source, spread=spread or ())
    async with swarm:
        watch = Watch(label, progress, [swarm], flood)
        t_ramp = time.monotonic()
        ramp_limit = args.sockets / max(args.connect_rate, 1) + 30 if args.connect_rate > 0 else 60
        await watch.run(ramp_limit, until=lambda: swarm.totals()["opened"] + swarm.totals()["failed"] >= swarm.sockets)
        connect_s = time.monotonic() - t_ramp
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
    ramp_opens = [t for rep in reports for t, _ in rep["open_events"] if t <= t0]
    connect_s = max(ramp_opens, default=swarm.started) - swarm.started
    spreads = [(last - first) * 1000 for count, first, last in per.values() if count]
    # per snapshot, in publish order: (first arrival, last arrival) after its ts, ms. A tick
    # that every socket got late (first arrival late) was held up before any gateway wrote it;
    # a late last arrival with an early first is that tick's fan-out
    built = dict(expected)
    ticks = [
        (round((per[key][1] - ts / 1000) * 1000), round((per[key][2] - ts / 1000) * 1000))
        for key, ts in sorted(built.items(), key=lambda kv: kv[1])
        if per.get(key, [0])[0]
    ]
    deliveries = int(sum(v[0] for v in per.values()))
    eligible = sum(r["eligible"] for r in reports)
    seconds = t1 - t0
    cpu_ms = (cpu1 - cpu0) * 1000
    opened = ramp["opened"]
    figures: dict[str, Any] = {
        "target": label,
        "url": url,
        "gateway_pids": pids,
        "sockets": args.sockets,
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
        "snapshots": len(expected),
        "deliveries": deliveries,
        "expected_deliveries": eligible * len(expected),
        "lost": sum(r["missing"] for r in reports),
        # how long after the grace the client processes took to read what had reached them
        "catch_up_s": round(caught_up_s, 1),
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
        "messages_in_cpu_window": final["frames"] - before["frames"],
        "gateway_cpu_ms_per_1k_deliveries": cpu_ms / (final["frames"] - before["frames"]) * 1000
        if final["frames"] > before["frames"]
        else math.nan,
        "gateway_cpu_pct": cpu_ms / 10 / max(seconds + GRACE, 1e-6),
        "gateway_rss_mb": rss_conn / 2**20,
        "gateway_rss_kb_per_conn": (rss_conn - rss_idle) / 1024 / max(opened, 1),
        # the time the gateways were runnable but waited for a core, % of one core over the window
        "gateway_wait_pct": (wait1 - wait0) * 100 / max(seconds + GRACE, 1e-6),
        "gateways_unmeasured": "",
        # the instrument's own share and stalls: its client processes share the cores here
        "clients": {
            "processes": len(swarm.procs),
            "nice": args.client_nice,  # of the process and of its own autogroup (wsworker.yield_cores)
            "priority_warnings": sorted(swarm.priority_warnings),
            "cpu_pct": (clients1["cpu_s"] - clients0["cpu_s"]) * 100 / max(t_end - t0, 1e-6),
            "wait_pct": (clients1["wait_s"] - clients0["wait_s"]) * 100 / max(t_end - t0, 1e-6),
            "gc_pauses": clients1["gc_n"] - clients0["gc_n"],
            "gc_pause_ms": (clients1["gc_s"] - clients0["gc_s"]) * 1000,
            "gc_pause_max_ms": worst_gc * 1000,
            "loop_lag_max_ms": worst_lag * 1000,
        },
    }
    if not pids:
        # no gateway process is known (--url, a balancer on its port): nothing to measure, and
        # not zero either; the rows say why
        why = target.gateways_unmeasured or "no gateway process is known"
        figures.update(dict.fromkeys(GATEWAY_PROCESS_FIGURES), gateways_unmeasured=f"not available with --url: {why}")
    if balancer_pids:
        messages = final["frames"] - before["frames"]
        figures["balancer_pids"] = balancer_pids
        figures["balancer_cpu_ms_per_1k_deliveries"] = (
            (lb_cpu1 - lb_cpu0) * 1000 / messages * 1000 if messages else math.nan
        )
        figures["balancer_cpu_pct"] = (lb_cpu1 - lb_cpu0) * 100 / max(seconds + GRACE, 1e-6)
        figures["balancer_rss_kb_per_conn"] = (lb_rss_conn - lb_rss_idle) / 1024 / max(opened, 1)
    if window is not None:
        figures["submissions"] = window.figures()
    if probe0 is not None and probe1 is not None:
        (gw0, (calls0, usec0)), (gw1, (calls1, usec1)) = probe0, probe1
        calls = calls1 - calls0
        figures["fleet"] = probes.window_figures(
            gw0,
            gw1,
            {"redis_rank_reads": calls, "redis_usec_per_rank_read": (usec1 - usec0) / calls if calls else math.nan},
        )
        if "gateway_writes" not in figures["fleet"]:
            figures["fleet"]["gateways_unmeasured"] = (
                "not available with --url: the gateways' /metrics addresses are not known"
                if target.fleet is None
                else "not available: no gateway's /metrics answered"
            )
    series = {"timeline": watch.timeline, "latency_cdf": cdf_points(latencies)}
    return figures, series


async def _probe(target: Target, label: str) -> tuple[dict[str, float], tuple[float, float]] | None:
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


# what socket_phase reads from the gateway processes themselves (/proc): None when none is known
GATEWAY_PROCESS_FIGURES = (
    "gateway_cpu_ms_per_1k_deliveries", "gateway_cpu_pct", "gateway_rss_mb", "gateway_rss_kb_per_conn",
    "gateway_wait_pct",
)  # fmt: skip
MIN_SAMPLES = 100  # below this a p99 is the largest value or close to it: no percentile to speak of
# Every socket's latency for one snapshot comes from the same publish, the same loop turn of the
# gateway: thousands of deliveries of a few snapshots are a few observations, not thousands.
MIN_SNAPSHOTS = 10


def too_few(count: int, snapshots: int | None = None) -> str:
    """A warning for a table cell whose percentiles rest on too few samples to mean anything:
    fewer than MIN_SAMPLES values, or (for latencies) values of fewer than MIN_SNAPSHOTS snapshots."""
    if count < MIN_SAMPLES:
        return f"  (only {count} sample{'s' * (count != 1)}: too few to mean anything; run longer or with more sockets)"
    if snapshots is not None and snapshots < MIN_SNAPSHOTS:
        return (
            f"  (from only {snapshots} snapshot{'s' * (snapshots != 1)}: too few to mean anything; run longer "
            "or keep the top 10 moving)"
        )
    return ""


def phase_rows(f: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    lat, read, spread = f["latency_ms"], f["read_latency_ms"], f["spread_ms"]
    rows: list[tuple[str, Any]] = [
        (
            f"{prefix}sockets open / asked",
            f"{f['opened']:,} / {f['sockets']:,} ({f['connect_failures']} failed: {f.get('failed_connect', 0)} no "
            f"connection, {f.get('failed_timeout', 0)} no 101 in time, {f.get('failed_closed', 0)} closed by the "
            f"server, {f.get('refused_503', 0)} refused with 503)",
        ),
        (f"{prefix}connect rate /s", f["connect_rate"]),
        (f"{prefix}sockets per gateway", ", ".join(f"{k} {v:,}" for k, v in sorted(f["sockets_per_gateway"].items()))),
        (f"{prefix}snapshots in window", f["snapshots"]),
        (
            f"{prefix}deliveries / expected",
            f"{f['deliveries']:,} / {f['expected_deliveries']:,} (lost {f['lost']:,}, counted "
            f"{GRACE + f.get('catch_up_s', 0.0):.1f} s after the window, when the client processes had stopped "
            "catching up)",
        ),
        (f"{prefix}sockets with every snapshot", f"{f['sockets_complete']:,} / {f['sockets_eligible']:,}"),
        (f"{prefix}latency p50/p90/p99/max ms (at arrival: kernel timestamp)", _quad(lat, f["snapshots"])),
        (
            f"{prefix}of which read together with a later tick (so stamped with its arrival: upper bounds)",
            f"{f['stamped_late']:,} ({f['stamped_late'] / max(f['deliveries'], 1):.1%})",
        ),
        (f"{prefix}latency when read by the client processes, p50/p90/p99/max ms", _quad(read, f["snapshots"])),
        (f"{prefix}fan-out spread p50/p90/p99/max ms", _quad(spread)),
        (
            f"{prefix}slowest ticks: first / last arrival after the snapshot's ts, ms",
            ", ".join(f"{a:,} / {b:,}" for a, b in sorted(f["ticks_ms"], key=lambda t: -t[1])[:4]) or "–",
        ),
        (f"{prefix}rank pushes / announces", f"{f['rank_pushes']:,} / {f['announces']:,}"),
        (f"{prefix}msgs received /s", f["msgs_per_s"]),
    ]
    unmeasured = f.get("gateways_unmeasured")
    rows += [
        (f"{prefix}gateway CPU ms / 1k deliveries", unmeasured or f["gateway_cpu_ms_per_1k_deliveries"]),
        (f"{prefix}gateway CPU % (all processes)", unmeasured or f["gateway_cpu_pct"]),
        (f"{prefix}gateway RSS KB / connection", unmeasured or f["gateway_rss_kb_per_conn"]),
        (f"{prefix}gateways waiting for a core (run queue), % of a core", unmeasured or f["gateway_wait_pct"]),
    ]
    c = f["clients"]
    rows.append(
        (f"{prefix}client processes: CPU % / waiting for a core % / GC pauses (ms, longest) / longest loop stall ms",
         f"{c['processes']} processes (nice {c['nice']}): {c['cpu_pct']:.0f} / {c['wait_pct']:.0f} / "
         f"{c['gc_pauses']:,.0f} ({c['gc_pause_ms']:,.0f}, {c['gc_pause_max_ms']:,.0f}) / {c['loop_lag_max_ms']:,.0f}")
    )  # fmt: skip
    if "fleet" in f:
        rows += fleet_rows(f["fleet"], prefix)
    if "balancer_pids" in f:
        rows += [
            (f"{prefix}haproxy CPU ms / 1k deliveries", f["balancer_cpu_ms_per_1k_deliveries"]),
            (f"{prefix}haproxy CPU % (all processes)", f["balancer_cpu_pct"]),
            (f"{prefix}haproxy RSS KB / connection", f["balancer_rss_kb_per_conn"]),
        ]
    if "submissions" in f:
        s = f["submissions"]
        rows.append(
            (
                f"{prefix}submissions applied /s",
                f"{s['applied_per_s']:,.0f} (offered {s['accepted_per_s']:,.0f}/s, backlog {s['backlog_end']:,})",
            )
        )
    return rows


def fleet_rows(g: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """What the fleet itself counted over the window: its gateways' /metrics, Redis's statistics."""
    gateways: list[tuple[str, Any]]
    labels = (
        "gateway socket writes / messages delivered (their /metrics)",
        "own-rank pushes (gateways), lag p50 / p99 (the 50 ms bucket holding it) / mean s",
        "gateways: snapshot ts → fan-out start p50 / p99, one tick's write p50 / p99 (buckets) s",
        "gateways: snapshot ts → written to every socket, p50 / p99 / max (buckets) s, tick-writes",
        "gateways: GC pauses (ms, longest ≤ s), of which full (ms)",
    )
    if g.get("gateways_unmeasured"):
        gateways = [(label, g["gateways_unmeasured"]) for label in labels]
    else:
        gateways = list(zip(labels, (
            f"{g['gateway_writes']:,.0f} / {g['gateway_deliveries']:,.0f}",
            f"{g['gateway_rank_pushes']:,.0f}, {_bucket(g['rank_lag_p50_s'])} / {_bucket(g['rank_lag_p99_s'])} / "
            + ("–" if math.isnan(g["rank_lag_mean_s"]) else f"{g['rank_lag_mean_s']:.3f}"),
            f"{_bucket(g['pubsub_lag_p50_s'])} / {_bucket(g['pubsub_lag_p99_s'])}, "
            f"{_le(g['write_p50_le_s'])} / {_le(g['write_p99_le_s'])}",
            f"{_bucket(g['written_lag_p50_s'])} / {_bucket(g['written_lag_p99_s'])} / "
            f"{_bucket(g['written_lag_max_s'])}, {g['written_lag_count']:,.0f}",
            f"{g['gc_pauses']:,.0f} ({g['gc_pause_ms']:,.0f}, {_le(g['gc_pause_max_le_s'])}), "
            f"{g['gc_full']:,.0f} ({g['gc_full_ms']:,.0f})",
        ), strict=True))  # fmt: skip
    calls = g["redis_rank_reads"]
    redis = f"{calls:,.0f}, {g['redis_usec_per_rank_read']:,.1f}" if calls else "0 (none in the window)"
    # Redis counts FCALL_RO as one command: the gateways' own-rank reads (lb_ranks) and the
    # scorer's top-N reads for its snapshots (lb_top, ~18 a second here, ~60 µs each)
    gateways.insert(2, ("Redis FCALL_RO calls, µs per call (own-rank reads and the scorer's top-N reads)", redis))
    return [(prefix + label, value) for label, value in gateways]


def _le(bound: float) -> str:
    """An upper bound from a histogram (``≤ 0.005``), or ``–`` when nothing was observed."""
    return "–" if math.isnan(bound) else f"≤ {bound:g}"


def _bucket(bounds: tuple[float, float]) -> str:
    """A percentile as its histogram bucket: ``1.4–1.45``, or ``–`` when nothing was observed."""
    lower, upper = bounds
    return "–" if math.isnan(upper) else f"{lower:g}–{upper:g}"


def _quad(s: dict[str, float], snapshots: int | None = None) -> str:
    text = " / ".join("–" if math.isnan(s[k]) else f"{s[k]:,.0f}" for k in ("p50", "p90", "p99", "max"))
    return text + too_few(int(s["count"]), snapshots)


def phase_charts(label: str, series: dict[str, Any]) -> list[str]:
    tl = series["timeline"]
    return [
        report.line_chart(f"{label}: publish→receipt latency CDF", series["latency_cdf"], "ms", "fraction"),
        report.line_chart(f"{label}: sockets open", [(r["t"], r["open"]) for r in tl], "seconds", "sockets"),
        report.line_chart(
            f"{label}: messages received per second", [(r["t"], r["msgs_per_s"]) for r in tl], "seconds", "msgs/s"
        ),
    ]


async def run_load(mode: str, target: Target, args: argparse.Namespace, progress: Progress) -> Result:
    """``sockets`` (a light feed keeps snapshots coming) and ``mixed`` (a flood at ``--rate``)."""
    rate = args.feed_rate if mode == "sockets" else args.rate
    result = Result(mode)
    config = GameConfig(game=target.game)
    channel = channel_of(target.game, args.window)
    redis = connect(target.redis_url)
    flood = (
        Flood(redis, config, Source(players=args.players, op=args.op, prefix=target.player_prefix), rate=rate)
        if rate != 0
        else None
    )
    try:
        async with SnapshotMonitor(target.redis_url, channel) as monitor:
            if flood is not None:
                flood.start()
            await asyncio.sleep(1.0)  # the first tick: boards exist, stored snapshots too
            label = "haproxy" if target.balancer_pids else "gateway"
            phases = [label, "direct"] if args.baseline == "direct" else [label]
            if getattr(args, "direct_first", False):
                phases.reverse()  # runs alternate the order: what the machine did meanwhile shows
            for phase in phases:
                through = phase != "direct"
                f, ser = await socket_phase(
                    phase, target.ws_url, target.gateway_pids, target, args, monitor,
                    flood if mode == "mixed" else None, progress,
                    # direct: the same sockets straight to the gateways' own addresses, the balancer idle
                    first_source=2 if through else 40,
                    balancer_pids=target.balancer_pids if through else None,
                    spread=None if through else target.direct_urls,
                )  # fmt: skip
                result.figures[phase] = f
                result.series[phase] = ser
                result.rows += phase_rows(f, f"{phase}: " if target.balancer_pids else "")
                result.charts += phase_charts(phase, ser)
            figures = result.figures[label]
            if args.baseline == "direct":
                rows = balancer_rows(figures, result.figures["direct"])
                result.rows += rows
                result.figures["through_haproxy_vs_direct"] = dict(rows)
            if args.baseline == "naive":
                async with NaiveGateway(target.redis_url, channel) as naive:
                    assert naive.proc is not None
                    nf, ns = await socket_phase(
                        "naive",
                        naive.ws_url,
                        [naive.proc.pid],
                        target,
                        args,
                        monitor,
                        flood if mode == "mixed" else None,
                        progress,
                        first_source=40,
                    )
                result.figures["naive"] = nf
                result.series["naive"] = ns
                result.rows += phase_rows(nf, "naive: ")
                result.rows += ratio_rows(figures, nf)
                result.figures["ratios"] = dict(ratio_rows(figures, nf))
                result.charts += phase_charts("naive", ns)
    finally:
        if flood is not None:
            await flood.stop()
        await redis.aclose()
    if flood is not None and mode == "mixed":
        result.charts.append(
            report.bar_chart("submissions applied per second", [s[2] for s in flood.samples], "seconds", "applied/s")
        )
    return result


def balancer_rows(lb: dict[str, Any], direct: dict[str, Any]) -> list[tuple[str, Any]]:
    """What the balancer adds, from two phases of the same run."""
    lat, dlat = lb["latency_ms"], direct["latency_ms"]
    return [
        ("haproxy − direct: latency p50 ms", lat["p50"] - dlat["p50"]),
        ("haproxy − direct: latency p99 ms", lat["p99"] - dlat["p99"]),
        ("haproxy / direct: gateway CPU per delivery",
         lb["gateway_cpu_ms_per_1k_deliveries"] / direct["gateway_cpu_ms_per_1k_deliveries"]
         if direct["gateway_cpu_ms_per_1k_deliveries"] else math.nan),
        ("haproxy CPU per delivery / gateway CPU per delivery",
         lb["balancer_cpu_ms_per_1k_deliveries"] / lb["gateway_cpu_ms_per_1k_deliveries"]
         if lb["gateway_cpu_ms_per_1k_deliveries"] else math.nan),
        ("sockets held: haproxy / direct", f"{lb['sockets_complete']:,} / {direct['sockets_complete']:,}"),
    ]  # fmt: skip


def ratio_rows(ours: dict[str, Any], naive: dict[str, Any]) -> list[tuple[str, Any]]:
    def ratio(a: float | None, b: float | None) -> float | str:
        if a is None or b is None:  # a figure of processes that were not measured
            return str(ours["gateways_unmeasured"] or naive["gateways_unmeasured"])
        return a / b if b else math.nan

    return [
        (
            "gateway / naive: CPU per delivery",
            ratio(ours["gateway_cpu_ms_per_1k_deliveries"], naive["gateway_cpu_ms_per_1k_deliveries"]),
        ),
        (
            "gateway / naive: RSS per connection",
            ratio(ours["gateway_rss_kb_per_conn"], naive["gateway_rss_kb_per_conn"]),
        ),
        ("gateway / naive: spread p99", ratio(ours["spread_ms"]["p99"], naive["spread_ms"]["p99"])),
        ("gateway / naive: latency p99", ratio(ours["latency_ms"]["p99"], naive["latency_ms"]["p99"])),
    ]


async def run_submit(target: Target, args: argparse.Namespace, progress: Progress) -> Result:
    result = Result("submit")
    redis = connect(target.redis_url)
    source = Source(players=args.players, op=args.op, prefix=target.player_prefix)
    flood = Flood(redis, GameConfig(game=target.game), source, rate=args.rate)
    try:
        watch = Watch("submit", progress, [], flood)
        await flood.sample()
        flood.start()
        await watch.run(args.warmup)
        async with Window(flood) as window:
            await watch.run(args.duration)
        await flood.stop()
        progress.end()
        fig = window.figures()
        fig["refused_backlog_full_chunks"] = flood.refused
        fig["scorer_cpu_pct"] = math.nan
        result.figures["flood"] = fig
        result.rows += [
            ("offered (accepted by the queue) /s", fig["accepted_per_s"]),
            ("applied by the scorer /s", fig["applied_per_s"]),
            ("backlog at start / end", f"{fig['backlog_start']:,} / {fig['backlog_end']:,}"),
            ("chunks refused (backlog full)", flood.refused),
        ]
        if args.baseline == "single":
            left = await flood.drain(60)  # the baseline gets a Redis the scorer no longer keeps busy
            progress.note(
                f"baseline: one FCALL per submission, one at a time, {args.baseline_seconds:.0f} s "
                f"(backlog left {left:,})"
            )
            base = await one_at_a_time(
                redis, Source(players=args.players, op=args.op, prefix=target.player_prefix), args.baseline_seconds
            )
            result.figures["baseline_one_at_a_time_per_s"] = base
            result.rows += [
                ("baseline one-at-a-time /s", base),
                ("applied / baseline", fig["applied_per_s"] / base if base else math.nan),
            ]
    finally:
        await flood.stop()
        await redis.aclose()
    result.series["samples"] = flood.samples
    result.charts += [
        report.bar_chart("submissions applied per second", [s[2] for s in flood.samples], "seconds", "applied/s"),
        report.line_chart(
            "backlog (entries waiting)", [(i, s[3]) for i, s in enumerate(flood.samples)], "seconds", "entries"
        ),
    ]
    return result


async def run_storm(target: Target, args: argparse.Namespace, progress: Progress) -> Result:
    """Sockets onto one gateway, then the others start, then that one is SIGKILLed; the
    sockets come back (to the survivors) with full-jitter backoff."""
    result = Result("storm")
    fleet = target.fleet
    redis = connect(target.redis_url)
    flood = Flood(
        redis,
        GameConfig(game=target.game),
        Source(players=args.players, op=args.op, prefix=target.player_prefix),
        rate=args.feed_rate,
    )
    swarms: list[Swarm] = []
    try:
        if args.feed_rate:
            flood.start()
        victim_swarm = swarm_of(args, target, target.ws_url, reconnect=True)
        swarms.append(await victim_swarm.start())
        watch = Watch("storm", progress, swarms, None)
        ramp_limit = args.sockets / max(args.connect_rate, 1) + 30
        await watch.run(ramp_limit, until=lambda: victim_swarm.totals()["open"] >= args.sockets)
        if fleet is not None:
            victim = fleet.gateways[0]
            victim_pid = victim.pid
            port = fleet.port
            for i in range(len(fleet.gateways), args.gateways):
                fleet.gateways.append(await fleet.start_gateway(i))
            await wait_listening(port, [p.pid for p in fleet.gateways])
            await asyncio.sleep(0.5)
        else:
            victim_pid = args.victim_pid
            if not victim_pid:
                raise ValueError("storm against an existing fleet needs --victim-pid")
        if args.others:
            others = Swarm(
                target.ws_url,
                sockets=args.others,
                rate=args.connect_rate,
                reconnect=True,
                first_source=20,
                first_index=args.sockets,
                player_prefix=target.player_prefix,
            )
            swarms.append(await others.start())
            await watch.run(
                args.others / max(args.connect_rate, 1) + 30, until=lambda: others.totals()["open"] >= args.others
            )
        await watch.run(2.0)
        total = sum(s.sockets for s in swarms)
        before_open = sum(s.totals()["open"] for s in swarms)
        progress.note(f"killing gateway pid {victim_pid} (SIGKILL) with {before_open:,} sockets open in all")
        t_kill = time.time()
        os.kill(victim_pid, signal.SIGKILL)
        if fleet is not None and args.replace:
            await asyncio.sleep(args.replace_after)
            fleet.gateways.append(await fleet.start_gateway(len(fleet.gateways)))

        def all_back() -> bool:
            return time.time() - t_kill > 2 and sum(s.totals()["open"] for s in swarms) >= total

        await watch.run(args.max_wait, until=all_back)
        await watch.run(1.0)
        progress.end()
        reports = [rep for s in swarms for rep in await s.report([], since=t_kill)]
    finally:
        for s in swarms:
            await s.close()
        await flood.stop()
        await redis.aclose()
    # victims: sockets whose connection dropped at/after the kill; back: their next open
    back: list[float] = []
    never = 0
    gateways: dict[str, int] = {}
    for w, rep in enumerate(reports):
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
        del w
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
    f = {
        "sockets_on_victim": args.sockets,
        "other_sockets": args.others,
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
    result.figures["storm"] = f
    result.series["timeline"] = watch.timeline
    result.rows += [
        ("sockets on the killed gateway", f"{victims:,} dropped (asked {args.sockets:,}; others {args.others:,})"),
        ("back", f"{len(back):,} ({never} never within {args.max_wait:.0f} s)"),
        ("time to 99% / 100% back s", f"{t99:.2f} / {t100:.2f}"),
        ("reconnects /s peak / average", f"{peak:,} / {avg:,.0f} (peak {f['peak_over_avg']:.2f}× average)"),
        ("attempts (incl. refused 503)", f"{len(attempts):,} ({f['refused_503']:,} refused)"),
        (
            "time to reconnect p50/p90/p99/max s",
            " / ".join(f"{f['time_to_reconnect_s'][k]:.2f}" for k in ("p50", "p90", "p99", "max")),
        ),
    ]
    result.charts += [
        report.bar_chart("reconnects per second after the kill", per_s, "seconds after the kill", "reconnects"),
        report.bar_chart(
            "connection attempts per second after the kill", f["attempts_per_s"], "seconds after the kill", "attempts"
        ),
        report.line_chart("sockets open", [(r["t"], r["open"]) for r in watch.timeline], "seconds", "sockets"),
    ]
    return result


async def run_rollout(target: Target, args: argparse.Namespace, progress: Progress) -> Result:
    """Sockets through haproxy onto every gateway, then a rolling restart (``fleet.rollout``) of
    every gateway in turn; the sockets come back through the balancer with full-jitter backoff."""
    result = Result("rollout")
    fleet = target.fleet
    if fleet is None or not fleet.balancers:
        raise ValueError("rollout runs against a private fleet behind haproxy (without --url)")
    redis = connect(target.redis_url)
    source = Source(players=args.players, op=args.op, prefix=target.player_prefix)
    flood = Flood(redis, GameConfig(game=target.game), source, rate=args.feed_rate)
    swarm = swarm_of(args, target, target.ws_url, reconnect=True)
    steps: list[Step] = []

    def note(step: Step) -> None:
        progress.note(
            f"{step.gateway}: drained in {step.drained_s:.1f} s, ready {step.restarted_s:.1f} s later, "
            f"UP in the balancer after {step.back_in_s:.1f} s"
        )

    try:
        async with SnapshotMonitor(target.redis_url, channel_of(target.game, args.window)) as monitor:
            if args.feed_rate:
                flood.start()
            await asyncio.sleep(1.0)  # the first tick: the board and its stored snapshot exist
            await swarm.start()
            watch = Watch("rollout", progress, [swarm], None)
            ramp_limit = args.sockets / max(args.connect_rate, 1) + 30
            await watch.run(ramp_limit, until=lambda: swarm.totals()["open"] >= args.sockets)
            await watch.run(SETTLE)
            before = swarm.totals()
            progress.note(f"rolling restart of {len(fleet.gateways)} gateways, {before['open']:,} sockets open")
            t0 = time.time()
            task = asyncio.create_task(rollout(fleet.layout(), on_step=note))
            await watch.run(args.max_wait * len(fleet.gateways), until=task.done)
            if not task.done():
                task.cancel()
                raise RuntimeError(f"the rolling restart did not finish within {args.max_wait * len(fleet.gateways)} s")
            steps = task.result()
            t_done = time.time()
            await watch.run(args.max_wait, until=lambda: swarm.totals()["open"] >= args.sockets)
            await watch.run(3.0)  # a few ticks with everyone back: a snapshot missed would show
            t1 = time.time()
            await watch.run(GRACE)
            progress.end()
            expected = monitor.between(t0, t1)
            await catch_up(swarm, [k for k, _ in expected], since=t0)
            reports = await swarm.report([k for k, _ in expected], since=t0)
    finally:
        await swarm.close()
        await flood.stop()
        await redis.aclose()
    drops = sorted(t for rep in reports for t, _, _ in rep["drop_events"] if t >= t0)
    reopens = sorted(t for rep in reports for t, _ in rep["open_events"] if t >= t0)
    per_s = per_second(reopens, t0)
    seconds = max(1, math.ceil(t_done - t0))
    avg = len(reopens) / seconds
    peak = max(per_s, default=0)
    gaps = [g for rep in reports for g in rep["max_gaps"]]
    f: dict[str, Any] = {
        "sockets": args.sockets,
        "gateways": len(fleet.gateways),
        "balancers": len(fleet.balancers),
        "rollout_seconds": t_done - t0,
        "steps": [asdict(s) for s in steps],
        "drops": len(drops),
        "reconnects": len(reopens),
        "reconnects_per_s": per_s,
        "peak_reconnects_per_s": peak,
        "avg_reconnects_per_s": avg,
        "peak_over_avg": peak / avg if avg else math.nan,
        "attempts": sum(1 for rep in reports for t in rep["attempt_times"] if t >= t0),
        "refused_503": sum(r["refused"] for r in reports) - before["refused"],
        "longest_gap_s": summary(gaps),
        "snapshots_published": len(expected),
        "sockets_moved": sum(r["moved"] for r in reports),
        "snapshots_missed_after_reconnect": sum(r["moved_missed"] for r in reports),
        "snapshots_missed_by_sockets_never_moved": sum(r["missing"] for r in reports),
        "sockets_lost": sum(r["not_open"] for r in reports),
    }
    result.figures["rollout"] = f
    result.series["timeline"] = watch.timeline
    g = f["longest_gap_s"]
    result.rows += [
        ("gateways restarted / haproxy processes", f"{len(steps)} / {len(fleet.balancers)}"),
        ("rolling restart took s", f["rollout_seconds"]),
        *[(f"  {s.gateway}: drain / ready / UP s", f"{s.drained_s:.1f} / {s.restarted_s:.1f} / {s.back_in_s:.1f}")
          for s in steps],
        ("sockets dropped (1012) / reconnected", f"{len(drops):,} / {len(reopens):,}"),
        ("reconnects /s peak / average", f"{peak:,} / {avg:,.0f} (peak {f['peak_over_avg']:.2f}× average)"),
        ("attempts (refused 503)", f"{f['attempts']:,} ({f['refused_503']:,})"),
        ("longest gap between snapshots per socket p50/p99/max s",
         " / ".join(f"{g[k]:.2f}" for k in ("p50", "p99", "max"))),
        ("snapshots published during the restart", len(expected)),
        ("snapshots missed after reconnect", f"{f['snapshots_missed_after_reconnect']:,} (by {f['sockets_moved']:,} "
         "sockets that moved)"),
        ("snapshots missed by sockets never moved", f["snapshots_missed_by_sockets_never_moved"]),
        ("sockets lost for good", f"{f['sockets_lost']:,} of {args.sockets:,}"),
    ]  # fmt: skip
    result.charts += [
        report.bar_chart("reconnects per second during the rolling restart", per_s, "seconds", "reconnects"),
        report.line_chart("sockets open", [(r["t"], r["open"]) for r in watch.timeline], "seconds", "sockets"),
    ]
    return result


__all__ = ["Progress", "Result", "listening_pids", "run_load", "run_rollout", "run_storm", "run_submit"]
