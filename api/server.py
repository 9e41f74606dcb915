"""The HTTP API's application: Starlette routes from ``routes.ROUTES`` on one Redis client shared
by the games served; every refusal answered as a problem (problems.py), an unexpected error too
(``internal``, 500, logged). Stateless: any number of processes serve the same fleet::

    app = application(ApiSettings(port=0, redis_url=url, jwt_secrets=(secret,)))
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import quote, unquote

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route as StarletteRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from leaderboard import Leaderboard, connect, replies
from leaderboard.budget import Budgets
from leaderboard.definitions import watch
from leaderboard.metrics_server import MetricsServer
from leaderboard.proxies import Network, client_address, networks
from leaderboard.queue import Queue
from leaderboard.replicas import ReplicaMetrics, Replicas
from leaderboard.transport import redis_budget

from . import metrics, problems, top
from .console import console
from .handlers import Api, Game, Handler
from .held import Held
from .routes import ROUTES
from .settings import ApiSettings
from .watch import Watch

log = logging.getLogger("api")


class SegmentPaths:
    """Routes match the path as the client sent it, segment by segment: ASGI servers give the
    percent-decoded path, in which a player id's ``/`` (sent as ``%2F``) would split its segment.
    Each segment is decoded, then its ``%`` and ``/`` encoded again; ``handlers.path_param`` decodes
    a matched segment once more, so every id round-trips exactly."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        raw: bytes = scope.get("raw_path") or b""
        if scope["type"] == "http" and b"%" in raw:
            segments = raw.decode("latin-1").split("/")
            path = "/".join(quote(unquote(seg), safe="!$&'()*+,;=:@~") for seg in segments)
            scope = {**scope, "path": path}
        await self.app(scope, receive, send)


class Tally:
    """Events logged as lines, not one each: the first at once, then while more come one line
    every ``every`` seconds with how many came meanwhile (a crowd of slow clients is a line per
    interval, not a line per client)."""

    def __init__(self, line: str, every: float = 10.0) -> None:
        self.line, self.every = line, every  # ``line``'s one %d is the count since the last line
        self.count = 0
        self._timer: asyncio.TimerHandle | None = None

    def add(self) -> None:
        self.count += 1
        if self._timer is None:
            self._flush()

    def _flush(self) -> None:
        if not self.count:
            self._timer = None
            return
        log.warning(self.line, self.count)
        self.count = 0
        self._timer = asyncio.get_running_loop().call_later(self.every, self._flush)


class BodyDeadline:
    """A request's body must arrive within ``seconds`` of its headers (``LB_API_BODY_TIMEOUT``):
    a client sending it slowly, or never, would hold its connection and its handler without end.
    Past the deadline the route reading it is refused ``request_timeout`` (408, the connection
    closed), logged as a count (``Tally``): a crowd of slow clients is not a line each."""

    def __init__(self, app: ASGIApp, seconds: float) -> None:
        self.app, self.seconds = app, seconds
        self.timeouts = Tally(f"bodies not received within {seconds:g} s (LB_API_BODY_TIMEOUT), answered 408: %d")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        deadline = asyncio.get_running_loop().time() + self.seconds
        complete = False

        async def bounded() -> Message:
            nonlocal complete
            if complete:  # after the body, only a disconnect: the route may wait for it as it likes
                return await receive()
            try:
                async with asyncio.timeout_at(deadline):
                    message = await receive()
            except TimeoutError:
                self.timeouts.add()
                raise problems.Problem(
                    "request_timeout", f"the body did not arrive within {self.seconds:g} s"
                ) from None
            complete = message["type"] != "http.request" or not message.get("more_body", False)
            return message

        return await self.app(scope, bounded, send)


