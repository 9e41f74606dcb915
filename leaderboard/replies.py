"""The answer to each request the socket and the HTTP API share: who may ask it, the library call,
the reply (leaderboard.wire), built once for both transports.

``answer(game, identity, req)`` returns the reply's bytes, carrying ``req.id`` (the socket's;
None over HTTP). A refusal raises ``ProtocolError`` with its stable code (docs/protocol.md) and
changes nothing; a Redis that does not answer raises ``RedisError``/``OSError``, the caller's to
turn into ``unavailable``. Requests that belong to one transport (subscribe, submit, ping…) are
not here::

    game = Game(lb, Moderation(lb))
    body = await answer(game, identity, protocol.parse_message(msg, windows=..., default_window=...))
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from . import boards, wire
from . import messages as m
from . import protocol as p
from .audit import AuditedModeration
from .auth import Identity
from .errors import BadRequest, Banned, InvalidBoard, InvalidInput, TournamentError
from .library import Leaderboard
from .moderation import Moderation
from .profiles import Profile, display

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Game:
    """One game's wrappers: its boards' and its operator actions'."""

    lb: Leaderboard
    mods: Moderation

    @classmethod
    def of(cls, lb: Leaderboard, *, reads: Leaderboard | None = None) -> Game:
        """``lb``'s boards and operator actions; ``reads``: the same game's wrappers whose reads
        may be served by replicas (``Leaderboard.reading_from``), for the players' requests."""
        return cls(reads or lb, AuditedModeration(lb))  # every moderator action lands in the audit log


def parse(game: Game, msg: str | bytes | dict[str, Any], *, default_window: str) -> p.Request:
    """``msg`` (a frame, or a decoded message) as the socket's parser reads it, against the game's
    boards as this process holds them: its windows (a stored default's) and its defined boards."""
    config, defined = game.lb.config, game.lb.boards

    def windows_of(board: str) -> tuple[str, ...] | None:
        found = defined.get(boards.definition_of(board))
        return None if found is None or not boards.keeps(found, board) else found.windows

    kw: dict[str, Any] = {"windows": config.windows, "default_window": default_window, "boards": windows_of}
    return p.parse_message(msg, **kw) if isinstance(msg, dict) else p.parse(msg, **kw)


async def request(game: Game, msg: str | bytes | dict[str, Any], *, default_window: str) -> p.Request:
    """``parse()``, and a board unknown here looked up in Redis once more before it is
    ``unknown_board``: defined a moment ago elsewhere, before this process's tick."""
    try:
        return parse(game, msg, default_window=default_window)
    except p.ProtocolError as exc:
        if exc.code != "unknown_board" or not await game.lb.boards.refresh():
            raise
    return parse(game, msg, default_window=default_window)


async def answer(game: Game, identity: Identity, req: p.Request) -> bytes:
    """The reply to ``req`` asked by ``identity`` (KeyError: not a shared request, see ANSWERED)."""
    return await _ANSWERS[type(req)](game, identity, req)


# ---------------------------------------------------------------- reads


async def _top(game: Game, identity: Identity, req: p.Top) -> bytes:
    top = await read(req, game.lb.top(req.window, req.board, req.n, period=req.period))
    return wire.top(
        board=req.board, window=req.window, period=top.period.label, entries=top.entries, mode=top.mode,
        request_id=req.id,
    )  # fmt: skip


async def _stats(game: Game, identity: Identity, req: p.Stats) -> bytes:
    st = await read(req, game.lb.stats(req.window, req.board, period=req.period))
    return wire.stats(
        board=req.board, window=req.window, period=st.period.label, size=st.size, players=st.players,
        request_id=req.id,
    )  # fmt: skip


async def _rank(game: Game, identity: Identity, req: p.Rank) -> bytes:
    me = _player(identity, req)  # a token even to ask about someone else
    player = req.player or me
    ranks = await read(req, game.lb.ranks([player], req.window, req.board, period=req.period))
    [st] = ranks.standings
    return wire.rank(
        board=req.board, window=req.window, period=ranks.period.label, player=player, rank=st.rank,
        score=st.score, size=ranks.size, top_percent=st.top_percent, approx=st.approx, mode=ranks.mode,
        request_id=req.id, keys=st.keys,
    )  # fmt: skip


