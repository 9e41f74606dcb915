"""The few fields of the product's server messages a load-test socket reads (pure).

Gateways and the scorer write a message's ``type`` first and a snapshot's identifying fields
before its entries (orjson keeps insertion order), so a socket tells messages apart by a prefix
and parses a snapshot's head only, not its 1 KB of entries per delivery.
"""

from __future__ import annotations

import orjson

ENTRIES = b',"entries":'


def message_type(payload: bytes) -> bytes:
    """The ``type`` of a server message: a prefix check, else the message is parsed."""
    if payload.startswith(b'{"type":"'):
        end = payload.find(b'"', 9)
        if end > 0:
            return payload[9:end]
    try:
        value = orjson.loads(payload).get("type", "")
    except (orjson.JSONDecodeError, AttributeError):
        return b""
    return str(value).encode()


def snapshot_identity(payload: bytes) -> tuple[str, int] | None:
    """``("board|window|period|version", ts_ms)`` of a snapshot message, or None; only the head
    before the entries is parsed."""
    cut = payload.find(ENTRIES)
    try:
        msg = orjson.loads(payload[:cut] + b"}" if cut > 0 else payload)
        key = f"{msg['board']}|{msg['window']}|{msg.get('period', '')}|{msg['version']}"
        return key, int(msg["ts"])
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return None


def welcome_gateway(payload: bytes) -> str:
    """The gateway id of a ``welcome`` message ("" when it has none)."""
    try:
        return str(orjson.loads(payload).get("gateway") or "")
    except (orjson.JSONDecodeError, AttributeError):
        return ""
