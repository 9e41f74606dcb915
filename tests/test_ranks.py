"""Rank modes, percentiles and deep ranks, against a real redis-server."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any, cast

import orjson
import pytest
import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from leaderboard import GameConfig, Leaderboard, Submission, now_ms
from leaderboard.ranking import assign_ranks, bucket_of, companions, round_rank, top_percent
from leaderboard.settings import SettingsError
from leaderboard.windows import WINDOWS

from .conftest import NOW
from .gw_helpers import T, client, greet, recv_type, request, running, token
from .test_library import slip, submit

# points 500 500 400 300 300 200, first arrivals first (ties by time in ordinal mode)
TIED = [("ana", 500), ("bo", 500), ("cy", 400), ("di", 300), ("ed", 300), ("fi", 200)]
EXPECTED = {
    "ordinal": [1, 2, 3, 4, 5, 6],
    "competition": [1, 1, 3, 4, 4, 6],
    "dense": [1, 1, 2, 3, 3, 4],
}


def board(mode: str, **extra: Any) -> GameConfig:
    return GameConfig(game="test", windows=("weekly",), rank_mode=mode, **extra)


async def tied_board(r: aioredis.Redis, mode: str) -> Leaderboard:
    lb = Leaderboard(r, board(mode))
    await submit(lb, *(slip(f"s{i}", p, pts, NOW + i * 1000) for i, (p, pts) in enumerate(TIED)))
    return lb


@pytest.mark.parametrize("mode", list(EXPECTED))
async def test_every_read_ranks_ties_in_the_board_mode(r: aioredis.Redis, mode: str) -> None:
    lb = await tied_board(r, mode)
    expected = EXPECTED[mode]
    top = await lb.top("weekly", at=NOW)
    assert top.mode == mode and [e.rank for e in top.entries] == expected
    # a slice that starts inside a tie group still ranks its first entry right
    around = await lb.around("ed", "weekly", k=1, at=NOW)
    assert [(e.player, e.rank) for e in around.entries] == [
        ("di", expected[3]),
        ("ed", expected[4]),
        ("fi", expected[5]),
    ]
    around = await lb.around("di", "weekly", k=0, at=NOW)
    assert [(e.player, e.rank) for e in around.entries] == [("di", expected[3])]
    # percentiles around a player: tied members share one outside ordinal mode (positions 4, 4, 6 of 6)
    around = await lb.around("ed", "weekly", k=1, at=NOW)
    share = [66.7, 83.4, 100.0] if mode == "ordinal" else [66.7, 66.7, 100.0]
    assert (around.size, [e.top_percent for e in around.entries]) == (6, share)
    ranks = await lb.ranks([p for p, _ in TIED] + ["nobody"], "weekly", at=NOW)
    assert ranks.mode == mode
    assert [s.rank for s in ranks.standings] == [*expected, None]


async def test_percentile_is_the_share_at_or_above_rounded_up(r: aioredis.Redis) -> None:
    ordinal = await tied_board(r, "ordinal")
    ranks = await ordinal.ranks(["ana", "bo", "fi", "nobody"], "weekly", at=NOW)
    # ceil(1000 * position / 6) / 10; ordinal mode: the ordinal rank is the position
    assert [s.top_percent for s in ranks.standings] == [16.7, 33.4, 100.0, None]
    # a window switched to dense mode: its boards get their distinct points set once
    dense = Leaderboard(ordinal.redis, board("dense"))
    assert await dense.rebuild_rank_index("weekly", at=NOW) == len(TIED)
    ranks = await dense.ranks(["bo", "di", "ed"], "weekly", at=NOW)
    # dense ranks 1, 3, 3 but tied players share the competition position: 1, 4, 4
    assert [(s.rank, s.top_percent) for s in ranks.standings] == [(1, 16.7), (3, 66.7), (3, 66.7)]


def test_percentile_formula_and_rounding() -> None:
    assert top_percent(1, 1_000_000) == 0.1
    assert top_percent(30_000, 1_000_000) == 3.0
    assert top_percent(30_001, 1_000_000) == 3.1
    assert top_percent(1_000_000, 1_000_000) == 100.0
    with pytest.raises(ValueError):
        top_percent(0, 10)
    assert [round_rank(n) for n in (7, 999, 1234, 412_345, 412_500, 999_999)] == [
        7,
        999,
        1230,
        412_000,
        413_000,
        1_000_000,
    ]


def test_assign_ranks_continues_a_slice_from_its_first_rank() -> None:
    points = [300, 300, 200, 200, 200, 100]
    assert assign_ranks("ordinal", 7, 7, points) == [7, 8, 9, 10, 11, 12]
    assert assign_ranks("competition", 7, 6, points) == [6, 6, 9, 9, 9, 12]
    assert assign_ranks("dense", 7, 4, points) == [4, 4, 5, 5, 5, 6]
    assert assign_ranks("dense", 1, 1, []) == []


def brute_force(mode: str, points: list[int]) -> list[int]:
    """Each member's rank by definition, scanning the whole board."""
    if mode == "ordinal":
        return list(range(1, len(points) + 1))
    if mode == "competition":
        return [1 + sum(q > p for q in points) for p in points]
    return [1 + len({q for q in points if q > p}) for p in points]


