"""The little of the WebSocket wire the load-test clients need (pure: no I/O).

Load-test sockets are raw asyncio protocols, not websockets connections: a process holds
thousands of them and must spend its CPU counting frames, not framing. Server frames are never
masked, so splitting them is a few slices; the only client frames are pongs and closes, masked
with a zero key (RFC 6455 allows any key).
"""

from __future__ import annotations

import base64
import contextlib
import os

import orjson

OP_TEXT, OP_CLOSE, OP_PING = 0x1, 0x8, 0x9
ENTRIES = b',"entries":'


def handshake(host: str, path: str) -> bytes:
    key = base64.b64encode(os.urandom(16)).decode()
    return (
        f"GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
    ).encode()


def response_status(head: bytes) -> tuple[int, float | None]:
    """The HTTP status of a handshake response and its ``Retry-After`` (seconds), if any."""
    lines = head.split(b"\r\n")
    try:
        status = int(lines[0].split()[1])
    except (IndexError, ValueError):
        return 0, None
    retry_after = None
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"retry-after":
            with contextlib.suppress(ValueError):
                retry_after = float(value.strip())
    return status, retry_after


def next_frame(buf: bytes) -> tuple[int, int, int] | None:
    """(opcode, payload start, frame end) of the complete frame at the front of ``buf``, or
    None while it is incomplete. Server frames are never masked."""
    return frame_at(buf, 0)


def frame_at(buf: bytes, pos: int) -> tuple[int, int, int] | None:
    """``next_frame`` for the frame starting at ``pos``: a reader walks a buffer of several
    frames (a tick's, written at once) without copying what follows each one."""
    size = len(buf)
    if size - pos < 2:
        return None
    opcode, n, head = buf[pos] & 0x0F, buf[pos + 1] & 0x7F, pos + 2
    if n == 126:
        if size - pos < 4:
            return None
        n, head = int.from_bytes(buf[pos + 2 : pos + 4], "big"), pos + 4
    elif n == 127:
        if size - pos < 10:
            return None
        n, head = int.from_bytes(buf[pos + 2 : pos + 10], "big"), pos + 10
    return (opcode, head, head + n) if size >= head + n else None


def split_frames(buf: bytes) -> tuple[list[tuple[int, bytes]], bytes]:
    """Complete (opcode, payload) frames at the front of ``buf``, and the incomplete rest."""
    frames = []
    while (frame := next_frame(buf)) is not None:
        opcode, head, end = frame
        frames.append((opcode, buf[head:end]))
        buf = buf[end:]
    return frames, buf


def client_frame(opcode: int, payload: bytes = b"") -> bytes:
    """A masked (zero key) client frame; control frames only, so the payload is < 126 bytes."""
    return bytes([0x80 | opcode, 0x80 | len(payload)]) + b"\0\0\0\0" + payload


def close_code(payload: bytes) -> int | None:
    return int.from_bytes(payload[:2], "big") if len(payload) >= 2 else None


def message_type(payload: bytes) -> bytes:
    """The ``type`` of a server message. Gateways and the scorer write it first (orjson keeps
    insertion order), so a prefix check is enough; anything else is parsed."""
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
    """``("board|window|period|version", ts_ms)`` of a snapshot message, or None.

    Only the head before the entries is parsed: the fields that identify the snapshot come
    first in the scorer's encoding, so a socket does not decode 1 KB per delivery."""
    cut = payload.find(ENTRIES)
    try:
        msg = orjson.loads(payload[:cut] + b"}" if cut > 0 else payload)
        key = f"{msg['board']}|{msg['window']}|{msg.get('period', '')}|{msg['version']}"
        return key, int(msg["ts"])
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return None


def welcome_gateway(payload: bytes) -> str:
    try:
        return str(orjson.loads(payload).get("gateway") or "")
    except (orjson.JSONDecodeError, AttributeError):
        return ""
