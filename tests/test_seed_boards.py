"""The boards of a mobile game's ranking article (two-dimensional sorting), a speedrun board and a
full-range int64 board, each defined at run time and fed through the real pipeline: slips queued
(lb_enqueue), applied by a burst scorer (lb_submit), published by the scorer's publisher, and
read as snapshots over a real WebSocket — every board's order as its definition says."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest
import redis.asyncio as aioredis

from leaderboard import GameConfig, InvalidInput, InvalidSubmission, Leaderboard, Submission, boards, now_ms
from leaderboard.moderation import Moderation
from leaderboard.queue import Queue
from leaderboard.submission import entry_fields
from scorer import Consumer, Publisher, ScorerSettings

from .conftest import MS
from .gw_helpers import T, client, greet, recv, request, running

I64_MIN, I64_MAX = -(2**63), 2**63 - 1
DEFINITIONS: list[dict[str, Any]] = [
    # higher combat power first, then the higher level
    {"id": "combat", "keys": [{"name": "combat"}, {"name": "level"}], "windows": ["daily"]},
    # the higher floor first, then the earlier completion (less time)
    {
        "id": "tower",
        "keys": [
            {"name": "floor", "min": 0, "max": 1000},
            {"name": "time", "direction": "asc", "display": "duration_ms"},
        ],
        "windows": ["daily"],
    },
    # arena rank: 1 is the best; fits the packed double (asc, by negation)
    {"id": "arena", "keys": [{"name": "rank", "direction": "asc", "min": 1, "max": 100_000}], "operator": "set"},
    {"id": "prestige", "keys": [{"name": "prestige"}, {"name": "level"}], "windows": ["weekly"]},
    # the fastest run first, with the run's replay id as metadata
    {
        "id": "speedrun",
        "keys": [{"name": "ms", "direction": "asc", "display": "duration_ms", "min": 0, "max": 3_600_000}],
        "metadata_bytes": 32,
        "windows": ["daily"],
    },
    # a running balance over the whole int64 range, negatives included
    {"id": "ledger", "keys": [{"name": "balance", "display": "money"}], "operator": "incr", "windows": ["alltime"]},
]
SLIPS: dict[str, list[tuple[str, tuple[int, ...], str | None]]] = {
    "combat": [("ana", (9_000, 40), None), ("ben", (9_000, 55), None), ("cy", (12_000, 10), None)],
    "tower": [("ana", (12, 81_250), None), ("ben", (12, 79_900), None), ("cy", (11, 50_000), None)],
    "arena": [("ana", (3,), None), ("ben", (1,), None), ("cy", (2,), None), ("ben", (4,), None)],
    "prestige": [("ana", (7, 30), None), ("ben", (7, 31), None), ("cy", (6, 99), None)],
    "speedrun": [("ana", (61_500,), "replay-a"), ("ben", (59_990,), "replay-b"), ("cy", (60_000,), None)],
    "ledger": [
        ("ana", (I64_MIN,), None),
        ("ben", (I64_MAX,), None),
        ("cy", (-5,), None),
        ("cy", (-7,), None),
        ("dee", (0,), None),
    ],
}
# The expected snapshot order, (player, keys) best first.
EXPECTED = {
    "combat": [("cy", ["12000", "10"]), ("ben", ["9000", "55"]), ("ana", ["9000", "40"])],
    "tower": [("ben", ["12", "79900"]), ("ana", ["12", "81250"]), ("cy", ["11", "50000"])],
    "arena": [("cy", ["2"]), ("ana", ["3"]), ("ben", ["4"])],  # set: ben's 1 was overwritten by 4
    "prestige": [("ben", ["7", "31"]), ("ana", ["7", "30"]), ("cy", ["6", "99"])],
    "speedrun": [("ben", ["59990"]), ("cy", ["60000"]), ("ana", ["61500"])],
    "ledger": [("ben", [str(I64_MAX)]), ("dee", ["0"]), ("cy", ["-12"]), ("ana", [str(I64_MIN)])],
}
WINDOW = {d["id"]: d.get("windows", ["daily", "weekly", "alltime"])[0] for d in DEFINITIONS}


async def test_seed_boards_through_the_pipeline(redis_url: str, r: aioredis.Redis, lb: Leaderboard) -> None:
    config: GameConfig = lb.config
    settings = ScorerSettings(redis_url=redis_url, game=config, name="s1", batch=50, block_ms=20, metrics_port=0)
    for raw in DEFINITIONS:
        await lb.create_board(boards.parse(raw))
    queue, now, n = Queue(r, config), now_ms() - 5_000, 0
    for board, slips in SLIPS.items():
        subs = []
        for player, values, meta in slips:
            n += 1
            subs.append(Submission(f"s{n}", player, 0, now + n, board=board, values=values, meta=meta))
        await queue.submit_many(subs)
    # a slip whose key count is wrong, and one beyond int64: refused by the scorer, nothing written
    await r.xadd(config.keys.submissions, {"id": "bad1", "player": "eve", "board": "tower", "values": "3", "ts": now})
    await r.xadd(
        config.keys.submissions,
        {"id": "bad2", "player": "eve", "board": "ledger", "values": "9223372036854775808", "ts": now},
    )
    await asyncio.wait_for(Consumer(r, settings).run(burst=True), 30_000 * MS)
    dead = cast(list[tuple[str, dict[str, str]]], await r.xrange(config.keys.dead_letters))
    letters = {f["id"]: f["dead.code"] for _, f in dead}
    assert letters == {"bad1": "wrong_key_count", "bad2": "key_out_of_range"}
    publisher = Publisher(r, settings)
    due = await publisher.tick()
    assert {(d.window, d.scope) for d in due} >= {(WINDOW[b], f"board:{b}") for b in SLIPS}
    async with running(redis_url) as gw, client(gw) as ws:
        await greet(ws)
        for board, expected in EXPECTED.items():
            scope, win = f"board:{board}", WINDOW[board]
            await request(ws, {"type": "subscribe", "board": scope, "window": win}, "subscribed")
            snap = await _snapshot(ws, scope)
            assert [(e["player"], e["keys"]) for e in snap["entries"]] == expected, board
            assert [e["rank"] for e in snap["entries"]] == list(range(1, len(expected) + 1))
            assert [c["name"] for c in snap["columns"]] == [k["name"] for k in _definition(board)["keys"]]
        speed = await _snapshot_of(ws, "board:speedrun", "daily")
        assert [e.get("meta") for e in speed["entries"]] == ["replay-b", None, "replay-a"]
        for scope, win, code in (("board:nope", "daily", "unknown_board"), ("board:tower", "weekly", "invalid_window")):
            bad = await request(ws, {"type": "subscribe", "board": scope, "window": win}, "error")
            assert bad["code"] == code
    # a ban takes the player off every defined board (entries, metadata; the top N republished)
    # and refuses the player's slips to them; a defined board is corrected with key values, not points
    mod = Moderation(lb)
    versions = cast(dict[str, str], await r.hgetall(config.keys.versions))
    await mod.ban("ben", actor="ops", reason="test")
    for board, expected in EXPECTED.items():
        top = await lb.top(WINDOW[board], f"board:{board}", n=10)
        assert [e.player for e in top.entries] == [p for p, _ in expected if p != "ben"], board
        assert (await lb.rank("ben", WINDOW[board], f"board:{board}")).rank is None
    fastest = await lb.top("daily", "board:speedrun", n=10)
    assert [e.metadata for e in fastest.entries] == [None, "replay-a"]  # ben's replay-b is gone
    after = cast(dict[str, str], await r.hgetall(config.keys.versions))
    assert all(int(after[f]) > int(versions[f]) for f in versions if f.endswith(("board:tower", "board:ledger")))
    [refused] = await lb.submit_batch(
        [{"id": "late", "player": "ben", "board": "tower", "values": "99,1", "ts": str(now)}]
    )
    assert refused.code == "banned"
    with pytest.raises(InvalidInput) as refusal:
        await mod.correct("cy", 5, actor="ops", reason="test", scopes=["board:tower"])
    assert refusal.value.code == "invalid_points"


async def _snapshot(ws: Any, scope: str) -> dict[str, Any]:
    async with asyncio.timeout(2 * T):
        while True:
            msg = await recv(ws)
            if msg["type"] == "snapshot" and msg["board"] == scope:
                return msg


async def _snapshot_of(ws: Any, scope: str, win: str) -> dict[str, Any]:
    reply = await request(ws, {"type": "top", "board": scope, "window": win, "n": 10}, "top")
    return reply


def _definition(board: str) -> dict[str, Any]:
    return next(d for d in DEFINITIONS if d["id"] == board)


def test_a_slip_to_a_board_is_checked_where_it_is_made() -> None:
    with pytest.raises(InvalidSubmission) as caught:
        Submission("s", "ana", 0, 1, board="tower", values=(1, 2**63))
    assert caught.value.code == "key_out_of_range"
    with pytest.raises(InvalidSubmission) as caught:
        Submission("s", "ana", 0, 1, board="tower", values=())
    assert caught.value.code == "wrong_key_count"
    # key values without a board are the game's boards' (their stored default's: the queue checks them)
    assert Submission("s", "ana", 0, 1, values=(1,)).fields() == {"slip": "s\tana\t\t1\t", "values": "1"}
    sub = Submission("s", "ana", 0, 1, board="tower", values=(12, -5), meta="r")
    assert sub.fields() == {"slip": "s\tana\t\t1\t", "board": "tower", "meta": "r", "values": "12,-5"}
    assert entry_fields(sub.fields()) == {
        "id": "s",
        "player": "ana",
        "ts": "1",
        "board": "tower",
        "values": "12,-5",
        "meta": "r",
    }
    assert Submission.parse(entry_fields(sub.fields())) == sub
