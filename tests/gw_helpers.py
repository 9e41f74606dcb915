"""Helpers of the gateway tests: a gateway on port 0, clients, raw sockets, HTTP GETs."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import socket
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from fleet.redis_server import free_port
from gateway.server import Gateway
from gateway.settings import GatewaySettings
from leaderboard import Entry, GameConfig, wire
from leaderboard.auth import issue

from .conftest import MS

SECRETS = ("current-secret-of-at-least-32-bytes!", "previous-secret-of-at-least-32-bytes")
T = 1000 * MS  # one second, scaled by LB_TEST_TIME_SCALE


def settings(redis_url: str, **overrides: Any) -> GatewaySettings:
    base: dict[str, Any] = {
        "host": "127.0.0.1",
        "port": 0,
        "reuse_port": False,
        "gateway_id": "gw-test",
        "fleet_beat_s": 0.0,  # no heartbeat key in the shared Redis (conftest.py says why)
        "redis_url": redis_url,
        "game": GameConfig(game="test"),
        "jwt_secrets": SECRETS,
        "ping_interval": 5.0,
        "ping_timeout": 5.0,
        "rank_interval": 60.0,
        "drain_delay": 0.05,
        "drain_window": 0.2,
        "close_timeout": 1.0,
        "metrics_port": free_port(),
    }
    base.update(overrides)
    return GatewaySettings(**base)


@contextlib.asynccontextmanager
async def running(redis_url: str, **overrides: Any) -> AsyncIterator[Gateway]:
    gw = Gateway(settings(redis_url, **overrides))
    await gw.start()
    try:
        await asyncio.wait_for(gw.hub.connected.wait(), 5 * T)
        yield gw
    finally:
        await gw.close()


def url(gw: Gateway, query: str = "") -> str:
    return f"ws://127.0.0.1:{gw.port}/ws{query}"


def token(player: str = "mia", role: str = "player", secret: str = SECRETS[0], ttl: float = 300) -> str:
    return issue(player, role, secret, exp=time.time() + ttl)


@contextlib.asynccontextmanager
async def client(gw: Gateway, query: str = "", **kwargs: Any) -> AsyncIterator[ClientConnection]:
    async with connect(url(gw, query), open_timeout=5 * T, close_timeout=T, **kwargs) as ws:
        yield ws


async def recv(ws: ClientConnection, within: float = 2 * T) -> dict[str, Any]:
    raw = await asyncio.wait_for(ws.recv(), within)
    msg = orjson.loads(raw)
    assert isinstance(msg, dict)
    return msg


async def recv_type(ws: ClientConnection, kind: str, within: float = 2 * T) -> dict[str, Any]:
    """The next message of this type, skipping others (snapshots, ranks) in between."""
    async with asyncio.timeout(within):
        while True:
            msg = await recv(ws, within)
            if msg["type"] == kind:
                return msg


async def request(ws: ClientConnection, msg: dict[str, Any], kind: str | None = None) -> dict[str, Any]:
    await ws.send(orjson.dumps(msg).decode())
    if kind is None:
        return await recv(ws)
    return await recv_type(ws, kind)


async def announced_close(ws: ClientConnection, within: float = 3 * T) -> tuple[int, str | None]:
    """Read to the close; its code and reason, once the message just before the close frame was
    checked to announce them (``closing``: docs/protocol.md, close codes)."""
    last: Any = None
    async with asyncio.timeout(within):
        with contextlib.suppress(ConnectionClosed):
            async for raw in ws:
                last = orjson.loads(raw)
    assert ws.close_code is not None
    assert last == {"type": "closing", "code": ws.close_code, "reason": ws.close_reason}
    return ws.close_code, ws.close_reason


async def greet(ws: ClientConnection) -> tuple[dict[str, Any], dict[str, Any]]:
    """welcome, then the default board's snapshot."""
    welcome = await recv(ws)
    assert welcome["type"] == "welcome"
    snap = await recv(ws)
    assert snap["type"] == "snapshot"
    return welcome, snap


async def server_files(gw: Gateway, filed: dict[str, Any], refused: dict[str, Any]) -> str:
    """A game server's socket files the submission ``filed`` (``submitted``) and then ``refused``:
    the code of its refusal."""
    async with client(gw, f"?token={token('backend', 'server')}") as server:
        await greet(server)
        assert (await request(server, {"type": "submit", "submission": filed, "id": 1}))["type"] == "submitted"
        answer = await request(server, {"type": "submit", "submission": refused, "id": 2})
        assert answer["type"] == "error"
        return str(answer["code"])


def snapshot(version: int, *, board: str = "global", window: str = "weekly", pad: int = 0) -> bytes:
    entries = [Entry(1, "mia", 5000 + version, {"name": "Mia" + "x" * pad})]
    return wire.snapshot(
        board=board,
        window=window,
        period="2030-W48",
        version=version,
        ts_ms=int(time.time() * 1000),
        entries=entries,
    )


async def publish(r: Any, gw: Gateway, payload: bytes, *, board: str = "global", window: str = "weekly") -> None:
    """Play the scorer: store the latest, then publish it."""
    keys = gw.settings.game.keys
    await r.set(keys.latest(window, board), payload)
    await r.spublish(keys.snapshot_channel(window, board), payload)


async def raw_ws(gw: Gateway, *, rcvbuf: int | None = None, query: str = "") -> socket.socket:
    """A WebSocket opened by hand that then never reads or answers: a silent or slow peer."""
    sock = socket.socket()
    if rcvbuf is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.setblocking(False)
    loop = asyncio.get_running_loop()
    await asyncio.wait_for(loop.sock_connect(sock, ("127.0.0.1", gw.port)), 2 * T)
    key = base64.b64encode(os.urandom(16)).decode()
    await loop.sock_sendall(
        sock,
        (
            f"GET /ws{query} HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        ).encode(),
    )
    head = b""
    async with asyncio.timeout(2 * T):
        while b"\r\n\r\n" not in head:
            head += await loop.sock_recv(sock, 1)  # byte by byte: leave the frames unread
    assert head.startswith(b"HTTP/1.1 101"), head
    return sock


async def http_get(port: int, path: str) -> tuple[int, dict[str, str], bytes]:
    reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 2 * T)
    try:
        writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 2 * T)
        lines = head.decode().split("\r\n")
        status = int(lines[0].split()[1])
        headers = {k.lower(): v.strip() for k, _, v in (h.partition(":") for h in lines[1:] if h)}
        body = await asyncio.wait_for(reader.readexactly(int(headers.get("content-length", "0"))), 2 * T)
        return status, headers, body
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()
