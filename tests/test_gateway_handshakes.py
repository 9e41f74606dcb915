"""Handshakes in flight (TCP accepted, WebSocket not yet upgraded) are bounded in number
(LB_GW_MAX_HANDSHAKES) and in time (LB_GW_HANDSHAKE_TIMEOUT): a peer sending half a request line
on many connections holds at most the cap's descriptors, for at most the timeout, and a client
that sends its request at once still gets in meanwhile."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import Iterator

from gateway.server import Gateway

from .gw_helpers import T, client, greet, running

CAP = 20
FLOOD = 3 * CAP


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))  # the test and the gateway share this process


def _refused(gw: Gateway) -> float:
    return gw.metrics.registry.get_sample_value("lb_gw_refused_total", {"reason": "handshakes"}) or 0.0


@contextlib.contextmanager
def _sockets(count: int) -> Iterator[list[socket.socket]]:
    socks = [socket.socket() for _ in range(count)]
    try:
        for s in socks:
            s.setblocking(False)
        yield socks
    finally:
        for s in socks:
            s.close()


async def _closed_by_peer(sock: socket.socket) -> None:
    loop = asyncio.get_running_loop()
    with contextlib.suppress(ConnectionResetError):
        assert await loop.sock_recv(sock, 64) == b""  # never an answer to half a request line


async def test_half_sent_handshakes_are_bounded_in_number_and_time(redis_url: str) -> None:
    timeout = 0.5 * T
    async with running(redis_url, max_handshakes=CAP, handshake_timeout=timeout) as gw:
        loop = asyncio.get_running_loop()
        before = _fds()
        with _sockets(FLOOD) as socks:
            for sock in socks:
                await asyncio.wait_for(loop.sock_connect(sock, ("127.0.0.1", gw.port)), 2 * T)
                await loop.sock_sendall(sock, b"GET /ws HT")
            # Every connection accepted: held as a handshake in flight, or reset (the longest waiting).
            async with asyncio.timeout(5 * T):
                while len(gw.handshakes.in_flight) + _refused(gw) < FLOOD:  # noqa: ASYNC110 (no event to await)
                    await asyncio.sleep(0.01)
            assert (len(gw.handshakes.in_flight), _refused(gw)) == (CAP, FLOOD - CAP)
            # The descriptors held for them on the gateway's side: the cap's, no more.
            assert _fds() - before - FLOOD <= CAP
            # The first ones were reset to make room, the last ones are held.
            await asyncio.wait_for(asyncio.gather(*(_closed_by_peer(s) for s in socks[: FLOOD - CAP])), 2 * T)
            # The cap is full of slow peers, yet a client that sends its request at once gets in.
            async with client(gw) as ws:
                await asyncio.wait_for(greet(ws), 2 * T)
            # All closed by the handshake timeout (websockets' default was 10 s).
            await asyncio.wait_for(asyncio.gather(*(_closed_by_peer(s) for s in socks)), timeout + 2 * T)
            assert not gw.handshakes.in_flight
            # Open sockets are not handshakes in flight.
            async with client(gw) as ws:
                await asyncio.wait_for(greet(ws), 2 * T)
                assert not gw.handshakes.in_flight
