"""The moderation and profile wrappers: ``lb_ban``, ``lb_unban``, ``lb_correct`` and
``lb_profile`` (moderation.lua), each on every board. The boards a call touches are found by
leaderboard/moderation.py (``Moderation``, the high-level call operators use); these wrappers take
them as given."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .. import boards
from ..batch import DEFINITION_FIELDS, POINTS_SPEC, definition_record
from ..errors import BadRequest, TournamentError
from ..keys import defined_of
from ..profiles import stored as stored_profile
from ..results import BoardRef, Correction
from ..transport import Command, now_ms
from ..windows import Period, window
from .calls import execute
from .reads import ReadCalls

# The call layouts of lb_ban, lb_correct and lb_profile (moderation.lua): the library refuses another
# (library_mismatch)
BAN_LAYOUT, CORRECT_LAYOUT, PROFILE_LAYOUT = 2, 3, 2
# lb_correct's arguments after ``how``: fixed ones, then a definition record, then per board
_CORRECT_ARGS, _CORRECT_FIELDS = 8, 7


def _record(definition: boards.Definition, points: bool) -> list[str | int]:
    """A definition as lb_correct reads it: lb_submit's record, but the game's points (``points``:
    the default of the configured shape, one packed key) are bounded per board by their window's
    exact scores (lb_correct refuses points_out_of_range past them), not by the smallest of its
    windows' bounds."""
    record = definition_record(definition)
    if points:
        record[DEFINITION_FIELDS.index("key_spec")] = POINTS_SPEC
    return record


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
        board_keys, records, _ = await self._board_records(boards)
        command: Command = ("FCALL", "lb_ban", len(keys) + len(board_keys), *keys, *board_keys, *args, *records)
        removed, touched = await self._versioned(BAN_LAYOUT, command)
        return int(removed), int(touched)

    async def _board_records(self, boards: Sequence[BoardRef]) -> tuple[list[str], list[str | int], int]:
        """The keys and records of ``boards`` as lb_ban and lb_profile take them (moderation.board:
        a board and its companions, its version field, top N, rank mode and encoding), and how
        many; a defined board whose definition is gone is left out."""
        keys: list[str] = []
        records: list[str | int] = []
        count = 0
        for b in boards:
            found = await self._ban_record(b)
            if found is not None:  # the companions (histogram, points set, members) follow a removal
                at = (b.window, b.period, b.scope)
                keys += [*self._board_keys(*at), self.keys.members(*at), self.keys.metadata(*at)]
                records += [f"{b.window}:{b.period}:{b.scope}", *found]
                count += 1
        return keys, records, count

    async def _ban_record(self, b: BoardRef) -> tuple[int, str, str | int] | None:
        """A board's top N, rank mode and encoding as lb_ban takes them (lex:<key count>, or a
        packed board's shift, '' when its window is no longer known); None for a defined board
        whose definition is gone."""
        board_id = defined_of(b.scope)
        d = self.boards.general if board_id is None else self.boards.get(board_id)  # the game's: its stored default's
        if board_id is None and d is None:
            shift = await self._shift_of(b.window)
            return self.config.top_n, self.config.rank_mode_for(b.window), "" if shift < 0 else shift
        if d is None:
            return None
        encoding = f"lex:{len(d.keys)}" if d.encoding == boards.LEX else d.shift(b.window)
        if board_id is None:
            return self.config.top_n, self.config.rank_mode_for(b.window), encoding
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
        values: Sequence[int] | None,
        boards_at: Sequence[tuple[Period, str]],
        *,
        definition: boards.Definition,
        actor: str,
        reason: str,
        now: int | None = None,
        metadata: str | None = None,
    ) -> list[Correction]:
        """lb_correct: set ``player``'s entry to ``values`` (None: take the player off) on each
        (period, scope) board given, all of one ``definition`` (the game's boards: ``default``,
        one key, the points), and ``metadata`` (None keeps the entry's, ``""`` clears it)."""
        args: list[str | int] = [player, "" if values is None else ",".join(map(str, values))]
        args += ["keep" if metadata is None else "set", metadata or "", actor, reason, now_ms() if now is None else now]
        points = definition.id == boards.DEFAULT_ID and self.boards.general is None  # the configured game's
        args += [self.config.activity_maxlen, 1, *_record(definition, points)]
        for period, scope in boards_at:
            w = period.window
            # the game's boards rank in their window's mode (LB_WINDOW_RANK_MODES)
            mode = definition.rank_mode if defined_of(scope) else self.config.rank_mode_for(w.name)
            args += [f"{w.name}:{period.label}:{scope}", period.start_ms, period.end_ms, definition.shift(w.name)]
            args += [w.unit_ms, period.expire_at_s, mode]
        rows = await self._correct_call("correct", [str(a) for a in args])
        out = []
        for (p, scope), (prev, rank) in zip(boards_at, rows, strict=True):
            before = tuple(int(v) for v in prev.split(",")) if prev else None
            keys = None if points else before  # the configured game's boards answer points alone
            board = BoardRef(p.window.name, p.label, scope)
            out.append(Correction(board, before[0] if before else None, int(rank) or None, keys))
        return out

    async def replay_correct(self, args: Sequence[str]) -> list[Any]:
        """lb_correct with the arguments a correction journaled (not journaled again: a rebuild
        replaying it); its rows."""
        return await self._correct_call("", args)

    async def _correct_call(self, how: str, args: Sequence[str]) -> list[Any]:
        """lb_correct with ``args`` after its layout and ``how``; the keys follow from the board
        records' version fields."""
        keys = [self.keys.banned, self.keys.versions, self.keys.activity, self.keys.journal]
        for field in args[_CORRECT_ARGS + 1 + len(DEFINITION_FIELDS) :: _CORRECT_FIELDS]:
            at = field.split(":", 2)
            keys += [*self._board_keys(*at), self.keys.members(*at), self.keys.metadata(*at)]
        command: Command = ("FCALL", "lb_correct", len(keys), *keys, CORRECT_LAYOUT, how, *args)
        rows: list[Any] = await self._versioned(CORRECT_LAYOUT, command)
        return rows

    async def profile(self, player: str, changes: Mapping[str, str], boards: Sequence[BoardRef]) -> Mapping[str, Any]:
        """lb_profile: set (``""``: clear) profile fields of ``player``; ``boards`` are those whose
        snapshot shows the profile (the current ones), each found on its encoding and bumped
        within its own top N. Returns the profile after the write."""
        board_keys, records, count = await self._board_records(boards)
        keys = [self.keys.profiles, self.keys.versions, self.keys.journal, *board_keys]
        args: list[str | int] = [PROFILE_LAYOUT, player, count, len(changes), *records]
        for item in changes.items():
            args += item
        raw = await self._versioned(PROFILE_LAYOUT, ("FCALL", "lb_profile", len(keys), *keys, *args))
        return stored_profile(raw) or {}
