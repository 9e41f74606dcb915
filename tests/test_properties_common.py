"""Property: lb_submit's two ways through a slip leave the same state behind.

A slip to a packed board (the game's own, or a defined board of bounded keys) with its own
operator, no rows, no kept outcome and no metadata (nearly every slip) takes a one-pass path; with
rows every slip takes the general path (plan, then write board by board). The same random history
is applied twice, once each way, into two games on one server, and everything the slips leave is
compared: each result's status, every key (boards, histograms, distinct points, versions,
activity entries, profiles, seen ids, distinct-player counts, scopes) with whether it expires, and
the announcements in order. Packed definitions of two and five keys (asc or desc, tie first or
last, values at their bounds and one past) are drawn beside the game's boards.
"""

from __future__ import annotations

import asyncio
from itertools import pairwise
from typing import Any, cast

import orjson
import redis.asyncio as aioredis
from hypothesis import given
from hypothesis import strategies as st

from fleet.redis_server import RedisServer
from leaderboard import GameConfig, Leaderboard, boards, connect

from .properties import bounded, bounded_keys, bounded_value
from .test_properties_defined import within
from .test_properties_library import CLOCK, INSTANTS, OPERATORS, PLAYERS, SHIFT, Slip, histories

END = "end of history"  # published after each history, so reading the announcements needs no timeout guess


@st.composite
def configs(draw: st.DrawFn) -> dict[str, Any]:
    """A game's settings; mostly best and set, which the one-pass path takes."""
    windows = draw(st.lists(st.sampled_from(list(SHIFT)), min_size=1, max_size=4, unique=True))
    ops = st.sampled_from(["best", "best", "set", *OPERATORS])
    return {
        "windows": tuple(windows),
        "operator": draw(ops),
        "window_operators": draw(st.dictionaries(st.sampled_from(windows), ops)),
        "rank_mode": draw(st.sampled_from(["ordinal", "competition", "dense"])),
        "top_n": draw(st.sampled_from([1, 2, 3, 10])),
    }


@st.composite
def packed_boards(draw: st.DrawFn) -> tuple[boards.Definition, list[dict[str, str]]]:
    """A packed definition of two or five bounded keys (41^5 fits the all-time window's points)
    and slips to it: values at each key's bounds, one past them, a key too few or too many, now
    and then an operator, metadata or a region (each the general path's)."""
    n = draw(st.sampled_from([2, 5]))
    keys = bounded_keys(draw, n, 40)
    for key in keys:
        if draw(st.integers(0, 7)):  # mostly the board's operator: per-key ones take the general path
            key.pop("operator", None)
    definition = boards.created(
        boards.parse(
            {
                "id": "b",
                "keys": keys,
                "operator": draw(st.sampled_from(["best", "best", "set", "incr"])),
                "tie": draw(st.sampled_from(["first", "last"])),
                "rank_mode": draw(st.sampled_from(["ordinal", "competition", "dense"])),
                "windows": ["daily", "alltime"],
                "top_n": draw(st.sampled_from([1, 2, 10])),
                "metadata_bytes": 8,
                "scopes": draw(st.sampled_from([[], ["region"]])),
            }
        )
    )
    assert definition.encoding == boards.PACKED
    # mostly within the bounds (at them often), now and then one past them (key_out_of_range)
    values = [st.one_of(within(k), within(k), within(k), bounded_value(k)) for k in keys]
    slips = []
    for _ in range(draw(st.integers(1, 30))):
        count = n if draw(st.integers(0, 9)) else draw(st.sampled_from([n - 1, n + 1]))
        slip = {
            "id": f"b{draw(st.integers(0, 11))}",
            "player": draw(st.sampled_from(PLAYERS)),
            "board": "b",
            "values": ",".join(str(draw(values[j % n])) for j in range(count)),
            "ts": str(draw(st.sampled_from(INSTANTS))),
        }
        extra = draw(st.sampled_from([None] * 9 + ["op", "meta", "region"]))
        if extra == "op":
            slip["op"] = draw(st.sampled_from(OPERATORS))
        elif extra == "meta":
            slip["meta"] = "car"
        elif extra == "region":
            slip["region"] = "eu"
        slips.append(slip)
    return definition, slips


