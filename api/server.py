"""The HTTP API's application: Starlette routes from ``routes.ROUTES`` on one Redis client shared
by the games served; every refusal answered as a problem (problems.py). Stateless: any number
of processes serve the same fleet::

    app = application(ApiSettings(port=0, redis_url=url, jwt_secrets=(secret,)))
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route as StarletteRoute

from leaderboard import Leaderboard, connect
from leaderboard.queue import Queue

from . import problems
from .held import Held
from .routes import ROUTES, Api, Game, Handler
from .settings import ApiSettings


def application(settings: ApiSettings) -> Starlette:
    bound = settings.redis_timeout or None
    redis = connect(settings.redis_url, pool=settings.redis_pool, socket_timeout=bound, socket_connect_timeout=bound)
    games = {c.game: Game(Leaderboard(redis, c), Queue(redis, c)) for c in settings.game.served}

    async def latest(key: str) -> str | None:  # a snapshot as the scorer stored it (JSON text)
        value = await redis.get(key)
        return None if value is None else str(value)

    snapshots = Held(latest, ttl=settings.top_ttl, stale=settings.stale_if_error)
    api = Api(settings, games, settings.game.served[0].game, snapshots)

    def endpoint(handler: Handler) -> Any:
        async def answer(request: Request) -> Response:
            try:
                return await handler(api, request)
            except problems.Problem as exc:
                return problems.response(exc.code, exc.message)

        return answer

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "bad_message")
        return problems.response(code, str(exc.detail))

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await redis.aclose()

    routes = [StarletteRoute(r.path, endpoint(r.handler), methods=[r.method]) for r in ROUTES]
    return Starlette(routes=routes, exception_handlers={HTTPException: http_error}, lifespan=lifespan)
