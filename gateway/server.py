"""The Gateway: one process's WebSocket server, its Redis clients and its background tasks.

::

    async with Gateway(settings) as gw:   # listening, subscribed, sweeping, pushing ranks
        await gw.serve_forever()          # until close() or drain() finishes

``close()`` is idempotent, and a start that fails part-way is closed before its error propagates
(``leaderboard.lifecycle``); ``drain()`` is the graceful form (SIGTERM in ``__main__``): readiness
fails first, then the listener closes, then sockets are closed in batches with 1012.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import sys
import time
from collections.abc import Collection
from urllib.parse import parse_qs

from redis.exceptions import RedisError
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.extensions.permessage_deflate import ServerPerMessageDeflateFactory
from websockets.http11 import Request

from leaderboard import closes, connect, fleetview, wire
from leaderboard.auth import issue
from leaderboard.definitions import watch
from leaderboard.keys import GLOBAL_SCOPE
from leaderboard.lifecycle import Service
from leaderboard.metrics_server import MetricsServer
from leaderboard.proxies import client_address, networks
from leaderboard.replicas import ReplicaMetrics, Replicas

from .admin import SHED_PATH, shed_action
from .client import Client, LeanConnection
from .frames import negotiated
from .games import Game, build_games
from .handlers import Handlers
from .handshakes import Handshakes
from .heartbeat import sweep_forever
from .http import Routes
from .hub import Hub
from .metrics import Metrics
from .outbound import Outbound
from .settings import JS_CLIENT, GatewaySettings

log = logging.getLogger("gateway")

_STARTUP_WAIT = 2.0  # seconds start() waits for the games' subscriptions before listening


class Gateway(Service):
    def __init__(self, settings: GatewaySettings) -> None:
        s = self.settings = settings
        self.metrics = Metrics()
        self.draining = False
        # Everything is built here, nothing connects yet: start() only starts, and close() can
        # run after a start() that failed half-way.
        # Every read is bounded (redis_timeout); the hub's blocking pub/sub read is not: redis-py
        # waits for a pushed message without the socket timeout.
        bound = s.redis_timeout or None
        self._redis = connect(s.redis_url, pool=s.redis_pool, socket_timeout=bound, socket_connect_timeout=bound)
        # bytes: snapshots pass through unchanged
        self._raw = connect(
            s.redis_url, decode=False, pool=s.redis_pool, socket_timeout=bound, socket_connect_timeout=bound
        )
        # a dropped socket leaves its boards at once (the games are built just below)
        self.out = Outbound(s, self.metrics, on_drop=self._dropped, on_skip=self._skipped)
        self.replicas = Replicas(self._redis, s.replicas, pool=s.redis_pool)
        self.metrics.registry.register(ReplicaMetrics(self.replicas))
        # own ranks and the players' reads through it: on replicas when enabled, counted either way
        self.games: dict[str, Game] = build_games(s, self._redis, self._raw, self.metrics, self.out, self.replicas)
        self.default_game = next(iter(self.games.values()))
        self.handlers = Handlers(s, self.out, self.games, self.metrics)
        shed = shed_action(self.shed, self._open, s.drain_window)
        self._metrics_server = MetricsServer(
            self.metrics.registry, s.metrics_host, s.metrics_port, actions={SHED_PATH: shed}
        )
        self._server: Server | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._shedding: asyncio.Task[None] | None = None
        self._closed = asyncio.Event()
        self._port = 0
        # connection-rate cap: a token bucket refilled at connect_rate per second
        self._conn_tokens = s.connect_rate
        self._conn_refill = time.monotonic()
        self._trusted = networks(s.trusted_proxies)
        self._per_address: dict[str, int] = {}  # open connections by client address (only when capped)
        self._burst = float(s.burst)  # every new client's full bucket: one float for all
        self.handshakes = Handshakes(s.max_handshakes, on_refused=self.metrics.refused.labels("handshakes").inc)
        self.metrics.handshakes.set_function(lambda: len(self.handshakes.in_flight))
        # what the balancer's check sees, for an alert that does not depend on the balancer's own metrics
        self.metrics.ready.set_function(lambda: float(self._not_ready() is None))
        # websockets logs every connection at INFO; our policy is lifecycle only.
        self._ws_log = logging.getLogger("gateway.websockets")
        if self._ws_log.level == logging.NOTSET:
            self._ws_log.setLevel(logging.WARNING)

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        s = self.settings
        for game in self.games.values():
            game.hub.start()
        # Listen once the games can serve: with SO_REUSEPORT the kernel hands this process new
        # connections the moment it listens, and a game not subscribed yet refuses them (1013).
        # Bounded: with Redis down the process still listens (/healthz, /readyz answer 503).
        # asyncio.timeout, not wait_for: on Python 3.11 wait_for can lose a cancellation
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(_STARTUP_WAIT):
                await asyncio.gather(*(g.hub.connected.wait() for g in self.games.values()))
        if s.metrics_port:
            await self._metrics_server.start()
        routes = Routes(
            static_dir=s.static_dir,
            js_client=JS_CLIENT,
            admit=self._admit,
            not_ready=self._not_ready,
            demo_token=self._demo_token,
        )
        self._server = await serve(
            self._handle,
            s.host,
            s.port,
            process_request=routes.process_request,
            compression=None,  # frames are written pre-framed, identical for every socket ...
            # ... compressed ones too: each message on its own (no context takeover, frames.py)
            extensions=[
                ServerPerMessageDeflateFactory(server_no_context_takeover=True, client_no_context_takeover=True)
            ]
            if s.deflate
            else None,
            # heartbeats come from one sweep task (heartbeat.py) unless websockets' are asked for
            ping_interval=s.ping_interval if s.heartbeat == "websockets" else None,
            ping_timeout=s.ping_timeout if s.heartbeat == "websockets" else None,
            close_timeout=s.close_timeout,
            open_timeout=s.handshake_timeout,
            max_size=s.max_frame,  # beyond: websockets closes with 1009
            max_queue=4,  # a flooding client is paused by TCP, not buffered here
            write_limit=s.write_buffer,
            server_header=None,
            logger=self._ws_log,
            reuse_port=s.reuse_port,
            backlog=s.backlog,
            create_connection=self.handshakes.connection_class(),
        )
        self._port = int(self._server.sockets[0].getsockname()[1])
        self._tasks = [
            asyncio.create_task(sweep_forever(lambda: self.clients, self.out, s), name="sweep"),
            asyncio.create_task(self.replicas.run_forever(), name="replicas"),
            *(asyncio.create_task(g.ranks.run_forever(), name=f"ranks-{g.name}") for g in self.games.values()),
            *(asyncio.create_task(watch(g.lb.boards), name=f"boards-{g.name}") for g in self.games.values()),
        ]
        if s.fleet_beat_s:
            self._tasks.append(asyncio.create_task(self._beat_forever(s.fleet_beat_s), name="fleet-beat"))
        log.info("gateway %s listening on %s:%d", s.gateway_id, s.host, self.port)

    async def _beat_forever(self, every_s: float) -> None:
        """This gateway's heartbeat per game, for the admin console's view of the fleet
        (leaderboard/fleetview.py). Redis down: the beat is skipped, the gateway goes on."""
        while True:
            for game in self.games.values():
                info = {"connections": len(game.clients), "draining": self.draining}
                try:
                    await fleetview.beat(self._redis, game.lb.keys, self.settings.gateway_id, info, every_s=every_s)
                except (RedisError, OSError) as exc:
                    log.debug("fleet heartbeat skipped: %s", exc)
            await asyncio.sleep(every_s)

    def _dropped(self, client: Client) -> None:
        game = self.games.get(client.game)  # none yet: refused before it was admitted
        if game is not None:
            game.hub.remove(client)

    def _skipped(self, client: Client) -> None:
        game = self.games.get(client.game)
        if game is not None:
            game.hub.stale(client)

    @property
    def clients(self) -> Collection[Client]:
        """Every open connection, of every game. Each game's set is the one record: a second
        set of every connection would cost ~50 bytes per connection at 10k sockets."""
        if len(self.games) == 1:
            return self.default_game.clients
        return set().union(*(g.clients for g in self.games.values()))

    def _open(self) -> int:
        return sum(len(g.clients) for g in self.games.values())

    @property
    def hub(self) -> Hub:
        """The default game's hub (the only one with a single game)."""
        return self.default_game.hub

    @property
    def port(self) -> int:
        """The bound port (still known after the listener closed)."""
        return self._port

    @property
    def metrics_port(self) -> int | None:
        """The port of ``GET /metrics`` (None: turned off)."""
        return self._metrics_server.port if self.settings.metrics_port else None

    async def serve_forever(self) -> None:
        await self._closed.wait()

    async def drain(self) -> None:
        """Graceful stop: fail readiness, stop accepting, close sockets in staggered batches
        with 1012 over ``drain_window``, then close()."""
        if self.draining or self.closing:
            return
        s = self.settings
        self.draining = True
        self.metrics.draining.set(1)
        log.info("draining %d connections over %.1f s", self._open(), s.drain_window)
        # Readiness fails first so a load balancer stops sending before the port goes away.
        await asyncio.sleep(s.drain_delay)
        if self._server is not None:
            self._server.server.close()  # stop accepting; open sockets stay
        if self._shedding is not None:
            self._shedding.cancel()  # the drain closes everyone, at its own pace
        await self._close_staggered(list(self.clients), closes.DRAIN, s.drain_window)
        await self.close()

    def shed(self, count: int, over_s: float) -> int:
        """Close ``count`` of the open sockets (at most all) with 1012 ``rebalance``, in the
        drain's staggered batches over ``over_s``: their clients reconnect through the balancer,
        whose leastconn sends them to emptier gateways (``python -m fleet rebalance``). Returns
        how many will be closed; RuntimeError while draining or while a shed runs."""
        if self.draining or self.closing:
            raise RuntimeError("draining")
        if self._shedding is not None and not self._shedding.done():
            raise RuntimeError("busy")
        victims = random.sample(list(self.clients), min(count, self._open()))
        log.info("shedding %d of %d connections over %.1f s (rebalance)", len(victims), self._open(), over_s)
        self._shedding = asyncio.create_task(self._close_staggered(victims, closes.REBALANCE, over_s), name="shed")
        return len(victims)

    async def _close_staggered(self, clients: list[Client], reason: str, window: float) -> None:
        # Staggered: all clients reconnecting at the same instant would hit the others at once.
        batch_count = self.settings.drain_batches
        size = -(-len(clients) // batch_count) if clients else 0
        closing: list[asyncio.Task[None]] = []
        for i in range(batch_count):
            for client in clients[i * size : (i + 1) * size]:
                closing.append(asyncio.create_task(self.out.close(client, closes.DRAINING, reason)))
            if i < batch_count - 1 and size:
                await asyncio.sleep(window / batch_count)
        if closing:
            await asyncio.wait(closing, timeout=self.settings.close_timeout + 1)

    async def _close(self) -> None:
        """Stop at once: connections get 1012 without the drain's pacing."""
        # Background tasks first: nothing may write to a socket that is being closed.
        tasks = [*self._tasks, *([self._shedding] if self._shedding is not None else [])]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        # Then the server: it stops accepting, closes the remaining sockets, awaits the handlers.
        if self._server is not None:
            for client in self.clients:  # websockets closes them below, unannounced
                self.out.announce(client, closes.DRAINING, closes.DRAIN)
            self._server.close(code=closes.DRAINING, reason=closes.DRAIN)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), self.settings.close_timeout + 1)
        # The hub next: handlers unsubscribe on their way out.
        for game in self.games.values():
            await game.hub.close()
            if self.settings.fleet_beat_s:  # stopped, not lost: off the console's fleet at once
                with contextlib.suppress(RedisError, OSError):
                    await fleetview.forget(self._redis, game.lb.keys, self.settings.gateway_id)
        self.out.stop()
        await self.replicas.aclose()
        for redis in (self._redis, self._raw):
            await redis.aclose()
        await self._metrics_server.close()  # last: a scrape during the drain still answers
        self._closed.set()
        log.info("gateway %s closed", self.settings.gateway_id)

    # ------------------------------------------------------------ admission and readiness

    def client_address(self, connection: ServerConnection, request: Request) -> str:
        """The client's address: the peer's, or the one a trusted balancer forwarded."""
        peer = connection.remote_address[0] if connection.remote_address else ""
        return client_address(str(peer), request.headers.get("X-Forwarded-For"), self._trusted)

    def _admit(self, connection: ServerConnection, request: Request) -> str | None:
        s = self.settings
        if self.draining or self.closing:
            self.metrics.refused.labels("draining").inc()
            return "draining"
        if s.max_connections and self._open() >= s.max_connections:
            self.metrics.refused.labels("cap").inc()
            return "connection cap reached"
        cap = s.max_per_address
        if cap and self._per_address.get(self.client_address(connection, request), 0) >= cap:
            self.metrics.refused.labels("address").inc()
            return "too many connections from this address"
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
        """Ready means "can serve": not draining, and at least one game serving. A game whose
        Redis (or cluster shard) is down refuses only its own new sockets (``_handle``): failing
        readiness for it would take every gateway out of the balancer, and every game with them."""
        if self.draining or self.closing:
            return "draining"
        if not any(g.serving for g in self.games.values()):
            return "redis unreachable"
        return None

    # ------------------------------------------------------------ one connection

    async def _handle(self, ws: ServerConnection) -> None:
        s = self.settings
        assert isinstance(ws, LeanConnection)  # serve(create_connection=...) makes every one
        client = Client(ws, time.monotonic(), self._burst)
        client.wire = negotiated(ws.protocol.extensions)
        request = ws.request
        assert request is not None
        if s.allowed_origins and request.headers.get("Origin") not in s.allowed_origins:
            await self.out.close(client, closes.POLICY, closes.FORBIDDEN_ORIGIN)
            return
        if s.max_connections and self._open() >= s.max_connections:  # handshakes in flight raced past _admit
            self.metrics.refused.labels("cap").inc()
            await self.out.close(client, closes.OVERLOADED, closes.FULL)
            return
        # interned: the sockets of one address (a NAT, a spectator's tabs) share its string
        client.address = sys.intern(self.client_address(ws, request))
        address = client.address if s.max_per_address else ""
        if address and self._per_address.get(address, 0) >= s.max_per_address:  # raced past _admit too
            self.metrics.refused.labels("address").inc()
            await self.out.close(client, closes.OVERLOADED, closes.ADDRESS_FULL)
            return
        query = parse_qs(request.path.partition("?")[2])
        token = query.get("token")
        game = self.games.get(query["game"][0]) if "game" in query else self.default_game
        del query  # this frame lives as long as the connection: its locals too
        # websockets keeps the handshake request and response (headers and all) for the life of
        # the connection; nothing reads them after this point, and at 10k sockets they were a
        # sizeable share of the memory per connection. The request object itself must stay:
        # websockets takes "request is None" to mean "handshake not done yet" (and its parser's
        # suspended frame holds it too), so only its headers go.
        ws.response = None
        request.headers.clear()
        if game is None:
            names = ", ".join(self.games)
            await self.out.reply(client, wire.error("unknown_game", f"this gateway serves {names}"))
            await self.out.close(client, closes.POLICY, closes.UNKNOWN_GAME)
            return
        if not game.serving:
            # Its shard is down (a failover, a restart): this game's new sockets back off and
            # retry, its open ones stay and get the snapshots again once the hub resubscribes.
            self.metrics.refused.labels("game").inc()
            await self.out.close(client, closes.OVERLOADED, f"{closes.GAME_UNAVAILABLE}: {game.name}")
            return
        client.game = game.name
        if token and not await self.handlers.authenticate(client, token[0]):
            return
        del token
        ws.attach(client)
        game.clients.add(client)
        if address:
            self._per_address[address] = self._per_address.get(address, 0) + 1
        self.metrics.accepted.inc()
        self.metrics.connections.inc()
        try:
            await self.out.reply(client, self.handlers.welcome(client))
            await game.hub.subscribe(client, (self.handlers.default_window(game.name), GLOBAL_SCOPE))
            # recv() rather than "async for": the async generator and its asend object would
            # stay alive per idle socket; and an idle socket waits for a frame here, on one
            # future, before recv() (LeanConnection.frame_waiter; docs/benchmarks.md, memory
            # per connection).
            while True:
                waiter = ws.frame_waiter()
                if waiter is not None:
                    try:
                        await waiter
                    except EOFError:
                        pass  # the connection is closing: recv() raises ConnectionClosed
                    finally:
                        ws.frame_waited(waiter)
                await self.handlers.on_message(client, await ws.recv())
        except ConnectionClosed:
            pass
        finally:
            game.clients.discard(client)
            if address:
                left = self._per_address.pop(address) - 1
                if left:
                    self._per_address[address] = left
            self.metrics.connections.dec()
            game.hub.remove(client)
            client.shut()
            ws.client = None  # the two referred to each other
