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

from leaderboard import BacklogFull, InvalidSubmission, Submission, closes, now_ms, replies, wire
from leaderboard import protocol as p
from leaderboard.auth import SPECTATOR, AuthError, authenticate
from leaderboard.budget import Budgets, cost
from leaderboard.definitions import default_window
from leaderboard.errors import NotReplicated
from leaderboard.keys import GLOBAL_SCOPE

from .client import Client
from .frames import DELTAS
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
        # the requests the HTTP API shares, per game: each game's boards read and written through its own wrappers
        self._replies = {name: replies.Game.of(game.lb, reads=game.reads) for name, game in games.items()}
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
            # the game's boards as this process holds them: a stored default's windows, the defined boards
            req = await replies.request(
                self._replies[client.game], raw, default_window=self.default_window(client.game)
            )
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
            await self._out.close(client, closes.POLICY, closes.ABUSE)
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

    def default_window(self, game: str) -> str:
        """The window of a request that names none, and of a connection's first board."""
        return default_window(self._games[game].lb.config, self.settings.default_window)

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
                await self._out.close(client, closes.POLICY, exc.code)
                return False
        client.ranks.clear()
        return True

    def welcome(self, client: Client, request_id: Any = None) -> bytes:
        s, identity = self.settings, client.identity
        config = self._games[client.game].lb.config  # with the game's stored default applied
        return wire.welcome(
            gateway=s.gateway_id,
            player=identity.player,
            role=identity.role,
            heartbeat_interval=s.client_ping_interval,
            heartbeat_timeout=2 * s.client_ping_interval,
            windows=config.windows,
            window=self.default_window(client.game),
            top=config.top_n,
            game=client.game,
            deltas=bool(client.wire & DELTAS),
            request_id=request_id,
        )

    # ------------------------------------------------------------ the handlers

    async def ping(self, client: Client, req: p.Ping) -> None:
        await self._out.reply(client, wire.pong(now_ms(), req.id))

    async def hello(self, client: Client, req: p.Hello) -> None:
        # a watch is its player's: a new identity starts without one
        self._games[client.game].hub.overtaken.forget(client)
        if not await self.authenticate(client, req.token):
            return
        if req.deltas is not None:  # offered only when the gateway has them on (LB_GW_DELTAS)
            wire = client.wire | DELTAS if req.deltas and self.settings.deltas else client.wire & ~DELTAS
            self._games[client.game].hub.rewire(client, wire)
        await self._out.reply(client, self.welcome(client, req.id))

    async def resync(self, client: Client, req: p.Resync) -> None:
        key = (req.window, req.board)
        if key not in client.boards:
            raise p.ProtocolError("not_subscribed", f"not subscribed to {req.board!r} in window {req.window!r}", req.id)
        await self._games[client.game].hub.resend(client, key)

    async def subscribe(self, client: Client, req: p.Subscribe) -> None:
        key, cap = (req.window, req.board), self.settings.max_subscriptions
        if key not in client.boards:
            if len(client.boards) >= cap:
                raise p.ProtocolError("too_many_subscriptions", f"at most {cap} boards", req.id)
            if not await replies.read(req, self._games[client.game].hub.exists(key)):
                raise p.ProtocolError("bad_board", f"no board {req.board!r} in window {req.window!r}", req.id)
        # the reply first: the board's first snapshot follows it on the same write path
        await self._out.reply(client, wire.subscribed(req.board, req.window, req.id))
        await self._games[client.game].hub.subscribe(client, key)

    async def unsubscribe(self, client: Client, req: p.Unsubscribe) -> None:
        self._games[client.game].hub.unsubscribe(client, (req.window, req.board))
        await self._out.reply(client, wire.subscribed(req.board, req.window, req.id, type_="unsubscribed"))

    async def watch(self, client: Client, req: p.Watch) -> None:
        """Who may overtake this connection's player (docs/protocol.md, ``overtaken``)."""
        role = client.identity.role
        if role != "player":  # only a player has a rank to be passed on
            raise p.ProtocolError("auth_required" if role == "spectator" else "forbidden", "only players", req.id)
        self._games[client.game].hub.overtaken.watch(client, req.friends, req.top)
        await self._out.reply(client, wire.watching(req.friends, req.top, req.id))

    async def answer(self, client: Client, req: p.Request) -> None:
        """A request the HTTP API answers too: its rules and reply are leaderboard/replies.py's."""
        await self._out.reply(client, await replies.answer(self._replies[client.game], client.identity, req))

    async def recent(self, client: Client, req: p.Recent) -> None:
        entries = self._games[client.game].hub.recent((req.window, req.board))
        msg = wire.recent(board=req.board, window=req.window, entries=entries, request_id=req.id)
        await self._out.reply(client, msg)

    async def boards(self, client: Client, req: p.Boards) -> None:
        lb = self._games[client.game].lb
        await lb.boards.refresh()  # one GET of the version counter: a board defined a moment ago is offered
        msg = wire.boards(
            lb.boards.all(),
            listing=[s for s in self.settings.boards if s != GLOBAL_SCOPE],
            named=map(str, await lb.redis.smembers(lb.keys.scopes)),  # slips named these: LB_MAX_SCOPES at most
            windows=lb.config.windows,
            window=self.default_window(client.game),
            columns=lb.boards.columns,
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


Handler = Callable[[Handlers, Client, Any], Awaitable[None]]

_HANDLERS: dict[type[p.Request], Handler] = {
    p.Ping: Handlers.ping,
    p.Hello: Handlers.hello,
    p.Subscribe: Handlers.subscribe,
    p.Unsubscribe: Handlers.unsubscribe,
    p.Resync: Handlers.resync,
    p.Top: Handlers.answer,
    p.Stats: Handlers.answer,
    p.Recent: Handlers.recent,
    p.Boards: Handlers.boards,
    p.Rank: Handlers.answer,
    p.Around: Handlers.answer,
    p.Ranks: Handlers.answer,
    p.Watch: Handlers.watch,
    p.Submit: Handlers.submit,
    p.Status: Handlers.answer,
    p.Join: Handlers.answer,
    p.Finals: Handlers.answer,
    p.Ban: Handlers.answer,
    p.Unban: Handlers.answer,
    p.Correct: Handlers.answer,
    p.SetProfile: Handlers.answer,
    p.DefineBoard: Handlers.answer,
}
