"""The game's own boards are the definition ``default`` kept per scope: random slips through
lb_submit's one planner and apply (points, each slip's operator or the game's, equal points
re-sent earlier and later, several regions, every slip or some taking the general path, the
rest the common slip's) leave the global board and each region's, read by lb_top, equal to the pure model
(leaderboard/boards.py ``Board``) of the default definition, on a real redis-server. The model
moves the reached time by the rule docs/data-model.md states ("The reached time"), so this holds
the game's boards to it as tests/test_properties_defined.py holds the defined ones."""

from __future__ import annotations

import asyncio
import dataclasses

import redis.asyncio as aioredis
from hypothesis import given
from hypothesis import strategies as st

from fleet.redis_server import RedisServer
from leaderboard import GameConfig, Leaderboard, boards, connect
from leaderboard.boards import Board
from leaderboard.windows import WINDOWS

from .conftest import NOW
from .properties import bounded

PLAYERS = ["ana", "ben", "cy", "dee"]
REGIONS = ["", "eu", "us"]
# (id, player, points, op, ts, region, outcome)
Slip = tuple[str, str, int, str, int, str, bool]


@st.composite
def histories(draw: st.DrawFn) -> tuple[str, list[Slip]]:
    operator = draw(st.sampled_from(["best", "incr", "set"]))
    slips = [
        (
            f"s{i}",
            draw(st.sampled_from(PLAYERS)),
            draw(st.sampled_from([0, 1, 5])),  # few values: equal points re-sent often
            draw(st.sampled_from(["", "", "best", "incr", "set"])),
            NOW - 1000 * draw(st.integers(0, 4)),  # earlier and later than the stored time
            draw(st.sampled_from(REGIONS)),
            draw(st.integers(0, 3)) == 0,
        )
        for i in range(draw(st.integers(1, 20)))
    ]
    return operator, slips


async def check(r: aioredis.Redis, operator: str, slips: list[Slip], cut: int) -> None:
    await r.flushall()  # keys only: the function library stays loaded
    config = GameConfig(game="test", windows=("daily",), operator=operator, top_n=2)
    lb = Leaderboard(r, config)
    default = boards.default_definition(operator, config.rank_mode, config.windows, config.top_n)
    unit_ms = WINDOWS["daily"].unit_ms  # the packed score's tie unit
    models: dict[str, Board] = {}
    for _, player, points, op, ts, region, _ in slips:
        for scope in ("global", f"region:{region}") if region else ("global",):
            model = models.setdefault(scope, Board(default, unit_ms=unit_ms))
            model.definition = dataclasses.replace(default, operator=op or operator)
            model.submit(player, (points,), ts)
    entries = [
        {"id": sid, "player": player, "points": str(points), "ts": str(ts)}
        | ({"op": op} if op else {})
        | ({"region": region} if region else {})
        | ({"outcome": "1"} if outcome else {})
        for sid, player, points, op, ts, region, outcome in slips
    ]
    for part in (entries[:cut], entries[cut:]):
        # with rows every slip takes the general path; without, most take the common one
        results = await lb.submit_batch(part, now=NOW, rows=cut % 2 == 0)
        assert [x.status for x in results] == ["ok"] * len(part)
    for scope, model in models.items():
        top = await lb.top("daily", scope, n=100, at=NOW)
        expected = [(p, model.entries[p][0][0], model.rank(p)) for p in model.ordered()]
        assert [(e.player, e.score, e.rank) for e in top.entries] == expected, scope


def test_the_games_boards_hold_the_default_definitions_model(redis_server: RedisServer) -> None:
    with asyncio.Runner() as runner:
        r = connect(redis_server.url)
        assert isinstance(r, aioredis.Redis)

        @bounded(50)
        @given(histories(), st.integers(0, 20))
        def run(case: tuple[str, list[Slip]], cut: int) -> None:
            runner.run(check(r, *case, cut))

        try:
            run()
        finally:
            runner.run(r.aclose())
