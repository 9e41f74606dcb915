"""The HTTP API's routes: one table (``ROUTES``) from which both the server's routing and the
OpenAPI document (``openapi()``, served at /v1/openapi.json, kept in docs/openapi.json) are made.

Each request is checked by the socket's own parser (leaderboard.protocol: a route and its query
become the message the socket would have received), its token by leaderboard.auth, a submission
by leaderboard.submission; answers are the socket's replies (leaderboard.wire), so a board reads
the same over both.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from http import HTTPStatus
from typing import Any, TypeVar

import orjson
from redis.exceptions import RedisError
from starlette.requests import Request
from starlette.responses import Response

from leaderboard import BacklogFull, BadRequest, InvalidSubmission, Leaderboard, Submission, now_ms, wire
from leaderboard import protocol as p
from leaderboard.auth import SPECTATOR, AuthError, Identity, authenticate
from leaderboard.errors import NotReplicated, TournamentError
from leaderboard.keys import parse_scope
from leaderboard.queue import Queue
from leaderboard.windows import window

from .held import Held
from .problems import ALL_CODES, MEDIA_TYPE, Problem
from .settings import ApiSettings

T = TypeVar("T")
JSON = "application/json"
_POLL_S = (0.005, 0.1)  # ?wait=applied: first and longest pause between status reads


@dataclass(frozen=True, slots=True)
class Game:
    lb: Leaderboard
    queue: Queue


@dataclass(slots=True)
class Api:
    """What a request needs: the settings and, per game served, its wrappers and queue."""

    settings: ApiSettings
    games: Mapping[str, Game]
    default_game: str
    snapshots: Held[str | None]  # each board's last published snapshot, by its key

    def game(self, request: Request) -> Game:
        name = request.query_params.get("game", self.default_game)
        game = self.games.get(name)
        if game is None:
            raise Problem("unknown_game", f"this API serves {', '.join(self.games)}")
        return game

    def identity(self, request: Request) -> Identity:
        header = request.headers.get("authorization")
        if header is None:
            return SPECTATOR
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer":
            raise Problem("invalid_token", "Authorization must be: Bearer <token>")
        try:
            return authenticate(token.strip(), self.settings.jwt_secrets)
        except AuthError as exc:
            raise Problem(exc.code, exc.message) from None

    def parse(self, msg: dict[str, Any]) -> Any:
        s = self.settings
        try:
            return p.parse_message(msg, windows=s.game.windows, default_window=s.window)
        except p.ProtocolError as exc:
            raise Problem(exc.code, exc.message) from None


# ---------------------------------------------------------------- the handlers


def _board_msg(request: Request, kind: str, **fields: Any) -> dict[str, Any]:
    """The socket's message of a board read: the path's board, the query's window and period."""
    q = request.query_params
    msg = {"type": kind, "board": request.path_params["board"], **fields}
    for name in ("window", "period"):
        if name in q:
            msg[name] = q[name]
    return msg


def _int_query(request: Request, name: str) -> dict[str, Any]:
    """A number of the query as the socket's parser wants it: an int when it is digits, else the
    text (which the parser refuses with the socket's message)."""
    raw = request.query_params.get(name)
    if raw is None:
        return {}
    return {name: int(raw) if raw.isascii() and raw.isdigit() and len(raw) <= 9 else raw}


def _needs_player(identity: Identity) -> None:
    if identity.player is None:
        raise Problem("auth_required", "this request needs a player or server token")


async def top(api: Api, request: Request) -> Response:
    game = api.game(request)
    api.identity(request)  # anyone may read the top; a bad token is still refused
    req = api.parse(_board_msg(request, "top", **_int_query(request, "n")))
    held = await _published_top(api, game, req)
    if held is not None:
        etag, body, age = held
        ttl, stale = int(api.settings.top_ttl), int(api.settings.stale_if_error)
        cache = f"max-age={ttl}, stale-while-revalidate={ttl}, stale-if-error={stale}"
        headers = {"ETag": etag, "Cache-Control": cache, "Age": str(int(age))}
        if etag in (tag.strip() for tag in request.headers.get("if-none-match", "").split(",")):
            return Response(status_code=304, headers=headers)
        return Response(body, headers=headers, media_type=JSON)
    top = await _read(game.lb.top(req.window, req.board, req.n, period=req.period))
    body = wire.top(board=req.board, window=req.window, period=top.period.label, entries=top.entries, mode=top.mode)
    return Response(body, media_type=JSON)


