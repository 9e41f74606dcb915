"""What the gateway does with each client message: one handler per request type, found in a
table as protocol.py finds its parsers (``_HANDLERS``).

``Handlers.on_message`` takes one frame through the rate limit, the parser and the handler; every
failure becomes an ``error`` reply with a stable code (docs/protocol.md) and changes nothing.
Every reply goes out through outbound.py, the socket's one write path.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from redis.exceptions import RedisError

from leaderboard import BacklogFull, BadRequest, InvalidSubmission, Submission, boards, now_ms, wire
from leaderboard import protocol as p
from leaderboard.auth import SPECTATOR, AuthError, authenticate
from leaderboard.errors import Banned, InvalidBoard, InvalidInput, NotReplicated, TournamentError
from leaderboard.moderation import Moderation
from leaderboard.profiles import Profile

from .budget import Budgets, cost
from .client import Client
from .games import Game
from .metrics import Metrics
from .outbound import Outbound
from .settings import GatewaySettings

T = TypeVar("T")


class Handlers:
    def __init__(
        self,
        settings: GatewaySettings,
        out: Outbound,
        games: Mapping[str, Game],
        metrics: Metrics,
    ) -> None:
        self.settings = settings
        self._out = out
        self._games = games  # a client's requests go to its game's wrappers, queue and hub
        self._metrics = metrics
        self._windows = settings.game.windows
        # operator actions per game: each game's boards are found and written through its own wrappers
        self._mods = {name: Moderation(game.lb) for name, game in games.items()}
        self._budgets = Budgets(settings.read_rate, settings.read_burst, settings.read_budgets)

    # ------------------------------------------------------------ one frame

    async def on_message(self, client: Client, raw: str | bytes) -> None:
        s = self.settings
        now = time.monotonic()
        if not client.allow(now, s.rate, s.burst):  # this socket's frames: the gateway's work
            await self._limited(client, now, "too many messages; slow down")
            return
        rid: Any = None
        try:
            req = p.parse(raw, windows=self._windows, default_window=s.window)
            rid = req.id
            key = self._budget_key(client)
            if key is not None and not self._budgets.take(key, cost(req), now):  # Redis's work
                await self._limited(client, now, "too many reads; slow down", rid)
                return
            await _HANDLERS[type(req)](self, client, req)
        except p.ProtocolError as exc:
            self._metrics.bad_input.inc()
            await self._out.reply(client, wire.error(exc.code, exc.message, exc.request_id))
        except (RedisError, OSError):
            self._metrics.redis_errors.inc()
            await self._out.reply(client, wire.error("unavailable", "Redis is unreachable; retry later", rid))

    async def _limited(self, client: Client, now: float, message: str, request_id: Any = None) -> None:
        self._metrics.rate_limited.inc()
        if client.strike(now) > self.settings.abuse_limit:
            await self._out.close(client, 1008, "rate limit exceeded")
        else:
            await self._out.reply(client, wire.error("rate_limited", message, request_id))

    @staticmethod
    def _budget_key(client: Client) -> str | None:
        """Whose read budget a request draws from: its player's, or a spectator's address's;
        None for a game server connection (trusted: no budget)."""
        identity = client.identity
        if identity.role == "server":
            return None
        if identity.player is not None:
            return "p:" + identity.player
        return "a:" + client.address

    # ------------------------------------------------------------ identity

    async def authenticate(self, client: Client, token: str | None) -> bool:
        """Set the client's identity from a token; on a bad one, error then close 1008."""
        if token is None:
            client.identity = SPECTATOR
        else:
            try:
                client.identity = authenticate(token, self.settings.jwt_secrets)
            except AuthError as exc:
                await self._out.reply(client, wire.error(exc.code, exc.message))
                await self._out.close(client, 1008, exc.code)
                return False
        client.ranks.clear()
        return True

    def welcome(self, client: Client, request_id: Any = None) -> bytes:
        s, identity = self.settings, client.identity
        return wire.welcome(
            gateway=s.gateway_id,
            player=identity.player,
            role=identity.role,
            heartbeat_interval=s.client_ping_interval,
            heartbeat_timeout=2 * s.client_ping_interval,
            windows=self._windows,
            window=s.window,
            top=s.game.top_n,
            game=client.game,
            request_id=request_id,
        )

    # ------------------------------------------------------------ the handlers

    async def ping(self, client: Client, req: p.Ping) -> None:
        await self._out.reply(client, wire.pong(now_ms(), req.id))

    async def hello(self, client: Client, req: p.Hello) -> None:
        if await self.authenticate(client, req.token):
            await self._out.reply(client, self.welcome(client, req.id))

    async def subscribe(self, client: Client, req: p.Subscribe) -> None:
        key, cap = (req.window, req.board), self.settings.max_subscriptions
        if key not in client.boards:
            if len(client.boards) >= cap:
                raise p.ProtocolError("too_many_subscriptions", f"at most {cap} boards", req.id)
            if not await _read(req, self._games[client.game].hub.exists(key)):
                raise p.ProtocolError("bad_board", f"no board {req.board!r} in window {req.window!r}", req.id)
        # the reply first: the board's first snapshot follows it on the same write path
        await self._out.reply(client, wire.subscribed(req.board, req.window, req.id))
        await self._games[client.game].hub.subscribe(client, key)

    async def unsubscribe(self, client: Client, req: p.Unsubscribe) -> None:
        self._games[client.game].hub.unsubscribe(client, (req.window, req.board))
        await self._out.reply(client, wire.subscribed(req.board, req.window, req.id, type_="unsubscribed"))

    async def top(self, client: Client, req: p.Top) -> None:
        top = await _read(req, self._games[client.game].lb.top(req.window, req.board, req.n, period=req.period))
        msg = wire.top(
            board=req.board,
            window=req.window,
            period=top.period.label,
            entries=top.entries,
            mode=top.mode,
            request_id=req.id,
        )
        await self._out.reply(client, msg)

    async def stats(self, client: Client, req: p.Stats) -> None:
        st = await _read(req, self._games[client.game].lb.stats(req.window, req.board, period=req.period))
        msg = wire.stats(
            board=req.board,
            window=req.window,
            period=st.period.label,
            size=st.size,
            players=st.players,
            request_id=req.id,
        )
        await self._out.reply(client, msg)

    async def recent(self, client: Client, req: p.Recent) -> None:
        entries = self._games[client.game].hub.recent((req.window, req.board))
        msg = wire.recent(board=req.board, window=req.window, entries=entries, request_id=req.id)
        await self._out.reply(client, msg)

    async def rank(self, client: Client, req: p.Rank) -> None:
        me = _player(client, req)  # even to ask about someone else
        player = req.player or me
        ranks = await _read(req, self._games[client.game].lb.ranks([player], req.window, req.board, period=req.period))
        [st] = ranks.standings
        msg = wire.rank(
            board=req.board,
            window=req.window,
            period=ranks.period.label,
            player=player,
            rank=st.rank,
            score=st.score,
            size=ranks.size,
            top_percent=st.top_percent,
            approx=st.approx,
            mode=ranks.mode,
            request_id=req.id,
            keys=st.keys,
        )
        await self._out.reply(client, msg)

    async def around(self, client: Client, req: p.Around) -> None:
        me = _player(client, req)  # even to ask about someone else
        player = req.player or me
        around = await _read(
            req, self._games[client.game].lb.around(player, req.window, req.board, req.k, period=req.period)
        )
        msg = wire.around(
            board=req.board,
            window=req.window,
            period=around.period.label,
            player=player,
            entries=around.entries,
            mode=around.mode,
            size=around.size,
            request_id=req.id,
        )
        await self._out.reply(client, msg)

    async def ranks(self, client: Client, req: p.Ranks) -> None:
        _player(client, req)
        call = self._games[client.game].lb.ranks(
            list(req.players), req.window, req.board, period=req.period, profiles=True
        )
        ranks = await _read(req, call)
        msg = wire.ranks(
            board=req.board,
            window=req.window,
            period=ranks.period.label,
            size=ranks.size,
            standings=ranks.standings,
            mode=ranks.mode,
            request_id=req.id,
        )
        await self._out.reply(client, msg)

    async def submit(self, client: Client, req: p.Submit) -> None:
        role = client.identity.role
        if role != "server":
            code = "auth_required" if role == "spectator" else "forbidden"
            raise p.ProtocolError(code, "only game server connections may submit", req.id)
        fields = dict(req.fields)
        fields.setdefault("ts", now_ms())
        try:
            sub = Submission.parse(fields)  # the queue checks the clock and the game's limits
            stream_id = await self._games[client.game].queue.submit(sub)
        except InvalidSubmission as exc:
            raise p.ProtocolError(exc.code, exc.message, req.id) from None
        except (BacklogFull, NotReplicated) as exc:
            raise p.ProtocolError(exc.code, str(exc), req.id) from None
        await self._out.reply(client, wire.submitted(sub.id, stream_id, req.id))

    async def status(self, client: Client, req: p.Status) -> None:
        # a game server asks after its own slips (docs/protocol.md: "Learning a slip's outcome")
        if client.identity.role != "server":
            code = "auth_required" if client.identity.role == "spectator" else "forbidden"
            raise p.ProtocolError(code, "only game server connections may ask for a submission's status", req.id)
        found = await _read(req, self._games[client.game].lb.status(req.submission))
        msg = {"type": "status", "submission": found.id, "status": found.status}
        if found.code is not None:
            msg |= {"code": found.code, "message": found.message or ""}
        await self._out.reply(client, wire.reply(msg, req.id))

    async def finals(self, client: Client, req: p.Finals) -> None:
        kept = await _read(req, self._games[client.game].lb.finals(req.window, req.n))
        await self._out.reply(client, wire.finals(board=req.board, window=req.window, periods=kept, request_id=req.id))

    async def join(self, client: Client, req: p.Join) -> None:
        # Entry is the game's decision (fees, qualification, invitations), so players cannot
        # enter themselves: only a game server connection (or the Python API) enters them.
        role = client.identity.role
        if role != "server":
            code = "auth_required" if role == "spectator" else "forbidden"
            raise p.ProtocolError(code, "only game server connections may enter players in a tournament", req.id)
        added = await _read(req, self._games[client.game].lb.join(req.tournament, req.players))
        await self._out.reply(client, wire.joined(req.tournament, req.players, added, req.id))

    # ------------------------------------------------------------ operator requests (server role)

    def _operator(self, client: Client, req: p.Request) -> str:
        """The actor of an operator request: the server token's subject. Players never moderate."""
        role, who = client.identity.role, client.identity.player
        if role != "server" or who is None:
            code = "auth_required" if role == "spectator" else "forbidden"
            raise p.ProtocolError(code, "only game server connections may moderate", req.id)
        return who

    async def board(self, client: Client, req: p.DefineBoard) -> None:
        """Board definitions, for game servers (docs/data-model.md, Board definitions)."""
        if client.identity.role != "server":
            code = "auth_required" if client.identity.role == "spectator" else "forbidden"
            raise p.ProtocolError(code, "only game server connections may define boards", req.id)
        await self._out.reply(client, wire.reply(await _define(self._games[client.game], req), req.id))

    async def ban(self, client: Client, req: p.Ban) -> None:
        actor = self._operator(client, req)
        result = await _act(req, self._mods[client.game].ban(req.player, actor=actor, reason=req.reason))
        msg = {"type": "banned", "player": req.player, "boards": result.boards}
        await self._out.reply(client, wire.reply(msg, req.id))

    async def unban(self, client: Client, req: p.Unban) -> None:
        actor = self._operator(client, req)
        was = await _act(req, self._mods[client.game].unban(req.player, actor=actor, reason=req.reason))
        await self._out.reply(client, wire.reply({"type": "unbanned", "player": req.player, "was_banned": was}, req.id))

    async def correct(self, client: Client, req: p.Correct) -> None:
        actor = self._operator(client, req)
        call = self._mods[client.game].correct(
            req.player,
            req.points,
            actor=actor,
            reason=req.reason,
            window_name=req.window,
            period=req.period,
            scopes=req.scopes,
        )
        rows = await _act(req, call)
        boards = [
            {
                "window": c.board.window,
                "period": c.board.period,
                "board": c.board.scope,
                "previous": c.previous,
                "rank": c.rank,
            }
            for c in rows
        ]
        msg = {"type": "corrected", "player": req.player, "points": int(req.points), "boards": boards}
        await self._out.reply(client, wire.reply(msg, req.id))

    async def profile(self, client: Client, req: p.SetProfile) -> None:
        """A server sets any player's profile; a player may set their own name and country (an
        avatar is an image every viewer's browser fetches, so only the game backend sets it)."""
        identity = client.identity
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
        stored = await _act(req, self._mods[client.game].set_profile(player, profile))
        await self._out.reply(client, wire.reply({"type": "profile", "player": player, "profile": stored}, req.id))


