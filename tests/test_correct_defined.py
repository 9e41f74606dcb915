"""Corrections of defined boards (lb_correct_defined) against a real redis-server: key values set
or an entry taken off, on a lex board (two keys, dense ranks) and a packed one (one asc key), in
every window the correction names, with the player -> member hash, the distinct key parts, the
histogram and metadata kept right, the top-N versions bumped, the activity and the journal
written; bad input refused with its stable code and nothing written; the socket and command-line paths."""

from __future__ import annotations

from typing import Any, cast

import orjson
import pytest
import redis.asyncio as aioredis

from leaderboard import InvalidInput, Leaderboard, boards, now_ms
from leaderboard.errors import Banned, InvalidBoard
from leaderboard.moderation import BanResult, Moderation
from leaderboard.ranking import companions

from .conftest import NOW
from .gw_helpers import client, greet, request, running, token
from .test_scorer_process import operator

TOWER: dict[str, Any] = {  # lex: the higher floor first, then the earlier time
    "id": "tower",
    "keys": [{"name": "floor", "min": 0, "max": 1000}, {"name": "time", "direction": "asc"}],
    "windows": ["daily", "alltime"],
    "rank_mode": "dense",
    "metadata_bytes": 16,
}
SPEEDRUN: dict[str, Any] = {  # packed: one asc key, packed negated
    "id": "speedrun",
    "keys": [{"name": "ms", "direction": "asc", "display": "duration_ms", "min": 0, "max": 3_600_000}],
    "windows": ["daily"],
    "metadata_bytes": 16,
}
T0 = NOW - 3_600_000  # when the slips were reached


async def setup(lb: Leaderboard) -> tuple[boards.Definition, boards.Definition]:
    tower, speedrun = boards.parse(TOWER), boards.parse(SPEEDRUN)
    await lb.create_board(tower)
    await lb.create_board(speedrun)
    entries = [
        ("ana", "tower", "12,81250", "run-a"),
        ("ben", "tower", "12,79900", None),
        ("cy", "tower", "11,50000", None),
        ("ana", "speedrun", "61500", "rp-a"),
        ("ben", "speedrun", "59990", None),
        ("cy", "speedrun", "60000", None),
    ]
    slips = []
    for i, (player, board, values, meta) in enumerate(entries):
        fields = {"id": f"s{i}", "player": player, "board": board, "values": values, "ts": str(T0 + i)}
        slips.append(fields | ({"meta": meta} if meta else {}))
    assert {r.status for r in await lb.submit_batch(slips, now=NOW)} == {"ok"}
    return tower, speedrun


async def dump(r: aioredis.Redis, lb: Leaderboard) -> dict[str, Any]:
    """Every key of the game, read whole."""
    out: dict[str, Any] = {}
    async for key in r.scan_iter(match=f"{lb.keys.prefix}:*"):
        kind = await r.type(key)
        if kind == "zset":
            out[key] = await r.zrange(key, 0, -1, withscores=True)
        elif kind == "hash":
            out[key] = await r.hgetall(key)
        elif kind == "stream":
            out[key] = await r.xrange(key)
        else:
            out[key] = kind
    return out


