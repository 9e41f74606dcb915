"""A Redis Cluster losing more than a failover mends (fleet/cluster.py: 3 masters, 1 replica each):
one game's whole shard (its master and its replica) SIGKILLed and restarted empty, and every node
down at once. The scorer waits for Redis instead of exiting (CLUSTERDOWN from a node that has
just come back, no node answering at all: both are "Redis is down, back off"), the function
library is loaded again by whoever meets it missing, and the game's slips sent once Redis is
back are applied, none lost. An HTTP API request meanwhile is answered within its Redis bound."""

from __future__ import annotations

import asyncio
import contextlib
import time
import traceback
from collections.abc import AsyncIterator

import httpx
import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from fleet.cluster import Cluster, ClusterNode, keyslot_names
from leaderboard import GameConfig, Leaderboard, RedisClient, Submission, connect, now_ms
from leaderboard.queue import Queue
from scorer import Scorer, ScorerSettings

from .gw_helpers import T
from .test_api import PLAYER, api_process

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]  # slow: the module starts a cluster


@contextlib.asynccontextmanager
async def scorer(cluster: Cluster, config: GameConfig) -> AsyncIterator[Scorer]:
    settings = ScorerSettings(
        redis_url=cluster.url, game=config, name="outages", tick_ms=100, stats_interval_s=0, metrics_port=0
    )
    async with Scorer(settings) as s:
        yield s


def ended(s: Scorer) -> list[str]:
    """The scorer's workers that ended (its consumers, publishers, badge workers, metrics sampler),
    each with its traceback: any of them ending takes the scorer process down."""
    return [
        "".join(traceback.format_exception(t.exception())) if not t.cancelled() else "cancelled"
        for t in (*s._consuming, *s._others)
        if t.done()
    ]


async def submit(queue: Queue, sid: str, player: str, points: int, within: float) -> None:
    """As a game server does: retry what the fleet calls Redis unavailable (a lost connection, a
    timeout), with the same id, until the queue acknowledges it. Anything else fails the test."""
    async with asyncio.timeout(within):
        while True:
            try:
                await queue.submit(Submission(sid, player, points, now_ms()))
                return
            except (RedisConnectionError, RedisTimeoutError, OSError):
                await asyncio.sleep(0.1)  # the game server's pause between retries, by design


async def applied(redis: RedisClient, config: GameConfig, players: list[str], s: Scorer, within: float) -> None:
    """Until every player is on the game's all-time board (the scorer applied their slips)."""
    lb = Leaderboard(redis, config)
    deadline = time.monotonic() + within
    while True:
        with contextlib.suppress(RedisConnectionError, RedisTimeoutError):
            ranks = await lb.ranks(players, "alltime")
            if all(st.rank is not None for st in ranks.standings):
                return
        assert not ended(s), f"the scorer stopped: {ended(s)}"
        assert time.monotonic() < deadline, f"{players} not applied within {within} s"
        await asyncio.sleep(0.05)


def restart(nodes: list[ClusterNode]) -> None:
    """Start the killed nodes again on their ports, with their cluster config (nodes.conf) and no
    data: no persistence, so they come back empty — without the function library too."""
    for node in nodes:
        node.start()