async def player(api: Api, request: Request) -> Response:
    game = api.game(request)
    _needs_player(api.identity(request))
    req = api.parse(_board_msg(request, "rank", player=request.path_params["player"]))
    ranks = await _read(game.lb.ranks([req.player], req.window, req.board, period=req.period))
    [st] = ranks.standings
    body = wire.rank(
        board=req.board,
        window=req.window,
        period=ranks.period.label,
        player=req.player,
        rank=st.rank,
        score=st.score,
        size=ranks.size,
        top_percent=st.top_percent,
        approx=st.approx,
        mode=ranks.mode,
    )
    return Response(body, media_type=JSON)


async def around(api: Api, request: Request) -> Response:
    game = api.game(request)
    _needs_player(api.identity(request))
    msg = _board_msg(request, "around", player=request.path_params["player"], **_int_query(request, "k"))
    req = api.parse(msg)
    found = await _read(game.lb.around(req.player, req.window, req.board, req.k, period=req.period))
    body = wire.around(
        board=req.board,
        window=req.window,
        period=found.period.label,
        player=req.player,
        entries=found.entries,
        mode=found.mode,
        size=found.size,
    )
    return Response(body, media_type=JSON)


async def ranks(api: Api, request: Request) -> Response:
    game = api.game(request)
    _needs_player(api.identity(request))
    body = await _json_body(api, request)
    req = api.parse(_board_msg(request, "ranks", players=body.get("players")))
    call = game.lb.ranks(list(req.players), req.window, req.board, period=req.period, profiles=True)
    found = await _read(call)
    answer = wire.ranks(
        board=req.board,
        window=req.window,
        period=found.period.label,
        size=found.size,
        standings=found.standings,
        mode=found.mode,
    )
    return Response(answer, media_type=JSON)


async def stats(api: Api, request: Request) -> Response:
    game = api.game(request)
    api.identity(request)  # open, as on the socket
    req = api.parse(_board_msg(request, "stats"))
    found = await _read(game.lb.stats(req.window, req.board, period=req.period))
    answer = wire.stats(
        board=req.board, window=req.window, period=found.period.label, size=found.size, players=found.players
    )
    return Response(answer, media_type=JSON)


async def submit(api: Api, request: Request) -> Response:
    game = api.game(request)
    role = api.identity(request).role
    if role != "server":
        raise Problem("auth_required" if role == "spectator" else "forbidden", "only game servers may submit")
    wait = request.query_params.get("wait")
    if wait not in (None, "applied"):
        raise Problem("bad_message", "wait must be applied")
    sub = _submission(request, await _json_body(api, request))
    if wait is not None:  # lb_submit keeps what it decided per board for the status read below
        sub = replace(sub, outcome=True)
    try:
        stream_id = await game.queue.submit(sub)  # the clock and the game's limits checked here
    except (InvalidSubmission, BacklogFull, NotReplicated) as exc:
        raise Problem(exc.code, exc.message) from None
    except (RedisError, OSError):
        raise Problem("unavailable", "Redis is unreachable; retry with the same match_id") from None
    queued = {"submission": sub.id, "stream_id": stream_id, "status": "pending"}
    if wait is None:
        return Response(orjson.dumps(queued), 202, media_type=JSON)
    outcome = await _outcome(game.lb, sub.id, api.settings.wait_max)
    if outcome is None:  # not applied within the bound: queued, as without ?wait
        return Response(orjson.dumps(queued), 202, media_type=JSON)
    return Response(orjson.dumps({"stream_id": stream_id, **outcome}), 200, media_type=JSON)


async def openapi_json(api: Api, request: Request) -> Response:
    return Response(orjson.dumps(openapi(), option=orjson.OPT_INDENT_2), media_type=JSON)


# ---------------------------------------------------------------- their parts


async def _json_body(api: Api, request: Request) -> dict[str, Any]:
    """The request's JSON object, read no further than LB_API_MAX_BODY bytes."""
    cap = api.settings.max_body
    kind = request.headers.get("content-type", JSON).partition(";")[0].strip().lower()
    if kind != JSON:
        raise Problem("unsupported_media_type", "the body must be application/json")
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > cap:
        raise Problem("body_too_large", f"the body must be at most {cap} bytes")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > cap:
            raise Problem("body_too_large", f"the body must be at most {cap} bytes")
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise Problem("bad_json", "the body is not valid JSON") from None
    if not isinstance(value, dict):
        raise Problem("bad_json", "the body is not a JSON object")
    return value


