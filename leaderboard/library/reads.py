"""The read wrappers: ``lb_top``, ``lb_around``, ``lb_ranks`` and ``lb_rank_rebuild`` (reads.lua),
on a game board or a defined one (boards/reads.py: its calls with the board's encoding), and the window
and period a read names."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .. import boards
from ..boards import BoardPeriod
from ..boards.reads import Call
from ..errors import BadPeriod, BadRequest, TournamentError
from ..keys import defined_of, parse_scope
from ..loading import with_library
from ..reads import PlainReads
from ..results import BoardEntries, Ranks, Standing
from ..transport import Command, execute_packed, now_ms
from ..windows import Period, Window, tournament_of
from .calls import Calls, execute, library_errors


class ReadCalls(PlainReads, Calls):
    """Reads of a board period (read-only: safe on replicas through FCALL_RO), and the plain
    reads of reads.py, which take their board from ``_board``."""

    async def window_of(self, window_name: str) -> Window:
        """A window a read may name: one the game keeps, or a tournament's (``t-<id>``)."""
        tournament = tournament_of(window_name)
        if tournament is not None:
            spec = await self.tournaments.get(tournament)
            if spec is None:
                raise TournamentError("unknown_tournament", f"no tournament {tournament!r}")
            return spec
        try:
            spec = self.config.window_spec(window_name)
        except ValueError as exc:
            raise BadRequest(str(exc)) from None
        if window_name not in self.config.windows:
            raise BadRequest(f"window {window_name!r} is not kept for game {self.config.game!r}")
        return spec

    async def _board(
        self, window_name: str, scope: str, at: int | None, period_name: str | None = None
    ) -> tuple[str, Period]:
        """The board key and period a read names. A defined board's (scope ``board:<id>``) is of
        its own windows, periods and time zone (``defined_board``), so the plain reads (size,
        stats) serve every window it keeps, as the function library's reads do."""
        defined = await self.defined_board(window_name, scope, at, period_name)
        if defined is not None:
            return defined.board, defined.period
        try:
            parse_scope(scope)
        except ValueError as exc:
            raise BadRequest(str(exc)) from None
        spec = await self.window_of(window_name)
        when = now_ms() if at is None else at
        try:  # a window of the game's: its periods in the stored default's time zone
            period = (
                spec.resolve(period_name, when)
                if spec.tournament
                else self.boards.resolve(spec.name, period_name, when)
            )
        except ValueError as exc:
            raise BadPeriod(str(exc)) from None
        return self.keys.board(spec.name, period.label, scope), period

    async def defined_board(
        self, window_name: str, scope: str, at: int | None = None, period_name: str | None = None
    ) -> BoardPeriod | None:
        """The defined board a scope ``board:<id>`` names (its period resolved as a read names
        it), or None for any other scope. BadRequest for a board nobody defined, or a window it
        does not keep; BadPeriod as ``_board``."""
        board_id = defined_of(scope)
        if board_id is None:
            return None
        definition = self.boards.get(board_id)
        if definition is None:
            await self.boards.refresh()  # defined a moment ago, before this process's tick
            definition = self.boards.get(board_id)
        if definition is None or not boards.keeps(definition, scope):
            raise BadRequest(f"no board {board_id!r}" if definition is None else f"board {board_id} keeps no {scope}")
        at = now_ms() if at is None else at
        if tournament_of(window_name) is not None:  # a tournament on the board: its one period
            spec = await self.window_of(window_name)
            try:
                return BoardPeriod(self.keys, definition, spec.resolve(period_name, at), scope)
            except ValueError as exc:
                raise BadPeriod(str(exc)) from None
        try:
            boards.window_of(definition, window_name)
        except ValueError as exc:
            raise BadRequest(str(exc)) from None
        try:
            found = boards.resolve(definition, window_name, period_name, at)
        except ValueError as exc:
            raise BadPeriod(str(exc)) from None
        return BoardPeriod(self.keys, definition, found, scope)

    async def board_period(
        self, window_name: str, scope: str, at: int | None = None, period_name: str | None = None
    ) -> BoardPeriod:
        """Any board period a read names, as one type: a defined board's (``defined_board``), or
        one of the game's own boards as the definition ``default`` with its scope, ranked in its
        window's mode, its entries shown with key values and columns only when the default is
        stored (a game that never stored one reads as it always did). BadRequest for a board or
        window nobody keeps, BadPeriod as ``_board``."""
        defined = await self.defined_board(window_name, scope, at, period_name)
        if defined is not None:
            return defined
        _, found = await self._board(window_name, scope, at, period_name)
        default = self.boards.get(boards.DEFAULT_ID)
        assert default is not None  # the registry always holds the game's (configured, or stored)
        mode = self.config.rank_mode_for(window_name)
        return BoardPeriod(self.keys, default, found, scope, mode=mode, shown=bool(self.boards.columns))

    async def _read(self, call: Call) -> Any:
        """One read-only call, on a replica when this object reads from them (``_replica_read``)."""
        name, keys, args = call
        [reply] = await self._replica_read(("FCALL_RO", name, len(keys), *keys, *args))
        return reply

    async def top(
        self, window_name: str, scope: str = "global", n: int = 10, *, at: int | None = None, period: str | None = None
    ) -> BoardEntries:
        """lb_top: the first ``n`` entries of the board's current period (or the one at ``at``,
        or the one ``period`` names)."""
        board = await self.board_period(window_name, scope, at, period)
        return board.top(await self._read(board.top_call(n)))

    async def tops(self, names: Sequence[tuple[str, str]], *, at: int | None = None) -> list[BoardEntries]:
        """Each board's top N (its definition's ``top_n``; the game's boards': the game's),
        ``(window, scope)`` each, in one pipelined round trip: for the publisher, whose tick may
        find hundreds of boards changed (a fraction of the client's CPU per board of one call
        each, measured in docs/operations.md)."""
        found = [await self.board_period(window_name, scope, at) for window_name, scope in names]
        commands: list[Command] = []
        for board in found:
            name, keys, args = board.top_call(board.definition.top_n)
            commands.append(("FCALL_RO", name, len(keys), *keys, *args))
        with library_errors():
            replies = (
                await with_library(self.redis, commands, lambda: execute_packed(self.redis, *commands))
                if commands
                else []
            )
        return [board.top(flat) for board, flat in zip(found, replies, strict=True)]

    async def around(
        self,
        player: str,
        window_name: str,
        scope: str = "global",
        k: int = 5,
        *,
        at: int | None = None,
        period: str | None = None,
    ) -> BoardEntries:
        """lb_around: the entries ``k`` above and below ``player`` (none when unranked)."""
        board = await self.board_period(window_name, scope, at, period)
        return board.around(await self._read(board.around_call(player, k)))

    async def ranks(
        self,
        players: Sequence[str],
        window_name: str,
        scope: str = "global",
        *,
        at: int | None = None,
        period: str | None = None,
        profiles: bool = False,
        deep_from: int = 0,
    ) -> Ranks:
        """lb_ranks: board size and each player's standing, in the order given; with
        ``profiles``, each standing carries the player's profile too (a friends list), read by
        one HMGET in the same round trip (own-rank pushes leave it out: they show no names). A
        player whose rank is beyond ``deep_from`` (0: nobody) may get an approximate rank from
        the board's histogram (``approx``), rounded to three significant digits."""
        board = await self.board_period(window_name, scope, at, period)
        name, keys, args = board.ranks_call(players, deep_from)
        if profiles and players:
            flat, joined = await self._replica_read(
                ("FCALL_RO", name, len(keys), *keys, *args), ("HMGET", self.keys.profiles, *players)
            )
        else:
            [flat], joined = (
                await self._replica_read(("FCALL_RO", name, len(keys), *keys, *args)),
                [None] * len(players),
            )
        return board.ranks(players, flat, joined)

    async def rank(
        self,
        player: str,
        window_name: str,
        scope: str = "global",
        *,
        at: int | None = None,
        period: str | None = None,
        deep_from: int = 0,
    ) -> Standing:
        ranks = await self.ranks([player], window_name, scope, at=at, period=period, deep_from=deep_from)
        return ranks.standings[0]

    async def rebuild_rank_index(
        self, window_name: str, scope: str = "global", *, at: int | None = None, period: str | None = None
    ) -> int:
        """lb_rank_rebuild: rebuild the board's histogram, and in dense mode its distinct points
        (a lex board's distinct key parts), from the board, on any board: for boards written
        before they had them (a lex or ascending defined board before this release), after the window's mode changed
        to dense, and after a rebuild from the durable log wrote its members. O(N) in one atomic
        call: seconds on a board of a million members, so call it on a client made with
        ``connect(url, socket_timeout=None)``. ``period`` names a past one as reads do. Returns
        the member count."""
        board = await self.board_period(window_name, scope, at, period)
        keys = [board.board, board.distinct, board.histogram]
        reply = await execute(self.redis, ("FCALL", "lb_rank_rebuild", len(keys), *keys, board.encoding, board.mode))
        return int(reply[0])
