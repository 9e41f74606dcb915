"""The game's own boards as freely defined as any board: a stored ``default`` of two keys (desc,
asc), tie ``last`` and metadata, kept per region and mode as the game's boards are, written and
read through the one path defined boards take (the same key names as the game's boards), and the
rule that keeps a game's boards from being reshaped once it has entries."""

from __future__ import annotations

from typing import Any

import pytest
import redis.asyncio as aioredis

from leaderboard import GameConfig, InvalidBoard, Leaderboard, Submission, boards, now_ms
from leaderboard.definitions import configured

CONFIG = GameConfig(game="test")
KART = {
    "id": "default",
    "keys": [{"name": "laps", "min": 0, "max": 100}, {"name": "time", "direction": "asc", "display": "duration_ms"}],
    "tie": "last",
    "metadata_bytes": 32,
    "windows": ["daily", "weekly", "alltime"],
}


def kart(**changes: Any) -> boards.Definition:
    return boards.parse({**KART, **changes})


async def test_smoke(r: aioredis.Redis, lb: Leaderboard) -> None:
    await lb.create_board(kart())
    await lb.boards.refresh()
    assert lb.boards.general is not None
    now = now_ms()
    subs = [
        Submission("a", "ana", 0, now, values=(3, 81_000), region="eu", meta="red car"),
        Submission("b", "ben", 0, now, values=(3, 79_000), region="us"),
        Submission("c", "cy", 0, now, values=(2, 50_000), region="eu"),
    ]
    done = await lb.submit_batch([s.fields() for s in subs])
    print(done)
    top = await lb.top("weekly", "global")
    print(top)
    print(await lb.top("weekly", "region:eu"))
    print(await lb.around("ana", "weekly", "global"))
    print(await lb.rank("ana", "weekly"))
    print(await lb.stats("weekly"))
