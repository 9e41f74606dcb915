"""Connections to a Redis Cluster (fleet/cluster.py, 3 masters): bounded pools that wait, several
seed nodes, and a scorer and a gateway started before any node answers."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis.asyncio
from redis.exceptions import ConnectionError as RedisConnectionError

from fleet.cluster import Cluster
from fleet.redis_server import free_ports
from gateway.server import Gateway
from leaderboard import GameConfig, connect
from leaderboard.errors import Unavailable
from leaderboard.settings import RedisPool
from leaderboard.transport import execute_packed
from scorer import Scorer, ScorerSettings

from .conftest import until
from .gw_helpers import T, settings
from .test_scorer_publisher import publish_many_boards
from .test_transport import blocked

pytestmark = [pytest.mark.timeout(90), pytest.mark.slow]  # slow: the module starts a cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with Cluster(tmp_path_factory.mktemp("cluster"), replicas=0) as c:
        yield c


async def test_a_small_cluster_pool_serves_many_concurrent_calls(cluster: Cluster) -> None:
    client = connect(cluster.url, pool=RedisPool(size=2, wait=5.0))
    try:
        await client.delete("{pool}:calls", "{pool}:packed")
        got = await asyncio.gather(*(client.incr("{pool}:calls") for _ in range(20)))
        packed = await asyncio.gather(*(execute_packed(client, ("INCR", "{pool}:packed")) for _ in range(20)))
        assert sorted(got) == list(range(1, 21)) and sorted(p[0] for p in packed) == list(range(1, 21))
    finally:
        await client.aclose()


async def until_blocked(host: str, port: int, count: int) -> None:
    """Poll the node (no event to await there) every 5 ms, bounded, until ``count`` clients block."""
    async with redis.asyncio.Redis(host=host, port=port) as node:
        await until(lambda: blocked(node, count), 2 * T)


async def test_a_cluster_pool_held_past_its_wait_is_unavailable(cluster: Cluster) -> None:
    client = connect(cluster.url, pool=RedisPool(size=2, wait=0.2 * T), socket_timeout=None)
    try:
        await client.ping()
        node = cluster.owner("{pool}:x")
        with node.client() as direct:
            before = int(direct.info("clients")["blocked_clients"])

        async def hold(key: str) -> object:
            return await client.blpop([key], timeout=0)

        held = [asyncio.create_task(hold(f"{{pool}}:never{i}")) for i in range(2)]
        await until_blocked(node.host, node.port, before + 2)
        with pytest.raises(Unavailable) as refused:
            await client.get("{pool}:x")
        assert refused.value.code == "unavailable"
        with pytest.raises(Unavailable):
            await execute_packed(client, ("GET", "{pool}:x"))
        for task in held:
            task.cancel()
        await asyncio.gather(*held, return_exceptions=True)
        assert await client.get("{pool}:x") is None  # places given back: served again
    finally:
        await client.aclose()


async def test_the_first_seed_down_the_second_answers(cluster: Cluster) -> None:
    (dead,) = free_ports(1)
    url = f"redis+cluster://127.0.0.1:{dead},{cluster.nodes[1].address}"
    client = connect(url)
    try:
        assert await client.set("{seed}:k", "v") and await client.get("{seed}:k") == "v"
    finally:
        await client.aclose()
    alone = connect(f"redis+cluster://127.0.0.1:{dead}")
    try:
        # no node answers: a lost connection, which callers retry (not a RedisClusterException)
        with pytest.raises(RedisConnectionError, match="cannot be connected"):
            await alone.ping()
    finally:
        await alone.aclose()


async def test_scorer_and_gateway_started_before_any_node_become_ready(tmp_path: Path) -> None:
    """Nothing answers when they start: both keep retrying (with backoff) instead of exiting or
    staying unready, and are ready once the cluster is up."""
    late = Cluster(tmp_path / "late", replicas=0)
    config = GameConfig(game="late")
    url = f"redis+cluster://{late.nodes[0].address},{late.nodes[1].address}"
    scorer = Scorer(ScorerSettings(redis_url=url, game=config, tick_ms=100, stats_interval_s=0))
    gw = Gateway(settings(url, game=config))
    try:
        starting = asyncio.create_task(scorer.start())
        await gw.start()
        assert gw._not_ready() == "redis unreachable" and not starting.done()
        await asyncio.to_thread(late.start)
        await asyncio.wait_for(starting, 20 * T)
        assert scorer._consuming, "the scorer's workers run"
        await asyncio.wait_for(gw.hub.connected.wait(), 20 * T)
        assert gw._not_ready() is None
    finally:
        await gw.close()
        await scorer.close()
        late.stop()


async def test_a_thousand_boards_due_in_one_tick_are_all_published_on_a_cluster(cluster: Cluster) -> None:
    config = GameConfig(game="many", windows=("alltime",), max_scopes=0)  # 999 regions: past the default cap
    client = connect(cluster.url)
    try:
        pub = await publish_many_boards(client, config, 1000)
        assert pub.stats.published == 1000 and await client.hlen(config.keys.published) == 1000
    finally:
        await client.aclose()
