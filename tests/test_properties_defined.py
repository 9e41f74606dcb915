"""Property: every read of a defined board through the function library (top, ranks in each
mode, around) equals the pure model's (leaderboard/boards.py ``Board``), for random
definitions (1-5 keys, each asc or desc, tie first or last) and random entries over the whole
int64 range — lex members written as the model encodes them, read by lb_lex_top, lb_lex_ranks
and lb_lex_around against a real redis-server."""

from __future__ import annotations

import asyncio

import redis.asyncio as aioredis
from hypothesis import given
from hypothesis import strategies as st

from fleet.redis_server import RedisServer
from leaderboard import GameConfig, Leaderboard, boards, connect
from leaderboard.boards import INT64_MAX, INT64_MIN, Board, parse
from leaderboard.ranking import RANK_MODES, top_percent

from .conftest import NOW
from .properties import bounded

CONFIG = GameConfig(game="test")
EDGES = [INT64_MIN, INT64_MIN + 1, -1, 0, 1, INT64_MAX - 1, INT64_MAX]
PLAYERS = ["ana", "ben", "cy", "dee", "eve", "fay", "gus"]


@st.composite
def boards_with_entries(draw: st.DrawFn) -> tuple[boards.Definition, dict[str, tuple[tuple[int, ...], int]]]:
    n = draw(st.integers(1, 5))
    keys = [{"name": f"k{i}", "direction": draw(st.sampled_from(["desc", "asc"]))} for i in range(n)]
    definition = parse(
        {
            "id": "b",
            "keys": keys,
            "tie": draw(st.sampled_from(["first", "last"])),
            "rank_mode": draw(st.sampled_from(RANK_MODES)),
            "windows": ["alltime"],
        }
    )
    # few values per key, so ties on one key, on all keys and on the time happen often
    value = st.sampled_from([*EDGES, 5, -5]) | st.integers(INT64_MIN, INT64_MAX)
    players = draw(st.lists(st.sampled_from(PLAYERS), min_size=1, max_size=len(PLAYERS), unique=True))
    entries = {
        p: (tuple(draw(value) for _ in range(n)), draw(st.sampled_from([NOW - 2000, NOW - 1000, NOW]))) for p in players
    }
    return definition, entries


async def check(
    r: aioredis.Redis, definition: boards.Definition, entries: dict[str, tuple[tuple[int, ...], int]]
) -> None:
    await r.flushall()  # keys only: the function library stays loaded
    lb = Leaderboard(r, CONFIG)
    await lb.create_board(definition)
    period = boards.period(definition, "alltime", NOW)
    scope = "board:b"
    args = ("alltime", period.label, scope)
    for player, (values, ts) in entries.items():
        member = boards.encode_member(definition, values, ts, player)
        await r.zadd(CONFIG.keys.board(*args), {member: 0})
        await r.hset(CONFIG.keys.members(*args), player, member)
        await r.zadd(CONFIG.keys.points(*args), {boards.key_prefix(definition, values): 0})
    model = Board(definition, dict(entries))
    ordered = model.ordered()
    size = len(ordered)

    top = await lb.top("alltime", scope, n=100, at=NOW)
    assert [(e.player, e.keys, e.rank) for e in top.entries] == [(p, entries[p][0], model.rank(p)) for p in ordered]
    ranks = await lb.ranks([*PLAYERS, "nobody"], "alltime", scope, at=NOW)
    assert ranks.size == size
    for s in ranks.standings:
        if s.player not in entries:
            assert (s.rank, s.keys) == (None, None)
            continue
        position = model.rank(s.player, "ordinal" if definition.rank_mode == "ordinal" else "competition")
        assert (s.rank, s.keys, s.top_percent) == (
            model.rank(s.player),
            entries[s.player][0],
            top_percent(position or 0, size),
        )
    player = ordered[len(ordered) // 2]
    around = await lb.around(player, "alltime", scope, k=2, at=NOW)
    i = ordered.index(player)
    window = ordered[max(0, i - 2) : i + 3]
    assert [(e.player, e.rank) for e in around.entries] == [(p, model.rank(p)) for p in window]


def test_reads_of_lex_boards_equal_the_model(redis_server: RedisServer) -> None:
    with asyncio.Runner() as runner:
        r = connect(redis_server.url)
        assert isinstance(r, aioredis.Redis)

        @bounded(80)
        @given(boards_with_entries())
        def run(case: tuple[boards.Definition, dict[str, tuple[tuple[int, ...], int]]]) -> None:
            runner.run(check(r, *case))

        try:
            run()
        finally:
            runner.run(r.aclose())
