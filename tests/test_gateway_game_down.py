"""One game's Redis down, the others serving: two games on two masters of a private Redis Cluster
with no replicas (fleet/cluster.py), so a killed master stays down for as long as the test needs.
The gateway stays ready, refuses only the dead game's new sockets (1013 "game unavailable: <game>"),
keeps that game's open sockets, and the healthy game's sockets, old and new, get every snapshot."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Iterator

import pytest
from redis.exceptions import RedisError

from client.backoff import Backoff
from client.connection import LeaderboardClient
from fleet.cluster import Cluster, keyslot_names
from leaderboard import GameConfig, connect
from leaderboard.library import library_code

from .gw_helpers import T, announced_close, client, greet, http_get, recv_type, request, running, snapshot, url

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with Cluster(tmp_path_factory.mktemp("cluster"), replicas=0, node_timeout_ms=1000) as c:
        for node in c.nodes:  # a new socket's first snapshot is built from the board by a function
            with node.client() as r:
                r.function_load(library_code(), replace=True)
        yield c


async def test_a_game_whose_shard_is_down_refuses_only_its_own_new_sockets(cluster: Cluster) -> None:
    # The seed node (the URL's) stays up: only the other two games' masters qualify as victims.
    seed = cluster.nodes[0]
    names = keyslot_names(cluster.masters(), "game", 3)
    healthy = next(g for g in names if cluster.owner(f"{{{g}}}") is seed)
    dead = next(g for g in names if g != healthy)
    victim = cluster.owner(f"{{{dead}}}")
    config = GameConfig(games=(healthy, dead))
    redis = connect(cluster.url, decode=False)
    try:
        async with running(cluster.url, game=config) as gw:
            await asyncio.wait_for(asyncio.gather(*(g.hub.connected.wait() for g in gw.games.values())), 10 * T)
            keys = config.for_game(healthy).keys

            async def publish(version: int) -> None:
                payload = snapshot(version, window=gw.settings.window)
                await redis.set(keys.latest(gw.settings.window, "global"), payload)
                await redis.spublish(keys.snapshot_channel(gw.settings.window, "global"), payload)

            await publish(1)
            async with client(gw, f"?game={dead}") as dead_old, client(gw, f"?game={healthy}") as healthy_old:
                await greet(dead_old)
                await greet(healthy_old)

                cluster.kill(victim)
                async with asyncio.timeout(10 * T):
                    while gw.games[dead].hub.connected.is_set():  # noqa: ASYNC110 (the hub has no "lost" event)
                        await asyncio.sleep(0.02)

                # Still in the balancer: the other game is served.
                status, _, body = await http_get(gw.port, "/readyz")
                assert (status, body) == (200, b"ready\n")

                # The dead game's new sockets are refused with a reason clients back off from.
                async with client(gw, f"?game={dead}") as refused:
                    assert await announced_close(refused, 2 * T) == (1013, f"game unavailable: {dead}")
                # The Python client takes it as "overloaded": it backs off (at least to the
                # overload floor's cap, here 1000 s) and keeps trying, it does not stop.
                backoff = Backoff(base=0.01, overload_floor=1000.0, rng=random.Random(1))
                async with LeaderboardClient(url(gw, f"?game={dead}"), backoff=backoff) as app:
                    await app.wait_for(lambda m: m.get("status") == "reconnecting", 5 * T)
                    assert app.retry_in is not None and app.retry_in > 1.0 and app.connects == 0

                # The healthy game admits new sockets, and every socket of it gets each snapshot
                # while the dead game's hub keeps trying its master.
                async with client(gw, f"?game={healthy}") as healthy_new:
                    welcome, first = await greet(healthy_new)
                    assert (welcome["game"], first["version"]) == (healthy, 1)
                    for version in range(2, 7):
                        sent = time.monotonic()
                        await publish(version)
                        for ws in (healthy_old, healthy_new):
                            assert (await recv_type(ws, "snapshot", T))["version"] == version
                        assert time.monotonic() - sent < T
                        await asyncio.sleep(0.2 * T)  # a tick apart, across the hub's retries

                # The dead game's open socket is still open,
                assert (await request(dead_old, {"type": "ping", "id": 1}, "pong"))["id"] == 1
                assert gw.games[healthy].hub.connected.is_set() and not gw.games[dead].hub.connected.is_set()

                # and once its shard is back, gets the game's snapshots again; new sockets get in.
                await asyncio.to_thread(victim.start)
                await asyncio.wait_for(gw.games[dead].hub.connected.wait(), 15 * T)
                dead_keys = config.for_game(dead).keys
                payload = snapshot(7, window=gw.settings.window)
                async with asyncio.timeout(10 * T):
                    while True:  # the test's own cluster client learns the layout again
                        try:
                            await redis.set(dead_keys.latest(gw.settings.window, "global"), payload)
                            await redis.spublish(dead_keys.snapshot_channel(gw.settings.window, "global"), payload)
                            break
                        except (RedisError, OSError):
                            await asyncio.sleep(0.1)
                assert (await recv_type(dead_old, "snapshot", 5 * T))["version"] == 7
                async with client(gw, f"?game={dead}") as back:
                    welcome, first = await greet(back)
                    assert (welcome["game"], first["version"]) == (dead, 7)
    finally:
        await redis.aclose()
