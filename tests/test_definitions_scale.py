"""Board definitions at scale, against a real redis-server: every process keeps its registry
current from the change log (the definitions changed, not all of them), re-reads all only when
it fell behind the log's floor; the game's cap on stored definitions; a deleted definition kept
while its boards hold entries and forgotten once they do not."""

from __future__ import annotations

import time
from typing import cast

import pytest
import redis.asyncio as aioredis

from leaderboard import GameConfig, Leaderboard, Submission, boards, now_ms
from leaderboard.definitions import CHANGES_PER_READ, Definitions
from leaderboard.errors import InvalidBoard
from leaderboard.purge import Purger, board_keys, kept_periods
from scorer import Publisher, ScorerSettings
from scorer import publisher as publisher_module
from scorer.publisher import DefinitionPeriods

TOWER = {"id": "tower", "keys": [{"name": "floor"}, {"name": "time", "direction": "asc"}]}


def board(i: int, **more: object) -> boards.Definition:
    return boards.parse({"id": f"g{i}", "keys": [{"name": "points"}], "windows": ["daily", "alltime"], **more})


async def test_a_registry_reads_only_the_definitions_that_changed(
    r: aioredis.Redis, lb: Leaderboard, config: GameConfig
) -> None:
    for i in range(50):
        await lb.create_board(board(i))
    registry = Definitions(r, config)
    assert await registry.refresh()
    assert len(registry.stored) == 50 and registry.parsed == 50 and registry.loads == 1
    assert not await registry.refresh()  # nothing moved: nothing read
    assert registry.parsed == 50

    await lb.create_board(board(50))
    await lb.update_board(boards.check_update(board(3), board(3, top_n=7, version=2)))
    await lb.delete_board("g7")
    assert await registry.refresh()
    assert registry.parsed == 52 and registry.loads == 1  # three changes: two to parse, one gone
    assert registry.get("g50") == board(50, version=1)
    assert (g3 := registry.get("g3")) is not None and g3.top_n == 7
    assert registry.get("g7") is None and len(registry.stored) == 50
    assert registry.stored == {
        d.id: d for d in (boards.parse(t) for t in (await r.hgetall(config.keys.boards)).values())
    }


async def test_more_changes_than_one_read_returns_are_read_in_steps(
    r: aioredis.Redis, lb: Leaderboard, config: GameConfig
) -> None:
    registry = Definitions(r, config)
    await registry.refresh()
    for i in range(CHANGES_PER_READ + 5):
        await lb.create_board(board(i))
    assert await registry.refresh()
    assert len(registry.stored) == CHANGES_PER_READ + 5 and registry.parsed == CHANGES_PER_READ + 5
    assert registry.loads == 1 and registry.version == int(await r.get(config.keys.boards_version) or 0)
    # exactly one read's worth, the stored default among them: applied as any refresh applies it
    for i in range(CHANGES_PER_READ - 1):
        await lb.delete_board(f"g{i}")
    stored = {**boards.default_definition("best", "ordinal", config.windows, 25).as_dict(), "top_n": 25}
    await lb.create_board(boards.parse(stored))
    assert await registry.refresh()
    assert registry.loads == 1 and len(registry.stored) == 7 and registry.config.top_n == 25


async def test_a_registry_behind_the_logs_floor_reads_them_all(
    r: aioredis.Redis, lb: Leaderboard, config: GameConfig
) -> None:
    await lb.create_board(board(1))
    await lb.create_board(board(2))
    behind = Definitions(r, config)
    await behind.refresh()
    await lb.delete_board("g1")  # never written to: its record is forgotten at once below
    k = config.keys
    names = board_keys(lb, board(1), kept_periods(board(1), now_ms()))
    assert await lb.purge_board("g1", str(await r.hget(k.deleted_boards, "g1")), names)
    # the delete's log member is gone with its record: the floor rose past it
    assert await r.zscore(k.board_changes, "g1") is None and await r.zscore(k.board_changes, "") == 3
    parsed = behind.parsed
    assert await behind.refresh()
    assert behind.loads == 2 and behind.parsed == parsed + 1  # everything again: g2
    assert behind.get("g1") is None and set(behind.stored) == {"g2"}


