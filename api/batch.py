"""``POST /v1/boards/{board}/scores:batch``: up to LB_API_BATCH_MAX score slips in one request (a
match server reporting its players at the end of a match), queued by one ``lb_enqueue``.

Each slip is what ``POST .../scores`` takes as its body, checked by the same rules, and is its
own submission: idempotent by its own ``match_id`` (required in every slip: there is one
Idempotency-Key header per request), with the single route's fingerprint, so a slip sent again,
alone or in another batch, is a retry of its first filing and a slip whose id was filed with
another body is an ``idempotency_conflict``.

All or nothing on validation: every slip is checked first and, if any breaks a rule, the whole
batch is refused with ``invalid_slips`` and each bad slip's own code in the problem's
``errors`` (``{"index", "code", "detail"}``), and nothing is queued; a client fixes or drops
those slips and sends the batch again. lb_enqueue's own refusals (``backlog_full``,
``idempotency_conflict``) also refuse the whole batch, as it appends all or none.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from leaderboard import Submission, bodies
from leaderboard.results import Refiled

from .handlers import JSON, Api, fingerprint, json_object, outcomes, path_param, submission_of, writing
from .problems import Problem, refusals
from .schemas import FIELD_CODES, SCHEMAS

# The batch's envelope by the document's own schema, each slip taken as it is there: the slips
# are checked one by one against Score (``_parsed``), so that every bad one is named.
_ENVELOPE = {**SCHEMAS, "Score": {}}


async def submit_batch(api: Api, request: Request) -> Response:
    game, wait = writing(api, request)
    slips = await _slips(api, request)
    board = path_param(request, "board")
    subs, errors = _parsed(board, slips)
    if not errors:
        with refusals("Redis is unreachable; retry the batch"):
            refused = await game.queue.refusals(subs)
        errors = [_error(i, exc.code, exc.message) for i, exc in sorted(refused.items())]
    if errors:
        raise Problem("invalid_slips", f"{len(errors)} of {len(slips)} slips refused; none queued", errors=errors)
    if wait is not None:  # lb_submit keeps what it decided per board for the status reads below
        subs = [replace(sub, outcome=True) for sub in subs]
    with refusals("Redis is unreachable; retry the batch"):
        filed = await game.queue.submit_many(subs, bodies=[fingerprint(board, slip) for slip in slips])
    queued = [
        {"submission": sub.id, "stream_id": f.stream_id if isinstance(f, Refiled) else f, "status": "pending"}
        for sub, f in zip(subs, filed, strict=True)
    ]
    if wait is None:
        return Response(orjson.dumps({"slips": queued}), 202, media_type=JSON)
    decided = await outcomes(game.lb, subs, api.settings.wait_max)
    answers = [q if o is None else {"stream_id": q["stream_id"], **o} for q, o in zip(queued, decided, strict=True)]
    status = 202 if any(out is None for out in decided) else 200  # some still pending: as without ?wait
    return Response(orjson.dumps({"slips": answers}), status, media_type=JSON)


async def _slips(api: Api, request: Request) -> list[Any]:
    """The body's slips, the envelope checked against ``ScoreBatch`` (the slips themselves are
    checked one by one, each against ``Score``, by ``_parsed``)."""
    cap = api.settings.max_body * api.settings.batch_max
    value = await json_object(request, cap)
    slips = value.get("slips")
    if isinstance(slips, list) and len(slips) > api.settings.batch_max:
        raise Problem("too_many_slips", f"a batch holds at most {api.settings.batch_max} slips")
    violation = bodies.check(_ENVELOPE, "ScoreBatch", value, {})
    if violation is not None:
        raise Problem(violation.code, violation.message)
    assert isinstance(slips, list)
    return slips


def _parsed(board: str, slips: list[Any]) -> tuple[list[Submission], list[dict[str, Any]]]:
    """Each slip as its submission, or its error; all of them, not only the first."""
    subs, errors = [], []
    for i, slip in enumerate(slips):
        if not isinstance(slip, dict):
            errors.append(_error(i, "bad_message", "a slip is a JSON object"))
            continue
        violation = bodies.check(SCHEMAS, "Score", slip, FIELD_CODES["Score"])
        if violation is not None:
            errors.append(_error(i, violation.code, violation.message))
        elif "match_id" not in slip:
            errors.append(_error(i, "missing_id", "every slip of a batch needs its match_id, applied once"))
        else:
            try:
                subs.append(submission_of(board, slip, None))
            except Problem as exc:
                errors.append(_error(i, exc.code, exc.message))
    return subs, errors


def _error(index: int, code: str, detail: str) -> dict[str, Any]:
    return {"index": index, "code": code, "detail": detail}
