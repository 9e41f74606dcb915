"""The HTTP API's routes: one table (``ROUTES``) from which both the server's routing and the
OpenAPI document (``openapi()``, served at /v1/openapi.json, kept in docs/openapi.json) are made.

Each request is checked by the socket's own parser (leaderboard.protocol: a route and its query
become the message the socket would have received), its token by leaderboard.auth, a submission
by leaderboard.submission; answers are the socket's replies (leaderboard.wire), so a board reads
the same over both.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from http import HTTPStatus
from typing import Any, TypeVar
from urllib.parse import unquote

import orjson
from redis.exceptions import RedisError
from starlette.requests import Request
from starlette.responses import Response

from leaderboard import BacklogFull, BadRequest, InvalidSubmission, Leaderboard, Submission, now_ms, replies
from leaderboard import protocol as p
from leaderboard.auth import SPECTATOR, AuthError, Identity, authenticate
from leaderboard.budget import Budgets, cost
from leaderboard.definitions import default_window
from leaderboard.errors import NotReplicated, TournamentError
from leaderboard.keys import DEFINED, GLOBAL_SCOPE, SCOPE_KINDS, parse_scope
from leaderboard.queue import Queue
from leaderboard.windows import window

from . import bodies
from .problems import ALL_CODES, MEDIA_TYPE, Problem
from .settings import ApiSettings
from .watch import Watch

T = TypeVar("T")
JSON = "application/json"
_POLL_S = (0.005, 0.1)  # ?wait=applied: first and longest pause between status reads


@dataclass(frozen=True, slots=True)
class Game:
    lb: Leaderboard
    queue: Queue
    watch: Watch  # the boards' published snapshots (watch.py)
    shared: replies.Game  # the requests answered as the socket answers them


@dataclass(slots=True)
class Api:
    """What a request needs: the settings and, per game served, its wrappers and queue."""

    settings: ApiSettings
    games: Mapping[str, Game]
    default_game: str
    budgets: Budgets  # reads per player token or spectator address

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

    def parse(self, msg: dict[str, Any], game: Game | None = None) -> Any:
        """``msg`` as the socket's parser reads it, with the windows ``game`` (default: the
        default game) keeps: its stored default board's, else the environment's."""
        config = (game or self.games[self.default_game]).lb.config
        window = default_window(config, self.settings.default_window)
        try:
            return p.parse_message(msg, windows=config.windows, default_window=window)
        except p.ProtocolError as exc:
            raise Problem(exc.code, exc.message) from None

    def charge(self, request: Request, identity: Identity, req: p.Request) -> None:
        """Spend what ``req`` costs Redis from its player's budget (a spectator's: its address's,
        the one a balancer in LB_API_TRUSTED_PROXIES forwarded: server.py); game servers have none."""
        if identity.role == "server":
            return
        if identity.player is not None:
            key = "p:" + identity.player
        else:
            key = "a:" + (request.client.host if request.client else "")
        units, now = cost(req), time.monotonic()
        if not self.budgets.take(key, units, now):
            wait = (units - self.budgets.left(key, now)) / self.budgets.rate
            raise Problem("rate_limited", "too many reads; slow down", retry_after=max(1, math.ceil(wait)))

    def read(self, request: Request, msg: dict[str, Any], identity: Identity) -> Any:
        """A read request parsed as the socket's and paid for."""
        req = self.parse(msg, self.game(request))
        self.charge(request, identity, req)
        return req


def path_param(request: Request, name: str) -> str:
    """A path segment as the client sent it, percent-decoded (server.py keeps an encoded '/'
    inside its segment: a player id may hold one)."""
    return unquote(request.path_params[name])


# ---------------------------------------------------------------- the handlers


def _board_msg(request: Request, kind: str, **fields: Any) -> dict[str, Any]:
    """The socket's message of a board read: the path's board, the query's window and period."""
    q = request.query_params
    msg = {"type": kind, "board": path_param(request, "board"), **fields}
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


# A route's request as the socket would have received it, from the path, the query and the body.
Message = Callable[[Request, dict[str, Any]], dict[str, Any]]


def board_read(kind: str, *ints: str, player: bool = False, body: tuple[str, ...] = ()) -> Message:
    """A board read: the path's board (and player), ``ints`` from the query, ``body``'s fields."""

    def message(request: Request, fields: dict[str, Any]) -> dict[str, Any]:
        msg: dict[str, Any] = {name: fields.get(name) for name in body}
        for name in ints:
            msg |= _int_query(request, name)
        if player:
            msg["player"] = path_param(request, "player")
        return _board_msg(request, kind, **msg)

    return message


