"""The snapshot publisher: only on change, one publisher among replicas, takeover, rollover."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any

import orjson
import redis.asyncio as aioredis

from leaderboard import GameConfig, Leaderboard
from leaderboard.moderation import Moderation
from leaderboard.profiles import Profile
from scorer import Publisher, ScorerSettings, Stats
from scorer.publisher import Current, due_boards

from .conftest import MS, NOW
from .lb_helpers import store_profile

SETTINGS: dict[str, Any] = dict(tick_ms=50, lease_ttl_ms=300, metrics_port=0)


def slip(sid: str, player: str, points: int, ts: int = NOW) -> dict[str, str]:
    return {"id": sid, "player": player, "points": str(points), "ts": str(ts)}


class Channel:
    """A subscription to one board's channel; ``quiet()`` proves no message came by publishing a
    marker and requiring it to be the very next message."""

    def __init__(self, r: aioredis.Redis, name: str) -> None:
        self.r, self.name, self.pubsub = r, name, r.pubsub()

    async def __aenter__(self) -> Channel:
        await self.pubsub.ssubscribe(self.name)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.pubsub.aclose()

    async def next(self) -> Any:
        async def get() -> Any:
            while True:
                msg = await self.pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
                if msg is not None:
                    return orjson.loads(msg["data"])

        return await asyncio.wait_for(get(), 3000 * MS)

    async def quiet(self) -> bool:
        await self.r.spublish(self.name, b'"marker"')
        return bool(await self.next() == "marker")


def leads(p: Publisher) -> bool:
    return p.leader  # a call, so the checker does not narrow the property between ticks


def publisher(r: aioredis.Redis, config: GameConfig, owner: str, clock: list[int], **overrides: Any) -> Publisher:
    settings = ScorerSettings(redis_url="redis://unused", game=config, name=owner, **(SETTINGS | overrides))
    return Publisher(r, settings, Stats(), now=lambda: clock[0])


async def test_publishes_only_when_the_top_changes(r: aioredis.Redis, lb: Leaderboard, config: GameConfig) -> None:
    clock = [NOW + 1000]
    pub = publisher(r, config, "p1", clock)
    async with Channel(r, config.keys.snapshot_channel("weekly", "global")) as channel:
        await lb.submit_batch([slip("1", "ana", 50), slip("2", "ben", 70)], now=clock[0])
        await store_profile(lb, "ben", {"name": "Ben"})
        await pub.tick()
        snap = await channel.next()
        assert snap["type"] == "snapshot" and snap["board"] == "global" and snap["window"] == "weekly"
        # no published record yet: the board's first version is the clock's (ms)
        assert snap["period"] == "2030-W48" and snap["version"] == clock[0] and snap["ts"] == clock[0]
        assert snap["entries"] == [
            {"rank": 1, "player": "ben", "score": 70, "name": "Ben"},
            {"rank": 2, "player": "ana", "score": 50},
        ]
        latest: Any = await r.get(config.keys.latest("weekly", "global"))
        assert orjson.loads(latest) == snap and await r.ttl(config.keys.latest("weekly", "global")) > 0
        for _ in range(4):  # several ticks, nothing changed
            assert await pub.tick() == []
        assert await channel.quiet()
        await lb.submit_batch([slip("3", "ana", 10)], now=clock[0])  # below her best: no top change
        assert await pub.tick() == []
        await lb.submit_batch([slip("4", "ana", 90)], now=clock[0])
        [due] = [d for d in await pub.tick() if d.window == "weekly"]
        assert due.version > 1  # the top-N version, bumped twice: the snapshot's is the next
        after = await channel.next()
        assert after["version"] == snap["version"] + 1 and [e["player"] for e in after["entries"]] == ["ana", "ben"]


async def test_one_publisher_among_replicas_and_takeover_when_it_dies(
    r: aioredis.Redis, lb: Leaderboard, config: GameConfig
) -> None:
    clock = [NOW + 1000]
    a, b = publisher(r, config, "a", clock), publisher(r, config, "b", clock)
    await lb.submit_batch([slip("1", "ana", 50)], now=clock[0])
    published_a, published_b = await a.tick(), await b.tick()
    assert leads(a) and not leads(b) and published_a and published_b == []
    await lb.submit_batch([slip("2", "ben", 60)], now=clock[0])
    assert await b.tick() == [] and len(await a.tick()) == 3  # three windows changed, a publishes
    # a dies (stops ticking): b takes over once the lease expires, within the lease TTL
    loop = asyncio.get_running_loop()
    started = loop.time()
    while not leads(b):
        assert loop.time() - started < 2000 * MS, "no takeover"
        await b.tick()
        await asyncio.sleep(50 * MS)  # b's own tick cadence
    # b continues from the record of what a published: nothing changed, nothing republished
    assert await b.tick() == []
    await lb.submit_batch([slip("3", "cy", 70)], now=clock[0])
    assert len(await b.tick()) == 3 and await a.tick() == [] and not leads(a)


async def test_release_hands_the_lease_over_at_once(r: aioredis.Redis, config: GameConfig) -> None:
    clock = [NOW]
    a, b = publisher(r, config, "a", clock), publisher(r, config, "b", clock)
    await a.tick()
    await a.release()
    await b.tick()
    assert leads(b)


async def test_rollover_publishes_the_new_empty_board(r: aioredis.Redis, lb: Leaderboard, config: GameConfig) -> None:
    before_midnight = int(dt.datetime(2030, 11, 26, 23, 59, 58, tzinfo=dt.UTC).timestamp() * 1000)
    clock = [before_midnight]
    pub = publisher(r, config, "p", clock)
    async with (
        Channel(r, config.keys.snapshot_channel("daily", "region:eu")) as daily,
        Channel(r, config.keys.snapshot_channel("weekly", "region:eu")) as weekly,
    ):
        await lb.submit_batch([{**slip("1", "ana", 50, before_midnight), "region": "eu"}], now=clock[0])
        await pub.tick()
        assert (await daily.next())["period"] == "2030-11-26"
        assert (await weekly.next())["entries"][0]["player"] == "ana"
        clock[0] = before_midnight + 3000  # 00:00:01 the next day, same ISO week
        await pub.tick()
        snap = await daily.next()
        assert (snap["period"], snap["entries"], snap["version"]) == ("2030-11-27", [], before_midnight + 1)
        assert await weekly.quiet()  # the week did not roll over: nothing new there
        assert await pub.tick() == []
        # versions of past periods go when the period is closed (LB_CLOSE_DELAY_S after its
        # end, 60 s here): the hash does not grow forever
        clock[0] = before_midnight + 62_000
        await pub.tick()
        fields: Any = await r.hkeys(config.keys.versions)
        assert not [f for f in fields if f.startswith("daily:2030-11-26")]


async def test_a_late_write_to_yesterday_does_not_replace_todays_board(
    r: aioredis.Redis, lb: Leaderboard, config: GameConfig
) -> None:
    today = int(dt.datetime(2030, 11, 27, 0, 0, 5, tzinfo=dt.UTC).timestamp() * 1000)
    clock = [today]
    pub = publisher(r, config, "p", clock)
    await lb.submit_batch([slip("1", "ana", 5, today)], now=today)
    await pub.tick()
    await lb.submit_batch([slip("2", "ben", 9, today - 10_000)], now=today)  # 23:59:55 yesterday
    due = await pub.tick()
    assert [d.window for d in due] == ["alltime", "weekly"]  # daily: today's top did not change


async def test_a_publisher_that_lost_its_lease_mid_tick_publishes_nothing(
    r: aioredis.Redis, lb: Leaderboard, config: GameConfig
) -> None:
    clock = [NOW + 1000]
    pub = publisher(r, config, "stalled", clock)
    await lb.submit_batch([slip("1", "ana", 5)], now=clock[0])
    async with Channel(r, config.keys.snapshot_channel("weekly", "global")) as weekly:
        assert [d.window for d in await pub.tick()]  # holds the lease, publishes
        await weekly.next()
        await lb.submit_batch([slip("2", "ben", 9)], now=clock[0])
        # It stalls after deciding what is due; its lease lapses and another replica takes it.
        versions: Any = await r.hgetall(config.keys.versions)
        periods = Current({(w.name, "global"): w.period(clock[0]).label for w in config.window_specs})
        assert pub.published is not None
        due = due_boards(periods, versions, pub.published)
        assert due
        await r.set(config.keys.publish_lease, "other", px=3000)
        latest_before = await r.get(config.keys.latest("weekly", "global"))
        await pub._publish(due, clock[0])
        assert await weekly.quiet()  # fenced: nothing went out
        assert await r.get(config.keys.latest("weekly", "global")) == latest_before
        assert not leads(pub)


async def test_the_next_snapshot_reflects_a_ban_a_correction_and_a_profile(
    r: aioredis.Redis, lb: Leaderboard, config: GameConfig
) -> None:
    clock = [NOW + 1000]
    pub = publisher(r, config, "p1", clock)
    mod = Moderation(lb)
    async with Channel(r, config.keys.snapshot_channel("weekly", "global")) as channel:
        await lb.submit_batch([slip("1", "ana", 50), slip("2", "cheat", 90), slip("3", "ben", 70)], now=clock[0])
        await pub.tick()
        assert [e["player"] for e in (await channel.next())["entries"]] == ["cheat", "ben", "ana"]
        await mod.ban("cheat", actor="ops", reason="bot")
        await pub.tick()
        assert [e["player"] for e in (await channel.next())["entries"]] == ["ben", "ana"]
        await mod.correct("ana", 80, actor="ops", reason="lost match", window_name="weekly", at=clock[0])
        await pub.tick()
        assert [(e["player"], e["score"]) for e in (await channel.next())["entries"]] == [("ana", 80), ("ben", 70)]
        await mod.set_profile("ben", Profile(name="Ben", country="NO", avatar="https://cdn.example/b.png"), at=clock[0])
        await pub.tick()
        assert (await channel.next())["entries"][1] == {
            "rank": 2,
            "player": "ben",
            "score": 70,
            "name": "Ben",
            "avatar": "https://cdn.example/b.png",
            "country": "NO",
        }


async def publish_many_boards(r: Any, config: GameConfig, boards: int) -> Publisher:
    """``boards`` boards due in one tick (``boards - 1`` new regions and the global board, one
    window), published by one tick; returns the publisher."""
    lb = Leaderboard(r, config)
    clock = [NOW + 1000]
    await lb.submit_batch([{**slip(f"s{i}", f"p{i}", i), "region": f"r{i}"} for i in range(boards - 1)], now=clock[0])
    # a lease that outlasts the tick's 1,000 reads however loaded the machine: lb_publish is fenced
    # by the lease, and one that ran out mid-tick publishes nothing (the lease's own tests cover that)
    pub = publisher(r, config, "many", clock, lease_ttl_ms=30_000)
    await pub.tick()
    return pub


async def test_a_thousand_boards_due_in_one_tick_are_all_published(r: aioredis.Redis) -> None:
    """The due boards are read a bounded number at a time (READS_IN_FLIGHT), not all at once
    through the pool: a tick with every board due (a rollover, a batch of new regions) publishes
    them all, and the next tick has nothing left to do."""
    config = GameConfig(game="many", windows=("alltime",), max_scopes=0)  # 999 regions: past the default cap
    pub = await publish_many_boards(r, config, 1000)
    assert pub.stats.published == 1000 and await r.hlen(config.keys.published) == 1000
    snap: Any = await r.get(config.keys.latest("alltime", "region:r998"))
    assert orjson.loads(snap)["entries"] == [{"rank": 1, "player": "p998", "score": 998}]
    assert await pub.tick() == []


async def test_snapshot_versions_count_publishes_and_never_go_back(
    r: aioredis.Redis, lb: Leaderboard, config: GameConfig
) -> None:
    """A snapshot's version is the one before's + 1 however many batches changed the top N in
    between; a new lease holder numbers above every version published before: from its clock,
    even when the published record is lost (FLUSHALL) or older (an earlier release's), and from
    the record when its clock was set back."""
    clock = [NOW + 1000]
    field = "weekly:2030-W48:global"
    versions: list[int] = []

    async def publish_by(p: Publisher, player: str, points: int) -> int:
        await lb.submit_batch([slip(f"{player}{points}", player, points, clock[0])], now=clock[0])
        clock[0] += 50  # the tick's cadence
        await p.tick()
        versions.append((await channel.next())["version"])
        return versions[-1]

    async with Channel(r, config.keys.snapshot_channel("weekly", "global")) as channel:
        a = publisher(r, config, "a", clock)
        first = await publish_by(a, "ana", 50)
        for i in range(3):  # three batches between two ticks, each changes the top N
            await lb.submit_batch([slip(f"x{i}", f"p{i}", 60 + i)], now=clock[0])
        assert await publish_by(a, "ana", 70) == first + 1
        assert int(await r.hget(config.keys.versions, field) or 0) == 5  # the top N changed 5 times
        # a hands over (a restart, a failover): the next holder's clock is above a's versions
        await a.release()
        b = publisher(r, config, "b", clock)
        assert await publish_by(b, "ben", 80) == clock[0] > first + 1
        assert await publish_by(b, "ben", 81) == clock[0] - 50 + 1
        # the record lost: the clock still numbers above every version published
        await b.release()
        await r.flushall()  # keys only: the function library stays loaded
        assert await publish_by(publisher(r, config, "c", clock), "cy", 90) == clock[0] > versions[-2]
        # an earlier release's record (<period>:<top-N version>): numbered from the clock too (and
        # a record that is neither form is passed over)
        await r.delete(config.keys.publish_lease)
        await r.hset(config.keys.published, mapping={"weekly:global": "2030-W48:1", "daily:global": "garbage"})
        assert await publish_by(publisher(r, config, "d", clock), "dan", 95) == clock[0] > versions[-2]
        # a clock set back a day: the record's number + 1, never one published before
        await r.delete(config.keys.publish_lease)
        clock[0] -= 86_400_000
        assert await publish_by(publisher(r, config, "e", clock), "eve", 99) == versions[-2] + 1
    assert versions == sorted(set(versions))
