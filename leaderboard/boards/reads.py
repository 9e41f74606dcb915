"""The reads of one board period (``BoardPeriod``): the calls of ``lb_top``, ``lb_around`` and
``lb_ranks`` with the board's encoding argument (a packed board's shift, a lex board's
``lex:<key count>``), and the decoding of their replies, which have one shape on both
encodings. A ``BoardPeriod`` names any board period a read may name: a definition (the game's
own boards are the definition ``default``, names.py), a window's period and a scope. What
differs between boards is their encoding, decoded here: every read of every board, the game's
own included, is made and decoded by a ``BoardPeriod`` (leaderboard/library/reads.py).

An entry's order decodes to its key values: a lex member's (``decode_member``), a packed
score's (``unpack``). Ranks in the three modes come from the function library, each an
O(log N) count; equal entries (the same values reached at the same time) read by descending
player id on either encoding.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..keys import Keys
from ..profiles import stored as stored_profile
from ..ranking import COMPETITION, ORDINAL, assign_ranks, round_rank, top_percent
from ..results import BoardEntries, Entry, Ranks, Standing
from ..windows import Period
from . import definition as boards
from .encoding import decode_member, key_prefix, unpack

Call = tuple[str, list[str], list[str | int]]  # a function of the library, its keys and arguments


class BoardPeriod:
    """One period of one scope of a board: its keys in Redis, and each read as the call to make
    (lb_top, lb_around, lb_ranks with the board's encoding and rank mode) and the decoding of its
    reply. ``mode``: the rank mode its reads rank in, the definition's unless the game's
    configuration ranks one of the default's windows otherwise (LB_WINDOW_RANK_MODES).
    ``shown``: whether its entries carry their key values and the board's columns (a page
    formats by them); False for the game's boards while the game stores no ``default``, whose
    replies are as they always were (points alone)."""

    def __init__(
        self,
        keys: Keys,
        definition: boards.Definition,
        period: Period,
        scope: str,
        *,
        mode: str | None = None,
        shown: bool = True,
    ) -> None:
        self.keys = keys
        self.definition = definition
        self.shown = shown
        self.period = period
        self.scope = scope
        self.mode = mode or definition.rank_mode
        self.key_count = len(definition.keys)
        self.lex = definition.encoding == boards.LEX
        args = (period.window.name, period.label, scope)
        self.board, self.members, self.distinct = keys.board(*args), keys.members(*args), keys.points(*args)
        self.meta, self.histogram = keys.metadata(*args), keys.histogram(*args)

    @property
    def shift(self) -> int:
        return self.definition.shift(self.period.window.name)

    @property
    def encoding(self) -> str | int:
        """The reads' encoding argument: ``lex:<key count>`` for a lex board, else the shift."""
        return f"lex:{self.key_count}" if self.lex else self.shift

    @property
    def _meta(self) -> list[str]:
        """The metadata hash as a read's optional last key: only where entries carry metadata."""
        return [self.meta] if self.definition.metadata_bytes else []

    def _values(self, order: Any) -> tuple[int, ...]:
        """The key values of an entry's order: a lex member's, or a packed score's."""
        if self.lex:
            return decode_member(self.definition, order)[0]
        return unpack(self.definition, self.period.window.name, int(float(order)))

    def _tie(self, values: tuple[int, ...]) -> object:
        """What equal ranks compare: the key part of a member (or the one packed value)."""
        return key_prefix(self.definition, values) if self.lex else values

    def _entries(
        self, flat: Sequence[Any], first_ordinal: int, first_rank: int, size: int | None = None, first_position: int = 0
    ) -> list[Entry]:
        """The entries of a reply, ranked in the board's mode from the first one's ranks; with
        ``size``, each with its percentile from the first one's position (ordinal in ordinal
        mode, else competition: tied players share one)."""
        # {player, order, profile[, metadata]} per entry on either encoding
        width = 4 if self._meta else 3
        rows = []
        for j in range(0, len(flat), width):
            meta = flat[j + 3] if width == 4 else None
            rows.append((self._values(flat[j + 1]), flat[j], flat[j + 2], None if meta is None else str(meta)))
        ties = [self._tie(r[0]) for r in rows]
        ranks = assign_ranks(self.mode, first_ordinal, first_rank, ties)
        percents: list[float | None] = [None] * len(rows)
        if size is not None:
            kind = ORDINAL if self.mode == ORDINAL else COMPETITION
            percents = [top_percent(p, size) for p in assign_ranks(kind, first_ordinal, first_position, ties)]
        return [
            Entry(rank, player, values[0], stored_profile(profile), percent, self._keys(values), meta)
            for rank, percent, (values, player, profile, meta) in zip(ranks, percents, rows, strict=True)
        ]

    def _keys(self, values: tuple[int, ...]) -> tuple[int, ...] | None:
        return values if self.shown else None

    def top_call(self, n: int) -> Call:
        return "lb_top", [self.board, self.keys.profiles, *self._meta], [n, self.encoding]

    @property
    def columns(self) -> tuple[dict[str, str], ...]:
        if not self.shown:
            return ()
        return tuple({"name": k.name, "direction": k.direction, "display": k.display} for k in self.definition.keys)

    def top(self, flat: Sequence[Any]) -> BoardEntries:
        return BoardEntries(self.period, self._entries(flat, 1, 1), self.mode, columns=self.columns)

    def around_call(self, player: str, k: int) -> Call:
        keys = [self.board, self.keys.profiles, self.distinct, self.members, *self._meta]
        return "lb_around", keys, [player, k, self.mode, self.encoding]

    def around(self, flat: Sequence[Any]) -> BoardEntries:
        if not flat:
            return BoardEntries(self.period, [], self.mode, columns=self.columns)
        first_ordinal, size = int(flat[0]), int(flat[3])
        entries = self._entries(flat[4:], first_ordinal, int(flat[1]), size, int(flat[2]))
        return BoardEntries(self.period, entries, self.mode, size, self.columns)

    def ranks_call(self, players: Sequence[str], deep_from: int = 0) -> Call:
        """lb_ranks of ``players``: a rank the board's histogram places beyond ``deep_from`` (0:
        none; dense ranks never) is that estimate, O(1) a player instead of O(log N), on either
        encoding (a lex board's histogram buckets its first key)."""
        keys = [self.board, self.distinct, self.histogram, self.members]
        return "lb_ranks", keys, [self.mode, self.encoding, deep_from, *players]

    def ranks(self, players: Sequence[str], flat: Sequence[Any], joined: Sequence[Any]) -> Ranks:
        """Each player's standing. An estimate (``ranks_call``'s deep ranks) is shown rounded to
        three significant digits and marked ``approx`` (ranking.round_rank), so a push changes
        only when the shown number does; its percentile is the estimate's, kept in range."""
        size = int(flat[0])
        standings = []
        for i, player in enumerate(players):
            rank, order, position, approx = flat[1 + 4 * i : 5 + 4 * i]
            profile = stored_profile(joined[i])
            if not rank:
                standings.append(Standing(player, None, None, profile))
                continue
            values = self._values(order)
            # an estimate can overshoot the board's size by its rounding: the percentile stays in range
            percent = top_percent(min(int(position), size), size)
            deep = int(approx) == 1
            shown = round_rank(int(rank)) if deep else int(rank)
            standings.append(Standing(player, shown, values[0], profile, percent, approx=deep, keys=self._keys(values)))
        return Ranks(self.period, size, standings, self.mode)
