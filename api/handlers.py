"""The HTTP API's handlers: what each route does with a request.

Each request is checked by the socket's own parser (leaderboard.protocol: a route and its query
become the message the socket would have received), its token by leaderboard.auth, a submission
by leaderboard.submission; answers are the socket's replies (leaderboard.replies), so a board
reads the same over both. Refusals become problems in one place (problems.refusals).
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar
from urllib.parse import unquote

import orjson
from starlette.requests import Request
from starlette.responses import Response

from leaderboard import BadRequest, Leaderboard, Submission, bodies, now_ms, replies
from leaderboard import protocol as p
from leaderboard.auth import SPECTATOR, Identity, Tokens
from leaderboard.budget import Budgets, cost
from leaderboard.definitions import default_window
from leaderboard.errors import TournamentError
from leaderboard.keys import DEFINED
from leaderboard.queue import Queue
from leaderboard.results import Refiled, SubmissionStatus

from .problems import Problem, refusals
from .schemas import FIELD_CODES, SCHEMAS
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
    tokens: Tokens = field(init=False)  # the tokens verified so far (auth.Tokens)

    def __post_init__(self) -> None:
        self.tokens = Tokens(self.settings.jwt_secrets)

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
        with refusals():
            return self.tokens.authenticate(token.strip())

    def parse_held(self, msg: dict[str, Any], game: Game | None = None) -> Any:
        """``msg`` as the socket's parser reads it, against the boards ``game`` (default: the
        default game) keeps as this process holds them (replies.parse): for the fast path."""
        shared = (game or self.games[self.default_game]).shared
        window = default_window(shared.lb.config, self.settings.default_window)
        with refusals():
            return replies.parse(shared, msg, default_window=window)

    async def parse(self, msg: dict[str, Any], game: Game | None = None) -> Any:
        """``parse_held``, a board unknown here looked up again first (replies.request)."""
        shared = (game or self.games[self.default_game]).shared
        window = default_window(shared.lb.config, self.settings.default_window)
        with refusals():
            return await replies.request(shared, msg, default_window=window)

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

    async def read(self, request: Request, msg: dict[str, Any], identity: Identity) -> Any:
        """A read request parsed as the socket's and paid for."""
        req = await self.parse(msg, self.game(request))
        self.charge(request, identity, req)
        return req


def path_param(request: Request, name: str) -> str:
    """A path segment as the client sent it, percent-decoded (server.py keeps an encoded '/'
    inside its segment: a player id may hold one)."""
    return unquote(request.path_params[name])


# ---------------------------------------------------------------- the handlers


def board_msg(request: Request, kind: str, **fields: Any) -> dict[str, Any]:
    """The socket's message of a board read: the path's board, the query's window and period."""
    q = request.query_params
    msg = {"type": kind, "board": path_param(request, "board"), **fields}
    for name in ("window", "period"):
        if name in q:
            msg[name] = q[name]
    return msg


def int_query(request: Request, name: str) -> dict[str, Any]:
    """A number of the query as the socket's parser wants it: an int when it is digits, else the
    text (which the parser refuses with the socket's message)."""
    raw = request.query_params.get(name)
    if raw is None:
        return {}
    return {name: int(raw) if raw.isascii() and raw.isdigit() and len(raw) <= 9 else raw}


Handler = Callable[["Api", Request], Awaitable[Response]]

# A route's request as the socket would have received it, from the path, the query and the body.
Message = Callable[[Request, dict[str, Any]], dict[str, Any]]


def board_read(kind: str, *ints: str, player: bool = False, body: tuple[str, ...] = ()) -> Message:
    """A board read: the path's board (and player), ``ints`` from the query, ``body``'s fields."""

    def message(request: Request, fields: dict[str, Any]) -> dict[str, Any]:
        msg: dict[str, Any] = {name: fields.get(name) for name in body}
        for name in ints:
            msg |= int_query(request, name)
        if player:
            msg["player"] = path_param(request, "player")
        return board_msg(request, kind, **msg)

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
    identity = allowed(api.identity(request), "server")
    board, fields = path_param(request, "definition"), await json_body(api, request, "BoardDefinition")
    if fields.setdefault("id", board) != board:
        raise Problem("invalid_board_id", "the definition's id is not the path's")
    msg = {"type": "board", "action": "create", "definition": fields}
    try:
        return Response(await answer(game, identity, await api.read(request, msg, identity)), media_type=JSON)
    except Problem as exc:
        if exc.code != "board_exists":
            raise
    # Another definition of the id is stored: this one replaces it, as an update. Not charged
    # again: one request.
    update = await api.parse({**msg, "action": "update"})
    return Response(await answer(game, identity, update), media_type=JSON)


