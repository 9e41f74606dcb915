"""The Gateway: one process's WebSocket server, its Redis clients and its background tasks.

::

    async with Gateway(settings) as gw:   # listening, subscribed, sweeping, pushing ranks
        await gw.serve_forever()          # until close() or drain() finishes

``close()`` is idempotent; ``drain()`` is the graceful form (SIGTERM in ``__main__``): readiness
fails first, then the listener closes, then sockets are closed in batches with 1012.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from typing import Any
from urllib.parse import parse_qs

import redis.asyncio as aioredis
from redis.exceptions import RedisError
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.protocol import State

from leaderboard import (
    BacklogFull,
    BadRequest,
    InvalidSubmission,
    Leaderboard,
    Submission,
    connect,
    now_ms,
    wire,
)
from leaderboard.keys import GLOBAL_SCOPE
from leaderboard.metrics_server import MetricsServer
from leaderboard.queue import Queue

from . import protocol as p
from .auth import SPECTATOR, AuthError, Identity, authenticate, issue
from .client import Client
from .heartbeat import sweep_forever
from .http import Routes
from .hub import Hub
from .metrics import Metrics
from .ranks import RankPusher
from .settings import GatewaySettings

log = logging.getLogger("gateway")

DRAIN_REASON = "draining; reconnect"


class Gateway:
    def __init__(self, settings: GatewaySettings) -> None:
        self.settings = settings
        self.metrics = Metrics()
        self.clients: set[Client] = set()
        self.draining = False
        self._windows = settings.game.windows
        self._default = (settings.window, GLOBAL_SCOPE)
        self._redis: aioredis.Redis | None = None
        self._raw: aioredis.Redis | None = None
        self._server: Server | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._closing: asyncio.Task[None] | None = None
        self._closed = asyncio.Event()
        self._port = 0
        self._metrics_server = (
            MetricsServer(self.metrics.registry, settings.metrics_host, settings.metrics_port)
            if settings.metrics_port
            else None
        )
        # connection-rate cap: a token bucket refilled at connect_rate per second
        self._conn_tokens = settings.connect_rate
        self._conn_refill = time.monotonic()
        # websockets logs every connection at INFO; our policy is lifecycle only.
        self._ws_log = logging.getLogger("gateway.websockets")
        if self._ws_log.level == logging.NOTSET:
            self._ws_log.setLevel(logging.WARNING)

    # ------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> Gateway:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> None:
        s = self.settings
        self._redis = connect(s.redis_url)
        self._raw = aioredis.Redis.from_url(s.redis_url)  # bytes: snapshots pass through unchanged
        self.lb = Leaderboard(self._redis, s.game)
        self.queue = Queue(self._redis, s.game, backlog_max=s.backlog_max)
        self.hub = Hub(s, self._raw, self.lb, self.metrics)
        self.hub.start()
        if self._metrics_server is not None:
            await self._metrics_server.start()
        routes = Routes(
            static_dir=s.static_dir,
            admit=self._admit,
            not_ready=self._not_ready,
            demo_token=self._demo_token,
        )
        self._server = await serve(
            self._handle,
            s.host,
            s.port,
            process_request=routes.process_request,
            compression=None,  # frames are written pre-framed, identical for every socket
            # heartbeats come from one sweep task (heartbeat.py) unless websockets' are asked for
            ping_interval=s.ping_interval if s.heartbeat == "websockets" else None,
            ping_timeout=s.ping_timeout if s.heartbeat == "websockets" else None,
            close_timeout=s.close_timeout,
            max_size=s.max_frame,  # beyond: websockets closes with 1009
            max_queue=4,  # a flooding client is paused by TCP, not buffered here
            write_limit=s.write_buffer,
            server_header=None,
            logger=self._ws_log,
            reuse_port=s.reuse_port,
            backlog=s.backlog,
        )
        self._port = int(self._server.sockets[0].getsockname()[1])
        rank = RankPusher(lambda: self.clients, self.hub, self.lb, s, self.metrics)
        self._tasks = [
            asyncio.create_task(sweep_forever(lambda: self.clients, self.hub, s, self.metrics), name="sweep"),
            asyncio.create_task(rank.run_forever(), name="ranks"),
        ]
        log.info("gateway %s listening on %s:%d", s.gateway_id, s.host, self.port)

    @property
    def port(self) -> int:
        """The bound port (still known after the listener closed)."""
        return self._port

    @property
    def metrics_port(self) -> int | None:
        """The port of ``GET /metrics`` (None: turned off)."""
        return self._metrics_server.port if self._metrics_server is not None else None

    async def serve_forever(self) -> None:
        await self._closed.wait()

    async def drain(self) -> None:
        """Graceful stop: fail readiness, stop accepting, close sockets in staggered batches
        with 1012 over ``drain_window``, then close()."""
        if self.draining or self._closing is not None:
            return
        s = self.settings
        self.draining = True
        self.metrics.draining.set(1)
        log.info("draining %d connections over %.1f s", len(self.clients), s.drain_window)
        # Readiness fails first so a load balancer stops sending before the port goes away.
        await asyncio.sleep(s.drain_delay)
        if self._server is not None:
            self._server.server.close()  # stop accepting; open sockets stay
        # Staggered: all clients reconnecting at the same instant would hit the others at once.
        batch_count = s.drain_batches
        pending = sorted(self.clients, key=id)
        size = -(-len(pending) // batch_count) if pending else 0
        closes: list[asyncio.Task[None]] = []
        for i in range(batch_count):
            for client in pending[i * size : (i + 1) * size]:
                closes.append(asyncio.create_task(self._close_client(client, 1012, DRAIN_REASON)))
            if i < batch_count - 1 and size:
                await asyncio.sleep(s.drain_window / batch_count)
        if closes:
            await asyncio.wait(closes, timeout=s.close_timeout + 1)
        await self.close()

    async def close(self) -> None:
        """Stop at once (idempotent): connections get 1012 without the drain's pacing."""
        if self._closing is None:
            self._closing = asyncio.create_task(self._close())
        await asyncio.shield(self._closing)

    async def _close(self) -> None:
        # Background tasks first: nothing may write to a socket that is being closed.
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        # Then the server: it stops accepting, closes the remaining sockets, awaits the handlers.
        if self._server is not None:
            self._server.close(code=1012, reason=DRAIN_REASON)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), self.settings.close_timeout + 1)
        # The hub last: handlers unsubscribe on their way out.
        if hasattr(self, "hub"):
            await self.hub.close()
        for client in (self._redis, self._raw):
            if client is not None:
                await client.aclose()
        if self._metrics_server is not None:  # last: a scrape during the drain still answers
            await self._metrics_server.close()
        self._closed.set()
        log.info("gateway %s closed", self.settings.gateway_id)

    # ------------------------------------------------------------ admission and readiness

    def _admit(self) -> str | None:
        s = self.settings
        if self.draining or self._closing is not None:
            self.metrics.refused.labels("draining").inc()
            return "draining"
        if s.max_connections and len(self.clients) >= s.max_connections:
            self.metrics.refused.labels("cap").inc()
            return "connection cap reached"
        if s.connect_rate > 0:
            now = time.monotonic()
            self._conn_tokens = min(s.connect_rate, self._conn_tokens + (now - self._conn_refill) * s.connect_rate)
            self._conn_refill = now
            if self._conn_tokens < 1:
                self.metrics.refused.labels("rate").inc()
                return "connection rate cap reached"
            self._conn_tokens -= 1
        return None

    def _demo_token(self) -> bytes | None:
        """A player token for a random demo player (the local fleet's page); off in production."""
        s = self.settings
        if not s.demo_tokens or not s.jwt_secrets:
            return None
        player = f"player{random.randrange(s.demo_players)}"
        token = issue(player, "player", s.jwt_secrets[0], exp=time.time() + 3600)
        return wire.encode({"token": token, "player": player})

    def _not_ready(self) -> str | None:
        if self.draining or self._closing is not None:
            return "draining"
        if not self.hub.connected.is_set():
            return "redis unreachable"
        return None

    # ------------------------------------------------------------ one connection

    async def _handle(self, ws: ServerConnection) -> None:
        s = self.settings
        client = Client(ws, time.monotonic(), s.burst)
        request = ws.request
        assert request is not None
        if s.allowed_origins and request.headers.get("Origin") not in s.allowed_origins:
            await ws.close(1008, "forbidden origin")
            return
        if s.max_connections and len(self.clients) >= s.max_connections:  # handshakes in flight raced past _admit
            self.metrics.refused.labels("cap").inc()
            await ws.close(1013, "overloaded; retry later")
            return
        token = parse_qs(request.path.partition("?")[2]).get("token")
        # websockets keeps the handshake request and response (headers and all) for the life of
        # the connection; nothing reads them after this point, and at 10k sockets they were a
        # sizeable share of the memory per connection. The request object itself must stay:
        # websockets takes "request is None" to mean "handshake not done yet".
        ws.response = None
        request.headers.clear()
        if token and not await self._authenticate(client, token[0]):
            return
        self.clients.add(client)
        self.metrics.accepted.inc()
        self.metrics.connections.inc()
        try:
            await ws.send(self._welcome(client.identity), text=True)
            await self.hub.subscribe(client, self._default)
            async for raw in ws:
                await self._on_message(client, raw)
        except ConnectionClosed:
            pass
        finally:
            self.clients.discard(client)
            self.metrics.connections.dec()
            self.hub.remove(client)
            client.closed = True

    async def _authenticate(self, client: Client, token: str | None) -> bool:
        """Set the client's identity from a token; on a bad one, error then close 1008."""
        if token is None:
            client.identity = SPECTATOR
        else:
            try:
                client.identity = authenticate(token, self.settings.jwt_secrets)
            except AuthError as exc:
                with contextlib.suppress(ConnectionClosed):
                    await client.ws.send(wire.error(exc.code, exc.message), text=True)
                    await client.ws.close(1008, exc.code)
                return False
        client.ranks.clear()
        return True

    def _welcome(self, identity: Identity, request_id: Any = None) -> bytes:
        s = self.settings
        return wire.welcome(
            gateway=s.gateway_id,
            player=identity.player,
            role=identity.role,
            heartbeat_interval=s.client_ping_interval,
            heartbeat_timeout=2 * s.client_ping_interval,
            windows=self._windows,
            window=s.window,
            top=s.game.top_n,
            request_id=request_id,
        )

    async def _on_message(self, client: Client, raw: str | bytes) -> None:
        s, ws = self.settings, client.ws
        now = time.monotonic()
        if not client.allow(now, s.rate, s.burst):
            self.metrics.rate_limited.inc()
            if client.strike(now) > s.abuse_limit:
                await ws.close(1008, "rate limit exceeded")
            else:
                await ws.send(wire.error("rate_limited", "too many messages; slow down"), text=True)
            return
        try:
            req = p.parse(raw, windows=self._windows, default_window=s.window)
        except p.ProtocolError as exc:
            self.metrics.bad_input.inc()
            await ws.send(wire.error(exc.code, exc.message, exc.request_id), text=True)
            return
        try:
            await self._dispatch(client, req)
        except p.ProtocolError as exc:
            self.metrics.bad_input.inc()
            await ws.send(wire.error(exc.code, exc.message, exc.request_id), text=True)
        except (RedisError, OSError):
            self.metrics.redis_errors.inc()
            await ws.send(wire.error("unavailable", "Redis is unreachable; retry later", req.id), text=True)

    async def _dispatch(self, client: Client, req: p.Request) -> None:
        ws, rid = client.ws, req.id
        if isinstance(req, p.Ping):
            await ws.send(wire.pong(now_ms(), rid), text=True)
        elif isinstance(req, p.Hello):
            if await self._authenticate(client, req.token):
                await ws.send(self._welcome(client.identity, rid), text=True)
        elif isinstance(req, p.Subscribe):
            key = (req.window, req.board)
            if key not in client.boards:
                if len(client.boards) >= self.settings.max_subscriptions:
                    raise p.ProtocolError(
                        "too_many_subscriptions", f"at most {self.settings.max_subscriptions} boards", rid
                    )
                if not await self._read(req, self.hub.exists(key)):
                    raise p.ProtocolError("bad_board", f"no board {req.board!r} in window {req.window!r}", rid)
            await ws.send(wire.subscribed(req.board, req.window, rid), text=True)
            await self.hub.subscribe(client, key)
        elif isinstance(req, p.Unsubscribe):
            self.hub.unsubscribe(client, (req.window, req.board))
            await ws.send(wire.subscribed(req.board, req.window, rid, type_="unsubscribed"), text=True)
        elif isinstance(req, p.Top):
            top = await self._read(req, self.lb.top(req.window, req.board, req.n))
            await ws.send(
                wire.top(board=req.board, window=req.window, period=top.period.label, entries=top.entries,
                         request_id=rid),
                text=True,
            )  # fmt: skip
        elif isinstance(req, p.Stats):
            st = await self._read(req, self.lb.stats(req.window, req.board))
            await ws.send(
                wire.stats(board=req.board, window=req.window, period=st.period.label, size=st.size,
                           players=st.players, request_id=rid),
                text=True,
            )  # fmt: skip
        elif isinstance(req, p.Rank | p.Around | p.Ranks):
            await self._standing(client, req)
        elif isinstance(req, p.Submit):
            await self._submit(client, req)

    async def _standing(self, client: Client, req: p.Rank | p.Around | p.Ranks) -> None:
        me = client.identity.player
        if me is None:
            raise p.ProtocolError("auth_required", "this request needs a player or server token", req.id)
        board, win, rid = req.board, req.window, req.id
        if isinstance(req, p.Ranks):
            ranks = await self._read(req, self.lb.ranks(list(req.players), win, board))
            msg = wire.ranks(
                board=board,
                window=win,
                period=ranks.period.label,
                size=ranks.size,
                standings=ranks.standings,
                request_id=rid,
            )
        elif isinstance(req, p.Around):
            player = req.player or me
            around = await self._read(req, self.lb.around(player, win, board, req.k))
            msg = wire.around(
                board=board,
                window=win,
                period=around.period.label,
                player=player,
                entries=around.entries,
                request_id=rid,
            )
        else:
            player = req.player or me
            ranks = await self._read(req, self.lb.ranks([player], win, board))
            [st] = ranks.standings
            msg = wire.rank(
                board=board, window=win, period=ranks.period.label, player=player, rank=st.rank, score=st.score,
                size=ranks.size, request_id=rid,
            )  # fmt: skip
        await client.ws.send(msg, text=True)

    async def _read(self, req: p.Request, call: Any) -> Any:
        try:
            return await call
        except BadRequest as exc:
            raise p.ProtocolError("bad_message", str(exc), req.id) from None

    async def _submit(self, client: Client, req: p.Submit) -> None:
        role = client.identity.role
        if role != "server":
            code = "auth_required" if role == "spectator" else "forbidden"
            raise p.ProtocolError(code, "only game server connections may submit", req.id)
        fields = dict(req.fields)
        fields.setdefault("ts", now_ms())
        try:
            sub = Submission.parse(fields)  # the queue checks the clock and the game's limits
            stream_id = await self.queue.submit(sub)
        except InvalidSubmission as exc:
            raise p.ProtocolError(exc.code, exc.message, req.id) from None
        except BacklogFull as exc:
            raise p.ProtocolError("backlog_full", str(exc), req.id) from None
        await client.ws.send(wire.submitted(sub.id, stream_id, req.id), text=True)

    async def _close_client(self, client: Client, code: int, reason: str) -> None:
        if client.ws.protocol.state is State.OPEN:
            with contextlib.suppress(Exception):
                await client.ws.close(code, reason)
