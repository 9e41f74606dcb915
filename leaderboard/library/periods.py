"""The period wrappers: ``lb_close`` (a period's close event and finals, on every board),
``lb_tournament`` and ``lb_join`` (calendar.lua)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Required, TypedDict, Unpack

import orjson

from .. import boards
from ..batch import POINTS_SPEC, key_spec
from ..boards import BoardPeriod
from ..errors import BadRequest, TournamentError
from ..profiles import check_player_id
from ..transport import Command, now_ms
from ..windows import TOURNAMENT_RETENTION_S, Period, Window, tournament_window
from .calls import Calls, execute

# The call layout of lb_close (calendar.lua CLOSE_LAYOUT): the library refuses another (library_mismatch)
CLOSE_LAYOUT = 3
# Entries per lb_join call: the function unpacks them onto Lua's C stack, which is bounded.
_JOIN_CHUNK = 1000


class CloseOptions(TypedDict, total=False):
    """A close's options: the size of its final tops, the finals kept, the closed stream's length,
    a defined board's definition (None: the game's boards), the close's clock (None: now)."""

    top_n: Required[int]
    keep: Required[int]
    maxlen: Required[int]
    definition: boards.Definition | None
    now: int | None


class PeriodCalls(Calls):
    """Close events of ended periods, and tournaments."""

    async def close(self, period: Period, scopes: Sequence[str], **options: Unpack[CloseOptions]) -> str | None:
        """lb_close: add the period's close event (its final top ``top_n`` of each scope) once,
        and keep it in the window's finals (the newest ``keep``); the event's stream id, or None
        if the period was closed before. Either way the period's boards leave the versions hash.
        A defined board (``definition``, its home ``board:<id>`` first, then the boards of its
        scopes, ``board:<id>:region:<r>``) closes its own periods together under its own marker
        and finals, each entry with every key value and its metadata; the
        game's stored default (``Definitions.general``) closes the game's scopes together, under
        the game's marker and finals, each entry with its key values and metadata."""
        reply = await self._versioned(CLOSE_LAYOUT, self.close_command(period, scopes, **options))
        return None if reply is None else str(reply)

    def close_command(self, period: Period, scopes: Sequence[str], **options: Unpack[CloseOptions]) -> Command:
        """``close``'s call of lb_close, as a command."""
        top_n, keep, maxlen = options["top_n"], options["keep"], options["maxlen"]
        definition, now = options.get("definition"), options.get("now")
        when = now_ms() if now is None else now
        w, at = period.window, (period.window.name, period.label)
        if definition is None:  # the game's boards, closed together: entries with their points
            marker, finals = self.keys.closed_marker(*at), self.keys.finals(w.name)
            layout: list[str | int] = [w.shift, top_n, period.expire_at_s, keep, maxlen, when]
            layout += [self.config.rank_mode_for(w.name), "", POINTS_SPEC]
        else:
            game = definition.id == boards.DEFAULT_ID  # the game's scopes, closed together as above
            home = boards.home_scope(definition.id)
            if not game and (scopes[:1] != [home] or any(not boards.keeps(definition, s) for s in scopes)):
                raise BadRequest("a defined board's period closes alone, its home first, with its scopes' boards")
            mode = self.config.rank_mode_for(w.name) if game else None
            board = BoardPeriod(self.keys, definition, period, scopes[0], mode=mode)
            own = () if game else (home,)
            marker, finals = self.keys.closed_marker(*at, *own), self.keys.finals(w.name, *own)
            layout = [board.encoding, top_n, period.expire_at_s, keep, maxlen, when, board.mode]
            layout += [orjson.dumps(board.columns).decode(), key_spec(definition)]
        keys = [marker, self.keys.closed, finals, self.keys.versions, self.keys.journal]
        for scope in scopes:
            keys += [self.keys.board(*at, scope), self.keys.metadata(*at, scope)]
        args = [CLOSE_LAYOUT, w.name, period.label, period.start_ms, period.end_ms, *layout, *scopes]
        return ("FCALL", "lb_close", len(keys), *keys, *args)

    async def create_tournament(self, tournament: str, start_ms: int, end_ms: int) -> Window:
        """lb_tournament: create a tournament running [start_ms, end_ms); its window (``t-<id>``).
        Creating it again with the same bounds is a no-op; TournamentError(tournament_exists)
        for other bounds, (tournament_ended) when it would end in the past."""
        try:
            spec = tournament_window(tournament, start_ms, end_ms)
        except ValueError as exc:
            raise BadRequest(str(exc)) from None
        keys = (self.keys.tournaments, self.keys.journal)
        await execute(self.redis, ("FCALL", "lb_tournament", len(keys), *keys, tournament, start_ms, end_ms, now_ms()))
        self.tournaments.remember(tournament, spec)
        return spec

    async def join(self, tournament: str, players: Sequence[str]) -> int:
        """lb_join: enter players in a tournament (before it starts or while it runs); how many
        were newly entered. TournamentError(unknown_tournament / tournament_ended). Each call
        of the function enters up to 1,000 players atomically; a longer list takes several."""
        spec = await self.tournaments.get(tournament)
        if spec is None:
            raise TournamentError("unknown_tournament", f"no tournament {tournament!r}")
        if not players:
            raise BadRequest("players must not be empty")
        for player in players:  # all checked before the first chunk: a refused call enters nobody
            check_player_id(player)
        expire_at = spec.period(0).end_ms // 1000 + TOURNAMENT_RETENTION_S
        keys = (self.keys.tournaments, self.keys.entrants(tournament), self.keys.journal)
        added = 0
        for i in range(0, len(players), _JOIN_CHUNK):
            chunk = players[i : i + _JOIN_CHUNK]
            command: Command = ("FCALL", "lb_join", len(keys), *keys, tournament, now_ms(), expire_at, *chunk)
            added += int(await execute(self.redis, command))
        return added
