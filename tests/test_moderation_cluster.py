"""Moderation and profiles through a Redis Cluster client: the ban's SCAN must find a game's
boards on whichever master holds its slot. And the players' reads on the replica of that master
(``READONLY``), with the offsets of every shard checked (leaderboard/replicas.py)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from fleet.cluster import Cluster, ClusterNode
from leaderboard import GameConfig, Leaderboard, Moderation, Profile, connect, now_ms
from leaderboard.replicas import Replicas

from .conftest import until
from .test_replicas import FAST, T

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]  # slow: the module starts a cluster


async def test_ban_correct_and_profile_on_a_cluster(cluster: Cluster) -> None:
    redis = connect(cluster.url)
    try:
        lb = Leaderboard(redis, GameConfig(game="modc"))
        await lb.load()
        ts = now_ms()
        slips = [
            {"id": "1", "player": "cheat", "points": "900", "ts": str(ts), "region": "eu"},
            {"id": "2", "player": "ana", "points": "10", "ts": str(ts)},
        ]
        assert [r.status for r in await lb.submit_batch(slips)] == ["ok", "ok"]
        mod = Moderation(lb)
        assert (await mod.ban("cheat", actor="ops", reason="bot")).boards == 6  # 3 windows x 2 scopes
        assert [e.player for e in (await lb.top("weekly")).entries] == ["ana"]
        [refused] = await lb.submit_batch([{**slips[0], "id": "3"}])
        assert refused.code == "banned"
        rows = await mod.correct("ana", 20, actor="ops", reason="r")
        assert {c.previous for c in rows} == {10}
        await mod.set_profile("ana", Profile(name="Ana", country="PT"))
        [standing] = (await lb.ranks(["ana"], "weekly", profiles=True)).standings
        assert (standing.score, standing.profile) == (20, {"name": "Ana", "country": "PT"})
    finally:
        await redis.aclose()


async def test_reads_on_the_replica_of_the_games_master(cluster: Cluster) -> None:
    redis = connect(cluster.url)
    replicas = Replicas(redis, FAST)
    try:
        plain = Leaderboard(redis, GameConfig(game="replc"))
        await plain.load()
        lb = plain.reading_from(replicas)
        ts = now_ms()
        await plain.submit_batch(
            [{"id": str(i), "player": p, "points": str(10 * i), "ts": str(ts)} for i, p in enumerate("abc", 1)]
        )
        owner = cluster.owner(plain.keys.activity)
        [replica] = cluster.replicas_of(owner)
        await until(_current(replicas, 3), 5 * T)  # one replica per master
        on_owner, on_replica = _ro_calls(owner), _ro_calls(replica)
        assert [e.player for e in (await lb.top("weekly")).entries] == ["c", "b", "a"]
        [standing] = (await lb.ranks(["a"], "weekly", profiles=True)).standings
        assert standing.rank == 3
        assert (_ro_calls(owner), _ro_calls(replica)) == (on_owner, on_replica + 2)
    finally:
        await replicas.aclose()
        await redis.aclose()


def _current(replicas: Replicas, count: int) -> Callable[[], Awaitable[bool]]:
    async def checked() -> bool:
        await replicas.check()  # the checks run by hand here: each call one round
        return len(replicas.current()) == count

    return checked


def _ro_calls(node: ClusterNode) -> int:
    with node.client() as c:
        return int(c.info("commandstats").get("cmdstat_fcall_ro", {}).get("calls", 0))
