"""The ``recent`` request: the last announcements of a board a gateway heard, for a page that just
opened (the live page fills its "Top 10 entries" feed with them)."""

from __future__ import annotations

import asyncio

import orjson
import redis.asyncio as aioredis

from gateway.hub import RECENT

from .gw_helpers import T, client, greet, recv_type, request, running


def announce(player: str, rank: int, *, board: str = "global") -> bytes:
    return orjson.dumps({"type": "announce", "board": board, "window": "weekly", "period": "2030-W48",
                         "player": player, "rank": rank, "score": 100 * rank})  # fmt: skip


async def test_recent_returns_the_boards_last_announcements_newest_first(redis_url: str, r: aioredis.Redis) -> None:
    async with running(redis_url) as gw, client(gw) as ws:
        await greet(ws)
        assert (await request(ws, {"type": "recent", "id": 1}))["entries"] == []  # none heard yet
        channel = gw.settings.game.keys.announce_channel
        await r.spublish(channel, announce("eu", 1, board="region:eu"))  # first: heard before the last below
        for i in range(RECENT + 2):
            await r.spublish(channel, announce(f"p{i}", 1 + i % 10))
        # the gateway forwards each to the subscribed socket: once the last is here, all were heard
        async with asyncio.timeout(2 * T):
            while (await recv_type(ws, "announce"))["player"] != f"p{RECENT + 1}":
                pass
        reply = await request(ws, {"type": "recent", "board": "global", "window": "weekly", "id": 2})
        assert (
            reply["type"] == "recent" and reply["id"] == 2 and (reply["board"], reply["window"]) == ("global", "weekly")
        )
        assert [e["player"] for e in reply["entries"]] == [f"p{i}" for i in range(RECENT + 1, 1, -1)]
        assert all(e["type"] == "announce" and e["ts"] > 0 and e["period"] == "2030-W48" for e in reply["entries"])
        eu = await request(ws, {"type": "recent", "board": "region:eu", "id": 3})
        assert [e["player"] for e in eu["entries"]] == ["eu"]
        bad = await request(ws, {"type": "recent", "window": "hourly", "id": 4})
        assert (bad["type"], bad["code"], bad["id"]) == ("error", "invalid_window", 4)