def answering(message: Message, *, auth: str = "none", body: str | None = None) -> Handler:
    """A route answered as the socket answers its request (leaderboard/replies.py): the token
    checked for the route's ``auth``, its ``body`` (a schema's name) checked, the request parsed
    and paid for, then the same reply."""

    async def handler(api: Api, request: Request) -> Response:
        game = api.game(request)
        identity = allowed(api.identity(request), auth)
        fields = await json_body(api, request, body) if body else {}
        req = await api.read(request, message(request, fields), identity)
        return Response(await answer(game, identity, req), media_type=JSON)

    return handler


def allowed(identity: Identity, auth: str) -> Identity:
    if auth == "player" and identity.player is None:
        raise Problem("auth_required", "this request needs a player or server token")
    if auth == "server" and identity.role != "server":
        code = "auth_required" if identity.role == "spectator" else "forbidden"
        raise Problem(code, "only game servers may do this")
    return identity


async def answer(game: Game, identity: Identity, req: p.Request) -> bytes:
    """The socket's reply to ``req`` (leaderboard/replies.py)."""
    with refusals():
        return await replies.answer(game.shared, identity, req)


async def create_tournament(api: Api, request: Request) -> Response:
    """A tournament's boards (window ``t-<id>``) from ``start_ms`` to ``end_ms``, as ``python -m
    scorer tournament create`` makes them; again with the same bounds: the same answer."""
    game = api.game(request)
    allowed(api.identity(request), "server")
    fields = await json_body(api, request, "TournamentSpan")
    tournament, start, end = path_param(request, "tournament"), fields.get("start_ms"), fields.get("end_ms")
    if not all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**53 for v in (start, end)):
        raise Problem("bad_message", "start_ms and end_ms must be times in ms since the epoch")
    assert isinstance(start, int) and isinstance(end, int)
    spec = await read(game.lb.create_tournament(tournament, start, end))
    reply = {"type": "tournament", "tournament": tournament, "window": spec.name, "start_ms": start, "end_ms": end}
    return Response(orjson.dumps(reply), media_type=JSON)


def writing(api: Api, request: Request) -> tuple[Game, str | None]:
    """A submission route's game and ``?wait`` (None or applied), once its token is a server's."""
    game = api.game(request)
    allowed(api.identity(request), "server")
    wait = request.query_params.get("wait")
    if wait not in (None, "applied"):
        raise Problem("bad_message", "wait must be applied")
    return game, wait


async def submit(api: Api, request: Request) -> Response:
    game, wait = writing(api, request)
    body = await json_body(api, request, "Score")
    board = path_param(request, "board")
    sub = submission_of(board, body, request.headers.get("idempotency-key"))
    if wait is not None:  # lb_submit keeps what it decided per board for the status read below
        sub = replace(sub, outcome=True)
    with refusals("Redis is unreachable; retry with the same match_id"):
        # the clock and the game's limits checked here; the body's fingerprint against the id's first
        filed = await game.queue.submit(sub, body=fingerprint(board, body))
    # A retry of an earlier filing is not appended again (its slip, stamped by this clock when the
    # body has no ts, could fall in another hour's seen bucket and be applied twice): it is
    # answered as that filing, with its entry's id and, asked to wait, its outcome read below.
    stream_id = filed.stream_id if isinstance(filed, Refiled) else filed
    queued = {"submission": sub.id, "stream_id": stream_id, "status": "pending"}
    if wait is None:
        return Response(orjson.dumps(queued), 202, media_type=JSON)
    [outcome] = await outcomes(game.lb, [sub], api.settings.wait_max)
    if outcome is None:  # not applied within the bound: queued, as without ?wait
        return Response(orjson.dumps(queued), 202, media_type=JSON)
    return Response(orjson.dumps({"stream_id": stream_id, **outcome}), 200, media_type=JSON)


# ---------------------------------------------------------------- their parts


async def json_body(api: Api, request: Request, schema: str) -> dict[str, Any]:
    """The request's JSON object, read no further than LB_API_MAX_BODY bytes, as its ``schema``
    in the OpenAPI document says (bodies.py: types, bounds, no field it does not declare)."""
    value = await json_object(request, api.settings.max_body)
    violation = bodies.check(SCHEMAS, schema, value, FIELD_CODES.get(schema, {}))
    if violation is not None:
        raise Problem(violation.code, violation.message)
    return value


