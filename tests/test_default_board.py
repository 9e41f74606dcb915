"""The game's default board: a stored ``default`` definition takes effect on the game's own boards
(global, region:, mode:) in every process within a tick, without a restart, and deleting it brings
the environment's back; shapes those boards cannot carry are refused at put, nothing written. And
the queue checks a slip against its board's definition before queueing it."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest
import redis.asyncio as aioredis

from leaderboard import BadRequest, GameConfig, InvalidBoard, InvalidSubmission, Leaderboard, Submission, boards, now_ms
from leaderboard.definitions import configured
from leaderboard.queue import Queue
from leaderboard.submission import entry_fields
from scorer import Consumer, Publisher, ScorerSettings

from .conftest import MS, until
from .gw_helpers import T, client, greet, recv_type, request, running, token

CONFIG = GameConfig(game="test")  # the conftest's: windows daily, weekly, alltime; best; ordinal; top 10
BASE = configured(CONFIG).as_dict()
KEY = BASE["keys"][0]  # points, desc, 0..134,217,727 (the all-time board's ceiling)


def default(**changes: Any) -> boards.Definition:
    return boards.parse({**BASE, **changes})


# Shapes the game's boards cannot carry, each with its code (keys, directions, bounds, tie, a time
# zone, metadata, per-key operators, windows and a season they carry: tests/test_game_default.py).
REFUSED: list[tuple[dict[str, Any], str]] = [
    ({"scopes": ["region"]}, "invalid_default_board"),  # kept per region and mode already
    ({"rank_mode": "dense"}, "board_reorder"),  # the game's writes keep no distinct points
]


@pytest.mark.parametrize(("changes", "code"), REFUSED)
async def test_a_default_the_game_cannot_carry_is_refused_and_nothing_written(
    r: aioredis.Redis, lb: Leaderboard, changes: dict[str, Any], code: str
) -> None:
    kept = default(top_n=5)
    await lb.update_board(kept)
    before = (await r.hgetall(lb.keys.boards), await r.get(lb.keys.boards_version))
    for put in (lb.create_board, lb.update_board):
        with pytest.raises(InvalidBoard) as refused:
            await put(default(**changes))
        assert refused.value.code == code, refused.value
    assert (await r.hgetall(lb.keys.boards), await r.get(lb.keys.boards_version)) == before
    await lb.delete_board(boards.DEFAULT_ID)
    with pytest.raises(InvalidBoard) as refused:  # nothing stored: created, checked the same
        await lb.create_board(default(**changes))
    assert refused.value.code == code
    assert await r.hgetall(lb.keys.boards) == {}


async def test_a_window_that_expires_before_the_games_oldest_slip_is_refused(r: aioredis.Redis) -> None:
    """A window the environment does not keep joins the game's: one whose keys expire before a
    slip LB_IDEMPOTENCY_S still accepts (a daily board kept 7 days, slips 10 days old) would lose
    them, so the game's configuration refuses it, as it refuses such an LB_WINDOWS."""
    lb = Leaderboard(r, GameConfig(game="test", windows=("weekly", "alltime"), idempotency_s=10 * 86_400))
    daily = {**configured(lb.config).as_dict(), "windows": ["daily", "weekly", "alltime"]}
    with pytest.raises(InvalidBoard) as refused:
        await lb.create_board(boards.parse(daily))
    assert refused.value.code == "invalid_default_board"
    assert await r.hgetall(lb.keys.boards) == {}
    await lb.create_board(boards.parse({**daily, "windows": ["weekly", "monthly"]}))  # both kept long enough
    await lb.boards.refresh()
    assert lb.config.windows == ("weekly", "monthly")


