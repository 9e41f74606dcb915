"""The model of a board (``Board``): one board period in plain Python, the specification of the
ordering rules every encoding and every read of the function library is tested against, and
``combine``, the values a submission leaves stored. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..ranking import COMPETITION, DENSE, ORDINAL
from .definition import Definition, _fail


def combine(definition: Definition, old: tuple[int, ...] | None, new: tuple[int, ...]) -> tuple[int, ...]:
    """The stored values after a submission of ``new`` over ``old`` (None: no entry yet).

    Without per-key operators the board's operator acts on the whole tuple: ``best`` keeps the
    better tuple in board order, ``set`` overwrites, ``incr`` adds key by key. With per-key
    operators each key follows its own: ``best`` keeps the better value in that key's direction.
    InvalidBoard(key_out_of_range) when an ``incr`` leaves the key's bounds.

    When the time moves (``Board.submit``, as the encodings write it): ``best`` and ``set``
    compare the values *and* the time they were reached, as the board orders them, so a slip
    reaching the same values earlier (tie ``first``) takes the earlier time under ``best``, and
    ``set`` writes the slip's time; ``incr`` and per-key operators move the time when the values
    change (adding zero keeps it)."""
    if old is None:
        return new
    per_key = any(k.operator is not None for k in definition.keys)
    if not per_key and definition.operator == "best":
        return new if order_key(definition, new) < order_key(definition, old) else old
    out = []
    for i, key in enumerate(definition.keys):
        op = definition.operator_of(i)
        if op == "set":
            value = new[i]
        elif op == "incr":
            value = old[i] + new[i]
            if not key.min <= value <= key.max:
                raise _fail("key_out_of_range", f"key {key.name} would be {value}, outside {key.min}..{key.max}")
        else:
            better = new[i] > old[i] if key.direction == "desc" else new[i] < old[i]
            value = new[i] if better else old[i]
        out.append(value)
    return tuple(out)


def order_key(definition: Definition, values: Sequence[int]) -> tuple[int, ...]:
    """Smaller is better."""
    return tuple(-v if k.direction == "desc" else v for k, v in zip(definition.keys, values, strict=True))


@dataclass(slots=True)
class Board:
    """One board period in plain Python: the specification every encoding is tested against.
    Equal values rank by the time they were reached, then by player id, descending (bytewise)
    on either encoding: Redis orders equal scores by member and a packed board is read highest
    first, and a lex member's player part is written to read the same way. A packed board's
    time counts in its window's tie unit (``unit_ms``)."""

    definition: Definition
    entries: dict[str, tuple[tuple[int, ...], int]] = field(default_factory=dict)  # player -> (values, reached)
    unit_ms: int = 1

    def submit(self, player: str, values: tuple[int, ...], ts_ms: int) -> None:
        """A slip of ``values`` reached at ``ts_ms``. The reached time moves as docs/data-model.md
        states: ``best`` takes the slip when its values and time rank higher together (equal
        values reached earlier under tie ``first``, later under ``last``), ``set`` when either
        differs, ``incr`` and per-key operators only when the stored values change."""
        old = self.entries.get(player)
        if old is None:
            self.entries[player] = (values, ts_ms)
            return
        d = self.definition
        if not any(k.operator is not None for k in d.keys) and d.operator != "incr":
            mine, theirs = self._place(values, ts_ms), self._place(*old)
            if (d.operator == "best" and mine < theirs) or (d.operator == "set" and mine != theirs):
                self.entries[player] = (values, ts_ms)
            return
        stored = combine(d, old[0], values)
        if stored != old[0]:
            self.entries[player] = (stored, ts_ms)

    def _place(self, values: tuple[int, ...], ts_ms: int) -> tuple[Any, ...]:
        t = ts_ms // self.unit_ms
        return (order_key(self.definition, values), t if self.definition.tie == "first" else -t)

    def sort_key(self, player: str) -> tuple[Any, ...]:
        name = (*(255 - b for b in player.encode()), 256)  # descending bytes, on every encoding
        return (*self._place(*self.entries[player]), name)

    def ordered(self) -> list[str]:
        return sorted(self.entries, key=self.sort_key)

    def top(self, n: int) -> list[tuple[str, tuple[int, ...]]]:
        return [(p, self.entries[p][0]) for p in self.ordered()[:n]]

    def rank(self, player: str, mode: str | None = None) -> int | None:
        if player not in self.entries:
            return None
        mode = mode or self.definition.rank_mode
        mine = order_key(self.definition, self.entries[player][0])
        if mode == ORDINAL:
            return self.ordered().index(player) + 1
        above = [order_key(self.definition, v) for v, _ in self.entries.values()]
        if mode == COMPETITION:
            return 1 + sum(1 for k in above if k < mine)
        assert mode == DENSE
        return 1 + len({k for k in above if k < mine})