async def json_object(request: Request, cap: int) -> dict[str, Any]:
    """The request's body, a JSON object of at most ``cap`` bytes (read no further)."""
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


def submission_of(board: str, body: dict[str, Any], key: str | None) -> Submission:
    """seed 001's body ``{player_id, score | delta, match_id}`` as the socket's submission: the
    match id (or ``key``, the Idempotency-Key header) is the submission id; ``delta`` adds
    (``incr``), ``score`` goes through each board's operator; the path's ``board`` scopes it. A
    defined board (``board:<id>``) takes ``values`` (its key values) and ``meta`` instead of a
    score; so do the game's boards when the game's stored default keeps key values (a score is
    then the key value of a default of one key, as the queue files it)."""
    match_id = body.get("match_id")
    if match_id is not None and key is not None and match_id != key:
        raise Problem("bad_message", "match_id and Idempotency-Key differ")
    if match_id is None and not key:  # the document's rule, which one schema cannot say across body and header
        raise Problem("missing_id", "match_id or Idempotency-Key is required: the submission id, applied once")
    named = _scope(board)
    kind = named[0][0] if named else None
    fields: dict[str, Any] = {
        "id": match_id if match_id is not None else key or "",
        "player": body.get("player_id"),
        "ts": body.get("ts", now_ms()),
    }
    if kind == DEFINED:
        if "score" in body or "delta" in body:
            raise Problem("bad_message", "a defined board takes values (and meta), not score or delta")
        fields |= {"values": body.get("values"), "meta": body.get("meta")}
    elif "values" in body:  # the game's boards under a stored default of key values (the queue checks it)
        if "score" in body or "delta" in body:
            raise Problem("bad_message", "give values (and meta), or one of score and delta")
        fields |= {"values": body["values"], "meta": body.get("meta")}
    elif ("score" in body) == ("delta" in body):
        raise Problem("bad_message", "give one of score and delta")
    else:
        fields["points"] = body["delta"] if "delta" in body else body["score"]
        if "meta" in body:
            fields["meta"] = body["meta"]
    if "delta" in body:
        fields["op"] = "incr"
    for name in ("name", "region", "mode", "tournament"):
        if name in body:
            fields[name] = body[name]
    for name, value in named:
        if fields.get(name, value) != value:
            raise Problem("invalid_scope", f"the body's {name} is not the board's")
        fields[name] = value
    with refusals():
        return Submission.parse(fields)


def fingerprint(board: str, body: dict[str, Any]) -> str:
    """What a submission's request asks, as the Idempotency-Key rule compares it: the path's board
    and the body's fields but the id (a retry may name it by the header instead), in one text
    whatever the order of the fields and the spaces between them; hashed, to keep it short."""
    fields = {k: v for k, v in body.items() if k != "match_id"}
    canonical = orjson.dumps({"board": board, "body": fields}, option=orjson.OPT_SORT_KEYS)
    return hashlib.blake2b(canonical, digest_size=16).hexdigest()


def _scope(board: str) -> list[tuple[str, str]]:
    try:
        return p.named_fields(board)  # a defined board's bare id too, as reads take it
    except ValueError as exc:
        raise Problem("bad_board", str(exc)) from None


async def outcomes(lb: Leaderboard, subs: Sequence[Submission], bound: float) -> list[dict[str, Any] | None]:
    """Each submission's status once it is no longer pending (None: still pending when ``bound``
    seconds passed), the ones still pending read together in each round."""
    loop = asyncio.get_running_loop()
    deadline, pause = loop.time() + bound, _POLL_S[0]
    found: list[dict[str, Any] | None] = [None] * len(subs)
    while True:
        waiting = [i for i, out in enumerate(found) if out is None]
        statuses = await read(asyncio.gather(*(lb.status(subs[i].id) for i in waiting)))
        for i, status in zip(waiting, statuses, strict=True):
            if status.status != "pending":
                found[i] = await _outcome(lb, subs[i], status)
        if all(out is not None for out in found) or loop.time() + pause > deadline:
            return found
        await asyncio.sleep(pause)  # the scorer applies in batches: a few reads per slip at most
        pause = min(2 * pause, _POLL_S[1])


async def _outcome(lb: Leaderboard, sub: Submission, found: SubmissionStatus) -> dict[str, Any]:
    """A decided submission's answer: its status, code and, applied, what it did per board."""
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


async def read(call: Awaitable[T]) -> T:
    """A call's result, or the problem of its refusal (problems.refusals)."""
    with refusals():
        return await call
