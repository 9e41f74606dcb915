"""The rules of ``lb_submit`` for board scores, as a pure fold over recorded submissions.

``Folder`` applies records in the order they were applied to Redis and keeps, per board period,
each player's packed score: the same arithmetic as the function library (lua/
leaderboard.lua: ``plan_submission`` and ``apply_board``), so folding a prefix of the log and
sending the rest through ``lb_submit`` leaves the boards exactly as sending it all would.
tests/test_durable_log.py holds the two side by side on random histories.

Used where going through Redis is not possible or not needed: compacting the raw log into board
rows (no Redis at hand), and restoring the part of the log older than the idempotency horizon,
which ``lb_submit`` refuses as too old.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from leaderboard import GameConfig
from leaderboard.submission import scopes_of
from leaderboard.windows import Period, Window

from .base import BoardRow, Record

BoardId = tuple[str, str, str]  # window, period label, scope
# One window's part of a fast-path route: its period's start, 2**shift, 2**shift - 1, tie unit,
# and the members of each board the submission's scopes reach in that period.
_Leg = tuple[int, int, int, int, list[dict[str, int]]]


class _Slot:
    """One window's current period, with what the arithmetic needs, computed once per period."""

    __slots__ = ("end", "expire_at", "label", "max_points", "members", "scale", "shift", "start", "tie_base", "unit")

    def __init__(self, period: Period) -> None:
        w = period.window
        self.start, self.end, self.label = period.start_ms, period.end_ms, period.label
        self.shift, self.unit, self.max_points = w.shift, w.unit_ms, w.max_points
        self.scale = 1 << w.shift
        self.tie_base = self.scale - 1  # tie = scale - 1 - t
        self.expire_at = period.expire_at_s
        self.members: dict[str, dict[str, int]] = {}  # scope -> the board's members


class Folder:
    """``windows``: the windows folded, each with its default operator (default: the game's)."""

    def __init__(self, config: GameConfig, *, windows: Sequence[tuple[Window, str]] | None = None) -> None:
        self.config = config
        self.boards: dict[BoardId, dict[str, int]] = {}
        self.expire_at: dict[BoardId, int] = {}
        self.names: dict[str, str] = {}
        self.applied = 0
        self.refused = 0  # records the rules refuse on the folded state (points out of range)
        self.tournament_slips = 0  # not folded: a tournament's window is defined in Redis only
        if windows is None:
            windows = [(spec, config.operator_for(spec.name)) for spec in config.window_specs]
        self._specs = list(windows)
        # The period each window was last asked for: the log runs in time order (nearly), so the
        # calendar arithmetic is done once per period, not once per record.
        self._slots: list[_Slot | None] = [None] * len(self._specs)
        self._scopes: dict[tuple[str, str], list[str]] = {}
        # The fast path of ``apply``: a personal-best submission inside every window's current
        # period can neither be refused (its points alone decide that, checked against the
        # lowest cap) nor depend on the state beyond a comparison, so it needs none of the plan.
        # Routes per (region, mode), valid while the slots stay: ``_span`` is where they all hold.
        self._routes: dict[tuple[str, str], list[_Leg]] = {}
        self._span = (0, 0)
        self._cap = min((spec.max_points for spec, _ in self._specs), default=-1)
        self._best_default = all(op == "best" for _, op in self._specs)

    def load(self, rows: Iterable[BoardRow]) -> None:
        for row in rows:
            board = (row.window, row.period, row.scope)
            self.boards.setdefault(board, {})[row.player] = row.score
            self.expire_at[board] = row.expire_at_s

    def merge(self, other: Folder) -> None:
        """Add the boards and names of a folder of other players (another part of the log)."""
        for board, members in other.boards.items():
            self.boards.setdefault(board, {}).update(members)
        self.expire_at.update(other.expire_at)
        self.names.update(other.names)
        self.applied += other.applied
        self.refused += other.refused
        self.tournament_slips += other.tournament_slips

    def apply(self, records: Iterable[Record]) -> None:
        routes, names, cap, best_default = self._routes, self.names, self._cap, self._best_default
        lo, hi = self._span
        fast = 0
        for rec in records:
            _, player, points, ts, op, name, region, mode, _, _, _, tournament = rec
            route = None
            if lo <= ts < hi and points <= cap and not tournament and (op == "best" or (not op and best_default)):
                route = routes.get((region, mode))
            if route is None:
                self._apply(rec)
                lo, hi = self._span
                continue
            for start, scale, base, unit, boards in route:
                score = points * scale + base - (ts - start) // unit
                for members in boards:
                    old = members.get(player)
                    if old is None or score > old:
                        members[player] = score
            if name:
                names[player] = name
            fast += 1
        self.applied += fast

    def _apply(self, rec: Record) -> None:
        if rec.tournament:
            self.tournament_slips += 1
            return
        ts, player = rec.ts, rec.player
        scopes = self._scopes.get((rec.region, rec.mode))
        if scopes is None:
            scopes = self._scopes[rec.region, rec.mode] = scopes_of(rec.region or None, rec.mode or None)
        # Plan every board first, as the function does: a refusal writes nothing at all.
        planned: list[tuple[dict[str, int], int | None, str, int, int, int]] = []
        for w, (spec, default_op) in enumerate(self._specs):
            slot = self._slots[w]
            if slot is None or not slot.start <= ts < slot.end:
                slot = self._slots[w] = _Slot(spec.period(ts))
                self._reroute()
            op = rec.op or default_op
            tie = slot.tie_base - (ts - slot.start) // slot.unit
            for scope in scopes:
                members = slot.members.get(scope)
                if members is None:
                    board = (spec.name, slot.label, scope)
                    members = slot.members[scope] = self.boards.setdefault(board, {})
                    self.expire_at[board] = slot.expire_at
                old = members.get(player)
                total = rec.points
                if op == "incr" and old is not None:
                    total += old >> slot.shift
                if total > slot.max_points:
                    self.refused += 1
                    return
                planned.append((members, old, op, total, total * slot.scale + tie, slot.shift))
        for members, old, op, total, score, shift in planned:
            if old is None:
                members[player] = score
            elif op == "best":
                if score > old:
                    members[player] = score
            elif op == "incr":
                if total != old >> shift:  # adding zero keeps the time the total was first reached
                    members[player] = score
            elif score != old:
                members[player] = score
        if rec.name:
            self.names[rec.player] = rec.name
        self.applied += 1
        # every board its scopes reach in the current periods exists now: later ones take the route
        self._routes.setdefault((rec.region, rec.mode), self._route(scopes))

    def _route(self, scopes: list[str]) -> list[_Leg]:
        return [
            (slot.start, slot.scale, slot.tie_base, slot.unit, [slot.members[scope] for scope in scopes])
            for slot in self._slots
            if slot is not None
        ]

    def _reroute(self) -> None:
        """A window moved to another period: the routes through the old one are gone."""
        self._routes.clear()
        slots = [slot for slot in self._slots if slot is not None]
        if len(slots) < len(self._slots) or not slots:
            self._span = (0, 0)
        else:
            self._span = (max(slot.start for slot in slots), min(slot.end for slot in slots))

    def rows(self, *, now_s: int) -> list[BoardRow]:
        """Every player's score on every board whose period has not expired at ``now_s``."""
        out = []
        for board, members in self.boards.items():
            expire_at = self.expire_at[board]
            if expire_at and expire_at <= now_s:
                continue
            out += [BoardRow(*board, player, score, expire_at) for player, score in members.items()]
        return out
