"""Past periods, close events, kept finals and the example rewards service, against a real
redis-server (and the publisher that closes periods)."""

from __future__ import annotations

import asyncio
import datetime as dt
import importlib.util
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis.asyncio as aioredis

from leaderboard import GameConfig, Leaderboard, now_ms, window
from leaderboard.errors import BadPeriod
from leaderboard.protocol import Join, ProtocolError, Rank, Top, parse
from scorer import Consumer, Publisher, ScorerSettings, Stats

from .conftest import NOW
from .gw_helpers import client, greet, request, running, token

DAY = 86_400_000
WEEK = 7 * DAY
# 2030-11-27 00:01:05: yesterday (2030-11-26) ended 65 s ago, past the 60 s close delay
AFTER_MIDNIGHT = int(dt.datetime(2030, 11, 27, 0, 1, 5, tzinfo=dt.UTC).timestamp() * 1000)


def slip(sid: str, player: str, points: int, ts: int) -> dict[str, str]:
    return {"id": sid, "player": player, "points": str(points), "ts": str(ts)}


def publisher(r: aioredis.Redis, config: GameConfig, clock: list[int], owner: str = "p", **kw: Any) -> Publisher:
    settings = ScorerSettings(
        redis_url="redis://unused", game=config, name=owner, tick_ms=50, lease_ttl_ms=300, metrics_port=0, **kw
    )
    return Publisher(r, settings, Stats(), now=lambda: clock[0])


async def events(r: aioredis.Redis, config: GameConfig) -> list[dict[str, Any]]:
    entries: Any = await r.xrange(config.keys.closed)
    return [fields for _, fields in entries]


# ---------------------------------------------------------------- pure


def test_period_labels_name_the_periods_they_label() -> None:
    for name in ("daily", "weekly", "monthly", "alltime"):
        w = window(name)
        for ts in (NOW, NOW - 40 * DAY, NOW + 400 * DAY):
            assert w.named(w.period(ts).label) == w.period(ts)
    weekly = window("weekly")
    assert weekly.resolve("previous", NOW).label == "2030-W47"
    assert weekly.resolve(None, NOW) == weekly.resolve("current", NOW) == weekly.period(NOW)
    refused = {
        ("weekly", "2030-W99"): "not a weekly period label",
        ("weekly", "2030-11-26"): "not a weekly period label",
        ("daily", "2030-02-30"): "not a daily period label",
        ("weekly", "2030-W49"): "has not started yet",
        ("weekly", "2030-W40"): "has expired",  # 35 days of retention after its end
        ("alltime", "previous"): "has no previous period",
    }
    for (name, label), message in refused.items():
        with pytest.raises(ValueError, match=message):
            window(name).resolve(label, NOW)


def test_the_parser_takes_periods_and_tournament_windows() -> None:
    w = ["daily", "weekly"]
    top = parse('{"type":"top","window":"weekly","period":"previous"}', windows=w, default_window="weekly")
    assert isinstance(top, Top) and top.period == "previous"
    rank = parse('{"type":"rank","window":"t-spring"}', windows=w, default_window="weekly")
    assert isinstance(rank, Rank) and (rank.window, rank.period) == ("t-spring", None)
    join = parse('{"type":"join","tournament":"spring","players":["mia"]}', windows=w, default_window="weekly")
    assert join == Join(None, "spring", ("mia",))
    cases = [
        ('{"type":"top","period":7}', "bad_period"),
        ('{"type":"top","period":""}', "bad_period"),
        ('{"type":"rank","period":"' + "x" * 33 + '"}', "bad_period"),
        ('{"type":"subscribe","period":"previous"}', "bad_period"),
        ('{"type":"top","window":"t-"}', "invalid_window"),
        ('{"type":"top","window":"t-a b"}', "invalid_window"),
        ('{"type":"join","tournament":"a b","players":["mia"]}', "bad_message"),
        ('{"type":"join","tournament":"cup","players":[]}', "bad_message"),
        ('{"type":"join","players":["mia"]}', "bad_message"),
    ]
    for raw, code in cases:
        with pytest.raises(ProtocolError) as exc:
            parse(raw, windows=w, default_window="weekly")
        assert exc.value.code == code, raw


# ---------------------------------------------------------------- past periods


async def test_last_weeks_board_reads_like_this_weeks(lb: Leaderboard) -> None:
    last = NOW - WEEK
    await lb.submit_batch([slip("1", "ana", 50, last), slip("2", "ben", 70, last)], now=last)
    await lb.submit_batch([slip("3", "ana", 10, NOW)], now=NOW)
    mine = await lb.rank("ana", "weekly", period="previous", at=NOW)
    assert (mine.rank, mine.score) == (2, 50)
    top = await lb.top("weekly", period="2030-W47", at=NOW)
    assert top.period.label == "2030-W47" and [(e.player, e.score) for e in top.entries] == [("ben", 70), ("ana", 50)]
    around = await lb.around("ana", "weekly", k=1, period="previous", at=NOW)
    assert [e.rank for e in around.entries] == [1, 2]
    assert [(e.player, e.rank) for e in (await lb.top("weekly", at=NOW)).entries] == [("ana", 1)]
    for bad in ("2030-W49", "2030-W40", "yesterday"):
        with pytest.raises(BadPeriod):
            await lb.top("weekly", period=bad, at=NOW)