def action(kind: str, subject: str, *names: str) -> Message:
    """An operator action on the path's ``subject`` (player, tournament), ``names`` from the body."""

    def message(request: Request, fields: dict[str, Any]) -> dict[str, Any]:
        return {"type": kind, subject: path_param(request, subject), **{n: fields[n] for n in names if n in fields}}

    return message


def profile_message(request: Request, fields: dict[str, Any]) -> dict[str, Any]:
    return {"type": "profile", "player": path_param(request, "player"), "profile": fields}


def status_message(request: Request, fields: dict[str, Any]) -> dict[str, Any]:
    return {"type": "status", "submission": path_param(request, "submission")}


def definition_message(action: str) -> Message:
    """A board definition request (docs/data-model.md, Board definitions): the path's id."""

    def message(request: Request, fields: dict[str, Any]) -> dict[str, Any]:
        if action == "list":
            return {"type": "board", "action": "list"}
        return {"type": "board", "action": action, "board": path_param(request, "definition")}

    return message


async def put_definition(api: Api, request: Request) -> Response:
    """Create the path's board from the body's definition, or update the stored one to it (the
    socket's ``create``, else ``update``: a change that would reorder a live board is refused
    with ``board_reorder``). The body's ``id``, if given, is the path's."""
    game = api.game(request)
    identity = _allowed(api.identity(request), "server")
    board, fields = path_param(request, "definition"), await _json_body(api, request, "BoardDefinition")
    if fields.setdefault("id", board) != board:
        raise Problem("invalid_board_id", "the definition's id is not the path's")
    msg = {"type": "board", "action": "create", "definition": fields}
    try:
        return Response(await _answer(game, identity, api.read(request, msg, identity)), media_type=JSON)
    except Problem as exc:
        if exc.code != "board_exists":
            raise
    # Another definition of the id is stored: this one replaces it, as an update. Not charged
    # again: one request.
    update = api.parse({**msg, "action": "update"})
    return Response(await _answer(game, identity, update), media_type=JSON)


def answering(message: Message, *, auth: str = "none", body: str | None = None) -> Handler:
    """A route answered as the socket answers its request (leaderboard/replies.py): the token
    checked for the route's ``auth``, its ``body`` (a schema's name) checked, the request parsed
    and paid for, then the same reply."""

    async def handler(api: Api, request: Request) -> Response:
        game = api.game(request)
        identity = _allowed(api.identity(request), auth)
        fields = await _json_body(api, request, body) if body else {}
        req = api.read(request, message(request, fields), identity)
        return Response(await _answer(game, identity, req), media_type=JSON)

    return handler


def _allowed(identity: Identity, auth: str) -> Identity:
    if auth == "player" and identity.player is None:
        raise Problem("auth_required", "this request needs a player or server token")
    if auth == "server" and identity.role != "server":
        code = "auth_required" if identity.role == "spectator" else "forbidden"
        raise Problem(code, "only game servers may do this")
    return identity


async def _answer(game: Game, identity: Identity, req: p.Request) -> bytes:
    try:
        return await replies.answer(game.shared, identity, req)
    except p.ProtocolError as exc:
        raise Problem(exc.code, exc.message) from None
    except (RedisError, OSError):
        raise Problem("unavailable", "Redis is unreachable; retry later") from None


async def top(api: Api, request: Request) -> Response:
    game = api.game(request)
    identity = api.identity(request)  # anyone may read the top; a bad token is still refused
    req = api.parse(_board_msg(request, "top", **_int_query(request, "n")), game)
    held = await held_top(api, game, req, request.headers.get("if-none-match"))
    if held is not None:  # free: no Redis read, or one per board and TTL
        status, headers, body = held
        response = Response(body, status)
        response.raw_headers = list(headers)  # made once per snapshot, as the fast path sends them
        return response
    api.charge(request, identity, req)
    body = await _answer(game, identity, req)
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
        return await held_top(api, api.games[api.default_game], api.parse(msg), if_none_match)
    except Exception:  # refused, Redis unreachable, a broken snapshot: the route answers (and logs)
        return None


