"""The fleet as operators see it, against a real redis-server: a gateway's heartbeat shows with
its connections until it misses three intervals (then the read drops it and removes its field)
or forgets itself on stopping; the scorer group's consumers, the lease holder and the backlog as
the streams hold them."""

from __future__ import annotations

import redis.asyncio as aioredis

from leaderboard import GameConfig, fleetview, now_ms
from leaderboard.queue import SCORER_GROUP


async def test_heartbeats_consumers_lease_and_backlog(r: aioredis.Redis, config: GameConfig) -> None:
    keys = config.keys
    empty = await fleetview.read(r, keys)
    assert (empty["gateways"], empty["scorers"], empty["lease"], empty["backlog"]) == (
        [], [], None, {"queued": 0, "undelivered": 0, "pending": 0}
    )  # fmt: skip
    await fleetview.beat(r, keys, "gw-a", {"connections": 7}, every_s=1)
    await fleetview.beat(r, keys, "gw-b", {"connections": 5}, every_s=1)
    for i in range(3):
        await r.xadd(keys.submissions, {"id": f"s{i}"})
    await r.xgroup_create(keys.submissions, SCORER_GROUP, id="0")
    await r.xreadgroup(SCORER_GROUP, "vm-1", {keys.submissions: ">"}, count=1)  # one delivered, not acked
    await r.set(keys.publish_lease, "vm-1")
    view = await fleetview.read(r, keys)
    assert [(g["id"], g["connections"]) for g in view["gateways"]] == [("gw-a", 7), ("gw-b", 5)]
    assert view["connections"] == 12 and view["lease"] == "vm-1"
    assert [(s["name"], s["pending"]) for s in view["scorers"]] == [("vm-1", 1)]
    assert view["backlog"] == {"queued": 3, "undelivered": 2, "pending": 1}

    await fleetview.forget(r, keys, "gw-b")  # stopped
    later = await fleetview.read(r, keys, now=now_ms() + 3_500)  # gw-a missed three beats: gone
    assert later["gateways"] == [] and await r.hlen(keys.heartbeats) == 0
