"""A run's figures from what it measured (loadtest/figures.py): pure functions of samples,
checked on hand-made client reports, no socket and no fleet."""

from __future__ import annotations

import math
from typing import Any

import pytest

from fleet.rollout import Step
from loadtest.figures import (
    GATEWAY_PROCESS_FIGURES,
    GRACE,
    PhaseSamples,
    nothing_published,
    phase_figures,
    rollout_figures,
    storm_figures,
)
from loadtest.flood import Source
from loadtest.rows import phase_rows, rollout_rows, storm_rows

T0 = 1_900_000_000.0
KEYS = [("global|weekly|2030-W48|1", int(T0 * 1000) + 100), ("global|weekly|2030-W48|2", int(T0 * 1000) + 1100)]


def counters(frames: int, drops: int = 0, ranks: int = 0) -> dict[str, int]:
    return {
        "opened": 4,
        "failed": 1,
        "refused": 1,
        "failed_connect": 0,
        "failed_timeout": 0,
        "failed_closed": 0,
        "frames": frames,
        "drops": drops,
        "ranks": ranks,
        "announces": 0,
    }


def worker_report(**over: Any) -> dict[str, Any]:
    rep: dict[str, Any] = {
        "latencies": [],
        "read_latencies": [],
        "gateways": {},
        "per_snapshot": {},
        "open_events": [],
        "drop_events": [],
        "attempt_times": [],
        "eligible": 0,
        "complete": 0,
        "missing": 0,
        "stamped_late": 0,
        "refused": 0,
        "max_gaps": [],
        "moved": 0,
        "moved_missed": 0,
        "not_open": 0,
    }
    rep.update(over)
    return rep


def samples(**over: Any) -> PhaseSamples:
    stalls0 = {"cpu_s": 1.0, "wait_s": 0.0, "gc_n": 2, "gc_s": 0.01}
    stalls1 = {"cpu_s": 1.5, "wait_s": 0.1, "gc_n": 3, "gc_s": 0.02}
    # two client processes, two sockets each; the second process's second socket missed snapshot 2
    reports = [
        worker_report(
            latencies=[150.0, 160.0, 120.0, 130.0],
            read_latencies=[200.0, 210.0, 170.0, 180.0],
            gateways={"gw-1": 2},
            per_snapshot={KEYS[0][0]: [2, T0 + 0.25, T0 + 0.26], KEYS[1][0]: [2, T0 + 1.22, T0 + 1.23]},
            open_events=[(T0 - 5.0, 0), (T0 - 4.0, 1)],
            eligible=2,
            complete=2,
        ),
        worker_report(
            latencies=[110.0, 140.0, 130.0],
            gateways={"": 2},
            per_snapshot={KEYS[0][0]: [2, T0 + 0.21, T0 + 0.24], KEYS[1][0]: [1, T0 + 1.23, T0 + 1.23]},
            open_events=[(T0 - 3.0, 0), (T0 - 2.0, 1), (T0 + 0.5, 1)],
            eligible=2,
            complete=1,
            missing=1,
            stamped_late=1,
        ),
    ]
    m = PhaseSamples(
        label="gateway",
        url="ws://127.0.0.1:1/ws",
        pids=[11],
        sockets=5,
        client_nice=0,
        processes=2,
        priority_warnings=[],
        started=T0 - 6.0,
        ramp=counters(4),
        before=counters(10),
        after=counters(17, 1, 2),
        final=counters(20, 1, 2),
        t0=T0,
        t1=T0 + 2.0,
        t_end=T0 + 2.0 + GRACE,
        cpu=(5.0, 5.2),
        wait=(0.0, 0.04),
        rss=(50 << 20, (50 << 20) + 4 * 8192),
        clients=(stalls0, stalls1),
        worst_gc=0.005,
        worst_lag=0.02,
        expected=KEYS,
        caught_up_s=0.04,
        reports=reports,
    )
    for name, value in over.items():
        setattr(m, name, value)
    return m


