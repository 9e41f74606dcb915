"""Errors as ``application/problem+json`` (RFC 9457): every refusal carries the socket's stable
``code`` (docs/protocol.md) and the HTTP status that code means (pure: no I/O).

The one place errors become problems: a handler raises ``Problem`` for a rule of HTTP's own, and
runs everything else inside ``refusals()``, which turns the fleet's errors (the exception tree of
leaderboard/errors.py, the socket's ``ProtocolError`` and ``AuthError`` among them) into the
problem of their code, and Redis out of reach into ``unavailable``::

    with refusals():
        body = await replies.answer(game, identity, req)
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from http import HTTPStatus
from typing import Any

import orjson
from redis.exceptions import RedisError
from starlette.responses import Response

from leaderboard.errors import BOARD_CODES, CODES, INPUT_CODES, LeaderboardError

MEDIA_TYPE = "application/problem+json"

# A code's status; every other code (a submission's or an input's rule, bad_json…) is 400.
STATUS = {
    "auth_required": 401,
    "invalid_token": 401,
    "token_expired": 401,
    "forbidden": 403,
    "bad_board": 404,
    "unknown_game": 404,
    "unknown_tournament": 404,
    "not_found": 404,
    "tournament_exists": 409,
    "unknown_board": 404,
    "unknown_dead_letter": 404,
    "board_exists": 409,
    "board_reorder": 409,
    "stale_board": 409,
    "too_many_boards": 409,
    # an Idempotency-Key (match_id) reused with another body: the IETF idempotency-key draft's 422
    "idempotency_conflict": 422,
    # a batch with a bad slip: the slips' own codes in the problem's errors, nothing queued
    "invalid_slips": 400,
    "too_many_slips": 413,
    "method_not_allowed": 405,
    "request_timeout": 408,
    "body_too_large": 413,
    "unsupported_media_type": 415,
    "rate_limited": 429,
    "internal": 500,
    "backlog_full": 503,
    "not_replicated": 503,
    "unavailable": 503,
}
# The codes an answer may carry (the OpenAPI document lists them).
ALL_CODES = sorted(
    {
        *STATUS,
        *CODES,
        *INPUT_CODES,
        *BOARD_CODES,
        *("bad_json", "bad_message", "bad_period", "tournament_ended", "banned"),
        # a request body against its schema in the OpenAPI document (bodies.py)
        *("unknown_field", "missing_field"),
    }
)


class Problem(Exception):
    """A refused request: ``code`` (stable), a message for people, the status the code means;
    ``errors``: a batch's refused slips, each ``{"index", "code", "detail"}``."""

    def __init__(
        self, code: str, message: str, *, retry_after: int | None = None, errors: list[dict[str, Any]] | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = STATUS.get(code, 400)
        self.retry_after = retry_after
        self.errors = errors


def code_of(exc: LeaderboardError) -> str:
    """The code a client is told: the socket's (a read Redis refused for its arguments is the
    asker's ``bad_message``, as leaderboard/replies.py says it)."""
    return "bad_message" if exc.code == "bad_request" else exc.code


@contextmanager
def refusals(unavailable: str = "Redis is unreachable; retry later") -> Iterator[None]:
    """Raise the problem of an error the block raises: a ``LeaderboardError``'s own code, and
    ``unavailable`` (saying ``unavailable``) for Redis out of reach; a ``Problem`` as it is."""
    try:
        yield
    except LeaderboardError as exc:  # before RedisError: Unavailable is both, and says its own code
        raise Problem(code_of(exc), exc.message) from None
    except (RedisError, OSError):
        raise Problem("unavailable", unavailable) from None


def response(
    code: str,
    message: str,
    *,
    retry_after: int | None = None,
    headers: Mapping[str, str] | None = None,
    errors: list[dict[str, Any]] | None = None,
) -> Response:
    """The problem's answer; ``Retry-After`` (seconds) on a 429, and 1 s on a 503; a 408 closes
    the connection (the rest of the body it gave up on may still come); ``headers`` besides (a
    405's ``Allow``); ``errors``, a batch's refused slips, as its ``errors`` member."""
    status = STATUS.get(code, 400)
    body: dict[str, Any] = {
        "type": f"https://leaderboard.invalid/problems/{code}",  # the code, as the URI RFC 9457 asks for
        "title": HTTPStatus(status).phrase,
        "status": status,
        "detail": message,
        "code": code,
    }
    if errors is not None:
        body["errors"] = errors
    headers = dict(headers or {})
    if status in (429, 503):
        headers["Retry-After"] = str(retry_after or 1)
    if code in ("auth_required", "invalid_token", "token_expired"):
        headers["WWW-Authenticate"] = "Bearer"
    if status == 408:
        headers["Connection"] = "close"
    return Response(orjson.dumps(body), status, headers, MEDIA_TYPE)