class ClientAddress:
    """The client's address (``scope["client"]``, a spectator's read budget) by the gateway's rule
    (leaderboard/proxies.py): from a peer in ``LB_API_TRUSTED_PROXIES``, the last value of its
    ``X-Forwarded-For`` (the balancer appends what it saw; anything left of it is the client's
    own and may be forged); from any other peer, the peer."""

    def __init__(self, app: ASGIApp, trusted: tuple[Network, ...]) -> None:
        self.app, self.trusted = app, trusted

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self.trusted and scope.get("client"):
            # several header lines are one list: the last value is the last line's
            forwarded = [value for name, value in scope["headers"] if name == b"x-forwarded-for"]
            if forwarded:
                peer, port = scope["client"]
                address = client_address(peer, forwarded[-1].decode("latin-1"), self.trusted)
                if address != peer:
                    scope = {**scope, "client": (address, port)}
        await self.app(scope, receive, send)


_TOP = re.compile(r"/v1/boards/([^/]+)/top")
_N = re.compile(rb"(?:n=([1-9][0-9]{0,2}))?")


class HeldTop:
    """``GET top`` of a held board, the request a crowd of pages makes, answered before Starlette
    (the route ``top``, the same rules and the same bytes: ``top.fast_top``): only with no
    token and no query but ``n``; everything else, and whatever ``fast_top`` cannot answer,
    goes on to the routes. One table of routes still defines the API (and its OpenAPI): this is
    that route's answer sent sooner, most of a held answer's CPU being Starlette's routing,
    Request and Response (docs/benchmarks.md, "HTTP API")."""

    def __init__(self, app: ASGIApp, api: Api) -> None:
        self.app, self.api = app, api

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] == "http"
            and scope["method"] in ("GET", "HEAD")
            and (path := _TOP.fullmatch(scope["path"]))
            and (query := _N.fullmatch(scope["query_string"]))
        ):
            etags: str | None = None
            for name, value in scope["headers"]:
                if name == b"authorization":
                    return await self.app(scope, receive, send)  # a token is checked by the route
                if name == b"if-none-match":
                    etags = value.decode("latin-1")
            n = int(query[1]) if query[1] else None
            answer = await top.fast_top(self.api, path[1], n, etags)
            if answer is not None:
                status, headers, body = answer
                await send({"type": "http.response.start", "status": status, "headers": headers})
                await send({"type": "http.response.body", "body": b"" if scope["method"] == "HEAD" else body})
                return None
        return await self.app(scope, receive, send)


class RedisBudget:
    """Each request's Redis calls together within ``seconds`` (LB_API_REDIS_TIMEOUT): the socket
    timeout bounds one read or connect, but a cluster client's call retries and tries node after
    node (a shard down took 3.6 s with 2 s set), and a request may make several calls.
    Past the bound, the call raises a redis TimeoutError, which the routes answer as Redis down
    (503 unavailable, or a held top while it may be served stale)."""

    def __init__(self, app: ASGIApp, seconds: float) -> None:
        self.app, self.seconds = app, seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        with redis_budget(self.seconds):
            return await self.app(scope, receive, send)


