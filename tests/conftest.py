"""Shared fixtures: one private redis-server per test session, flushed between tests."""

from __future__ import annotations

import asyncio
import datetime as dt
import inspect
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import cast

import pytest
import redis

from fleet.cluster import Cluster
from fleet.redis_server import RedisServer
from leaderboard import GameConfig, Leaderboard, activity, connect
from leaderboard.library import library_code

# A fixed instant (Tuesday 2030-11-26 10:00 UTC, ISO week 2030-W48) so periods are deterministic.
# It lies in the future on purpose: expiry times derived from it (EXPIREAT) must not be past.
NOW = int(dt.datetime(2030, 11, 26, 10, 0, tzinfo=dt.UTC).timestamp() * 1000)
# Scale for every wait in the suite, for slower machines: LB_TEST_TIME_SCALE=2.
MS = 0.001 * float(os.environ.get("LB_TEST_TIME_SCALE", "1"))
# Gateways started by the tests (their children inherit this) write no heartbeat into the shared
# redis-server unless a test asks for one (tests/test_console.py): a module's gateway beating
# every few seconds would put a key back after each test's FLUSHALL, into tests that count keys.
os.environ.setdefault("LB_GW_FLEET_BEAT_S", "0")


async def until(condition: Callable[[], bool | Awaitable[bool]], seconds: float, *, every: float = 5 * MS) -> None:
    """Return once ``condition()`` holds, asking again every ``every`` seconds; fail after ``seconds``.

    For a condition no event announces: state inside Redis or another process, or how far other
    tasks of this loop have got. ``every=0`` asks after each step of the loop, for a state that
    only lasts a few steps."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while True:
        held = condition()
        if inspect.isawaitable(held):
            held = await held
        if held:
            return
        assert loop.time() < deadline, f"not within {seconds} s: {getattr(condition, '__qualname__', condition)}"
        await asyncio.sleep(every)


async def activity_events(r: redis.asyncio.Redis, key: str) -> list[dict[str, str]]:
    """Every event of an activity stream, oldest first: each applied submission (an entry per
    batch) and each moderation action (an entry each)."""
    entries = cast(list[tuple[str, dict[str, str]]], await r.xrange(key))
    return [event for _, fields in entries for event in activity.submissions(fields)]


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with RedisServer(tmp_path_factory.mktemp("redis")) as server:
        client = redis.Redis.from_url(server.url)
        client.function_load(library_code(), replace=True)
        client.close()
        yield server


@pytest.fixture
def redis_url(redis_server: RedisServer) -> Iterator[str]:
    client = redis.Redis.from_url(redis_server.url)
    client.flushall()  # keys only: the function library stays loaded
    client.close()
    yield redis_server.url


@pytest.fixture
async def r(redis_url: str) -> AsyncIterator[redis.asyncio.Redis]:
    client = connect(redis_url)
    assert isinstance(client, redis.asyncio.Redis)  # a plain server's URL: a plain client
    yield client
    await client.aclose()


@pytest.fixture
def config() -> GameConfig:
    return GameConfig(game="test")


@pytest.fixture
def lb(r: redis.asyncio.Redis, config: GameConfig) -> Leaderboard:
    return Leaderboard(r, config)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A private Redis Cluster (three masters, a replica each) for one module: a module that kills
    nodes leaves it to no other. Modules wanting another shape define their own."""
    with Cluster(tmp_path_factory.mktemp("cluster"), node_timeout_ms=1000) as c:
        yield c
