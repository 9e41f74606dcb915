"""Property: lb_submit's two ways through a slip leave the same state behind.

A slip to the game's own boards with their own operators, no rows and no kept outcome (nearly
every slip) takes a one-pass path; with rows every slip takes the general path (plan, then write
board by board). The same random history is applied twice, once each way, into two games on one
server, and everything the slips leave is compared: each result's status, every key (boards,
histograms, distinct points, versions, activity entries, profiles, seen ids, distinct-player
counts, scopes) with whether it expires, and the announcements in order.
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
from leaderboard import GameConfig, Leaderboard, connect

from .properties import bounded
from .test_properties_library import CLOCK, OPERATORS, SHIFT, Slip, histories

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


async def state(r: aioredis.Redis, config: GameConfig) -> dict[str, Any]:
    """Every key of the game, read by type, named without the game's prefix."""
    out: dict[str, Any] = {}
    prefix = config.keys.prefix
    async for key in r.scan_iter(match=f"{prefix}:*"):
        kind = await r.type(key)
        if kind == "zset":
            value: Any = await r.zrange(key, 0, -1, withscores=True)
        elif kind == "hash":
            value = await r.hgetall(key)
        elif kind == "set":
            value = sorted(await r.smembers(key))
        elif kind == "stream":
            value = [fields for _, fields in cast(list[tuple[str, dict[str, str]]], await r.xrange(key))]
        else:  # the distinct-player logs
            value = await r.pfcount(key)
        out[key.removeprefix(prefix)] = (kind, value, await r.ttl(key) > 0)
    return out


Outcome = tuple[list[str], dict[str, Any], list[Any]]  # statuses, keys, announcements


async def run(
    r: aioredis.Redis, config: GameConfig, history: list[Slip], names: list[str], cuts: list[int], rows: bool
) -> Outcome:
    lb = Leaderboard(r, config)
    statuses: list[str] = []
    bounds = sorted({0, len(history), *(c % (len(history) + 1) for c in cuts)})
    async with r.pubsub() as ps:
        await ps.ssubscribe(config.keys.announce_channel)
        await ps.get_message(timeout=2)  # the subscribe confirmation
        for lo, hi in pairwise(bounds):
            fields = [slip.fields() for slip in history[lo:hi]]
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
            st.lists(st.sampled_from(["", "", "Ana", "B\u00e9"]), min_size=1, max_size=4),
            st.lists(st.integers(0, 40), max_size=5),
        )
        def check(settings: dict[str, Any], history: list[Slip], names: list[str], cuts: list[int]) -> None:
            runner.run(flush(r))
            one_pass = runner.run(run(r, GameConfig(game="pass", **settings), history, names, cuts, rows=False))
            general = runner.run(run(r, GameConfig(game="general", **settings), history, names, cuts, rows=True))
            assert one_pass == general

        try:
            check()
        finally:
            runner.run(r.aclose())
