"""Properties of boards against the pure model (leaderboard/boards/model.py ``Board``), on a
real redis-server:

* reads: entries written as the model encodes them (lex members, or a packed board's scores),
  read by lb_top, lb_ranks and lb_around (top, ranks in each mode, around) equal the model's,
  ties by descending player id on both encodings;
* writes: random slips through lb_submit (random definitions: 1-5 keys, each asc or desc, the
  board's or per-key operators, tie first or last, bounds that make some packed; values over the
  whole int64 range, its extremes often) leave every read equal to the model's, and each slip's
  outcome (applied, or refused with key_out_of_range / wrong_key_count) is the model's;
* a defined board kept per region and mode (``scopes``): its home ``board:b`` and each value's
  board (``board:b:region:eu``, ``board:b:mode:duo``) each equal to its own model, as below;
* the game's own boards, the definition ``default`` kept per scope: slips with and without a
  region and a mode, under each operator and rank mode, leave ``global``, ``region:eu`` and
  ``mode:duo`` each equal to its own model, read by the library and by ``BoardPeriod`` alike; and
  so do they under a stored default of any shape the writes above draw (through the same path)."""

from __future__ import annotations

import asyncio
import copy
from collections import Counter
from collections.abc import Callable, Coroutine
from typing import Any

import redis.asyncio as aioredis
from hypothesis import given
from hypothesis import strategies as st

from fleet.redis_server import RedisServer
from leaderboard import GameConfig, InvalidBoard, Leaderboard, boards, connect
from leaderboard.boards import INT64_MAX, INT64_MIN, Board, parse
from leaderboard.ranking import RANK_MODES, bucket_of, top_percent

from .conftest import NOW
from .properties import bounded, bounded_keys, bounded_value, standing

CONFIG = GameConfig(game="test")
EDGES = [INT64_MIN, INT64_MIN + 1, -1, 0, 1, INT64_MAX - 1, INT64_MAX]
PLAYERS = ["ana", "ben", "cy", "dee", "eve", "fay", "gus"]


@st.composite
def boards_with_entries(draw: st.DrawFn) -> tuple[boards.Definition, dict[str, tuple[tuple[int, ...], int]]]:
    n = draw(st.integers(1, 5))
    packed = draw(st.booleans())  # bounded keys (41^5 < 2^27: alltime's): the same reads on a packed board
    if packed:
        keys = bounded_keys(draw, n, 40)
    else:
        keys = [{"name": f"k{i}", "direction": draw(st.sampled_from(["desc", "asc"]))} for i in range(n)]
    definition = boards.created(
        parse(
            {
                "id": "b",
                "keys": keys,
                "tie": draw(st.sampled_from(["first", "last"])),
                "rank_mode": draw(st.sampled_from(RANK_MODES)),
                "windows": ["alltime"],
            }
        )
    )
    assert (definition.encoding == boards.PACKED) == packed
    # few values per key, so ties on one key, on all keys and on the time happen often
    value = st.sampled_from([*EDGES, 5, -5]) | st.integers(INT64_MIN, INT64_MAX)
    values = [within(k) if packed else value for k in keys]
    players = draw(st.lists(st.sampled_from(PLAYERS), min_size=1, max_size=len(PLAYERS), unique=True))
    entries = {
        p: (tuple(draw(v) for v in values), draw(st.sampled_from([NOW - 2000, NOW - 1000, NOW]))) for p in players
    }
    return definition, entries


def within(key: dict[str, object]) -> st.SearchStrategy[int]:
    """A bounded key's values inside its bounds: its extremes often."""
    lo, hi = int(str(key["min"])), int(str(key["max"]))
    return st.sampled_from([lo, hi]) | st.integers(lo, hi)


async def check(
    r: aioredis.Redis, definition: boards.Definition, entries: dict[str, tuple[tuple[int, ...], int]]
) -> None:
    await r.flushall()  # keys only: the function library stays loaded
    lb = Leaderboard(r, CONFIG)
    await lb.create_board(definition)
    period = boards.period(definition, "alltime", NOW)
    scope = "board:b"
    args = ("alltime", period.label, scope)
    packed = definition.encoding == boards.PACKED
    for player, (values, ts) in entries.items():
        if packed:
            score = boards.pack(definition, "alltime", values, ts, period.start_ms)
            points = score >> definition.shift("alltime")
            await r.zadd(CONFIG.keys.board(*args), {player: score})
            await r.zadd(CONFIG.keys.points(*args), {str(points): points})
            continue
        member = boards.encode_member(definition, values, ts, player)
        await r.zadd(CONFIG.keys.board(*args), {member: 0})
        await r.hset(CONFIG.keys.members(*args), player, member)
        await r.zadd(CONFIG.keys.points(*args), {boards.key_prefix(definition, values): 0})
    model = Board(definition, dict(entries), unit_ms=period.window.unit_ms if packed else 1)
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