async def test_a_correction_sets_and_removes_entries_of_lex_and_packed_boards(
    r: aioredis.Redis, lb: Leaderboard
) -> None:
    tower, speedrun = await setup(lb)
    mod, keys = Moderation(lb), lb.keys
    day = boards.period(tower, "daily", NOW).label
    before = cast(dict[str, str], await r.hgetall(keys.versions))
    # ana's tower entry goes up a floor, on both windows: it keeps the time it was reached, and
    # her metadata
    rows = await mod.correct("ana", actor="ops", reason="lost run", scopes=["board:tower"], values=[13, 90_000], at=NOW)
    assert [(c.board.window, c.previous, c.keys, c.rank) for c in rows] == [
        ("daily", 12, (12, 81_250), 1),
        ("alltime", 12, (12, 81_250), 1),
    ]
    for window in ("daily", "alltime"):
        top = await lb.top(window, "board:tower", n=10, at=NOW)
        assert [(e.player, e.keys, e.metadata) for e in top.entries] == [
            ("ana", (13, 90_000), "run-a"),
            ("ben", (12, 79_900), None),
            ("cy", (11, 50_000), None),
        ]
    label = boards.period(tower, "alltime", NOW).label
    member = await r.hget(keys.members("alltime", label, "board:tower"), "ana")
    assert member == boards.encode_member(tower, (13, 90_000), T0, "ana")
    # a player not on the board is placed as of the correction's clock; ben is taken off
    await mod.correct("dee", actor="ops", reason="r", scopes=["board:tower"], values=["12", "79900"], at=NOW)
    rows = await mod.correct("ben", actor="ops", reason="cheat", scopes=["board:tower"], remove=True, at=NOW)
    assert [(c.previous, c.rank) for c in rows] == [(12, None), (12, None)]
    board = keys.board("daily", day, "board:tower")
    assert await r.zrange(board, 0, -1) == [
        boards.encode_member(tower, (13, 90_000), T0, "ana"),
        boards.encode_member(tower, (12, 79_900), NOW, "dee"),
        boards.encode_member(tower, (11, 50_000), T0 + 2, "cy"),
    ]
    assert await r.hget(keys.members("daily", day, "board:tower"), "ben") is None
    # dense ranks: the distinct key parts are exactly those held (ana's and ben's old ones gone)
    held = {boards.key_prefix(tower, v) for v in ((13, 90_000), (12, 79_900), (11, 50_000))}
    assert set(await r.zrange(keys.points("daily", day, "board:tower"), 0, -1)) == held
    assert (await lb.rank("cy", "daily", "board:tower", at=NOW)).rank == 3
    # metadata: set, then cleared; the others' kept
    await mod.correct(
        "cy", actor="ops", reason="r", scopes=["board:tower"], values=[11, 50_000], metadata="fix", at=NOW
    )
    assert await r.hget(keys.metadata("daily", day, "board:tower"), "cy") == "fix"
    await mod.correct("cy", actor="ops", reason="r", scopes=["board:tower"], values=[11, 50_000], metadata="", at=NOW)
    assert await r.hget(keys.metadata("daily", day, "board:tower"), "cy") is None
    assert await r.hget(keys.metadata("daily", day, "board:tower"), "ana") == "run-a"

    # the packed board: ana's time corrected down (she leads), her tie part kept; cy taken off
    score = float(await r.zscore(keys.board("daily", day, "board:speedrun"), "ana") or 0)
    rows = await mod.correct("ana", actor="ops", reason="r", scopes=["board:speedrun"], values=[59_000], at=NOW)
    assert [(c.previous, c.keys, c.rank) for c in rows] == [(61_500, (61_500,), 1)]
    await mod.correct("cy", actor="ops", reason="r", scopes=["board:speedrun"], remove=True, at=NOW)
    top = await lb.top("daily", "board:speedrun", n=10, at=NOW)
    assert [(e.player, e.keys, e.metadata) for e in top.entries] == [
        ("ana", (59_000,), "rp-a"),
        ("ben", (59_990,), None),
    ]
    shift = speedrun.shift("daily")
    new_score = float(await r.zscore(keys.board("daily", day, "board:speedrun"), "ana") or 0)
    assert int(new_score) % (1 << shift) == int(score) % (1 << shift)
    members = cast(
        list[tuple[str, float]], await r.zrange(keys.board("daily", day, "board:speedrun"), 0, -1, withscores=True)
    )
    scores = [int(s) for _, s in members]
    histogram, _ = companions(scores, shift)
    stored = cast(dict[str, str], await r.hgetall(keys.histogram("daily", day, "board:speedrun")))
    assert {int(b): int(n) for b, n in stored.items() if int(n)} == histogram

    after = cast(dict[str, str], await r.hgetall(keys.versions))
    for field in (f"daily:{day}:board:tower", f"alltime:{label}:board:tower", f"daily:{day}:board:speedrun"):
        assert int(after[field]) > int(before[field])
    activity = cast(list[tuple[str, dict[str, str]]], await r.xrange(keys.activity))
    actions = [f for _, f in activity if f.get("action") == "correct"]
    assert actions[0] == {
        "action": "correct", "player": "ana", "by": "ops", "reason": "lost run", "value": "13,90000", "boards": "2",
    }  # fmt: skip
    journal = cast(list[tuple[str, dict[str, str]]], await r.xrange(keys.journal))
    journaled = [f for _, f in journal if f["fn"] == "correct_defined"]
    assert len(journaled) == 7


async def test_a_correction_names_a_window_and_a_period_of_the_board(r: aioredis.Redis, lb: Leaderboard) -> None:
    tower, _ = await setup(lb)
    rows = await Moderation(lb).correct(
        "ana", actor="ops", reason="r", scopes=["board:tower"], values=[1, 1], window_name="alltime", at=NOW
    )
    assert [c.board.window for c in rows] == ["alltime"]
    daily = await lb.top("daily", "board:tower", n=10, at=NOW)
    assert daily.entries[1].player == "ana" and daily.entries[1].keys == (12, 81_250)  # untouched
    yesterday = NOW - 86_400_000
    rows = await Moderation(lb).correct(
        "ana", actor="ops", reason="r", scopes=["board:tower"], values=[1, 1], window_name="daily",
        period="previous", at=NOW,
    )  # fmt: skip
    assert [(c.board.period, c.previous) for c in rows] == [(boards.period(tower, "daily", yesterday).label, None)]


