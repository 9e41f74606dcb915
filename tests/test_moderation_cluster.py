"""Moderation and profiles through a Redis Cluster client: the ban's SCAN must find a game's
boards on whichever master holds its slot."""

from __future__ import annotations

import pytest

from fleet.cluster import Cluster
from leaderboard import GameConfig, Leaderboard, Moderation, Profile, connect, now_ms

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