async def test_a_flushed_or_rebuilt_redis_is_read_again_in_full(
    r: aioredis.Redis, lb: Leaderboard, config: GameConfig
) -> None:
    await lb.create_board(board(1))
    await lb.create_board(board(2))
    registry = Definitions(r, config)
    await registry.refresh()
    await r.flushdb()
    await lb.create_board(board(3))  # the counter is behind the registry's version now
    assert await registry.refresh()
    assert set(registry.stored) == {"g3"} and registry.loads == 2
    await r.set(config.keys.boards_version, 100)  # counted with nothing in the log
    assert await registry.refresh()
    assert registry.loads == 3 and registry.version == 100


async def test_a_redis_that_counted_back_to_the_registrys_version_is_read_again(
    r: aioredis.Redis, config: GameConfig, lb: Leaderboard
) -> None:
    """Redis lost its data and its counter came back to the very version a process holds (one
    change before, one change since): the log's member at that version tells."""
    await lb.create_board(board(1))
    registry = Definitions(r, config)
    await registry.refresh()
    version = registry.version
    await r.flushdb()
    await lb.create_board(board(2))
    assert int(await r.get(config.keys.boards_version) or 0) == version  # the same counter
    assert await registry.refresh()
    assert set(registry.stored) == {"g2"} and registry.loads == 2
    assert not await registry.refresh()  # and then it holds again


async def test_a_redis_that_counted_back_with_the_same_board_is_read_again(
    r: aioredis.Redis, config: GameConfig, lb: Leaderboard
) -> None:
    """The same, with the very id at the very version: the log's epoch tells, not its member."""
    await lb.create_board(board(1))
    registry = Definitions(r, config)
    await registry.refresh()
    version = registry.version
    await r.flushdb()
    await lb.create_board(board(1, top_n=7))
    assert int(await r.get(config.keys.boards_version) or 0) == version
    assert await r.zrange(config.keys.board_changes, 0, -1) == ["g1"]  # as the log held before
    assert await registry.refresh()
    assert (g1 := registry.get("g1")) is not None and g1.top_n == 7 and registry.loads == 2
    assert not await registry.refresh()


async def test_the_cap_refuses_the_next_create_and_changes_nothing(r: aioredis.Redis, config: GameConfig) -> None:
    capped = Leaderboard(r, GameConfig(game=config.game, max_boards=3))
    for i in range(3):
        await capped.create_board(board(i))
    before = {k: await r.dump(k) async for k in r.scan_iter(match=f"{config.keys.prefix}:*")}
    with pytest.raises(InvalidBoard) as caught:
        await capped.create_board(board(3))
    assert caught.value.code == "too_many_boards"
    assert {k: await r.dump(k) async for k in r.scan_iter(match=f"{config.keys.prefix}:*")} == before
    # updates, and a create repeated exactly, are not creates; a delete makes room
    await capped.update_board(boards.check_update(board(0), board(0, top_n=5, version=2)))
    await capped.create_board(board(1))
    await capped.delete_board("g2")
    await capped.create_board(board(3))
    assert GameConfig.from_env({"LB_MAX_BOARDS": "0"}).max_boards == 0  # 0: no cap


async def test_a_deleted_definition_is_kept_while_its_entries_remain_then_forgotten(
    r: aioredis.Redis, lb: Leaderboard, config: GameConfig
) -> None:
    k = config.keys
    await lb.create_board(boards.parse(TOWER))
    await lb.submit_batch([Submission("s1", "mia", 0, now_ms(), board="tower", values=(12, 81250)).fields()])
    await lb.delete_board("tower")
    purger = Purger(lb)
    for _ in range(3):  # entries present: kept, pass after pass
        assert await purger.run(now_ms()) == []
        assert await r.hexists(k.deleted_boards, "tower")
    # retention expired them (deleted here as EXPIREAT would)
    written = [key async for key in r.scan_iter(match=f"{k.prefix}:*:board:tower")]
    assert written and set(written) <= set(
        board_keys(lb, boards.parse(TOWER), kept_periods(boards.parse(TOWER), now_ms()))
    )
    await r.delete(*written)
    assert await purger.run(now_ms()) == []  # found empty: forgotten at the next pass, not at once
    assert await purger.run(now_ms()) == ["tower"]
    assert not await r.hexists(k.deleted_boards, "tower") and await r.zscore(k.board_changes, "tower") is None
    # the id is created anew, with other keys than the deleted board's
    again = await lb.create_board(boards.parse({"id": "tower", "keys": [{"name": "height"}]}))
    assert again.version == 1 and [key.name for key in again.keys] == ["height"]
    entries = cast(list[tuple[str, dict[str, str]]], await r.xrange(k.journal))
    fns = [f["fn"] for _, f in entries]
    assert fns == ["board", "board_delete", "board_purge", "board"]