async def create_tournament(api: Api, request: Request) -> Response:
    """A tournament's boards (window ``t-<id>``) from ``start_ms`` to ``end_ms``, as ``python -m
    scorer tournament create`` makes them; again with the same bounds: the same answer."""
    game = api.game(request)
    _allowed(api.identity(request), "server")
    fields = await _json_body(api, request, "TournamentSpan")
    tournament, start, end = path_param(request, "tournament"), fields.get("start_ms"), fields.get("end_ms")
    if not all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**53 for v in (start, end)):
        raise Problem("bad_message", "start_ms and end_ms must be times in ms since the epoch")
    assert isinstance(start, int) and isinstance(end, int)
    spec = await _read(game.lb.create_tournament(tournament, start, end))
    reply = {"type": "tournament", "tournament": tournament, "window": spec.name, "start_ms": start, "end_ms": end}
    return Response(orjson.dumps(reply), media_type=JSON)


async def submit(api: Api, request: Request) -> Response:
    game = api.game(request)
    _allowed(api.identity(request), "server")
    wait = request.query_params.get("wait")
    if wait not in (None, "applied"):
        raise Problem("bad_message", "wait must be applied")
    body = await _json_body(api, request, "Score")
    sub = _submission(request, body)
    if wait is not None:  # lb_submit keeps what it decided per board for the status read below
        sub = replace(sub, outcome=True)
    try:
        # the clock and the game's limits checked here; the body's fingerprint against the id's first
        stream_id = await game.queue.submit(sub, body=fingerprint(path_param(request, "board"), body))
    except (InvalidSubmission, BacklogFull, NotReplicated) as exc:
        raise Problem(exc.code, exc.message) from None
    except (RedisError, OSError):
        raise Problem("unavailable", "Redis is unreachable; retry with the same match_id") from None
    queued = {"submission": sub.id, "stream_id": stream_id, "status": "pending"}
    if wait is None:
        return Response(orjson.dumps(queued), 202, media_type=JSON)
    outcome = await _outcome(game.lb, sub, api.settings.wait_max)
    if outcome is None:  # not applied within the bound: queued, as without ?wait
        return Response(orjson.dumps(queued), 202, media_type=JSON)
    return Response(orjson.dumps({"stream_id": stream_id, **outcome}), 200, media_type=JSON)


async def openapi_json(api: Api, request: Request) -> Response:
    return Response(orjson.dumps(openapi(), option=orjson.OPT_INDENT_2), media_type=JSON)


# ---------------------------------------------------------------- their parts


async def _json_body(api: Api, request: Request, schema: str) -> dict[str, Any]:
    """The request's JSON object, read no further than LB_API_MAX_BODY bytes, as its ``schema``
    in the OpenAPI document says (bodies.py: types, bounds, no field it does not declare)."""
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
    violation = bodies.check(SCHEMAS, schema, value, FIELD_CODES.get(schema, {}))
    if violation is not None:
        raise Problem(violation.code, violation.message)
    return value


def _submission(request: Request, body: dict[str, Any]) -> Submission:
    """seed 001's body ``{player_id, score | delta, match_id}`` as the socket's submission: the
    match id (or the Idempotency-Key header) is the submission id; ``delta`` adds (``incr``),
    ``score`` goes through each board's operator; the path's board scopes it. A defined board
    (``board:<id>``) takes ``values`` (its key values) and ``meta`` instead of a score."""
    match_id, key = body.get("match_id"), request.headers.get("idempotency-key")
    if match_id is not None and key is not None and match_id != key:
        raise Problem("bad_message", "match_id and Idempotency-Key differ")
    if match_id is None and not key:  # the document's rule, which one schema cannot say across body and header
        raise Problem("missing_id", "match_id or Idempotency-Key is required: the submission id, applied once")
    kind, value = _scope(path_param(request, "board"))
    fields: dict[str, Any] = {
        "id": match_id if match_id is not None else key or "",
        "player": body.get("player_id"),
        "ts": body.get("ts", now_ms()),
    }
    if kind == DEFINED:
        if "score" in body or "delta" in body:
            raise Problem("bad_message", "a defined board takes values (and meta), not score or delta")
        fields |= {"values": body.get("values"), "meta": body.get("meta")}
    elif ("score" in body) == ("delta" in body):
        raise Problem("bad_message", "give one of score and delta")
    elif "values" in body or "meta" in body:
        raise Problem("unknown_board", "values and meta are a defined board's (board:<id>)")
    else:
        fields["points"] = body["delta"] if "delta" in body else body["score"]
    if "delta" in body:
        fields["op"] = "incr"
    for name in ("name", "region", "mode", "tournament"):
        if name in body:
            fields[name] = body[name]
    try:
        if kind is not None:
            if fields.get(kind, value) != value:
                raise Problem("invalid_scope", f"the body's {kind} is not the board's")
            fields[kind] = value
        return Submission.parse(fields)
    except InvalidSubmission as exc:
        raise Problem(exc.code, exc.message) from None


