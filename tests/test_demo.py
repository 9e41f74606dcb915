"""The demo's traffic stays a race: an hour of it, simulated against a model of the boards; and
it stops when told, so a Ctrl-C never waits for it."""

from __future__ import annotations

import asyncio
import heapq

import pytest

from fleet.__main__ import finish
from fleet.demo import MODES, REGIONS, START_PLAYERS, Ladder, traffic
from leaderboard import GameConfig, connect

from .conftest import MS

T = 1000 * MS

RATE = 60  # submissions per simulated second: a fifth of the fleet's default, so a harder test
BLOCK = 600  # seconds: every ten minutes of the hour must look alive, the last ones too


def top10(board: dict[str, tuple[int, int]]) -> list[str]:
    return [p for p, _ in heapq.nlargest(10, board.items(), key=lambda kv: kv[1])]


def apply(board: dict[str, tuple[int, int]], player: str, points: int, ts: int, op: str | None) -> None:
    """The operators of docs/data-model.md on one board; earlier arrival wins a tie."""
    old = board.get(player)
    if op == "set" or old is None or (op in (None, "best") and points > old[0]):
        board[player] = (points, -ts)
    elif op == "incr":
        board[player] = (old[0] + points, -ts)


@pytest.mark.slow
def test_an_hour_of_demo_keeps_every_board_moving() -> None:
    ladder = Ladder(seed=7)
    ceiling = min(w.max_points for w in GameConfig(game="demo").window_specs)
    boards: dict[str, dict[str, tuple[int, int]]] = {}
    last: dict[str, list[str]] = {}
    changes: dict[tuple[str, int], int] = {}  # (board, block) -> 10 s checks whose top 10 differed
    entries: dict[int, int] = {}  # block -> players who entered the global top 10
    climbers: set[str] = set()  # players who joined during the hour and reached the global top 10
    ids: set[str] = set()
    for second in range(3600):
        for i in range(RATE):
            sub = ladder.next(second * 1000 + i)
            assert sub.op == "set" and 0 <= sub.points < ceiling and sub.id not in ids
            assert sub.region in REGIONS and sub.mode in MODES and sub.name
            ids.add(sub.id)
            for scope in ("global", sub.region, sub.mode):
                apply(boards.setdefault(scope, {}), sub.player, sub.points, sub.ts_ms, sub.op)
        if second % 10 != 9:
            continue
        block = second // BLOCK
        for scope, board in boards.items():
            top = top10(board)
            if scope in last and top != last[scope]:
                changes[scope, block] = changes.get((scope, block), 0) + 1
            if scope == "global" and scope in last:
                entries[block] = entries.get(block, 0) + len(set(top) - set(last[scope]))
                climbers.update(p for p in top if int(p.removeprefix("player")) >= START_PLAYERS)
            last[scope] = top
    assert set(boards) == {"global", *REGIONS, *MODES}
    for scope in boards:
        for block in range(3600 // BLOCK):
            assert changes.get((scope, block), 0) >= 0.8 * BLOCK / 10, (scope, block, changes)
    assert all(entries.get(block, 0) >= BLOCK / 60 for block in range(3600 // BLOCK)), entries  # one a minute
    assert ladder.players > START_PLAYERS + 0.005 * RATE * 3600  # newcomers keep arriving
    assert climbers, "no newcomer reached the top 10 in an hour"


def test_ladder_is_deterministic_for_a_seed_and_bounded() -> None:
    a, b = Ladder(seed=3, players=50, max_players=60), Ladder(seed=3, players=50, max_players=60)
    subs = [a.next(1000 + i) for i in range(20_000)]
    assert subs == [b.next(1000 + i) for i in range(20_000)]
    assert len({s.player for s in subs}) > 60  # players retire and new ones take their slots
    assert a.players > 60 and len(a._ids) == 60


def test_ladder_refuses_an_impossible_population() -> None:
    with pytest.raises(ValueError, match="players"):
        Ladder(players=0)
    with pytest.raises(ValueError, match="players"):
        Ladder(players=10, max_players=5)


async def test_demo_traffic_stops_within_a_tick_when_told(redis_url: str) -> None:
    config = GameConfig(game="test")
    stop = asyncio.Event()
    task = asyncio.create_task(traffic(redis_url, config, 2000, stop=stop, seed=1))
    redis = connect(redis_url)
    try:
        async with asyncio.timeout(10 * T):
            while not await redis.exists(config.keys.submissions):  # noqa: ASYNC110 (a key in Redis: no event)
                await asyncio.sleep(0.01)
    finally:
        await redis.aclose()
    stop.set()
    await asyncio.wait_for(task, 2 * T)  # a tick is 0.1 s


async def test_the_stop_does_not_wait_for_a_task_that_swallows_its_cancellation() -> None:
    """On Python 3.11 redis-py's ``asyncio.wait_for`` swallows a cancel that arrives as its write
    completes: a demo task stopped by ``cancel()`` alone then ran on, and Ctrl-C waited for ever."""
    swallowed = asyncio.Event()

    async def stubborn() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            swallowed.set()  # as that wait_for does, once
        await asyncio.sleep(3600)

    task = asyncio.create_task(stubborn())
    await asyncio.wait_for(finish([task], 0.1), 2 * T)
    await asyncio.wait_for(swallowed.wait(), 2 * T)
    assert not task.done()  # cancelled, swallowed, and not waited for
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