def _submission(request: Request, body: dict[str, Any]) -> Submission:
    """seed 001's body ``{player_id, score | delta, match_id}`` as the socket's submission: the
    match id (or the Idempotency-Key header) is the submission id; ``delta`` adds (``incr``),
    ``score`` goes through each board's operator; the path's board scopes it."""
    match_id, key = body.get("match_id"), request.headers.get("idempotency-key")
    if match_id is not None and key is not None and match_id != key:
        raise Problem("bad_message", "match_id and Idempotency-Key differ")
    if ("score" in body) == ("delta" in body):
        raise Problem("bad_message", "give one of score and delta")
    fields: dict[str, Any] = {
        "id": match_id if match_id is not None else key or "",
        "player": body.get("player_id"),
        "points": body["delta"] if "delta" in body else body["score"],
        "ts": body.get("ts", now_ms()),
    }
    if "delta" in body:
        fields["op"] = "incr"
    for name in ("name", "region", "mode", "tournament"):
        if name in body:
            fields[name] = body[name]
    try:
        kind, value = _scope(request.path_params["board"])
        if kind is not None:
            if fields.get(kind, value) != value:
                raise Problem("invalid_scope", f"the body's {kind} is not the board's")
            fields[kind] = value
        return Submission.parse(fields)
    except InvalidSubmission as exc:
        raise Problem(exc.code, exc.message) from None


def _scope(board: str) -> tuple[str | None, str | None]:
    try:
        label = parse_scope(board)
    except ValueError as exc:
        raise Problem("bad_board", str(exc)) from None
    kind, _, value = label.partition(":")
    return (kind, value) if value else (None, None)


async def _published_top(api: Api, game: Game, req: p.Top) -> tuple[str, bytes, float] | None:
    """The current top from the snapshot the scorer last published (held: held.py) with its ETag,
    the snapshot's period and version, and its age; None when it cannot answer: a past period, a
    tournament, more entries than a snapshot holds, nothing published yet in this period."""
    config = game.lb.config
    if req.period is not None or req.window not in config.windows or req.n > config.top_n:
        return None
    raw, age = await _read(api.snapshots.get(config.keys.latest(req.window, req.board)))
    if raw is None:
        return None
    snap = orjson.loads(raw)
    if snap["period"] != window(req.window).period(now_ms()).label:  # a new period, none published yet
        return None
    msg = {k: snap[k] for k in ("board", "window", "period", "mode")} | {"entries": snap["entries"][: req.n]}
    return f'"{snap["period"]}.{snap["version"]}"', orjson.dumps({"type": "top", **msg}), age


async def _outcome(lb: Leaderboard, submission_id: str, bound: float) -> dict[str, Any] | None:
    """The submission's status once it is no longer pending, read until ``bound`` seconds pass."""
    loop = asyncio.get_running_loop()
    deadline, pause = loop.time() + bound, _POLL_S[0]
    while True:
        found = await _read(lb.status(submission_id))
        if found.status != "pending":
            out: dict[str, Any] = {"submission": found.id, "status": found.status}
            if found.code is not None:
                out |= {"code": found.code, "message": found.message or ""}
            if found.boards:
                out["boards"] = [
                    {
                        "board": b.board.scope,
                        "window": b.board.window,
                        "period": b.board.period,
                        "improved": b.improved,
                        "rank": b.rank,
                        "previous_rank": b.previous_rank,
                        "points": b.best,
                    }
                    for b in found.boards
                ]
            return out
        if loop.time() + pause > deadline:
            return None
        await asyncio.sleep(pause)  # the scorer applies in batches: a few reads per slip at most
        pause = min(2 * pause, _POLL_S[1])


async def _read(call: Awaitable[T]) -> T:
    """A read Redis refused for its arguments: the client's bad input, in the socket's words."""
    try:
        return await call
    except (BadRequest, TournamentError) as exc:
        raise Problem("bad_message" if exc.code == "bad_request" else exc.code, exc.message) from None
    except (RedisError, OSError):
        raise Problem("unavailable", "Redis is unreachable; retry later") from None


# ---------------------------------------------------------------- the table


Handler = Callable[[Api, Request], Awaitable[Response]]


def _param(name: str, where: str, schema: dict[str, Any], doc: str, required: bool = False) -> dict[str, Any]:
    return {"name": name, "in": where, "required": required, "description": doc, "schema": schema}


