"""The rules of ``lb_submit`` for board scores, as a pure fold over recorded submissions.

``Folder`` applies records in the order they were applied to Redis and keeps, per board period,
each player's packed score: the same arithmetic as the function library (leaderboard/lua/
leaderboard.lua: ``plan_submission`` and ``apply_board``), so folding a prefix of the log and
sending the rest through ``lb_submit`` leaves the boards exactly as sending it all would.
tests/test_durable_fold.py holds the two side by side on random histories.

Used where going through Redis is not possible or not needed: compacting the raw log into board
rows (no Redis at hand), and restoring the part of the log older than the idempotency horizon,
which ``lb_submit`` refuses as too old.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from leaderboard import GameConfig
from leaderboard.submission import scopes_of
from leaderboard.windows import Period

from .base import BoardRow, Record

BoardId = tuple[str, str, str]  # window, period label, scope


class Folder:
    def __init__(self, config: GameConfig) -> None:
        self.config = config
        self.boards: dict[BoardId, dict[str, int]] = {}
        self.expire_at: dict[BoardId, int] = {}
        self.names: dict[str, str] = {}
        self.applied = 0
        self.refused = 0  # records the rules refuse on the folded state (points out of range)
        self._specs = [(spec, config.operator_for(spec.name)) for spec in config.window_specs]
        self._periods: dict[tuple[str, int], Period] = {}  # (window, period start) cache

    def load(self, rows: Iterable[BoardRow]) -> None:
        for row in rows:
            board = (row.window, row.period, row.scope)
            self.boards.setdefault(board, {})[row.player] = row.score
            self.expire_at[board] = row.expire_at_s

    def apply(self, records: Sequence[Record]) -> None:
        for record in records:
            self._apply(record)

    def _apply(self, rec: Record) -> None:
        # Plan every board first, as the function does: a refusal writes nothing at all.
        planned: list[tuple[BoardId, int, int | None, str, int, int]] = []
        scopes = scopes_of(rec.region or None, rec.mode or None)
        for spec, default_op in self._specs:
            period = spec.period(rec.ts)
            op = rec.op or default_op
            scale = 1 << spec.shift
            tie = scale - 1 - (rec.ts - period.start_ms) // spec.unit_ms
            for scope in scopes:
                board = (spec.name, period.label, scope)
                old = self.boards.get(board, {}).get(rec.player)
                total = rec.points
                if op == "incr" and old is not None:
                    total = (old >> spec.shift) + rec.points
                if total > spec.max_points:
                    self.refused += 1
                    return
                planned.append((board, total * scale + tie, old, op, total, period.expire_at_s))
        for board, score, old, op, total, expire_at in planned:
            if op == "best":
                write = old is None or score > old
            elif op == "incr" and old is not None and total == old >> self._shift(board):
                write = False  # adding zero keeps the time the total was first reached
            else:
                write = old is None or score != old
            if write:
                self.boards.setdefault(board, {})[rec.player] = score
                self.expire_at[board] = expire_at
        if rec.name:
            self.names[rec.player] = rec.name
        self.applied += 1

    def _shift(self, board: BoardId) -> int:
        return next(spec.shift for spec, _ in self._specs if spec.name == board[0])

    def rows(self, *, now_s: int) -> list[BoardRow]:
        """Every player's score on every board whose period has not expired at ``now_s``."""
        out = []
        for board, members in self.boards.items():
            expire_at = self.expire_at[board]
            if expire_at and expire_at <= now_s:
                continue
            out += [BoardRow(*board, player, score, expire_at) for player, score in members.items()]
        return out
