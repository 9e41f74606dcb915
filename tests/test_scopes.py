"""The scope cap (LB_MAX_SCOPES): every new region or mode value adds boards (12 keys with the
default windows), so a game holds at most that many values; a slip naming one more is refused
with too_many_scopes, inside lb_submit's atomic call, while the values already known keep
working."""

from __future__ import annotations

import asyncio
from typing import Any

import redis.asyncio as aioredis

from leaderboard import GameConfig, Leaderboard
from scorer import Consumer, ScorerSettings, Stats

from .conftest import NOW


def slip(sid: str, player: str, **scope: str) -> dict[str, str]:
    return {"id": sid, "player": player, "points": "10", "ts": str(NOW), **scope}


async def test_a_new_scope_past_the_cap_is_refused_and_the_known_ones_keep_working(r: aioredis.Redis) -> None:
    config = GameConfig(game="capped", max_scopes=3)
    lb = Leaderboard(r, config)
    first = await lb.submit_batch(
        [slip("1", "ana", region="eu"), slip("2", "ben", mode="duo"), slip("3", "cy", region="eu", mode="solo")],
        now=NOW,
    )
    assert [x.status for x in first] == ["ok", "ok", "ok"]
    assert await r.smembers(config.keys.scopes) == {"region:eu", "mode:duo", "mode:solo"}
    keys_before = await r.dbsize()
    refused = await lb.submit_batch(
        [slip("4", "dee", region="us"), slip("5", "eve", region="eu", mode="trio"), slip("6", "fay", region="eu")],
        now=NOW,
    )
    assert [(x.status, x.code) for x in refused] == [
        ("error", "too_many_scopes"),
        ("error", "too_many_scopes"),
        ("ok", None),  # a known value: the cap never refuses it
    ]
    assert refused[0].message is not None and "region:us would be one more" in refused[0].message
    # nothing of a refused slip was written: no board of the new value, no global entry, no id
    assert not await r.exists(config.keys.board("alltime", "all", "region:us"))
    assert await r.zscore(config.keys.board("alltime", "all", "global"), "dee") is None
    assert not await r.sismember(config.keys.seen(NOW // 3_600_000), "4")
    assert await r.dbsize() == keys_before  # fay's slip only added members to existing keys
    assert await r.scard(config.keys.scopes) == 3


async def test_one_slip_naming_two_new_values_counts_both(r: aioredis.Redis) -> None:
    config = GameConfig(game="two", max_scopes=2)
    lb = Leaderboard(r, config)
    [one] = await lb.submit_batch([slip("1", "ana", region="eu")], now=NOW)
    [both] = await lb.submit_batch([slip("2", "ben", region="us", mode="duo")], now=NOW)
    assert (one.status, both.code) == ("ok", "too_many_scopes")
    # in one batch: the second new value fills the last slot, the third is one too many
    results = await lb.submit_batch([slip("3", "cy", mode="duo"), slip("4", "dee", mode="solo")], now=NOW)
    assert [x.code for x in results] == [None, "too_many_scopes"]
    assert await r.smembers(config.keys.scopes) == {"region:eu", "mode:duo"}


async def test_no_cap_when_the_setting_is_zero(r: aioredis.Redis) -> None:
    config = GameConfig(game="open", max_scopes=0)
    entries = [slip(str(i), "ana", region=f"r{i}") for i in range(40)]
    results = await Leaderboard(r, config).submit_batch(entries, now=NOW)
    assert {x.status for x in results} == {"ok"}
    assert await r.scard(config.keys.scopes) == 40  # still recorded: a cap set later counts them


async def test_refused_past_the_cap_is_dead_lettered_and_counted(r: aioredis.Redis, redis_url: str) -> None:
    config = GameConfig(game="dl", max_scopes=1)
    for entry in (slip("1", "ana", region="eu"), slip("2", "ben", region="us")):
        await r.xadd(config.keys.submissions, entry)  # type: ignore[arg-type]
    stats = Stats()
    settings = ScorerSettings(redis_url=redis_url, game=config, name="c1", block_ms=20, metrics_port=0)
    await asyncio.wait_for(Consumer(r, settings, stats, now=lambda: NOW + 1000).run(burst=True), 5)
    assert (stats.applied, stats.dead_letters) == (1, 1)
    letters: Any = await r.xrange(config.keys.dead_letters)
    assert [(f["id"], f["dead.code"]) for _, f in letters] == [("2", "too_many_scopes")]


def test_the_cap_is_a_documented_setting() -> None:
    assert GameConfig.from_env({"LB_MAX_SCOPES": "10"}).max_scopes == 10
    assert GameConfig().max_scopes == 256
