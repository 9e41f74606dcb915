"""The rules of the function library, as a pure fold over the durable log.

``Folder`` applies recorded submissions in the order they were applied to Redis and keeps, per
board period, each player's packed score: the same arithmetic as ``lb_submit`` (lua/
submit.lua: ``plan_packed`` and ``apply``), so folding a prefix of the log and
sending the rest through ``lb_submit`` leaves the boards exactly as sending it all would.
tests/test_durable_log.py holds the two side by side on random histories.

``ActionFolder`` merges in the journaled actions (records.py), in the order Redis applied both,
with the rules of each function:

* ``ban``: off every board (a ban reaches every board of the game), tombstone set; the
  submissions refused meanwhile were never applied, so they are not in the log;
* ``unban``: tombstone lifted; ``correction`` of the game's boards (and 7e58782's ``correct``):
  the board records' arithmetic of lb_correct (the time part kept, or placed at the call's
  clock); ``profile``: fields set or cleared;
* ``tournament`` / ``join``: definitions and entrants, and a tournament's slips then fold onto
  its boards like any window's;
* ``close``: the period's close marker and its entry in the window's finals;
* ``badge``: awards the badge worker made (scorer/badges.py journals first awards): a union;
* ``board`` / ``board_delete``: a board definition stored or deleted (the last one holds; a
  deleted one is remembered until its id is created again, as lb_board_delete keeps it), and the
  boards' version counter (one step per change, as the functions count them);
* ``correction`` of a defined board: nothing here (``replayed``) — a defined board's entries
  follow the function library's rules, so the rebuild replays it through ``lb_correct`` among
  the slips (rebuild/writes.py).

What the actions leave beyond boards and names (tombstones, avatars and countries, tournaments,
entrants, closes, badges) is kept in a ``Restorable``, which the rebuild writes to Redis.

Used where going through Redis is not possible or not needed: compacting the raw log into board
rows (no Redis at hand: the actions among the rows folded are folded in the same transaction and
marked ``folded``, so a rebuild applies only the rest of their effect, which no board row
carries), and restoring the part of the log older than the idempotency horizon, which
``lb_submit`` refuses as too old.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from leaderboard import GameConfig
from leaderboard.batch import DEFINITION_FIELDS, POINTS_SPEC
from leaderboard.keys import GLOBAL_SCOPE, defined_of
from leaderboard.submission import scopes_of
from leaderboard.windows import TOURNAMENT_PREFIX, Period, Window, tournament_window
from leaderboard.windows import window as window_spec

from .records import Action, BoardRow, Record, part_of

BoardId = tuple[str, str, str]  # window, period label, scope
# Actions whose place among the submissions changes what the submissions leave: a ban (and the
# tombstone lb_submit checks), an unban, a correction, and a profile write that sets the name
# (a submission's name overwrites it, and the other way round). The others (tournaments, entrants,
# closes, badges, avatars and countries) can be written as their final state before later
# submissions are replayed: a replayed slip was applied, so its tournament and entry existed.
ORDERED = frozenset({"ban", "unban", "correct"})
_CORRECT_FIELDS = 7  # per board: version field, start_ms, end_ms, shift, unit_ms, expire_at_s, rank mode
# Where a correction's board records start: after lb_correct's arguments (player, values, metadata
# mode and value, actor, reason, now_ms, activity_maxlen), its one definition record; in 7e58782's
# ``correct``, after player, points, actor, reason and now_ms.
_CORRECTION_RECORD = 9
_CORRECTION_BOARDS, _CORRECT_BOARDS = _CORRECTION_RECORD + len(DEFINITION_FIELDS), 5
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

    def take(self, actions: Iterable[Action]) -> None:
        """A plain fold has no rules for journaled actions: it would fold the submissions around
        them as if they had not happened (and drop tournament slips), so it refuses them (a
        compaction handing it some is rolled back)."""
        if taken := list(actions):
            raise TypeError(f"{len(taken)} journaled actions to fold: the compaction needs an ActionFolder")

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


# ---------------------------------------------------------------- the journaled actions


@dataclass(slots=True)
class Close:
    """A closed period: its marker's value and expiry, and its entry in the finals ('' if none)."""

    window: str
    period: str
    closed_ms: int
    expire_at_s: int
    kept: int
    final: str
    scope: str | None = None  # a defined board's (board:<id>): its own marker and finals


