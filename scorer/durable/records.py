"""The records of the durable score log: what a store holds, what the fold reads, what the
rebuild restores from. Plain values, no I/O; this module imports nothing of the package, so
every other part of it (store.py, the backends, fold.py, the rebuild) can be read from here up.

* ``Record``: one applied submission, as the queue carried it;
* ``Action``: one journaled change submissions do not carry (a ban, a correction, a profile, a
  tournament, a close, a badge), as the function that made it journaled it;
* ``Slip``: one applied submission to a defined board (key values, not points), kept whole;
* ``BoardRow``: a player's packed score on a board period, folded from submissions no longer
  kept raw; ``Compaction``: what one compaction changed;
* ``Position``: a raw row's place in the applied order; ``Part``: a share of the players.

How actions reach the log: bans (and the tombstone that keeps a banned player off the boards),
unbans, corrections, profiles beyond the display name, tournaments and their entrants, the
close markers of ended periods and badges are made by other functions of the library, called by
the scorer's operator commands and by any gateway's server-role requests — and a gateway has no
durable store. So each of those functions appends the change to the game's journal stream
(``lb:{g}:journal``) in the same atomic call that makes it: no caller can make the change and
skip the record. The scorer's journal worker (scorer/journal.py) records the entries through a
consumer group, with the guarantee of submissions: apply (done by the function), record,
acknowledge; idempotent by the entry's stream id; an entry whose recorder died is redelivered.
Each entry carries Redis's clock in microseconds (``at``), the clock of the submissions'
``applied``, so the two logs merge into the one order Redis applied them in (an action stamped
the same microsecond as a batch ran before it: a batch's stamp is taken when its MULTI starts).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import orjson

Position = tuple[int, int, int]  # (applied_us, index in its batch, seq): a raw row's place in the applied order
# (i, n): the players of part i of n. The fold is per player, so a log's parts fold apart (each
# in a process of its own: scorer/rebuild/) and their states add up to the whole's.
Part = tuple[int, int]
PARTS = (1, 2, 4, 8, 16)  # how many parts a log can be cut into (the low bits of one byte)

# The journaled functions (lb_ban, lb_unban, ...) this code folds; an entry of another is skipped.
FUNCTIONS = (
    "ban",
    "unban",
    "correction",
    "correct",  # 7e58782's correction of the game's boards (fold.py reads it)
    "profile",
    "tournament",
    "join",
    "close",
    "badge",
    "board",
    "board_delete",
    "board_purge",
)


# Journaled names an earlier release gave a form this code reads under another: 7e58782 journaled
# a correction of a defined board, lb_correct's arguments as ``correction`` has them, as this.
_RENAMED = {"correct_defined": "correction"}


def part_of(player: str, n: int) -> int:
    """Which of ``n`` parts (one of ``PARTS``) a player is in: the low bits of the last byte of
    its UTF-8 form, which each backend computes in SQL too (``Store.scan``'s ``part``)."""
    return player.encode()[-1] % n


class Record(NamedTuple):
    """One applied submission, as the queue carried it (``op`` and scopes ``""`` when absent).

    ``replayed``: Redis answered ``duplicate`` when it was recorded — it had been applied before
    and that first outcome was lost (a crash between apply and record); ``applied_us`` is then
    the replay's, not the first application's (docs/operations.md says what that can change).

    A named tuple, not a dataclass: a rebuild reads a million of them, and a store's row (its
    columns in this order) becomes one with a single C call (``tuple.__new__(Record, row)``)."""

    id: str
    player: str
    points: int
    ts: int
    op: str = ""
    name: str = ""
    region: str = ""
    mode: str = ""
    replayed: bool = False
    applied_us: int = 0  # Redis's clock when the batch that applied it ran
    index: int = 0  # type: ignore[assignment]  # its place in that batch (the name shadows tuple.index)
    # A tournament slip counts on that tournament's boards only (once its definition is known
    # from the journal: fold.py).
    tournament: str = ""


class Slip(NamedTuple):
    """One applied submission to a defined board (a ``board`` field: key values and metadata,
    no points), as the queue carried it. Kept whole, not folded: a rebuild replays it through
    ``lb_submit`` in the order applied, at a moment that gives it the same periods, reached time
    and outcome as then (scorer/rebuild/writes.py)."""

    id: str
    applied_us: int  # Redis's clock when the batch that applied it ran
    index: int  # type: ignore[assignment]  # its place in that batch (the name shadows tuple.index)
    fields: str  # the queue entry's fields, a JSON object of strings

    def entry(self) -> dict[str, str]:
        """The fields lb_submit reads."""
        fields: dict[str, str] = orjson.loads(self.fields)
        return fields


@dataclass(frozen=True, slots=True, order=True)
class Action:
    """One journal entry: ``args`` as the function journaled them (strings)."""

    at: int  # Redis's clock when the function ran, microseconds
    id: str  # the journal entry's stream id: the idempotency key of the record
    fn: str
    args: tuple[str, ...]
    folded: bool = False  # its board and name effect is already in the board rows

    @classmethod
    def parse(cls, stream_id: str, fields: Mapping[str, str]) -> Action | None:
        """The action of a journal entry, or None for an entry this code does not know."""
        try:
            args = orjson.loads(fields["args"])
            at = int(fields["at"])
        except (KeyError, ValueError, orjson.JSONDecodeError):
            return None
        fn = _RENAMED.get(fields.get("fn", ""), fields.get("fn"))
        if fn not in FUNCTIONS or not isinstance(args, list):
            return None
        return cls(at, stream_id, fn, tuple(str(a) for a in args))

    def row(self, game: str) -> tuple[str, str, int, str, str]:
        """As a store writes it: ``game, id, at, fn, args`` (the arguments as a JSON list)."""
        return game, self.id, self.at, self.fn, orjson.dumps(list(self.args)).decode()

    @classmethod
    def of_row(cls, row: Sequence[Any]) -> Action:
        """From ``id, at, fn, args, folded``."""
        fn = _RENAMED.get(str(row[2]), str(row[2]))
        return cls(int(row[1]), str(row[0]), fn, tuple(orjson.loads(row[3])), bool(row[4]))


@dataclass(frozen=True, slots=True)
class BoardRow:
    """One player's packed score on one board period, folded from submissions no longer kept raw."""

    window: str
    period: str
    scope: str
    player: str
    score: int
    expire_at_s: int  # when the board's period expires (0: never); the row goes then


@dataclass(frozen=True, slots=True)
class Compaction:
    """What one ``compact`` call changed: raw rows folded away, board rows written, rows dropped
    because their board expired; and (the recorder's compaction) defined boards' slips dropped
    because every period they wrote to expired."""

    folded: int
    board_rows: int
    expired: int
    slips: int = 0
