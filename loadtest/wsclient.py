"""The load-test sockets' WebSocket client, Sans-I/O (the websockets model: no sockets here).

A ``ClientReader`` makes the handshake request (``request()``), then turns the bytes a socket
read into events (``feed(data, arrived)``): ``Opened`` or ``Refused`` for the handshake response,
then ``Message`` (text or binary, fragments joined), ``Ping`` (answer with its ``reply``) and
``Closed`` (send its ``reply``, then close the socket). A response or a frame split across reads
waits in the reader for the rest; one read of several frames gives several events, all with the
read's arrival time. The I/O around it (non-blocking sockets, the kernel's receive timestamps)
is ``loadtest.stamps``; ``loadtest.wsworker`` and ``bench.gateway`` drive thousands of readers each.

Why not websockets' own ``ClientProtocol``: these processes share the cores with the gateways
they measure, and hold thousands of sockets that only count what arrives, so frames are split
in place and their payloads not copied. Server frames are never masked (a masked one is a protocol error); the client's
only frames are pongs, closes and a few small requests, masked with a zero key (RFC 6455 allows
any key).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import zlib
from dataclasses import dataclass

OP_CONT, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA
PROTOCOL_ERROR, MESSAGE_TOO_BIG = 1002, 1009
ACCEPT_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # RFC 6455, section 1.3
MAX_HEAD = 16 * 1024  # a handshake response longer than this is not one
MAX_SIZE = 1 << 20  # default bound of a message, as websockets' (1 MiB)

CONNECTING, OPEN, CLOSED = 0, 1, 2


# Events are plain slotted dataclasses, not frozen ones: a reader makes one per frame, and a
# frozen dataclass takes four times as long to build.
@dataclass(slots=True)
class Opened:
    """The server accepted the handshake (its 101 arrived at ``arrived``)."""

    arrived: float


@dataclass(slots=True)
class Refused:
    """The server did not accept the handshake: its HTTP ``status`` (0 when the response was
    not HTTP) and ``Retry-After`` in seconds, if it sent one (an overloaded gateway's 503)."""

    status: int
    retry_after: float | None
    reason: str


@dataclass(slots=True)
class Message:
    """A whole message, ``buf[start:end]``; ``arrived``: when the read that completed it arrived.

    The payload stays in the bytes of the read it came with, not copied out: a copy of a 1 KB
    snapshot costs more than splitting the frames (its memory is not the small-object
    allocator's), and most messages are only told apart by their first bytes (``startswith``).
    ``payload`` makes the copy for those that are read."""

    buf: bytes
    start: int
    end: int
    arrived: float
    text: bool = True

    @property
    def payload(self) -> bytes:
        buf = self.buf
        return buf if self.start == 0 and self.end == len(buf) else buf[self.start : self.end]

    def startswith(self, prefix: bytes) -> bool:
        return self.buf.startswith(prefix, self.start, self.end)


@dataclass(slots=True)
class Ping:
    payload: bytes

    @property
    def reply(self) -> bytes:
        """The pong to send back."""
        return client_frame(OP_PONG, self.payload)


@dataclass(slots=True)
class Closed:
    """The connection is over: the server sent a close frame (``code``: its close code, None
    when it sent none), or the stream broke the protocol (``error`` says how; ``code`` None).
    ``reply`` is the close frame to send back before closing the socket."""

    code: int | None
    reply: bytes
    error: str = ""


Event = Opened | Refused | Message | Ping | Closed


DEFLATE_OFFER = "permessage-deflate; client_max_window_bits"  # what browsers offer


def handshake(host: str, path: str, key: str | None = None, *, deflate: bool = False) -> bytes:
    """An HTTP upgrade request for ``path`` (path and query) on ``host``; ``deflate``: offering
    permessage-deflate."""
    key = key or base64.b64encode(os.urandom(16)).decode()
    offer = f"Sec-WebSocket-Extensions: {DEFLATE_OFFER}\r\n" if deflate else ""
    return (
        f"GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n{offer}\r\n"
    ).encode()


def accept_value(key: str) -> bytes:
    """The ``Sec-WebSocket-Accept`` a server answers ``key`` with."""
    return base64.b64encode(hashlib.sha1(key.encode() + ACCEPT_GUID).digest())


def parse_response(head: bytes) -> tuple[int, bytes, dict[bytes, bytes]]:
    """(status, reason, headers by lower-case name) of a response head (without its blank
    line); status 0 when it is not an HTTP response."""
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ", 2)
    try:
        if not parts[0].startswith(b"HTTP/"):
            raise ValueError
        status = int(parts[1])
    except (IndexError, ValueError):
        return 0, b"", {}
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        headers[name.strip().lower()] = value.strip()
    return status, parts[2] if len(parts) > 2 else b"", headers


def retry_after(headers: dict[bytes, bytes]) -> float | None:
    """A refusal's ``Retry-After`` in seconds, if it has one (the delay form, not a date)."""
    with contextlib.suppress(KeyError, ValueError):
        return float(headers[b"retry-after"])
    return None


def client_frame(opcode: int, payload: bytes = b"") -> bytes:
    """A whole client frame, masked with a zero key (so the payload goes as it is)."""
    n = len(payload)
    if n < 126:
        head = bytes([0x80 | opcode, 0x80 | n])
    elif n < 1 << 16:
        head = bytes([0x80 | opcode, 0x80 | 126]) + n.to_bytes(2, "big")
    else:
        head = bytes([0x80 | opcode, 0x80 | 127]) + n.to_bytes(8, "big")
    return head + b"\0\0\0\0" + payload


def close_code(payload: bytes) -> int | None:
    return int.from_bytes(payload[:2], "big") if len(payload) >= 2 else None


class ClientReader:
    """One connection's client side, from the handshake request to the close (no I/O)."""

    __slots__ = ("_buf", "_fragments", "_key", "_text", "deflate", "host", "max_size", "path", "state")

    def __init__(
        self, host: str, path: str, *, max_size: int | None = MAX_SIZE, key: str | None = None, deflate: bool = False
    ) -> None:
        # offer permessage-deflate; once the server took it, compressed messages (each on its own:
        # the server's frames are compressed without context takeover, gateway/frames.py) are
        # inflated here
        self.deflate = deflate
        self.host = host
        self.path = path  # the request target: path and query (``/ws?game=arena``)
        self.max_size = max_size  # of a message; None: unbounded
        self.state = CONNECTING
        self._key = key or base64.b64encode(os.urandom(16)).decode()  # Sec-WebSocket-Key
        self._buf = b""  # the incomplete response head or frame at the end of the last read
        self._fragments: list[bytes] | None = None  # a fragmented message's parts so far
        self._text = True

    def request(self) -> bytes:
        """The handshake request to write once the TCP connection is up."""
        return handshake(self.host, self.path, self._key, deflate=self.deflate)

    def feed(self, data: bytes, arrived: float) -> list[Event]:
        """The events of ``data``, read from the socket; ``arrived``: when it arrived (the
        kernel's receive timestamp, or the time it was read)."""
        if self.state == CLOSED:
            return []
        buf = self._buf + data if self._buf else data
        events: list[Event] = []
        pos = 0
        if self.state == CONNECTING:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > MAX_HEAD:
                    return self._refuse(0, None, "no end to the response head")
                self._buf = buf
                return events
            status, reason, headers = parse_response(buf[:end])
            if status != 101:
                why = f"HTTP {status} {reason.decode(errors='replace')}".strip() if status else "not HTTP"
                return self._refuse(status, retry_after(headers), why)
            if headers.get(b"sec-websocket-accept") != accept_value(self._key):
                return self._refuse(status, None, "wrong Sec-WebSocket-Accept")
            self.deflate = self.deflate and b"permessage-deflate" in headers.get(b"sec-websocket-extensions", b"")
            self.state = OPEN
            events.append(Opened(arrived))
            pos = end + 4
        max_size, size = self.max_size, len(buf)
        # Several frames arrive in one read (a gateway writes a tick's at once): they are walked
        # in place, the common case (a whole text message) first. A frame's length is checked
        # from its header, before its payload is waited for.
        while size - pos >= 2:
            first, n, head = buf[pos], buf[pos + 1], pos + 2
            if n >= 126:
                if n & 0x80:
                    return self._fail(events, "a masked frame")
                if n == 126:
                    if size - pos < 4:
                        break
                    n, head = int.from_bytes(buf[pos + 2 : pos + 4], "big"), pos + 4
                else:
                    if size - pos < 10:
                        break
                    n, head = int.from_bytes(buf[pos + 2 : pos + 10], "big"), pos + 10
            if first & 0x70 and not (first == 0xC1 and self.deflate):  # a whole compressed text message
                return self._fail(events, "reserved bits set")
            if max_size is not None and n > max_size:
                return self._fail(events, f"a frame over {max_size} bytes", MESSAGE_TOO_BIG)
            end = head + n
            if end > size:
                break  # the rest of it comes with a later read
            pos = end
            if first == 0x81 and self._fragments is None:  # FIN, text
                events.append(Message(buf, head, end, arrived))
                continue
            if first == 0xC1:
                if self._fragments is not None:
                    return self._fail(events, "a new message inside a fragmented one")
                data = zlib.decompressobj(-15).decompress(buf[head:end] + b"\x00\x00\xff\xff")
                events.append(Message(data, 0, len(data), arrived))
                continue
            opcode = first & 0x0F
            if first == 0x82 and self._fragments is None:  # FIN, binary
                events.append(Message(buf, head, end, arrived, False))
            elif opcode >= OP_CLOSE:
                if not first & 0x80 or end - head > 125:
                    return self._fail(events, "a fragmented or long control frame")
                if opcode == OP_PING:
                    events.append(Ping(buf[head:end]))
                elif opcode == OP_CLOSE:
                    payload = buf[head:end]
                    self.state, self._buf = CLOSED, b""
                    events.append(Closed(close_code(payload), client_frame(OP_CLOSE, payload[:2])))
                    return events
                elif opcode != OP_PONG:
                    return self._fail(events, f"opcode {opcode}")
            elif opcode == OP_CONT:
                if self._fragments is None:
                    return self._fail(events, "a continuation with no message begun")
                self._fragments.append(buf[head:end])
                if max_size is not None and sum(map(len, self._fragments)) > max_size:
                    return self._fail(events, f"a message over {max_size} bytes", MESSAGE_TOO_BIG)
                if first & 0x80:
                    joined = b"".join(self._fragments)
                    events.append(Message(joined, 0, len(joined), arrived, self._text))
                    self._fragments = None
            elif opcode in (OP_TEXT, OP_BINARY):
                if self._fragments is not None:
                    return self._fail(events, "a new message inside a fragmented one")
                self._fragments, self._text = [buf[head:end]], opcode == OP_TEXT
            else:
                return self._fail(events, f"opcode {opcode}")
        self._buf = buf[pos:] if pos < len(buf) else b""
        return events

    def _refuse(self, status: int, retry_after: float | None, reason: str) -> list[Event]:
        self.state, self._buf = CLOSED, b""
        return [Refused(status, retry_after, reason)]

    def _fail(self, events: list[Event], error: str, code: int = PROTOCOL_ERROR) -> list[Event]:
        self.state, self._buf, self._fragments = CLOSED, b"", None
        events.append(Closed(None, client_frame(OP_CLOSE, code.to_bytes(2, "big")), error))
        return events