def test_every_slice_continues_the_ranks_of_the_whole_board() -> None:
    rng = random.Random(5)
    for _ in range(200):
        points = sorted((rng.randrange(6) for _ in range(rng.randrange(1, 15))), reverse=True)
        start = rng.randrange(len(points))
        stop = rng.randrange(start, len(points)) + 1
        for mode in EXPECTED:
            whole = brute_force(mode, points)
            assert assign_ranks(mode, start + 1, whole[start], points[start:stop]) == whole[start:stop]


async def structures(r: aioredis.Redis, lb: Leaderboard, window: str = "weekly") -> tuple[Any, Any, Any]:
    """(histogram as found, histogram recomputed from the board, distinct points found vs board)."""
    spec = WINDOWS[window]
    label = spec.period(NOW).label
    keys = lb.keys
    members: list[Any] = await r.zrange(keys.board(window, label, "global"), 0, -1, withscores=True)
    points = [spec.unpack(s) for _, s in members]
    found = {int(b): int(c) for b, c in (await r.hgetall(keys.histogram(window, label, "global"))).items()}
    values: list[Any] = await r.zrange(keys.points(window, label, "global"), 0, -1)
    distinct = sorted(int(p) for p in values)
    return (found, distinct), dict(Counter(bucket_of(p) for p in points)), sorted(set(points))


@pytest.mark.parametrize("mode", ["dense", "ordinal"])
async def test_histogram_and_distinct_points_follow_every_operator(r: aioredis.Redis, mode: str) -> None:
    """Random best / incr / set writes, including moves down and to equal points and a player
    written several times in one batch; after each batch both structures equal what the board
    itself says (ordinal: the board's writes are gathered per batch, and it has no points set)."""
    rng = random.Random(13)
    lb = Leaderboard(r, GameConfig(game="test", windows=("weekly",), rank_mode=mode))
    players = [f"p{i}" for i in range(40)]
    # the boundaries of buckets (powers of two and their neighbours) are where Lua and Python
    # could disagree on a bucket
    edges = [0, 1, 2, 3, 15, 16, 17, 31, 32, 33, 1023, 1024, 1025, 2**40 - 1, 2**40, 2**40 + 1]
    n = 0
    for _ in range(12):
        batch = []
        for _ in range(30):
            n += 1
            op = rng.choice(["best", "incr", "set"])
            points = rng.choice(edges) if op != "incr" else rng.randrange(0, 50)
            batch.append(slip(f"s{n}", rng.choice(players), points, NOW + n, op=op))
        await submit(lb, *batch)
        (hist, distinct), want_hist, want_distinct = await structures(r, lb)
        assert hist == want_hist and distinct == (want_distinct if mode == "dense" else [])


