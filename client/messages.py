"""What the client accepts from a server (pure): a frame it can read, and a protocol it speaks.

A message the client cannot read is reported to the application as an ``error`` event with the
code ``malformed_message`` and skipped: one bad frame (a proxy's error page, a server bug) must
not end the connection loop, nor pass silently. Only the fields the client itself reads are
checked; a message type it does not know is not malformed (a newer server may add one, and the
protocol version does not grow for it: leaderboard/wire.py).
"""

from __future__ import annotations

from typing import Any

import orjson

from leaderboard.wire import PROTOCOL

Message = dict[str, Any]

MALFORMED = "malformed_message"
PROTOCOL_VERSION = "protocol_version"

# fields the client reads from each message type, and their JSON types
_TEXT, _INT, _LIST, _OBJECT = (str,), (int,), (list,), (dict,)
_FIELDS: dict[str, dict[str, tuple[type, ...]]] = {
    "welcome": {},
    "snapshot": {"board": _TEXT, "window": _TEXT, "version": _INT, "entries": _LIST},
    "delta": {"board": _TEXT, "window": _TEXT, "base": _INT, "entries": _LIST},
    "error": {"code": _TEXT},
}
# pushes (no id) the client keeps by board: a request's reply of the same type may omit them
_PUSHED: dict[str, dict[str, tuple[type, ...]]] = {"rank": {"board": _TEXT, "window": _TEXT}}
_OPTIONAL: dict[str, dict[str, tuple[type, ...]]] = {"welcome": {"protocol": _INT, "heartbeat": _OBJECT}}


def error_event(code: str, message: str) -> Message:
    """An error the client reports to its listeners, shaped as a server's ``error`` without id."""
    return {"type": "error", "code": code, "message": message}


def parse(frame: str | bytes) -> Message:
    """The message of one frame; raises ``ValueError`` saying why it is not one the client reads."""
    try:
        msg = orjson.loads(frame)
    except orjson.JSONDecodeError:
        raise ValueError("not JSON") from None
    if not isinstance(msg, dict):
        raise ValueError(f"a JSON {type(msg).__name__}, not an object")
    kind = msg.get("type")
    if not isinstance(kind, str):
        raise ValueError("no type")
    fields = {**_FIELDS.get(kind, {}), **(_PUSHED.get(kind, {}) if "id" not in msg else {})}
    for name, types in fields.items():
        if not _typed(msg.get(name), types):
            raise ValueError(f"{kind} without a valid {name!r}")
    for name, types in _OPTIONAL.get(kind, {}).items():
        if name in msg and not _typed(msg[name], types):
            raise ValueError(f"{kind} with an invalid {name!r}")
    return msg


def newer_protocol(welcome: Message) -> str | None:
    """Why the client cannot speak the server's protocol (a greater version than its own), or None."""
    version = welcome.get("protocol", PROTOCOL)
    if version > PROTOCOL:
        return f"the server speaks protocol {version}; this client speaks {PROTOCOL}"
    return None


def _typed(value: Any, types: tuple[type, ...]) -> bool:
    # bool is an int to Python, never to JSON
    return isinstance(value, types) and not isinstance(value, bool)