def test_a_phases_figures_sum_the_client_processes_reports() -> None:
    f, series = phase_figures(samples())
    assert (f["opened"], f["connect_failures"], f["refused_503"]) == (4, 1, 1)
    assert f["connect_seconds"] == 4.0  # the swarm's start to the last 101 before the window
    assert f["sockets_per_gateway"] == {"gw-1": 2, "?": 2}
    assert (f["snapshots"], f["deliveries"], f["expected_deliveries"], f["lost"]) == (2, 7, 8, 1)
    assert (f["sockets_eligible"], f["sockets_complete"], f["stamped_late"]) == (4, 3, 1)
    assert f["latency_ms"]["count"] == 7 and f["latency_ms"]["max"] == 160.0
    assert f["read_latency_ms"]["count"] == 4
    assert f["spread_ms"]["count"] == 2 and round(f["spread_ms"]["max"]) == 50  # first to last arrival
    assert f["ticks_ms"] == [(110, 160), (120, 130)]  # first and last arrival after each ts, publish order
    assert (f["rank_pushes"], f["sockets_dropped"], f["msgs_per_s"]) == (2, 1, 3.5)
    # the gateways' CPU over every message of the window and its grace: 0.2 s for 10 messages
    assert f["messages_in_cpu_window"] == 10 and math.isclose(f["gateway_cpu_ms_per_1k_deliveries"], 20_000)
    assert math.isclose(f["gateway_cpu_pct"], 200 / 10 / (2.0 + GRACE))
    assert math.isclose(f["gateway_wait_pct"], 4 / (2.0 + GRACE)) and f["gateway_rss_kb_per_conn"] == 8.0
    c = f["clients"]
    assert (c["processes"], c["gc_pauses"], c["loop_lag_max_ms"]) == (2, 1, 20.0)
    assert math.isclose(c["cpu_pct"], 50 / (2.0 + GRACE))
    assert f["catch_up_s"] == 0.0 and f["gateways_unmeasured"] == ""
    assert "fleet" not in f and "balancer_pids" not in f and "submissions" not in f
    assert series["latency_cdf"][-1] == (160.0, 1.0)
    rows = dict(phase_rows(f))
    assert rows["deliveries / expected"].startswith("7 / 8 (lost 1, counted 2.0 s after the window")


def test_a_window_without_a_snapshot_says_it_measured_nothing_and_why() -> None:
    """0 of 0 deliveries is not a result: the table's first row says nothing was measured, and why."""
    f, _ = phase_figures(samples(expected=[]))
    assert (f["snapshots"], f["expected_deliveries"]) == (0, 0)
    assert "NOTHING MEASURED" not in dict(phase_rows(f))  # the run sets why, once it has looked
    f["nothing_published"] = nothing_published(rate=100, accepted=1500, backlog_growth=3, tenth=9_000_000)
    [(name, text), *_] = phase_rows(f, "gateway: ")
    assert name == "gateway: NOTHING MEASURED" and "10th place: 9,000,000 points" in text
    assert "--feed-into-top" in text


@pytest.mark.parametrize(
    ("seen", "why"),
    [
        ({"rate": 0, "accepted": 0, "backlog_growth": 0, "tenth": None}, "--feed-rate 0"),
        ({"rate": 100, "accepted": 0, "backlog_growth": 0, "tenth": None}, "accepted none"),
        ({"rate": 100, "accepted": 1500, "backlog_growth": 1500, "tenth": 7}, "no scorer applied the 1,500"),
        ({"rate": 100, "accepted": 1500, "backlog_growth": 0, "tenth": 7}, "established (10th place: 7 points)"),
        ({"rate": 100, "accepted": 1500, "backlog_growth": 0, "tenth": None}, "did not change"),
    ],
)
def test_why_no_snapshot_was_published(seen: dict[str, int], why: str) -> None:
    assert why in nothing_published(**seen)


def test_into_the_top_each_feed_player_starts_at_the_floor_once() -> None:
    plain, lifted = Source(players=50, seed=7), Source(players=50, seed=7, floor=1_000_000)
    first: set[str] = set()
    for a, b in zip(plain.take(500), lifted.take(500), strict=True):
        assert a.player == b.player
        assert b.points == a.points + (1_000_000 if a.player not in first else 0)
        first.add(a.player)