def test_bucket_edges() -> None:
    assert [bucket_of(p) for p in (0, 1, 2, 3, 4, 5, 6, 7)] == [0, 1, 17, 25, 33, 37, 41, 45]
    # buckets grow with the points and never span more than 1/16 of their lower bound
    last = 0
    for p in range(1, 5000):
        assert bucket_of(p) >= last
        last = bucket_of(p)
    assert bucket_of(2**47 - 1) < 48 * 16 + 1


async def test_companions_expire_with_their_board(r: aioredis.Redis) -> None:
    lb = Leaderboard(r, GameConfig(game="test", rank_mode="dense"))
    await submit(lb, slip("1", "ana", 10))
    label = WINDOWS["weekly"].period(NOW).label
    ttl = await r.ttl(lb.keys.board("weekly", label, "global"))
    assert ttl > 0
    assert await r.ttl(lb.keys.histogram("weekly", label, "global")) == ttl
    assert await r.ttl(lb.keys.points("weekly", label, "global")) == ttl
    alltime = "all"
    assert await r.ttl(lb.keys.histogram("alltime", alltime, "global")) == -1  # kept forever, like the board


async def test_deep_ranks_are_approximate_rounded_and_marked(r: aioredis.Redis) -> None:
    lb = Leaderboard(r, board("ordinal"))
    rng = random.Random(7)
    entries = [slip(f"s{i}", f"p{i}", rng.randrange(0, 100_000), NOW + i) for i in range(3000)]
    for i in range(0, len(entries), 500):
        await submit(lb, *entries[i : i + 500])
    players = [f"p{i}" for i in range(0, 3000, 10)]
    exact = await lb.ranks(players, "weekly", at=NOW)
    deep = await lb.ranks(players, "weekly", at=NOW, deep_from=100)
    assert all(not s.approx for s in exact.standings)
    for e, d in zip(exact.standings, deep.standings, strict=True):
        assert e.rank is not None and d.rank is not None and e.score == d.score
        if d.approx:
            assert e.rank > 50  # only deep players are estimated
            assert d.rank == round_rank(d.rank)
            assert abs(d.rank - e.rank) <= 0.05 * 3000, (e, d)
        else:
            assert d == e  # the top stays exact
    assert sum(d.approx for d in deep.standings) > 200
    # dense ranks are always exact: the histogram counts members, not distinct values
    dense = await Leaderboard(r, board("dense")).ranks(players, "weekly", at=NOW, deep_from=100)
    assert not any(s.approx for s in dense.standings)


async def test_announcement_names_the_rank_in_the_board_mode(r: aioredis.Redis) -> None:
    lb = Leaderboard(r, board("competition"))
    await submit(lb, slip("1", "ana", 500, NOW))
    async with r.pubsub() as ps:
        await ps.ssubscribe(lb.keys.announce_channel)  # sharded pub/sub, as the library publishes it
        await ps.get_message(timeout=1)  # the subscribe confirmation
        await submit(lb, slip("2", "bo", 500, NOW + 1000))
        msg = await ps.get_message(ignore_subscribe_messages=True, timeout=2)
    assert msg is not None
    announce = orjson.loads(msg["data"])
    assert (announce["player"], announce["rank"]) == ("bo", 1)  # tied with ana: competition rank 1


async def test_bad_rank_modes_are_refused(r: aioredis.Redis, lb: Leaderboard) -> None:
    with pytest.raises(SettingsError, match="LB_RANK_MODE"):
        GameConfig(game="test", rank_mode="olympic")
    with pytest.raises(SettingsError, match="LB_WINDOW_RANK_MODES"):
        GameConfig(game="test", windows=("weekly",), window_rank_modes={"weekly": "fractional"})
    with pytest.raises(SettingsError, match="not in LB_WINDOWS"):
        GameConfig(game="test", windows=("weekly",), window_rank_modes={"daily": "dense"})
    env = GameConfig.from_env({"LB_WINDOWS": "weekly,alltime", "LB_WINDOW_RANK_MODES": "alltime=dense"})
    assert (env.rank_mode_for("weekly"), env.rank_mode_for("alltime")) == ("ordinal", "dense")
    key = lb.keys.board("weekly", "x", "global")
    for args in (
        ("lb_ranks", key, "olympic", 20, 0, "ana"),
        ("lb_ranks", key, "dense", 20, -1, "ana"),
        ("lb_around", key, "ana", 1, "dense", 99),
        ("lb_around", key, "ana", 1, "", 20),
    ):
        with pytest.raises(ResponseError, match="bad_request"):
            await r.fcall_ro(args[0], 3, args[1], "p", "q", *args[2:])


