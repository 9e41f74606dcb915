"""What a run shows from its figures: the terminal table's rows and the HTML report's charts
(pure: figures in, rows and SVG out).

A percentile resting on too few samples says so in its cell (``too_few``); a figure of processes
that were not measured shows why instead of a number.
"""

from __future__ import annotations

import math
from typing import Any

from fleet.rollout import Step

from . import report
from .figures import GRACE

Rows = list[tuple[str, Any]]

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


def nothing_measured(f: dict[str, Any], prefix: str = "") -> Rows:
    """The first row of a window in which no snapshot was published (the run then sets
    ``nothing_published``: why), saying so: its other figures are of nothing."""
    if "nothing_published" not in f:
        return []
    return [(f"{prefix}NOTHING MEASURED", f"no snapshot was published in the window: {f['nothing_published']}")]


def phase_rows(f: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    lat, read, spread = f["latency_ms"], f["read_latency_ms"], f["spread_ms"]
    rows: list[tuple[str, Any]] = [
        *nothing_measured(f, prefix),
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
        (
            f"{prefix}client processes: CPU % / waiting for a core % / GC pauses (ms, longest) / longest loop stall ms",
            f"{c['processes']} processes (nice {c['nice']}): {c['cpu_pct']:.0f} / {c['wait_pct']:.0f} / "
            f"{c['gc_pauses']:,.0f} ({c['gc_pause_ms']:,.0f}, {c['gc_pause_max_ms']:,.0f}) / "
            f"{c['loop_lag_max_ms']:,.0f}",
        )
    )
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
        mean = "–" if math.isnan(g["rank_lag_mean_s"]) else f"{g['rank_lag_mean_s']:.3f}"
        values = (
            f"{g['gateway_writes']:,.0f} / {g['gateway_deliveries']:,.0f}",
            f"{g['gateway_rank_pushes']:,.0f}, {_bucket(g['rank_lag_p50_s'])} / "
            f"{_bucket(g['rank_lag_p99_s'])} / {mean}",
            f"{_bucket(g['pubsub_lag_p50_s'])} / {_bucket(g['pubsub_lag_p99_s'])}, "
            f"{_le(g['write_p50_le_s'])} / {_le(g['write_p99_le_s'])}",
            f"{_bucket(g['written_lag_p50_s'])} / {_bucket(g['written_lag_p99_s'])} / "
            f"{_bucket(g['written_lag_max_s'])}, {g['written_lag_count']:,.0f}",
            f"{g['gc_pauses']:,.0f} ({g['gc_pause_ms']:,.0f}, {_le(g['gc_pause_max_le_s'])}), "
            f"{g['gc_full']:,.0f} ({g['gc_full_ms']:,.0f})",
        )
        gateways = list(zip(labels, values, strict=True))
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


def balancer_rows(lb: dict[str, Any], direct: dict[str, Any]) -> list[tuple[str, Any]]:
    """What the balancer adds, from two phases of the same run."""
    lat, dlat = lb["latency_ms"], direct["latency_ms"]
    return [
        ("haproxy − direct: latency p50 ms", lat["p50"] - dlat["p50"]),
        ("haproxy − direct: latency p99 ms", lat["p99"] - dlat["p99"]),
        (
            "haproxy / direct: gateway CPU per delivery",
            lb["gateway_cpu_ms_per_1k_deliveries"] / direct["gateway_cpu_ms_per_1k_deliveries"]
            if direct["gateway_cpu_ms_per_1k_deliveries"]
            else math.nan,
        ),
        (
            "haproxy CPU per delivery / gateway CPU per delivery",
            lb["balancer_cpu_ms_per_1k_deliveries"] / lb["gateway_cpu_ms_per_1k_deliveries"]
            if lb["gateway_cpu_ms_per_1k_deliveries"]
            else math.nan,
        ),
        ("sockets held: haproxy / direct", f"{lb['sockets_complete']:,} / {direct['sockets_complete']:,}"),
    ]


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


def storm_rows(f: dict[str, Any], *, max_wait: float) -> Rows:
    t = f["time_to_reconnect_s"]
    return [
        (
            "sockets on the killed gateway",
            f"{f['victims']:,} dropped (asked {f['sockets_on_victim']:,}; others {f['other_sockets']:,})",
        ),
        ("back", f"{f['reconnected']:,} ({f['never_back']} never within {max_wait:.0f} s)"),
        ("time to 99% / 100% back s", f"{f['t99_s']:.2f} / {f['t100_s']:.2f}"),
        (
            "reconnects /s peak / average",
            f"{f['peak_reconnects_per_s']:,} / {f['avg_reconnects_per_s']:,.0f} "
            f"(peak {f['peak_over_avg']:.2f}× average)",
        ),
        ("attempts (incl. refused 503)", f"{f['attempts']:,} ({f['refused_503']:,} refused)"),
        ("time to reconnect p50/p90/p99/max s", " / ".join(f"{t[k]:.2f}" for k in ("p50", "p90", "p99", "max"))),
    ]


def storm_charts(f: dict[str, Any], timeline: list[dict[str, float]]) -> list[str]:
    return [
        report.bar_chart(
            "reconnects per second after the kill", f["reconnects_per_s"], "seconds after the kill", "reconnects"
        ),
        report.bar_chart(
            "connection attempts per second after the kill", f["attempts_per_s"], "seconds after the kill", "attempts"
        ),
        report.line_chart("sockets open", [(r["t"], r["open"]) for r in timeline], "seconds", "sockets"),
    ]


def rollout_rows(f: dict[str, Any], steps: list[Step]) -> Rows:
    g = f["longest_gap_s"]
    return [
        *nothing_measured(f),
        ("gateways restarted / haproxy processes", f"{len(steps)} / {f['balancers']}"),
        ("rolling restart took s", f["rollout_seconds"]),
        *[
            (f"  {s.gateway}: drain / ready / UP s", f"{s.drained_s:.1f} / {s.restarted_s:.1f} / {s.back_in_s:.1f}")
            for s in steps
        ],
        ("sockets dropped (1012) / reconnected", f"{f['drops']:,} / {f['reconnects']:,}"),
        (
            "reconnects /s peak / average",
            f"{f['peak_reconnects_per_s']:,} / {f['avg_reconnects_per_s']:,.0f} "
            f"(peak {f['peak_over_avg']:.2f}× average)",
        ),
        ("attempts (refused 503)", f"{f['attempts']:,} ({f['refused_503']:,})"),
        (
            "longest gap between snapshots per socket p50/p99/max s",
            " / ".join(f"{g[k]:.2f}" for k in ("p50", "p99", "max")),
        ),
        ("snapshots published during the restart", f["snapshots_published"]),
        (
            "snapshots missed after reconnect",
            f"{f['snapshots_missed_after_reconnect']:,} (by {f['sockets_moved']:,} sockets that moved)",
        ),
        ("snapshots missed by sockets never moved", f["snapshots_missed_by_sockets_never_moved"]),
        ("sockets lost for good", f"{f['sockets_lost']:,} of {f['sockets']:,}"),
    ]


def rollout_charts(f: dict[str, Any], timeline: list[dict[str, float]]) -> list[str]:
    return [
        report.bar_chart(
            "reconnects per second during the rolling restart", f["reconnects_per_s"], "seconds", "reconnects"
        ),
        report.line_chart("sockets open", [(r["t"], r["open"]) for r in timeline], "seconds", "sockets"),
    ]