async def test_a_record_written_to_between_two_passes_is_kept(
    r: aioredis.Redis, lb: Leaderboard, config: GameConfig
) -> None:
    await lb.create_board(boards.parse(TOWER))
    await lb.boards.refresh()
    await lb.delete_board("tower")
    purger = Purger(lb)
    assert await purger.run(now_ms()) == []  # no entries: found empty
    # a process whose registry still held it wrote its first entry meanwhile (lb_submit takes
    # the definition from its caller)
    await lb.submit_batch([Submission("s1", "mia", 0, now_ms(), board="tower", values=(12, 81250)).fields()])
    assert await purger.run(now_ms()) == []
    assert await r.hexists(config.keys.deleted_boards, "tower")


async def test_the_publishers_periods_follow_changes_without_computing_every_definition(
    r: aioredis.Redis, lb: Leaderboard, config: GameConfig
) -> None:
    day = 86_400_000
    for i in range(20):
        await lb.create_board(board(i, time_zone="Europe/Paris"))
    await lb.boards.refresh()
    periods, now = DefinitionPeriods(), now_ms()
    periods.update(lb.boards, now)

    def expected(at: int) -> dict[tuple[str, str], str]:
        return {
            (w, f"board:{d.id}"): boards.period(d, w, at).label for d in lb.boards.stored.values() for w in d.windows
        }

    assert periods.labels == expected(now)
    placed = periods.placed
    await lb.create_board(board(20))
    await lb.delete_board("g0")
    await lb.boards.refresh()
    periods.update(lb.boards, now)
    assert periods.labels == expected(now) and periods.placed == placed + 2  # g20's two windows
    periods.update(lb.boards, now + day)  # a day later: only the daily periods roll over
    assert periods.labels == expected(now + day) and periods.placed == placed + 2 + 20
    started = time.perf_counter()
    periods.update(lb.boards, now + day)
    assert periods.placed == placed + 22 and time.perf_counter() - started < 1


async def test_a_publisher_publishes_many_due_boards_over_ticks_written_ones_first(
    redis_url: str, r: aioredis.Redis, lb: Leaderboard, config: GameConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(publisher_module, "PUBLISH_PER_TICK", 3)
    for i in range(5):
        await lb.create_board(board(i))  # two windows each: ten boards due, each its empty board
    await lb.boards.refresh()
    await lb.submit_batch([Submission("s1", "mia", 0, now_ms(), board="g4", values=(7,)).fields()])
    publisher = Publisher(r, ScorerSettings(redis_url=redis_url, game=config, name="s1", metrics_port=0))
    first = await publisher.tick()
    assert len(first) == 3 and {(d.scope, d.version) for d in first if d.version} == {("board:g4", 1)}
    published = {(d.window, d.scope) for d in first}
    for _ in range(3):
        published |= {(d.window, d.scope) for d in await publisher.tick()}
    assert published == {(w, f"board:g{i}") for i in range(5) for w in ("daily", "alltime")}
    assert await publisher.tick() == []  # all published: nothing left
    await lb.create_board(board(5))
    await lb.boards.refresh()
    assert {(d.window, d.scope) for d in await publisher.tick()} == {("daily", "board:g5"), ("alltime", "board:g5")}
    # the latest snapshots of boards that did not change are kept alive, a round trip per few thousand
    latest = config.keys.latest("daily", "board:g1")
    await r.expire(latest, 5)
    await publisher._refresh_latest()
    assert await r.ttl(latest) > 5


async def test_a_deleted_definition_is_kept_while_a_tournament_on_it_holds_entries(
    r: aioredis.Redis, lb: Leaderboard, config: GameConfig
) -> None:
    k, now = config.keys, now_ms()
    await lb.create_board(boards.parse(TOWER))
    await lb.create_tournament("cup", now - 60_000, now + 3_600_000)
    await lb.join("cup", ["mia"])
    await lb.submit_batch([Submission("s1", "mia", 0, now, board="tower", values=(3, 9), tournament="cup").fields()])
    await lb.delete_board("tower")
    on_cup = [key async for key in r.scan_iter(match=f"{k.prefix}:*:t-cup:*:board:tower")]
    assert on_cup  # the tournament's boards of it, and no other
    purger = Purger(lb)
    for _ in range(2):
        assert await purger.run(now_ms()) == []
    await r.delete(*on_cup)
    await purger.run(now_ms())
    assert await purger.run(now_ms()) == ["tower"]