# ---------------------------------------------------------------- close events


async def test_a_period_closes_once_with_its_final_top_even_after_downtime(
    r: aioredis.Redis, lb: Leaderboard, config: GameConfig
) -> None:
    yesterday = AFTER_MIDNIGHT - DAY
    eu = {**slip("3", "cy", 5, yesterday), "region": "eu"}
    await lb.submit_batch([slip("1", "ana", 50, yesterday), slip("2", "ben", 70, yesterday), eu], now=yesterday)
    # No publisher ran at midnight (the scorer was down); the first one to start closes the day.
    clock = [AFTER_MIDNIGHT]
    first, second = publisher(r, config, clock, "a"), publisher(r, config, clock, "b")
    await first.tick()
    [event] = await events(r, config)
    assert (event["id"], event["window"], event["period"]) == ("daily:2030-11-26", "daily", "2030-11-26")
    top = orjson.loads(event["top"])
    assert [(e["rank"], e["player"], e["points"]) for e in top["global"]] == [
        (1, "ben", 70),
        (2, "ana", 50),
        (3, "cy", 5),
    ]
    assert [e["player"] for e in top["region:eu"]] == ["cy"]
    assert first.stats.closed == 1
    # Another replica asking again (it took the lease over, or raced) adds nothing; so does a tick.
    assert await lb.close(window("daily").period(yesterday), ["global"], top_n=10, keep=10, maxlen=100) is None
    await first.tick()
    await second.tick()
    assert len(await events(r, config)) == 1
    # A late slip of the closed day is refused (late_slips_of_a_closed_period...): no second event.
    [late] = await lb.submit_batch([slip("4", "dee", 99, yesterday)], now=AFTER_MIDNIGHT)
    assert late.code == "period_closed"
    await first.tick()
    assert len(await events(r, config)) == 1
    fields: Any = await r.hkeys(config.keys.versions)
    assert not [f for f in fields if f.startswith("daily:2030-11-26")]


