"""The load-test sockets' Sans-I/O WebSocket client (loadtest/wsclient.py): bytes in, events out,
no socket. Server frames are built here by hand (unmasked, as a server writes them)."""

from __future__ import annotations

from typing import Any

from loadtest.wsclient import (
    OP_BINARY,
    OP_CLOSE,
    OP_CONT,
    OP_PING,
    OP_PONG,
    OP_TEXT,
    ClientReader,
    Closed,
    Message,
    Opened,
    Ping,
    Refused,
    accept_value,
    client_frame,
)

KEY = "dGhlIHNhbXBsZSBub25jZQ=="  # RFC 6455's example: it answers s3pPLMBiTxaQ9kYGzzhZRbK+xOo=
OK = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
OK += b"Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n"


def frame(opcode: int, payload: bytes, fin: bool = True) -> bytes:
    n = len(payload)
    if n < 126:
        head = bytes([0x80 * fin | opcode, n])
    elif n < 1 << 16:
        head = bytes([0x80 * fin | opcode, 126]) + n.to_bytes(2, "big")
    else:
        head = bytes([0x80 * fin | opcode, 127]) + n.to_bytes(8, "big")
    return head + payload


def feed(reader: ClientReader, data: bytes, arrived: float) -> list[Any]:
    """The reader's events, a message as (payload, arrived, text): its bytes, not where they lie."""
    return [(e.payload, e.arrived, e.text) if isinstance(e, Message) else e for e in reader.feed(data, arrived)]


def msg(payload: bytes, arrived: float, text: bool = True) -> tuple[bytes, float, bool]:
    return payload, arrived, text


def opened() -> ClientReader:
    reader = ClientReader("127.0.0.1", "/ws?game=arena", key=KEY)
    assert feed(reader, OK, 1.0) == [Opened(1.0)]
    return reader


def test_the_request_is_an_upgrade_with_the_readers_key() -> None:
    request = ClientReader("127.0.0.1", "/ws?game=arena", key=KEY).request()
    assert request.startswith(b"GET /ws?game=arena HTTP/1.1\r\nHost: 127.0.0.1\r\n") and request.endswith(b"\r\n\r\n")
    assert b"\r\nSec-WebSocket-Key: " + KEY.encode() + b"\r\n" in request
    assert b"\r\nUpgrade: websocket\r\n" in request and b"\r\nSec-WebSocket-Version: 13\r\n" in request
    assert accept_value(KEY) == b"s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
    keys = {ClientReader("h", "/").request().split(b"Sec-WebSocket-Key: ")[1][:24] for _ in range(3)}
    assert len(keys) == 3  # a fresh key per connection


def test_a_response_split_across_reads_opens_at_the_read_that_completes_it() -> None:
    reader = ClientReader("127.0.0.1", "/ws", key=KEY)
    welcome = frame(OP_TEXT, b'{"type":"welcome"}')
    data = OK + welcome
    assert feed(reader, data[:20], 1.0) == []
    assert feed(reader, data[20 : len(OK) - 1], 2.0) == []  # all but the blank line's last byte
    # the rest of the head and the first frame in one read
    assert feed(reader, data[len(OK) - 1 :], 3.0) == [Opened(3.0), msg(b'{"type":"welcome"}', 3.0)]


def test_a_refused_handshake_gives_its_status_and_retry_after_and_nothing_more() -> None:
    reader = ClientReader("127.0.0.1", "/ws", key=KEY)
    refusal = b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 2\r\nContent-Length: 0\r\n\r\n"
    assert feed(reader, refusal + frame(OP_TEXT, b"late"), 1.0) == [Refused(503, 2.0, "HTTP 503 Service Unavailable")]
    assert feed(reader, frame(OP_TEXT, b"x"), 2.0) == []
    no_date = feed(ClientReader("h", "/", key=KEY), b"HTTP/1.1 429 Too Many\r\nRetry-After: soon\r\n\r\n", 1.0)
    assert no_date == [Refused(429, None, "HTTP 429 Too Many")]


def test_a_101_with_a_wrong_accept_or_no_http_at_all_is_refused() -> None:
    wrong = OK.replace(b"s3pPLMBiTxaQ9kYGzzhZRbK+xOo=", accept_value("another key"))
    assert feed(ClientReader("h", "/", key=KEY), wrong, 1.0) == [Refused(101, None, "wrong Sec-WebSocket-Accept")]
    assert feed(ClientReader("h", "/", key=KEY), b"SSH-2.0-OpenSSH\r\n\r\n", 1.0) == [Refused(0, None, "not HTTP")]
    endless = feed(ClientReader("h", "/", key=KEY), b"HTTP/1.1 101 \r\n" + b"X: y\r\n" * 4000, 1.0)
    assert endless == [Refused(0, None, "no end to the response head")]


