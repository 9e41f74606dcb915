"""How long a defined board's slip matters to the durable log (pure: no I/O).

A slip (records.Slip) wrote to one period of each window of its board's definition — the
definition in force when it was applied, which the journal holds (``board`` and
``board_delete`` actions, in the order Redis applied them). Once every one of those periods has
expired, Redis has dropped the keys it wrote and nothing a rebuild restores depends on it: the
same rule that drops the folded board rows of the game's own boards (a period's keys expire,
its rows go). A slip of an all-time window never expires, as its board's key does not.

The lifetime is that of the keys in Redis, deleted board or not: a definition deleted leaves
its keys to expire as their windows say (and a board created again with the same id goes on
from them), so its slips stay as long, and a rebuild replays them under the definition of
their time (scorer/rebuild/writes.py).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable

from leaderboard import boards
from leaderboard.errors import InvalidBoard

from .records import Action, Slip

NEVER = 0


class SlipLifetimes:
    """``expire_at(slip)``: when the last period a slip wrote to expires (Unix seconds; 0:
    never), from the journaled definitions ``actions`` (any actions: the others are ignored)."""

    def __init__(self, actions: Iterable[Action]) -> None:
        # board id -> the stamps of its definition changes, and the definition after each (None: deleted)
        self._changes: dict[str, tuple[list[int], list[boards.Definition | None]]] = {}
        for action in sorted(a for a in actions if a.fn in ("board", "board_delete") and a.args):
            stamps, states = self._changes.setdefault(action.args[0], ([], []))
            stamps.append(action.at)
            states.append(_definition(action.args[1]) if action.fn == "board" else None)

    def definition(self, board: str, applied_us: int) -> boards.Definition | None:
        """The definition of ``board`` a batch applied at ``applied_us`` used (an action
        stamped the same microsecond ran before it: durable/records.py)."""
        stamps, states = self._changes.get(board, ([], []))
        i = bisect.bisect_right(stamps, applied_us)
        return states[i - 1] if i else None

    def expire_at(self, slip: Slip) -> int:
        fields = slip.entry()
        try:
            ts = int(fields.get("ts", ""))
        except ValueError:
            return NEVER
        # a slip naming no board is the game's, filed under its stored default
        definition = self.definition(fields.get("board") or boards.DEFAULT_ID, slip.applied_us)
        if definition is None:  # no definition of its time in the log: kept, not guessed
            return NEVER
        ends = [boards.period(definition, w, ts).expire_at_s for w in definition.windows]
        return NEVER if NEVER in ends else max(ends)


def _definition(text: str) -> boards.Definition | None:
    try:
        return boards.parse(text)
    except InvalidBoard:
        return None
