"""A defined board kept per region (its definition's ``scopes``), as the game's boards are: a
slip naming a region writes the home board ``board:<id>`` and the region's ``board:<id>:region:<r>``,
through the queue, the socket and HTTP; reads, a snapshot, a ban and the scope cap on both; the
definition's rules (a stable code for an unknown scope kind, scopes fixed once a board exists)
and a slip naming a scope its board is not kept per (refused, nothing written)."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
import redis.asyncio as aioredis

from leaderboard import GameConfig, InvalidBoard, InvalidSubmission, Leaderboard, Submission, boards, now_ms
from leaderboard.errors import BadRequest, InvalidInput
from leaderboard.keys import parse_scope
from leaderboard.moderation import Moderation
from leaderboard.purge import Purger
from leaderboard.queue import Queue
from scorer import Consumer, Publisher
from scorer.__main__ import parse_args
from scorer.__main__ import submit as cli_submit

from .conftest import MS, until
from .durable_helpers import rebuilt_reads
from .gw_helpers import client, greet, recv_type, request, running, server_files
from .test_api import SERVER, problem
from .test_game_default import api_url as api_url  # the fixture: this module's API process
from .test_game_default import settings

CONFIG = GameConfig(game="test")
TOWER: dict[str, Any] = {
    "id": "tower",
    "keys": [{"name": "floor", "min": 0, "max": 1000}, {"name": "time", "direction": "asc", "display": "duration_ms"}],
    "windows": ["daily", "weekly", "alltime"],
    "scopes": ["region"],
}
HOME, EU, US = "board:tower", "board:tower:region:eu", "board:tower:region:us"


def tower(**changes: Any) -> boards.Definition:
    return boards.parse({**TOWER, **changes})


def climb(now: int) -> list[Submission]:
    return [
        Submission("a", "ana", 0, now - 4, board="tower", values=(12, 81_000), region="eu"),
        Submission("b", "ben", 0, now - 3, board="tower", values=(12, 79_000), region="us"),
        Submission("c", "cy", 0, now - 2, board="tower", values=(9, 50_000), region="eu"),
        Submission("d", "dee", 0, now - 1, board="tower", values=(14, 90_000)),  # no region: the home board only
    ]


def test_a_definition_s_scopes() -> None:
    both = tower(scopes=["mode", "region"])
    assert both.scopes == ("region", "mode")  # canonical order
    assert "scopes" not in boards.parse({**TOWER, "scopes": []}).as_dict()  # none: stored as before scopes
    assert boards.parse(tower().to_json()) == tower()
    for bad in (["guild"], ["region", "region"], "region", [1]):
        with pytest.raises(InvalidBoard) as caught:
            tower(scopes=bad)
        assert caught.value.code == "invalid_board_scopes"
    for old, new in ((tower(), tower(scopes=[])), (tower(), both)):  # its entries are kept per scope
        with pytest.raises(InvalidBoard) as caught:
            boards.check_update(old, new)
        assert caught.value.code == "board_reorder"
    assert boards.check_update(tower(), tower(top_n=5)).version == 2
    configured = boards.default_definition("best", "ordinal", ("daily", "weekly", "alltime"), 10)
    with pytest.raises(InvalidBoard) as caught:  # the game's are kept per region and mode already
        boards.check_default(replace(configured, scopes=("region",)), configured)
    assert caught.value.code == "invalid_default_board"
    # one spelling of a scope's board, everywhere a board is named
    assert parse_scope(EU) == EU and boards.definition_of(EU) == "tower" and boards.home_of(EU) == HOME
    for bad in ("board:tower:guild:x", "board:tower:region:", "board:tower:region:a:b", "board:to:wer"):
        with pytest.raises(ValueError):
            parse_scope(bad)
    assert boards.board_scopes(tower(), "eu", None) == [HOME, EU]
    with pytest.raises(InvalidSubmission) as refused:
        boards.board_scopes(tower(), None, "duo")
    assert refused.value.code == "scope_not_kept"
    # the scopes' boards a page is offered, the game's and a defined board's alike: the values the
    # gateway lists (of the kinds the board is kept per), then those slips named
    listing = ["region:us", "mode:duo"]
    assert boards.on_offer("tower", ("region",), listing, [EU, US]) == [US, EU]
    assert boards.on_offer("default", ("region", "mode"), listing, ["region:ap"]) == [*listing, "region:ap"]
    assert boards.listed(US, listing) and boards.listed("mode:duo", listing)
    assert not boards.listed(EU, listing) and not boards.listed(HOME, listing)


async def test_a_board_per_region_through_the_queue_reads_the_socket_and_a_ban(
    redis_url: str, r: aioredis.Redis, lb: Leaderboard
) -> None:
    await lb.create_board(tower())
    await lb.boards.refresh()
    queue, consumer, publisher = Queue(r, CONFIG), Consumer(r, settings(redis_url)), Publisher(r, settings(redis_url))
    now = now_ms()
    # a mode on a board kept per region only: refused with its code, nothing queued
    with pytest.raises(InvalidSubmission) as refused:
        await queue.submit_many([Submission("x", "zed", 0, now, board="tower", values=(1, 1), mode="duo")])
    assert refused.value.code == "scope_not_kept"
    assert await r.xlen(lb.keys.submissions) == 0
    await queue.submit_many(climb(now))
    await asyncio.wait_for(consumer.run(burst=True), 30_000 * MS)

    home = await lb.top("weekly", HOME)
    assert [(e.player, e.keys) for e in home.entries] == [
        ("dee", (14, 90_000)),
        ("ben", (12, 79_000)),  # equal floors: the lower time first
        ("ana", (12, 81_000)),
        ("cy", (9, 50_000)),
    ]
    eu = await lb.top("daily", EU)
    assert [(e.rank, e.player) for e in eu.entries] == [(1, "ana"), (2, "cy")]
    assert [e.player for e in (await lb.top("alltime", US)).entries] == ["ben"]
    assert (await lb.rank("cy", "weekly", EU)).rank == 2
    assert [s.rank for s in (await lb.ranks(["cy", "ana", "dee"], "weekly", EU)).standings] == [2, 1, None]
    assert [e.player for e in (await lb.around("cy", "weekly", EU, k=1)).entries] == ["ana", "cy"]
    assert ((await lb.stats("weekly", HOME)).size, (await lb.stats("weekly", EU)).size) == (4, 2)
    assert await r.zcard(lb.keys.board("weekly", home.period.label, EU)) == 2
    assert await r.smembers(lb.keys.scopes) == {EU, US}  # the scope cap counts a scope's board, not the home
    # the activity entry names the home board
    fed = {e["id"]: e for e in await lb.feed(10) if e.get("id")}
    assert fed["a"]["board"] == HOME

    await publisher.tick()
    async with running(redis_url) as gw, client(gw) as ws:
        await greet(ws)
        sub = {"type": "subscribe", "board": EU, "window": "weekly", "id": 1}
        assert (await request(ws, sub))["type"] == "subscribed"
        snap = await recv_type(ws, "snapshot")
        assert (snap["board"], [e["player"] for e in snap["entries"]]) == (EU, ["ana", "cy"])
        reply = await request(ws, {"type": "top", "board": US, "window": "weekly", "n": 5}, "top")
        assert [e["player"] for e in reply["entries"]] == ["ben"]
        listed = {b["board"]: b for b in (await request(ws, {"type": "boards"}, "boards"))["boards"]}
        assert listed[HOME]["scopes"] == ["region"]  # the page's list: a region's board is board:tower:region:<r>
        # each home followed by its scopes' boards slips named, read and shown as the home is
        names = [b["board"] for b in (await request(ws, {"type": "boards"}, "boards"))["boards"]]
        assert names == ["global", HOME, EU, US]
        assert listed[EU] == {**{k: v for k, v in listed[HOME].items() if k != "scopes"}, "board": EU}
        unknown = await request(ws, {"type": "top", "board": "board:tower:mode:duo", "window": "weekly"})
        assert (unknown["type"], unknown["code"]) == ("error", "unknown_board")
        # a game server files a slip to a region's board by its name; its entry is announced there
        filed: dict[str, Any] = {"id": "f", "player": "fay", "board": EU, "values": [20, 1]}
        assert await server_files(gw, filed, {**filed, "id": "f2", "region": "us"}) == "invalid_scope"
        await asyncio.wait_for(consumer.run(burst=True), 30_000 * MS)
        await publisher.tick()
        announce = await recv_type(ws, "announce")
        assert (announce["board"], announce["player"], announce["rank"], announce["keys"]) == (
            EU,
            "fay",
            1,
            ["20", "1"],
        )
    assert [e.player for e in (await lb.top("weekly", HOME)).entries][:1] == ["fay"]
    assert [s.player for s in (await lb.ranks(["fay"], "weekly", US)).standings if s.rank] == []
    # the command line names it so too
    out = await cli_submit(
        settings(redis_url), parse_args(["submit", "--player", "gus", "--board", US, "--values", "1,1"])
    )
    assert out.startswith("queued")
    [(_, entry)] = cast(list[tuple[str, dict[str, str]]], await r.xrevrange(lb.keys.submissions, count=1))
    assert (entry["board"], entry["region"]) == ("tower", "us")
    await asyncio.wait_for(consumer.run(burst=True), 30_000 * MS)
    await Moderation(lb).ban("fay", actor="ops", reason="test slips")  # back to the climb's boards

    # a correction of the home board corrects every scope's board the player is on; a scope's alone
    mod = Moderation(lb)
    fixed = await mod.correct("cy", actor="ops", reason="t", values=[13, 1], scopes=[HOME], window_name="weekly")
    assert {(c.board.scope, c.previous, c.keys) for c in fixed} == {(HOME, 9, (9, 50_000)), (EU, 9, (9, 50_000))}
    assert [e.player for e in (await lb.top("weekly", EU)).entries] == ["cy", "ana"]
    fixed = await mod.correct("cy", actor="ops", reason="t", values=[1, 1], scopes=[EU], window_name="weekly")
    assert [c.board.scope for c in fixed] == [EU]
    assert [e.player for e in (await lb.top("weekly", EU)).entries] == ["ana", "cy"]
    assert [e.player for e in (await lb.top("weekly", HOME)).entries][:2] == ["dee", "cy"]  # 13 floors there still
    for scopes in (["board:tower:mode:duo"], [HOME, "global"]):
        with pytest.raises((InvalidBoard, InvalidInput)) as caught:
            await mod.correct("cy", actor="ops", reason="t", values=[1, 1], scopes=scopes)
        assert caught.value.code in {"unknown_board", "invalid_scope"}

    # a ban takes the player off every scope's board they are on
    banned = await mod.ban("ana", actor="ops", reason="cheat")
    assert banned.boards == 6  # the home and region:eu boards of three windows
    assert [e.player for e in (await lb.top("weekly", EU)).entries] == ["cy"]
    assert "ana" not in {e.player for e in (await lb.top("weekly", HOME)).entries}


async def test_the_scope_cap_counts_a_board_s_scopes(r: aioredis.Redis) -> None:
    lb = Leaderboard(r, replace(CONFIG, max_scopes=2))
    await lb.create_board(tower())
    await lb.boards.refresh()
    now = now_ms()
    first = [
        Submission("a", "ana", 0, now, board="tower", values=(1, 1), region="eu").fields(),
        Submission("g", "ana", 5, now, region="eu").fields(),  # the game's region:eu: the set's second
    ]
    assert [d.code for d in await lb.submit_batch(first)] == [None, None]
    one_more = Submission("b", "ben", 0, now, board="tower", values=(1, 1), region="us")
    (over,) = await lb.submit_batch([one_more.fields()])
    assert over.code == "too_many_scopes"
    assert not (await lb.top("weekly", US)).entries
    assert "ben" not in {e.player for e in (await lb.top("weekly", HOME)).entries}  # refused whole


async def test_http_writes_and_reads_a_region_s_board(
    api_url: str, redis_url: str, r: aioredis.Redis, lb: Leaderboard
) -> None:
    await lb.create_board(tower())
    await lb.boards.refresh()
    async with httpx.AsyncClient(base_url=api_url, timeout=10) as http:

        async def post(body: dict[str, Any], board: str = EU) -> httpx.Response:
            return await http.post(f"/v1/boards/{board}/scores", json={"player_id": "ana", **body}, headers=SERVER)

        async def accepted() -> bool:  # the API sees the definition within its refresh
            return (await post({"match_id": "h1", "values": [3, 81_000]})).status_code == 202

        await until(accepted, 5)
        problem(await post({"match_id": "h2", "values": [3, 1], "region": "us"}), 400, "invalid_scope")
        problem(await post({"match_id": "h3", "values": [3, 1]}, "board:tower:mode:duo"), 400, "scope_not_kept")
        problem(await post({"match_id": "h4", "values": [3, 1]}, "board:tower:guild:x"), 404, "bad_board")
        assert await r.xlen(lb.keys.submissions) == 1
        await asyncio.wait_for(Consumer(r, settings(redis_url)).run(burst=True), 30_000 * MS)
        for board in (HOME, EU):
            top = await http.get(f"/v1/boards/{board}/top", params={"window": "weekly"})
            assert top.status_code == 200
            assert [e["player"] for e in top.json()["entries"]] == ["ana"]
        assert (await http.get(f"/v1/boards/{US}/top", params={"window": "weekly"})).json()["entries"] == []


async def test_a_board_s_scopes_close_together_with_their_finals(r: aioredis.Redis, lb: Leaderboard) -> None:
    definition = tower()
    await lb.create_board(definition)
    await lb.boards.refresh()
    now = now_ms()
    assert all(done.code is None for done in await lb.submit_batch([s.fields() for s in climb(now)]))
    period = (await lb.top("daily", HOME)).period
    with pytest.raises(BadRequest):  # its home first, its own scopes only
        await lb.close(period, [EU, HOME], top_n=3, keep=5, maxlen=100, definition=definition)
    event = await lb.close(period, [HOME, EU, US], top_n=3, keep=5, maxlen=100, definition=definition)
    assert event is not None
    [final] = await lb.finals("daily", scope=EU)  # one finals list: its home's
    assert final["board"] == HOME
    assert {scope: [e["player"] for e in top] for scope, top in final["top"].items()} == {
        HOME: ["dee", "ben", "ana"],
        EU: ["ana", "cy"],
        US: ["ben"],
    }
    assert await r.exists(lb.keys.closed_marker("daily", period.label, EU))
    late = Submission("h", "ana", 0, now, board="tower", values=(20, 1), region="eu")
    (refused,) = await lb.submit_batch([late.fields()])
    assert refused.code == "period_closed"


async def test_a_rebuild_gives_every_scope_s_reads_back(r: aioredis.Redis, redis_url: str, tmp_path: Path) -> None:
    async def moderate(mod: Moderation) -> None:
        await mod.ban("ben", actor="ops", reason="cheat")
        await mod.correct("cy", actor="ops", reason="t", values=[13, 1], scopes=[HOME], window_name="alltime")

    before = await rebuilt_reads(
        r, settings, redis_url=redis_url, config=CONFIG, store_url=f"sqlite:///{tmp_path}/scores.db",
        definition=tower(), slips=climb(now_ms()), moderate=moderate,
        scopes=(HOME, EU, US), players=("ana", "ben", "cy", "dee"),
    )  # fmt: skip
    assert [e.player for e in before[13].entries] == ["dee", "cy", "ana"]  # alltime home: corrected, ben banned
    assert [e.player for e in before[15].entries] == ["cy", "ana"]  # alltime region:eu


async def test_a_deleted_board_is_purged_once_no_scope_s_board_holds_entries(
    r: aioredis.Redis, lb: Leaderboard
) -> None:
    await lb.create_board(tower())
    await lb.boards.refresh()
    (done,) = await lb.submit_batch([climb(now_ms())[0].fields()])  # ana, on the home and region:eu boards
    assert done.code is None
    await lb.delete_board("tower")
    k, purger = lb.keys, Purger(lb)
    home = [key async for key in r.scan_iter(match=f"{k.prefix}:*:{HOME}")]
    await r.delete(*home)  # the home's expired; region:eu's entries remain: kept
    for _ in range(2):
        assert await purger.run(now_ms()) == []
    assert await r.hexists(k.deleted_boards, "tower")
    await r.delete(*[key async for key in r.scan_iter(match=f"{k.prefix}:*:{EU}")])
    assert await purger.run(now_ms()) == []  # found empty: forgotten at the next pass
    assert await purger.run(now_ms()) == ["tower"]
    assert not await r.hexists(k.deleted_boards, "tower") and not await r.sismember(k.scopes, EU)


async def test_a_tournament_on_a_board_kept_per_region(r: aioredis.Redis, redis_url: str, tmp_path: Path) -> None:
    """As the game's tournaments are kept per region and mode: a tournament slip naming a region
    writes the tournament's home board and the region's, both closed together with their finals
    and rebuilt equal."""
    now, minute = now_ms(), 60_000
    lb = Leaderboard(r, CONFIG)
    cup = await lb.create_tournament("cup", now - 10 * minute, now + 50 * minute)
    await lb.join("cup", ["ana", "ben", "cy", "dee"])
    slips = [replace(s, tournament="cup") for s in climb(now)]
    slips.append(Submission("o", "fay", 0, now - 1, board="tower", values=(1, 1), region="eu"))  # its own windows

    async def close(mod: Moderation) -> None:
        tower_eu = [(e.player, e.keys) for e in (await mod.lb.top("t-cup", EU)).entries]
        assert tower_eu == [("ana", (12, 81_000)), ("cy", (9, 50_000))]  # fay's slip named no tournament
        assert [e.player for e in (await mod.lb.top("t-cup", HOME)).entries] == ["dee", "ben", "ana", "cy"]
        assert [e.player for e in (await mod.lb.top("weekly", EU)).entries] == ["fay"]  # the board's own windows
        await mod.ban("cy", actor="ops", reason="cheat")
        clock = [cup.period(0).end_ms + 65_000]  # ended, past the close delay: the publisher closes it
        publisher = Publisher(r, settings(redis_url), now=lambda: clock[0])
        await publisher.tick()
        await publisher.tick()

    before = await rebuilt_reads(
        r, settings, redis_url=redis_url, config=CONFIG, store_url=f"sqlite:///{tmp_path}/scores.db",
        definition=tower(), slips=slips, moderate=close, scopes=(HOME, EU, US),
        players=("ana", "ben", "cy", "dee"), windows=("t-cup",),
    )  # fmt: skip
    assert [e.player for e in before[-4].entries] == ["ana"]  # t-cup's region:eu, cy banned
    assert [e.player for e in before[-2].entries] == ["ben"]  # t-cup's region:us
    # closed with its scopes, once, under its home's finals; the rebuild restored them
    [final] = await lb.finals("t-cup", scope=EU)
    assert (final["board"], {s: [e["player"] for e in top] for s, top in final["top"].items()}) == (
        HOME,
        {HOME: ["dee", "ben", "ana"], EU: ["ana"], US: ["ben"]},
    )
    late = Submission("late", "ana", 0, now, board="tower", values=(20, 1), region="us", tournament="cup")
    (refused,) = await lb.submit_batch([late.fields()])
    assert refused.code == "period_closed"
