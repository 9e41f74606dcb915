"""The durable score log: what it stores and the one interface both backends implement.

Redis holds the boards; this store is the notebook behind them. The scorer records every
submission Redis applied, after applying it and before acknowledging it (scorer/consumer.py says
why that order is safe), idempotent by submission id. What is recorded is the submission itself,
not its per-board outcome: the boards are rebuilt by running the same rules again (``fold.py``
and ``lb_submit``), which needs nothing the submission does not carry, and which works too for a
submission whose first outcome was lost in a crash (it is recorded when its redelivery comes back
``duplicate``).

Two tables per store, each keyed by game:

* ``submissions``: the raw log, one row per applied submission id, in the order recorded
  (``seq``). Kept ``LB_DURABLE_RETENTION_DAYS``; older rows are folded into ``board_rows``.
* ``board_rows``: per board period and player, the packed score the folded submissions left
  (plus ``names``: each player's last display name), kept until the board's period expires.

A rebuild reads ``board_rows``, then the raw log in ``seq`` order.
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .fold import Folder


class StoreError(Exception):
    """The store cannot be opened or used (bad URL, unreachable database)."""


@dataclass(frozen=True, slots=True)
class Record:
    """One applied submission, as the queue carried it (``op`` and scopes ``""`` when absent).

    ``replayed``: Redis answered ``duplicate`` when it was recorded — it had been applied before
    and that first outcome was lost (a crash between apply and record)."""

    id: str
    player: str
    points: int
    ts: int
    op: str = ""
    name: str = ""
    region: str = ""
    mode: str = ""
    replayed: bool = False


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

    @abc.abstractmethod
    async def open(self) -> None:
        """Connect and create the tables if missing (idempotent)."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Idempotent."""

    @abc.abstractmethod
    async def record(self, game: str, records: Sequence[Record]) -> int:
        """Append ``records`` in one transaction, ignoring ids already recorded; how many were new.
        Returns only once the rows are durable (committed)."""

    @abc.abstractmethod
    def scan(self, game: str, *, batch: int = 5_000) -> AsyncIterator[list[tuple[int, Record]]]:
        """The raw log in ``seq`` order, in lists of up to ``batch`` ``(seq, record)``."""

    @abc.abstractmethod
    def board_rows(self, game: str, *, now_s: int, batch: int = 5_000) -> AsyncIterator[list[BoardRow]]:
        """The folded board rows whose period has not expired at ``now_s``."""

    @abc.abstractmethod
    async def names(self, game: str) -> dict[str, str]:
        """Each player's last display name among folded submissions."""

    @abc.abstractmethod
    async def last_seq_before(self, game: str, ts: int) -> int:
        """The highest ``seq`` of a raw row timestamped before ``ts`` (0: none)."""

    @abc.abstractmethod
    async def count(self, game: str) -> int:
        """Rows of the raw log."""

    @abc.abstractmethod
    async def compact(self, game: str, *, before_ts: int, now_s: int, folder: Folder) -> Compaction:
        """Fold the oldest raw rows — the longest ``seq`` prefix whose timestamps are all before
        ``before_ts`` — into ``board_rows`` and ``names`` and delete them; drop board rows whose
        period expired at ``now_s``. One transaction, serialised between replicas."""
