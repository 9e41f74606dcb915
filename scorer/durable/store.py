"""The durable score log: what it stores and the one interface both backends (sqlite.py,
postgres.py) implement, in terms of the records of records.py.

Redis holds the boards; this store is the notebook behind them. The scorer records every
submission Redis applied, after applying it and before acknowledging it (scorer/consumer.py says
why that order is safe), idempotent by submission id. What is recorded is the submission itself,
not its per-board outcome: the boards are rebuilt by running the same rules again (``fold.py``
and ``lb_submit``), which needs nothing the submission does not carry, and which works too for a
submission whose first outcome was lost in a crash (it is recorded when its redelivery comes back
``duplicate``).

Four tables per store, each keyed by game:

* ``submissions``: the raw log, one row per applied submission id, in the order Redis applied
  them: ``applied`` (Redis's clock when the batch ran, the same for a whole batch, increasing
  from one batch to the next whichever replica sent it), then ``idx`` (the place in its batch),
  then ``seq`` (the order recorded). Kept ``LB_DURABLE_RETENTION_DAYS``; older rows are folded
  into ``board_rows``.

  An id recorded twice keeps the earlier application: with batches applied concurrently, a
  re-sent copy applied later (``duplicate``) can reach the store before its original does, and
  the original then takes its place.
* ``board_rows``: per board period and player, the packed score the folded submissions left
  (plus ``names``: each player's last display name), kept until the board's period expires.
* ``actions``: the changes submissions do not carry (bans, corrections, profiles, tournaments,
  closes), journaled by the functions that make them (records.py says how); their rules are
  in ``fold.py``.
* ``slips``: the submissions to defined boards (``records.Slip``: key values, not points), whole,
  one row per id (the earlier application kept, as in ``submissions``). They are not folded by a
  compaction (a defined board's rules are the function library's: a rebuild replays them through
  it); each is given, at the compaction after it was recorded, the time the last board period it
  wrote to expires (``expire_at``, from the definition of its time: lifetimes.py; NULL until
  then, 0 for never), and is deleted then, as board rows are. A store made before this table
  gets it on open, and the ``expire_at`` column too.

A rebuild reads ``board_rows``, then the raw log in applied order. A ``Position`` is a row's
place in that order, ``(applied, idx, seq)``.
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from typing import Protocol

from .records import Action, BoardRow, Compaction, Part, Position, Record, Slip


class StoreError(Exception):
    """The store cannot be opened or used (bad URL, unreachable database)."""


class Fold(Protocol):
    """What a compaction folds the oldest rows with: the rules of the function library
    (``fold.ActionFolder``; a plain ``fold.Folder`` refuses actions)."""

    names: dict[str, str]  # each player's last display name ('' when cleared)

    def load(self, rows: Iterable[BoardRow]) -> None: ...

    def take(self, actions: Iterable[Action]) -> None: ...

    def apply(self, records: Iterable[Record]) -> None: ...

    def rows(self, *, now_s: int) -> list[BoardRow]: ...


class Store(abc.ABC):
    """One backend. Every method is safe to call from several scorer replicas at once."""

    # Errors that mean "the database is not there right now": retried with backoff, the batch
    # staying unacknowledged meanwhile. Anything else is a bug and is not hidden by a retry.
    unavailable: tuple[type[BaseException], ...] = (OSError, TimeoutError)
    url: str  # what open_store opens it from (a rebuild's worker processes open their own)
    # Transactions of ``record`` one process runs at once (the recorder's group commits): more
    # than one where the database overlaps them, each commit's wait for the disk with the next
    # one's rows.
    writers: int = 1

    @abc.abstractmethod
    async def open(self) -> None:
        """Connect and create the tables if missing (idempotent)."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Idempotent."""

    @abc.abstractmethod
    async def record(self, game: str, records: Sequence[Record]) -> int:
        """Append ``records``; an id already recorded keeps the earlier of its two applications
        (by ``applied_us, index``). Ids must be distinct within the call. Returns the rows written,
        once they are all durable (committed: in one transaction, or in a few whose rows written
        again change nothing, postgres.py)."""

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
        """Append journaled actions in one transaction; an id already held
        is left as it is. Returns the rows written, once committed."""

    @abc.abstractmethod
    async def actions(self, game: str) -> list[Action]:
        """Every action recorded for ``game``, in the order Redis applied them."""

    @abc.abstractmethod
    async def record_slips(self, game: str, slips: Sequence[Slip]) -> int:
        """Append defined boards' slips in one transaction; an id already held keeps the earlier
        of its two applications. Returns the rows written, once committed."""

    @abc.abstractmethod
    async def slips(self, game: str) -> list[Slip]:
        """Every defined board's slip recorded for ``game``, in the order Redis applied them."""

    @abc.abstractmethod
    async def prune_slips(self, game: str, *, now_s: int, lifetime: Callable[[Slip], int]) -> int:
        """Give each slip not yet given one its ``expire_at`` (``lifetime``: Unix seconds, 0 for
        never) and delete the slips expired at ``now_s``; the slips deleted. One transaction."""

    @abc.abstractmethod
    async def compact(self, game: str, *, before_ts: int, now_s: int, folder: Fold) -> Compaction:
        """Fold the oldest raw rows — the longest prefix, in applied order, whose timestamps are
        all before ``before_ts`` — into ``board_rows`` and ``names`` and delete them; drop board
        rows whose period expired at ``now_s``. One transaction, serialised between replicas.
        The actions recorded before the first raw row kept are handed to ``folder`` too (its
        ``take``; an ``ActionFolder`` applies them in order) and marked folded in the same
        transaction."""
