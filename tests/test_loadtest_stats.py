"""The load test's pure statistics and /proc readings."""

from __future__ import annotations

import itertools
import math
import os

from loadtest.procstat import usage
from loadtest.stats import cdf_points, per_second, percentile, summary


def test_percentiles_nearest_rank() -> None:
    data = list(range(1, 101))
    assert percentile(data, 50) == 50 and percentile(data, 99) == 99 and percentile(data, 100) == 100
    assert percentile([7.0], 99) == 7.0 and math.isnan(percentile([], 50))
    s = summary([3, 1, 2])
    assert (s["count"], s["p50"], s["max"], s["mean"]) == (3, 2, 3, 2)


def test_cdf_and_rates() -> None:
    cdf = cdf_points(range(1000), points=10)
    assert cdf[-1] == (999.0, 1.0)
    assert all(a[1] < b[1] for a, b in itertools.pairwise(cdf))
    assert per_second([10.1, 10.2, 11.9, 13.0, 9.0], start=10.0) == [2, 1, 0, 1]


def test_usage_of_this_process() -> None:
    u = usage(os.getpid())
    assert u.cpu_s > 0 and u.rss_bytes > 10 * 1024 * 1024


def test_a_percentile_of_too_few_samples_says_so() -> None:
    from loadtest.modes import MIN_SAMPLES, _quad, too_few

    assert too_few(MIN_SAMPLES) == ""
    one = _quad(summary([42.0]))  # e.g. the fan-out spread of a run that saw a single snapshot
    assert one.startswith("42 / 42 / 42 / 42") and "only 1 sample: too few to mean anything" in one
    assert "too few" not in _quad(summary(range(500)))
