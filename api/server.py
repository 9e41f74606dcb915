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

from redis.exceptions import RedisError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route as StarletteRoute
from starlette.types import ASGIApp, Receive, Scope, Send

from leaderboard import Leaderboard, connect, replies
from leaderboard.budget import Budgets
from leaderboard.definitions import watch
from leaderboard.queue import Queue
from leaderboard.transport import redis_budget

from . import problems, routes
from .held import Held
from .routes import ROUTES, Api, Game, Handler
from .settings import ApiSettings
from .watch import Watch

log = logging.getLogger("api")


class SegmentPaths:
    """Routes match the path as the client sent it, segment by segment: ASGI servers give the
    percent-decoded path, in which a player id's ``/`` (sent as ``%2F``) would split its segment.
    Each segment is decoded, then its ``%`` and ``/`` encoded again; ``routes.path_param`` decodes
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


_TOP = re.compile(r"/v1/boards/([^/]+)/top")
_N = re.compile(rb"(?:n=([1-9][0-9]{0,2}))?")


class HeldTop:
    """``GET top`` of a held board, the request a crowd of pages makes, answered before Starlette
    (the route ``top``, the same rules and the same bytes: ``routes.fast_top``): only with no
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
            answer = await routes.fast_top(self.api, path[1], n, etags)
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
    games = {
        c.game: Game(
            lb := Leaderboard(redis, c),
            Queue(redis, c),
            Watch(redis, c.keys, held, idle=settings.watch_idle, size=settings.watch_max),
            replies.Game.of(lb),
        )
        for c in settings.game.served
    }
    budgets = Budgets(settings.read_rate, settings.read_burst, settings.read_budgets)
    api = Api(settings, games, settings.game.served[0].game, budgets)

    def endpoint(handler: Handler) -> Any:
        async def answer(request: Request) -> Response:
            try:
                return await handler(api, request)
            except problems.Problem as exc:
                return problems.response(exc.code, exc.message, retry_after=exc.retry_after)
            except Exception:
                log.exception("%s %s failed", request.method, request.url.path)
                return problems.response("internal", "the request failed on the server; it is logged")

        return answer

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "bad_message")
        return problems.response(code, str(exc.detail))

    async def server_error(request: Request, exc: Exception) -> Response:
        # outside a route (the routing itself): Starlette logs it after this answer
        return problems.response("internal", "the request failed on the server; it is logged")

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        for game in games.values():
            if settings.watch_max:
                game.watch.start()
        # each game's board definitions, its stored default among them, seen within a tick
        refreshing = [asyncio.create_task(watch(g.lb.boards), name=f"boards-{name}") for name, g in games.items()]
        try:
            yield
        finally:
            for task in refreshing:
                task.cancel()
            await asyncio.gather(*refreshing, return_exceptions=True)
            for game in games.values():
                await game.watch.close()
            await redis.aclose()

    async def readyz(request: Request) -> Response:
        # the balancer's health check (off the public routes): this process serves while Redis answers
        try:
            await redis.ping()
        except (RedisError, OSError):
            return Response("redis unreachable\n", 503, media_type="text/plain")
        return Response("ok\n", media_type="text/plain")

    table = [StarletteRoute(r.path, endpoint(r.handler), methods=[r.method]) for r in ROUTES]
    table.append(StarletteRoute("/readyz", readyz, methods=["GET"]))
    app = Starlette(
        routes=table,
        middleware=[Middleware(SegmentPaths)],
        exception_handlers={HTTPException: http_error, Exception: server_error},
        lifespan=lifespan,
    )
    return RedisBudget(HeldTop(app, api), settings.redis_timeout)
