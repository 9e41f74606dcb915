"""``GET top``: the route, and its fast path answered from the snapshot the scorer last published
(held.py keeps it), with ETag = period.version, made once per snapshot and ``n``."""

from __future__ import annotations

import functools
import hashlib
import time
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from leaderboard import protocol as p
from leaderboard.windows import window

from .handlers import JSON, Api, Game, answer, board_msg, int_query, read


async def top(api: Api, request: Request) -> Response:
    game = api.game(request)
    identity = api.identity(request)  # anyone may read the top; a bad token is still refused
    req = await api.parse(board_msg(request, "top", **int_query(request, "n")), game)
    held = await held_top(api, game, req, request.headers.get("if-none-match"))
    if held is not None:  # free: no Redis read, or one per board and TTL
        status, headers, body = held
        response = Response(body, status)
        response.raw_headers = list(headers)  # made once per snapshot, as the fast path sends them
        return response
    api.charge(request, identity, req)
    body = await answer(game, identity, req)
    # read from the board (no snapshot to answer with): cacheable as a held answer is, its ETag
    # the body's own, so a client or CDN holds every top the same way
    etag = f'"b.{hashlib.blake2b(body, digest_size=12).hexdigest()}"'
    bare = ((b"etag", etag.encode()), (b"cache-control", _cache_control(api)))
    if _matches(etag, request.headers.get("if-none-match")):
        response = Response(b"", 304)
        response.raw_headers = list(bare)
        return response
    response = Response(body, media_type=JSON)
    response.raw_headers += bare
    return response


Headers = tuple[tuple[bytes, bytes], ...]  # as ASGI sends them


def _cache_control(api: Api) -> bytes:
    return _cache_header(int(api.settings.top_ttl), int(api.settings.stale_if_error))


@functools.lru_cache(maxsize=8)
def _cache_header(ttl: int, stale: int) -> bytes:
    return f"max-age={ttl}, stale-while-revalidate={ttl}, stale-if-error={stale}".encode()


def _matches(etag: str, if_none_match: str | None) -> bool:
    return if_none_match is not None and etag in (tag.strip() for tag in if_none_match.split(","))


async def held_top(api: Api, game: Game, req: p.Top, if_none_match: str | None) -> tuple[int, Headers, bytes] | None:
    """The current top from the snapshot the scorer last published: ``200`` with its ETag, or
    ``304`` when ``if_none_match`` names it; None when the snapshot cannot answer (_published_top).
    Everything but the age is made once per snapshot and ``n`` (``_top_answer``)."""
    held = await _published_top(api, game, req)
    if held is None:
        return None
    (etag, full, bare, body), age = held
    stale = (b"age", b"%d" % age) if age >= 1 else None  # none when fresh: haproxy stores no "Age: 0"
    if _matches(etag, if_none_match):
        return 304, (*bare, stale) if stale else bare, b""
    return 200, (*full, stale) if stale else full, body


async def fast_top(api: Api, board: str, n: int | None, if_none_match: str | None) -> tuple[int, Headers, bytes] | None:
    """``GET top`` of the default game and window without a token, answered before any routing
    (server.py; ``board`` as the ASGI server decoded it) by the route's own rules: the socket's
    parser, then ``held_top``; None for anything else, which the route answers."""
    msg: dict[str, Any] = {"type": "top", "board": board} | ({} if n is None else {"n": n})
    try:
        return await held_top(api, api.games[api.default_game], api.parse_held(msg), if_none_match)
    except Exception:  # refused, Redis unreachable, a broken snapshot: the route answers (and logs)
        return None


async def _published_top(api: Api, game: Game, req: p.Top) -> tuple[tuple[str, Headers, Headers, bytes], float] | None:
    """The current top from the snapshot the scorer last published (held: held.py) — its ETag
    (the snapshot's period and version), the headers of a 200 and of a 304, the body — and its
    age; None when it cannot answer: a past period, a tournament, more entries than a snapshot
    holds, nothing published yet in this period."""
    config = game.lb.config
    if req.period is not None or req.window not in config.windows or req.n > config.top_n:
        return None
    raw, age = await read(game.watch.get(req.window, req.board))
    if raw is None:
        return None
    s = api.settings
    period, etag, full, bare, body = _top_answer(raw, req.n, int(s.top_ttl), int(s.stale_if_error))
    second = int(time.time())
    if game.lb.boards.general is None:  # the environment's windows, UTC days: one computation a second
        current = _current_period(req.window, second)
    else:  # a stored default's periods are its own: its time zone's days, its season
        current = game.lb.boards.period(req.window, second * 1000).label
    if period != current:  # a new period, none published yet
        return None
    return (etag, full, bare, body), age


@functools.lru_cache(maxsize=64)
def _current_period(name: str, second: int) -> str:
    """The label of the window's period at ``second`` (periods of the kept windows start on a
    whole second: one computation per window and second)."""
    return window(name).period(second * 1000).label


@functools.lru_cache(maxsize=4096)
def _top_answer(raw: str, n: int, ttl: int, stale: int) -> tuple[str, str, Headers, Headers, bytes]:
    """A published snapshot's period, ETag, and ``top`` answer of ``n`` entries (the headers of
    a 200 and of a 304, the body): made once per snapshot and ``n`` (a watched board's requests
    share one snapshot until the next tick)."""
    snap = orjson.loads(raw)
    msg = {k: snap[k] for k in ("board", "window", "period", "mode")} | {"entries": snap["entries"][:n]}
    body = orjson.dumps({"type": "top", **msg})
    etag = f'"{snap["period"]}.{snap["version"]}"'
    bare = ((b"etag", etag.encode()), (b"cache-control", _cache_header(ttl, stale)))
    full = ((b"content-type", JSON.encode()), (b"content-length", b"%d" % len(body)), *bare)
    return snap["period"], etag, full, bare, body
