"""The moderation and profile wrappers: ``lb_ban``, ``lb_unban``, ``lb_correct``,
``lb_correct_defined`` and ``lb_profile`` (moderation.lua). The boards a call touches are found by
leaderboard/moderation.py (``Moderation``, the high-level call operators use); these wrappers take
them as given."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .. import boards
from ..batch import DEFINITION_FIELDS, definition_record
from ..errors import BadRequest, TournamentError
from ..keys import DEFINED, defined_of
from ..profiles import stored as stored_profile
from ..results import BoardRef, Correction
from ..transport import now_ms
from ..windows import Period, window
from .calls import execute
from .reads import ReadCalls

# The call layouts of lb_ban (moderation.lua BAN_LAYOUT): the library refuses another (library_mismatch)
BAN_LAYOUT = 2
# lb_correct_defined's arguments after ``how``: fixed ones, then a definition record, then per board
_CORRECT_DEFINED_ARGS, _CORRECT_DEFINED_FIELDS = 8, 7


class ModerationCalls(ReadCalls):
    """Bans, corrections and profiles (a board's window from ``window_of``)."""

    async def ban(
        self,
        player: str,
        boards: Sequence[BoardRef],
        *,
        actor: str,
        reason: str,
        now: int | None = None,
        replay: bool = False,
    ) -> tuple[int, int]:
        """lb_ban: tombstone ``player`` and remove them from ``boards``, the game's and defined
        ones alike (a defined board whose definition is gone is left: its keys only wait to
        expire); (boards they were on, of those the boards whose top N changed). ``replay``: a
        rebuild replaying the ban's effect on the boards given (no tombstone, activity or
        journal entry)."""
        keys = [self.keys.banned, self.keys.versions, self.keys.activity, self.keys.journal]
        args: list[str | int] = [BAN_LAYOUT, "replay" if replay else "ban", player, actor, reason]
        args += [now_ms() if now is None else now, self.config.activity_maxlen]
        for b in boards:
            found = await self._ban_record(b)
            if found is not None:  # the companions (histogram, points set, members) follow the removal
                at = (b.window, b.period, b.scope)
                keys += [*self._board_keys(*at), self.keys.members(*at), self.keys.metadata(*at)]
                args += [f"{b.window}:{b.period}:{b.scope}", *found]
        removed, touched = await self._versioned(BAN_LAYOUT, ("FCALL", "lb_ban", len(keys), *keys, *args))
        return int(removed), int(touched)

    async def _ban_record(self, b: BoardRef) -> tuple[int, str, str | int] | None:
        """A board's top N, rank mode and encoding as lb_ban takes them (lex:<key count>, or a
        packed board's shift, '' when its window is no longer known); None for a defined board
        whose definition is gone."""
        board_id = defined_of(b.scope)
        if board_id is None:
            shift = await self._shift_of(b.window)
            return self.config.top_n, self.config.rank_mode_for(b.window), "" if shift < 0 else shift
        d = self.boards.get(board_id)
        if d is None:
            return None
        encoding = f"lex:{len(d.keys)}" if d.encoding == boards.LEX else d.shift(b.window)
        return d.top_n, d.rank_mode, encoding

    def _board_keys(self, window_name: str, period: str, scope: str) -> tuple[str, str, str]:
        """A board and its companions, as lb_ban and lb_correct take them."""
        at = (window_name, period, scope)
        return self.keys.board(*at), self.keys.histogram(*at), self.keys.points(*at)

    async def _shift_of(self, window_name: str) -> int:
        """The score shift of a board's window, -1 when its window is no longer known (a
        tournament whose definition is gone): its companions are then left alone."""
        try:
            return (await self.window_of(window_name)).shift
        except (BadRequest, TournamentError):
            try:  # a window the game no longer keeps still has its fixed encoding
                return window(window_name).shift
            except ValueError:
                return -1

    async def unban(self, player: str, *, actor: str, reason: str = "") -> bool:
        """lb_unban: lift a ban; whether there was one."""
        keys = (self.keys.banned, self.keys.activity, self.keys.journal)
        args = (player, actor, reason, self.config.activity_maxlen)
        return bool(await execute(self.redis, ("FCALL", "lb_unban", len(keys), *keys, *args)))

    async def correct(
        self,
        player: str,
        points: int,
        boards: Sequence[tuple[Period, str]],
        *,
        actor: str,
        reason: str,
        now: int | None = None,
    ) -> list[Correction]:
        """lb_correct: set ``player``'s points on each (period, scope) board given."""
        keys = [self.keys.banned, self.keys.versions, self.keys.activity, self.keys.journal]
        args: list[str | int] = [
            player,
            points,
            actor,
            reason,
            now_ms() if now is None else now,
            self.config.activity_maxlen,
            self.config.top_n,
        ]
        for period, scope in boards:
            w = period.window
            keys += self._board_keys(w.name, period.label, scope)
            args += [
                f"{w.name}:{period.label}:{scope}",
                period.start_ms,
                period.end_ms,
                w.shift,
                w.unit_ms,
                period.expire_at_s,
                self.config.rank_mode_for(w.name),
            ]
        rows = await execute(self.redis, ("FCALL", "lb_correct", len(keys), *keys, *args))
        return [
            Correction(BoardRef(p.window.name, p.label, scope), None if int(prev) < 0 else int(prev), int(rank))
            for (p, scope), (prev, rank) in zip(boards, rows, strict=True)
        ]

    async def correct_defined(
        self,
        player: str,
        definition: boards.Definition,
        periods: Sequence[Period],
        values: Sequence[int] | None,
        *,
        metadata: str | None = None,
        actor: str,
        reason: str,
        now: int | None = None,
    ) -> list[Correction]:
        """lb_correct_defined: set ``player``'s key values (None: take them off) on the defined
        board's ``periods``; ``metadata`` None keeps the entry's, ``""`` clears it."""
        args: list[str | int] = [
            player,
            "" if values is None else ",".join(map(str, values)),
            "keep" if metadata is None else "set",
            metadata or "",
            actor,
            reason,
            now_ms() if now is None else now,
            self.config.activity_maxlen,
            1,
            *definition_record(definition),
        ]
        scope = f"{DEFINED}:{definition.id}"
        for p in periods:
            w = p.window
            args += [f"{w.name}:{p.label}:{scope}", p.start_ms, p.end_ms, definition.shift(w.name)]
            args += [w.unit_ms, p.expire_at_s, definition.rank_mode]
        rows = await self.replay_correct_defined([str(a) for a in args], journal=True)
        return [
            Correction(
                BoardRef(p.window.name, p.label, scope),
                int(prev.split(",")[0]) if prev else None,
                int(rank) or None,
                tuple(int(v) for v in prev.split(",")) if prev else None,
            )
            for p, (prev, rank) in zip(periods, rows, strict=True)
        ]

    async def replay_correct_defined(self, args: Sequence[str], *, journal: bool = False) -> list[Any]:
        """lb_correct_defined with the arguments it journaled (``journal``: journal it, as a new
        correction is; a rebuild replays without); its rows. The keys follow from the board
        records' version fields."""
        keys = [self.keys.banned, self.keys.versions, self.keys.activity, self.keys.journal]
        first = _CORRECT_DEFINED_ARGS + 1 + len(DEFINITION_FIELDS)
        for field in args[first::_CORRECT_DEFINED_FIELDS]:
            at = field.split(":", 2)
            keys += [self.keys.board(*at), self.keys.members(*at), self.keys.points(*at)]
            keys += [self.keys.metadata(*at), self.keys.histogram(*at)]
        how = "correct" if journal else "replay"
        rows: list[Any] = await execute(self.redis, ("FCALL", "lb_correct_defined", len(keys), *keys, how, *args))
        return rows

    async def profile(self, player: str, changes: Mapping[str, str], boards: Sequence[BoardRef]) -> Mapping[str, Any]:
        """lb_profile: set (``""``: clear) profile fields of ``player``; ``boards`` are those whose
        snapshot shows the profile (the current ones). Returns the profile after the write."""
        keys = [self.keys.profiles, self.keys.versions, self.keys.journal]
        keys += [self.keys.board(b.window, b.period, b.scope) for b in boards]
        args: list[str | int] = [player, self.config.top_n, len(boards)]
        args += [f"{b.window}:{b.period}:{b.scope}" for b in boards]
        for item in changes.items():
            args += item
        raw = await execute(self.redis, ("FCALL", "lb_profile", len(keys), *keys, *args))
        return stored_profile(raw) or {}
