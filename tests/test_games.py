"""Several games served by one gateway process and one scorer replica (LB_GAMES), against a
real redis-server: each connection names its game, and each game's boards, queue and snapshots
stay its own."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest
from websockets.asyncio.client import ClientConnection

from leaderboard import GameConfig
from scorer import Scorer, ScorerSettings

from .gw_helpers import T, announced_close, client, greet, recv_type, request, running, token

GAMES = GameConfig(games=("arena", "kart"))


async def until_player(ws: ClientConnection, player: str) -> dict[str, Any]:
    async with asyncio.timeout(5 * T):
        while True:
            snap = await recv_type(ws, "snapshot", 5 * T)
            if snap["entries"]:
                assert [e["player"] for e in snap["entries"]] == [player]
                return snap


def test_served_games_share_their_settings() -> None:
    assert [c.game for c in GAMES.served] == ["arena", "kart"]
    assert all(c.windows == GAMES.windows and not c.games for c in GAMES.served)
    assert [c.game for c in GameConfig(game="solo").served] == ["solo"]  # LB_GAME alone
    with pytest.raises(ValueError, match="LB_GAMES: a game is listed twice"):
        GameConfig(games=("arena", "arena"))
    with pytest.raises(ValueError, match="LB_GAMES: game must be"):
        GameConfig(games=("arena", "no spaces"))


async def test_each_connection_gets_its_games_boards_and_submits_to_its_queue(redis_url: str) -> None:
    settings = ScorerSettings(
        redis_url=redis_url, game=GAMES, name="multi", tick_ms=50, stats_interval_s=0, metrics_port=0
    )
    async with Scorer(settings) as scorer, running(redis_url, game=GAMES) as gw:
        await asyncio.wait_for(asyncio.gather(*(g.hub.connected.wait() for g in gw.games.values())), 5 * T)
        async with client(gw) as default, client(gw, "?game=kart") as kart:
            welcome, _ = await greet(default)
            assert welcome["game"] == "arena"  # the first of LB_GAMES
            welcome, _ = await greet(kart)
            assert welcome["game"] == "kart"
            for game, player in (("arena", "ana"), ("kart", "ben")):
                async with client(gw, f"?game={game}&token={token('gs-1', 'server')}") as server:
                    await greet(server)
                    sub = {"id": f"{game}-1", "player": player, "points": 100}
                    reply = await request(server, {"type": "submit", "submission": sub, "id": 1}, "submitted")
                    assert reply["id"] == 1
            # Each socket sees its own game's player only: the boards, queues and channels are apart.
            await until_player(default, "ana")
            await until_player(kart, "ben")
            top = await request(kart, {"type": "top", "id": 2}, "top")
            assert [e["player"] for e in top["entries"]] == ["ben"]
        assert scorer.stats.applied == 2
        assert scorer.stats.publisher == 2  # this replica holds both games' leases


async def test_an_unknown_game_is_refused_with_a_stable_code(redis_url: str) -> None:
    async with running(redis_url, game=GAMES) as gw, client(gw, "?game=chess") as ws:
        error = orjson.loads(await asyncio.wait_for(ws.recv(), 2 * T))
        assert (error["type"], error["code"]) == ("error", "unknown_game")
        assert "arena, kart" in error["message"]
        assert await announced_close(ws, 2 * T) == (1008, "unknown_game")
        assert not gw.clients  # nothing was admitted
