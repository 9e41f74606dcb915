"""Reads from replicas with a bounded staleness (leaderboard/replicas.py), against a real
redis-server master with a real replica (``replicaof``): where each read ran is counted by the
servers themselves (``INFO commandstats``), a paused replica is a SIGSTOPped process, a lagging
one a replica whose replication stream is held (``CLIENT PAUSE WRITE`` on it: it still answers
reads, but applies nothing the master sends)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
import redis
import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry

from fleet.redis_server import RedisServer
from leaderboard import BadRequest, BoardEntries, GameConfig, Leaderboard, Submission, connect, now_ms
from leaderboard.library import library_code
from leaderboard.replicas import ReplicaMetrics, Replicas
from leaderboard.settings import ReplicaReads, SettingsError

from .conftest import MS, until
from .gw_helpers import client, greet, recv_type, request, running, token
from .test_api import PLAYER as API_PLAYER
from .test_api import api_process

T = 1000 * MS
# tight enough for cheap tests; the defaults are documented in docs/configuration.md
FAST = ReplicaReads(enabled=True, max_lag_ms=300, check_ms=20, timeout_ms=150)


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RedisServer, RedisServer]]:
    """A master and its replica, for this module only (its tests pause the replica)."""
    base = tmp_path_factory.mktemp("replicas")
    with RedisServer(base / "master") as master:
        client = redis.Redis.from_url(master.url)
        client.function_load(library_code(), replace=True)
        client.close()
        with RedisServer(base / "replica", replica_of=(master.host, master.port)) as replica:
            yield master, replica


@pytest.fixture
async def clients(servers: tuple[RedisServer, RedisServer]) -> AsyncIterator[tuple[aioredis.Redis, aioredis.Redis]]:
    master, replica = servers
    m = connect(master.url)
    rep = connect(replica.url)
    assert isinstance(m, aioredis.Redis) and isinstance(rep, aioredis.Redis)
    await m.flushall()  # keys only: the library stays
    await until(lambda: _synced(m, rep), 10 * T)
    yield m, rep
    await m.aclose()
    await rep.aclose()


async def _synced(m: aioredis.Redis, rep: aioredis.Redis) -> bool:
    info = await rep.info("replication")
    offset = (await m.info("replication"))["master_repl_offset"]
    return bool(info["master_link_status"] == "up" and info["slave_repl_offset"] >= offset)


@contextlib.asynccontextmanager
async def routed(
    m: aioredis.Redis, settings: ReplicaReads = FAST
) -> AsyncIterator[tuple[Leaderboard, Replicas, CollectorRegistry]]:
    """The game's wrappers reading through a ``Replicas`` whose checks run, and its metrics'
    registry; mia on the board, and the replica current (when reads may go there)."""
    replicas = Replicas(m, settings)
    metrics = CollectorRegistry()
    metrics.register(ReplicaMetrics(replicas))
    checks = asyncio.create_task(replicas.run_forever())
    try:
        lb = Leaderboard(m, GameConfig(game="test")).reading_from(replicas)
        await submit(lb, "mia", 100)
        if settings.enabled:
            await until(lambda: bool(replicas.current()), 2 * T)
        yield lb, replicas, metrics
    finally:
        checks.cancel()
        await asyncio.gather(checks, return_exceptions=True)
        await replicas.aclose()


async def ro_calls(client: aioredis.Redis) -> int:
    return int((await client.info("commandstats")).get("cmdstat_fcall_ro", {}).get("calls", 0))


def count(metrics: CollectorRegistry, name: str, label: str) -> float:
    """A sample of the exported lb_replica_reads (by ``served``) or lb_replica_fallbacks (by ``reason``)."""
    value = metrics.get_sample_value(f"lb_replica_{name}_total", {"served" if name == "reads" else "reason": label})
    assert value is not None, (name, label)
    return value


async def taken_back(lb: Leaderboard, replicas: Replicas, rep: aioredis.Redis) -> BoardEntries:
    """Once the replica is current again, a read runs there; the top it read."""
    await until(lambda: bool(replicas.current()), 3 * T)
    on_replica = await ro_calls(rep)
    top = await lb.top("weekly")
    assert await ro_calls(rep) == on_replica + 1
    return top


async def submit(lb: Leaderboard, player: str, points: int, n: int = 0) -> None:
    await lb.submit_batch([Submission(f"{player}-{points}-{n}", player, points, now_ms()).fields()], rows=False)


async def test_reads_are_served_by_the_replica(clients: tuple[aioredis.Redis, aioredis.Redis]) -> None:
    m, rep = clients
    async with routed(m) as (lb, _replicas, metrics):
        await submit(lb, "leo", 200)
        await submit(lb, "ana", 300)
        await until(lambda: _synced(m, rep), 2 * T)
        on_master, on_replica = await ro_calls(m), await ro_calls(rep)
        top = await lb.top("weekly")
        around = await lb.around("leo", "weekly", k=1)
        ranks = await lb.ranks(["mia", "ana", "zed"], "weekly", profiles=True)
        assert [e.player for e in top.entries] == ["ana", "leo", "mia"]
        assert [e.player for e in around.entries] == ["ana", "leo", "mia"]
        assert [s.rank for s in ranks.standings] == [3, 1, None]
        assert await ro_calls(rep) - on_replica == 3  # every read ran on the replica ...
        assert await ro_calls(m) == on_master  # ... none on the master
        assert count(metrics, "reads", "replica") == 3 and count(metrics, "reads", "master") == 0
        assert metrics.get_sample_value("lb_replica_current") == 1


async def test_turned_off_every_read_stays_on_the_master(clients: tuple[aioredis.Redis, aioredis.Redis]) -> None:
    m, rep = clients
    async with routed(m, ReplicaReads(enabled=False)) as (lb, replicas, metrics):
        on_replica, on_master = await ro_calls(rep), await ro_calls(m)
        await lb.top("weekly")
        await lb.ranks(["mia"], "weekly")
        assert await ro_calls(rep) == on_replica
        assert await ro_calls(m) - on_master == 2
        assert replicas.replicas() == []  # nothing checked either
        assert count(metrics, "reads", "master") == 2


async def test_a_paused_replica_is_left_for_the_master_at_once_and_taken_back(
    clients: tuple[aioredis.Redis, aioredis.Redis], servers: tuple[RedisServer, RedisServer]
) -> None:
    m, rep = clients
    process = servers[1].process
    assert process is not None
    async with routed(m) as (lb, replicas, metrics):
        loop = asyncio.get_running_loop()
        os.kill(process.pid, signal.SIGSTOP)
        try:
            started = loop.time()
            ranks = await lb.ranks(["mia"], "weekly")  # sent to the replica, unanswered, read on the master
            assert ranks.standings[0].rank == 1
            assert loop.time() - started < FAST.timeout_ms / 1000 + 0.5 * T
            assert count(metrics, "fallbacks", "unanswered") == 1
            assert replicas.current() == []  # left at once, not when its bound runs out
            started = loop.time()
            await lb.top("weekly")
            assert loop.time() - started < 0.1 * T  # straight to the master now
            assert count(metrics, "fallbacks", "lag") >= 1
        finally:
            os.kill(process.pid, signal.SIGCONT)
        await taken_back(lb, replicas, rep)


async def test_a_lagging_replica_is_not_read_until_it_caught_up(
    clients: tuple[aioredis.Redis, aioredis.Redis],
) -> None:
    m, rep = clients
    async with routed(m) as (lb, replicas, metrics):
        await rep.execute_command("CLIENT", "PAUSE", int(10 * T * 1000), "WRITE")  # it applies nothing
        try:
            points = 100
            while replicas.current():  # the master takes writes; the replica falls behind
                points += 1
                await submit(lb, "leo", points)
                await asyncio.sleep(5 * MS)
            lagging_since = asyncio.get_running_loop().time()
            points += 1
            await submit(lb, "leo", points)
            on_replica = await ro_calls(rep)
            top = await lb.top("weekly")
            assert top.entries[0].player == "leo" and top.entries[0].score == points  # the master's newest
            assert await ro_calls(rep) == on_replica
            assert count(metrics, "fallbacks", "lag") >= 1
            [stale] = replicas.replicas()
            assert stale.staleness(lagging_since) > FAST.max_lag_ms / 1000
        finally:
            await rep.execute_command("CLIENT", "UNPAUSE")
        top = await taken_back(lb, replicas, rep)
        assert top.entries[0].score == points  # caught up: the newest write, from the replica


async def test_bad_input_is_refused_by_the_replica_as_by_the_master(
    clients: tuple[aioredis.Redis, aioredis.Redis],
) -> None:
    m, rep = clients
    async with routed(m) as (lb, _replicas, metrics):
        on_master, on_replica = await ro_calls(m), await ro_calls(rep)
        with pytest.raises(BadRequest) as refused:
            await lb.top("weekly", n=-5)
        assert refused.value.code == "bad_request"
        assert await ro_calls(rep) == on_replica + 1  # the library refused it on the replica ...
        assert await ro_calls(m) == on_master  # ... and it was not tried again on the master
        assert count(metrics, "fallbacks", "refused") == 0


def test_the_check_must_be_shorter_than_the_bound() -> None:
    with pytest.raises(SettingsError):
        ReplicaReads(enabled=True, max_lag_ms=100, check_ms=100)


async def test_a_replica_server_has_the_masters_password(tmp_path: Path) -> None:
    with (
        RedisServer(tmp_path / "m", password="s3cret") as master,
        RedisServer(tmp_path / "r", password="s3cret", replica_of=(master.host, master.port)) as replica,
    ):
        m, rep = connect(master.url), connect(replica.url)
        assert isinstance(m, aioredis.Redis) and isinstance(rep, aioredis.Redis)
        try:
            await m.set("k", "v")
            await until(lambda: _synced(m, rep), 10 * T)
            assert await rep.get("k") == "v"
        finally:
            await m.aclose()
            await rep.aclose()


async def test_a_gateways_rank_pushes_and_requests_are_read_on_the_replica(
    clients: tuple[aioredis.Redis, aioredis.Redis], servers: tuple[RedisServer, RedisServer]
) -> None:
    m, rep = clients
    lb = Leaderboard(m, GameConfig(game="test"))
    await submit(lb, "mia", 300)
    await submit(lb, "leo", 200)
    async with running(servers[0].url, rank_interval=0.05, replicas=FAST) as gw:
        await until(lambda: bool(gw.replicas.current()), 2 * T)
        on_replica = await ro_calls(rep)
        async with client(gw, f"?token={token('mia')}") as ws:
            await greet(ws)
            pushed = await recv_type(ws, "rank")
            assert (pushed["rank"], pushed["score"]) == (1, 300)
            around = await request(ws, {"type": "around", "k": 1}, "around")
            assert [e["player"] for e in around["entries"]] == ["mia", "leo"]
        assert await ro_calls(rep) >= on_replica + 2  # the push's read and the request's
        assert count(gw.metrics.registry, "reads", "replica") >= 2


def test_the_http_apis_reads_are_read_on_the_replica(servers: tuple[RedisServer, RedisServer]) -> None:
    master, replica = servers
    m, rep = redis.Redis.from_url(master.url), redis.Redis.from_url(replica.url)

    def calls(node: redis.Redis) -> int:
        return int(node.info("commandstats").get("cmdstat_fcall_ro", {}).get("calls", 0))

    lb_env = {"LB_READ_REPLICAS": "1", "LB_REPLICA_MAX_LAG_MS": "300", "LB_REPLICA_CHECK_MS": "20"}
    try:
        with api_process(master.url, **lb_env) as url, httpx.Client(base_url=url, headers=API_PLAYER) as http:
            asyncio.run(_seed(master.url))
            on_master, on_replica, reads = calls(m), calls(rep), 0
            # the replica is current a few checks after the API's start: until then, the master reads
            while calls(rep) == on_replica:
                assert reads < 100, "no read reached the replica"
                answer = http.get("/v1/boards/global/players/mia/around", params={"k": 1})
                assert answer.status_code == 200 and answer.json()["entries"][0]["player"] == "mia"
                reads += 1
            assert calls(rep) == on_replica + 1 and calls(m) == on_master + reads - 1  # each read once
    finally:
        m.close()
        rep.close()


async def _seed(url: str) -> None:
    client = connect(url)
    assert isinstance(client, aioredis.Redis)
    await submit(Leaderboard(client, GameConfig(game="test")), "mia", 100)
    await client.aclose()
