"""Operator requests (ban, unban, correct, profile) on a real gateway and redis-server: who may
send them, what they reply, and what players then see."""

from __future__ import annotations

from typing import Any

import orjson
import redis.asyncio as aioredis

from leaderboard import GameConfig, Leaderboard, now_ms

from .gw_helpers import client as ws_client
from .gw_helpers import greet, recv_type, request, running, token


async def seed(r: aioredis.Redis, *players: tuple[str, int]) -> Leaderboard:
    lb = Leaderboard(r, GameConfig(game="test"))
    ts = now_ms()
    await lb.submit_batch([{"id": p, "player": p, "points": str(n), "ts": str(ts)} for p, n in players])
    return lb


async def test_only_server_connections_moderate(redis_url: str, r: aioredis.Redis) -> None:
    lb = await seed(r, ("cheat", 900), ("ana", 10))
    ban: dict[str, Any] = {"type": "ban", "player": "cheat", "reason": "aimbot", "id": 1}
    async with running(redis_url) as gw:
        async with ws_client(gw) as spectator:
            await greet(spectator)
            for kind in ("ban", "unban", "correct"):
                refused = await request(spectator, {**ban, "type": kind, "points": 1})
                assert (refused["type"], refused["code"]) == ("error", "auth_required"), refused
        async with ws_client(gw, f"?token={token('ana')}") as player:
            await greet(player)
            for kind in ("ban", "unban", "correct"):
                refused = await request(player, {**ban, "type": kind, "points": 1})
                assert (refused["code"], refused["id"]) == ("forbidden", 1), refused
        assert await lb.rank("cheat", "weekly") is not None and not await r.exists(lb.keys.banned)
        async with ws_client(gw, f"?token={token('backend', 'server')}") as server:
            await greet(server)
            reply = await request(server, ban)
            assert reply == {"type": "banned", "player": "cheat", "boards": 3, "id": 1}
            bad = await request(server, {"type": "correct", "player": "ana", "points": 5, "reason": "", "id": 2})
            assert (bad["type"], bad["code"], bad["id"]) == ("error", "invalid_reason", 2)
            bad = await request(server, {"type": "correct", "player": "cheat", "points": 5, "reason": "r", "id": 3})
            assert bad["code"] == "banned"
            fixed = await request(
                server, {"type": "correct", "player": "ana", "points": "7", "reason": "r", "window": "weekly", "id": 4}
            )
            [row] = fixed["boards"]
            assert (fixed["type"], fixed["points"], row["board"], row["previous"], row["rank"]) == (
                "corrected",
                7,
                "global",
                10,
                1,
            )
            undone = await request(server, {"type": "unban", "player": "cheat", "id": 5})
            assert undone == {"type": "unbanned", "player": "cheat", "was_banned": True, "id": 5}
    assert (await lb.rank("cheat", "weekly")).rank is None and (await lb.rank("ana", "weekly")).score == 7
    rows: Any = await r.xrange(lb.keys.activity)
    actions = [f for _, f in rows if "action" in f]
    assert [(a["action"], a["by"]) for a in actions] == [
        ("ban", "backend"),
        ("correct", "backend"),
        ("unban", "backend"),
    ]
    # a gateway has no durable store: the functions journal what it did, for the scorer to record
    journaled: Any = await r.xrange(lb.keys.journal)
    assert [(f["fn"], orjson.loads(f["args"])[:2]) for _, f in journaled] == [
        ("ban", ["cheat", "backend"]),
        ("correction", ["ana", "7"]),
        ("unban", ["cheat", "backend"]),
    ]


async def test_the_banned_players_next_rank_push_says_unranked(redis_url: str, r: aioredis.Redis) -> None:
    await seed(r, ("cheat", 900), ("ana", 10))
    async with running(redis_url, rank_interval=0.2) as gw, ws_client(gw, f"?token={token('cheat')}") as ws:
        await greet(ws)
        first = await recv_type(ws, "rank")
        assert (first["player"], first["rank"]) == ("cheat", 1)
        async with ws_client(gw, f"?token={token('backend', 'server')}") as server:
            await greet(server)
            await request(server, {"type": "ban", "player": "cheat", "reason": "aimbot"}, "banned")
        pushed = await recv_type(ws, "rank")
        assert (pushed["rank"], pushed["score"], pushed["size"]) == (None, None, 1)


async def test_profiles_from_players_and_servers_join_friends_lists(redis_url: str, r: aioredis.Redis) -> None:
    await seed(r, ("mia", 50), ("ana", 40))
    async with running(redis_url) as gw:
        async with ws_client(gw, f"?token={token('mia')}") as mia:
            await greet(mia)
            mine = await request(mia, {"type": "profile", "profile": {"name": "Mi\u0301a", "country": "SE"}, "id": 1})
            assert mine == {
                "type": "profile",
                "player": "mia",
                "profile": {"name": "M\u00eda", "country": "SE"},
                "id": 1,
            }
            for msg, code in (
                ({"player": "ana", "profile": {"name": "x"}}, "forbidden"),  # not their own
                ({"profile": {"avatar": "https://cdn.example/a.png"}}, "forbidden"),  # servers set avatars
                ({"profile": {"country": "XX"}}, "invalid_country"),
                ({"profile": {"name": "a\u202eb"}}, "invalid_name"),
                ({"profile": {}}, "bad_message"),
            ):
                refused = await request(mia, {"type": "profile", **msg})
                assert refused["code"] == code, (msg, refused)
        async with ws_client(gw, f"?token={token('backend', 'server')}") as server:
            await greet(server)
            nobody = await request(server, {"type": "profile", "profile": {"name": "x"}})
            assert nobody["code"] == "bad_message"  # a server names the player
            avatar = "https://cdn.example/ana.png"
            reply = await request(server, {"type": "profile", "player": "ana", "profile": {"avatar": avatar}})
            assert reply["profile"] == {"avatar": avatar}
            friends = await request(server, {"type": "ranks", "players": ["mia", "ana", "nobody"]})
            assert friends["players"] == [
                {
                    "player": "mia",
                    "rank": 1,
                    "score": 50,
                    "top_percent": 50.0,
                    "approx": False,
                    "name": "M\u00eda",
                    "country": "SE",
                },
                {"player": "ana", "rank": 2, "score": 40, "top_percent": 100.0, "approx": False, "avatar": avatar},
                {"player": "nobody", "rank": None, "score": None, "top_percent": None, "approx": False},
            ]
            top = await request(server, {"type": "top", "n": 2})
            assert top["entries"][0]["name"] == "M\u00eda" and top["entries"][1]["avatar"] == avatar