@dataclass(slots=True)
class Restorable:
    """What the actions leave that no board row carries, as the rebuild writes it."""

    tombstones: dict[str, dict[str, Any]] = field(default_factory=dict)  # player -> {"by","reason","at"}
    extras: dict[str, dict[str, str]] = field(default_factory=dict)  # player -> {"avatar","country"}
    tournaments: dict[str, tuple[int, int]] = field(default_factory=dict)  # id -> (start_ms, end_ms)
    entrants: dict[str, tuple[set[str], int]] = field(default_factory=dict)  # id -> (players, expire_at_s)
    closes: list[Close] = field(default_factory=list)  # in the order they were made
    badges: dict[str, set[str]] = field(default_factory=dict)  # player -> badges awarded
    boards: dict[str, str] = field(default_factory=dict)  # board id -> definition JSON
    deleted_boards: dict[str, str] = field(default_factory=dict)  # board id -> definition JSON when deleted
    board_changes: int = 0  # lb_board_put / lb_board_delete calls that changed the boards hash
    # (window, period) -> players a ban took off its global board: still in its distinct-player log
    counted: dict[tuple[str, str], set[str]] = field(default_factory=dict)
    # (window, period) -> players a correction put on its global board and who have not submitted
    # in that period since: on the board, but not in its distinct-player log (lb_correct adds none)
    uncounted: dict[tuple[str, str], set[str]] = field(default_factory=dict)


_PER_PLAYER = frozenset({"ban", "unban", "correct", "correction", "profile"})  # their first argument is the player


def shares(actions: Iterable[Action], n: int) -> list[list[Action]]:
    """The actions the folder of each of ``n`` parts of the players needs (records.part_of): a
    player's bans, unbans, corrections and profiles to that player's part; the tournaments'
    definitions to every part (their slips fold on them); entrants, closes and badges, which
    touch no board, to the first. ``ActionFolder.merge`` adds the parts' states up."""
    out: list[list[Action]] = [[] for _ in range(n)]
    for action in actions:
        if action.fn in _PER_PLAYER:
            out[part_of(action.args[0], n)].append(action)
        elif action.fn == "tournament":
            for share in out:
                share.append(action)
        else:
            out[0].append(action)
    return out


def ordered(action: Action) -> bool:
    """Whether ``action`` must keep its place among the submissions (``ORDERED``)."""
    return (
        action.fn in ORDERED
        or (action.fn == "profile" and "name" in action.args[1::2])
        or (action.fn == "correction" and not replayed(action))
    )


def replayed(action: Action) -> bool:
    """Whether ``action`` is a correction a rebuild replays through lb_correct (rebuild/writes.py)
    instead of folding: of a defined board, or of the game's boards under a stored default of
    another shape than the configured game's points (their slips are replayed too). The fold
    keeps the game's packed points only (one call corrects the boards of one definition)."""
    a = action.args
    if action.fn != "correction" or len(a) <= _CORRECTION_BOARDS:
        return False
    _, _, scope = a[_CORRECTION_BOARDS].split(":", 2)  # the first board's version field
    key_spec = a[_CORRECTION_RECORD + DEFINITION_FIELDS.index("key_spec")]
    return defined_of(scope) is not None or key_spec != POINTS_SPEC


def newest_ordered(actions: Iterable[Action]) -> int | None:
    """The stamp of the newest of ``actions`` that must keep its place (None: none)."""
    return max((a.at for a in actions if ordered(a)), default=None)