@pytest.mark.parametrize(
    ("change", "code"),
    [
        ({"values": [13]}, "wrong_key_count"),
        ({"values": [13, 1, 2]}, "wrong_key_count"),
        ({}, "wrong_key_count"),  # neither values nor remove
        ({"values": [13, 2**63]}, "key_out_of_range"),  # beyond int64
        ({"values": [1001, 1]}, "key_out_of_range"),  # beyond the key's max
        ({"values": ["x", 1]}, "invalid_key_value"),
        ({"values": [13, 1], "metadata": "m" * 17}, "metadata_too_large"),
        ({"remove": True, "values": [13, 1]}, "wrong_key_count"),
        ({"values": [13, 1], "scopes": ["board:nope"]}, "unknown_board"),
        ({"values": [13], "scopes": ["board:default"]}, "invalid_scope"),  # the game's own: points
        ({"values": [13, 1], "scopes": ["board:tower", "global"]}, "invalid_scope"),
        ({"values": [13, 1], "points": 5}, "invalid_points"),
        ({"values": [13, 1], "scopes": ["global"]}, "invalid_scope"),
        ({"values": [13, 1], "window_name": "weekly"}, "invalid_window"),
        ({"values": [13, 1], "window_name": "daily", "period": "1999-01-01"}, "invalid_period"),
        ({"values": [13, 1], "player": "bad\u202eid"}, "invalid_player"),
        ({"values": [13, 1], "reason": ""}, "invalid_reason"),
    ],
)
async def test_a_bad_correction_of_a_defined_board_is_refused_and_writes_nothing(
    r: aioredis.Redis, lb: Leaderboard, change: dict[str, Any], code: str
) -> None:
    await setup(lb)
    held = await dump(r, lb)
    args: dict[str, Any] = {"player": "ana", "reason": "r", "scopes": ["board:tower"], "at": NOW} | change
    player = args.pop("player")
    points = args.pop("points", None)
    with pytest.raises((InvalidInput, InvalidBoard)) as refused:
        await Moderation(lb).correct(player, points, actor="ops", **args)
    assert refused.value.code == code
    assert await dump(r, lb) == held


async def test_the_function_itself_refuses_bad_key_values_and_a_banned_player(
    r: aioredis.Redis, lb: Leaderboard
) -> None:
    tower, _ = await setup(lb)
    periods = [boards.period(tower, "daily", NOW)]
    held = await dump(r, lb)
    for values, code in (((13,), "wrong_key_count"), ((13, 2**63), "key_out_of_range"), ((-1, 5), "key_out_of_range")):
        with pytest.raises(InvalidBoard) as refused:  # past the Python checks: the function's own
            await lb.correct_defined("ana", tower, periods, values, actor="ops", reason="r", now=NOW)
        assert refused.value.code == code
    with pytest.raises(InvalidBoard) as refused:
        await lb.correct_defined("ana", tower, periods, (1, 1), metadata="m" * 17, actor="ops", reason="r", now=NOW)
    assert refused.value.code == "metadata_too_large"
    assert await dump(r, lb) == held
    await Moderation(lb).ban("ana", actor="ops", reason="r")
    with pytest.raises(Banned):
        await Moderation(lb).correct("ana", actor="ops", reason="r", scopes=["board:tower"], values=[1, 1])


async def test_a_game_server_corrects_a_defined_board_over_its_socket(
    redis_url: str, r: aioredis.Redis, lb: Leaderboard
) -> None:
    await setup(lb)
    async with running(redis_url) as gw, client(gw, f"?token={token('backend', 'server')}") as ws:
        await greet(ws)
        msg = {"type": "correct", "player": "ben", "reason": "r", "scopes": ["board:tower"], "id": 1}
        done = await request(ws, msg | {"values": ["12", 70_000], "window": "alltime"}, "corrected")
        [row] = done["boards"]
        assert done["values"] == ["12", "70000"] and "points" not in done
        assert row["board"] == "board:tower" and row["previous_keys"] == ["12", "79900"] and row["rank"] == 1
        gone = await request(ws, msg | {"remove": True, "window": "alltime"}, "corrected")
        assert gone["boards"][0]["rank"] is None
        bad = await request(ws, msg | {"values": [12]}, "error")
        assert bad["code"] == "wrong_key_count"
        bad = await request(ws, msg | {"values": "12,1"}, "error")
        assert bad["code"] == "bad_message"
    top = await lb.top("alltime", "board:tower", n=10)
    assert [e.player for e in top.entries] == ["ana", "cy"]


