"""The game's own boards as freely defined as any board: a stored ``default`` of two keys (laps
highest first, time lowest first), tie ``last`` and metadata, kept per region as the game's boards
are (``global``, ``region:<r>``), written and read through the one path defined boards take
under the same key names as the game's boards: slips through the queue and the scorer, reads on
global and a region, the socket's snapshot, a ban, a correction, a close with its finals, a
FLUSHALL and a rebuild from the durable log; and the rule that keeps a game's boards from being
reshaped once they hold entries."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import httpx
import orjson
import pytest
import redis.asyncio as aioredis

from fleet.redis_server import RedisServer
from leaderboard import GameConfig, InvalidBoard, InvalidSubmission, Leaderboard, Submission, boards, now_ms
from leaderboard.moderation import Moderation
from leaderboard.queue import Queue
from scorer import Consumer, Publisher, ScorerSettings
from scorer.__main__ import parse_args, rank_index
from scorer.__main__ import submit as cli_submit
from scorer.cli import UsageError
from scorer.durable import Action, Slip
from scorer.durable.lifetimes import SlipLifetimes

from .conftest import MS, NOW, until
from .durable_helpers import rebuilt_reads
from .gw_helpers import client, greet, recv_type, request, running, server_files
from .test_api import SERVER, api_process, problem

CONFIG = GameConfig(game="test")  # the conftest's: windows daily, weekly, alltime
KART: dict[str, Any] = {
    "id": "default",
    "keys": [{"name": "laps", "min": 0, "max": 100}, {"name": "time", "direction": "asc", "display": "duration_ms"}],
    "tie": "last",
    "metadata_bytes": 16,
    "top_n": 5,
    "time_zone": "+05:30",  # the game's days start at 18:30 UTC
}
COLUMNS = [
    {"name": "laps", "direction": "desc", "display": "number"},
    {"name": "time", "direction": "asc", "display": "duration_ms"},
]


@pytest.fixture(scope="module")
def api_url(redis_server: RedisServer) -> Iterator[str]:
    with api_process(redis_server.url) as url:
        yield url


def kart(**changes: Any) -> boards.Definition:
    return boards.parse({**KART, **changes})


def settings(redis_url: str, **extra: Any) -> ScorerSettings:
    return ScorerSettings(redis_url=redis_url, game=CONFIG, name="s1", batch=50, block_ms=20, metrics_port=0, **extra)


def race(now: int) -> list[Submission]:
    """Slips of two regions within the default's current day (its time zone's): ana and ben tie
    on both keys (tie last: the later one ranks first)."""
    t = max(now - 9_000, boards.period(kart(), "daily", now).start_ms)
    return [
        Submission("a", "ana", 0, t, values=(3, 81_000), region="eu", meta="red car"),
        Submission("b", "ben", 0, t + 1, values=(3, 81_000), region="us", meta="blue car"),
        Submission("c", "cy", 0, t + 2, values=(3, 79_500), region="eu"),
        Submission("d", "dee", 0, t + 3, values=(2, 50_000), region="eu", name="Dee"),
        Submission("e", "ana", 0, t + 4, values=(2, 40_000), region="eu"),  # worse: kept 3 laps
    ]


async def test_a_two_key_default_per_region_through_the_queue_reads_and_the_socket(
    redis_url: str, r: aioredis.Redis, lb: Leaderboard
) -> None:
    await lb.create_board(kart())
    await lb.boards.refresh()  # this process's tick
    queue, consumer, publisher = Queue(r, CONFIG), Consumer(r, settings(redis_url)), Publisher(r, settings(redis_url))
    now = now_ms()
    # bad input: the existing codes, nothing queued (all or nothing)
    good = Submission("ok", "zed", 0, now, values=(1, 1))
    for bad, code in (
        (Submission("x1", "zed", 40, now), "wrong_key_count"),  # points alone: the default has two keys
        (Submission("x2", "zed", 0, now, values=(1,)), "wrong_key_count"),
        (Submission("x3", "zed", 0, now, values=(101, 5)), "key_out_of_range"),
        (Submission("x4", "zed", 0, now, values=(1, 5), meta="x" * 17), "metadata_too_large"),
    ):
        with pytest.raises(InvalidSubmission) as refused:
            await queue.submit_many([good, bad])
        assert refused.value.code == code
    with pytest.raises(InvalidSubmission) as refused:
        Submission.parse({"id": "x5", "player": "zed", "values": "1,z", "ts": now})
    assert refused.value.code == "invalid_key_value"
    assert await r.xlen(lb.keys.submissions) == 0

    await queue.submit_many(race(now))
    await asyncio.wait_for(consumer.run(burst=True), 30_000 * MS)
    top = await lb.top("weekly", "global")
    assert [(e.rank, e.player, e.keys, e.metadata) for e in top.entries] == [
        (1, "cy", (3, 79_500), None),
        (2, "ben", (3, 81_000), "blue car"),  # reached after ana's equal values: tie last
        (3, "ana", (3, 81_000), "red car"),
        (4, "dee", (2, 50_000), None),
    ]
    assert list(top.columns) == COLUMNS
    eu = await lb.top("daily", "region:eu")
    assert eu.period.start_ms % 86_400_000 == 66_600_000  # the default's day: from 18:30 UTC
    assert [(e.rank, e.player) for e in eu.entries] == [(1, "cy"), (2, "ana"), (3, "dee")]
    around = await lb.around("ana", "weekly", "region:eu", k=1)
    assert [(e.player, e.keys) for e in around.entries] == [
        ("cy", (3, 79_500)),
        ("ana", (3, 81_000)),
        ("dee", (2, 50_000)),
    ]
    assert (await lb.rank("ben", "alltime")).keys == (3, 81_000)
    assert (await lb.rank("ben", "alltime", "region:us")).rank == 1
    ranks = await lb.ranks(["ana", "dee", "nobody"], "weekly", "region:eu")
    assert [s.rank for s in ranks.standings] == [2, 3, None]
    assert ((await lb.stats("weekly")).size, (await lb.stats("weekly", "region:eu")).size) == (4, 3)
    # the same key names as the game's boards always had, and the members and metadata hashes per scope
    label = top.period.label
    assert await r.zcard(lb.keys.board("weekly", label, "region:eu")) == 3
    assert await r.hget(lb.keys.metadata("weekly", label, "region:us"), "ben") == "blue car"
    assert await r.scard(lb.keys.scopes) == 2  # region:eu and region:us, counted as the game's always were

    await publisher.tick()
    async with running(redis_url) as gw, client(gw) as ws:
        _, snap = await greet(ws)  # the global weekly board's
        assert snap["columns"] == COLUMNS
        rows = [(e["player"], e["rank"], e["keys"], e.get("meta")) for e in snap["entries"]]
        assert rows[:2] == [("cy", 1, ["3", "79500"], None), ("ben", 2, ["3", "81000"], "blue car")]
        listed = (await request(ws, {"type": "boards"}, "boards"))["boards"][0]  # the picker's
        assert (listed["board"], listed["columns"], listed["metadata"]) == ("global", COLUMNS, True)
        reply = await request(ws, {"type": "top", "board": "region:eu", "window": "weekly", "n": 2}, "top")
        assert [e["player"] for e in reply["entries"]] == ["cy", "ana"]
        # an entry into the top 5, filed over the socket, is announced in the snapshot's shape
        filed: dict[str, Any] = {"id": "f", "player": "fay", "values": [4, 90_000], "region": "eu", "meta": "green"}
        assert await server_files(gw, filed, {**filed, "id": "f2", "values": [4]}) == "wrong_key_count"
        await asyncio.wait_for(consumer.run(burst=True), 30_000 * MS)
        await publisher.tick()
        announce = await recv_type(ws, "announce")
        assert (announce["player"], announce["rank"], announce["keys"], announce["meta"]) == (
            "fay",
            1,
            ["4", "90000"],
            "green",
        )


async def test_ban_correct_and_close_follow_the_definition(r: aioredis.Redis, lb: Leaderboard) -> None:
    await lb.create_board(kart())
    await lb.boards.refresh()
    now = now_ms()
    assert all(done.code is None for done in await lb.submit_batch([s.fields() for s in race(now)]))
    # the activity entry: key values carry no points; its rank is on the game's first board (top<N> badges)
    fed = {e["id"]: e for e in await lb.feed(10) if e.get("id")}
    assert [(fed[i]["points"], fed[i]["rank"], fed[i].get("board", "")) for i in ("c", "d")] == [
        ("", "1", ""),
        ("", "4", ""),
    ]
    mod = Moderation(lb)
    banned = await mod.ban("cy", actor="ops", reason="cheat")
    assert banned.boards == 6  # global and region:eu of three windows
    assert "cy" not in {e.player for e in (await lb.top("weekly", "region:eu")).entries}
    (refused,) = await lb.submit_batch([Submission("g", "cy", 0, now, values=(9, 1)).fields()])
    assert refused.code == "banned"

    fixed = await mod.correct(
        "dee", actor="ops", reason="timing", values=[3, 80_000], metadata="fixed", window_name="weekly"
    )
    assert {(c.board.scope, c.previous, c.keys) for c in fixed} == {
        ("global", 2, (2, 50_000)),
        ("region:eu", 2, (2, 50_000)),
    }
    top = await lb.top("weekly", "region:eu")
    assert [(e.player, e.keys, e.metadata) for e in top.entries] == [
        ("dee", (3, 80_000), "fixed"),
        ("ana", (3, 81_000), "red car"),
    ]
    for bad, code in (
        ({"values": [1]}, "wrong_key_count"),
        ({"values": [1, 2], "metadata": "y" * 17}, "metadata_too_large"),
    ):
        with pytest.raises(InvalidBoard) as caught:
            await mod.correct("dee", actor="ops", reason="r", window_name="weekly", **bad)
        assert caught.value.code == code
    assert (await lb.top("weekly", "region:eu")).entries == top.entries

    # the day closes: the game's scopes together, under the game's marker and finals, with key values
    period = (await lb.top("daily", "global")).period  # corrected on the weekly boards only
    scopes = ["global", "region:eu", "region:us"]
    event = await lb.close(period, scopes, top_n=3, keep=5, maxlen=100, definition=lb.boards.general)
    assert event is not None
    [final] = await lb.finals("daily")
    assert final["columns"] == COLUMNS and "board" not in final
    assert [(e["player"], e["keys"], e.get("meta")) for e in final["top"]["region:eu"]] == [
        ("ana", ["3", "81000"], "red car"),
        ("dee", ["2", "50000"], None),
    ]
    assert await r.exists(lb.keys.closed_marker("daily", period.label))
    (late,) = await lb.submit_batch([Submission("h", "ana", 0, now, values=(9, 1), region="eu").fields()])
    assert late.code == "period_closed"


async def test_a_rebuild_gives_every_read_back(r: aioredis.Redis, redis_url: str, tmp_path: Path) -> None:
    async def moderate(mod: Moderation) -> None:
        await mod.ban("cy", actor="ops", reason="cheat")
        await mod.correct("dee", actor="ops", reason="t", values=[3, 80_000], metadata="fixed", window_name="alltime")

    before = await rebuilt_reads(
        r, settings, redis_url=redis_url, config=CONFIG, store_url=f"sqlite:///{tmp_path}/scores.db",
        definition=kart(), slips=race(now_ms()), moderate=moderate,
        scopes=("global", "region:eu", "region:us"), players=("ana", "ben", "cy", "dee"),
    )  # fmt: skip
    assert [e.player for e in before[13].entries] == ["dee", "ben", "ana"]  # alltime global: corrected, cy banned


async def test_the_game_s_boards_keep_the_shape_their_entries_were_written_in(
    r: aioredis.Redis, lb: Leaderboard
) -> None:
    # no entries yet: the default may take any shape, and leave it again
    await lb.create_board(kart())
    await lb.delete_board(boards.DEFAULT_ID)
    await lb.create_board(kart())
    await lb.boards.refresh()
    (done,) = await lb.submit_batch([Submission("a", "ana", 0, now_ms(), values=(3, 81_000)).fields()])
    assert done.code is None
    state = (await r.hgetall(lb.keys.boards), await r.get(lb.keys.boards_version))
    # with entries: another order, back to the environment's shape, or deleted, each board_reorder
    for change in (
        lambda: lb.update_board(kart(tie="first")),
        lambda: lb.update_board(kart(keys=[{"name": "laps", "min": 0, "max": 100}])),
        lambda: lb.delete_board(boards.DEFAULT_ID),
    ):
        with pytest.raises(InvalidBoard) as caught:
            await change()
        assert caught.value.code == "board_reorder"
    assert (await r.hgetall(lb.keys.boards), await r.get(lb.keys.boards_version)) == state
    # what does not reorder still changes: its top N, a display hint, its metadata limit
    await lb.update_board(kart(top_n=7, metadata_bytes=32))
    # a game with entries of the environment's shape: a reshaping create is refused, nothing written
    await r.flushall()
    await lb.boards.refresh()  # the environment's shape again
    (done,) = await lb.submit_batch([Submission("a", "ana", 40, now_ms()).fields()])
    assert done.code is None
    with pytest.raises(InvalidBoard) as caught:
        await lb.create_board(kart())
    assert caught.value.code == "board_reorder"
    assert await r.hgetall(lb.keys.boards) == {}
    # a game slip carrying values or metadata while the game takes points: refused, not dropped
    entries = [
        Submission("v", "ana", 0, now_ms(), values=(3, 1)).fields(),
        {**Submission("m", "ana", 5, now_ms()).fields(), "meta": "x"},
    ]
    assert [d.code for d in await lb.submit_batch(entries)] == ["wrong_key_count", "metadata_too_large"]


async def test_http_submits_key_values_and_metadata_to_the_game_s_boards(
    api_url: str, redis_url: str, r: aioredis.Redis, lb: Leaderboard
) -> None:
    await lb.create_board(kart())
    await lb.boards.refresh()
    async with httpx.AsyncClient(base_url=api_url, timeout=10) as http:

        async def post(body: dict[str, Any], board: str = "region:eu") -> httpx.Response:
            return await http.post(f"/v1/boards/{board}/scores", json={"player_id": "ana", **body}, headers=SERVER)

        async def accepted() -> bool:  # the API follows the stored default within its refresh
            return (await post({"match_id": "h1", "values": [3, 81_000], "meta": "red car"})).status_code == 202

        await until(accepted, 5)
        for body, code in (
            ({"score": 40}, "wrong_key_count"),  # points alone: two keys
            ({"values": [1]}, "wrong_key_count"),
            ({"values": [101, 1]}, "key_out_of_range"),
            ({"values": [1, "x"]}, "invalid_key_value"),
            ({"values": [1, 1], "meta": "y" * 17}, "metadata_too_large"),
            ({"values": [1, 1], "score": 3}, "bad_message"),
        ):
            problem(await post({"match_id": "h2", **body}), 400, code)
        assert await r.xlen(lb.keys.submissions) == 1
    await asyncio.wait_for(Consumer(r, settings(redis_url)).run(burst=True), 30_000 * MS)
    for scope in ("global", "region:eu"):
        [entry] = (await lb.top("weekly", scope)).entries
        assert (entry.player, entry.keys, entry.metadata) == ("ana", (3, 81_000), "red car")


async def test_the_cli_files_key_values_and_metadata_of_the_game_s_boards(
    redis_url: str, r: aioredis.Redis, lb: Leaderboard
) -> None:
    await lb.create_board(kart())
    settings = ScorerSettings(redis_url=redis_url, game=CONFIG, metrics_port=0)
    argv = ["submit", "--player", "ana", "--region", "eu", "--values", "3,81000"]
    out = await cli_submit(settings, parse_args([*argv, "--meta", "red car"]))
    assert "board default: 3,81000" in out
    with pytest.raises(InvalidSubmission) as refused:
        await cli_submit(settings, parse_args([*argv, "--meta", "x" * 17]))
    assert refused.value.code == "metadata_too_large"
    with pytest.raises(UsageError):
        await cli_submit(settings, parse_args([*argv, "--points", "4"]))
    [(_, fields)] = cast(list[tuple[str, dict[str, str]]], await r.xrange(lb.keys.submissions))
    assert (fields["values"], fields["meta"], fields["region"]) == ("3,81000", "red car", "eu")


def test_a_game_slip_of_key_values_lives_as_long_as_its_default_s_periods() -> None:
    """The durable log's compaction drops a game slip of key values once every period it wrote to
    expired, by the default it was filed under (a slip names no board: the game's)."""
    daily = kart(windows=["daily"])
    lifetimes = SlipLifetimes([Action(1, "1-0", "board", ("default", daily.to_json()))])
    fields = Submission("a", "ana", 0, NOW, values=(3, 81_000)).fields() | {"id": "a", "ts": str(NOW)}
    slip = Slip("a", 2, 0, orjson.dumps(fields).decode())
    assert lifetimes.expire_at(slip) == boards.period(daily, "daily", NOW).expire_at_s


async def test_points_slips_enqueued_straight_under_a_one_key_default_are_rebuilt(
    r: aioredis.Redis, redis_url: str, tmp_path: Path
) -> None:
    """``Leaderboard.enqueue`` files a points slip as it is given (``Queue`` files its one key
    value): lb_submit takes its points as the default's key, lowest first, and the durable log
    keeps it as it was applied, not as the environment's packed points."""
    lap = kart(windows=["daily", "alltime"], **LAP)
    now = now_ms()
    t = max(now - 9_000, boards.period(lap, "daily", now).start_ms)
    slips = [
        Submission("a", "ana", 81_000, t),
        Submission("b", "ben", 79_500, t + 1, region="eu"),
        Submission("c", "ana", 90_000, t + 2),  # slower: kept 81,000
        Submission("d", "cy", 79_500, t + 3, region="eu"),  # ben's time, later: tie last ranks cy first
    ]

    async def moderate(mod: Moderation) -> None:
        await mod.correct("ana", actor="ops", reason="t", points=70_000, window_name="alltime")

    before = await rebuilt_reads(
        r, settings, redis_url=redis_url, config=CONFIG, store_url=f"sqlite:///{tmp_path}/scores.db",
        definition=lap, slips=slips, moderate=moderate,
        scopes=("global", "region:eu"), players=("ana", "ben", "cy"), direct=True,
    )  # fmt: skip
    assert [(e.player, e.keys) for e in before[1].entries] == [
        ("cy", (79_500,)),
        ("ben", (79_500,)),
        ("ana", (81_000,)),
    ]
    assert [e.player for e in before[5].entries] == ["ana", "cy", "ben"]  # alltime global: ana corrected


SEASON_S = 3_600  # the shortest season a definition may have


def seasonal(now: int, **changes: Any) -> boards.Definition:
    """The kart default with hour-long seasons, the current one ``s5``, half over at ``now`` (no
    season ends while a test runs)."""
    start = now - (5 * SEASON_S + SEASON_S // 2) * 1000
    return kart(windows=["weekly", "season"], season={"start_ms": start, "length_s": SEASON_S}, **changes)


async def test_a_season_on_the_default_is_written_read_moderated_and_closed(
    api_url: str, redis_url: str, r: aioredis.Redis, lb: Leaderboard
) -> None:
    now = now_ms()
    await lb.create_board(seasonal(now))
    await lb.boards.refresh()
    assert lb.config.windows == ("weekly", "season")
    current = lb.boards.period("season", now)
    assert (current.label, current.end_ms - current.start_ms) == ("s5", SEASON_S * 1000)
    before = current.start_ms - SEASON_S * 1000 + 1000  # in the season before
    slips = [
        Submission("a", "ana", 0, before, values=(3, 81_000), region="eu", meta="red car"),
        Submission("b", "ben", 0, before + 1, values=(2, 50_000), region="us"),
        Submission("c", "cy", 0, now, values=(3, 79_500), region="eu"),
        Submission("d", "ana", 0, now, values=(1, 9_000), region="eu"),
        Submission("e", "dee", 0, now, values=(1, 8_000), region="eu"),
    ]
    assert all(done.code is None for done in await lb.submit_batch([s.fields() for s in slips]))
    top = await lb.top("season", "global")
    assert top.period.label == "s5" and list(top.columns) == COLUMNS
    assert [(e.rank, e.player, e.keys) for e in top.entries] == [
        (1, "cy", (3, 79_500)),
        (2, "dee", (1, 8_000)),
        (3, "ana", (1, 9_000)),  # this season's own: its 3 laps were the season before's
    ]
    past = await lb.top("season", "region:eu", period="previous")
    assert (past.period.label, [(e.player, e.metadata) for e in past.entries]) == ("s4", [("ana", "red car")])
    assert [e.player for e in (await lb.top("season", "global", period="s4")).entries] == ["ana", "ben"]
    assert (await lb.rank("ana", "season", "region:eu")).rank == 3
    assert [e.player for e in (await lb.around("dee", "season", k=1)).entries] == ["cy", "dee", "ana"]
    assert (await lb.stats("season", "region:eu")).size == 3
    assert await r.zcard(lb.keys.board("season", "s5", "region:eu")) == 3  # the game's key names

    mod = Moderation(lb)
    await mod.ban("cy", actor="ops", reason="cheat")
    fixed = await mod.correct("ana", actor="ops", reason="t", values=[2, 1], window_name="season")
    assert {(c.board.scope, c.keys) for c in fixed} == {("global", (1, 9_000)), ("region:eu", (1, 9_000))}
    assert [(e.player, e.keys) for e in (await lb.top("season", "region:eu")).entries] == [
        ("ana", (2, 1)),
        ("dee", (1, 8_000)),
    ]

    # the operator's rank-index takes the season as a window of the game's (its process reads the default)
    ranked = await lb.top("season", "region:eu")
    operator = ScorerSettings(redis_url=redis_url, game=CONFIG, metrics_port=0)
    out = await rank_index(operator, parse_args(["rank-index", "--window", "season"]))
    assert out.splitlines()[-1] == "rebuilt the rank companions of 5 boards, 8 members"  # s4 and s5, their scopes
    assert await lb.top("season", "region:eu") == ranked
    # the scorer publishes the current season and closes the one before, its scopes together
    publisher = Publisher(r, settings(redis_url, close_delay_s=0))
    await publisher.tick()
    [final] = await lb.finals("season")
    assert (final["period"], final["columns"]) == ("s4", COLUMNS)
    finals = [(e["player"], e["keys"]) for e in final["top"]["global"]]
    assert finals == [("ana", ["3", "81000"]), ("ben", ["2", "50000"])]
    (late,) = await lb.submit_batch([Submission("f", "fay", 0, before + 2, values=(9, 1)).fields()])
    assert late.code == "period_closed"
    async with running(redis_url) as gw, client(gw) as ws:
        await greet(ws)
        await ws.send(orjson.dumps({"type": "subscribe", "board": "region:eu", "window": "season", "id": 1}).decode())
        snap = await recv_type(ws, "snapshot")
        assert (snap["window"], snap["period"]) == ("season", "s5")
        assert [(e["player"], e["keys"]) for e in snap["entries"]] == [("ana", ["2", "1"]), ("dee", ["1", "8000"])]
        reply = await request(ws, {"type": "top", "board": "global", "window": "season", "period": "s4", "n": 2}, "top")
        assert [e["player"] for e in reply["entries"]] == ["ana", "ben"]
    async with httpx.AsyncClient(base_url=api_url, timeout=10) as http:

        async def held() -> bool:  # the API follows the stored default within its refresh
            got = await http.get("/v1/boards/region:eu/top", params={"window": "season", "n": 2})
            return got.status_code == 200 and got.headers.get("etag", "").startswith('"s5.')

        await until(held, 5)  # the published snapshot's top (api/top.py), in the season's period
        stats = await http.get("/v1/boards/region:eu/stats", params={"window": "season", "period": "s4"})
        assert (stats.status_code, stats.json()["size"]) == (200, 1)


async def test_the_api_serves_the_published_top_in_the_default_s_own_days(
    api_url: str, redis_url: str, r: aioredis.Redis, lb: Leaderboard
) -> None:
    now = now_ms()
    # twelve hours off UTC the side that puts the default's day on another date than UTC's now
    zone = "-12:00" if now // 3_600_000 % 24 < 12 else "+12:00"
    await lb.create_board(kart(windows=["daily"], time_zone=zone))
    await lb.boards.refresh()
    day = lb.boards.period("daily", now).label
    assert day != CONFIG.window_spec("daily").period(now).label
    (done,) = await lb.submit_batch([Submission("a", "ana", 0, now, values=(3, 81_000)).fields()])
    assert done.code is None
    await Publisher(r, settings(redis_url)).tick()
    # the module's API process read other tests' defaults, in a Redis flushed since and given
    # this default at the same version: the change log's epoch tells its registry
    async with httpx.AsyncClient(base_url=api_url, timeout=10) as http:

        async def held() -> bool:  # the published snapshot's top (api/top.py), its ETag in that day
            got = await http.get("/v1/boards/global/top", params={"window": "daily", "n": 2})
            return got.status_code == 200 and got.headers.get("etag", "").startswith(f'"{day}.')

        await until(held, 5, every=0.1)


LAP = {"keys": [{"name": "time", "direction": "asc", "min": 0, "max": 1 << 30}], "metadata_bytes": 0}
# The environment's boards (daily, weekly, alltime), and a month the environment does not keep
MONTHLY = {
    "id": "default",
    "keys": [{"name": "points", "max": 10**6}],
    "windows": ["daily", "weekly", "alltime", "monthly"],
}


async def test_a_calendar_window_on_the_default_is_written_read_moderated_and_closed(
    api_url: str, redis_url: str, r: aioredis.Redis, lb: Leaderboard
) -> None:
    """A stored default's ``monthly`` joins the game's windows as a season does: the scorer
    writes it, reads, the API and the socket serve it, a correction takes it, and the publisher
    closes the month before with its finals."""
    await lb.create_board(boards.parse(MONTHLY))
    await lb.boards.refresh()
    assert lb.config.windows == ("daily", "weekly", "alltime", "monthly") and lb.boards.general is not None
    now = now_ms()
    month = lb.boards.period("monthly", now)
    before = month.start_ms - 3_600_000  # the last hour of the month before, applied as of then
    then = [Submission("a", "ana", 70, before), Submission("b", "ben", 50, before + 1, region="eu")]
    assert all(done.code is None for done in await lb.submit_batch([s.fields() for s in then], now=before))
    await Queue(r, CONFIG).submit_many([Submission("c", "cy", 40, now, region="eu"), Submission("d", "ana", 30, now)])
    await asyncio.wait_for(Consumer(r, settings(redis_url)).run(burst=True), 30_000 * MS)
    top = await lb.top("monthly", "global")
    assert (top.period.label, [(e.player, e.keys) for e in top.entries]) == (
        month.label,
        [("cy", (40,)), ("ana", (30,))],
    )
    past = await lb.top("monthly", "region:eu", period="previous")
    assert [e.player for e in past.entries] == ["ben"] and past.period.end_ms == month.start_ms
    assert (await lb.rank("ana", "alltime")).keys == (70,)
    fixed = await Moderation(lb).correct("ana", 45, actor="ops", reason="t", window_name="monthly")
    assert {(c.board.window, c.board.scope) for c in fixed} == {("monthly", "global")}

    publisher = Publisher(r, settings(redis_url, close_delay_s=0))
    await publisher.tick()
    [final] = await lb.finals("monthly")
    assert final["period"] == past.period.label
    assert [(e["player"], e["keys"]) for e in final["top"]["global"]] == [("ana", ["70"]), ("ben", ["50"])]
    (late,) = await lb.submit_batch([Submission("e", "dee", 9, before + 2).fields()], now=before + 2)
    assert late.code == "period_closed"
    async with running(redis_url) as gw, client(gw) as ws:
        await greet(ws)
        await ws.send(orjson.dumps({"type": "subscribe", "board": "global", "window": "monthly", "id": 1}).decode())
        snap = await recv_type(ws, "snapshot")
        assert (snap["window"], snap["period"]) == ("monthly", month.label)
        assert [(e["player"], e["keys"]) for e in snap["entries"]] == [("ana", ["45"]), ("cy", ["40"])]
        reply = await request(
            ws, {"type": "top", "board": "region:eu", "window": "monthly", "period": "previous"}, "top"
        )
        assert [e["player"] for e in reply["entries"]] == ["ben"]
    async with httpx.AsyncClient(base_url=api_url, timeout=10) as http:

        async def served() -> bool:  # the API follows the stored default within its refresh
            got = await http.get("/v1/boards/global/top", params={"window": "monthly", "n": 2})
            return got.status_code == 200 and [e["player"] for e in got.json()["entries"]] == ["ana", "cy"]

        await until(served, 5)
        stats = await http.get("/v1/boards/region:eu/stats", params={"window": "monthly", "period": "previous"})
        assert (stats.status_code, stats.json()["size"]) == (200, 1)


async def test_a_calendar_window_on_the_default_is_rebuilt(r: aioredis.Redis, redis_url: str, tmp_path: Path) -> None:
    monthly = boards.parse(MONTHLY)
    now = now_ms()
    slips = [
        Submission("a", "ana", 70, now - 2, region="eu"),
        Submission("b", "ben", 50, now - 1),
        Submission("c", "cy", 90, now, region="eu"),
    ]

    async def moderate(mod: Moderation) -> None:
        await mod.ban("cy", actor="ops", reason="cheat")
        await mod.correct("ben", 80, actor="ops", reason="t", window_name="monthly")

    before = await rebuilt_reads(
        r, settings, redis_url=redis_url, config=CONFIG, store_url=f"sqlite:///{tmp_path}/scores.db",
        definition=monthly, slips=slips, moderate=moderate,
        scopes=("global", "region:eu"), players=("ana", "ben", "cy"),
    )  # fmt: skip
    # the monthly global top (after each window's global and eu reads of daily, weekly, alltime)
    assert [(e.player, e.keys) for e in before[13].entries] == [("ben", (80,)), ("ana", (70,))]


@pytest.mark.parametrize("shape", [{}, LAP], ids=["lex", "packed"])
async def test_a_season_on_the_default_is_rebuilt(
    r: aioredis.Redis, redis_url: str, tmp_path: Path, shape: dict[str, Any]
) -> None:
    now = now_ms()
    definition = seasonal(now, **shape)
    one = len(definition.keys) == 1
    # one key (the lap time): the race's times alone, and no metadata
    slips = [replace(s, values=s.values[1:]) if one else s for s in race(now) if not one or s.meta is None]

    async def moderate(mod: Moderation) -> None:
        await mod.ban("cy", actor="ops", reason="cheat")
        await mod.correct("dee", actor="ops", reason="t", values=[3, 80_000][one:], window_name="season")

    before = await rebuilt_reads(
        r, settings, redis_url=redis_url, config=CONFIG, store_url=f"sqlite:///{tmp_path}/scores.db",
        definition=definition, slips=slips, moderate=moderate,
        scopes=("global", "region:eu"), players=("ana", "ben", "cy", "dee"),
    )  # fmt: skip
    assert definition.encoding == (boards.PACKED if one else boards.LEX)
    assert before[5].period.label == "s5"  # the season's global top: corrected, cy banned
    assert [e.player for e in before[5].entries] == (["ana", "dee"] if one else ["dee", "ben", "ana"])


# ana's boards: the game's lex default (global, a region), a defined lex board, a packed one
BOARDS = (("daily", "global"), ("weekly", "region:eu"), ("monthly", "board:laps"), ("daily", "board:solo"))


async def test_a_profile_change_reaches_the_published_top_of_every_lex_board(
    api_url: str, redis_url: str, r: aioredis.Redis, lb: Leaderboard
) -> None:
    """A lex board's members are not player ids: the profile write finds the player through the
    board's members hash, on the game's two-key default as on a defined two-key board; and a
    defined board's windows, days and top N (deeper than the game's here) are its own, on either
    encoding."""
    now = now_ms()
    # `laps` keeps a window the game does not, `solo` days other than the default's (+05:30) now
    zone = "+12:00" if 43_200_000 <= now % 86_400_000 < 66_600_000 else "-12:00"
    await lb.create_board(kart())
    await lb.create_board(kart(id="laps", windows=["monthly"], top_n=20, time_zone="UTC"))
    solo = boards.parse({"id": "solo", **LAP, "windows": ["daily"], "time_zone": zone, "top_n": 20})  # packed
    await lb.create_board(solo)
    await lb.boards.refresh()
    assert lb.boards.period("daily", now).label != boards.period(solo, "daily", now).label
    t = max(now - 9_000, boards.period(kart(), "daily", now).start_ms)
    slips = [Submission("a", "ana", 0, t, values=(3, 81_000), region="eu", name="Ana")]
    # on `laps` and `solo` ana stands 12th: beyond the game's top N (10), within the boards' (20)
    for i in range(11):
        slips.append(Submission(f"l{i}", f"p{i:02}", 0, now - 5, board="laps", values=(9, 1_000 + i)))
        slips.append(Submission(f"s{i}", f"p{i:02}", 0, now - 5, board="solo", values=(1_000 + i,)))
    slips.append(Submission("l", "ana", 0, now - 5, board="laps", values=(1, 5_000), name="Ana"))
    slips.append(Submission("s", "ana", 0, now - 5, board="solo", values=(5_000,)))
    assert all(done.code is None for done in await lb.submit_batch([s.fields() for s in slips]))
    publisher = Publisher(r, settings(redis_url))
    await publisher.tick()

    async def shown() -> dict[tuple[str, str], str | None]:  # ana's name in each published top
        names = {}
        for window, scope in BOARDS:
            snap = orjson.loads(cast(str, await r.get(lb.keys.latest(window, scope))))
            names[window, scope] = next(e.get("name") for e in snap["entries"] if e["player"] == "ana")
        return names

    assert set((await shown()).values()) == {"Ana"}
    async with httpx.AsyncClient(base_url=api_url, timeout=10) as http:
        put = await http.put("/v1/players/ana/profile", json={"name": "Anna"}, headers=SERVER)
        assert put.status_code == 200, put.text
        await publisher.tick()  # within one tick, on every board ana is on
        assert set((await shown()).values()) == {"Anna"}
        # the operator's lookup finds her on the game's lex boards too
        found = (await http.get("/v1/players/ana", headers=SERVER)).json()
        on = {(e["window"], e["board"], e["rank"]) for e in found["entries"]}
        assert {("daily", "global", 1), ("weekly", "region:eu", 1), ("monthly", "board:laps", 12)} <= on
        assert ("daily", "board:solo", 12) in on


async def test_a_slip_s_new_name_reaches_the_published_top_of_each_of_its_boards(
    redis_url: str, r: aioredis.Redis, lb: Leaderboard
) -> None:
    """A slip that leaves a top N as it was but renames the player still republishes each board
    of the slip on whose top N the player stands: on the common slip's one pass (a plain slip of
    the game's packed boards) and on the general path (an operator named, a defined lex board)."""
    now = now_ms()
    await lb.create_board(kart(id="laps", windows=["daily"], time_zone="UTC"))
    await lb.boards.refresh()
    game = [("daily", "global"), ("weekly", "global"), ("alltime", "global")]
    publisher = Publisher(r, settings(redis_url))

    async def rename(slip: Submission, on: list[tuple[str, str]]) -> None:
        assert all(done.code is None for done in await lb.submit_batch([slip.fields()]))
        await publisher.tick()
        for window, scope in on:
            snap = orjson.loads(cast(str, await r.get(lb.keys.latest(window, scope))))
            assert [e.get("name") for e in snap["entries"] if e["player"] == "ana"] == [slip.name], (window, scope)

    await rename(Submission("g1", "ana", 100, now - 9, name="Ana"), game)
    await rename(
        Submission("l1", "ana", 0, now - 9, board="laps", values=(3, 81_000), name="Ana"), [("daily", "board:laps")]
    )
    # none of these beats ana's best: only the name changes
    await rename(Submission("g2", "ana", 50, now - 8, name="Anna"), game)  # the one pass
    await rename(Submission("g3", "ana", 40, now - 7, op="best", name="Annie"), game)  # the general path
    await rename(
        Submission("l2", "ana", 0, now - 6, board="laps", values=(2, 90_000), name="Ann"), [("daily", "board:laps")]
    )
    # a new player's first name, on the slip that brings them into the top N: one bump per board,
    # not two (a delta goes out only for the version after the last one sent: leaderboard/delta.py)
    before = {k: int(v) for k, v in cast(dict[str, str], await r.hgetall(lb.keys.versions)).items()}
    await rename(Submission("g4", "bo", 500, now - 5, name="Bo"), [])
    after = {k: int(v) for k, v in cast(dict[str, str], await r.hgetall(lb.keys.versions)).items()}
    moved = {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
    assert sorted(moved.values()) == [1, 1, 1] and all(k.endswith(":global") for k in moved), moved
