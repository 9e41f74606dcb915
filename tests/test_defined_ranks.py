"""Percentiles and deep ranks on defined boards, against the pure model (leaderboard/boards/model.py):
slips queued and applied by the real scorer, ranks read through the function library and pushed
over a real socket. A rank beyond ``deep_from`` is estimated from the board's histogram on
either encoding (a lex board's buckets its first key), shown rounded and marked; dense ranks
never are."""

from __future__ import annotations

import asyncio
import random

import pytest
import redis.asyncio as aioredis

from leaderboard import GameConfig, Leaderboard, Submission, boards, now_ms
from leaderboard.ranking import COMPETITION, DENSE, ORDINAL, bucket_of, top_percent
from scorer import Consumer, ScorerSettings

from .conftest import MS
from .gw_helpers import T, client, greet, recv_type, request, running, token
from .properties import standing

I64_MIN, I64_MAX = -(2**63), 2**63 - 1
SHAPES = {
    # Tower: the higher floor, then the faster time (lex)
    "tower": [{"name": "floor", "min": 0, "max": 1000}, {"name": "time", "direction": "asc"}],
    # the whole int64 range, negatives included (lex)
    "ledger": [{"name": "balance"}],
    # one bounded key, lower first (packed, its negation)
    "speedrun": [{"name": "ms", "direction": "asc", "min": 0, "max": 3_600_000}],
}


def values_of(rng: random.Random, shape: str) -> tuple[int, ...]:
    if shape == "tower":
        return (rng.randrange(0, 40), rng.choice((60_000, 61_000, rng.randrange(50_000, 90_000))))
    if shape == "ledger":
        return (rng.choice((I64_MIN, I64_MAX, -1, 0, rng.randrange(I64_MIN, I64_MAX))),)
    return (rng.randrange(50_000, 50_400),)


async def fill(r: aioredis.Redis, redis_url: str, config: GameConfig, subs: list[Submission]) -> None:
    lb = Leaderboard(r, config)
    await lb.enqueue([s.fields() for s in subs], backlog_max=10_000)
    settings = ScorerSettings(redis_url=redis_url, game=config, name="c1", batch=100, block_ms=20, metrics_port=0)
    await asyncio.wait_for(Consumer(r, settings).run(burst=True), 30_000 * MS)


@pytest.mark.parametrize("mode", [ORDINAL, COMPETITION, DENSE])
async def test_deep_ranks_and_percentiles_of_defined_boards_follow_the_model(
    r: aioredis.Redis, redis_url: str, config: GameConfig, mode: str
) -> None:
    lb, rng, now = Leaderboard(r, config), random.Random(mode), now_ms()
    models, players = {}, [f"p{i}" for i in range(300)]
    subs = []
    for shape, keys in SHAPES.items():
        board = boards.parse({"id": shape, "keys": keys, "windows": ["daily"], "rank_mode": mode})
        await lb.create_board(board)
        day = boards.period(board, "daily", now)
        models[shape] = model = boards.Board(board, unit_ms=1 if board.encoding == boards.LEX else 1000)
        for i, player in enumerate(players):
            ts = max(day.start_ms, now - 60_000) + i  # ties: the same values, reached later
            values = values_of(rng, shape)
            subs.append(Submission(f"{shape}-{i}", player, 0, ts, board=shape, values=values))
            model.submit(player, values, ts)
    assert {m.definition.encoding for m in models.values()} == {boards.LEX, boards.PACKED}
    await fill(r, redis_url, config, subs)
    for shape, model in models.items():
        size = len(model.entries)
        exact = await lb.ranks(players, "daily", f"board:{shape}")
        deep = await lb.ranks(players, "daily", f"board:{shape}", deep_from=20)
        buckets = {p: bucket_of(standing(model.definition, model.entries[p][0])) for p in players}
        for player, e, d in zip(players, exact.standings, deep.standings, strict=True):
            rank = model.rank(player)
            assert rank is not None and (e.rank, e.approx, e.keys) == (rank, False, model.entries[player][0])
            # what a percentile counts: the ordinal rank in ordinal mode, else the competition rank
            position = model.rank(player, ORDINAL if mode == ORDINAL else COMPETITION)
            assert position is not None and e.top_percent == top_percent(position, size), (shape, player)
            assert d.rank is not None and d.top_percent is not None and e.top_percent is not None
            assert d.keys == e.keys and (d.approx is False or (mode != DENSE and d.rank > 20))
            if not d.approx:
                assert (d.rank, d.top_percent) == (rank, e.top_percent), (shape, player)
                continue
            # the histogram places a player among the members of its first key's bucket (a
            # neighbour's too, where a value beyond 2^53 rounds across the edge)
            near = sum(abs(buckets[p] - buckets[player]) <= 1 for p in players)
            assert abs(d.rank - rank) < near and abs(d.top_percent - e.top_percent) <= 100 * near / size + 0.1
        estimated = sum(s.approx for s in deep.standings)
        assert estimated == 0 if mode == DENSE else estimated > 200  # dense ranks are never estimated


async def test_a_deep_player_of_a_lex_board_gets_a_rounded_rank_push(
    r: aioredis.Redis, redis_url: str, config: GameConfig
) -> None:
    lb, now = Leaderboard(r, config), now_ms()
    tower = boards.parse({"id": "tower", "keys": SHAPES["tower"], "windows": ["daily"]})
    await lb.create_board(tower)
    start = max(boards.period(tower, "daily", now).start_ms, now - 60_000)
    subs = [
        Submission(f"s{i}", f"p{i}", 0, start + i, board="tower", values=(i // 2, 60_000 + i % 2)) for i in range(1500)
    ]
    await fill(r, redis_url, config, subs)
    async with (
        running(redis_url, game=config, rank_interval=0.2, deep_rank_from=50) as gw,
        client(gw, f"?token={token('p3')}") as deep,
        client(gw, f"?token={token('p1498')}") as top,
    ):
        for ws in (deep, top):
            await greet(ws)
            await request(ws, {"type": "subscribe", "board": "board:tower", "window": "daily"}, "subscribed")
        push = await _push(deep)
        # p3 holds floor 1 in 60,001 ms, 1,497 players above it: the floors' histogram places it
        # at 1,498 (its bucket holds floor 1 alone, p2 and p3), shown as 1,500
        assert (push["approx"], push["rank"], push["keys"], push["size"]) == (True, 1500, ["1", "60001"], 1500)
        assert push["top_percent"] == top_percent(1498, 1500) == 99.9
        push = await _push(top)
        assert (push["approx"], push["rank"], push["top_percent"]) == (False, 1, 0.1)
        # asked directly, a rank is always exact
        msg = {"type": "rank", "board": "board:tower", "window": "daily", "id": 1}
        reply = await request(deep, msg, "rank")
        assert (reply["approx"], reply["rank"]) == (False, 1498)


async def _push(ws: object) -> dict[str, object]:
    """The next own-rank push of the tower board (the game's own boards push too)."""
    async with asyncio.timeout(10 * T):
        while True:
            push = await recv_type(ws, "rank", 5 * T)  # type: ignore[arg-type]
            if push["board"] == "board:tower":
                return push