async def test_a_deep_player_gets_an_approximate_rank_push_with_percentile(redis_url: str, r: aioredis.Redis) -> None:
    config = GameConfig(game="test", rank_mode="competition")
    lb = Leaderboard(r, config)
    now = now_ms()
    await lb.submit_batch([Submission(f"s{i}", f"p{i}", 10 * i + 5, now).fields() for i in range(400)])
    async with (
        running(redis_url, game=config, rank_interval=0.2, deep_rank_from=50) as gw,
        client(gw, f"?token={token('p3')}") as deep,
        client(gw, f"?token={token('p399')}") as top,
    ):
        _, snap = await greet(deep)
        assert snap["mode"] == "competition"
        push = await recv_type(deep, "rank", 5 * T)
        assert (push["approx"], push["mode"], push["score"], push["size"]) == (True, "competition", 35, 400)
        assert abs(push["rank"] - 397) <= 20 and push["top_percent"] >= 95.0
        await greet(top)
        push = await recv_type(top, "rank", 5 * T)
        assert (push["approx"], push["rank"], push["top_percent"]) == (False, 1, 0.3)
        # asked directly, a rank is always exact
        reply = await request(deep, {"type": "rank", "id": 1}, "rank")
        assert (reply["approx"], reply["rank"], reply["top_percent"]) == (False, 397, 99.3)
        # climbing into the exact ranks: the next push is exact, unmarked
        await lb.submit_batch([Submission("climb", "p3", 10_000, now_ms()).fields()])
        push = await recv_type(deep, "rank", 5 * T)
        assert (push["approx"], push["rank"], push["score"], push["top_percent"]) == (False, 1, 10_000, 0.3)


async def test_rebuild_restores_the_companions_of_an_older_board(r: aioredis.Redis) -> None:
    lb = Leaderboard(r, GameConfig(game="test", windows=("weekly",), rank_mode="dense"))
    rng = random.Random(3)
    await submit(lb, *(slip(f"s{i}", f"p{i}", rng.choice([0, 1, 7, 100, 2**32]), NOW + i) for i in range(300)))
    before = await structures(r, lb)
    assert before[0] == (before[1], before[2])
    label = WINDOWS["weekly"].period(NOW).label
    companions = (lb.keys.histogram("weekly", label, "global"), lb.keys.points("weekly", label, "global"))
    await r.delete(*companions)  # as a board written before it had them
    assert await lb.rebuild_rank_index("weekly", at=NOW) == 300
    assert await structures(r, lb) == before
    board_expiry = await r.pexpiretime(lb.keys.board("weekly", label, "global"))
    assert [await r.pexpiretime(k) for k in companions] == [board_expiry, board_expiry]
    # outside dense mode only the histogram is kept: the points set would cost memory for nothing
    ordinal = Leaderboard(r, GameConfig(game="test", windows=("weekly",)))
    await ordinal.rebuild_rank_index("weekly", at=NOW)
    assert not await r.exists(companions[1]) and await r.exists(companions[0])
    await submit(ordinal, slip("late", "zed", 5, NOW + 1000))
    assert not await r.exists(companions[1])


