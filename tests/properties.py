"""Shared settings of the property tests (tests/test_properties_*.py), and what a board's
histogram buckets an entry by as the model sees it (``standing``).

The normal suite runs a bounded number of examples per property; ``LB_PROPERTY_SCALE=50`` runs
fifty times as many (a longer search, for a reliability run). No deadline: the machine may be
busy, and a slow example is not a failure of the property.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from leaderboard import boards

SCALE = float(os.environ.get("LB_PROPERTY_SCALE", "1"))


def bounded(examples: int) -> settings:
    return settings(
        max_examples=max(1, int(examples * SCALE)),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        print_blob=True,
        database=None,  # a failure prints the blob that reproduces it; nothing is left in the tree
    )


def standing(definition: boards.Definition, values: tuple[int, ...]) -> int:
    """What the board's histogram buckets an entry by, higher better (lua/encoding.lua's
    scoring.standing): a packed board's points (boards.points), a lex board's first key + 1
    (desc) or negated (asc)."""
    if definition.encoding == boards.LEX:
        return values[0] + 1 if definition.keys[0].direction == "desc" else -values[0]
    return boards.points(definition, values)


def bounded_keys(draw: st.DrawFn, n: int, span: int) -> list[dict[str, object]]:
    """``n`` bounded keys, each ``span`` + 1 values wide, directions and per-key operators drawn:
    the first from 0 (a packed board's first key is never negative), the others from a drawn
    min (negative too). The board's encoding decides whether they fit one double."""
    keys: list[dict[str, object]] = []
    for i in range(n):
        low = draw(st.sampled_from([0, -span // 2, 7])) if i else 0
        key: dict[str, object] = {"name": f"k{i}", "direction": draw(st.sampled_from(["desc", "asc"])), "min": low}
        key["max"] = low + span
        if draw(st.integers(0, 3)) == 0:
            key["operator"] = draw(st.sampled_from(["best", "incr", "set"]))
        keys.append(key)
    return keys


def bounded_value(key: dict[str, object]) -> st.SearchStrategy[int]:
    """A value of a bounded key: its extremes, one step past them (refused: key_out_of_range),
    or any within."""
    lo, hi = int(str(key["min"])), int(str(key["max"]))
    return st.sampled_from([lo, lo + 1, hi - 1, hi, lo - 1, hi + 1]) | st.integers(lo, hi)