async def test_a_shard_lost_and_back_empty_costs_the_scorer_nothing(cluster: Cluster) -> None:
    games = keyslot_names(cluster.masters(), "shard", 3)
    config = GameConfig(games=tuple(games))
    lost, others = config.for_game(games[0]), [config.for_game(g) for g in games[1:]]
    redis = connect(cluster.url)
    queues = {c.game: Queue(redis, c) for c in config.served}
    try:
        async with scorer(cluster, config) as s:
            for c in config.served:
                await submit(queues[c.game], f"{c.game}-0", f"{c.game}-before", 100, 5 * T)
                await applied(redis, c, [f"{c.game}-before"], s, 5 * T)

            master = cluster.owner(f"{{{lost.game}}}")
            shard = [master, *cluster.replicas_of(master)]
            assert len(shard) == 2, "the game's master and its replica"
            for node in shard:
                cluster.kill(node)
            # the other games are served meanwhile: only the lost shard's game waits
            for c in others:
                await submit(queues[c.game], f"{c.game}-1", f"{c.game}-during", 100, 10 * T)
                await applied(redis, c, [f"{c.game}-during"], s, 10 * T)
            # restarted in a thread: the scorer (on this loop) meets the shard as it comes back
            await asyncio.to_thread(restart, shard)
            # back, empty: it answers CLUSTERDOWN until it is in step with the others, and then
            # "Function not found" until someone loads the library there (here: the queue's
            # enqueue, or the scorer's read), not only a scorer that starts
            players = [f"{lost.game}-after-{i}" for i in range(5)]
            for i, player in enumerate(players):
                await submit(queues[lost.game], f"{lost.game}-after-{i}", player, 200 + i, 20 * T)
            await applied(redis, lost, players, s, 20 * T)
            assert not ended(s)
            with master.client() as c:
                assert c.execute_command("FUNCTION", "LIST", "LIBRARYNAME", "leaderboard")
            # and the other games still go on
            for c in others:
                await submit(queues[c.game], f"{c.game}-2", f"{c.game}-after", 100, 5 * T)
                await applied(redis, c, [f"{c.game}-after"], s, 5 * T)
    finally:
        await redis.aclose()


async def test_every_node_down_then_back_the_scorer_waits_and_resumes(cluster: Cluster) -> None:
    games = keyslot_names(cluster.masters(), "all", 3)
    config = GameConfig(games=tuple(games))
    redis = connect(cluster.url)
    queues = {c.game: Queue(redis, c) for c in config.served}
    try:
        async with scorer(cluster, config) as s:
            for c in config.served:
                await submit(queues[c.game], f"{c.game}-0", f"{c.game}-before", 100, 5 * T)
                await applied(redis, c, [f"{c.game}-before"], s, 5 * T)
            nodes = cluster.live()
            for node in nodes:
                cluster.kill(node)
            # No node answers: every worker and the metrics sampler (once a second) meet it, again
            # and again, for longer than it took them to exit before (3.1-3.7 s); a sleep by design.
            await asyncio.sleep(4.0)
            assert not ended(s)
            await asyncio.to_thread(restart, nodes)
            for c in config.served:
                await submit(queues[c.game], f"{c.game}-1", f"{c.game}-after", 200, 20 * T)
            for c in config.served:
                await applied(redis, c, [f"{c.game}-after"], s, 20 * T)
            assert not ended(s)
    finally:
        await redis.aclose()


async def test_an_api_request_is_bounded_by_its_redis_timeout_with_a_shard_down(cluster: Cluster) -> None:
    """LB_API_REDIS_TIMEOUT bounds a request's Redis time on a cluster too: redis-py's cluster
    client retries a call, refreshes the layout and tries node after node within it (3.6 s for
    a 503 with 2 s set), which no socket timeout bounds."""
    [game] = keyslot_names(cluster.masters(), "api", 1)
    config = GameConfig(game=game)
    redis = connect(cluster.url)
    try:
        await Leaderboard(redis, config).submit_batch([Submission("a-1", "mia", 100, now_ms()).fields()])
        with api_process(cluster.url, LB_GAME=game, LB_API_REDIS_TIMEOUT="0.5") as url:
            async with httpx.AsyncClient(base_url=url, timeout=30) as http:
                mine = "/v1/boards/global/players/mia"
                assert (await http.get(mine, headers=PLAYER)).json()["rank"] == 1
                master = cluster.owner(f"{{{game}}}")
                shard = [master, *cluster.replicas_of(master)]
                for node in shard:
                    cluster.kill(node)
                try:
                    took = []
                    for _ in range(3):
                        started = time.monotonic()
                        resp = await http.get(mine, headers=PLAYER)
                        took.append(time.monotonic() - started)
                        assert resp.status_code == 503 and resp.json()["code"] == "unavailable"
                    # the bound and the HTTP round trip; a request without it took seconds
                    assert max(took) < 0.5 + 0.7 * T, f"answered after {took} s"
                finally:
                    await asyncio.to_thread(restart, shard)
    finally:
        await redis.aclose()