async def test_fewer_windows_narrow_what_the_game_writes_and_reads(
    redis_url: str, r: aioredis.Redis, lb: Leaderboard
) -> None:
    ceiling = 68_719_476_735  # the daily board's: the one window kept
    await lb.create_board(default(windows=["daily"], keys=[{**KEY, "max": ceiling}]))
    await lb.boards.refresh()
    assert lb.config.windows == ("daily",) and lb.config.rules().max_points == ceiling
    queue = Queue(r, CONFIG)
    await queue.submit(Submission("big", "ana", 10**9, now_ms()))  # above the all-time ceiling: daily only
    [done] = await lb.submit_batch([f for _, f in cast(Any, await r.xrange(lb.keys.submissions))])
    assert done.code is None and [b.board.window for b in done.boards] == ["daily"]
    with pytest.raises(BadRequest, match="not kept"):
        await lb.top("weekly")
    async with running(redis_url) as gw:  # LB_GW_WINDOW unset: weekly, which is no longer kept

        async def first_board_is(name: str) -> bool:  # a new connection's welcome and first snapshot
            async with client(gw) as ws:
                welcome, snap = await greet(ws)
                return bool(welcome["window"] == snap["window"] == name)

        registry = gw.default_game.lb.boards
        await until(lambda: registry.config.windows == ("daily",), 3 * T, every=50 * MS)  # its next refresh
        assert await first_board_is("daily")
        await lb.delete_board(boards.DEFAULT_ID)
        await until(lambda: registry.config == CONFIG, 3 * T, every=50 * MS)
        assert await first_board_is("weekly")
        async with client(gw) as ws:
            await greet(ws)
            reply = await request(ws, {"type": "top", "board": "global", "n": 1}, "top")
            assert reply["window"] == "weekly"

    await lb.boards.refresh()
    assert lb.config == CONFIG


async def test_a_stored_default_reaches_the_scorer_and_the_gateways_without_a_restart(
    redis_url: str, r: aioredis.Redis, lb: Leaderboard
) -> None:
    settings = ScorerSettings(redis_url=redis_url, game=CONFIG, name="s1", batch=50, block_ms=20, metrics_port=0)
    consumer, publisher, queue = Consumer(r, settings), Publisher(r, settings), Queue(r, CONFIG)
    now = now_ms() - 60_000
    points = [100 - 5 * i if i != 2 else 95 for i in range(12)]  # p1 and p2 tie
    await queue.submit_many([Submission(f"s{i}", f"p{i}", p, now + 1000 * i) for i, p in enumerate(points)])
    await asyncio.wait_for(consumer.run(burst=True), 30_000 * MS)
    await publisher.tick()
    label = CONFIG.window_specs[1].period(now_ms()).label
    version_field = f"weekly:{label}:global"

    async with running(redis_url) as gw, client(gw) as ws:
        _, snap = await greet(ws)  # the global weekly board's: the environment's top 10, ordinal
        assert (len(snap["entries"]), snap["mode"], "columns" in snap) == (10, "ordinal", False)

        money = {**KEY, "display": "money"}
        await lb.update_board(default(top_n=3, operator="incr", rank_mode="competition", keys=[money]))
        # the publisher's next tick republishes the game's boards as the stored default says
        await publisher.tick()
        snap = await recv_type(ws, "snapshot")
        assert [(e["player"], e["rank"], e["keys"]) for e in snap["entries"]] == [
            ("p0", 1, ["100"]),
            ("p1", 2, ["95"]),
            ("p2", 2, ["95"]),
        ]
        money_column = {"name": "points", "direction": "desc", "display": "money"}
        assert (snap["mode"], snap["columns"]) == ("competition", [money_column])

        # the consumer's next batch: incr is the operator now, and top 3 decides what bumps the version
        async def consumer_follows() -> bool:
            await consumer.lb.boards.refresh_due()  # what each batch does first
            return consumer.lb.config.operator == "incr"

        await until(consumer_follows, 3 * T, every=50 * MS)
        version = int(cast(str, await r.hget(CONFIG.keys.versions, version_field)))
        await queue.submit(Submission("more11", "p11", 22, now_ms()))  # 45 + 22: 8th, outside the top 3
        await asyncio.wait_for(consumer.run(burst=True), 30_000 * MS)
        assert (await lb.rank("p11", "weekly")).score == 67
        assert int(cast(str, await r.hget(CONFIG.keys.versions, version_field))) == version  # not in the top 3
        await queue.submit(Submission("more3", "p3", 20, now_ms()))  # 85 + 20: first
        await asyncio.wait_for(consumer.run(burst=True), 30_000 * MS)
        assert int(cast(str, await r.hget(CONFIG.keys.versions, version_field))) > version
        await publisher.tick()
        snap = await recv_type(ws, "snapshot")
        assert [(e["player"], e["score"]) for e in snap["entries"]] == [("p3", 105), ("p0", 100), ("p1", 95)]

        # the gateway's own reads and its welcome follow within its refresh
        async def gateway_follows() -> bool:
            reply = await request(ws, {"type": "top", "board": "global", "window": "weekly", "n": 5}, "top")
            return cast(bool, reply["mode"] == "competition")

        await until(gateway_follows, 3 * T, every=50 * MS)
        async with client(gw, f"?token={token('mia')}") as other:
            welcome, _ = await greet(other)
            assert welcome["top"] == 3

        # deleted: the environment's default again, everywhere
        await lb.delete_board(boards.DEFAULT_ID)
        await publisher.tick()
        snap = await recv_type(ws, "snapshot")
        assert (len(snap["entries"]), snap["mode"], "columns" in snap) == (10, "ordinal", False)
        assert publisher.config == CONFIG