async def test_a_late_slip_of_a_closed_period_is_refused_whole_dead_lettered_and_counted(
    r: aioredis.Redis, redis_url: str, lb: Leaderboard, config: GameConfig
) -> None:
    """Once a period's close event and finals are out, its board must keep agreeing with them: a
    slip of that period arriving later (within the 48 h a slip may be late) is refused whole, with
    its own code, and the consumer keeps it in the dead letters and counts it."""
    yesterday = AFTER_MIDNIGHT - DAY
    await lb.submit_batch([slip("1", "ana", 50, yesterday)], now=yesterday)
    clock = [AFTER_MIDNIGHT]
    await publisher(r, config, clock).tick()
    [final] = await lb.finals("daily")
    board = config.keys.board("daily", "2030-11-26", "global")
    before = await r.dump(board)
    await r.xadd(config.keys.submissions, slip("late", "ben", 70, yesterday + 1000))  # type: ignore[arg-type]
    await r.xadd(config.keys.submissions, slip("today", "cy", 5, AFTER_MIDNIGHT))  # type: ignore[arg-type]
    stats = Stats()
    settings = ScorerSettings(redis_url=redis_url, game=config, name="c1", block_ms=20, metrics_port=0)
    await asyncio.wait_for(Consumer(r, settings, stats, now=lambda: AFTER_MIDNIGHT).run(burst=True), 5)
    assert (stats.applied, stats.dead_letters) == (1, 1)
    letters: Any = await r.xrange(config.keys.dead_letters)
    [(_, letter)] = letters
    assert (letter["id"], letter["dead.code"]) == ("late", "period_closed")
    assert "daily period 2030-11-26 is closed" in letter["dead.message"]
    # nothing of it was written: not the closed day, not the open week or all-time, not its id
    assert await r.dump(board) == before
    for w, label in (("weekly", "2030-W48"), ("alltime", "all")):
        key = config.keys.board(w, label, "global")
        assert await r.zscore(key, "ben") is None and await r.zscore(key, "cy") is not None
    assert not await r.sismember(config.keys.seen(yesterday // 3_600_000), "late")
    top = (await lb.top("daily", n=10, at=yesterday)).entries
    assert [(e.player, e.score) for e in top] == [(e["player"], e["points"]) for e in final["top"]["global"]]
    # a rebuild replaying history applied before the close takes it again (encode_batch replay)
    [replayed] = await lb.submit_batch([slip("2", "dee", 7, yesterday)], now=AFTER_MIDNIGHT, replay=True)
    assert replayed.status == "ok"


async def test_a_period_is_not_closed_before_its_delay(r: aioredis.Redis, lb: Leaderboard, config: GameConfig) -> None:
    yesterday = AFTER_MIDNIGHT - DAY
    await lb.submit_batch([slip("1", "ana", 50, yesterday)], now=yesterday)
    clock = [AFTER_MIDNIGHT]
    pub = publisher(r, config, clock, close_delay_s=600)
    await pub.tick()
    assert await events(r, config) == []
    clock[0] += 600_000
    await pub.tick()
    assert [e["id"] for e in await events(r, config)] == ["daily:2030-11-26"]


async def test_finals_keep_the_newest_closed_periods(r: aioredis.Redis, lb: Leaderboard, config: GameConfig) -> None:
    for days in (3, 2, 1):
        ts = AFTER_MIDNIGHT - days * DAY
        await lb.submit_batch([slip(f"s{days}", "ana", days, ts)], now=ts)
        await lb.close(window("daily").period(ts), ["global"], top_n=5, keep=2, maxlen=100)
    finals = await lb.finals("daily")
    assert [f["period"] for f in finals] == ["2030-11-26", "2030-11-25"]
    assert finals[0]["top"]["global"] == [{"rank": 1, "player": "ana", "points": 1}]


# ---------------------------------------------------------------- the example rewards service


def rewards_module() -> Any:
    path = Path(__file__).resolve().parents[1] / "examples" / "rewards.py"
    spec = importlib.util.spec_from_file_location("rewards_example", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


async def test_rewards_are_granted_once_per_event_even_after_a_crash(
    r: aioredis.Redis, lb: Leaderboard, config: GameConfig
) -> None:
    rewards = rewards_module()
    for days in (2, 1):
        ts = AFTER_MIDNIGHT - days * DAY
        await lb.submit_batch([slip(f"a{days}", "ana", 50, ts), slip(f"b{days}", "ben", 70, ts)], now=ts)
        await lb.close(window("daily").period(ts), ["global"], top_n=10, keep=10, maxlen=100)
    await r.xgroup_create(config.keys.closed, rewards.GROUP, id="0")
    # A consumer reads the first event and dies before granting it: the event stays pending.
    await r.xreadgroup(rewards.GROUP, "crashed", {config.keys.closed: ">"}, count=1)
    assert await rewards.run(r, config, consumer="other", burst=True, block_ms=50) == 2  # the second event
    assert await rewards.run(r, config, consumer="crashed", burst=True, block_ms=50) == 2  # its pending one
    assert await rewards.run(r, config, consumer="crashed", burst=True, block_ms=50) == 0
    ledger = await r.hgetall(config.keys.rewards)
    assert ledger == {
        "daily:2030-11-25|global|ben": "1000",
        "daily:2030-11-25|global|ana": "500",
        "daily:2030-11-26|global|ben": "1000",
        "daily:2030-11-26|global|ana": "500",
    }
    assert (await r.xpending(config.keys.closed, rewards.GROUP))["pending"] == 0


async def test_your_rank_last_week_over_the_socket(redis_url: str, lb: Leaderboard) -> None:
    now = now_ms()
    last_week = now - WEEK
    await lb.submit_batch([slip("1", "ben", 90, last_week), slip("2", "mia", 40, last_week)], now=last_week)
    label = window("weekly").period(last_week).label
    async with running(redis_url) as gw, client(gw, f"?token={token('mia')}") as ws:
        await greet(ws)
        for period in ("previous", label):
            reply = await request(ws, {"type": "rank", "window": "weekly", "period": period, "id": 1}, "rank")
            assert (reply["rank"], reply["score"], reply["period"], reply["size"]) == (2, 40, label, 2)
        now_rank = await request(ws, {"type": "rank", "window": "weekly", "id": 2}, "rank")
        assert now_rank["rank"] is None  # nothing this week yet
        top = await request(ws, {"type": "top", "window": "weekly", "period": "previous", "n": 1}, "top")
        assert [e["player"] for e in top["entries"]] == ["ben"]
        for bad in ({"period": "2001-W01"}, {"period": 7}, {"period": "tomorrow"}):
            err = await request(ws, {"type": "top", "window": "weekly", **bad, "id": 3}, "error")
            assert (err["code"], err["id"]) == ("bad_period", 3)
        err = await request(ws, {"type": "subscribe", "window": "weekly", "period": "previous"}, "error")
        assert err["code"] == "bad_period"
        # once last week is closed, its final top N stays readable as long as it is kept
        await lb.close(window("weekly").period(last_week), ["global"], top_n=10, keep=5, maxlen=100)
        finals = await request(ws, {"type": "finals", "window": "weekly", "id": 5}, "finals")
        [kept] = finals["periods"]
        assert kept["period"] == label and [(e["rank"], e["player"], e["score"]) for e in kept["entries"]] == [
            (1, "ben", 90),
            (2, "mia", 40),
        ]
        none = await request(ws, {"type": "finals", "window": "daily", "board": "region:eu"}, "finals")
        assert none["periods"] == []
