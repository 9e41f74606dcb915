"""The durable score log: what it stores and the one interface both backends implement.

Redis holds the boards; this store is the notebook behind them. The scorer records every
submission Redis applied, after applying it and before acknowledging it (scorer/consumer.py says
why that order is safe), idempotent by submission id. What is recorded is the submission itself,
not its per-board outcome: the boards are rebuilt by running the same rules again (``fold.py``
and ``lb_submit``), which needs nothing the submission does not carry, and which works too for a
submission whose first outcome was lost in a crash (it is recorded when its redelivery comes back
``duplicate``).

Three tables per store, each keyed by game:

* ``submissions``: the raw log, one row per applied submission id, in the order Redis applied
  them: ``applied`` (Redis's clock when the batch ran, the same for a whole batch, increasing
  from one batch to the next whichever replica sent it), then ``idx`` (the place in its batch),
  then ``seq`` (the order recorded). Kept ``LB_DURABLE_RETENTION_DAYS``; older rows are folded
  into ``board_rows``.

  An id recorded twice keeps the earlier application: with batches applied concurrently, a
  re-sent copy applied later (``duplicate``) can reach the store before its original does, and
  the original then takes its place (``EARLIER``).
* ``board_rows``: per board period and player, the packed score the folded submissions left
  (plus ``names``: each player's last display name), kept until the board's period expires.
* ``actions``: the changes submissions do not carry (bans, corrections, profiles, tournaments,
  closes), journaled by the functions that make them; their rules are in ``actions.py``.

A rebuild reads ``board_rows``, then the raw log in applied order. A ``Position`` is a row's
place in that order, ``(applied, idx, seq)``.
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from .actions import Action
    from .fold import Folder


Position = tuple[int, int, int]  # (applied_us, index in its batch, seq): a raw row's place in the applied order
# (i, n): the players of part i of n. The fold is per player, so a log's parts fold apart (each
# in a process of its own: rebuild.py) and their states add up to the whole's.
Part = tuple[int, int]
PARTS = (1, 2, 4, 8, 16)  # how many parts a log can be cut into (the low bits of one byte)


def part_of(player: str, n: int) -> int:
    """Which of ``n`` parts (one of ``PARTS``) a player is in: the low bits of the last byte of
    its UTF-8 form, which each backend computes in SQL too (``Store.scan``'s ``part``)."""
    return player.encode()[-1] % n


# The upsert of a record whose id is already held: it replaces the row only if it was applied
# earlier (same SQL for both backends).
UPDATE_SET = (
    "player = excluded.player, points = excluded.points, ts = excluded.ts, op = excluded.op, "
    "name = excluded.name, region = excluded.region, mode = excluded.mode, replayed = excluded.replayed, "
    "applied = excluded.applied, idx = excluded.idx, tournament = excluded.tournament"
)
EARLIER = "(excluded.applied, excluded.idx) < (submissions.applied, submissions.idx)"


class StoreError(Exception):
    """The store cannot be opened or used (bad URL, unreachable database)."""


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
    # from the journal: actions.py).
    tournament: str = ""


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
    because their board expired."""

    folded: int
    board_rows: int
    expired: int


class Store(abc.ABC):
    """One backend. Every method is safe to call from several scorer replicas at once."""

    # Errors that mean "the database is not there right now": retried with backoff, the batch
    # staying unacknowledged meanwhile. Anything else is a bug and is not hidden by a retry.
    unavailable: tuple[type[BaseException], ...] = (OSError, TimeoutError)
    url: str  # what open_store opens it from (a rebuild's worker processes open their own)

    @abc.abstractmethod
    async def open(self) -> None:
        """Connect and create the tables if missing (idempotent)."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Idempotent."""

    @abc.abstractmethod
    async def record(self, game: str, records: Sequence[Record]) -> int:
        """Append ``records`` in one transaction; an id already recorded keeps the earlier of its
        two applications (``EARLIER``). Ids must be distinct within the call. Returns the rows
        written, once they are durable (committed)."""

    @abc.abstractmethod
    def scan(
        self,
        game: str,
        *,
        after: Position | None = None,
        through: Position | None = None,
        part: Part | None = None,
        batch: int = 5_000,
    ) -> AsyncIterator[list[Record]]:
        """The raw log in applied order, in lists of up to ``batch`` records: the rows after
        ``after`` and up to ``through`` (positions; None: from the start, to the end), of the
        players of ``part`` (None: all)."""

    @abc.abstractmethod
    async def position(self, game: str, offset: int) -> Position | None:
        """The position of the raw row with ``offset`` rows before it in applied order."""

    @abc.abstractmethod
    def board_rows(
        self, game: str, *, now_s: int, part: Part | None = None, batch: int = 5_000
    ) -> AsyncIterator[list[BoardRow]]:
        """The folded board rows whose period has not expired at ``now_s`` (of the players of
        ``part``; None: all)."""

    @abc.abstractmethod
    async def names(self, game: str) -> dict[str, str]:
        """Each player's last display name among folded submissions."""

    @abc.abstractmethod
    async def last_before(self, game: str, ts: int) -> Position | None:
        """The last position (in applied order) of a raw row timestamped before ``ts``."""

    @abc.abstractmethod
    async def count(self, game: str) -> int:
        """Rows of the raw log."""

    @abc.abstractmethod
    async def record_actions(self, game: str, actions: Sequence[Action]) -> int:
        """Append journaled actions (durable/actions.py) in one transaction; an id already held
        is left as it is. Returns the rows written, once committed."""

    @abc.abstractmethod
    async def actions(self, game: str) -> list[Action]:
        """Every action recorded for ``game``, in the order Redis applied them."""

    @abc.abstractmethod
    async def compact(self, game: str, *, before_ts: int, now_s: int, folder: Folder) -> Compaction:
        """Fold the oldest raw rows — the longest prefix, in applied order, whose timestamps are
        all before ``before_ts`` — into ``board_rows`` and ``names`` and delete them; drop board
        rows whose period expired at ``now_s``. One transaction, serialised between replicas.
        The actions recorded before the first raw row kept are folded too (an ``ActionFolder``
        applies them in order) and marked folded in the same transaction."""