class ActionFolder(Folder):
    """``Folder`` with the journaled actions merged in, in the order Redis applied both.

    ``take(actions)`` queues actions; ``apply(records)`` applies every queued action stamped at
    or before each record first (and folds tournament slips onto their tournament's boards);
    ``finish()`` (and ``rows()``) applies the rest."""

    def __init__(self, config: GameConfig, actions: Iterable[Action] = ()) -> None:
        super().__init__(config)
        self.state = Restorable()
        self.actions = 0  # actions applied
        self._pending: list[Action] = []
        self._tournament_folders: dict[str, Folder] = {}
        self._corrected_in: set[str] = set()  # the players of state.uncounted
        self.take(actions)

    def take(self, actions: Iterable[Action]) -> None:
        for action in actions:
            heapq.heappush(self._pending, action)
        if self._pending:
            # From the first action on, records go through the merge; until then ``apply`` is the
            # plain fold's own, with no layer in between: a rebuild hands it records one by one.
            self.apply = self._merge  # type: ignore[method-assign]

    @property
    def last_pending(self) -> int | None:
        """The stamp of the newest action not applied yet that must be applied in order with the
        submissions (``ordered``; None: none)."""
        return newest_ordered(self._pending)

    def _merge(self, records: Iterable[Record]) -> None:
        pending = self._pending
        run: list[Record] = []
        for rec in records:
            if (pending and pending[0].at <= rec.applied_us) or rec.tournament:
                if run:
                    super().apply(run)
                    run = []
                while pending and pending[0].at <= rec.applied_us:
                    self._act(heapq.heappop(pending))
            if self._corrected_in and rec.player in self._corrected_in:  # after the corrections before it
                self._counted(rec)
            if rec.tournament:
                self._fold_tournament_slip(rec)
                continue
            run.append(rec)
        if run:
            super().apply(run)

    def finish(self) -> None:
        while self._pending:
            self._act(heapq.heappop(self._pending))

    def merge(self, other: Folder) -> None:
        """Add the state of another part's folder (its players are not this one's: ``shares``)."""
        super().merge(other)
        if not isinstance(other, ActionFolder):
            return  # no actions: boards and names only
        self.actions += other.actions
        mine, theirs = self.state, other.state
        # keyed by player (each in one part only), or the same tournaments' definitions in each
        mine.tombstones.update(theirs.tombstones)
        mine.extras.update(theirs.extras)
        mine.badges.update(theirs.badges)
        mine.tournaments.update(theirs.tournaments)
        for tournament, (entrants, expire_at) in theirs.entrants.items():
            mine.entrants.setdefault(tournament, (set(), expire_at))[0].update(entrants)
        mine.closes += theirs.closes
        mine.boards.update(theirs.boards)  # board definitions are in the first part only (shares)
        mine.deleted_boards.update(theirs.deleted_boards)
        mine.board_changes += theirs.board_changes
        for period_sets, their_sets in ((mine.counted, theirs.counted), (mine.uncounted, theirs.uncounted)):
            for period, players in their_sets.items():
                period_sets.setdefault(period, set()).update(players)
        self._corrected_in |= other._corrected_in

    def rows(self, *, now_s: int) -> list[BoardRow]:
        self.finish()
        return super().rows(now_s=now_s)

    # ------------------------------------------------------------------ the functions' rules

    def _act(self, action: Action) -> None:
        self.actions += 1
        a, state = action.args, self.state
        if action.fn == "ban":
            player, by, reason, now = a[0], a[1], a[2], int(a[3])
            state.tombstones[player] = {"by": by, "reason": reason, "at": now}
            if not action.folded:
                for (window, period, scope), members in self.boards.items():
                    if members.pop(player, None) is not None and scope == GLOBAL_SCOPE:
                        # lb_ban leaves the distinct-player log alone: it still counts them
                        state.counted.setdefault((window, period), set()).add(player)
        elif action.fn == "unban":
            state.tombstones.pop(a[0], None)
        elif action.fn == "correct" and not action.folded:
            self._correct(a[0], a[1], int(a[4]), a[_CORRECT_BOARDS:])
        elif action.fn == "correction" and not action.folded and not replayed(action):
            self._correct(a[0], a[1], int(a[6]), a[_CORRECTION_BOARDS:])
        elif action.fn == "profile":
            player = a[0]
            for name, value in zip(a[1::2], a[2::2], strict=True):
                if name == "name":
                    if not action.folded:  # a folded name is in the names table already
                        self.names[player] = value  # '' clears it
                elif value:
                    state.extras.setdefault(player, {})[name] = value
                else:
                    state.extras.get(player, {}).pop(name, None)
        elif action.fn == "tournament":
            state.tournaments[a[0]] = (int(a[1]), int(a[2]))
        elif action.fn == "join":
            players, _ = state.entrants.get(a[0], (set(), 0))
            players.update(a[2:])
            state.entrants[a[0]] = (players, int(a[1]))
        elif action.fn == "board":
            state.boards[a[0]] = a[1]
            state.deleted_boards.pop(a[0], None)
            state.board_changes += 1
        elif action.fn == "board_delete":
            old = state.boards.pop(a[0], None)
            if deleted := a[1] if len(a) > 1 else old:  # journaled with the definition since it is kept
                state.deleted_boards[a[0]] = deleted
            state.board_changes += 1
        elif action.fn == "board_purge":  # its boards held no entries left: nothing to check a create against
            state.deleted_boards.pop(a[0], None)
        elif action.fn == "badge":
            for player, badge in zip(a[0::2], a[1::2], strict=True):
                state.badges.setdefault(player, set()).add(badge)
        elif action.fn == "close":
            window, period, expire_at, kept, now, final = a[0], a[1], int(a[2]), int(a[3]), int(a[4]), a[5]
            state.closes.append(Close(window, period, now, expire_at, kept, final, a[6] if len(a) > 6 else None))

    def _correct(self, player: str, points: str, now: int, records: Sequence[str]) -> None:
        """lb_correct's arithmetic on the game's boards (its board ``records``): a player on the
        board keeps the time part of their score; one not on it is placed as of the call's clock
        (``now``), clamped into the board's period; ``points`` '' takes the player off."""
        for i in range(0, len(records), _CORRECT_FIELDS):
            board_field, start, end, shift, unit, expire_at = records[i : i + 6]
            window, period, scope = board_field.split(":", 2)
            board = (window, period, scope)
            members = self.boards.setdefault(board, {})
            if points == "":  # taken off; lb_correct leaves the distinct-player log alone, as lb_ban does
                if members.pop(player, None) is not None and scope == GLOBAL_SCOPE:
                    self.state.counted.setdefault((window, period), set()).add(player)
                continue
            self.expire_at.setdefault(board, int(expire_at))
            scale = 1 << int(shift)
            old = members.get(player)
            if old is not None:
                tie = old % scale
            else:
                at = min(max(now, int(start)), int(end) - 1)
                tie = scale - 1 - (at - int(start)) // int(unit)
            members[player] = int(points) * scale + tie
            if old is None and scope == GLOBAL_SCOPE:
                self.state.uncounted.setdefault((window, period), set()).add(player)
                self._corrected_in.add(player)

    def _counted(self, rec: Record) -> None:
        """A submission of a player a correction put on a board: counted in its period from now."""
        if rec.tournament:
            label, names = rec.tournament, [TOURNAMENT_PREFIX + rec.tournament]
        else:
            label, names = "", [spec.name for spec in self.config.window_specs]
        for name in names:
            period = label or window_spec(name).period(rec.ts).label
            self.state.uncounted.get((name, period), set()).discard(rec.player)

    def _fold_tournament_slip(self, rec: Record) -> None:
        """A slip that was applied to a tournament's boards: folded like any window's, once the
        tournament's definition is known (an unknown one is counted, as before journals)."""
        folder = self._tournament_folders.get(rec.tournament)
        if folder is None:
            span = self.state.tournaments.get(rec.tournament)
            if span is None:
                self.tournament_slips += 1
                return
            # the same arithmetic on the tournament's one window, writing into the same boards
            folder = Folder(self.config, windows=[(tournament_window(rec.tournament, *span), self.config.operator)])
            folder.boards, folder.expire_at, folder.names = self.boards, self.expire_at, self.names
            self._tournament_folders[rec.tournament] = folder
        before = folder.applied
        folder.apply([rec._replace(tournament="")])
        self.applied += folder.applied - before
        self.refused += folder.refused
        folder.refused = 0
