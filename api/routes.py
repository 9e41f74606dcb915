"""The HTTP API's routes: one table (``ROUTES``) from which both the server's routing and the
OpenAPI document (``openapi()``, served at /v1/openapi.json, kept in docs/openapi.json) are made.

The table names each route's handler (handlers.py; the top: top.py), its parameters and bodies
(schemas.py) and its answers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from . import console
from .batch import submit_batch
from .handlers import (
    JSON,
    Api,
    Handler,
    Message,
    action,
    answering,
    board_read,
    create_tournament,
    definition_message,
    profile_message,
    put_definition,
    status_message,
    submit,
)
from .problems import MEDIA_TYPE
from .schemas import (
    BOARD,
    DEFINITION,
    GAME,
    LETTER,
    N_FINALS,
    N_PAGE,
    N_TOP,
    PLAYER,
    READS,
    SCHEMAS,
    SUBMISSION,
    TOURNAMENT,
    K,
    param,
)
from .top import top


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


async def openapi_json(api: Api, request: Request) -> Response:
    return Response(orjson.dumps(openapi(), option=orjson.OPT_INDENT_2), media_type=JSON)


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
            param("wait", "query", {"enum": ["applied"]}, "wait (bounded) for the scorer's outcome"),
            param("Idempotency-Key", "header", {"type": "string"}, "the submission id, when the body has no match_id"),
        ],
        body="Score",
        auth="server",
    ),
    Route(
        "POST",
        "/v1/boards/{board}/scores:batch",
        "submit_batch",
        submit_batch,
        "Submit up to LB_API_BATCH_MAX scores in one request (server token), each idempotent by its match_id; "
        "one bad slip refuses the batch and queues nothing (invalid_slips, each bad slip's code in errors)",
        {202: "BatchAnswer", 200: "BatchAnswer"},
        [BOARD, GAME, param("wait", "query", {"enum": ["applied"]}, "wait (bounded) for every slip's outcome")],
        body="ScoreBatch",
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
            param("If-None-Match", "header", {"type": "string"}, "an ETag of this route: 304 while still current"),
        ],
    ),
    _read_route(
        "GET", "/v1/boards/{board}/players/{player}", "player", board_read("rank", player=True),
        "A player's rank and score (a player or server token)", "Rank", [BOARD, PLAYER, *READS[1:]], auth="player",
    ),
    _read_route(
        "GET", "/v1/boards/{board}/players/{player}/around", "around", board_read("around", "k", player=True),
        "The k entries on each side of a player (a player or server token)", "Around",
        [BOARD, PLAYER, *READS[1:], K], auth="player",
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
    Route(
        "GET", "/v1/players/{player}", "lookup_player", console.player_lookup,
        "A player as operators see them: every board they are on (rank, score), profile, badges, ban (server token)",
        {200: "PlayerLookup"}, [PLAYER, GAME], auth="server",
    ),
    Route(
        "GET", "/v1/audit", "audit_log", console.audit_log,
        "The moderators' audit log, newest first: who, what, when, the reason, before and after (server token)",
        {200: "AuditLog"},
        [
            GAME,
            param("player", "query", {"type": "string"}, "only this player's entries"),
            param("before", "query", {"type": "string"}, "entries older than this id"),
            N_PAGE,
        ],
        auth="server",
    ),
    Route(
        "GET", "/v1/deadletters", "dead_letters", console.dead_letters,
        "The slips the scorer refused, newest first, with their codes (server token)", {200: "DeadLetters"},
        [GAME, param("before", "query", {"type": "string"}, "letters older than this id"), N_PAGE], auth="server",
    ),
    Route(
        "POST", "/v1/deadletters/{letter}/requeue", "requeue_dead_letter", console.requeue_letter,
        "File a dead letter's slip again (same id; still refused: its code, the letter kept), audited (server token)",
        {200: "LetterAction"}, [LETTER, GAME], body="Reason", auth="server",
    ),
    Route(
        "POST", "/v1/deadletters/{letter}/drop", "drop_dead_letter", console.drop_letter,
        "Delete a dead letter, its slip given up; audited (server token)", {200: "LetterAction"}, [LETTER, GAME],
        body="Reason", auth="server",
    ),
    Route(
        "GET", "/v1/fleet", "fleet", console.fleet,
        "Gateways and their connections, scorer replicas, the publisher lease's holder, backlog (server token)",
        {200: "Fleet"}, [GAME], auth="server",
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
