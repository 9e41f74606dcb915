"""A Redis restart under a running scorer and gateway: how soon does every socket have the
current snapshot again? Measured from the moment the restarted Redis answers (AOF on, so the
queue, the boards, the lease and the record of what was published all survive)."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from websockets.asyncio.client import ClientConnection

from fleet.redis_server import RedisServer
from leaderboard import GameConfig, Submission, connect, now_ms
from leaderboard.library import library_code
from leaderboard.queue import Queue
from scorer import Scorer, ScorerSettings

from .gw_helpers import T, client, greet, publish, recv_type, request, running, snapshot, token

OUTAGE_S = 3.0  # long enough for every reconnect loop to have backed off several times


async def until_player(ws: ClientConnection, player: str, within: float) -> dict[str, Any]:
    """The first snapshot that shows ``player``."""
    async with asyncio.timeout(within):
        while True:
            snap = await recv_type(ws, "snapshot", within)
            if any(e["player"] == player for e in snap["entries"]):
                return snap


async def submit(url: str, config: GameConfig, sid: str, player: str, points: int) -> None:
    redis = connect(url)
    try:
        await Queue(redis, config).submit(Submission(sid, player, points, now_ms()))
    finally:
        await redis.aclose()


@pytest.mark.slow
@pytest.mark.parametrize("kill", [False, True], ids=["sigterm", "sigkill"])
async def test_every_socket_has_the_current_snapshot_within_2s_of_redis_answering(tmp_path: Path, kill: bool) -> None:
    server = RedisServer(tmp_path, aof=True).start()
    config = GameConfig(game="test")
    settings = ScorerSettings(redis_url=server.url, game=config, name="restart", stats_interval_s=0, metrics_port=0)
    try:
        admin = connect(server.url)
        await admin.function_load(library_code(), replace=True)
        await admin.aclose()
        async with Scorer(settings), running(server.url, close_timeout=0.5) as gw, client(gw) as ws:
            await greet(ws)
            await submit(server.url, config, "s1", "ana", 100)
            await until_player(ws, "ana", 5 * T)

            assert server.process is not None
            if kill:
                server.process.kill()
            else:
                server.process.terminate()
            server.process.wait(10)
            await asyncio.sleep(OUTAGE_S)  # the outage itself, not a wait for an event

            server.start()  # same port, same AOF; returns once Redis answers PING
            back = time.monotonic()
            await submit(server.url, config, "s2", "bo", 200)
            snap = await until_player(ws, "bo", 10 * T)
            elapsed = time.monotonic() - back
            assert [e["player"] for e in snap["entries"]] == ["bo", "ana"]
            assert elapsed <= 2 * T, f"current snapshot {elapsed:.2f} s after Redis answered again"
    finally:
        server.stop()


@pytest.mark.parametrize("kind", ["top", "submit"])
async def test_a_request_while_redis_hangs_is_answered_unavailable(tmp_path: Path, kind: str) -> None:
    """A Redis that holds its connections open but answers nothing (stopped, wedged, or a network
    path that drops packets): requests must still get ``unavailable``, not wait with it."""
    server = RedisServer(tmp_path, aof=True).start()
    try:
        admin = connect(server.url)
        await admin.function_load(library_code(), replace=True)
        await admin.aclose()
        query = "?token=" + token("game-1", "server") if kind == "submit" else ""
        async with running(server.url, close_timeout=0.5) as gw, client(gw, query) as ws:
            await greet(ws)
            assert (await request(ws, {"type": "top", "id": 1}))["type"] == "top"  # its connection is open
            assert server.process is not None
            server.process.send_signal(signal.SIGSTOP)
            try:
                msg: dict[str, Any] = {"type": "top", "id": 2}
                if kind == "submit":
                    msg = {"type": "submit", "id": 2, "submission": {"id": "h1", "player": "ana", "points": 5}}
                await ws.send(orjson.dumps(msg).decode())
                reply = await recv_type(ws, "error", 6 * T)
                assert (reply["code"], reply["id"]) == ("unavailable", 2)
            finally:
                server.process.send_signal(signal.SIGCONT)
    finally:
        server.stop()


async def test_a_quiet_pubsub_outlives_the_redis_timeout(redis_url: str) -> None:
    """The read bound must not apply to the pub/sub read, which waits for pushes as long as the
    boards are quiet (redis-py before 8 applied socket_timeout there: a reconnect every bound)."""
    async with running(redis_url, redis_timeout=0.2) as gw, client(gw) as ws:
        await greet(ws)
        await asyncio.sleep(1.0)  # five bounds of silence: the condition under test, not a wait
        r = connect(redis_url)
        try:
            await publish(r, gw, snapshot(7))
        finally:
            await r.aclose()
        assert (await recv_type(ws, "snapshot"))["version"] == 7
        assert gw.hub.connected.is_set()
        assert gw.metrics.redis_errors._value.get() == 0


async def test_a_snapshot_stored_while_the_gateway_was_away_reaches_its_sockets(tmp_path: Path) -> None:
    """After a restart the hub compares each board's stored latest with what it last sent. The
    read goes over a pooled connection from before the restart, which is dead: it must be retried
    on a fresh one, not give up (a board that changed meanwhile would stay stale until its next
    change, for as long as the top holds)."""
    server = RedisServer(tmp_path, aof=True).start()
    try:
        admin = connect(server.url)
        await admin.function_load(library_code(), replace=True)
        await admin.aclose()
        async with running(server.url, close_timeout=0.5) as gw, client(gw) as ws:
            await greet(ws)
            r = connect(server.url)
            try:
                await publish(r, gw, snapshot(1))
                assert (await recv_type(ws, "snapshot"))["version"] == 1
                # stored, not published: only the resync after the restart can bring it
                await r.set(gw.settings.game.keys.latest("weekly", "global"), snapshot(2))
            finally:
                await r.aclose()
            assert server.process is not None
            server.process.terminate()  # the AOF keeps version 2
            server.process.wait(10)
            async with asyncio.timeout(5 * T):
                while gw.hub.connected.is_set():  # noqa: ASYNC110 (the hub has no "lost" event)
                    await asyncio.sleep(0.01)
            server.start()
            assert (await recv_type(ws, "snapshot", 5 * T))["version"] == 2
    finally:
        server.stop()
