"""A Redis restart under a running scorer and gateway: how soon does every socket have the
current snapshot again? Measured from the moment the restarted Redis answers (AOF on, so the
queue, the boards, the lease and the record of what was published all survive)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection

from fleet.redis_server import RedisServer
from leaderboard import GameConfig, Submission, connect, now_ms
from leaderboard.library import library_code
from leaderboard.queue import Queue
from scorer import Scorer, ScorerSettings

from .gw_helpers import T, client, greet, recv_type, running

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