def hold(
    redis_server: RedisServer,
    examples: int,
    cases: st.SearchStrategy[tuple[Any, ...]],
    check: Callable[..., Coroutine[Any, Any, None]],
) -> None:
    """``check(r, *case)`` for ``examples`` generated cases, on one connection and one loop."""
    with asyncio.Runner() as runner:
        r = connect(redis_server.url)
        assert isinstance(r, aioredis.Redis)

        @bounded(examples)
        @given(cases)
        def run(case: tuple[Any, ...]) -> None:
            runner.run(check(r, *case))

        try:
            run()
        finally:
            runner.run(r.aclose())


def test_reads_of_both_encodings_equal_the_model(redis_server: RedisServer) -> None:
    hold(redis_server, 80, boards_with_entries(), check)


@st.composite
def histories(draw: st.DrawFn) -> tuple[boards.Definition, list[tuple[str, str, list[str], int]]]:
    """Slips to a random definition: 1-5 keys, unbounded (lex) or bounded (packed while the
    product of their ranges fits the daily window's points: 1001^n for n up to 3, lex beyond)."""
    n = draw(st.integers(1, 5))
    if draw(st.booleans()):
        keys = bounded_keys(draw, n, 1000)
        values = [bounded_value(k) for k in keys]
    else:
        keys = []
        for i in range(n):
            key: dict[str, object] = {"name": f"k{i}", "direction": draw(st.sampled_from(["desc", "asc"]))}
            if draw(st.integers(0, 3)) == 0:
                key["operator"] = draw(st.sampled_from(["best", "incr", "set"]))
            keys.append(key)
        values = [st.sampled_from([*EDGES, 5, -5, 2**62]) | st.integers(INT64_MIN, INT64_MAX)] * n
    definition = boards.created(
        parse(
            {
                "id": "b",
                "keys": keys,
                "operator": draw(st.sampled_from(["best", "incr", "set"])),
                "tie": draw(st.sampled_from(["first", "last"])),
                "rank_mode": draw(st.sampled_from(RANK_MODES)),
                "windows": ["daily"],
            }
        )
    )
    slips = []
    for i in range(draw(st.integers(1, 25))):
        count = n if draw(st.integers(0, 15)) else draw(st.sampled_from([n - 1, n + 1]))
        drawn = [str(draw(values[j % n])) for j in range(count)]
        ts = NOW - 1000 * draw(st.integers(0, 4))  # whole seconds: the packed boards' tie unit
        slips.append((f"s{i}", draw(st.sampled_from(PLAYERS[:4])), drawn, ts))
    return definition, slips


async def check_writes(
    r: aioredis.Redis, definition: boards.Definition, slips: list[tuple[str, str, list[str], int]], cut: int
) -> None:
    await r.flushall()
    lb = Leaderboard(r, CONFIG)
    await lb.create_board(definition)
    model, expected = Board(definition, unit_ms=1000 if definition.encoding == boards.PACKED else 1), []
    for _, player, values, ts in slips:
        try:
            parsed = boards.parse_values(definition, values)
            model.submit(player, parsed, ts)
            expected.append("ok")
        except InvalidBoard as exc:
            expected.append(exc.code)
    entries = [
        {"id": sid, "player": player, "board": "b", "values": ",".join(values), "ts": str(ts)}
        for sid, player, values, ts in slips
    ]
    got = []
    for part in (entries[:cut], entries[cut:]):
        for result in await lb.submit_batch(part, now=NOW):
            got.append(result.status if result.status != "error" else str(result.code))
    assert got == expected
    await check_reads(r, lb, model, "board:b")


async def check_reads(r: aioredis.Redis, lb: Leaderboard, model: Board, scope: str) -> None:
    """Every read of a daily board (top, ranks, around, its histogram) equals the model's."""
    ordered = model.ordered()
    top = await lb.top("daily", scope, n=100, at=NOW)
    assert [(e.player, e.keys, e.rank) for e in top.entries] == [
        (p, model.entries[p][0], model.rank(p)) for p in ordered
    ]
    ranks = await lb.ranks(PLAYERS[:4], "daily", scope, at=NOW)
    assert [(s.player, s.rank, s.keys) for s in ranks.standings] == [
        (p, model.rank(p), model.entries[p][0] if p in model.entries else None) for p in PLAYERS[:4]
    ]
    if ordered:
        player = ordered[-1]
        around = await lb.around(player, "daily", scope, k=1, at=NOW)
        assert [(e.player, e.rank) for e in around.entries] == [(p, model.rank(p)) for p in ordered[-2:]]
    await check_histogram(r, lb, model, scope)


