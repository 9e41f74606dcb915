"""A Redis that lost the function library (restarted without persistence, FUNCTION FLUSH, a node
new to a cluster) gets it back from whoever calls it first: each wrapper of the function library
loads it where its call went and calls once more, so a game server's submission, a gateway's or
the API's read and the scorer's batch all go through — not only once a scorer starts. Calls that
meet it missing at the same moment load it once."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from leaderboard import GameConfig, Leaderboard, Submission, now_ms
from leaderboard.loading import library_code, library_missing, restore_library
from leaderboard.queue import Queue

from .conftest import NOW

CALLS: dict[str, Callable[[Leaderboard, Queue], Awaitable[Any]]] = {
    "enqueue (a game server's submission)": lambda lb, q: q.submit(Submission("e-1", "ana", 5, now_ms())),
    "submit_batch (the scorer)": lambda lb, q: lb.submit_batch([Submission("s-1", "ana", 5, NOW).fields()], now=NOW),
    "submit_batch, stamped (durable log)": lambda lb, q: lb.submit_batch(
        [Submission("s-2", "ana", 5, NOW).fields()], now=NOW, stamp=True
    ),
    "top (FCALL_RO)": lambda lb, q: lb.top("weekly", at=NOW),
    "tops (packed)": lambda lb, q: lb.tops([("weekly", "global"), ("daily", "global")], at=NOW),
    "ranks with profiles (pipeline)": lambda lb, q: lb.ranks(["ana"], "weekly", at=NOW, profiles=True),
    "status": lambda lb, q: lb.status("e-1", now=NOW),
    "lease (the publisher)": lambda lb, q: lb.lease("me", 1000),
}


async def has_library(r: aioredis.Redis) -> bool:
    return bool(await r.execute_command("FUNCTION", "LIST", "LIBRARYNAME", "leaderboard"))


@pytest.mark.parametrize("call", CALLS.values(), ids=CALLS.keys())
async def test_a_call_that_meets_the_library_missing_loads_it_and_goes_through(
    r: aioredis.Redis, lb: Leaderboard, config: GameConfig, call: Callable[[Leaderboard, Queue], Awaitable[Any]]
) -> None:
    await r.function_flush()
    await call(lb, Queue(r, config))
    assert await has_library(r)


async def test_calls_that_meet_it_missing_at_once_load_it_once(r: aioredis.Redis, lb: Leaderboard) -> None:
    """A gateway's own-rank reads of all its players at once, the moment a node came back empty:
    one FUNCTION LOAD (150 kB of Lua each), not one per read."""
    await lb.submit_batch([Submission("s-1", "ana", 5, NOW).fields()], now=NOW)
    await r.function_flush()
    await r.config_resetstat()
    ranks = await asyncio.gather(*(lb.rank("ana", "weekly", at=NOW) for _ in range(200)))
    assert {rank.rank for rank in ranks} == {1}
    loads = (await r.info("commandstats")).get("cmdstat_function|load", {}).get("calls", 0)
    assert loads == 1


async def test_a_library_another_process_loaded_meanwhile_is_kept(r: aioredis.Redis, config: GameConfig) -> None:
    """The load after a miss does not replace: a process of another release may have loaded its
    own library since (an upgrade's), and that one stays."""
    theirs = library_code() + "\n-- another release\n"
    await r.function_load(theirs, replace=True)
    try:
        await restore_library(r, config.keys.submissions)
        [listed] = await r.function_list(library="leaderboard", withcode=True)
        assert "-- another release" in str(listed)
    finally:
        await r.function_load(library_code(), replace=True)


def test_only_redis_own_reply_for_a_missing_function_counts() -> None:
    assert library_missing(ResponseError("Function not found", status_code="ERR"))
    # a library error that quotes those words, another reply, another kind of error: not it
    assert not library_missing(ResponseError("bad_request Function not found", status_code="ERR"))
    assert not library_missing(ResponseError("Library 'leaderboard' already exists", status_code="ERR"))
    assert not library_missing(ConnectionError("Function not found"))
