"""The function library's semantics, against a real redis-server."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from typing import Any, cast

import pytest
import redis.asyncio as aioredis
import redis.exceptions

from leaderboard import WINDOWS, BadRequest, GameConfig, Leaderboard, LibraryMismatch, Submission, SubmitResult
from leaderboard.batch import SETTINGS_FIELDS, SUBMIT_LAYOUT, decode_batch, encode_batch
from leaderboard.errors import from_reply
from leaderboard.submission import entry_fields

from .conftest import NOW, activity_events
from .lb_helpers import store_profile

MIN = 60_000
LATER = NOW + 10 * MIN  # the server clock in these tests: every submission is in the past


def slip(sid: str, player: str, points: int | str, ts: int = NOW, **extra: str) -> dict[str, str]:
    return {"id": sid, "player": player, "points": str(points), "ts": str(ts), **extra}


async def submit(lb: Leaderboard, *entries: dict[str, str], now: int = LATER) -> list[SubmitResult]:
    return await lb.submit_batch(list(entries), now=now)


async def scores(lb: Leaderboard, window: str = "weekly", scope: str = "global") -> list[tuple[str, int]]:
    return [(e.player, e.score) for e in (await lb.top(window, scope, 100, at=NOW)).entries]


async def test_personal_best_only_goes_up(lb: Leaderboard) -> None:
    [a] = await submit(lb, slip("1", "ana", 500))
    [b] = await submit(lb, slip("2", "ana", 300, NOW + 1000))
    [c] = await submit(lb, slip("3", "ana", 900, NOW + 2000))
    assert (a.improved, b.improved, c.improved) == (True, False, True)
    assert [board.best for board in b.boards] == [500, 500, 500]
    assert await scores(lb) == [("ana", 900)]


async def test_incr_adds_and_set_overwrites(r: aioredis.Redis) -> None:
    lb = Leaderboard(r, GameConfig(game="test", windows=("weekly", "alltime"), window_operators={"alltime": "incr"}))
    await submit(lb, slip("1", "ana", 30), slip("2", "ana", 12, NOW + 1000))
    assert await scores(lb, "alltime") == [("ana", 42)]  # incr: a running total
    assert await scores(lb, "weekly") == [("ana", 30)]  # best: the personal best
    [res] = await submit(lb, slip("3", "ana", 5, NOW + 2000, op="set"))  # per-submission override
    assert not res.improved and [b.best for b in res.boards] == [5, 5]
    assert await scores(lb, "alltime") == [("ana", 5)] and await scores(lb, "weekly") == [("ana", 5)]


async def test_incr_by_zero_keeps_the_time_the_total_was_reached(r: aioredis.Redis) -> None:
    lb = Leaderboard(r, GameConfig(game="test", windows=("weekly",), operator="incr"))
    await submit(lb, slip("1", "ana", 10, NOW), slip("2", "ben", 10, NOW + 5000))
    [res] = await submit(lb, slip("3", "ana", 0, NOW + 9000))
    assert not res.improved
    assert await scores(lb) == [("ana", 10), ("ben", 10)]


async def test_ties_go_to_whoever_got_there_first(lb: Leaderboard) -> None:
    await submit(lb, slip("1", "late", 700, NOW + 50_000))
    await submit(lb, slip("2", "early", 700, NOW + 10_000))
    await submit(lb, slip("3", "ben", 650, NOW))
    assert [p for p, _ in await scores(lb)] == ["early", "late", "ben"]
    [again] = await submit(lb, slip("4", "early", 700, NOW + 60_000))
    assert not again.improved  # an equal score later neither replaces nor counts as improved
    assert [p for p, _ in await scores(lb)] == ["early", "late", "ben"]


async def test_alltime_ties_are_ordered_by_minute(r: aioredis.Redis) -> None:
    lb = Leaderboard(r, GameConfig(game="test", windows=("alltime",)))
    await submit(lb, slip("1", "late", 700, NOW + 2 * MIN), slip("2", "early", 700, NOW))
    assert [p for p, _ in await scores(lb, "alltime")] == ["early", "late"]


@pytest.mark.parametrize("name", list(WINDOWS))
async def test_points_limit_per_window_is_enforced_before_any_write(r: aioredis.Redis, name: str) -> None:
    lb = Leaderboard(r, GameConfig(game="test", windows=(name,)))
    limit = WINDOWS[name].max_points
    assert limit == 2 ** (53 - WINDOWS[name].shift) - 1
    [ok] = await submit(lb, slip("1", "ana", limit))
    assert ok.status == "ok" and ok.boards[0].best == limit
    assert (await lb.top(name, n=1, at=NOW)).entries[0].score == limit  # exact: no precision lost
    before = await r.dbsize()
    [bad] = await submit(lb, slip("2", "ben", limit + 1))
    assert (bad.status, bad.code) == ("error", "points_out_of_range")
    assert await r.dbsize() == before and await lb.size(name, at=NOW) == 1


async def test_incr_total_beyond_the_limit_is_refused(r: aioredis.Redis) -> None:
    lb = Leaderboard(r, GameConfig(game="test", windows=("alltime",), operator="incr"))
    limit = WINDOWS["alltime"].max_points
    await submit(lb, slip("1", "ana", limit - 5))
    [bad] = await submit(lb, slip("2", "ana", 6))
    assert bad.code == "points_out_of_range"
    assert await scores(lb, "alltime") == [("ana", limit - 5)]


async def test_same_id_twice_changes_nothing(lb: Leaderboard, r: aioredis.Redis) -> None:
    first, dup_in_batch = await submit(lb, slip("m1", "ana", 100), slip("m1", "ana", 100))
    [dup_later] = await submit(lb, slip("m1", "ana", 999, NOW + 1000))
    assert first.status == "ok"
    assert dup_in_batch.status == dup_later.status == "duplicate"
    assert await scores(lb) == [("ana", 100)]
    assert await r.xlen(lb.keys.activity) == 1


async def test_one_submission_updates_every_window_and_scope(lb: Leaderboard) -> None:
    await submit(lb, slip("0", "zed", 900, region="eu"))
    [res] = await submit(lb, slip("1", "ana", 500, region="eu", mode="duo", name="Ana"))
    got = {(b.board.window, b.board.scope): (b.improved, b.rank, b.previous_rank, b.best) for b in res.boards}
    assert got == {
        (w, s): (True, 2 if s != "mode:duo" else 1, None, 500)
        for w in ("daily", "weekly", "alltime")
        for s in ("global", "region:eu", "mode:duo")
    }
    assert [b.board.period for b in res.boards[::3]] == ["2030-11-26", "2030-W48", "all"]
    for w in ("daily", "weekly", "alltime"):
        assert await scores(lb, w, "region:eu") == [("zed", 900), ("ana", 500)]
        assert await scores(lb, w, "mode:duo") == [("ana", 500)]


async def test_previous_and_new_rank_like_steam(lb: Leaderboard) -> None:
    await submit(lb, *(slip(f"s{i}", f"p{i}", 100 * i) for i in range(1, 6)))  # p5 leads
    [res] = await submit(lb, slip("x", "p1", 450, NOW + 1000))
    weekly = next(b for b in res.boards if b.board.window == "weekly")
    assert (weekly.previous_rank, weekly.rank, weekly.improved) == (5, 2, True)


async def test_batch_with_one_bad_entry_fails_only_that_entry(lb: Leaderboard) -> None:
    entries = [slip(f"b{i}", f"p{i}", i) for i in range(300)]
    entries[150] = slip("b150", "p150", "-7")
    results = await submit(lb, *entries)
    assert len(results) == 300
    assert [r.id for r in results] == [e["id"] for e in entries]
    assert [r.status for r in results].count("ok") == 299
    assert (results[150].status, results[150].code) == ("error", "invalid_points")
    assert await lb.size("weekly", at=NOW) == 299


async def test_activity_stream_hll_and_feed(lb: Leaderboard) -> None:
    await submit(lb, slip("1", "ana", 10), slip("2", "ben", 20), slip("3", "ana", 5))
    feed = await lb.feed(3)
    assert [(f["player"], f["points"], f["improved"]) for f in feed] == [
        ("ana", "5", "0"),
        ("ben", "20", "1"),
        ("ana", "10", "1"),
    ]
    assert feed[1]["rank"] == "1" and feed[0]["id"] == "3"
    assert await lb.distinct_players("weekly", at=NOW) == 2


async def test_activity_stream_is_trimmed_to_about_its_length_in_submissions(r: aioredis.Redis) -> None:
    lb = Leaderboard(r, GameConfig(game="test", windows=("weekly",), activity_maxlen=100))
    for start in range(0, 1000, 10):  # an entry per call of ten
        await submit(lb, *(slip(f"t{i}", f"x{i}", i) for i in range(start, start + 10)))
    events = await activity_events(r, lb.keys.activity)
    assert 100 <= len(events) < 1000
    assert [e["id"] for e in events] == [f"t{i}" for i in range(1000 - len(events), 1000)]
    # one call of more than that: its entry is kept whole, and the older ones go
    await submit(lb, *(slip(f"u{i}", f"y{i}", i) for i in range(300)))
    assert [e["id"] for e in await lb.feed(301)] == [f"u{i}" for i in reversed(range(300))]


async def test_windowed_keys_expire_inside_the_function(lb: Leaderboard, r: aioredis.Redis) -> None:
    await submit(lb, slip("1", "ana", 10))
    k = lb.keys
    weekly = WINDOWS["weekly"].period(NOW)
    assert await r.expiretime(k.board("weekly", weekly.label, "global")) == weekly.expire_at_s
    assert await r.expiretime(k.players("weekly", weekly.label)) == weekly.expire_at_s
    daily = WINDOWS["daily"].period(NOW)
    assert await r.expiretime(k.board("daily", daily.label, "global")) == daily.end_ms // 1000 + 7 * 86400
    assert await r.expiretime(k.board("alltime", "all", "global")) == -1  # kept forever
    hour = NOW // 3_600_000
    assert await r.expiretime(k.seen(hour)) == (hour + 1) * 3600 + 48 * 3600
    # NX: a later write never pushes an expiry out
    await r.expireat(k.board("weekly", weekly.label, "global"), weekly.expire_at_s - 100)
    await submit(lb, slip("2", "ana", 20))
    assert await r.expiretime(k.board("weekly", weekly.label, "global")) == weekly.expire_at_s - 100


async def versions(lb: Leaderboard) -> dict[str, str]:
    return cast(dict[str, str], await lb.redis.hgetall(lb.keys.versions))


async def test_top_version_moves_only_when_the_top_changes(r: aioredis.Redis) -> None:
    lb = Leaderboard(r, GameConfig(game="test", windows=("weekly",), top_n=10))
    field = "weekly:2030-W48:global"
    await submit(lb, *(slip(f"a{i}", f"p{i}", 1000 + i) for i in range(10)))
    v0 = int((await versions(lb))[field])
    await submit(lb, slip("low", "low", 5))  # rank 11: the top 10 did not change
    await submit(lb, slip("p3-worse", "p3", 1))  # not an improvement
    assert int((await versions(lb))[field]) == v0
    await submit(lb, slip("p3-better", "p3", 1003 + 100))  # a top-10 player's score moved
    assert int((await versions(lb))[field]) == v0 + 1
    await submit(lb, slip("low-up", "low", 5000))  # enters the top 10 (and pushes p0 out)
    assert int((await versions(lb))[field]) == v0 + 2
    await submit(lb, slip("low-down", "low", 1, op="set"))  # leaves the top 10
    assert int((await versions(lb))[field]) == v0 + 3


async def test_announcement_when_a_player_enters_the_top(lb: Leaderboard, r: aioredis.Redis) -> None:
    pubsub = r.pubsub()
    await pubsub.ssubscribe(lb.keys.announce_channel)
    await pubsub.get_message(timeout=1)  # the subscribe confirmation
    await submit(lb, *(slip(f"a{i}", f"p{i}", 100 + i) for i in range(10)))
    while await pubsub.get_message(timeout=0.2):  # ten players entering an empty board
        pass
    await submit(lb, slip("x1", "p0", 150))  # already in the top 10: no announcement
    await submit(lb, slip("x2", "mia", 500, name="Mia"))
    msg = await pubsub.get_message(ignore_subscribe_messages=True, timeout=2)
    assert msg is not None
    import orjson

    data = orjson.loads(msg["data"])
    assert data == {
        "type": "announce",
        "board": "global",
        "window": "daily",
        "period": "2030-11-26",
        "player": "mia",
        "name": "Mia",
        "rank": 1,
        "score": 500,
    }
    windows = {data["window"]}
    while (m := await pubsub.get_message(ignore_subscribe_messages=True, timeout=0.3)) is not None:
        windows.add(orjson.loads(m["data"])["window"])
    assert windows == {"daily", "weekly", "alltime"}  # and nothing about p0
    await pubsub.aclose()


async def test_reads_top_around_ranks(lb: Leaderboard) -> None:
    await submit(lb, *(slip(f"s{i}", f"p{i:02}", i * 10) for i in range(20)))
    await store_profile(lb, "p19", {"name": "Nineteen", "country": "NO"})
    top = await lb.top("weekly", n=3, at=NOW)
    assert top.period == WINDOWS["weekly"].period(NOW)
    assert [(e.rank, e.player, e.score, e.name) for e in top.entries] == [
        (1, "p19", 190, "Nineteen"),
        (2, "p18", 180, None),
        (3, "p17", 170, None),
    ]
    around = await lb.around("p10", "weekly", k=2, at=NOW)
    assert [(e.rank, e.player) for e in around.entries] == [
        (8, "p12"),
        (9, "p11"),
        (10, "p10"),
        (11, "p09"),
        (12, "p08"),
    ]
    assert [(e.rank, e.player) for e in (await lb.around("p18", "weekly", k=2, at=NOW)).entries] == [
        (1, "p19"),
        (2, "p18"),
        (3, "p17"),
        (4, "p16"),
    ]
    assert [e.rank for e in (await lb.around("p00", "weekly", k=2, at=NOW)).entries] == [18, 19, 20]
    assert (await lb.around("nobody", "weekly", at=NOW)).entries == []
    ranks = await lb.ranks(["p05", "nobody", "p19"], "weekly", at=NOW)
    size, standings = ranks.size, ranks.standings
    assert ranks.period == WINDOWS["weekly"].period(NOW) and size == 20 == await lb.size("weekly", at=NOW)
    assert [(s.player, s.rank, s.score) for s in standings] == [
        ("p05", 15, 50),
        ("nobody", None, None),
        ("p19", 1, 190),
    ]
    assert (await lb.rank("p19", "weekly", at=NOW)).rank == 1


async def test_display_name_from_a_submission_joins_the_top(lb: Leaderboard) -> None:
    await store_profile(lb, "mia", {"avatar": "a.png"})
    await submit(lb, slip("1", "mia", 5, name="Mia 🎮"))
    [entry] = (await lb.top("daily", at=NOW)).entries
    assert entry.name == "Mia 🎮" and entry.profile == {"avatar": "a.png", "name": "Mia 🎮"}


async def test_a_name_is_written_only_when_it_changes_and_keeps_the_other_fields(lb: Leaderboard) -> None:
    """lb_submit finds an unchanged name in the stored JSON without decoding it: a name that only
    looks the same inside another field, or a prefix of the stored one, must still be written."""

    async def stored() -> str:
        return cast(str, await lb.redis.hget(lb.keys.profiles, "mia"))

    await store_profile(lb, "mia", {"avatar": 'x"name":"Mia"', "name": "Mia2", "country": "NO"})
    await submit(lb, slip("1", "mia", 5, name="Mia"), slip("2", "mia", 6, NOW + 1, name="Mia"))
    assert json.loads(await stored()) == {"avatar": 'x"name":"Mia"', "name": "Mia", "country": "NO"}
    await lb.redis.hset(lb.keys.profiles, "mia", (await stored()).replace('"country":"NO"', '"country":"SE"'))
    await submit(lb, slip("3", "mia", 7, NOW + 2, name="Mia"))  # unchanged: the stored text is kept as it is
    assert json.loads(await stored())["country"] == "SE"
    await submit(lb, slip("4", "mia", 8, NOW + 3, name="Mi"), slip("5", "mia", 9, NOW + 4, name="Mia"))
    assert json.loads(await stored())["name"] == "Mia"


async def test_the_activity_entry_carries_the_rank_only_within_the_top_n(r: aioredis.Redis) -> None:
    lb = Leaderboard(r, GameConfig(game="test", windows=("weekly",), top_n=2))
    await submit(lb, slip("1", "ana", 500), slip("2", "ben", 400), slip("3", "cy", 300))
    await submit(lb, slip("4", "cy", 100, NOW + 1), slip("5", "ben", 900, NOW + 1), slip("6", "ana", 1, NOW + 1))
    feed = {e["id"]: e["rank"] for e in await lb.feed(6)}
    # cy third: 0; ben first after beating ana; ana's old best is second (not beaten)
    assert feed == {"1": "1", "2": "2", "3": "0", "4": "0", "5": "1", "6": "2"}
    for rows in (True, False):  # the same with and without per-board rows
        await lb.submit_batch([slip(f"r{rows}", "cy", 200, NOW + 2)], now=LATER, rows=rows)
        assert (await lb.feed(1))[0]["rank"] == "0"


async def test_bad_reads_raise_bad_request(lb: Leaderboard) -> None:
    with pytest.raises(BadRequest):
        await lb.top("weekly", n=0)
    with pytest.raises(BadRequest):
        await lb.top("yearly")
    with pytest.raises(BadRequest):
        await lb.top("monthly")  # a window this game does not keep
    with pytest.raises(BadRequest):
        await lb.top("weekly", "region:no way")
    with pytest.raises(BadRequest):
        await lb.around("ana", "weekly", k=1000)


async def test_eight_concurrent_writers_end_at_their_maximum(lb: Leaderboard, redis_url: str) -> None:
    from leaderboard import connect

    async def player(i: int) -> None:
        client = connect(redis_url)
        mine = Leaderboard(client, lb.config)
        for step, s in enumerate(range(0, 2000, 7)):
            await mine.submit_batch([slip(f"c{i}-{step}", f"c{i}", s)], now=NOW)
        await client.aclose()

    await asyncio.gather(*(player(i) for i in range(8)))
    top = (await lb.top("weekly", n=10, at=NOW)).entries
    assert len(top) == 8 and all(e.score == 1995 for e in top)


async def test_timestamp_outside_the_window_is_refused_by_the_library(lb: Leaderboard, r: aioredis.Redis) -> None:
    plan = encode_batch(lb.config, [slip("1", "ana", 10)], NOW)
    # a caller that names last week's period for this week's timestamp
    start = plan.args.index(WINDOWS["weekly"].period(NOW).start_ms)
    plan.args[start] = int(plan.args[start]) - 7 * 86_400_000
    plan.args[start + 1] = int(plan.args[start + 1]) - 7 * 86_400_000
    replies = await r.fcall("lb_submit", len(plan.keys), *plan.keys, *plan.args)
    [res] = decode_batch(plan, replies)
    assert res.code == "timestamp_outside_window"
    assert await r.dbsize() == 0


async def test_a_game_slip_with_metadata_is_refused_by_the_library(lb: Leaderboard, r: aioredis.Redis) -> None:
    """The game's boards as the environment shapes them keep no metadata (their definition record's
    metadata_bytes is 0): a slip carrying some past the encoder gets its code and writes nothing,
    where the call used to fail whole writing its metadata to no hash."""
    plan = encode_batch(lb.config, [slip("1", "ana", 10, op="set")], NOW)
    assert plan.args[-1] == ""  # the full record's meta, its last field
    replies = await r.fcall("lb_submit", len(plan.keys), *plan.keys, *plan.args[:-1], "a car")
    [res] = decode_batch(plan, replies)
    assert res.code == "metadata_too_large"
    assert await r.dbsize() == 0


async def test_malformed_header_is_a_whole_call_error(r: aioredis.Redis, lb: Leaderboard) -> None:
    import redis.exceptions

    with pytest.raises(redis.exceptions.ResponseError, match="bad_request"):
        await r.fcall("lb_submit", 3, lb.keys.versions, lb.keys.activity, lb.keys.profiles, SUBMIT_LAYOUT, "x")
    # A good first submission, then one naming a layout that does not exist, or a cut-off list:
    # refused as a whole before the first write.
    plan = encode_batch(lb.config, [slip("a", "ana", 5), slip("b", "ben", 6)], LATER)
    periods = len(SETTINGS_FIELDS) + 1  # the first period record, after the settings and their count
    head = periods + 11 * 3 + 10  # three period records, the definition count and the game's record, the layout count
    bad_key = [*plan.args[:head], 999, *plan.args[head + 1 :]]  # a layout naming no key
    at = head + 4 + 6  # the first board's definition, after its layout's record
    assert plan.args[at] == 1
    no_definition = [*plan.args[:at], 0, *plan.args[at + 1 :]]  # every board names its definition
    record = periods + 11 * 3 + 1  # the game's definition record: encoding points
    assert plan.args[record] == "points"
    bad_encoding = [*plan.args[:record], "pointz", *plan.args[record + 1 :]]
    bad_period = [*plan.args[:periods], "weekly", "x", "soon", *plan.args[periods + 3 :]]  # a period's start
    marker = periods + 10  # the first period's closed marker: no key
    bad_marker = [*plan.args[:marker], 999, *plan.args[marker + 1 :]]
    cap = SETTINGS_FIELDS.index("max_scopes")
    bad_cap = [*plan.args[:cap], "-1", *plan.args[cap + 1 :]]
    bad_layout = [*plan.args[:-2], 99, plan.args[-1]]  # the last submission's layout
    # a slip of four parts, one whose full record is cut off, one argument too many
    parts = str(plan.args[-1]).split("\t")
    short_slip = [*plan.args[:-1], "\t".join(parts[:4])]
    no_record = [*plan.args[:-1], ""]
    extra = [*plan.args, "x"]
    count_at = len(plan.args) - 2 * plan.count - 1  # the submission count, before the two records
    assert plan.args[count_at] == 2
    no_count = [*plan.args[:count_at], "-1", *plan.args[count_at + 1 :]]
    malformed = (
        bad_layout,
        plan.args[:-1],
        bad_key,
        no_definition,
        bad_encoding,
        bad_period,
        bad_marker,
        bad_cap,
        short_slip,
        no_record,
        extra,
        no_count,
    )
    for args in malformed:
        with pytest.raises(redis.exceptions.ResponseError, match="bad_request malformed batch"):
            await r.fcall("lb_submit", len(plan.keys), *plan.keys, *args)
    assert await r.dbsize() == 0


def test_submission_fields_round_trip(config: GameConfig) -> None:
    """A stream entry is the slip and the optional fields set; read back by name, it parses to
    the same submission."""
    sub = Submission("id-1", "ana", 12, NOW, op="incr", region="eu", name="Ana")
    assert sub.fields() == {"slip": f"id-1\tana\t12\t{NOW}\tAna", "op": "incr", "region": "eu"}
    assert Submission.parse(entry_fields(sub.fields()), now_ms=NOW, rules=config.rules()) == sub
    assert entry_fields(dataclasses.replace(sub, region=None, name=None).fields()) == {
        "id": "id-1",
        "player": "ana",
        "points": "12",
        "ts": str(NOW),
        "op": "incr",
    }
    defined = Submission("id-2", "ana", 0, NOW, board="race", values=(5, -1), meta="m")
    assert defined.fields() == {"slip": f"id-2\tana\t\t{NOW}\t", "board": "race", "meta": "m", "values": "5,-1"}
    assert Submission.parse(entry_fields(defined.fields())) == defined
    # an entry by name (an earlier release's) is read as it is
    assert entry_fields({"id": "x", "player": "ana"}) == {"id": "x", "player": "ana"}


async def test_without_rows_only_statuses_come_back_and_the_activity_rank_is_kept(lb: Leaderboard) -> None:
    await submit(lb, slip("1", "ana", 500), slip("2", "ben", 900))
    [full] = await lb.submit_batch([slip("3", "ana", 100, NOW + 1000)], now=LATER)
    assert [b.rank for b in full.boards] == [2, 2, 2]
    lean = await lb.submit_batch(
        [slip("4", "ana", 200, NOW + 2000), slip("5", "cy", 50, NOW + 2000), slip("4", "ana", 1)], now=LATER, rows=False
    )
    assert [(r.status, r.boards) for r in lean] == [("ok", ()), ("ok", ()), ("duplicate", ())]
    assert [f["rank"] for f in await lb.feed(2)] == ["3", "2"]  # ana unchanged: still read for the feed
    assert await scores(lb) == [("ben", 900), ("ana", 500), ("cy", 50)]


async def test_without_rows_a_status_is_a_plain_string_and_an_error_keeps_its_triple(
    lb: Leaderboard, r: aioredis.Redis
) -> None:
    entries = [slip("1", "ana", 300), slip("1", "ana", 300), slip("2", "", 5)]
    plan = encode_batch(lb.config, entries, LATER, rows=False)
    replies = await r.fcall("lb_submit", len(plan.keys), *plan.keys, *plan.args)
    assert replies[:2] == ["ok", "duplicate"] and replies[2][:2] == ["error", "invalid_player"]
    results = decode_batch(plan, replies, rows=False, stamp=7)
    assert [(x.status, x.code, x.boards) for x in results] == [
        ("ok", None, ()),
        ("duplicate", None, ()),
        ("error", "invalid_player", ()),
    ]
    # the applied slip's result, made through its slots, is the dataclass's own: equal, frozen
    assert results[0] == SubmitResult("1", "ok", applied_us=7) and hash(results[0]) == hash(results[0])
    with pytest.raises(dataclasses.FrozenInstanceError):
        results[0].id = "2"  # type: ignore[misc]


@pytest.mark.parametrize("ops", [("best", "best", "incr", "set"), (None,)], ids=["general path", "common path"])
async def test_top_versions_and_announcements_match_an_independent_count(
    r: aioredis.Redis, ops: tuple[str | None, ...]
) -> None:
    """One batch (the scorer's path: the top N judged against each board's N-th score) must bump
    versions and announce exactly as often as the top N, read before and after every single
    submission, really changed, and give each slip's activity entry the rank one call per slip
    reads (a rank within the top N is kept through the batch until a write may move it). Few
    points and few timestamps make ties with the N-th entry; slips with no operator take the
    common path."""
    import random

    import orjson

    from leaderboard.windows import window

    rnd = random.Random(7)
    subs = []
    for i in range(400):
        op = rnd.choice(ops)
        sub = slip(f"s{i}", f"p{rnd.randrange(12)}", rnd.randrange(6), NOW - rnd.choice((0, 0, 1, MIN)))
        subs.append(sub | ({"op": op} if op else {}))
    batch = Leaderboard(r, GameConfig(game="batch", top_n=3))
    single = Leaderboard(r, GameConfig(game="single", top_n=3))
    pubsub = r.pubsub()
    await pubsub.ssubscribe(batch.keys.announce_channel)
    await pubsub.get_message(timeout=1)
    await batch.submit_batch(subs, now=LATER, rows=False)
    announced = []
    while (m := await pubsub.get_message(ignore_subscribe_messages=True, timeout=0.3)) is not None:
        msg = orjson.loads(m["data"])
        announced.append((msg["window"], msg["player"], msg["rank"], msg["score"]))
    await pubsub.aclose()

    boards = {w: single.keys.board(w, window(w).period(NOW).label, "global") for w in single.config.windows}

    async def top3(key: str) -> list[tuple[str, float]]:
        flat: list[Any] = await r.zrange(key, 0, 2, desc=True, withscores=True)
        return [(m.decode() if isinstance(m, bytes) else str(m), float(s)) for m, s in flat]

    changes = dict.fromkeys(boards, 0)
    entered = []
    for sub in subs:
        before = {w: await top3(k) for w, k in boards.items()}
        await single.submit_batch([sub], now=LATER)
        for w, k in boards.items():
            after = await top3(k)
            if after != before[w]:
                changes[w] += 1
            was = {m for m, _ in before[w]}
            for rank, (member, _) in enumerate(after):
                if member == sub["player"] and member not in was:
                    total = next(
                        e.score for e in (await single.top(w, n=3, at=NOW)).entries if e.player == sub["player"]
                    )
                    entered.append((w, sub["player"], rank + 1, total))
    got = {field.split(":")[0]: int(v) for field, v in (await versions(batch)).items()}
    assert got == {w: n for w, n in changes.items() if n}
    assert min(changes.values()) > 10  # the sequence does exercise the top
    assert announced == entered
    for k in boards.values():  # and both paths end with the same boards
        assert await r.zrange(k, 0, -1, withscores=True) == await r.zrange(
            k.replace("{single}", "{batch}"), 0, -1, withscores=True
        )
    ranked = [[(e["id"], e["rank"]) for e in await activity_events(r, lb.keys.activity)] for lb in (batch, single)]
    assert ranked[0] == ranked[1]
    assert sum(rank != "0" for _, rank in ranked[0]) > 100  # most slips are of the top's players


async def test_a_slip_with_a_tab_or_text_beyond_ascii_takes_its_full_record_or_the_general_path(
    lb: Leaderboard, r: aioredis.Redis
) -> None:
    entries = [
        slip("t1", "a\tb", 5),  # a tab in a part: the slip goes as its full record
        slip("t2", "ana", 6, name="A\tna"),
        slip("t\t3", "ana", 7),
        slip("t4", "zoë", 8, name="Zoë"),  # beyond ASCII: the general path, applied the same
        slip("t5", "ana", "09"),  # digits the common path takes, written in canonical form
        slip("t6", "ana", "1e3"),
    ]
    plan = encode_batch(lb.config, entries, LATER)
    # the slips with a tab in a part: each field an argument of its own (the full record)
    assert {"t1", "a\tb", "t2", "A\tna", "t\t3"} <= set(plan.args)
    assert {f"t4\tzoë\t8\t{NOW}\tZoë", f"t5\tana\t09\t{NOW}\t", f"t6\tana\t1e3\t{NOW}\t"} <= set(plan.args)
    results = decode_batch(plan, await r.fcall("lb_submit", len(plan.keys), *plan.keys, *plan.args))
    assert [(res.status, res.code) for res in results] == [
        ("error", "invalid_player"),
        ("error", "invalid_name"),
        ("error", "invalid_id"),
        ("ok", None),
        ("ok", None),
        ("error", "invalid_points"),
    ]
    assert await scores(lb) == [("ana", 9), ("zoë", 8)]
    assert [(e["id"], e["points"]) for e in await activity_events(r, lb.keys.activity)] == [("t4", "8"), ("t5", "9")]


async def test_a_call_of_another_layout_is_refused_whole_and_writes_nothing(r: aioredis.Redis, lb: Leaderboard) -> None:
    plan = encode_batch(lb.config, [slip("a", "ana", 5)], LATER)
    assert plan.args[0] == SUBMIT_LAYOUT
    # a newer release's call, and an older one's (its settings began with the clock)
    for first in (SUBMIT_LAYOUT + 1, LATER):
        expected = f"^library_mismatch .* reads layout {SUBMIT_LAYOUT} "
        with pytest.raises(redis.exceptions.ResponseError, match=expected) as e:
            await r.fcall("lb_submit", len(plan.keys), *plan.keys, first, *plan.args[1:])
        refused = from_reply(str(e.value))
        assert isinstance(refused, LibraryMismatch) and refused.layout == SUBMIT_LAYOUT
    assert await r.dbsize() == 0