def application(settings: ApiSettings) -> ASGIApp:
    bound = settings.redis_timeout or None
    redis = connect(settings.redis_url, pool=settings.redis_pool, socket_timeout=bound, socket_connect_timeout=bound)

    async def latest(key: str) -> str | None:  # a snapshot as the scorer stored it (JSON text)
        value = await redis.get(key)
        return None if value is None else str(value)

    held = Held(latest, ttl=settings.top_ttl, stale=settings.stale_if_error)
    # the players' reads (top, rank, around, ranks) through it: on replicas when enabled, counted
    # either way; the rest on the master
    replicas = Replicas(redis, settings.replicas, pool=settings.redis_pool)
    games = {
        c.game: Game(
            lb := Leaderboard(redis, c),
            Queue(redis, c),
            Watch(redis, c.keys, held, idle=settings.watch_idle, size=settings.watch_max),
            replies.Game.of(lb, reads=lb.reading_from(replicas)),
        )
        for c in settings.game.served
    }
    budgets = Budgets(settings.read_rate, settings.read_burst, settings.read_budgets)
    api = Api(settings, games, settings.game.served[0].game, budgets)

    def endpoint(handlers: dict[str, Handler]) -> Any:
        async def answer(request: Request) -> Response:
            handler = handlers[request.method if request.method in handlers else "GET"]  # HEAD: GET's
            try:
                return await handler(api, request)
            except problems.Problem as exc:
                return problems.response(exc.code, exc.message, retry_after=exc.retry_after, errors=exc.errors)
            except ClientDisconnect:
                # gone before its body was read: nothing to answer (the answer goes nowhere) and
                # nothing went wrong here; nginx's "client closed request" for what is not sent
                return Response(status_code=499)
            except Exception:
                log.exception("%s %s failed", request.method, request.url.path)
                return problems.response("internal", "the request failed on the server; it is logged")

        return answer

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "bad_message")
        return problems.response(code, str(exc.detail), headers=exc.headers)  # a 405's Allow

    async def server_error(request: Request, exc: Exception) -> Response:
        # outside a route (the routing itself): Starlette logs it after this answer
        return problems.response("internal", "the request failed on the server; it is logged")

    counted: ASGIApp | None = None  # the outermost middleware, counting every answer (set below)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        exported = None
        if settings.metrics_port:
            assert isinstance(counted, metrics.Requests)
            registry = metrics.registry(counted, held, (g.watch for g in games.values()))
            registry.register(ReplicaMetrics(replicas))
            exported = MetricsServer(registry, settings.metrics_host, settings.metrics_port)
            port = await exported.start()
            log.info("metrics on http://%s:%d/metrics", settings.metrics_host, port)
        for game in games.values():
            if settings.watch_max:
                game.watch.start()
        # each game's board definitions, its stored default among them, seen within a tick
        refreshing = [asyncio.create_task(watch(g.lb.boards), name=f"boards-{name}") for name, g in games.items()]
        refreshing.append(asyncio.create_task(replicas.run_forever(), name="replicas"))
        try:
            yield
        finally:
            for task in refreshing:
                task.cancel()
            await asyncio.gather(*refreshing, return_exceptions=True)
            for game in games.values():
                await game.watch.close()
            await replicas.aclose()
            await redis.aclose()
            if exported is not None:
                await exported.close()

    async def readyz(request: Request) -> Response:
        # The balancer's health check (off the public routes): ready while the process answers,
        # Redis or not. Without Redis it still answers something (a held top for its
        # stale-if-error, its own 503 problem with Retry-After otherwise), which a balancer that
        # took every process out would replace with an error page of its own. Stopping, the
        # process closes its listener: the check's connection is refused, and that takes it out.
        return Response("ready\n", media_type="text/plain")

    methods: dict[str, dict[str, Handler]] = {}
    for r in ROUTES:
        methods.setdefault(r.path, {})[r.method] = r.handler
    # one Starlette route per path, all its methods: a 405's Allow names every one (one route per
    # method would answer with the first's alone)
    table = [StarletteRoute(path, endpoint(handlers), methods=list(handlers)) for path, handlers in methods.items()]
    table.append(StarletteRoute("/readyz", readyz, methods=["GET"]))
    # the operators' page (console.py): HTML, off the document's JSON routes, refused as they are
    table.append(StarletteRoute("/console", endpoint({"GET": console}), methods=["GET"]))
    app = Starlette(
        routes=table,
        middleware=[Middleware(SegmentPaths)],
        exception_handlers={HTTPException: http_error, Exception: server_error},
        lifespan=lifespan,
    )
    bounded = RedisBudget(HeldTop(app, api), settings.redis_timeout)
    counted = metrics.Requests(
        ClientAddress(BodyDeadline(bounded, settings.body_timeout), networks(settings.trusted_proxies))
    )
    return counted