def test_several_frames_in_one_read_are_several_events_with_its_arrival() -> None:
    reader = opened()
    big = b"s" * 70_000  # a 64-bit length
    mid = b"m" * 300  # a 16-bit length
    data = frame(OP_TEXT, b"a") + frame(OP_BINARY, mid) + frame(OP_PING, b"hb") + frame(OP_PONG, b"") + frame(1, big)
    assert feed(reader, data, 5.0) == [
        msg(b"a", 5.0),
        msg(mid, 5.0, text=False),
        Ping(b"hb"),
        msg(big, 5.0),
    ]
    assert Ping(b"hb").reply == client_frame(OP_PING + 1, b"hb") == b"\x8a\x82\0\0\0\0hb"


def test_a_frame_split_across_reads_waits_for_its_end_byte_by_byte() -> None:
    reader = opened()
    data = frame(OP_TEXT, b"x" * 300) + frame(OP_TEXT, b"y")
    events = [event for i in range(len(data)) for event in feed(reader, data[i : i + 1], float(i))]
    # each message arrives with the read that completed it
    assert events == [msg(b"x" * 300, 303.0), msg(b"y", len(data) - 1.0)]


def test_a_fragmented_message_is_joined_with_pings_between_its_fragments() -> None:
    reader = opened()
    parts = frame(OP_TEXT, b"top", fin=False) + frame(OP_PING, b"1") + frame(OP_CONT, b" 10", fin=False)
    assert feed(reader, parts, 1.0) == [Ping(b"1")]
    assert feed(reader, frame(OP_CONT, b"!"), 2.0) == [msg(b"top 10!", 2.0)]
    assert feed(reader, frame(OP_BINARY, b"\0", fin=False) + frame(OP_CONT, b"\1"), 3.0) == [
        msg(b"\0\1", 3.0, text=False)
    ]


def test_a_close_frame_is_the_last_event_and_its_reply_echoes_the_code() -> None:
    reader = opened()
    close = frame(OP_CLOSE, (1012).to_bytes(2, "big") + b"draining; reconnect")
    events = feed(reader, frame(OP_TEXT, b"last") + close + frame(OP_TEXT, b"after"), 7.0)
    assert events == [msg(b"last", 7.0), Closed(1012, client_frame(OP_CLOSE, (1012).to_bytes(2, "big")))]
    assert events[1].reply == b"\x88\x82\0\0\0\0\x03\xf4"
    assert feed(reader, frame(OP_TEXT, b"more"), 8.0) == []
    assert feed(opened(), frame(OP_CLOSE, b""), 1.0) == [Closed(None, client_frame(OP_CLOSE))]


def test_a_stream_breaking_the_protocol_closes_with_1002_or_1009() -> None:
    masked = bytes([0x81, 0x81]) + b"\1\2\3\4" + b"x"
    broken = {
        "a masked frame": masked,
        "reserved bits set": bytes([0xC1, 1]) + b"x",
        "a fragmented or long control frame": frame(OP_PING, b"p" * 126),
        "a continuation with no message begun": frame(OP_CONT, b"x"),
        "a new message inside a fragmented one": frame(OP_TEXT, b"a", fin=False) + frame(OP_TEXT, b"b"),
        "opcode 3": frame(3, b""),
        "opcode 11": frame(11, b""),
    }
    for error, data in broken.items():
        reader = opened()
        assert feed(reader, frame(OP_TEXT, b"ok") + data, 1.0) == [
            msg(b"ok", 1.0),
            Closed(None, client_frame(OP_CLOSE, (1002).to_bytes(2, "big")), error),
        ], error
        assert feed(reader, frame(OP_TEXT, b"x"), 2.0) == []
    small = ClientReader("h", "/", key=KEY, max_size=10)
    feed(small, OK, 1.0)
    too_big = Closed(None, client_frame(OP_CLOSE, (1009).to_bytes(2, "big")), "a frame over 10 bytes")
    assert feed(small, frame(OP_TEXT, b"x" * 11)[:3], 2.0) == [too_big]  # known from the header alone
    small = ClientReader("h", "/", key=KEY, max_size=10)
    feed(small, OK, 1.0)
    parts = frame(OP_TEXT, b"x" * 6, fin=False) + frame(OP_CONT, b"x" * 6)
    assert feed(small, parts, 2.0) == [Closed(None, too_big.reply, "a message over 10 bytes")]


def test_a_message_is_read_where_it_lies_and_copied_only_when_asked() -> None:
    reader = opened()
    data = frame(OP_TEXT, b'{"type":"snapshot"}') + frame(OP_TEXT, b"2")
    first, second = reader.feed(data, 1.0)
    assert isinstance(first, Message) and isinstance(second, Message)
    assert first.buf is data and (first.start, first.end) == (2, 21) and first.startswith(b'{"type":"snap')
    assert not second.startswith(b"2x") and second.payload == b"2"


def test_client_frames_are_masked_with_a_zero_key_at_every_length() -> None:
    assert client_frame(OP_TEXT, b"hi") == b"\x81\x82\0\0\0\0hi"
    assert client_frame(OP_TEXT, b"x" * 200)[:8] == b"\x81\xfe\x00\xc8\0\0\0\0"
    assert client_frame(OP_BINARY, b"x" * 70_000)[:14] == b"\x82\xff" + (70_000).to_bytes(8, "big") + b"\0\0\0\0"