def test_unknown_gateway_processes_are_not_zero_but_said_why() -> None:
    f, _ = phase_figures(samples(pids=[], unmeasured="a balancer listens on that port"))
    assert all(f[name] is None for name in GATEWAY_PROCESS_FIGURES)
    assert f["gateways_unmeasured"] == "not available with --url: a balancer listens on that port"
    assert dict(phase_rows(f))["gateway CPU ms / 1k deliveries"] == f["gateways_unmeasured"]


def test_a_balancer_in_front_and_the_fleets_own_counters_have_figures_of_their_own() -> None:
    f, _ = phase_figures(
        samples(
            balancer_pids=[7],
            balancer_cpu=(1.0, 1.1),
            balancer_rss=(1 << 20, (1 << 20) + 4 * 2048),
            probes=(({}, (100.0, 5000.0)), ({}, (110.0, 5600.0))),
            metrics_known=False,
        )
    )
    assert math.isclose(f["balancer_cpu_ms_per_1k_deliveries"], 10_000) and f["balancer_rss_kb_per_conn"] == 2.0
    assert f["fleet"]["redis_rank_reads"] == 10 and f["fleet"]["redis_usec_per_rank_read"] == 60.0
    assert f["fleet"]["gateways_unmeasured"].startswith("not available with --url")


def test_a_storms_victims_are_the_sockets_dropped_after_the_kill() -> None:
    kill = T0
    reports = [
        worker_report(
            drop_events=[(kill - 1, 0, "gw-2"), (kill + 0.1, 1, "gw-1"), (kill + 0.1, 2, "gw-1")],
            open_events=[(kill - 0.5, 0), (kill + 0.6, 1), (kill + 2.4, 2)],
            attempt_times=[kill + 0.3, kill + 0.6, kill + 1.2, kill + 2.4],
            refused=1,
        ),
        worker_report(drop_events=[(kill + 0.2, 0, "gw-1")]),  # never back
    ]
    f = storm_figures(reports, kill, sockets=3, others=0, victim_pid=99)
    assert (f["victims"], f["reconnected"], f["never_back"], f["victims_by_gateway"]) == (3, 2, 1, {"gw-1": 3})
    assert math.isnan(f["t99_s"]) and math.isnan(f["t100_s"])  # a third never came back
    assert f["reconnects_per_s"] == [1, 0, 1] and f["attempts"] == 4 and f["attempts_per_s"] == [2, 1, 1]
    assert f["peak_reconnects_per_s"] == 1 and math.isclose(f["avg_reconnects_per_s"], 2 / 3)
    assert dict(storm_rows(f, max_wait=30))["back"] == "2 (1 never within 30 s)"
    everyone = storm_figures(reports[:1], kill, sockets=2, others=0, victim_pid=99)
    assert everyone["t99_s"] == everyone["t100_s"] == max(t - kill for t, _ in reports[0]["open_events"])


def test_a_rolling_restarts_figures_count_from_its_start() -> None:
    t0 = T0
    reports = [
        worker_report(
            drop_events=[(t0 - 1, 0, "gw-1"), (t0 + 1, 0, "gw-1")],
            open_events=[(t0 - 5, 0), (t0 + 1.5, 0)],
            attempt_times=[t0 - 5, t0 + 1.2, t0 + 1.5],
            refused=3,
            max_gaps=[1.0, 2.5],
            moved=1,
            moved_missed=0,
        )
    ]
    steps = [Step("gw-1", 101, 102, 1.0, 0.5, 0.2)]
    f = rollout_figures(
        reports, t0, t0 + 3.2, sockets=1, gateways=1, balancers=1, steps=steps, refused_before=1, snapshots=3
    )
    assert (f["drops"], f["reconnects"], f["attempts"], f["refused_503"]) == (1, 1, 2, 2)
    assert f["reconnects_per_s"] == [0, 1] and f["avg_reconnects_per_s"] == 0.25
    assert f["longest_gap_s"]["max"] == 2.5 and f["steps"][0]["gateway"] == "gw-1"
    rows = dict(rollout_rows(f, steps))
    assert rows["  gw-1: drain / ready / UP s"] == "1.0 / 0.5 / 0.2" and rows["sockets lost for good"] == "0 of 1"