async def _around(game: Game, identity: Identity, req: p.Around) -> bytes:
    me = _player(identity, req)  # a token even to ask about someone else
    player = req.player or me
    found = await read(req, game.lb.around(player, req.window, req.board, req.k, period=req.period))
    return wire.around(
        board=req.board, window=req.window, period=found.period.label, player=player, entries=found.entries,
        mode=found.mode, size=found.size, request_id=req.id,
    )  # fmt: skip


async def _ranks(game: Game, identity: Identity, req: p.Ranks) -> bytes:
    _player(identity, req)
    call = game.lb.ranks(list(req.players), req.window, req.board, period=req.period, profiles=True)
    found = await read(req, call)
    return wire.ranks(
        board=req.board, window=req.window, period=found.period.label, size=found.size,
        standings=found.standings, mode=found.mode, request_id=req.id,
    )  # fmt: skip


async def _finals(game: Game, identity: Identity, req: p.Finals) -> bytes:
    kept = await read(req, game.lb.finals(req.window, req.n, req.board))
    return wire.finals(board=req.board, window=req.window, periods=kept, request_id=req.id)


async def _status(game: Game, identity: Identity, req: p.Status) -> bytes:
    # a game server asks after its own slips (docs/protocol.md: "Learning a slip's outcome")
    _server(identity, req, "ask for a submission's status")
    found = await read(req, game.lb.status(req.submission))
    msg: m.Status = {"type": "status", "submission": found.id, "status": found.status}
    if found.code is not None:
        msg["code"], msg["message"] = found.code, found.message or ""
    return wire.reply(msg, req.id)


# ---------------------------------------------------------------- operator actions (server role)


async def _join(game: Game, identity: Identity, req: p.Join) -> bytes:
    # Entry is the game's decision (fees, qualification, invitations), so players cannot enter
    # themselves: only a game server (or the Python API) enters them.
    _server(identity, req, "enter players in a tournament")
    added = await read(req, game.lb.join(req.tournament, req.players))
    return wire.joined(req.tournament, req.players, added, req.id)


async def _ban(game: Game, identity: Identity, req: p.Ban) -> bytes:
    actor = _server(identity, req, "moderate")
    result = await _act(req, game.mods.ban(req.player, actor=actor, reason=req.reason))
    return wire.reply({"type": "banned", "player": req.player, "boards": result.boards}, req.id)


async def _unban(game: Game, identity: Identity, req: p.Unban) -> bytes:
    actor = _server(identity, req, "moderate")
    was = await _act(req, game.mods.unban(req.player, actor=actor, reason=req.reason))
    return wire.reply({"type": "unbanned", "player": req.player, "was_banned": was}, req.id)


async def _correct(game: Game, identity: Identity, req: p.Correct) -> bytes:
    actor = _server(identity, req, "moderate")
    call = game.mods.correct(
        req.player, req.points, actor=actor, reason=req.reason, window_name=req.window, period=req.period,
        scopes=req.scopes, values=req.values, metadata=req.metadata, remove=req.remove,
    )  # fmt: skip
    rows = await _act(req, call)
    defined = req.points is None  # a defined board's correction: values (or remove), no points
    boards: list[m.CorrectedBoard] = []
    for c in rows:
        row: m.CorrectedBoard = {
            "window": c.board.window, "period": c.board.period, "board": c.board.scope,
            "previous": c.previous, "rank": c.rank,
        }  # fmt: skip
        if defined:
            row["previous_keys"] = None if c.keys is None else [str(v) for v in c.keys]
        boards.append(row)
    msg: m.Corrected = {"type": "corrected", "player": req.player, "boards": boards}
    if defined:  # key values as text, as snapshots carry them (int64 is beyond JSON's exact numbers)
        msg["values"] = None if req.values is None else [str(int(v)) for v in req.values]
    else:
        msg["points"] = int(req.points)
    return wire.reply(msg, req.id)