BOARD = _param("board", "path", {"type": "string"}, "the board's scope: global, region:<name>, mode:<name>", True)
PLAYER = _param("player", "path", {"type": "string", "minLength": 1}, "a player id", True)
WINDOW = _param("window", "query", {"type": "string"}, "the board's window (default: the socket's default window)")
PERIOD = _param("period", "query", {"type": "string"}, "previous, or a period label such as 2026-W48")
GAME = _param("game", "query", {"type": "string"}, "the game (default: the first game served)")
READS = [BOARD, WINDOW, PERIOD, GAME]

ENTRY = {
    "type": "object",
    "properties": {"rank": {"type": "integer"}, "player": {"type": "string"}, "score": {"type": "integer"}},
    "required": ["rank", "player", "score"],
}
BOARD_FIELDS = {
    "board": {"type": "string"},
    "window": {"type": "string"},
    "period": {"type": "string"},
    "mode": {"type": "string"},
}
SCHEMAS: dict[str, Any] = {
    "Top": {
        "type": "object",
        "properties": {"type": {"const": "top"}, **BOARD_FIELDS, "entries": {"type": "array", "items": ENTRY}},
        "required": ["type", "board", "window", "period", "entries"],
    },
    "Rank": {
        "type": "object",
        "properties": {
            "type": {"const": "rank"},
            **BOARD_FIELDS,
            "player": {"type": "string"},
            "rank": {"type": ["integer", "null"]},
            "score": {"type": ["integer", "null"]},
            "size": {"type": "integer"},
            "top_percent": {"type": ["number", "null"]},
            "approx": {"type": "boolean"},
        },
        "required": ["type", "board", "window", "period", "player", "rank", "score", "size"],
    },
    "Around": {
        "type": "object",
        "properties": {
            "type": {"const": "around"},
            **BOARD_FIELDS,
            "player": {"type": "string"},
            "size": {"type": ["integer", "null"]},
            "entries": {"type": "array", "items": ENTRY},
        },
        "required": ["type", "board", "window", "period", "player", "entries"],
    },
    "Ranks": {
        "type": "object",
        "properties": {
            "type": {"const": "ranks"},
            **BOARD_FIELDS,
            "size": {"type": "integer"},
            "players": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "player": {"type": "string"},
                        "rank": {"type": ["integer", "null"]},
                        "score": {"type": ["integer", "null"]},
                    },
                    "required": ["player", "rank", "score"],
                },
            },
        },
        "required": ["type", "board", "window", "period", "size", "players"],
    },
    "Players": {
        "type": "object",
        "properties": {
            "players": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": p.MAX_FRIENDS}
        },
        "required": ["players"],
    },
    "Stats": {
        "type": "object",
        "properties": {
            "type": {"const": "stats"},
            **BOARD_FIELDS,
            "size": {"type": "integer", "description": "players on this board (exact)"},
            "players": {"type": "integer", "description": "distinct players of the period, all scopes (~0.8%)"},
        },
        "required": ["type", "board", "window", "period", "size", "players"],
    },
    "Score": {
        "type": "object",
        "properties": {
            "player_id": {"type": "string", "minLength": 1, "maxLength": 64},
            "score": {"type": "integer", "minimum": 0, "description": "through each board's operator"},
            "delta": {"type": "integer", "minimum": 0, "description": "added to the player's points"},
            "match_id": {"type": "string", "minLength": 1, "description": "the submission id: applied once"},
            "ts": {"type": "integer", "description": "ms since the epoch (default: now)"},
            "name": {"type": "string"},
            "region": {"type": "string"},
            "mode": {"type": "string"},
            "tournament": {"type": "string"},
        },
        "required": ["player_id"],
    },
    "Queued": {
        "type": "object",
        "properties": {
            "submission": {"type": "string"},
            "stream_id": {"type": "string"},
            "status": {"const": "pending"},
        },
        "required": ["submission", "stream_id", "status"],
    },
    "Outcome": {
        "type": "object",
        "properties": {
            "submission": {"type": "string"},
            "stream_id": {"type": "string"},
            "status": {"enum": ["applied", "refused", "unknown"]},
            "code": {"type": "string"},
            "message": {"type": "string"},
            "boards": {
                "type": "array",
                "description": "applied: what the submission did on each board (a retry gets the same)",
                "items": {
                    "type": "object",
                    "properties": {
                        "board": {"type": "string"},
                        "window": {"type": "string"},
                        "period": {"type": "string"},
                        "improved": {"type": "boolean"},
                        "rank": {"type": "integer"},
                        "previous_rank": {"type": ["integer", "null"]},
                        "points": {"type": "integer"},
                    },
                    "required": ["board", "window", "period", "improved", "rank", "previous_rank", "points"],
                },
            },
        },
        "required": ["submission", "stream_id", "status"],
    },
    "Problem": {
        "type": "object",
        "properties": {
            "type": {"type": "string"},
            "title": {"type": "string"},
            "status": {"type": "integer"},
            "detail": {"type": "string"},
            "code": {"enum": ALL_CODES},
        },
        "required": ["type", "title", "status", "detail", "code"],
    },
}


