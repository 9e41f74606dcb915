"""Operator actions on a game's boards: ban, unban, correct a score, and set a player's profile.
This is the high-level call operators use (the scorer's ``ban``/``unban``/``correct``/``profile``
commands and the gateways' ``server``-role requests go through it)::

    mod = Moderation(lb)
    await mod.ban("p-42", actor="ops:alice", reason="speed hack, ticket 991")
    await mod.correct("p-7", 1200, actor="ops:alice", reason="double-counted match")
    await mod.set_profile("p-7", Profile(name="Zoë", country="FR"))

Each action is one atomic call of the function library (lb_ban, lb_unban, lb_correct per board
definition, lb_profile), recorded in the activity stream with its actor
and reason (profiles excepted), and it bumps the top-N version of every board whose top N it
changed, so the next snapshot carries it; own-rank pushes read the boards again every interval,
so they follow by themselves.

Finding the boards is this module's part: the function library never builds a key name (every
key reaches it through KEYS, so it runs on a Cluster). A ban must reach every window, period and
scope, including scopes no configuration lists, so it enumerates the game's board keys with SCAN
(which walks every key of the database, in steps of _SCAN_COUNT keys: its cost follows the key
count, not the boards' sizes; bans are rare, a registry would cost every batch). A board created
between the scan and the call cannot hold the banned player afterwards except through a write
made before the tombstone: the scan is repeated after the call and the call made again for any
new board, until a scan finds nothing new.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from . import boards
from .boards import Definition
from .errors import INPUT_CODES, BadRequest, InvalidBoard, InvalidInput, TournamentError
from .keys import GLOBAL_SCOPE, defined_of, parse_scope
from .library import Leaderboard
from .profiles import Profile, check_player_id, normalise_text
from .results import BoardRef, Correction
from .transport import now_ms
from .windows import TOURNAMENT_PREFIX, Period, tournament_of

MAX_ACTOR_BYTES = 64
MAX_REASON_BYTES = 256
_SCAN_COUNT = 10_000
_BAN_ROUNDS = 5  # new boards appear at a rollover or with a new scope: one more round is the norm


@dataclass(frozen=True, slots=True)
class BanResult:
    boards: int  # boards the player was removed from
    top_changed: int  # of those, the boards whose top N changed (their snapshot is republished)


def _invalid(code: str, message: str | None = None) -> InvalidInput:
    return InvalidInput(code, message or INPUT_CODES[code])


check_player = check_player_id  # a player id as submissions have them (profiles.is_player_id)


def check_audit(actor: object, reason: object, *, reason_required: bool = True) -> tuple[str, str]:
    """The actor and reason every action records, normalised as display text is (NFC)."""
    actor = normalise_text(actor, "invalid_actor", MAX_ACTOR_BYTES)
    reason = normalise_text(reason, "invalid_reason", MAX_REASON_BYTES, required=reason_required)
    return actor, reason


def _ordered(boards: set[BoardRef]) -> list[BoardRef]:
    return sorted(boards, key=lambda b: (b.window, b.period, b.scope))


def _utf8_text(value: object) -> bool:
    """Text that encodes as UTF-8 (a lone surrogate does not)."""
    if not isinstance(value, str):
        return False
    try:
        value.encode()
    except UnicodeEncodeError:
        return False
    return True


def _points(points: object) -> int:
    if isinstance(points, str) and points.isascii() and points.isdigit() and len(points) <= 16:
        return int(points)
    if isinstance(points, int) and not isinstance(points, bool) and 0 <= points < 10**16:
        return points
    raise _invalid("invalid_points")


class Moderation:
    """Operator actions on one game; ``lb`` is its Leaderboard."""

    def __init__(self, lb: Leaderboard) -> None:
        self.lb = lb
        self.keys = lb.keys
        self._board_prefix = self.keys.board_pattern[:-1]

    async def boards(self) -> set[BoardRef]:
        """Every board of the game that exists now: all windows, periods and scopes, but the
        defined boards (``defined_boards``)."""
        return {b for b in await self._all_boards() if not defined_of(b.scope)}

    async def defined_boards(self) -> set[BoardRef]:
        """Every defined board (``board:<id>``) that exists now, of a definition the game holds
        (a board whose definition was deleted is left: its keys only wait to expire): one of its
        own windows, or a tournament on it."""
        await self.lb.boards.refresh()
        return {b for b in await self._all_boards() if self._held(b)}

    def _held(self, b: BoardRef) -> bool:
        """Whether a defined board is of a definition the game holds: one of its own windows, or
        a tournament on it."""
        board = defined_of(b.scope)
        definition = self.lb.boards.get(board) if board else None
        return definition is not None and (b.window in definition.windows or tournament_of(b.window) is not None)

    async def _banned_from(self) -> set[BoardRef]:
        """Every board a ban reaches, in one SCAN: the game's, and the defined ones held."""
        await self.lb.boards.refresh()
        return {b for b in await self._all_boards() if not defined_of(b.scope) or self._held(b)}

    async def _all_boards(self) -> set[BoardRef]:
        found: set[BoardRef] = set()
        async for key in self.lb.redis.scan_iter(match=self.keys.board_pattern, count=_SCAN_COUNT):
            window_name, _, rest = str(key)[len(self._board_prefix) :].partition(":")
            period, _, scope = rest.partition(":")
            if scope:
                found.add(BoardRef(window_name, period, scope))
        return found

    async def ban(self, player: str, *, actor: str, reason: str) -> BanResult:
        """Remove ``player`` from every board of the game, the game's and every defined one on
        either encoding, and refuse their submissions from now on (lb_submit's per-entry code
        ``banned``), until ``unban``."""
        check_player(player)
        actor, reason = check_audit(actor, reason)
        done = await self._banned_from()
        removed, touched = await self.lb.ban(player, _ordered(done), actor=actor, reason=reason)
        for _ in range(_BAN_ROUNDS):  # boards created between the scan and the tombstone
            new = await self._banned_from() - done
            if not new:
                break
            more, more_touched = await self.lb.ban(player, _ordered(new), actor=actor, reason=reason)
            removed, touched = removed + more, touched + more_touched
            done |= new
        return BanResult(removed, touched)

    async def replay_ban(self, player: str, *, actor: str, reason: str, at: int) -> tuple[int, int]:
        """A journaled ban's effect on the defined boards, replayed by a rebuild at its place among
        their slips (the game's boards are restored by the durable log's fold, the tombstone as
        the log last had it; under a stored default of key values their slips are replayed too,
        and so is the ban on them): (boards the player was on, of those the boards whose top N
        changed)."""
        defined = await self.defined_boards()
        if self.lb.boards.general is not None:
            defined |= await self.boards()
        if not defined:
            return 0, 0
        return await self.lb.ban(player, _ordered(defined), actor=actor, reason=reason, now=at, replay=True)

    async def unban(self, player: str, *, actor: str, reason: str = "") -> bool:
        """Lift a ban (whether there was one). Removed scores are not restored."""
        check_player(player)
        actor, reason = check_audit(actor, reason, reason_required=False)
        return await self.lb.unban(player, actor=actor, reason=reason)

    async def banned(self, player: str) -> dict[str, Any] | None:
        """The ban record of ``player`` ({"by", "reason", "at"}), or None."""
        raw = await self.lb.redis.hget(self.keys.banned, player)
        return None if raw is None else dict(orjson.loads(raw))

    async def correct(
        self,
        player: str,
        points: int | str | None = None,
        *,
        actor: str,
        reason: str,
        window_name: str | None = None,
        period: str | None = None,
        scopes: Sequence[str] | None = None,
        at: int | None = None,
        values: Sequence[object] | None = None,
        metadata: str | None = None,
        remove: bool = False,
    ) -> list[Correction]:
        """Set ``player``'s entry (a correction: the entry is overwritten, higher or lower), one
        atomic lb_correct call per board definition.

        The game's boards take ``points``: the current period of every window the game keeps,
        or of ``window_name`` (a tournament's ``t-<id>`` too); ``period`` (with ``window_name``)
        names another period still kept, as reads do (``previous`` or a label). On each, the
        ``global`` board and every scope board the player is on, or the ``scopes`` given.

        Under a stored default of key values (``Definitions.general``) the game's boards take
        ``values`` (or ``points`` for a default of one key), ``metadata`` and ``remove`` as a
        defined board does, on the same boards.

        ``scopes`` naming defined boards (``board:<id>``, and only those) take ``values`` (its
        key values) or ``remove``, no points: the current period of each of the board's windows,
        or of ``window_name``. The entry keeps the time it was reached; a new one is placed as of
        now. ``metadata``: None keeps the entry's, ``""`` clears it. InvalidBoard: unknown_board,
        wrong_key_count, invalid_key_value, key_out_of_range, metadata_too_large."""
        check_player(player)
        actor, reason = check_audit(actor, reason)
        when = now_ms() if at is None else at
        calls: list[tuple[Definition, list[tuple[Period, str]], tuple[int, ...] | None]]
        defined = [s for s in scopes or () if isinstance(s, str) and defined_of(s)]
        if defined:
            if len(defined) < len(scopes or ()):
                raise _invalid("invalid_scope", "a correction names the game's boards or defined ones, not both")
            if points is not None:
                raise _invalid("invalid_points", "a defined board holds key values: give values, not points")
            try:
                defined = [parse_scope(s) for s in defined]
            except ValueError as exc:
                raise _invalid("invalid_scope", str(exc)) from None
            checked = (values, metadata, remove)
            calls = await self._defined_targets(player, defined, checked, window_name, period, when)
        else:
            await self.lb.boards.refresh()
            general = self.lb.boards.general  # the game's stored default, when it keeps key values
            if general is None and (values is not None or metadata is not None or remove):
                raise _invalid(
                    "invalid_scope", "values, metadata and remove correct a defined board: name it (board:<id>)"
                )
            chosen = await self._game_targets(player, window_name, period, scopes, when)
            if general is None:
                game = self.lb.boards.get(boards.DEFAULT_ID)
                assert game is not None  # the registry always holds the game's (configured, or stored)
                calls = [(game, chosen, (_points(points),))]
            else:
                if points is not None and (values is not None or len(general.keys) != 1):
                    raise _invalid("invalid_points", "the game's boards hold key values: give values, not points")
                values = [_points(points)] if points is not None else values
                calls = [(general, chosen, self._checked(general, values, metadata, remove))]
        out: list[Correction] = []
        for definition, chosen, corrected in calls:
            out += await self.lb.correct(
                player, corrected, chosen, definition=definition, actor=actor, reason=reason, now=when,
                metadata=metadata,
            )  # fmt: skip
        return out

    async def _game_targets(
        self, player: str, window_name: str | None, period: str | None, scopes: Sequence[str] | None, when: int
    ) -> list[tuple[Period, str]]:
        """The game's boards a correction names (``correct``)."""
        if window_name is not None:
            try:  # a window the game keeps, or a tournament's (t-<id>)
                spec = await self.lb.window_of(window_name)
            except (BadRequest, TournamentError) as exc:
                raise _invalid("invalid_window", exc.message) from None
            try:  # None or "current", "previous", or a label; not one expired or not started
                periods = [
                    spec.resolve(period, when) if spec.tournament else self.lb.boards.resolve(spec.name, period, when)
                ]
            except ValueError as exc:
                raise _invalid("invalid_period", str(exc)) from None
        elif period is not None:
            raise _invalid("invalid_period", "a period needs its window")
        else:
            periods = [self.lb.boards.period(w, when) for w in self.lb.config.windows]
        if scopes is not None:
            try:
                chosen = [(p, parse_scope(s)) for p in periods for s in dict.fromkeys(scopes)]
            except ValueError as exc:
                raise _invalid("invalid_scope", str(exc)) from None
        else:
            chosen = await self._boards_of(player, periods)
        if not chosen:
            raise _invalid("invalid_scope", "no board to correct")
        return chosen

    async def _defined_targets(
        self,
        player: str,
        names: Sequence[str],
        correction: tuple[Sequence[object] | None, str | None, bool],
        window_name: str | None,
        period: str | None,
        when: int,
    ) -> list[tuple[Definition, list[tuple[Period, str]], tuple[int, ...] | None]]:
        """Per defined board a correction names (``correct``): its definition, its boards in
        its periods and the key values checked (None: the entry taken off), every board checked
        before any call. A board's home (``board:<id>``) is corrected with every scope's board
        of it the player is on, as the game's ``global`` is; a scope's board
        (``board:<id>:region:<r>``) alone."""
        values, metadata, remove = correction
        if remove and (values is not None or metadata is not None):
            raise InvalidBoard("wrong_key_count", "an entry removed takes no key values and no metadata")
        if metadata is not None and not _utf8_text(metadata):
            raise InvalidBoard("metadata_too_large", "metadata must be UTF-8 text")
        await self.lb.boards.refresh()
        calls = []
        by_board: dict[str, list[str]] = {}
        for name in dict.fromkeys(names):
            by_board.setdefault(boards.definition_of(name), []).append(name)
        for board, named in by_board.items():
            if board == boards.DEFAULT_ID:  # the game's own boards: points, on global and its scopes
                raise _invalid("invalid_scope", "the default board is the game's own: correct it with points")
            definition = self.lb.boards.get(board)
            if definition is None or not all(boards.keeps(definition, name) for name in named):
                raise InvalidBoard("unknown_board", f"no board {', '.join(named)}")
            checked = self._checked(definition, values, metadata, remove)
            if window_name is not None:
                try:
                    periods = [boards.resolve(definition, window_name, period, when)]
                except ValueError as exc:
                    raise _invalid(
                        "invalid_window" if window_name not in definition.windows else "invalid_period", str(exc)
                    ) from None
            elif period is not None:
                raise _invalid("invalid_period", "a period needs its window")
            else:
                periods = [boards.period(definition, w, when) for w in definition.windows]
            home = boards.home_scope(board)
            chosen = [(p, name) for p in periods for name in named if name != home]
            if home in named:
                chosen = list(dict.fromkeys([*await self._boards_of(player, periods, definition), *chosen]))
            calls.append((definition, chosen, checked))
        return calls

    @staticmethod
    def _checked(
        definition: Definition, values: Sequence[object] | None, metadata: str | None, remove: bool
    ) -> tuple[int, ...] | None:
        """A correction's key values checked against the board's definition (None: the entry
        taken off), and its metadata. InvalidBoard."""
        if not remove and values is None:
            wanted = len(definition.keys)
            raise InvalidBoard("wrong_key_count", f"board {definition.id} takes {wanted} key value(s), got none")
        checked = None if values is None else boards.parse_values(definition, list(values))
        boards.check_metadata(definition, metadata)
        return checked

    async def _boards_of(
        self, player: str, periods: Sequence[Period], definition: Definition | None = None
    ) -> list[tuple[Period, str]]:
        """The home board of each period (the game's ``global``; ``definition``'s ``board:<id>``),
        and the scope boards of those periods the player is on."""
        wanted = {(p.window.name, p.label): p for p in periods}
        if definition is None:
            home, found, lex = GLOBAL_SCOPE, await self.boards(), self.game_lex()
        else:
            home, lex = boards.home_scope(definition.id), definition.encoding == boards.LEX
            found = {b for b in await self._all_boards() if boards.definition_of(b.scope) == definition.id}
        scoped = sorted(
            (b for b in found if (b.window, b.period) in wanted and b.scope != home),
            key=lambda b: (b.window, b.period, b.scope),
        )
        chosen = [(p, home) for p in periods]
        chosen += [(wanted[b.window, b.period], b.scope) for b in await self.on(player, scoped, lex=lex)]
        return chosen

    async def on(self, player: str, found: Sequence[BoardRef], *, lex: bool) -> list[BoardRef]:
        """The boards of ``found`` (all of one encoding: ``lex``) ``player`` has an entry on, in
        one round trip: a lex board's members are encoded, its members hash names its players."""
        async with self.lb.redis.pipeline(transaction=False) as pipe:
            for b in found:
                at = (b.window, b.period, b.scope)
                pipe.hget(self.keys.members(*at), player) if lex else pipe.zscore(self.keys.board(*at), player)
            scores = await pipe.execute() if found else []
        return [b for b, s in zip(found, scores, strict=True) if s is not None]

    def game_lex(self) -> bool:
        """Whether the game's own boards are lex-encoded (its stored ``default``'s shape)."""
        general = self.lb.boards.general
        return general is not None and general.encoding == boards.LEX

    async def set_profile(self, player: str, profile: Profile, *, at: int | None = None) -> dict[str, Any]:
        """Set the fields ``profile`` names (``""`` clears one); the stored profile after it.
        The boards whose snapshot may show the player are the current periods' boards, listed
        by the versions hash (every board with an entry in its current period has a field)."""
        check_player(player)
        changes = profile.changes()
        if not changes:
            raise _invalid("invalid_profile", "name at least one of name, avatar, country")
        when = now_ms() if at is None else at
        await self.lb.boards.refresh()  # each board's windows, days, encoding and top N: its definition's
        game = {(w, self.lb.boards.period(w, when).label) for w in self.lb.config.windows}
        shown = []
        for field in await self.lb.redis.hkeys(self.keys.versions):
            b = BoardRef(*str(field).split(":", 2))
            # a tournament's field stays until its close event: it is published until then
            if b.window.startswith(TOURNAMENT_PREFIX) or self._current(b, when, game):
                shown.append(b)
        return dict(await self.lb.profile(player, changes, shown))

    def _current(self, b: BoardRef, when: int, game: set[tuple[str, str]]) -> bool:
        """Whether ``b`` is in its current period: a board of the game's in ``game`` (its
        windows' current periods), a defined board in one of its own windows' current period,
        whose days start in its own time zone."""
        board_id = defined_of(b.scope)
        if board_id is None:
            return (b.window, b.period) in game
        d = self.lb.boards.get(board_id)
        return d is not None and b.window in d.windows and boards.period(d, b.window, when).label == b.period
