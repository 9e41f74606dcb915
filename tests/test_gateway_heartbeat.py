"""The heartbeat sweep's pings: written inside the socket's tick write, their pongs taken without
websockets' frame parser when they come whole, through it otherwise; a wrong pong answers nothing."""

from __future__ import annotations

import asyncio
import os
import socket
import struct
from typing import Any

import redis.asyncio as aioredis
from websockets.frames import Frame, Opcode
from websockets.protocol import Protocol, Side, State
from websockets.server import ServerProtocol

from gateway.client import Client, between_frames
from gateway.server import Gateway

from .conftest import until
from .gw_helpers import T, publish, raw_ws, running, snapshot

PING, PONG, TEXT = 0x9, 0xA, 0x1


def server_frames(data: bytes) -> list[tuple[int, bytes]]:
    """(opcode, payload) of each whole unmasked frame in ``data`` (the tests read whole writes)."""
    frames, i = [], 0
    while i < len(data):
        opcode, size, i = data[i] & 0x0F, data[i + 1] & 0x7F, i + 2
        if size == 126:
            size, i = struct.unpack_from("!H", data, i)[0], i + 2
        frames.append((opcode, data[i : i + size]))
        i += size
    assert i == len(data), data
    return frames


def pong(payload: bytes) -> bytes:
    """A client's pong frame (masked, as a client's must be)."""
    mask = os.urandom(4)
    return bytes([0x80 | PONG, 0x80 | len(payload)]) + mask + bytes(b ^ mask[k % 4] for k, b in enumerate(payload))


async def read_frames(sock: socket.socket, count: int) -> list[tuple[int, bytes]]:
    loop, data = asyncio.get_running_loop(), b""
    async with asyncio.timeout(3 * T):
        while True:
            data += await loop.sock_recv(sock, 1 << 16)
            try:
                frames = server_frames(data)
            except (AssertionError, IndexError, struct.error):
                continue  # a frame still arriving
            if len(frames) >= count:
                return frames


def the_client(gw: Gateway, sock: socket.socket) -> Client:
    port = sock.getsockname()[1]
    [found] = [c for c in gw.clients if c.ws.remote_address[1] == port]
    return found


def parsed_by_websockets(client: Client) -> list[bytes]:
    """Every chunk of bytes that reaches websockets' parser from now on."""
    protocol, seen = client.ws.protocol, []
    receive = protocol.receive_data

    def spy(data: Any) -> None:
        seen.append(bytes(data))
        receive(data)

    protocol.receive_data = spy  # type: ignore[method-assign]
    return seen


async def test_a_ping_joins_the_ticks_write_and_its_pong_skips_the_parser(redis_url: str, r: aioredis.Redis) -> None:
    async with running(redis_url, ping_interval=0.2 * T, ping_timeout=8 * T, push_hold=10 * T) as gw:
        sock = await raw_ws(gw)
        try:
            assert [op for op, _ in await read_frames(sock, 2)] == [TEXT, TEXT]  # welcome, snapshot
            await until(lambda: len(gw.clients) == 1, 2 * T)
            client = the_client(gw, sock)
            await until(lambda: client.ping_data is not None, 2 * T)  # the ping, held for the tick
            payload = client.ping_data
            writes = gw.metrics.writes._value.get()
            await publish(r, gw, snapshot(40))
            frames = await read_frames(sock, 2)
            assert [op for op, _ in frames] == [TEXT, PING] and b'"version":40' in frames[0][1]
            assert frames[1][1] == payload
            assert gw.metrics.writes._value.get() == writes + 1  # one write carried both
            parsed = parsed_by_websockets(client)
            sock.send(pong(payload))
            await until(lambda: client.ping_data is None, 2 * T)
            assert parsed == []  # recognised before websockets' parser
            assert not client.closed
        finally:
            sock.close()


async def test_a_pong_in_pieces_goes_through_websockets_and_still_counts(redis_url: str) -> None:
    async with running(redis_url, ping_interval=0.2 * T, ping_timeout=8 * T, push_hold=0.05 * T) as gw:
        sock = await raw_ws(gw)
        try:
            await read_frames(sock, 2)  # welcome, snapshot
            await until(lambda: len(gw.clients) == 1, 2 * T)
            client = the_client(gw, sock)
            [(op, payload)] = await read_frames(sock, 1)  # no tick: the ping came alone, once held
            assert op == PING and payload == client.ping_data
            parsed = parsed_by_websockets(client)
            frame = pong(payload)
            sock.send(frame[:3])  # the header and one byte of the mask
            await until(lambda: len(parsed) == 1, 2 * T)
            assert client.ping_data == payload
            sock.send(frame[3:])
            await until(lambda: client.ping_data is None, 2 * T)
            assert parsed == [frame[:3], frame[3:]]
        finally:
            sock.close()


async def test_a_pong_with_another_payload_answers_nothing_and_the_socket_is_dropped(redis_url: str) -> None:
    async with running(redis_url, ping_interval=0.1 * T, ping_timeout=0.4 * T) as gw:
        sock = await raw_ws(gw)
        try:
            await read_frames(sock, 2)
            await until(lambda: len(gw.clients) == 1, 2 * T)
            client = the_client(gw, sock)
            [(op, payload)] = await read_frames(sock, 1)
            assert op == PING
            parsed = parsed_by_websockets(client)
            sock.send(pong(bytes(b ^ 0xFF for b in payload)))
            await until(lambda: len(parsed) == 1, 2 * T)  # not the pending ping's: websockets had it
            assert client.ping_data == payload
            await until(lambda: gw.metrics.dropped.labels("heartbeat")._value.get() == 1, 3 * T)
        finally:
            sock.close()


def test_between_frames_follows_websockets_parser() -> None:
    assert not between_frames(ServerProtocol().parser)  # reading the HTTP request
    protocol = Protocol(Side.SERVER, state=State.OPEN)
    assert between_frames(protocol.parser)
    frame = pong(b"abcd")
    protocol.receive_data(frame[:3])
    assert not between_frames(protocol.parser)  # inside a frame, its first bytes consumed
    protocol.receive_data(frame[3:])
    [event] = protocol.events_received()
    assert between_frames(protocol.parser) and isinstance(event, Frame) and event.opcode is Opcode.PONG
    protocol.receive_data(bytes([0x88, 0x82]) + b"\0\0\0\0" + b"\x03\xe8")  # a close frame, 1000
    assert not between_frames(protocol.parser)  # what follows a close is discarded, not parsed
