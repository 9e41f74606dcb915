"""The period wrappers: ``lb_close`` and ``lb_close_board`` (a period's close event and finals),
``lb_tournament`` and ``lb_join`` (calendar.lua)."""

from __future__ import annotations

from collections.abc import Sequence

from ..defined import Board
from ..errors import BadRequest, TournamentError
from ..profiles import check_player_id
from ..transport import Command, now_ms
from ..windows import TOURNAMENT_RETENTION_S, Period, Window, tournament_window
from .calls import Calls, execute

# Entries per lb_join call: the function unpacks them onto Lua's C stack, which is bounded.
_JOIN_CHUNK = 1000


class PeriodCalls(Calls):
    """Close events of ended periods, and tournaments."""

    async def close(self, period: Period, scopes: Sequence[str], *, top_n: int, keep: int, maxlen: int) -> str | None:
        """lb_close: add the period's close event (its final top ``top_n`` of each scope) once,
        and keep it in the window's finals (the newest ``keep``); the event's stream id, or None
        if the period was closed before. Either way the period's boards leave the versions hash."""
        w = period.window
        keys = [
            self.keys.closed_marker(w.name, period.label),
            self.keys.closed,
            self.keys.finals(w.name),
            self.keys.versions,
            self.keys.journal,
            *(self.keys.board(w.name, period.label, scope) for scope in scopes),
        ]
        args: list[str | int] = [
            w.name,
            period.label,
            period.start_ms,
            period.end_ms,
            w.shift,
            top_n,
            period.expire_at_s,
            keep,
            maxlen,
            now_ms(),
            self.config.rank_mode_for(w.name),
            *scopes,
        ]
        reply = await execute(self.redis, ("FCALL", "lb_close", len(keys), *keys, *args))
        return None if reply is None else str(reply)

    async def close_board(self, board: Board, *, top_n: int, keep: int, maxlen: int) -> str | None:
        """lb_close_board: ``close`` for one period of a defined board (``defined_board``),
        whose periods are its own: the event's stream id, or None if it was closed before."""
        name, keys, args = board.close_call(top_n=top_n, keep=keep, maxlen=maxlen, now=now_ms())
        reply = await execute(self.redis, ("FCALL", name, len(keys), *keys, *args))
        return None if reply is None else str(reply)

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