def fingerprint(board: str, body: dict[str, Any]) -> str:
    """What a submission's request asks, as the Idempotency-Key rule compares it: the path's board
    and the body's fields but the id (a retry may name it by the header instead), in one text
    whatever the order of the fields and the spaces between them; hashed, to keep it short."""
    fields = {k: v for k, v in body.items() if k != "match_id"}
    canonical = orjson.dumps({"board": board, "body": fields}, option=orjson.OPT_SORT_KEYS)
    return hashlib.blake2b(canonical, digest_size=16).hexdigest()


def _scope(board: str) -> tuple[str | None, str | None]:
    try:
        label = parse_scope(board)
    except ValueError as exc:
        raise Problem("bad_board", str(exc)) from None
    kind, _, value = label.partition(":")
    return (kind, value) if value else (None, None)


async def _published_top(api: Api, game: Game, req: p.Top) -> tuple[tuple[str, Headers, Headers, bytes], float] | None:
    """The current top from the snapshot the scorer last published (held: held.py) — its ETag
    (the snapshot's period and version), the headers of a 200 and of a 304, the body — and its
    age; None when it cannot answer: a past period, a tournament, more entries than a snapshot
    holds, nothing published yet in this period."""
    config = game.lb.config
    if req.period is not None or req.window not in config.windows or req.n > config.top_n:
        return None
    raw, age = await _read(game.watch.get(req.window, req.board))
    if raw is None:
        return None
    s = api.settings
    period, etag, full, bare, body = _top_answer(raw, req.n, int(s.top_ttl), int(s.stale_if_error))
    if period != _current_period(req.window, int(time.time())):  # a new period, none published yet
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


async def _outcome(lb: Leaderboard, sub: Submission, bound: float) -> dict[str, Any] | None:
    """The submission's status once it is no longer pending, read until ``bound`` seconds pass."""
    loop = asyncio.get_running_loop()
    deadline, pause = loop.time() + bound, _POLL_S[0]
    while True:
        found = await _read(lb.status(sub.id))
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
                if sub.board is not None:
                    await _with_keys(lb, sub.player, out["boards"])
            return out
        if loop.time() + pause > deadline:
            return None
        await asyncio.sleep(pause)  # the scorer applies in batches: a few reads per slip at most
        pause = min(2 * pause, _POLL_S[1])


async def _with_keys(lb: Leaderboard, player: str, rows: list[dict[str, Any]]) -> None:
    """A defined board's rows with the player's key values there (``points`` is the first): what
    lb_submit keeps per board is that one number, so the values are read (as text, exact beyond
    2^53), one read per board period; a period no longer readable keeps its row without them."""
    for row in rows:
        try:
            standing = await lb.rank(player, row["window"], row["board"], period=row["period"])
        except (BadRequest, TournamentError):
            continue
        if standing.keys is not None:
            row["keys"] = [str(v) for v in standing.keys]


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


BOARD = _param(
    "board",
    "path",
    {"type": "string", "pattern": f"^({GLOBAL_SCOPE}|({'|'.join(SCOPE_KINDS)}):[A-Za-z0-9_-]{{1,32}})$"},
    "the board's scope: global, region:<name>, mode:<name>",
    True,
)
# reads take a defined board too (board:<id>, docs/data-model.md "Board definitions")
READ_BOARD = _param(
    "board",
    "path",
    {"type": "string", "pattern": f"^({GLOBAL_SCOPE}|({'|'.join((*SCOPE_KINDS, 'board'))}):[A-Za-z0-9_-]{{1,32}})$"},
    "the board's scope: global, region:<name>, mode:<name>, or board:<id> (a defined board)",
    True,
)
PLAYER = _param("player", "path", {"type": "string", "minLength": 1}, "a player id", True)
WINDOW = _param("window", "query", {"type": "string"}, "the board's window (default: the socket's default window)")
PERIOD = _param("period", "query", {"type": "string"}, "previous, or a period label such as 2026-W48")
GAME = _param("game", "query", {"type": "string"}, "the game (default: the first game served)")
READS = [READ_BOARD, WINDOW, PERIOD, GAME]

