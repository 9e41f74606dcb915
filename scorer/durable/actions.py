"""The journaled changes in the durable log: operator actions, profiles, tournaments, closes.

Submissions are not the only state a rebuild must bring back. Bans (and the tombstone that keeps
a banned player off the boards), unbans, corrections, profiles beyond the display name,
tournaments and their entrants, and the close markers of ended periods are made by other
functions of the library, called by the scorer's operator commands and by any gateway's
server-role requests — and a gateway has no durable store. So each of those functions appends
the change to the game's journal stream (``lb:{g}:journal``) in the same atomic call that makes
it: no caller can make the change and skip the record. The scorer's journal worker
(scorer/journal.py) records the entries here through a consumer group, with the guarantee of
submissions: apply (done by the function), record, acknowledge; idempotent by the entry's
stream id; an entry whose recorder died is redelivered. Each entry carries Redis's clock in
microseconds (``at``), the clock of the submissions' ``applied``, so the two logs merge into
the one order Redis applied them in (an action stamped the same microsecond as a batch ran
before it: a batch's stamp is taken when its MULTI starts).

One table, ``actions`` (game, id, at, fn, args JSON, folded). ``ActionFolder`` extends the
fold of submissions (``Folder``) with the rules of each function:

* ``ban``: off every board (a ban reaches every board of the game), tombstone set; the
  submissions refused meanwhile were never applied, so they are not in the log;
* ``unban``: tombstone lifted; ``correct``: the board records' arithmetic of lb_correct (the
  time part kept, or placed at the call's clock); ``profile``: fields set or cleared;
* ``tournament`` / ``join``: definitions and entrants, and a tournament's slips then fold onto
  its boards like any window's;
* ``close``: the period's close marker and its entry in the window's finals;
* ``badge``: awards the badge worker made (scorer/badges.py journals first awards): a union.

Compaction folds the log's oldest submissions into board rows (base.py): the actions among them
are folded in the same transaction and marked ``folded``, so their effect on boards and names is
in the rows and a rebuild applies only the rest of their effect (tombstones, avatars and
countries, tournaments, entrants, closes), which no board row carries.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from leaderboard import GameConfig
from leaderboard.keys import GLOBAL_SCOPE, Keys
from leaderboard.windows import TOURNAMENT_PREFIX, tournament_window
from leaderboard.windows import window as window_spec

from .base import BoardRow, Record, part_of
from .fold import Folder

FUNCTIONS = ("ban", "unban", "correct", "profile", "tournament", "join", "close", "badge")
# Actions whose place among the submissions changes what the submissions leave: a ban (and the
# tombstone lb_submit checks), an unban, a correction, and a profile write that sets the name
# (a submission's name overwrites it, and the other way round). The others (tournaments, entrants,
# closes, badges, avatars and countries) can be written as their final state before later
# submissions are replayed: a replayed slip was applied, so its tournament and entry existed.
ORDERED = frozenset({"ban", "unban", "correct"})
_CORRECT_FIELDS = 7  # per board: version field, start_ms, end_ms, shift, unit_ms, expire_at_s, rank mode

SQLITE_SCHEMA = """
CREATE TABLE IF NOT EXISTS actions (
    game TEXT NOT NULL, id TEXT NOT NULL, at INTEGER NOT NULL, fn TEXT NOT NULL, args TEXT NOT NULL,
    folded INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (game, id)
) WITHOUT ROWID;
"""
POSTGRES_SCHEMA = """
CREATE TABLE IF NOT EXISTS actions (
    game text NOT NULL, id text NOT NULL, at bigint NOT NULL, fn text NOT NULL, args text NOT NULL,
    folded boolean NOT NULL DEFAULT false,
    PRIMARY KEY (game, id)
);
"""


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
        if fields.get("fn") not in FUNCTIONS or not isinstance(args, list):
            return None
        return cls(at, stream_id, fields["fn"], tuple(str(a) for a in args))

    def row(self, game: str) -> tuple[str, str, int, str, str]:
        return game, self.id, self.at, self.fn, orjson.dumps(list(self.args)).decode()

    @classmethod
    def of_row(cls, row: Sequence[Any]) -> Action:
        """From ``id, at, fn, args, folded``."""
        return cls(int(row[1]), str(row[0]), str(row[2]), tuple(orjson.loads(row[3])), bool(row[4]))


@dataclass(slots=True)
class Close:
    """A closed period: its marker's value and expiry, and its entry in the finals ('' if none)."""

    window: str
    period: str
    closed_ms: int
    expire_at_s: int
    kept: int
    final: str


@dataclass(slots=True)
class Restorable:
    """What the actions leave that no board row carries, as the rebuild writes it."""

    tombstones: dict[str, dict[str, Any]] = field(default_factory=dict)  # player -> {"by","reason","at"}
    extras: dict[str, dict[str, str]] = field(default_factory=dict)  # player -> {"avatar","country"}
    tournaments: dict[str, tuple[int, int]] = field(default_factory=dict)  # id -> (start_ms, end_ms)
    entrants: dict[str, tuple[set[str], int]] = field(default_factory=dict)  # id -> (players, expire_at_s)
    closes: list[Close] = field(default_factory=list)  # in the order they were made
    badges: dict[str, set[str]] = field(default_factory=dict)  # player -> badges awarded
    # (window, period) -> players a ban took off its global board: still in its distinct-player log
    counted: dict[tuple[str, str], set[str]] = field(default_factory=dict)
    # (window, period) -> players a correction put on its global board and who have not submitted
    # in that period since: on the board, but not in its distinct-player log (lb_correct adds none)
    uncounted: dict[tuple[str, str], set[str]] = field(default_factory=dict)


_PER_PLAYER = frozenset({"ban", "unban", "correct", "profile"})  # their first argument is the player


