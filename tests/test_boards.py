"""Board definitions in Redis: lb_board_put / lb_board_delete through their wrappers and the
``python -m scorer board`` command, against a real redis-server; a change reaches a running
gateway and a scorer's publisher within a tick, without a restart."""

from __future__ import annotations

import asyncio
import os
import sys
from typing import cast

import orjson
import pytest
import redis.asyncio as aioredis

from leaderboard import GameConfig, Leaderboard, Submission, boards, now_ms
from leaderboard.errors import InvalidBoard
from scorer import Publisher, ScorerSettings

from .conftest import until
from .gw_helpers import T, client, greet, request, running, token

TOWER = {"id": "tower", "keys": [{"name": "floor"}, {"name": "time", "direction": "asc", "display": "duration_ms"}]}


async def journal(r: aioredis.Redis, config: GameConfig) -> list[tuple[str, list[str]]]:
    entries = cast(list[tuple[str, dict[str, str]]], await r.xrange(config.keys.journal))
    return [(f["fn"], orjson.loads(f["args"])) for _, f in entries]


async def test_create_update_delete_with_stable_codes_and_a_journal_entry_each(
    r: aioredis.Redis, lb: Leaderboard, config: GameConfig
) -> None:
    tower = await lb.create_board(boards.parse(TOWER))
    assert tower.version == 1 and tower.encoding == boards.LEX
    assert await lb.create_board(boards.parse(TOWER)) == tower  # a retried create changes nothing
    with pytest.raises(InvalidBoard) as caught:
        await lb.create_board(boards.parse({**TOWER, "top_n": 3}))
    assert caught.value.code == "board_exists"
    with pytest.raises(InvalidBoard) as caught:  # asc -> desc would reorder the live board
        await lb.update_board(boards.parse({**TOWER, "keys": [{"name": "floor"}, {"name": "time"}]}))
    assert caught.value.code == "board_reorder"
    with pytest.raises(InvalidBoard) as caught:
        await lb.update_board(boards.parse({**TOWER, "id": "nope"}))
    assert caught.value.code == "unknown_board"
    updated = await lb.update_board(boards.parse({**TOWER, "top_n": 25, "rank_mode": "competition"}))
    assert (updated.version, updated.top_n) == (2, 25)
    assert boards.parse(await r.hget(config.keys.boards, "tower") or "") == updated
    await lb.delete_board("tower")
    with pytest.raises(InvalidBoard) as caught:
        await lb.delete_board("tower")
    assert caught.value.code == "unknown_board"
    assert await r.hlen(config.keys.boards) == 0
    assert await r.get(config.keys.boards_version) == "3"  # create, update, delete; refusals count nothing
    assert [fn for fn, _ in await journal(r, config)] == ["board", "board", "board_delete"]
    assert (await journal(r, config))[1][1] == ["tower", updated.to_json()]


async def test_an_update_made_from_a_stale_read_is_refused(
    r: aioredis.Redis, lb: Leaderboard, config: GameConfig
) -> None:
    first = await lb.create_board(boards.parse(TOWER))
    keys = lb._definition_keys
    await lb.update_board(boards.parse({**TOWER, "top_n": 20}))
    # a second operator checked its change against version 1 and sends it now
    late = boards.check_update(first, boards.parse({**TOWER, "top_n": 30}))
    with pytest.raises(Exception, match="stale_board"):
        await r.fcall("lb_board_put", len(keys), *keys, "tower", late.to_json(), first.to_json(), "", 0, 0)
    for bad in ("[]", '{"id":"other","keys":[{}],"version":1}', "x" * 5000):
        with pytest.raises(Exception, match="invalid_board"):
            await r.fcall("lb_board_put", len(keys), *keys, "tower2", bad, "", "", 0, 0)
    assert await r.hlen(config.keys.boards) == 1 and await r.get(config.keys.boards_version) == "2"


async def test_a_deleted_boards_id_is_created_again_only_with_keys_that_read_its_entries(
    r: aioredis.Redis, lb: Leaderboard, config: GameConfig
) -> None:
    await lb.create_board(boards.parse(TOWER))
    await lb.submit_batch([Submission("s1", "mia", 0, now_ms(), board="tower", values=(12, 81250)).fields()])
    await lb.delete_board("tower")  # its entries stay under its keys until they expire
    state = {k: await r.dump(k) async for k in r.scan_iter(match=f"{config.keys.prefix}:*")}
    # packed instead of lex, one key instead of two, another direction: each would misread them
    for keys in (
        [{"name": "floor", "min": 0, "max": 1000}],
        [{"name": "floor"}, {"name": "time"}],
        [{"name": "floor"}, {"name": "time", "direction": "asc"}, {"name": "lives"}],
    ):
        with pytest.raises(InvalidBoard) as caught:
            await lb.create_board(boards.parse({**TOWER, "keys": keys}))
        assert caught.value.code == "board_reorder" and "use a new id" in str(caught.value)
    assert {k: await r.dump(k) async for k in r.scan_iter(match=f"{config.keys.prefix}:*")} == state
    # the deleted definition changed between the caller's check and its create: told, nothing written
    names = lb._definition_keys
    with pytest.raises(Exception, match="stale_board"):
        await r.fcall("lb_board_put", len(names), *names, "tower", boards.parse(TOWER).to_json(), "", "", 0, 0)
    assert {k: await r.dump(k) async for k in r.scan_iter(match=f"{config.keys.prefix}:*")} == state


