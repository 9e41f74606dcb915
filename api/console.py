"""The operators' routes and the admin console (``GET /console``), every one for a server-role
token only: a player looked up, the audit log, the dead letters (listed, requeued, dropped), the
fleet. The console's actions on players are the API's own moderation routes (ban, unban,
corrections), so the console, the HTTP API, the socket and ``python -m scorer`` make the same
library calls (leaderboard/audit.py's ``AuditedModeration``, leaderboard/deadletters.py) and
every one lands in the audit log.

The page itself is never served without a server token: ``GET /console`` without one answers
a sign-in form (401) that holds nothing of the game; the form sends the token as a bearer header
to the same URL and shows the console it gets back. The token stays in the tab's session storage
(the console's own requests carry it), never in a cookie: a cookie would let another site's page
make this one's requests.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from leaderboard import audit, fleetview
from leaderboard.deadletters import DeadLetters
from leaderboard.lookup import lookup

from .handlers import JSON, Api, Handler, allowed, json_body, path_param, read
from .problems import Problem

_PAGES = resources.files("api") / "static"
_N = (1, 200)


def _json(value: Any) -> Response:
    return Response(orjson.dumps(value), media_type=JSON)


def _count(request: Request, default: int = 50) -> int:
    raw = request.query_params.get("n")
    if raw is None:
        return default
    if not (raw.isascii() and raw.isdigit() and _N[0] <= int(raw) <= _N[1]):
        raise Problem("bad_message", f"n must be an integer in {_N[0]}..{_N[1]}")
    return int(raw)


def _before(request: Request) -> str | None:
    raw = request.query_params.get("before")
    if raw is not None and not _is_stream_id(raw):
        raise Problem("bad_message", "before must be an entry id (<ms>-<seq>)")
    return raw


def _is_stream_id(text: str) -> bool:
    ms, dash, seq = text.partition("-")
    return ms.isascii() and ms.isdigit() and len(ms) <= 20 and (not dash or (seq.isascii() and seq.isdigit()))


async def player_lookup(api: Api, request: Request) -> Response:
    game = api.game(request)
    allowed(api.identity(request), "server")
    return _json(await read(lookup(game.shared.mods, path_param(request, "player"))))


async def audit_log(api: Api, request: Request) -> Response:
    game = api.game(request)
    allowed(api.identity(request), "server")
    player = request.query_params.get("player") or None
    found = await read(
        audit.read(game.lb.redis, game.lb.keys, count=_count(request), before=_before(request), player=player)
    )
    return _json({"entries": [e.as_dict() for e in found]})


async def dead_letters(api: Api, request: Request) -> Response:
    game = api.game(request)
    allowed(api.identity(request), "server")
    letters = DeadLetters(game.lb, game.queue)
    found = await read(letters.list(count=_count(request), before=_before(request)))
    return _json({"count": await read(letters.count()), "letters": [x.as_dict() for x in found]})


def _letter_action(action: str) -> Handler:
    async def handler(api: Api, request: Request) -> Response:
        game = api.game(request)
        identity = allowed(api.identity(request), "server")
        reason = (await json_body(api, request, "Reason")).get("reason", "")
        letters, letter = DeadLetters(game.lb, game.queue), path_param(request, "letter")
        actor = identity.player or ""
        if action == "requeue":
            queued = await read(letters.requeue(letter, actor=actor, reason=reason))
            return _json({"letter": letter, "action": "requeue", "queued": queued})
        await read(letters.drop(letter, actor=actor, reason=reason))
        return _json({"letter": letter, "action": "drop"})

    return handler


requeue_letter = _letter_action("requeue")
drop_letter = _letter_action("drop")


async def fleet(api: Api, request: Request) -> Response:
    game = api.game(request)
    allowed(api.identity(request), "server")
    return _json(await read(fleetview.read(game.lb.redis, game.lb.keys)))


async def console(api: Api, request: Request) -> Response:
    """The console for a server token; the sign-in form (401) without a token; a token of
    another role, or a bad one, its problem (403, 401) as every route answers it."""
    if request.headers.get("authorization") is None:
        page = (_PAGES / "signin.html").read_bytes()
        return Response(page, 401, media_type="text/html", headers=_PAGE_HEADERS)
    allowed(api.identity(request), "server")
    return Response((_PAGES / "console.html").read_bytes(), media_type="text/html", headers=_PAGE_HEADERS)


# The pages load nothing from elsewhere and are framed by no one (clickjacking); not stored by
# shared caches (the console comes with a token).
_PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' "
    "'unsafe-inline'; img-src 'self' https: data:; frame-ancestors 'none'",
    "Cache-Control": "no-store",
    "X-Frame-Options": "DENY",
}
