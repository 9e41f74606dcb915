"""Redis state read whole, so two states can be compared member by member."""

from __future__ import annotations

from typing import Any

import orjson
import redis.asyncio as aioredis

from leaderboard import GameConfig


async def redis_state(r: aioredis.Redis, config: GameConfig) -> dict[str, Any]:
    """Every key the rebuild restores, read whole: boards (members and exact scores), distinct
    player counts, seen ids, the scopes slips named, profiles (decoded: JSON spelling may
    differ), and each board's rank companions (histogram; distinct points in dense mode)."""
    prefix = config.keys.prefix
    state: dict[str, Any] = {}
    async for key in r.scan_iter(match=f"{prefix}:*", count=1000):
        kind = key[len(prefix) + 1 :].split(":", 1)[0]
        if kind == "board":
            state[key] = await r.zrange(key, 0, -1, withscores=True)
        elif kind == "hist":
            state[key] = await r.hgetall(key)
        elif kind == "points":
            state[key] = await r.zrange(key, 0, -1, withscores=True)
        elif kind == "players":
            state[key] = await r.pfcount(key)
        elif kind in ("seen", "scopes"):
            state[key] = sorted(await r.smembers(key))
        elif kind == "profiles":
            state[key] = {p: orjson.loads(v) for p, v in (await r.hgetall(key)).items()}
    return state
