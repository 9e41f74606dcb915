"""Demo game-server traffic: long-tailed points from a few thousand simulated players."""

from __future__ import annotations

import random
from collections.abc import Iterator

from leaderboard import Submission, now_ms

FIRST = ("Mia", "Leo", "Ava", "Noah", "Zoe", "Kai", "Ivy", "Max", "Ada", "Eli", "Sam", "Lea", "Oli", "Nia")
LAST = ("Storm", "Quill", "Vega", "Frost", "Nova", "Pike", "Rook", "Blaze", "Moss", "Wren", "Flint", "Onyx")
REGIONS = ("eu", "na", "asia")
MODES = ("solo", "duo")


def display_name(index: int) -> str:
    """A distinct, readable name per player: "Mia Storm", then "Mia Storm 2", ..."""
    first, rest = FIRST[index % len(FIRST)], index // len(FIRST)
    last, round_ = LAST[(5 * rest + index) % len(LAST)], rest // len(LAST)  # mixed, still one-to-one
    return f"{first} {last}" + (f" {round_ + 1}" if round_ else "")


def submissions(players: int = 3000, seed: int | None = None) -> Iterator[Submission]:
    """An endless stream of plausible submissions: few players score high, most score low."""
    rnd = random.Random(seed)
    serial = 0
    while True:
        index = int(rnd.paretovariate(1.2)) % players
        serial += 1
        yield Submission(
            id=f"demo-{rnd.getrandbits(64):016x}-{serial}",
            player=f"player{index}",
            points=min(int(rnd.paretovariate(1.5) * 100), 1_000_000),
            ts_ms=now_ms(),
            name=display_name(index),
            region=REGIONS[index % len(REGIONS)],
            mode=rnd.choice(MODES),
        )
