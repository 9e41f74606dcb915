"""The transport's connection handling over a real redis-server: a connection torn down under a
command is a lost connection, a full pool waits (bounded) instead of failing at once, a budget
bounds the calls made inside it, and a cluster that cannot serve a call is Redis down."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
import redis.asyncio
from redis.exceptions import (
    ClusterDownError,
    MasterDownError,
    MovedError,
    RedisClusterUnreachableError,
    ResponseError,
    SlotNotCoveredError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from leaderboard import connect
from leaderboard.errors import Unavailable
from leaderboard.settings import RedisPool, SettingsError, cluster_seeds, redacted, redis_url_problem
from leaderboard.transport import _CLUSTER_DOWN, _down, _torn_down, execute_packed, redis_budget
from scorer import ScorerSettings

from .conftest import MS, until


async def test_a_connection_torn_down_under_a_command_is_a_lost_connection(redis_url: str) -> None:
    """redis-py disconnects connections that are in use (its cluster client: every connection of a
    node a failover's topology refresh drops). The command writing on one then met a writer set to
    None: ``AttributeError: 'NoneType' object has no attribute 'writelines'``, which killed the
    scorer's consumer. Every client's connections raise it as a lost connection instead."""
    client = connect(redis_url, socket_timeout=2)
    assert isinstance(client, redis.asyncio.Redis)
    try:
        conn = await client.connection_pool.get_connection()
        await conn.connect()
        # The write runs in a task of its own (the socket timeout's wait_for). One step of the
        # loop lets the command reach it (the write scheduled, not run); asyncio runs ready tasks
        # in order, so the disconnect comes first and the write finds the writer set to None.
        writing = asyncio.create_task(conn.send_packed_command(b"*1\r\n$4\r\nPING\r\n", check_health=False))
        await asyncio.sleep(0)
        await conn.disconnect(nowait=True)
        with pytest.raises(RedisConnectionError):
            await writing
        await client.connection_pool.release(conn)
        assert await client.ping()  # the pool goes on with a fresh connection
    finally:
        await client.aclose()


def test_any_other_attribute_error_is_not_hidden() -> None:
    writer: object = None
    assert _torn_down(_raised(lambda: writer.writelines([])))  # type: ignore[attr-defined]
    assert _torn_down(_raised(lambda: writer.drain()))  # type: ignore[attr-defined]
    assert not _torn_down(_raised(lambda: writer.wrong_name()))  # type: ignore[attr-defined]  # a bug
    assert not _torn_down(_raised(lambda: "a string".writelines))  # type: ignore[attr-defined]


def _raised(action: Callable[[], object]) -> AttributeError:
    try:
        action()
    except AttributeError as exc:
        return exc
    raise AssertionError("no AttributeError")


async def test_a_small_pool_serves_many_concurrent_calls(redis_url: str) -> None:
    client = connect(redis_url, pool=RedisPool(size=2, wait=5.0))
    try:
        got = await asyncio.gather(*(client.incr("calls") for _ in range(20)))
        packed = await asyncio.gather(*(execute_packed(client, ("INCR", "packed")) for _ in range(20)))
        assert sorted(got) == list(range(1, 21)) and sorted(p[0] for p in packed) == list(range(1, 21))
    finally:
        await client.aclose()


async def blocked(r: redis.asyncio.Redis, count: int) -> bool:
    return int((await r.info("clients"))["blocked_clients"]) >= count


async def test_a_pool_held_past_its_wait_is_unavailable(redis_url: str, r: redis.asyncio.Redis) -> None:
    client = connect(redis_url, pool=RedisPool(size=2, wait=200 * MS), socket_timeout=None)
    try:
        # both connections held by blocking reads that nothing will answer
        async def hold(key: str) -> object:
            return await client.blpop([key], timeout=0)

        held = [asyncio.create_task(hold(f"never{i}")) for i in range(2)]
        await until(lambda: blocked(r, 2), 2000 * MS)
        with pytest.raises(Unavailable) as refused:
            await client.get("x")
        assert refused.value.code == "unavailable" and isinstance(refused.value, RedisConnectionError)
        with pytest.raises(Unavailable):
            await execute_packed(client, ("GET", "x"))
        for task in held:
            task.cancel()
        await asyncio.gather(*held, return_exceptions=True)
    finally:
        await client.aclose()


async def test_a_budget_bounds_the_redis_time_of_all_the_calls_inside(redis_url: str) -> None:
    """``redis_budget`` (each HTTP API request's): the calls' durations add up, and the call that
    would take the sum past the bound is cut, whatever kind of call it is."""
    client = connect(redis_url, socket_timeout=None)
    try:
        assert await client.ping()  # the connection made outside the budget
        with redis_budget(1000 * MS):
            # Redis answers a BLPOP no sooner than its timeout (and up to a cron tick later on a
            # busy machine): at least 0.4 s of the 1 s is spent, so 0.7 s more cannot fit, though
            # alone it would.
            assert await client.blpop(["empty"], timeout=0.4) is None
            with pytest.raises(RedisTimeoutError):
                await client.blpop(["empty"], timeout=0.7)

        async def piped() -> list[object]:
            pipe = client.pipeline(transaction=False)
            pipe.blpop(["empty"], timeout=5)
            return await pipe.execute()

        calls: list[Callable[[], Awaitable[object]]] = [
            lambda: client.blpop(["empty"], timeout=5),
            lambda: execute_packed(client, ("BLPOP", "empty", 5)),
            piped,
        ]
        for call in calls:
            with redis_budget(100 * MS), pytest.raises(RedisTimeoutError):
                await call()
        assert await client.ping()  # outside a budget, unbounded; the cut connections are not reused
    finally:
        await client.aclose()


@pytest.mark.parametrize(
    "error",
    [
        ClusterDownError("The cluster is down"),
        MasterDownError("Link with MASTER is down and replica-serve-stale-data is set to 'no'."),
        TryAgainError("Multiple keys request during rehashing of slot"),
        MovedError("3999 127.0.0.1:6381"),
        SlotNotCoveredError('Slot "3999" not covered by the cluster.'),
        RedisClusterUnreachableError("Redis Cluster cannot be connected."),
    ],
    ids=type,
)
def test_a_cluster_that_cannot_serve_a_call_is_redis_down(error: Exception) -> None:
    """What redis-py raises when a cluster cannot serve a call now: the callers' "Redis is down,
    back off" (a ConnectionError), never an error that ends a process."""
    assert isinstance(error, _CLUSTER_DOWN)
    down = _down(error)
    assert isinstance(down, RedisConnectionError) and down.code == "unavailable"
    # a refusal of the call itself stays one
    assert not isinstance(ResponseError("WRONGTYPE Operation against a key holding the wrong kind"), _CLUSTER_DOWN)


# ---------------------------------------------------------------- cluster URLs


def test_a_cluster_url_names_several_seed_nodes() -> None:
    url = "redis+cluster://:s3cr3t@10.0.0.1:7000, 10.0.0.2:7001/0?socket_timeout=2"
    assert cluster_seeds(url) == [
        "redis://:s3cr3t@10.0.0.1:7000/0?socket_timeout=2",
        "redis://:s3cr3t@10.0.0.2:7001/0?socket_timeout=2",
    ]
    assert cluster_seeds("rediss+cluster://h:1") == ["rediss://h:1"] and cluster_seeds("redis://h:1/0") is None
    assert redis_url_problem(url) is None
    assert redacted(url) == "redis+cluster://:***@10.0.0.1:7000, 10.0.0.2:7001/0?socket_timeout=2"


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("redis+cluster://u:one@h1:1,u:two@h2:2", "credentials per node"),
        ("redis+cluster://h1:1,h2:port", "is not a Redis URL"),
        ("redis+cluster://h1:1,", "without a host"),
    ],
)
def test_a_bad_cluster_url_is_refused_with_every_password_hidden(url: str, problem: str) -> None:
    said = redis_url_problem(url)
    assert said is not None and problem in said
    assert "one" not in said and "two" not in said  # the passwords, redacted
    with pytest.raises(SettingsError, match=problem) as refused:
        ScorerSettings(redis_url=url)
    assert "one" not in str(refused.value) and "two" not in str(refused.value)
    assert redacted("redis+cluster://u:one@h1:1,u:two@h2:2") == "redis+cluster://u:***@h1:1,u:***@h2:2"