async def state(r: aioredis.Redis, config: GameConfig) -> dict[str, Any]:
    """Every key of the game, read by type, named without the game's prefix."""
    out: dict[str, Any] = {}
    prefix = config.keys.prefix
    stamped = {config.keys.board_epoch, config.keys.journal}  # the board's creation, at the server's clock
    async for key in r.scan_iter(match=f"{prefix}:*"):
        if key in stamped:
            continue
        kind = await r.type(key)
        if kind == "zset":
            value: Any = await r.zrange(key, 0, -1, withscores=True)
        elif kind == "hash":
            value = await r.hgetall(key)
        elif kind == "set":
            value = sorted(await r.smembers(key))
        elif kind == "stream":
            value = [fields for _, fields in cast(list[tuple[str, dict[str, str]]], await r.xrange(key))]
        elif await r.getrange(key, 0, 3) == "HYLL":  # the distinct-player logs
            value = await r.pfcount(key)
        else:  # a counter (the definitions' version)
            value = await r.get(key)
        out[key.removeprefix(prefix)] = (kind, value, await r.ttl(key) > 0)
    return out


Outcome = tuple[list[str], dict[str, Any], list[Any]]  # statuses, keys, announcements


async def run(
    r: aioredis.Redis,
    config: GameConfig,
    history: list[dict[str, str]],
    names: list[str],
    cuts: list[int],
    rows: bool,
    definition: boards.Definition | None = None,
) -> Outcome:
    lb = Leaderboard(r, config)
    if definition is not None:
        await lb.create_board(definition)
    statuses: list[str] = []
    bounds = sorted({0, len(history), *(c % (len(history) + 1) for c in cuts)})
    async with r.pubsub() as ps:
        await ps.ssubscribe(config.keys.announce_channel)
        await ps.get_message(timeout=2)  # the subscribe confirmation
        for lo, hi in pairwise(bounds):
            fields = [dict(slip) for slip in history[lo:hi]]
            for i, f in enumerate(fields, lo):
                if names[i % len(names)]:
                    f["name"] = names[i % len(names)]
            results = await lb.submit_batch(fields, now=CLOCK, rows=rows)
            statuses += [res.status if res.status != "error" else str(res.code) for res in results]
        await r.execute_command("SPUBLISH", config.keys.announce_channel, END)
        announced: list[Any] = []
        while True:
            msg = await ps.get_message(ignore_subscribe_messages=True, timeout=5)
            assert msg is not None, "the end marker never arrived"
            if msg["data"] == END:
                break
            announced.append(orjson.loads(msg["data"]))
    return statuses, await state(r, config), announced


async def flush(r: aioredis.Redis) -> None:
    await r.flushall()  # keys only: the function library stays loaded


def test_the_one_pass_path_leaves_what_the_general_path_leaves(redis_server: RedisServer) -> None:
    with asyncio.Runner() as runner:
        r = connect(redis_server.url)
        assert isinstance(r, aioredis.Redis)

        @bounded(80)
        @given(
            configs(),
            histories(),
            st.one_of(st.none(), packed_boards(), packed_boards()),
            st.lists(st.sampled_from(["", "", "Ana", "B\u00e9"]), min_size=1, max_size=4),
            st.lists(st.integers(0, 40), max_size=5),
        )
        def check(
            settings: dict[str, Any],
            game: list[Slip],
            board: tuple[boards.Definition, list[dict[str, str]]] | None,
            names: list[str],
            cuts: list[int],
        ) -> None:
            runner.run(flush(r))
            definition, history = board if board is not None else (None, [])
            history = [s.fields() for s in game] + history if len(history) % 2 else history + [s.fields() for s in game]
            pass_config, general_config = GameConfig(game="pass", **settings), GameConfig(game="general", **settings)
            one_pass = runner.run(run(r, pass_config, history, names, cuts, False, definition))
            general = runner.run(run(r, general_config, history, names, cuts, True, definition))
            assert one_pass == general

        try:
            check()
        finally:
            runner.run(r.aclose())
