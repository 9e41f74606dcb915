"""The submit API's queue (lb_enqueue) and the lease function (lb_lease), against a real Redis."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis.asyncio as aioredis

from leaderboard import BacklogFull, GameConfig, InvalidSubmission, Submission, now_ms
from leaderboard.queue import Queue


def sub(i: int, points: int = 10) -> Submission:
    return Submission(f"s-{i}", f"p{i}", points, now_ms())


async def test_submit_appends_stream_entries(r: aioredis.Redis, config: GameConfig) -> None:
    queue = Queue(r, config, backlog_max=10)
    first = await queue.submit(Submission("a", "ana", 5, now_ms(), name="Ana", region="eu"))
    ids = await queue.submit_many([sub(1), sub(2)])
    rows: Any = await r.xrange(config.keys.submissions)
    assert [sid for sid, _ in rows] == [first, *ids]
    assert rows[0][1] == {
        "id": "a",
        "player": "ana",
        "points": "5",
        "ts": rows[0][1]["ts"],
        "name": "Ana",
        "region": "eu",
    }


async def test_backlog_full_refuses_the_whole_batch(r: aioredis.Redis, config: GameConfig) -> None:
    queue = Queue(r, config, backlog_max=3)
    await queue.submit_many([sub(1), sub(2)])
    with pytest.raises(BacklogFull, match="backlog"):
        await queue.submit_many([sub(3), sub(4)])
    assert await r.xlen(config.keys.submissions) == 2  # nothing of the refused batch, nothing trimmed
    await queue.submit(sub(3))
    with pytest.raises(BacklogFull):
        await queue.submit(sub(4))


async def test_backlog_check_is_atomic_under_concurrent_submitters(r: aioredis.Redis, config: GameConfig) -> None:
    queue = Queue(r, config, backlog_max=50)
    outcomes = await asyncio.gather(*(queue.submit(sub(i)) for i in range(80)), return_exceptions=True)
    assert sum(isinstance(o, BacklogFull) for o in outcomes) == 30
    assert await r.xlen(config.keys.submissions) == 50


async def test_invalid_submission_appends_nothing(r: aioredis.Redis, config: GameConfig) -> None:
    queue = Queue(r, config)
    with pytest.raises(InvalidSubmission) as info:
        await queue.submit_many([sub(1), Submission("x", "", 1, now_ms())])
    assert info.value.code == "invalid_player"
    assert await r.xlen(config.keys.submissions) == 0


async def test_lease_is_held_renewed_and_released_by_its_owner_only(r: aioredis.Redis) -> None:
    async def lease(owner: str, action: str = "hold") -> int:
        return int(await r.fcall("lb_lease", 1, "lb:{test}:publisher", owner, 5000, action))

    assert await lease("a") == 1
    assert await lease("b") == 0
    assert await lease("a") == 1  # renewal
    assert await lease("b", "release") == 0 and await lease("b") == 0  # b cannot release a's lease
    await lease("a", "release")
    assert await lease("b") == 1