async def test_a_deleted_board_created_again_with_the_same_keys_goes_on_from_its_entries(
    r: aioredis.Redis, lb: Leaderboard, config: GameConfig
) -> None:
    await lb.create_board(boards.parse(TOWER))
    await lb.submit_batch([Submission("s1", "mia", 0, now_ms(), board="tower", values=(12, 81250)).fields()])
    await lb.delete_board("tower")
    assert boards.parse(await r.hget(config.keys.deleted_boards, "tower") or "") == boards.parse(TOWER)
    again = await lb.create_board(boards.parse({**TOWER, "top_n": 5}))  # the same keys
    assert again.version == 1 and await r.hlen(config.keys.deleted_boards) == 0
    await lb.boards.refresh()  # as every process does within a tick
    await lb.submit_batch([Submission("s2", "ann", 0, now_ms(), board="tower", values=(9, 70000)).fields()])
    top = (await lb.top("alltime", "board:tower")).entries
    assert [(e.player, e.keys) for e in top] == [("mia", (12, 81250)), ("ann", (9, 70000))]
    assert [fn for fn, _ in await journal(r, config)] == ["board", "board_delete", "board"]


async def test_the_default_board_is_the_configuration_until_an_operator_overrides_it(
    r: aioredis.Redis, lb: Leaderboard
) -> None:
    assert await lb.boards.refresh()
    default = lb.boards.get("default")
    assert default is not None and default.encoding == boards.PACKED and default.version == 1
    assert [d.id for d in lb.boards.all()] == ["default"]
    assert not await lb.boards.refresh()  # nothing moved: one GET, nothing re-read
    updated = await lb.update_board(boards.parse({**default.as_dict(), "top_n": 20}))
    assert updated.version == 2
    assert await lb.boards.refresh()
    assert lb.boards.get("default") == updated


async def test_a_running_gateway_and_publisher_see_a_new_definition_within_a_tick(
    redis_url: str, r: aioredis.Redis, lb: Leaderboard, config: GameConfig
) -> None:
    settings = ScorerSettings(redis_url=redis_url, game=config, name="s1", metrics_port=0)
    publisher = Publisher(r, settings)
    await publisher.tick()
    assert publisher.lb.boards.get("tower") is None
    async with running(redis_url) as gw:
        registry = gw.default_game.lb.boards
        await until(lambda: registry.version is not None, 5 * T)
        assert registry.get("tower") is None
        await lb.create_board(boards.parse(TOWER))
        await until(lambda: registry.get("tower") is not None, 5 * T)
        await publisher.tick()
        assert publisher.lb.boards.get("tower") == registry.get("tower")
        await lb.update_board(boards.parse({**TOWER, "top_n": 42}))
        await until(lambda: (d := registry.get("tower")) is not None and d.top_n == 42, 5 * T)
        await lb.delete_board("tower")
        await until(lambda: registry.get("tower") is None, 5 * T)


async def test_the_scorer_command(redis_url: str, lb: Leaderboard, tmp_path: object) -> None:
    env = {**os.environ, "LB_REDIS_URL": redis_url, "LB_GAME": "test"}

    async def board(*args: str) -> tuple[int, str]:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "scorer",
            *(args if args[0] == "submit" else ("board", *args)),
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        out, _ = await asyncio.wait_for(proc.communicate(), 30 * T)
        return proc.returncode or 0, out.decode()

    code, out = await board("create", orjson.dumps(TOWER).decode())
    assert code == 0 and "tower: created (lex encoding)" in out, out
    code, out = await board("create", '{"id":"x","keys":[]}')
    assert code == 2 and "board_no_keys" in out, out
    code, out = await board("update", orjson.dumps({**TOWER, "tie": "last"}).decode())
    assert code == 2 and "board_reorder" in out, out
    code, out = await board("update", orjson.dumps({**TOWER, "top_n": 5}).decode())
    assert code == 0 and "version 2" in out, out
    code, out = await board("list")
    assert code == 0 and out.splitlines() == ["default\tpacked\tpoints:desc\tv1", "tower\tlex\tfloor:desc,time:asc\tv2"]
    code, out = await board("show", "tower")
    assert code == 0 and orjson.loads(out)["top_n"] == 5 and orjson.loads(out)["encoding"] == "lex", out
    code, out = await board("submit", "--player", "ana", "--board", "tower", "--values", "12,81250", "--meta", "r1")
    assert code == 2 and "metadata_too_large" in out, out  # tower keeps no metadata: refused before the queue
    code, out = await board("submit", "--player", "ana", "--board", "tower", "--values", "12,81250")
    assert code == 0 and "board tower: 12,81250" in out, out
    code, out = await board("submit", "--player", "ana", "--board", "tower", "--values", "12,1e3")
    assert code == 2 and "invalid_key_value" in out, out
    code, out = await board("submit", "--player", "ana", "--board", "tower", "--points", "3")
    assert code == 2 and "--values: with --board" in out, out
    code, out = await board("delete", "tower")
    assert code == 0, out
    code, out = await board("show", "tower")
    assert code == 2 and "unknown_board" in out, out