async def check_histogram(r: aioredis.Redis, lb: Leaderboard, model: Board, scope: str) -> None:
    """The board's histogram as its writes kept it equals the one lb_rank_rebuild makes from the
    board, and, where every standing is exact in a double, the model's buckets."""
    board = await lb.board_period("daily", scope, at=NOW)
    kept = await r.hgetall(board.histogram)
    assert await lb.rebuild_rank_index("daily", scope, at=NOW) == len(model.entries)
    assert await r.hgetall(board.histogram) == kept
    standings = [standing(model.definition, values) for values, _ in model.entries.values()]
    if all(abs(x) < 2**53 for x in standings):
        assert {int(b): int(n) for b, n in kept.items()} == Counter(map(bucket_of, standings))


def test_writes_through_lb_submit_leave_the_board_as_the_model_says(redis_server: RedisServer) -> None:
    hold(redis_server, 120, st.tuples(histories(), st.integers(0, 25)).map(lambda c: (*c[0], c[1])), check_writes)


# The game's own boards are the definition ``default`` kept per scope: a slip naming a region and
# a mode lands on ``global``, ``region:<r>`` and ``mode:<m>`` alike, each its own board period.
SCOPES = {"global": None, "region:eu": ("region", "eu"), "mode:duo": ("mode", "duo")}


@st.composite
def game_histories(draw: st.DrawFn) -> tuple[GameConfig, list[tuple[str, str, int, int, str | None, str | None]]]:
    config = GameConfig(
        game="test",
        windows=("daily",),
        operator=draw(st.sampled_from(["best", "incr", "set"])),
        rank_mode=draw(st.sampled_from(RANK_MODES)),
    )
    slips = []
    for i in range(draw(st.integers(1, 20))):
        ts = NOW - 1000 * draw(st.integers(0, 3))  # whole seconds: the daily window's tie unit
        region, mode = draw(st.sampled_from([None, "eu"])), draw(st.sampled_from([None, "duo"]))
        points = draw(st.sampled_from([0, 1, 7, 1000]))
        slips.append((f"s{i}", draw(st.sampled_from(PLAYERS[:4])), points, ts, region, mode))
    return config, slips


async def check_game_writes(
    r: aioredis.Redis, config: GameConfig, slips: list[tuple[str, str, int, int, str | None, str | None]]
) -> None:
    await r.flushall()
    lb = Leaderboard(r, config)
    definition = lb.boards.get(boards.DEFAULT_ID)
    assert definition is not None and definition.encoding == boards.PACKED
    models = {scope: Board(definition, unit_ms=1000) for scope in SCOPES}
    for _, player, points, ts, region, mode in slips:
        for scope, kind in SCOPES.items():
            if kind is None or {"region": region, "mode": mode}[kind[0]] == kind[1]:
                models[scope].submit(player, (points,), ts)
    entries = [
        {
            "id": sid,
            "player": p,
            "points": str(v),
            "ts": str(ts),
            **({"region": g} if g else {}),
            **({"mode": m} if m else {}),
        }
        for sid, p, v, ts, g, m in slips
    ]
    assert {res.status for res in await lb.submit_batch(entries, now=NOW)} == {"ok"}
    for scope, model in models.items():
        ordered = model.ordered()
        want = [(p, model.entries[p][0][0], model.rank(p)) for p in ordered]
        top = await lb.top("daily", scope, n=100, at=NOW)
        assert [(e.player, e.score, e.rank) for e in top.entries] == want
        # the one type naming any board period reads the game's boards as the library does
        board = await lb.board_period("daily", scope, NOW)
        assert (board.definition.id, board.scope, board.period) == (boards.DEFAULT_ID, scope, top.period)
        name, keys, args = board.top_call(100)
        read = board.top(await r.fcall_ro(name, len(keys), *keys, *args))
        assert [(e.player, e.score, e.rank) for e in read.entries] == want
        ranks = await lb.ranks(PLAYERS[:4], "daily", scope, at=NOW)
        assert [(s.player, s.rank, s.score) for s in ranks.standings] == [
            (p, model.rank(p), model.entries[p][0][0] if p in model.entries else None) for p in PLAYERS[:4]
        ]
        if ordered:
            around = await lb.around(ordered[-1], "daily", scope, k=1, at=NOW)
            assert [(e.player, e.rank) for e in around.entries] == [(p, model.rank(p)) for p in ordered[-2:]]


