"""Shared settings of the property tests (tests/test_properties_*.py), and what a board's
histogram buckets an entry by as the model sees it (``standing``).

The normal suite runs a bounded number of examples per property; ``LB_PROPERTY_SCALE=50`` runs
fifty times as many (a longer search, for a reliability run). No deadline: the machine may be
busy, and a slow example is not a failure of the property.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

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


def standing(definition: boards.Definition, value: int) -> int:
    """What the board's histogram buckets an entry by, higher better (lua/encoding.lua's
    scoring.standing): a packed board's signed value, a lex board's first key + 1 (desc) or
    negated (asc)."""
    desc = definition.keys[0].direction == "desc"
    if definition.encoding == boards.LEX:
        return value + 1 if desc else -value
    return value if desc else -value
