"""The load test's pure statistics and /proc readings."""

from __future__ import annotations

import itertools
import math
import os
import threading
import time

from loadtest.probes import quantile, quantile_bucket
from loadtest.procstat import usage
from loadtest.stats import cdf_points, per_second, percentile, summary


def test_percentiles_nearest_rank() -> None:
    data = list(range(1, 101))
    assert percentile(data, 50) == 50 and percentile(data, 99) == 99 and percentile(data, 100) == 100
    assert percentile([7.0], 99) == 7.0 and math.isnan(percentile([], 50))
    s = summary([3, 1, 2])
    assert (s["count"], s["p50"], s["max"], s["mean"]) == (3, 2, 3, 2)


def test_a_histogram_percentile_is_the_bucket_holding_it() -> None:
    # cumulative counts, as Prometheus gives them: 90 at or below 1.0, 99 at or below 1.05, 100 in all
    buckets = {0.5: 10.0, 1.0: 90.0, 1.05: 99.0, 1.1: 99.0, 2.0: 100.0, math.inf: 100.0}
    assert quantile_bucket(buckets, 0.5) == (0.5, 1.0)
    assert quantile_bucket(buckets, 0.99) == (1.0, 1.05) and quantile(buckets, 0.99) == 1.05
    assert quantile_bucket(buckets, 1.0) == (1.1, 2.0)
    assert quantile_bucket({1.0: 0.0, math.inf: 3.0}, 0.99) == (1.0, math.inf)
    assert all(math.isnan(b) for b in quantile_bucket({}, 0.5))


def test_cdf_and_rates() -> None:
    cdf = cdf_points(range(1000), points=10)
    assert cdf[-1] == (999.0, 1.0)
    assert all(a[1] < b[1] for a, b in itertools.pairwise(cdf))
    assert per_second([10.1, 10.2, 11.9, 13.0, 9.0], start=10.0) == [2, 1, 0, 1]


def test_usage_of_this_process() -> None:
    u = usage(os.getpid())
    assert u.cpu_s > 0 and u.rss_bytes > 10 * 1024 * 1024


def test_a_few_milliseconds_of_cpu_are_read_as_such() -> None:
    # /proc/<pid>/stat alone reads 0 or 10 ms for 5 ms of work (its clock ticks); the work is done
    # by a thread that has ended before the second reading, as a gateway's executor threads end
    def work() -> None:
        start = time.thread_time()
        while time.thread_time() - start < 0.005:
            pass

    before, clock = usage(os.getpid()).cpu_s, time.process_time()
    worker = threading.Thread(target=work)
    worker.start()
    worker.join()
    used, clock = usage(os.getpid()).cpu_s - before, time.process_time() - clock
    assert clock >= 0.005 and abs(used - clock) < 0.002, (used, clock)


def test_a_percentile_of_too_few_samples_says_so() -> None:
    from loadtest.rows import MIN_SAMPLES, _quad, too_few

    assert too_few(MIN_SAMPLES) == ""
    one = _quad(summary([42.0]))  # e.g. the fan-out spread of a run that saw a single snapshot
    assert one.startswith("42 / 42 / 42 / 42") and "only 1 sample: too few to mean anything" in one
    assert "too few" not in _quad(summary(range(500)))


def test_latencies_of_one_snapshot_say_so_however_many_sockets_got_it() -> None:
    from loadtest.rows import MIN_SNAPSHOTS, phase_rows

    def latency_cell(snapshots: int) -> str:
        figures = {
            "opened": 2000,
            "sockets": 2000,
            "connect_failures": 0,
            "connect_rate": 1000.0,
            "sockets_per_gateway": {},
            "snapshots": snapshots,
            "deliveries": 2000 * snapshots,
            "expected_deliveries": 2000 * snapshots,
            "lost": 0,
            "stamped_late": 0,
            "sockets_complete": 2000,
            "sockets_eligible": 2000,
            "rank_pushes": 0,
            "announces": 0,
            "msgs_per_s": 0.0,
            "gateway_cpu_ms_per_1k_deliveries": 1.0,
            "gateway_cpu_pct": 1.0,
            "gateway_rss_kb_per_conn": 1.0,
            "gateway_wait_pct": 1.0,
            "clients": {
                "processes": 1,
                "nice": 0,
                "priority_warnings": [],
                "cpu_pct": 1.0,
                "wait_pct": 1.0,
                "gc_pauses": 0,
                "gc_pause_ms": 0.0,
                "gc_pause_max_ms": 0.0,
                "loop_lag_max_ms": 1.0,
            },
            "latency_ms": summary([float(i % 50) for i in range(2000 * snapshots)]),
            "read_latency_ms": summary([float(i % 50) for i in range(2000 * snapshots)]),
            "spread_ms": summary([float(i) for i in range(max(snapshots, 100))]),
            "ticks_ms": [(10, 50)] * snapshots,
        }
        return str(dict(phase_rows(figures))["latency p50/p90/p99/max ms (at arrival: kernel timestamp)"])

    one = latency_cell(1)  # 2,000 deliveries, but every one of the same publish
    assert "from only 1 snapshot: too few to mean anything" in one
    assert "too few" not in latency_cell(MIN_SNAPSHOTS)