Handler = Callable[[Handlers, Client, Any], Awaitable[None]]


async def _define(game: Game, req: p.DefineBoard) -> dict[str, Any]:
    """A board definition request's reply, its refusals raised with their own codes."""
    lb = game.lb
    try:
        if req.action in ("create", "update"):
            definition = boards.parse(req.definition or {})
            made = await (lb.create_board(definition) if req.action == "create" else lb.update_board(definition))
            return {"type": "board", "action": req.action, "definition": made.as_dict()}
        if req.action == "delete":
            await lb.delete_board(req.board or "")
            return {"type": "board", "action": "delete", "board": req.board}
        await lb.boards.refresh()
        if req.action == "list":
            return {"type": "board", "action": "list", "boards": [d.as_dict() for d in lb.boards.all()]}
        found = lb.boards.get(req.board or "")
        if found is None:
            raise InvalidBoard("unknown_board", f"no board {req.board!r}")
        return {"type": "board", "action": "show", "definition": found.as_dict()}
    except InvalidBoard as exc:
        raise p.ProtocolError(exc.code, exc.message, req.id) from None


_HANDLERS: dict[type[p.Request], Handler] = {
    p.Ping: Handlers.ping,
    p.Hello: Handlers.hello,
    p.Subscribe: Handlers.subscribe,
    p.Unsubscribe: Handlers.unsubscribe,
    p.Top: Handlers.top,
    p.Stats: Handlers.stats,
    p.Recent: Handlers.recent,
    p.Rank: Handlers.rank,
    p.Around: Handlers.around,
    p.Ranks: Handlers.ranks,
    p.Submit: Handlers.submit,
    p.Status: Handlers.status,
    p.Join: Handlers.join,
    p.Finals: Handlers.finals,
    p.Ban: Handlers.ban,
    p.Unban: Handlers.unban,
    p.Correct: Handlers.correct,
    p.SetProfile: Handlers.profile,
    p.DefineBoard: Handlers.board,
}


def _player(client: Client, req: p.Request) -> str:
    """The connection's own player; requests about standings need a player or server token."""
    me = client.identity.player
    if me is None:
        raise p.ProtocolError("auth_required", "this request needs a player or server token", req.id)
    return me


async def _act(req: p.Request, call: Awaitable[T]) -> T:
    """An operator action refused by its checks: the error's own stable code, nothing changed."""
    try:
        return await call
    except (InvalidInput, Banned) as exc:
        raise p.ProtocolError(exc.code, exc.message, req.id) from None


async def _read(req: p.Request, call: Awaitable[T]) -> T:
    """A read whose arguments Redis refused: the client's bad input, in the client's words."""
    try:
        return await call
    except (BadRequest, TournamentError) as exc:
        code = "bad_message" if exc.code == "bad_request" else exc.code
        raise p.ProtocolError(code, str(exc), req.id) from None