async def test_the_queue_checks_a_slip_against_its_boards_definition(
    redis_url: str, r: aioredis.Redis, lb: Leaderboard
) -> None:
    tower = {"id": "tower", "keys": [{"name": "floor", "min": 0, "max": 1000}, {"name": "time", "direction": "asc"}]}
    await lb.create_board(boards.parse(tower))
    queue, now = Queue(r, CONFIG), now_ms()
    slips = [
        (Submission("a", "ana", 0, now, board="nope", values=(1, 2)), "unknown_board"),
        (Submission("b", "ana", 0, now, board="tower", values=(1,)), "wrong_key_count"),
        (Submission("c", "ana", 0, now, board="tower", values=(1001, 5)), "key_out_of_range"),
        (Submission("d", "ana", 0, now, board="tower", values=(1, 5), meta="r1"), "metadata_too_large"),
    ]
    for sub, code in slips:
        with pytest.raises(InvalidSubmission) as refused:
            await queue.submit_many([Submission("ok", "ben", 0, now, board="tower", values=(2, 9)), sub])
        assert refused.value.code == code
    assert await r.xlen(lb.keys.submissions) == 0  # all or nothing: not even the good one

    async with running(redis_url) as gw, client(gw, f"?token={token('ops', 'server')}") as ws:
        await greet(ws)
        for sub, code in slips:
            fields = entry_fields(sub.fields()) | {"values": list(sub.values)}  # as a list, one form of it
            reply = await request(ws, {"type": "submit", "submission": fields, "id": sub.id})
            assert (reply["type"], reply["code"]) == ("error", code)
    assert await r.xlen(lb.keys.submissions) == 0
    # a board defined a moment ago, before the process's refresh: known at once
    fresh = Queue(r, CONFIG)
    await fresh.lb.boards.refresh()
    await lb.create_board(boards.parse({**tower, "id": "fresh"}))
    await fresh.submit(Submission("e", "ana", 0, now, board="fresh", values=(3, 4)))
    assert await r.xlen(lb.keys.submissions) == 1


async def test_a_friends_list_on_a_defined_board_carries_each_ranked_players_keys(
    redis_url: str, lb: Leaderboard
) -> None:
    await lb.create_board(boards.parse({"id": "combat", "keys": [{"name": "power"}, {"name": "level"}]}))
    now = now_ms()
    slips = [Submission(f"c{i}", p, 0, now, board="combat", values=v) for i, (p, v) in enumerate(
        [("ana", (9_000, 40)), ("ben", (2**60, -3))]
    )]  # fmt: skip
    assert all(done.code is None for done in await lb.submit_batch([s.fields() for s in slips]))
    async with running(redis_url) as gw, client(gw, f"?token={token('mia')}") as ws:
        await greet(ws)
        msg = {"type": "ranks", "board": "board:combat", "window": "weekly", "players": ["ana", "ben", "zed"]}
        reply = await request(ws, msg, "ranks")
    rows = [(p["player"], p["rank"], p.get("keys")) for p in reply["players"]]
    assert rows == [("ana", 2, ["9000", "40"]), ("ben", 1, [str(2**60), "-3"]), ("zed", None, None)]
