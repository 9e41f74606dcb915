"""Rank modes, percentiles and the score histogram's buckets (pure: no I/O).

A board ranks its members in one of three modes (``LB_RANK_MODE``, per window
``LB_WINDOW_RANK_MODES``). Equal *points* are a tie; the packed score's time part only orders
tied members inside the ordinal mode::

    points   500  500  400  300  300  200
    ordinal    1    2    3    4    5    6    (ties by who got there first: today's default)
    competition 1   1    3    4    4    6    (1 + members with strictly more points)
    dense      1    1    2    3    3    4    (1 + distinct point values above)

The function library computes the first rank of a slice (``lb_around``) and each listed player's
rank (``lb_ranks``) in O(log N) without scanning the board; ``assign_ranks`` continues a slice
from its first rank, since a slice is in board order.

Percentile: ``top_percent = ceil(1000 * position / size) / 10`` where ``size`` is the board's
member count and ``position`` is the player's ordinal rank in ordinal mode and the competition
rank otherwise (tied players share one percentile). It is rounded *up* to one decimal, so a
player is never shown better than they are: rank 1 of 1,000,000 is "top 0.1 %", the last one
"top 100 %".

The histogram (``lb:{g}:hist:...``, bucket -> member count) buckets points on a log scale with
``SUB_BUCKETS`` buckets per power of two (each bucket spans at most 1/16 of its lower bound: about
6 % of the points value); the function library keeps it in the same atomic write as the board.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

ORDINAL, DENSE, COMPETITION = "ordinal", "dense", "competition"
RANK_MODES = (ORDINAL, DENSE, COMPETITION)
SUB_BUCKETS = 16  # must equal scoring.SUB_BUCKETS in lua/encoding.lua
SIGNIFICANT_DIGITS = 3  # an approximate rank is shown to this many digits (≈ #412,000)


def check_mode(mode: str) -> str:
    if mode not in RANK_MODES:
        raise ValueError(f"rank mode must be one of {', '.join(RANK_MODES)}, got {mode!r}")
    return mode


def assign_ranks(mode: str, first_ordinal: int, first_rank: int, points: Sequence[object]) -> list[int]:
    """Ranks of a slice of consecutive board entries (best first) whose first entry has ordinal
    rank ``first_ordinal`` and rank ``first_rank`` in ``mode``. ``points`` are what ties
    compare: points, or a defined board's key parts."""
    ranks: list[int] = []
    for i, p in enumerate(points):
        if i == 0:
            rank = first_rank if mode != ORDINAL else first_ordinal
        elif mode == ORDINAL:
            rank = first_ordinal + i
        elif p == points[i - 1]:
            rank = ranks[-1]  # a tie shares its rank
        elif mode == COMPETITION:
            rank = first_ordinal + i  # the first of a tie group: 1 + everyone strictly above
        else:
            rank = ranks[-1] + 1
        ranks.append(rank)
    return ranks


def top_percent(position: int, size: int) -> float:
    """The share of the board at or above ``position``, in percent, rounded up to 0.1."""
    if size <= 0 or not 1 <= position <= size:
        raise ValueError(f"position must be 1..{size}, got {position}")
    return -(-1000 * position // size) / 10


def round_rank(rank: int, digits: int = SIGNIFICANT_DIGITS) -> int:
    """An approximate rank shown to ``digits`` significant digits (412,345 -> 412,000), so a push
    changes only when the shown number does."""
    scale = int(10 ** max(0, len(str(rank)) - digits))
    return max(1, (rank + scale // 2) // scale * scale)


def bucket_of(points: int) -> int:
    """The histogram bucket of a points value (0 for 0; then SUB_BUCKETS per power of two; a
    value below 0, an ascending board's, its magnitude's bucket negated). Integer arithmetic
    only, so Lua's doubles and Python agree on every boundary."""
    if points <= 0:
        return -bucket_of(-points) if points < 0 else 0
    e = points.bit_length() - 1
    return 1 + e * SUB_BUCKETS + ((points - (1 << e)) * SUB_BUCKETS >> e)


def companions(scores: Iterable[int], shift: int) -> tuple[dict[int, int], set[int]]:
    """A board's rank companions from its packed scores, as ``lb_rank_rebuild`` computes them
    from the board in Redis: the histogram (bucket -> members) and the distinct points values
    (kept in Redis in dense mode only). For a writer that holds the whole board already (the
    rebuild from the durable log), so Redis need not read it back."""
    points = Counter(score >> shift for score in scores)  # floor(score / 2^shift): scores are integers
    histogram: dict[int, int] = {}
    for value, members in points.items():
        bucket = bucket_of(value)
        histogram[bucket] = histogram.get(bucket, 0) + members
    return histogram, set(points)