async def test_game_servers_define_boards_over_the_socket(redis_url: str) -> None:
    async with (
        running(redis_url) as gw,
        client(gw, f"?token={token('ops', 'server')}") as server,
        client(gw) as spectator,
    ):
        await greet(server)
        await greet(spectator)
        made = await request(server, {"type": "board", "action": "create", "definition": TOWER, "id": 1}, "board")
        assert (made["id"], made["definition"]["version"]) == (1, 1)
        bad = await request(server, {"type": "board", "action": "create", "definition": {"id": "x", "keys": []}})
        assert (bad["type"], bad["code"]) == ("error", "board_no_keys")
        flip = {**TOWER, "keys": [{"name": "floor"}, {"name": "time"}]}
        bad = await request(server, {"type": "board", "action": "update", "definition": flip})
        assert bad["code"] == "board_reorder"
        listed = await request(server, {"type": "board", "action": "list"}, "board")
        assert [(d["id"], d["encoding"]) for d in listed["boards"]] == [("default", "packed"), ("tower", "lex")]
        refused = await request(spectator, {"type": "board", "action": "list"})
        assert refused["code"] == "auth_required"
        gone = await request(server, {"type": "board", "action": "delete", "board": "tower"}, "board")
        assert gone["board"] == "tower"
        bad = await request(server, {"type": "board", "action": "show", "board": "tower"})
        assert bad["code"] == "unknown_board"


async def test_a_packed_board_of_two_keys_writes_each_operator_and_refuses_a_value_outside_its_bounds(
    r: aioredis.Redis, lb: Leaderboard
) -> None:
    """Per-key operators on one double (a level added up, the best time kept): the old values
    decoded from the old score; a value outside a key's bounds, or a sum leaving them, is
    refused key_out_of_range and leaves Redis as it was, byte for byte."""
    race = {
        "id": "race",
        "keys": [
            {"name": "level", "min": 0, "max": 99, "operator": "incr"},
            {"name": "ms", "direction": "asc", "min": 0, "max": 1_000_000, "operator": "best"},
        ],
        "windows": ["daily", "alltime"],
        "rank_mode": "dense",
    }
    made = await lb.create_board(boards.parse(race))
    assert made.encoding == boards.PACKED
    now = now_ms()

    async def submit(sid: str, values: tuple[int, ...], op: str | None = None) -> str:
        sub = Submission(sid, "ana", 0, now, board="race", values=values, op=op)
        [result] = await lb.submit_batch([sub.fields()], now=now)
        return result.status if result.status != "error" else str(result.code)

    assert await submit("a", (5, 81_000)) == "ok"
    assert await submit("b", (3, 90_000)) == "ok"  # level 5 + 3, the better (lower) time kept
    top = await lb.top("alltime", "board:race", at=now)
    assert [(e.player, e.keys) for e in top.entries] == [("ana", (8, 81_000))]
    before = {k: await r.dump(k) async for k in r.scan_iter(match=f"{lb.keys.prefix}:*")}
    for sid, values, op in (
        ("c", (100, 0), None),  # above level's max
        ("d", (1, -1), None),  # below ms's min
        ("e", (1, 1_000_001), None),
        ("f", (92, 5), None),  # 8 + 92 leaves level's bounds
        ("g", (100, 5), "set"),
    ):
        assert await submit(sid, values, op) == "key_out_of_range", sid
    assert {k: await r.dump(k) async for k in r.scan_iter(match=f"{lb.keys.prefix}:*")} == before
    assert await submit("h", (99, 1_000_000), "set") == "ok"  # both keys' extremes
    assert [e.keys for e in (await lb.top("daily", "board:race", at=now)).entries] == [(99, 1_000_000)]