@pytest.mark.parametrize("window", ["weekly", "alltime"])
async def test_companions_computed_in_python_equal_the_functions(r: aioredis.Redis, window: str) -> None:
    # the rebuild from the durable log writes a board's companions from its members in Python
    # (ranking.companions): they must be what lb_rank_rebuild builds from the board in Redis
    lb = Leaderboard(r, GameConfig(game="test", windows=(window,), rank_mode="dense"))
    rng = random.Random(11)
    values = [0, 1, 2, 3, 15, 16, 17, 100, 2**20 - 1, 2**20, 2**32, 2**32 + 1]
    slips = [slip(f"s{i}", f"p{i}", rng.choice([*values, rng.randrange(2**33)]), NOW + i) for i in range(500)]
    await submit(lb, *slips)  # the points above a window's cap are refused
    label = WINDOWS[window].period(NOW).label
    board_key = lb.keys.board(window, label, "global")
    assert await lb.rebuild_rank_index(window, at=NOW) == await r.zcard(board_key) > 300
    members = cast(list[tuple[str, float]], await r.zrange(board_key, 0, -1, withscores=True))
    histogram, distinct = companions((int(score) for _, score in members), WINDOWS[window].shift)
    stored = await r.hgetall(lb.keys.histogram(window, label, "global"))
    assert histogram == {int(b): int(n) for b, n in stored.items()}
    points = cast(list[str], await r.zrange(lb.keys.points(window, label, "global"), 0, -1))
    assert distinct == {int(p) for p in points}


async def test_estimates_respect_a_partly_filled_top_bucket(r: aioredis.Redis) -> None:
    """Every member in the lower half of one bucket [65536, 69632): spread over the whole bucket,
    the best would be estimated near the middle of the board instead of near the top."""
    lb = Leaderboard(r, board("ordinal"))
    await submit(lb, *(slip(f"s{i}", f"p{i}", 65_536 + 2 * i, NOW + i) for i in range(1000)))
    players = [f"p{i}" for i in range(0, 1000, 37)]
    exact = await lb.ranks(players, "weekly", at=NOW)
    deep = await lb.ranks(players, "weekly", at=NOW, deep_from=1)
    for e, d in zip(exact.standings, deep.standings, strict=True):
        assert e.rank is not None and d.rank is not None
        assert abs(d.rank - e.rank) <= 10, (e, d)


@pytest.mark.parametrize("mode", ["competition", "dense"])
async def test_a_close_event_names_the_ranks_of_the_board_mode(r: aioredis.Redis, mode: str) -> None:
    """Rewards are granted by the event's ranks: tied players must get the same one."""
    lb = await tied_board(r, mode)
    event = await lb.close(WINDOWS["weekly"].period(NOW), ["global"], top_n=10, keep=1, maxlen=100)
    assert event is not None
    [final] = await lb.finals("weekly")
    assert [e["rank"] for e in final["top"]["global"]] == EXPECTED[mode]


async def test_bans_and_corrections_keep_the_histogram_and_distinct_points_right(r: aioredis.Redis) -> None:
    """A ban removes a member and a correction moves one outside lb_submit: both must keep the
    board's companions equal to what the board says, or dense ranks and estimates go stale."""
    from leaderboard.moderation import Moderation

    lb = Leaderboard(r, GameConfig(game="test", windows=("weekly",), rank_mode="dense"))
    mod = Moderation(lb)
    await submit(lb, *(slip(f"s{i}", f"p{i}", [5, 5, 9, 40, 1024][i], NOW + i) for i in range(5)))
    for action in (
        mod.ban("p3", actor="ops", reason="cheat"),  # the only member on 40: its value goes
        mod.correct("p0", 2048, actor="ops", reason="fix", at=NOW + 10),  # 5 is still held by p1
        mod.correct("p1", 7, actor="ops", reason="fix", at=NOW + 11),  # 5 is now held by nobody
    ):
        await action
        (hist, distinct), want_hist, want_distinct = await structures(r, lb)
        assert hist == want_hist and distinct == want_distinct
    ranks = await lb.ranks(["p2", "p1"], "weekly", at=NOW + 12)
    assert [s.rank for s in ranks.standings] == [3, 4]  # 2048, 1024, 9, 7: dense ranks