async def test_the_command_line_corrects_a_defined_board(r: aioredis.Redis, redis_url: str, lb: Leaderboard) -> None:
    await lb.create_board(boards.parse(TOWER))
    await lb.submit_batch([{"id": "1", "player": "mia", "board": "tower", "values": "3,500", "ts": str(now_ms())}])
    base = ("correct", "--player", "mia", "--scope", "board:tower", "--reason", "fix")
    rc, out, err = await operator(redis_url, *base, "--values", "4,400", "--meta", "r-9", "--window", "alltime")
    assert rc == 0 and out.startswith("corrected mia: alltime ") and "board:tower: 3,500 -> 4,400 (#1)" in out, err
    top = await lb.top("alltime", "board:tower", n=10)
    assert [(e.player, e.keys, e.metadata) for e in top.entries] == [("mia", (4, 400), "r-9")]
    rc, out, err = await operator(redis_url, *base, "--remove")
    assert rc == 0 and out.count("(#-)") == 2, err
    rc, out, err = await operator(redis_url, *base, "--values", "4")
    assert rc == 2 and err.startswith("refused: wrong_key_count: "), err
    assert (await lb.top("alltime", "board:tower", n=10)).entries == []


async def test_one_ban_takes_the_player_off_the_games_boards_and_every_defined_one(
    r: aioredis.Redis, lb: Leaderboard
) -> None:
    tower, speedrun = await setup(lb)
    keys = lb.keys
    slips = [
        {"id": f"g{i}", "player": p, "points": str(pts), "ts": str(T0)}
        for i, (p, pts) in enumerate((("ana", 9), ("ben", 7)))
    ]
    assert {res.status for res in await lb.submit_batch(slips, now=NOW)} == {"ok"}
    day = boards.period(tower, "daily", NOW).label
    before = cast(dict[str, str], await r.hgetall(keys.versions))
    result = await Moderation(lb).ban("ana", actor="ops", reason="bot")
    # the game's 3 windows, tower's daily and alltime (lex), speedrun's daily (packed): one call
    assert (result.boards, result.top_changed) == (6, 6)
    journal = cast(list[tuple[str, dict[str, str]]], await r.xrange(keys.journal))
    [ban] = [f for _, f in journal if f["fn"] == "ban"]
    assert orjson.loads(ban["args"])[:3] == ["ana", "ops", "bot"]
    activity = cast(list[tuple[str, dict[str, str]]], await r.xrange(keys.activity))
    assert [f["action"] for _, f in activity if "action" in f] == ["ban"]
    for window in ("daily", "alltime"):
        label = boards.period(tower, window, NOW).label
        assert [e.player for e in (await lb.top(window, "board:tower", n=10, at=NOW)).entries] == ["ben", "cy"]
        assert await r.hget(keys.members(window, label, "board:tower"), "ana") is None
        assert await r.hget(keys.metadata(window, label, "board:tower"), "ana") is None
        # dense ranks: ana's key part went with her (nobody else held 12,81250)
        held = {boards.key_prefix(tower, v) for v in ((12, 79_900), (11, 50_000))}
        assert set(await r.zrange(keys.points(window, label, "board:tower"), 0, -1)) == held
    for window in lb.config.windows:
        assert [e.player for e in (await lb.top(window, at=NOW)).entries] == ["ben"]
    assert [e.player for e in (await lb.top("daily", "board:speedrun", n=10, at=NOW)).entries] == ["ben", "cy"]
    assert await r.hget(keys.metadata("daily", day, "board:speedrun"), "ana") is None
    board = keys.board("daily", day, "board:speedrun")
    scores = [int(s) for _, s in cast(list[tuple[str, float]], await r.zrange(board, 0, -1, withscores=True))]
    histogram, _ = companions(scores, speedrun.shift("daily"))
    stored = cast(dict[str, str], await r.hgetall(keys.histogram("daily", day, "board:speedrun")))
    assert {int(b): int(n) for b, n in stored.items() if int(n)} == histogram
    after = cast(dict[str, str], await r.hgetall(keys.versions))
    assert all(int(after[f]) > int(before[f]) for f in before)
    # a second ban finds nothing more, and the tombstone keeps her slips out of every board
    assert await Moderation(lb).ban("ana", actor="ops", reason="bot") == BanResult(0, 0)
    [res] = await lb.submit_batch(
        [{"id": "x", "player": "ana", "board": "tower", "values": "1,1", "ts": str(NOW)}], now=NOW
    )
    assert res.status == "error" and res.code == "banned"
