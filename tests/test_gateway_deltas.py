"""Snapshot deltas and shared compressed frames over real sockets: a gateway, its Redis, clients
that ask for deltas (the Python client; a bare websockets client, both with permessage-deflate
negotiated), one that does not (full snapshots byte for byte), a slow reader that skips
ticks and must then get the full snapshot, not a delta it cannot apply, and the scorer's
publisher on a board whose top N changes in several batches a tick."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from typing import Any

import orjson
import redis.asyncio as aioredis
from websockets.asyncio.client import ClientConnection

from client import LeaderboardClient
from gateway.frames import DEFLATE, DELTAS
from leaderboard import Leaderboard, delta, wire
from leaderboard.results import Entry
from loadtest.wsclient import OP_TEXT, OPEN, ClientReader, Message, client_frame
from scorer import Publisher, ScorerSettings, Stats

from .conftest import NOW, until
from .gw_helpers import T, client, greet, publish, raw_ws, recv, request, running, url

KEY = ("global", "weekly")


def top(version: int, *, pad: int = 0) -> bytes:
    """A moving top 3: the leader's score grows, the others swap places every version; ``pad``
    makes each version's names new and long (a delta then carries them: large frames)."""
    names = ["mia", "leo", "ava"] if version % 2 else ["mia", "ava", "leo"]
    entries = [
        Entry(rank, player, 9000 + version - 100 * rank, {"name": f"{player}{version}" * pad if pad else player})
        for rank, player in enumerate(names, 1)
    ]
    return wire.snapshot(
        board="global", window="weekly", period="2030-W48", version=version, ts_ms=int(time.time() * 1000),
        entries=entries,
    )  # fmt: skip


async def test_delta_clients_hold_what_full_snapshots_show_and_every_kth_goes_whole(
    redis_url: str, r: aioredis.Redis
) -> None:
    async with running(redis_url, deflate=True, delta_full_every=4) as gw:
        first = top(1)
        await r.set(gw.settings.game.keys.latest(*reversed(KEY)), first)
        async with client(gw, compression=None) as old, client(gw) as bare, LeaderboardClient(url(gw)) as app:
            await greet(old)
            await greet(bare)
            welcome = await request(bare, {"type": "hello", "deltas": True}, "welcome")
            assert welcome["deltas"] is True
            await request(bare, {"type": "subscribe", "board": "global"}, "subscribed")  # again: no change
            assert await recv(bare) == orjson.loads(first)  # the latest, whole, as on every subscribe
            await until(lambda: (app.welcome or {}).get("deltas") is True, 2 * T)
            wires = sorted(c.wire for c in gw.clients)
            assert wires == [0, DELTAS | DEFLATE, DELTAS | DEFLATE]  # both offered permessage-deflate
            held = orjson.loads(first)
            kinds = []
            for version in range(2, 10):
                payload = top(version)
                await publish(r, gw, payload)
                assert await old.recv(decode=False) == payload  # an old client: byte for byte
                msg = await recv(bare)
                kinds.append(msg["type"])
                held = delta.follow(held, msg) or held
                assert held == orjson.loads(payload)
                await until(lambda: app.snapshots.get(KEY, {}).get("version") == version, 2 * T)  # noqa: B023
                assert app.snapshots[KEY] == orjson.loads(payload)
            # deltas from the version it held when it asked for them; every 4th version whole
            assert kinds == ["delta", "delta", "snapshot", "delta", "delta", "delta", "snapshot", "delta"]
            assert app.resyncs == 0
            # asked for: a subscribed board's full snapshot; a board not subscribed: refused
            await bare.send('{"type":"resync","board":"global","window":"weekly"}')
            assert await recv(bare) == orjson.loads(payload)
            refused = await request(bare, {"type": "resync", "board": "region:eu", "id": 1})
            assert (refused["type"], refused["code"]) == ("error", "not_subscribed")