def test_the_games_own_boards_follow_the_model_of_their_definition_in_every_scope(redis_server: RedisServer) -> None:
    hold(redis_server, 40, game_histories(), check_game_writes)


@st.composite
def default_histories(
    draw: st.DrawFn,
) -> tuple[boards.Definition, list[tuple[str, str, list[str], int, str | None, str | None]]]:
    """A stored default of any shape ``histories`` draws (1-5 keys, asc, tie last, per-key
    operators, int64 extremes) in a time zone, its slips naming a region, a mode, both or
    neither."""
    definition, slips = draw(histories())
    zone = draw(st.sampled_from(["UTC", "+05:30", "-03:00", "Asia/Tokyo"]))  # NOW is 10:00 UTC: one day
    default = parse({**definition.as_dict(), "id": boards.DEFAULT_ID, "time_zone": zone})
    scoped = [(*s, draw(st.sampled_from([None, "eu"])), draw(st.sampled_from([None, "duo"]))) for s in slips]
    return default, scoped


async def check_default_writes(
    r: aioredis.Redis,
    definition: boards.Definition,
    slips: list[tuple[str, str, list[str], int, str | None, str | None]],
) -> None:
    await r.flushall()
    lb = Leaderboard(r, GameConfig(game="test", windows=("daily",), rank_mode=definition.rank_mode))
    await lb.create_board(definition)
    await lb.boards.refresh()
    assert lb.boards.general == definition  # not the environment's shape: the defined boards' path
    await check_scoped_writes(r, lb, definition, slips, SCOPES, {})


async def check_scoped_writes(
    r: aioredis.Redis,
    lb: Leaderboard,
    definition: boards.Definition,
    slips: list[tuple[str, str, list[str], int, str | None, str | None]],
    scopes: dict[str, tuple[str, str] | None],
    fields: dict[str, str],
) -> None:
    """Slips naming a region, a mode, both or neither (with ``fields``) leave each board of
    ``scopes`` (its home: None) equal to its own model."""
    unit = 1000 if definition.encoding == boards.PACKED else 1
    models = {scope: Board(definition, unit_ms=unit) for scope in scopes}
    expected = []
    for _, player, values, ts, region, mode in slips:
        after = copy.deepcopy(models)  # a slip refused on one of its boards is written on none
        try:
            parsed = boards.parse_values(definition, values)
            for scope, kind in scopes.items():
                if kind is None or {"region": region, "mode": mode}[kind[0]] == kind[1]:
                    after[scope].submit(player, parsed, ts)
            expected.append("ok")
            models = after
        except InvalidBoard as exc:
            expected.append(exc.code)
    entries = [
        {"id": sid, "player": p, "values": ",".join(v), "ts": str(ts), "region": g or "", "mode": m or "", **fields}
        for sid, p, v, ts, g, m in slips
    ]
    got = [res.status if res.status != "error" else str(res.code) for res in await lb.submit_batch(entries, now=NOW)]
    assert got == expected
    for scope, model in models.items():
        await check_reads(r, lb, model, scope)


def test_a_stored_default_of_any_shape_follows_the_model_in_every_scope(redis_server: RedisServer) -> None:
    hold(redis_server, 40, default_histories(), check_default_writes)


# A defined board kept per region and mode: its home and each value's board, as the game's are.
DEFINED_SCOPES = {"board:b": None, "board:b:region:eu": ("region", "eu"), "board:b:mode:duo": ("mode", "duo")}


async def check_defined_scoped_writes(
    r: aioredis.Redis,
    definition: boards.Definition,
    slips: list[tuple[str, str, list[str], int, str | None, str | None]],
) -> None:
    await r.flushall()
    lb = Leaderboard(r, CONFIG)
    scoped = parse({**definition.as_dict(), "id": "b", "scopes": ["region", "mode"]})
    await lb.create_board(scoped)
    await check_scoped_writes(r, lb, scoped, slips, DEFINED_SCOPES, {"board": "b"})


def test_a_defined_board_kept_per_region_and_mode_follows_the_model_in_every_scope(redis_server: RedisServer) -> None:
    hold(redis_server, 30, default_histories(), check_defined_scoped_writes)