@dataclass(frozen=True, slots=True)
class Route:
    method: str
    path: str
    handler: Handler
    summary: str
    answers: dict[int, str | None]  # status: schema name (in SCHEMAS; "": any JSON, None: no body)
    params: list[dict[str, Any]] = field(default_factory=list)
    body: str | None = None
    auth: str = "none"  # "none", "player" (a player or server token), "server"


ROUTES = [
    Route(
        "POST",
        "/v1/boards/{board}/scores",
        submit,
        "Submit a score (server token); match_id or Idempotency-Key is the submission id, applied once",
        {202: "Queued", 200: "Outcome"},
        [
            BOARD,
            GAME,
            _param("wait", "query", {"enum": ["applied"]}, "wait (bounded) for the scorer's outcome"),
            _param("Idempotency-Key", "header", {"type": "string"}, "the submission id, when the body has no match_id"),
        ],
        body="Score",
        auth="server",
    ),
    Route(
        "GET",
        "/v1/boards/{board}/top",
        top,
        "The board's top n; the current top N comes from the scorer's last snapshot, with its ETag",
        {200: "Top", 304: None},
        [
            *READS,
            _param("n", "query", {"type": "integer", "minimum": 1, "maximum": p.MAX_TOP}, "entries (default 10)"),
            _param("If-None-Match", "header", {"type": "string"}, "an ETag of this route: 304 while still current"),
        ],
    ),
    Route(
        "GET",
        "/v1/boards/{board}/players/{player}",
        player,
        "A player's rank and score (a player or server token)",
        {200: "Rank"},
        [BOARD, PLAYER, *READS[1:]],
        auth="player",
    ),
    Route(
        "GET",
        "/v1/boards/{board}/players/{player}/around",
        around,
        "The k entries on each side of a player (a player or server token)",
        {200: "Around"},
        [
            BOARD,
            PLAYER,
            *READS[1:],
            _param("k", "query", {"type": "integer", "minimum": 0, "maximum": p.MAX_AROUND}, "each side (default 5)"),
        ],
        auth="player",
    ),
    Route(
        "POST",
        "/v1/boards/{board}/players:ranks",
        ranks,
        "The ranks of up to 100 players, a friends list (a player or server token)",
        {200: "Ranks"},
        READS,
        body="Players",
        auth="player",
    ),
    Route(
        "GET",
        "/v1/boards/{board}/stats",
        stats,
        "The board's size and the period's distinct players",
        {200: "Stats"},
        READS,
    ),
    Route("GET", "/v1/openapi.json", openapi_json, "This document", {200: ""}),
]


def openapi() -> dict[str, Any]:
    """The OpenAPI 3.1 document of ``ROUTES``."""
    paths: dict[str, Any] = {}
    for route in ROUTES:
        responses: dict[str, Any] = {}
        for status, schema in route.answers.items():
            responses[str(status)] = {"description": HTTPStatus(status).phrase}
            if schema is not None:
                ref: dict[str, Any] = {"schema": {"$ref": f"#/components/schemas/{schema}"}} if schema else {}
                responses[str(status)]["content"] = {JSON: ref}
        if route.handler is not openapi_json:
            problem = {MEDIA_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}}
            responses["4XX"] = {"description": "refused (code: docs/protocol.md)", "content": problem}
            responses["503"] = {"description": "Redis unavailable or queue full; retry", "content": problem}
        op: dict[str, Any] = {"summary": route.summary, "parameters": route.params, "responses": responses}
        if route.body:
            body = {"$ref": f"#/components/schemas/{route.body}"}
            op["requestBody"] = {"required": True, "content": {JSON: {"schema": body}}}
        if route.auth != "none":
            op["security"] = [{"bearer": []}]
        op["operationId"] = route.handler.__name__
        paths.setdefault(route.path, {})[route.method.lower()] = op
    return {
        "openapi": "3.1.0",
        "info": {"title": "Leaderboard HTTP API", "version": "1"},
        "paths": paths,
        "components": {
            "schemas": SCHEMAS,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"}},
        },
    }