async def test_a_delta_client_that_skipped_a_tick_gets_the_full_snapshot_next(
    redis_url: str, r: aioredis.Redis
) -> None:
    """A reader too slow for the frames (a 4 KB receive buffer, ~40 KB frames) skips ticks; what
    it then reads applies version after version, with no delta it cannot apply."""
    async with running(redis_url, write_buffer=32 * 1024, max_skips=10_000) as gw:
        await r.set(gw.settings.game.keys.latest(*reversed(KEY)), top(1, pad=3000))
        slow = await raw_ws(gw, rcvbuf=4096)
        reader = ClientReader("127.0.0.1", "/ws")
        reader.state = OPEN  # raw_ws read the handshake's response: frames follow
        loop = asyncio.get_running_loop()
        await loop.sock_sendall(slow, client_frame(OP_TEXT, b'{"type":"hello","deltas":true}'))
        try:
            version = 1
            await until(lambda: any(c.wire & DELTAS for c in gw.clients), 2 * T)
            while gw.metrics.skipped._value.get() < 2:
                version += 1
                await publish(r, gw, top(version, pad=3000))
                await asyncio.sleep(0.01)
                assert version < 500, "the slow reader never skipped"
            last = top(version + 1)  # it reads again: this one reaches it
            await publish(r, gw, last)
            held: dict[str, object] | None = None
            kinds: list[str] = []
            async with asyncio.timeout(5 * T):
                while held is None or held.get("version") != version + 1:
                    data = await loop.sock_recv(slow, 1 << 16)
                    assert data, "the gateway closed the slow reader"
                    for event in reader.feed(data, 0.0):
                        if isinstance(event, Message):
                            msg = orjson.loads(event.payload)
                            if msg["type"] in ("snapshot", "delta"):
                                kinds.append(msg["type"])
                                held = delta.follow(held, msg) or held  # a Mismatch fails the test
            assert held == orjson.loads(last)
            assert "delta" in kinds
        finally:
            with contextlib.suppress(OSError):
                slow.shutdown(socket.SHUT_RDWR)
            slow.close()


async def test_a_board_changed_by_several_batches_a_tick_reaches_delta_clients_as_deltas(
    redis_url: str, r: aioredis.Redis
) -> None:
    """The publisher's versions count its publishes: three batches that each change the top N
    between two ticks still make the next snapshot a delta of the one before, and what a delta
    client holds is the published snapshot. A new lease holder numbers above (a full snapshot),
    and deltas follow again."""
    async with running(redis_url) as gw:
        config, clock = gw.settings.game, [NOW + 1000]
        lb = Leaderboard(r, config)
        latest = config.keys.latest(*reversed(KEY))

        def publisher(owner: str) -> Publisher:
            settings = ScorerSettings(redis_url=redis_url, game=config, name=owner, tick_ms=50, metrics_port=0)
            return Publisher(r, settings, Stats(), now=lambda: clock[0])

        async def batches_then_tick(p: Publisher, points: int) -> None:
            for i in range(3):  # each a new leader: the top-N version moves by three
                player, score = f"p{points + i}", points + i
                await lb.submit_batch([{"id": player, "player": player, "points": str(score), "ts": str(clock[0])}],
                                      now=clock[0])  # fmt: skip
            clock[0] += 50
            await p.tick()

        async def next_snapshot(ws: ClientConnection) -> dict[str, Any]:
            while True:  # announcements of the new leaders come between
                msg = await recv(ws)
                if msg["type"] in ("snapshot", "delta"):
                    return msg

        a = publisher("a")
        await batches_then_tick(a, 100)
        async with client(gw) as ws, LeaderboardClient(url(gw)) as app:
            _, held = await greet(ws)
            assert (await request(ws, {"type": "hello", "deltas": True}, "welcome"))["deltas"] is True
            kinds = []
            for points in (200, 300, 400):
                await batches_then_tick(a, points)
                msg = await next_snapshot(ws)
                kinds.append(msg["type"])
                held = delta.follow(held, msg) or held
                assert held == orjson.loads(await r.get(latest) or "")
            assert kinds == ["delta", "delta", "delta"]
            await a.release()
            b = publisher("b")
            for points in (500, 600):
                await batches_then_tick(b, points)
                msg = await next_snapshot(ws)
                kinds.append(msg["type"])
                held = delta.follow(held, msg) or held
                assert held == orjson.loads(await r.get(latest) or "")
            assert kinds[3:] == ["snapshot", "delta"]  # b's first version is above a's: whole
            await until(lambda: app.snapshots.get(KEY, {}).get("version") == held["version"], 2 * T)
            assert app.snapshots[KEY] == held and app.resyncs == 0
