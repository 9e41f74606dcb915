"""Property: any frame a client can send becomes a request or a ProtocolError with a stable code,
never another exception; and a submit's fields become a Submission or an InvalidSubmission."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import example, given
from hypothesis import strategies as st

from leaderboard import CODES, InvalidSubmission, Submission
from leaderboard import protocol as p
from leaderboard.errors import INPUT_CODES, InvalidInput
from leaderboard.keys import parse_scope
from leaderboard.profiles import Profile
from leaderboard.submission import entry_fields

from .conftest import NOW
from .properties import bounded

WINDOWS = ["daily", "weekly", "alltime"]
# The codes parse() may raise (docs/protocol.md); the others come from the dispatch.
PARSE_CODES = {"binary_frame", "bad_json", "bad_message", "unknown_type", "bad_board", "bad_period", "invalid_window"}
TYPES = [
    "hello",
    "ping",
    "subscribe",
    "unsubscribe",
    "resync",
    "top",
    "rank",
    "around",
    "ranks",
    "stats",
    "submit",
    "ban",
    "unban",
    "correct",
    "profile",
]

# Any JSON value, with the numbers that break naive code: huge, negative, fractional, bool.
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=80),
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
# Values a field is likely to be checked against, so generated messages reach every branch.
boards = st.sampled_from(["global", "region:eu", "mode:duel", "region:", "region:e u", "nation:fr", "x" * 40, ""])
players = st.one_of(st.text(min_size=1, max_size=70), st.sampled_from(["ana", "é" * 32, "é" * 33, ""]))
near_values: dict[str, st.SearchStrategy[Any]] = {
    "id": st.one_of(st.integers(-(10**70), 10**70), st.text(max_size=70)),
    "board": boards,
    "window": st.sampled_from([*WINDOWS, "monthly", "yearly", ""]),
    "n": st.integers(-5, 105),
    "k": st.integers(-5, 30),
    "player": players,
    "players": st.lists(players, max_size=102),
    "token": st.text(max_size=20),
    "deltas": st.booleans(),
    "reason": st.one_of(st.text(max_size=260), st.sampled_from(["", "bot", "a\u202eb"])),
    "points": st.one_of(st.integers(-5, 2**60), st.sampled_from(["12", "1e3", True])),
    "period": st.sampled_from(["2030-W48", "2030-W99", "2030-11-26", "all", ""]),
    "scopes": st.lists(boards, max_size=11),
    "profile": st.dictionaries(
        st.sampled_from(["name", "avatar", "country", "colour"]),
        st.one_of(json_values, st.sampled_from(["Zoë", "https://cdn.example/a.png", "http://x/a", "SE", "se", ""])),
        max_size=4,
    ),
    "submission": st.dictionaries(
        st.sampled_from(["id", "player", "points", "op", "ts", "name", "region", "mode", "extra"]),
        st.one_of(json_values, st.sampled_from(["1", "best", "incr", "eu", str(NOW), "١٢"])),
        max_size=9,
    ),
}
messages = st.fixed_dictionaries(
    {"type": st.one_of(st.sampled_from(TYPES), json_values)},
    optional={name: st.one_of(values, json_values) for name, values in near_values.items()},
)


def _text_frame(value: Any) -> str:
    # the stdlib writes huge integers and NaN too (orjson refuses them): frames a client could send
    return json.dumps(value)


frames = st.one_of(
    st.binary(max_size=200),  # binary frames
    st.text(max_size=200),  # text that is rarely JSON
    json_values.map(_text_frame),  # JSON that is rarely an object
    messages.map(_text_frame),  # objects that look like messages
)


@bounded(400)
@given(frames)
@example('{"type":"correct","scopes":[null]}')  # once an AttributeError, found by a longer search
@example('{"type":"correct","scopes":[3]}')
def test_any_frame_is_a_request_or_a_stable_error(frame: str | bytes) -> None:
    try:
        req = p.parse(frame, windows=WINDOWS, default_window="weekly")
    except p.ProtocolError as exc:
        assert exc.code in PARSE_CODES, exc.code
        assert isinstance(exc.message, str) and exc.message
        _check_echoed_id(frame, exc.request_id)
        return
    assert isinstance(req, p.Request)
    _check_request(req)


def _check_echoed_id(frame: str | bytes, request_id: Any) -> None:
    """An error echoes the request's id when the frame had a valid one, and nothing else."""
    if request_id is None:
        return
    assert isinstance(frame, str)
    msg = json.loads(frame)
    assert msg["id"] == request_id and not isinstance(request_id, bool | float)


def _check_request(req: p.Request) -> None:
    if isinstance(req, p.BoardRequest):
        assert parse_scope(req.board) == req.board
        assert req.window in WINDOWS
    if isinstance(req, p.Top):
        assert 1 <= req.n <= p.MAX_TOP
    if isinstance(req, p.Around):
        assert 0 <= req.k <= p.MAX_AROUND
    if isinstance(req, p.Ranks):
        assert 1 <= len(req.players) <= p.MAX_FRIENDS
        assert all(0 < len(player.encode()) <= 64 for player in req.players)
    if isinstance(req, p.Rank | p.Around) and req.player is not None:
        assert 0 < len(req.player.encode()) <= 64
    if isinstance(req, p.Submit):
        _check_submission(req.fields)
    if isinstance(req, p.SetProfile):
        try:  # what the gateway does with it: a Profile, or an error with a stable input code
            Profile.parse(dict(req.fields))
        except InvalidInput as exc:
            assert exc.code in INPUT_CODES, exc.code
    if isinstance(req, p.Ban | p.Unban | p.Correct):
        assert 0 < len(req.player.encode()) <= 64 and isinstance(req.reason, str)


def _check_submission(fields: Any) -> None:
    """What the gateway does with a submit: Submission.parse, refused only with a submission code;
    an accepted one survives the trip through the stream unchanged."""
    fields = {"ts": NOW, **fields}
    try:
        sub = Submission.parse(fields)
    except InvalidSubmission as exc:
        assert exc.code in CODES, exc.code
        return
    # read back as the scorer reads a stream entry (a slip alone, or a slip and fields by name)
    assert Submission.parse(entry_fields(sub.fields())) == sub


@bounded(300)
@given(st.fixed_dictionaries({"type": st.just("submit"), "submission": near_values["submission"] | json_values}))
@example({"type": "submit", "submission": {"id": "1", "player": "1", "points": "1"}})  # its entry: a slip alone
def test_any_submit_message_is_a_submission_or_a_submission_error(msg: dict[str, Any]) -> None:
    try:
        req = p.parse(_text_frame(msg), windows=WINDOWS, default_window="weekly")
    except p.ProtocolError as exc:
        assert exc.code in PARSE_CODES
        return
    assert isinstance(req, p.Submit)
    _check_submission(req.fields)