async def _profile(game: Game, identity: Identity, req: p.SetProfile) -> bytes:
    """A server sets any player's profile; a player may set their own name and country (an avatar
    is an image every viewer's browser fetches, so only the game backend sets it)."""
    if identity.player is None:
        raise p.ProtocolError("auth_required", "setting a profile needs a player or server token", req.id)
    if identity.role == "server" and req.player is None:
        raise p.ProtocolError("bad_message", "player is required on a server connection", req.id)
    player = req.player or identity.player
    if identity.role != "server" and (player != identity.player or "avatar" in req.fields):
        raise p.ProtocolError("forbidden", "a player may set only their own name and country", req.id)
    try:
        profile = Profile.parse(dict(req.fields))
    except InvalidInput as exc:
        raise p.ProtocolError(exc.code, exc.message, req.id) from None
    stored = await _act(req, game.mods.set_profile(player, profile))
    msg: m.Profile = {"type": "profile", "player": player, "profile": {}}
    display(stored, msg["profile"])  # the fields a page may show, as every entry carries them
    return wire.reply(msg, req.id)


async def _board(game: Game, identity: Identity, req: p.DefineBoard) -> bytes:
    """Board definitions, for game servers (docs/data-model.md, Board definitions)."""
    _server(identity, req, "define boards")
    lb = game.lb
    reply: m.Board
    try:
        if req.action in ("create", "update"):
            definition = boards.parse(req.definition or {})
            made = await (lb.create_board(definition) if req.action == "create" else lb.update_board(definition))
            await lb.boards.refresh()  # this process reads it at once, not a tick later
            reply = {"type": "board", "action": req.action, "definition": made.shown()}
        elif req.action == "delete":
            await lb.delete_board(p.board_id(req.board or ""))
            await lb.boards.refresh()  # its reads are unknown_board here at once, not a tick later
            reply = {"type": "board", "action": "delete", "board": req.board}
        else:
            await lb.boards.refresh()
            if req.action == "list":
                reply = {"type": "board", "action": "list", "boards": [d.shown() for d in lb.boards.all()]}
            else:
                found = lb.boards.get(p.board_id(req.board or ""))
                if found is None:
                    raise InvalidBoard("unknown_board", f"no board {req.board!r}")
                reply = {"type": "board", "action": "show", "definition": found.shown()}
    except InvalidBoard as exc:
        raise p.ProtocolError(exc.code, exc.message, req.id) from None
    return wire.reply(reply, req.id)


# ---------------------------------------------------------------- the rules


def _player(identity: Identity, req: p.Request) -> str:
    """The asker's own player; requests about standings need a player or server token."""
    if identity.player is None:
        raise p.ProtocolError("auth_required", "this request needs a player or server token", req.id)
    return identity.player


def _server(identity: Identity, req: p.Request, what: str) -> str:
    """The actor of a game server's request: its token's subject. Players never may."""
    if identity.role != "server" or identity.player is None:
        code = "auth_required" if identity.role == "spectator" else "forbidden"
        raise p.ProtocolError(code, f"only game servers may {what}", req.id)
    return identity.player


async def _act(req: p.Request, call: Awaitable[T]) -> T:
    """An operator action refused by its checks: the error's own stable code, nothing changed."""
    try:
        return await call
    except (InvalidInput, InvalidBoard, Banned) as exc:
        raise p.ProtocolError(exc.code, exc.message, req.id) from None


async def read(req: p.Request, call: Awaitable[T]) -> T:
    """A read whose arguments Redis refused: the asker's bad input, in the asker's words."""
    try:
        return await call
    except (BadRequest, TournamentError) as exc:
        code = "bad_message" if exc.code == "bad_request" else exc.code
        raise p.ProtocolError(code, exc.message, req.id) from None


Answer = Callable[[Game, Identity, Any], Awaitable[bytes]]

_ANSWERS: dict[type[p.Request], Answer] = {
    p.Top: _top,
    p.Stats: _stats,
    p.Rank: _rank,
    p.Around: _around,
    p.Ranks: _ranks,
    p.Finals: _finals,
    p.Status: _status,
    p.Join: _join,
    p.Ban: _ban,
    p.Unban: _unban,
    p.Correct: _correct,
    p.SetProfile: _profile,
    p.DefineBoard: _board,
}
ANSWERED = frozenset(_ANSWERS)  # the request types answer() knows
