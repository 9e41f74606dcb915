"""Small statistics for load-test figures (pure)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) of already sorted values, nearest-rank; NaN when empty."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return float(sorted_values[min(rank, len(sorted_values)) - 1])


def summary(values: Iterable[float]) -> dict[str, float]:
    """count, p50, p90, p99, max and mean of ``values``."""
    data = sorted(values)
    return {
        "count": len(data),
        "p50": percentile(data, 50),
        "p90": percentile(data, 90),
        "p99": percentile(data, 99),
        "max": data[-1] if data else math.nan,
        "mean": sum(data) / len(data) if data else math.nan,
    }


def cdf_points(values: Iterable[float], points: int = 200) -> list[tuple[float, float]]:
    """(value, fraction ≤ value) pairs for a CDF chart, at most ``points`` of them."""
    data = sorted(values)
    if not data:
        return []
    step = max(1, len(data) // points)
    out = [(data[i], (i + 1) / len(data)) for i in range(0, len(data), step)]
    if out[-1][1] != 1.0:
        out.append((data[-1], 1.0))
    return out


def per_second(timestamps: Iterable[float], start: float) -> list[int]:
    """How many events fell into each whole second after ``start``."""
    counts: list[int] = []
    for t in timestamps:
        i = int(t - start)
        if i < 0:
            continue
        if i >= len(counts):
            counts.extend([0] * (i + 1 - len(counts)))
        counts[i] += 1
    return counts