ENTRY = {
    "type": "object",
    "properties": {
        "rank": {"type": "integer"},
        "player": {"type": "string"},
        "score": {"type": "integer"},
        "keys": {
            "type": "array",
            "items": {"type": "string"},
            "description": "a defined board's: the entry's key values as text (exact beyond 2^53)",
        },
        "meta": {"type": "string", "description": "a defined board's: the entry's metadata"},
    },
    "required": ["rank", "player", "score"],
}
COLUMNS = {
    "type": "array",
    "description": "a defined board's keys, in order: what each entry's keys hold and how to show them",
    "items": {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "direction": {"enum": ["desc", "asc"]},
            "display": {"type": "string"},
        },
    },
}
BOARD_FIELDS = {
    "board": {"type": "string"},
    "window": {"type": "string"},
    "period": {"type": "string"},
    "mode": {"type": "string"},
}
MS_SINCE_EPOCH = {"type": "integer", "minimum": 0, "maximum": 2**53 - 1}
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
                        "keys": {
                            "type": "array",
                            "items": {"type": "string"},
                            "description": "a defined board's key values of a ranked player (score is the first)",
                        },
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
        "additionalProperties": False,
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
            "match_id": {
                "type": "string",
                "minLength": 1,
                "maxLength": 64,
                "description": "the submission id, applied once: match_id or the Idempotency-Key header is required",
            },
            "ts": {"type": "integer", "minimum": 0, "description": "ms since the epoch (default: now)"},
            "name": {"type": "string"},
            "region": {"type": "string"},
            "mode": {"type": "string"},
            "tournament": {"type": "string"},
            "values": {
                "type": "array",
                "items": {"type": ["integer", "string"], "pattern": "^-?[0-9]+$"},
                "minItems": 1,
                "maxItems": 5,
                "description": "a defined board's (board:<id>) key values, int64 (text beyond 2^53), not a score",
            },
            "meta": {"type": "string", "maxLength": 1024, "description": "a defined board's entry metadata"},
        },
        "required": ["player_id"],
        "additionalProperties": False,
        "description": "one of score and delta, or a defined board's values; match_id or the Idempotency-Key "
        "header names the submission",
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
                        "keys": {
                            "type": "array",
                            "items": {"type": "string"},
                            "description": "a defined board's: the player's key values there (points is the first)",
                        },
                    },
                    "required": ["board", "window", "period", "improved", "rank", "previous_rank", "points"],
                },
            },
        },
        "required": ["submission", "stream_id", "status"],
    },
    "Finals": {
        "type": "object",
        "properties": {
            "type": {"const": "finals"},
            "board": {"type": "string"},
            "window": {"type": "string"},
            "periods": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "period": {"type": "string"},
                        "start_ms": {"type": "integer"},
                        "end_ms": {"type": "integer"},
                        "closed_ms": {"type": "integer"},
                        "entries": {"type": "array", "items": ENTRY},
                        "columns": COLUMNS,
                    },
                    "required": ["period", "entries"],
                },
            },
        },
        "required": ["type", "board", "window", "periods"],
    },
    "Status": {
        "type": "object",
        "properties": {
            "type": {"const": "status"},
            "submission": {"type": "string"},
            "status": {"enum": ["applied", "refused", "pending", "unknown"]},
            "code": {"type": "string"},
            "message": {"type": "string"},
        },
        "required": ["type", "submission", "status"],
    },
    "Reason": {
        "type": "object",
        "properties": {"reason": {"type": "string", "description": "journaled with the action"}},
        "additionalProperties": False,
    },
    "Correction": {
        "type": "object",
        "properties": {
            "points": {"type": "integer", "minimum": 0, "description": "the player's points from now on"},
            "reason": {"type": "string"},
            "window": {"type": "string", "description": "one window (default: every window kept)"},
            "period": {"type": "string", "description": "a period label (default: the current one)"},
            "scopes": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 10},
            "values": {
                "type": "array",
                "items": {"type": ["integer", "string"]},
                "minItems": 1,
                "maxItems": 5,
                "description": "a defined board's key values from now on (scopes board:<id>; instead of points)",
            },
            "metadata": {
                "type": "string",
                "description": "a defined board's entry metadata ('' clears; default: kept)",
            },
            "remove": {"type": "boolean", "description": "take the player off the defined boards named"},
        },
        "required": ["reason"],
        "additionalProperties": False,
    },
    "Profile": {
        "type": "object",
        "properties": {"name": {"type": "string"}, "avatar": {"type": "string"}, "country": {"type": "string"}},
        "minProperties": 1,
        "additionalProperties": False,
    },
    "TournamentSpan": {
        "type": "object",
        "properties": {"start_ms": MS_SINCE_EPOCH, "end_ms": MS_SINCE_EPOCH},
        "required": ["start_ms", "end_ms"],
        "additionalProperties": False,
    },
    "Entrants": {
        "type": "object",
        "properties": {
            "players": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": p.MAX_JOIN}
        },
        "required": ["players"],
        "additionalProperties": False,
    },
    "Banned": {
        "type": "object",
        "properties": {"type": {"const": "banned"}, "player": {"type": "string"}, "boards": {"type": "integer"}},
        "required": ["type", "player", "boards"],
    },
    "Unbanned": {
        "type": "object",
        "properties": {"type": {"const": "unbanned"}, "player": {"type": "string"}, "was_banned": {"type": "boolean"}},
        "required": ["type", "player", "was_banned"],
    },
    "Corrected": {
        "type": "object",
        "properties": {
            "type": {"const": "corrected"},
            "player": {"type": "string"},
            "points": {"type": "integer"},
            "values": {"type": ["array", "null"], "items": {"type": "string"}},
            "boards": {"type": "array", "items": {"type": "object"}},
        },
        "required": ["type", "player", "boards"],
    },
    "ProfileSet": {
        "type": "object",
        "properties": {"type": {"const": "profile"}, "player": {"type": "string"}, "profile": {"type": "object"}},
        "required": ["type", "player", "profile"],
    },
    "Tournament": {
        "type": "object",
        "properties": {
            "type": {"const": "tournament"},
            "tournament": {"type": "string"},
            "window": {"type": "string"},
            "start_ms": {"type": "integer"},
            "end_ms": {"type": "integer"},
        },
        "required": ["type", "tournament", "window", "start_ms", "end_ms"],
    },
    "Joined": {
        "type": "object",
        "properties": {
            "type": {"const": "joined"},
            "tournament": {"type": "string"},
            "players": {"type": "array", "items": {"type": "string"}},
            "added": {"type": "integer"},
        },
        "required": ["type", "tournament", "players", "added"],
    },
    "BoardDefinition": {
        "type": "object",
        "description": "docs/data-model.md, Board definitions (every field but keys has a default)",
        "properties": {
            "id": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,32}$"},
            "keys": {
                "type": "array",
                "minItems": 1,
                "maxItems": 5,
                "items": {
                    "type": "object",
                    "properties": {
                        "name": {"type": "string", "pattern": "^[a-z][a-z0-9_]{0,31}$"},
                        "direction": {"enum": ["desc", "asc"]},
                        "display": {"enum": ["number", "duration_ms", "money"]},
                        "operator": {"enum": ["best", "incr", "set"]},
                        "min": {"type": "integer"},
                        "max": {"type": "integer"},
                    },
                    "required": ["name"],
                    "additionalProperties": False,
                },
            },
            "operator": {"enum": ["best", "incr", "set"]},
            "tie": {"enum": ["first", "last"]},
            "rank_mode": {"enum": ["ordinal", "dense", "competition"]},
            "windows": {"type": "array", "items": {"enum": ["daily", "weekly", "monthly", "alltime", "season"]}},
            "time_zone": {"type": "string"},
            "season": {
                "type": "object",
                "properties": {"start_ms": {"type": "integer"}, "length_s": {"type": "integer"}},
                "required": ["start_ms", "length_s"],
                "additionalProperties": False,
            },
            "top_n": {"type": "integer", "minimum": 1, "maximum": 100},
            "metadata_bytes": {"type": "integer", "minimum": 0, "maximum": 1024},
            "version": {"type": "integer"},
            "extensions": {"type": "object"},
        },
        "required": ["keys"],
        "additionalProperties": False,
    },
    "Definition": {
        "type": "object",
        "properties": {
            "type": {"const": "board"},
            "action": {"enum": ["create", "update", "show"]},
            "definition": {"$ref": "#/components/schemas/BoardDefinition"},
        },
        "required": ["type", "action", "definition"],
    },
    "Definitions": {
        "type": "object",
        "properties": {
            "type": {"const": "board"},
            "action": {"const": "list"},
            "boards": {"type": "array", "items": {"$ref": "#/components/schemas/BoardDefinition"}},
        },
        "required": ["type", "action", "boards"],
    },
    "DefinitionDeleted": {
        "type": "object",
        "properties": {"type": {"const": "board"}, "action": {"const": "delete"}, "board": {"type": "string"}},
        "required": ["type", "action", "board"],
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


bodies.checked(SCHEMAS)  # every rule the document states is one the validator applies

# A request body's field that breaks its schema gets the code the library gives the same rule
# (bodies.py: "<field>.<keyword>" for one keyword's own, "*" for the body's default; else
# bad_message); unknown_field and missing_field whatever the body.
FIELD_CODES: dict[str, dict[str, str]] = {
    "Score": {
        "player_id": "invalid_player",
        "match_id": "invalid_id",
        "score": "invalid_points",
        "delta": "invalid_points",
        "ts": "invalid_timestamp",
        "name": "invalid_name",
        "region": "invalid_scope",
        "mode": "invalid_scope",
        "tournament": "invalid_tournament",
        "values": "invalid_key_value",
        "values.type": "wrong_key_count",
        "values.minItems": "wrong_key_count",
        "values.maxItems": "wrong_key_count",
        "meta": "metadata_too_large",
    },
    "Reason": {"reason": "invalid_reason"},
    "Correction": {
        "points": "invalid_points",
        "reason": "invalid_reason",
        "window": "invalid_window",
        "period": "invalid_period",
        "scopes": "invalid_scope",
        "values": "invalid_key_value",
        "values.type": "wrong_key_count",
        "values.minItems": "wrong_key_count",
        "values.maxItems": "wrong_key_count",
        "metadata": "metadata_too_large",
    },
    "Profile": {
        "*": "invalid_profile",
        "name": "invalid_name",
        "avatar": "invalid_avatar",
        "country": "invalid_country",
    },
    "BoardDefinition": {
        "*": "invalid_board",
        "id": "invalid_board_id",
        "keys": "invalid_board_key",
        "keys.type": "board_no_keys",
        "keys.minItems": "board_no_keys",
        "keys.maxItems": "board_too_many_keys",
        "direction": "invalid_direction",
        "display": "invalid_display",
        "operator": "invalid_operator",
        "min": "invalid_key_bounds",
        "max": "invalid_key_bounds",
        "tie": "invalid_tie",
        "rank_mode": "invalid_rank_mode",
        "windows": "invalid_board_window",
        "time_zone": "invalid_time_zone",
        "season": "invalid_season",
        "top_n": "invalid_top_n",
        "metadata_bytes": "invalid_metadata_limit",
        "extensions": "unknown_extension",
    },
}


@dataclass(frozen=True, slots=True)
class Route:
    method: str
    path: str
    name: str  # the operationId
    handler: Handler
    summary: str
    answers: dict[int, str | None]  # status: schema name (in SCHEMAS; "": any JSON, None: no body)
    params: list[dict[str, Any]] = field(default_factory=list)
    body: str | None = None
    auth: str = "none"  # "none", "player" (a player or server token), "server"


def _read_route(
    method: str, path: str, name: str, message: Message, summary: str, answer: str,
    params: list[dict[str, Any]], *, auth: str = "none", body: str | None = None,
) -> Route:  # fmt: skip
    """A route answered as its socket request is (``answering``)."""
    handler = answering(message, auth=auth, body=body)
    return Route(method, path, name, handler, summary, {200: answer}, params, body, auth)


N_TOP = _param("n", "query", {"type": "integer", "minimum": 1, "maximum": p.MAX_TOP}, "entries (default 10)")
K = _param("k", "query", {"type": "integer", "minimum": 0, "maximum": p.MAX_AROUND}, "each side (default 5)")
N_FINALS = _param("n", "query", {"type": "integer", "minimum": 1, "maximum": p.MAX_FINALS}, "periods (default 1)")
TOURNAMENT = _param("tournament", "path", {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,32}$"}, "its id", True)
DEFINITION = _param("definition", "path", {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,32}$"}, "a board id", True)
SUBMISSION = _param("submission", "path", {"type": "string", "minLength": 1}, "a submission (match) id", True)

ROUTES = [
    Route(
        "POST",
        "/v1/boards/{board}/scores",
        "submit",
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
        "top",
        top,
        "The board's top n; the current top N comes from the scorer's last snapshot, with its ETag",
        {200: "Top", 304: None},
        [
            *READS,
            N_TOP,
            _param("If-None-Match", "header", {"type": "string"}, "an ETag of this route: 304 while still current"),
        ],
    ),
    _read_route(
        "GET", "/v1/boards/{board}/players/{player}", "player", board_read("rank", player=True),
        "A player's rank and score (a player or server token)", "Rank", [READ_BOARD, PLAYER, *READS[1:]], auth="player",
    ),
    _read_route(
        "GET", "/v1/boards/{board}/players/{player}/around", "around", board_read("around", "k", player=True),
        "The k entries on each side of a player (a player or server token)", "Around",
        [READ_BOARD, PLAYER, *READS[1:], K], auth="player",
    ),
    _read_route(
        "POST", "/v1/boards/{board}/players:ranks", "ranks", board_read("ranks", body=("players",)),
        "The ranks of up to 100 players, a friends list (a player or server token)", "Ranks", READS,
        auth="player", body="Players",
    ),
    _read_route(
        "GET", "/v1/boards/{board}/stats", "stats", board_read("stats"),
        "The board's size and the period's distinct players", "Stats", READS,
    ),
    _read_route(
        "GET", "/v1/boards/{board}/finals", "finals", board_read("finals", "n"),
        "The final top N of the window's last n closed periods, newest first", "Finals", [*READS[:2], GAME, N_FINALS],
    ),
    _read_route(
        "GET", "/v1/submissions/{submission}", "submission_status", status_message,
        "What became of a submission: applied, refused (with its code), pending or unknown (server token)",
        "Status", [SUBMISSION, GAME], auth="server",
    ),
    _read_route(
        "POST", "/v1/players/{player}/ban", "ban", action("ban", "player", "reason"),
        "Ban a player: off every board, submissions refused (server token)", "Banned", [PLAYER, GAME],
        auth="server", body="Reason",
    ),
    _read_route(
        "POST", "/v1/players/{player}/unban", "unban", action("unban", "player", "reason"),
        "Lift a player's ban (their scores come back with their next submissions; server token)", "Unbanned",
        [PLAYER, GAME], auth="server", body="Reason",
    ),
    _read_route(
        "POST", "/v1/players/{player}/corrections", "correct",
        action("correct", "player", "points", "reason", "window", "period", "scopes", "values", "metadata", "remove"),
        "Set a player's points on their boards (server token), journaled with the reason", "Corrected",
        [PLAYER, GAME], auth="server", body="Correction",
    ),
    _read_route(
        "PUT", "/v1/players/{player}/profile", "profile", profile_message,
        "Set a player's profile: a server any player's, a player their own name and country", "ProfileSet",
        [PLAYER, GAME], auth="player", body="Profile",
    ),
    Route(
        "PUT",
        "/v1/tournaments/{tournament}",
        "create_tournament",
        create_tournament,
        "Create a tournament (boards of window t-<id>) from start_ms to end_ms (server token)",
        {200: "Tournament"},
        [TOURNAMENT, GAME],
        body="TournamentSpan",
        auth="server",
    ),
    _read_route(
        "POST", "/v1/tournaments/{tournament}/players", "join", action("join", "tournament", "players"),
        "Enter players in a tournament (server token)", "Joined", [TOURNAMENT, GAME], auth="server",
        body="Entrants",
    ),
    _read_route(
        "GET", "/v1/definitions", "list_definitions", definition_message("list"),
        "Every board definition of the game, the default included (server token)", "Definitions", [GAME],
        auth="server",
    ),
    _read_route(
        "GET", "/v1/definitions/{definition}", "show_definition", definition_message("show"),
        "A board definition; its boards are read as board:<id> (server token)", "Definition", [DEFINITION, GAME],
        auth="server",
    ),
    Route(
        "PUT", "/v1/definitions/{definition}", "put_definition", put_definition,
        "Create a board, or update its definition (top_n, rank mode, display, operators, metadata limit; a "
        "change that would reorder it is refused with board_reorder) (server token)",
        {200: "Definition"}, [DEFINITION, GAME], body="BoardDefinition", auth="server",
    ),
    _read_route(
        "DELETE", "/v1/definitions/{definition}", "delete_definition", definition_message("delete"),
        "Delete a board definition; its boards' keys expire with their windows (server token)",
        "DefinitionDeleted", [DEFINITION, GAME], auth="server",
    ),
    Route("GET", "/v1/openapi.json", "openapi", openapi_json, "This document", {200: ""}),
]  # fmt: skip


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
            responses["500"] = {"description": "an unexpected failure (code internal), logged", "content": problem}
        op: dict[str, Any] = {"summary": route.summary, "parameters": route.params, "responses": responses}
        if route.body:
            body = {"$ref": f"#/components/schemas/{route.body}"}
            op["requestBody"] = {"required": True, "content": {JSON: {"schema": body}}}
        if route.auth != "none":
            op["security"] = [{"bearer": []}]
        op["operationId"] = route.name
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