def shares(actions: Iterable[Action], n: int) -> list[list[Action]]:
    """The actions the folder of each of ``n`` parts of the players needs (base.part_of): a
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
    return action.fn in ORDERED or (action.fn == "profile" and "name" in action.args[1::2])


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
        elif action.fn == "correct":
            if not action.folded:
                self._correct(a)
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
        elif action.fn == "badge":
            for player, badge in zip(a[0::2], a[1::2], strict=True):
                state.badges.setdefault(player, set()).add(badge)
        elif action.fn == "close":
            window, period, expire_at, kept, now, final = a[0], a[1], int(a[2]), int(a[3]), int(a[4]), a[5]
            state.closes.append(Close(window, period, now, expire_at, kept, final))

    def _correct(self, a: tuple[str, ...]) -> None:
        """lb_correct's arithmetic: a player on the board keeps the time part of their score; one
        not on it is placed as of the call's clock, clamped into the board's period."""
        player, points, now = a[0], int(a[1]), int(a[4])
        for i in range(5, len(a), _CORRECT_FIELDS):
            board_field, start, end, shift, unit, expire_at = a[i : i + 6]
            window, period, scope = board_field.split(":", 2)
            board = (window, period, scope)
            members = self.boards.setdefault(board, {})
            self.expire_at.setdefault(board, int(expire_at))
            scale = 1 << int(shift)
            old = members.get(player)
            if old is not None:
                tie = old % scale
            else:
                at = min(max(now, int(start)), int(end) - 1)
                tie = scale - 1 - (at - int(start)) // int(unit)
            members[player] = points * scale + tie
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


def commands(keys: Keys, folder: ActionFolder, *, now_ms: int) -> tuple[list[tuple[Any, ...]], dict[str, int]]:
    """The Redis commands that restore what the actions left beyond boards and names, and their
    counts by kind (for the rebuild's report)."""
    state, now_s = folder.state, now_ms // 1000
    out: list[tuple[Any, ...]] = []
    for player, record in state.tombstones.items():
        out.append(("HSET", keys.banned, player, orjson.dumps(record).decode()))
    for tournament, (start, end) in state.tournaments.items():
        out.append(("HSET", keys.tournaments, tournament, orjson.dumps({"start_ms": start, "end_ms": end}).decode()))
    entrants = 0
    for tournament, (players, expire_at) in state.entrants.items():
        if not players or (expire_at and expire_at <= now_s):
            continue
        key, listed = keys.entrants(tournament), sorted(players)
        for i in range(0, len(listed), 1000):
            out.append(("SADD", key, *listed[i : i + 1000]))
        out.append(("EXPIREAT", key, expire_at))
        entrants += len(players)
    markers = 0
    finals: dict[str, list[Close]] = {}
    for close in state.closes:
        if close.kept and close.final:  # the finals list has no expiry: it keeps its newest entries
            finals.setdefault(keys.finals(close.window), []).append(close)
        if close.expire_at_s and close.expire_at_s <= now_s:
            continue
        marker = keys.closed_marker(close.window, close.period)
        out.append(("SET", marker, close.closed_ms, *(("EXAT", close.expire_at_s) if close.expire_at_s else ())))
        markers += 1
    for key, closes in finals.items():
        # LPUSH in the order they were made, trimmed to the newest call's length, as lb_close does
        for close in closes:
            out.append(("LPUSH", key, close.final))
            out.append(("LTRIM", key, 0, close.kept - 1))
    for player, badges in state.badges.items():
        out.append(("SADD", keys.badges(player), *sorted(badges)))
    # The distinct-player logs were written from the global boards' members: add the players a
    # ban took off, and where a correction put on players who never submitted in the period,
    # write the log again without them.
    for period_id in state.counted.keys() | {p for p, players in state.uncounted.items() if players}:
        name, label = period_id
        expire_at = folder.expire_at.get((name, label, GLOBAL_SCOPE), 0)
        if expire_at and expire_at <= now_s:
            continue
        hll, players = keys.players(name, label), state.counted.get(period_id, set())
        if state.uncounted.get(period_id):
            out.append(("DEL", hll))
            members = folder.boards.get((name, label, GLOBAL_SCOPE), {})
            players = players | (members.keys() - state.uncounted[period_id])
        listed = sorted(players)
        for i in range(0, len(listed), 1000):
            out.append(("PFADD", hll, *listed[i : i + 1000]))
        if expire_at and listed:
            out.append(("EXPIREAT", hll, expire_at, "NX"))
    counts = {"tombstones": len(state.tombstones), "tournaments": len(state.tournaments), "entrants": entrants,
              "closed periods": markers, "badges": sum(len(b) for b in state.badges.values())}  # fmt: skip
    return out, counts


def profiles(names: Mapping[str, str], folder: ActionFolder) -> dict[str, str]:
    """Each player's profile JSON from the last display names (``''``: cleared) and the avatars
    and countries the actions set; players with an empty profile have no entry, as lb_profile
    leaves them."""
    out: dict[str, str] = {}
    for player in names.keys() | folder.state.extras.keys():
        profile: dict[str, str] = {}
        if name := names.get(player):
            profile["name"] = name
        profile.update(folder.state.extras.get(player, {}))
        if profile:
            out[player] = orjson.dumps(profile).decode()
    return out


def take_in_compaction(folder: Folder, actions: Sequence[Action]) -> None:
    """Hand a compaction's actions to its folder; a plain ``Folder`` would fold the submissions
    around them as if they had not happened (and drop tournament slips), so it is refused (the
    transaction is rolled back)."""
    if not isinstance(folder, ActionFolder):
        raise TypeError(f"{len(actions)} journaled actions to fold: the compaction needs an ActionFolder")
    folder.take(actions)
