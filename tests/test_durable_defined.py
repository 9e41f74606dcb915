"""Defined boards in the durable log: their slips recorded by the real scorer, and a rebuild into
an emptied Redis that gives every read of them back as it was (entries, key values, metadata,
ranks in order and in ties, the previous period) — on a lex board of two keys (Tower), a
full-range int64 board, a packed one with metadata and a packed one of two bounded keys (Race: a
level and a time, tie last, both in one double), beside the game's own boards."""

from __future__ import annotations

import asyncio
import io
import random
from typing import Any

import pytest
import redis.asyncio as aioredis

from leaderboard import GameConfig, Leaderboard, Submission, boards
from leaderboard.errors import InvalidBoard
from leaderboard.moderation import Moderation
from scorer import Consumer, ScorerSettings
from scorer.durable import Store
from scorer.durable.recorder import Recorder
from scorer.journal import JournalWorker
from scorer.rebuild import rebuild
from scorer.rebuild.writes import slip_calls

from .conftest import MS, NOW

pytest_plugins = ("tests.durable_fixtures",)  # fixtures: store_url, store (one per backend)

HOUR = 3_600_000
I64_MIN, I64_MAX = -(2**63), 2**63 - 1
CONFIG = GameConfig(game="test", windows=("daily", "alltime"))
DEFINITIONS: list[dict[str, Any]] = [
    {
        "id": "tower",
        "keys": [{"name": "floor", "min": 0, "max": 1000}, {"name": "time", "direction": "asc"}],
        "windows": ["daily", "alltime"],
        "metadata_bytes": 16,
    },
    {"id": "ledger", "keys": [{"name": "balance", "display": "money"}], "operator": "incr", "windows": ["alltime"]},
    {
        "id": "speedrun",
        "keys": [{"name": "ms", "direction": "asc", "min": 0, "max": 3_600_000}],
        "metadata_bytes": 16,
        "windows": ["daily"],
        "rank_mode": "competition",
    },
    {
        "id": "race",
        "keys": [{"name": "level", "min": 0, "max": 99}, {"name": "ms", "direction": "asc", "min": 0, "max": 100_000}],
        "tie": "last",
        "metadata_bytes": 16,
        "windows": ["daily", "alltime"],
    },
]
PLAYERS = [f"p{i}" for i in range(12)]


def slips(rnd: random.Random, first: int, start: int, hours: int) -> list[Submission]:
    """Slips to every board over ``hours`` from ``start``: few players and few values, so that
    writes meet and keys tie; the ledger near both ends of int64."""
    out = []
    for i in range(first, first + 120):
        ts, player = start + (i - first) * hours * HOUR // 120, rnd.choice(PLAYERS)
        board = rnd.choice(("tower", "ledger", "speedrun", "", "race"))
        if board == "tower":
            values: tuple[int, ...] = (rnd.randrange(5, 9), rnd.choice((60_000, 61_000, 75_500)))
        elif board == "race":
            values = (rnd.choice((0, 7, 99)), rnd.choice((0, 61_000, 100_000)))
        elif board == "ledger":
            values = (rnd.choice((I64_MIN // 4, I64_MAX // 4, -3, 7, 0)),)
        elif board == "speedrun":
            values = (rnd.choice((59_990, 60_000, 61_500)),)
        else:  # the game's own boards: folded, not replayed
            out.append(Submission(f"s{i}", player, rnd.randrange(1, 100), ts))
            continue
        meta = f"run-{i}" if board != "ledger" and rnd.random() < 0.5 else None
        out.append(Submission(f"s{i}", player, 0, ts, board=board, values=values, meta=meta))
    return out


def settings(redis_url: str) -> ScorerSettings:
    return ScorerSettings(
        redis_url=redis_url, game=CONFIG, name="c1", batch=17, block_ms=20, metrics_port=0, durable_url="sqlite:///x"
    )


async def record_journal(r: aioredis.Redis, redis_url: str, store: Store) -> None:
    """The journaled actions (the definitions) through the real journal worker."""
    worker = JournalWorker(r, settings(redis_url), Recorder(store, CONFIG, retention_days=30, compact_every_s=0))
    await asyncio.wait_for(worker.run(burst=True), 30_000 * MS)


async def apply(r: aioredis.Redis, redis_url: str, store: Store, subs: list[Submission], clock: int) -> None:
    """Through the real scorer with the durable log on, its clock at ``clock``."""
    # queued as lb_enqueue would (the queue's own clock check is the real clock's)
    await Leaderboard(r, CONFIG).enqueue([sub.fields() for sub in subs], backlog_max=10_000)
    recorder = Recorder(store, CONFIG, retention_days=30, compact_every_s=0)
    consumer = Consumer(r, settings(redis_url), now=lambda: clock, recorder=recorder)
    await asyncio.wait_for(consumer.run(burst=True), 30_000 * MS)


async def reads(lb: Leaderboard, only: tuple[str, ...] = ("tower", "ledger", "speedrun", "race")) -> list[Any]:
    """Every read of every defined board's periods (of the boards ``only`` names): top, ranks of
    everyone, around a player."""
    out: list[Any] = []
    for board, window, at in (
        ("tower", "daily", NOW),
        ("tower", "daily", NOW - 24 * HOUR),  # the previous day's board
        ("tower", "alltime", NOW),
        ("ledger", "alltime", NOW),
        ("speedrun", "daily", NOW),
        ("speedrun", "daily", NOW - 24 * HOUR),
        ("race", "daily", NOW - 24 * HOUR),
        ("race", "alltime", NOW),
    ):
        if board not in only:
            continue
        scope = f"board:{board}"
        out.append(await lb.top(window, scope, n=100, at=at))
        out.append(await lb.ranks(PLAYERS, window, scope, at=at))
        out.append(await lb.around(PLAYERS[0], window, scope, k=3, at=at))
    return out


async def defined_keys(r: aioredis.Redis) -> dict[str, Any]:
    """The defined boards' keys, read whole: members, the player -> member and metadata hashes,
    the distinct key parts."""
    state: dict[str, Any] = {}
    async for key in r.scan_iter(match=f"{CONFIG.keys.prefix}:*board:*", count=1000):
        if await r.type(key) == "zset":
            state[key] = await r.zrange(key, 0, -1, withscores=True)
        else:
            state[key] = await r.hgetall(key)
    return state


async def test_a_rebuild_restores_defined_boards_exactly(r: aioredis.Redis, redis_url: str, store: Store) -> None:
    lb = Leaderboard(r, CONFIG)
    for raw in DEFINITIONS:
        await lb.create_board(boards.parse(raw))
    await record_journal(r, redis_url, store)
    rnd = random.Random(25)
    # the day before NOW (its own daily periods), then the hours before NOW
    await apply(r, redis_url, store, slips(rnd, 0, NOW - 26 * HOUR, 5), NOW - 20 * HOUR)
    # a ban takes its player off every defined board (and it stays off after the rebuild); after
    # the unban, the player's new slips count again
    held = {(b.window, b.period, b.scope) for b in await Moderation(lb).defined_boards()}
    on = [e.player for e in (await lb.top("alltime", "board:tower", n=100, at=NOW)).entries]
    banned = await Moderation(lb).ban(on[0], actor="ops", reason="test")
    assert banned.boards >= 2  # tower's daily and alltime boards at least
    for board, window, at in (
        ("tower", "alltime", NOW),
        ("ledger", "alltime", NOW),
        ("tower", "daily", NOW - 24 * HOUR),
    ):
        assert on[0] not in {e.player for e in (await lb.top(window, f"board:{board}", n=100, at=at)).entries}
    assert await Moderation(lb).unban(on[0], actor="ops")
    # corrections of defined boards (set, remove, a player placed anew) and a definition updated
    # between slips: a rebuild replays each in its place, the older slips under the older definition
    # (their metadata no longer fits the new limit, their operator is no longer the board's)
    mod, at = Moderation(lb), NOW - 2 * HOUR - 60_000
    tower_on = [e.player for e in (await lb.top("alltime", "board:tower", n=100, at=NOW)).entries]
    tower, ledger = ["board:tower"], ["board:ledger"]
    await mod.correct(tower_on[-1], actor="o", reason="r", scopes=tower, values=[8, 1], window_name="alltime", at=at)
    await mod.correct(tower_on[1], actor="o", reason="r", scopes=tower, remove=True, at=at)
    await mod.correct("newbie", actor="o", reason="r", scopes=ledger, values=[I64_MIN // 3], metadata="", at=at)
    race_on = [e.player for e in (await lb.top("alltime", "board:race", n=100, at=NOW)).entries]
    await mod.correct(race_on[0], actor="o", reason="r", scopes=["board:race"], values=[99, 100_000], at=at)
    await lb.update_board(boards.parse({**DEFINITIONS[2], "operator": "set", "metadata_bytes": 4}))
    await record_journal(r, redis_url, store)
    assert len(held) == 6  # tower and race daily and alltime, ledger, speedrun daily
    back = Submission("back", on[0], 0, NOW - 2 * HOUR, board="tower", values=(5, 70_000))
    await apply(r, redis_url, store, [back, *slips(rnd, 1000, NOW - 2 * HOUR, 2)], NOW)
    before, keys_before = await reads(lb), await defined_keys(r)
    assert on[0] in {e.player for e in before[6].entries}  # back on tower's alltime board since the unban
    tower = before[0].entries
    assert before[3].entries and before[15].entries  # the previous day's boards are kept too
    assert len(tower) > 5 and len({e.keys for e in tower}) < len(tower)  # keys tie: time and id decide
    assert {e.metadata for e in tower} - {None}  # some entries carry metadata
    ledger = before[9].entries
    assert any(e.keys and abs(e.keys[0]) > 2**61 for e in ledger)  # far beyond a double's exact integers
    assert len(await store.slips("test")) > 150
    race = before[-3].entries  # packed, both keys decoded, their extremes among them
    assert (await lb.board_period("alltime", "board:race", NOW)).definition.encoding == boards.PACKED
    assert len({e.keys for e in race}) > 3
    assert {v for e in race for v in e.keys or ()} >= {0, 99, 100_000}

    await r.flushall()
    restored = await rebuild(r, store, CONFIG, now=NOW + 60_000, progress_to=io.StringIO())
    assert restored.refused == {}
    assert restored.slips == len(await store.slips("test")) and restored.defined_corrections == 4
    assert await defined_keys(r) == keys_before
    lb = Leaderboard(r, CONFIG)
    assert await reads(lb) == before


def test_slips_share_a_call_only_where_their_periods_and_horizon_allow() -> None:
    tower = boards.parse(DEFINITIONS[0])
    get = {"tower": tower}.get

    def slip(ts: int, board: str = "tower") -> dict[str, str]:
        return {"id": str(ts), "player": "p", "board": board, "values": "1,2", "ts": str(ts)}

    day = NOW - NOW % (24 * HOUR)
    entries = [slip(day + 5), slip(day + 1), slip(day + 9), slip(day - 1), slip(day + 2), slip(day + 3, "gone")]
    calls = [(now, [int(e["ts"]) - day for e in group]) for now, group in slip_calls(get, entries, 48 * HOUR)]
    # one day's slips together (now: the newest); yesterday's alone; so is a board nobody defines
    assert calls == [(day + 9, [5, 1, 9]), (day - 1, [-1]), (day + 2, [2]), (day + 3, [3])]
    # beyond the horizon, the same day's slips split
    far = [slip(day + 1), slip(day + 3 * HOUR)]
    assert [len(g) for _, g in slip_calls(get, far, HOUR)] == [1, 1]


def runs(rnd: random.Random, prefix: str, start: int, boards_of: tuple[str, ...]) -> list[Submission]:
    """A few slips to the tower and speedrun boards over the hour from ``start``."""
    out = []
    for i in range(30):
        board, player = rnd.choice(boards_of), rnd.choice(PLAYERS)
        values = (
            (rnd.randrange(5, 9), rnd.choice((60_000, 75_500)))
            if board == "tower"
            else (rnd.randrange(59_000, 61_000),)
        )
        out.append(Submission(f"{prefix}{i}", player, 0, start + i * 100_000, board=board, values=values))
    return out


async def live_keys(r: aioredis.Redis) -> dict[str, Any]:
    """``defined_keys`` of the periods still alive at NOW (Redis's own clock is years before it)."""
    state = await defined_keys(r)
    return {k: v for k, v in state.items() if not 0 < await r.expiretime(k) <= NOW // 1000}


async def test_deleted_and_recreated_boards_rebuild_as_redis_holds_them_after_expired_slips_are_pruned(
    r: aioredis.Redis, redis_url: str, store: Store
) -> None:
    lb = Leaderboard(r, CONFIG)
    await lb.create_board(boards.parse(DEFINITIONS[0]))  # tower: daily and alltime
    await lb.create_board(boards.parse(DEFINITIONS[2]))  # speedrun: daily only
    await record_journal(r, redis_url, store)
    rnd = random.Random(26)
    old = runs(rnd, "old", NOW - 9 * 24 * HOUR, ("tower", "speedrun"))  # their daily periods expired by NOW
    await apply(r, redis_url, store, old, NOW - 9 * 24 * HOUR + HOUR)
    await apply(r, redis_url, store, runs(rnd, "mid", NOW - 4 * HOUR, ("tower", "speedrun")), NOW - 3 * HOUR)
    # speedrun deleted (its keys stay until they expire), then created again with the same id and
    # another operator: it goes on from the keys it left, here as in a rebuild
    await lb.delete_board("speedrun")
    await record_journal(r, redis_url, store)
    await lb.create_board(boards.parse({**DEFINITIONS[2], "operator": "set"}))
    await record_journal(r, redis_url, store)
    await apply(r, redis_url, store, runs(rnd, "new", NOW - 2 * HOUR, ("tower", "speedrun")), NOW)
    before, keys_before = await reads(lb, ("tower", "speedrun")), await live_keys(r)
    assert before[0].entries and before[9].entries  # tower's and speedrun's today
    recorded = {s.id for s in await store.slips("test")}

    # a compaction drops the slips whose every period expired (speedrun's old ones: its daily
    # board only; tower's are on its all-time board too), and only those
    recorder = Recorder(store, CONFIG, retention_days=30, compact_every_s=0)
    pruned = (await recorder.compact(now=NOW)).slips
    kept = {s.id for s in await store.slips("test")}
    assert recorded - kept == {s.id for s in old if s.board == "speedrun"} and pruned == len(recorded - kept) > 0
    assert (await recorder.compact(now=NOW)).slips == 0  # once

    await r.flushall()
    restored = await rebuild(r, store, CONFIG, now=NOW + 60_000, progress_to=io.StringIO())
    assert restored.refused == {}
    assert await live_keys(r) == keys_before
    assert await reads(Leaderboard(r, CONFIG), ("tower", "speedrun")) == before


async def test_a_rebuild_keeps_deleted_definitions_so_a_re_creation_is_checked_as_before(
    r: aioredis.Redis, redis_url: str, store: Store
) -> None:
    lb = Leaderboard(r, CONFIG)
    await lb.create_board(boards.parse(DEFINITIONS[0]))
    await lb.create_board(boards.parse(DEFINITIONS[2]))
    await record_journal(r, redis_url, store)
    await apply(r, redis_url, store, runs(random.Random(27), "a", NOW - 2 * HOUR, ("tower", "speedrun")), NOW)
    await lb.delete_board("tower")
    await lb.create_board(tower := boards.parse({**DEFINITIONS[0], "top_n": 5}))  # the same keys: goes on
    before = await reads(lb, ("tower", "speedrun"))
    assert before[0].entries and before[9].entries  # tower's and speedrun's today
    for board in ("tower", "speedrun"):
        await lb.delete_board(board)
    await record_journal(r, redis_url, store)
    deleted = await r.hgetall(CONFIG.keys.deleted_boards)
    assert boards.parse(deleted["tower"]).top_n == 5 and set(deleted) == {"tower", "speedrun"}

    await r.flushall()
    restored = await rebuild(r, store, CONFIG, now=NOW + 60_000, progress_to=io.StringIO())
    assert restored.refused == {} and await r.hgetall(CONFIG.keys.deleted_boards) == deleted
    lb = Leaderboard(r, CONFIG)
    with pytest.raises(InvalidBoard) as caught:  # packed -> lex: would misread speedrun's entries
        await lb.create_board(boards.parse({**DEFINITIONS[2], "keys": [{"name": "ms", "direction": "asc"}]}))
    assert caught.value.code == "board_reorder" and await r.hlen(CONFIG.keys.boards) == 0
    await lb.create_board(tower)
    await lb.create_board(boards.parse(DEFINITIONS[2]))
    await lb.boards.refresh()
    assert await reads(lb, ("tower", "speedrun")) == before


async def test_a_rebuild_replays_tournament_slips_of_defined_boards(
    r: aioredis.Redis, redis_url: str, store: Store
) -> None:
    """A slip naming a defined board and a tournament is checked against the tournament and its
    entrants when it is applied: a rebuild has both in place before it replays such slips."""
    lb = Leaderboard(r, CONFIG)
    await lb.create_board(boards.parse(DEFINITIONS[0]))
    await lb.create_tournament("cup", NOW - 3 * HOUR, NOW + HOUR)
    await lb.join("cup", PLAYERS[:4])
    await record_journal(r, redis_url, store)
    subs = [
        Submission(
            f"c{i}",
            PLAYERS[i % 4],
            0,
            NOW - 2 * HOUR + i * 60_000,
            board="tower",
            values=(i % 3, 60_000 + i),
            tournament="cup",
        )
        for i in range(12)
    ]
    await apply(r, redis_url, store, subs, NOW)
    before = await lb.top("t-cup", "board:tower", n=10, at=NOW)
    assert len(before.entries) == 4
    keys_before = await defined_keys(r)

    await r.flushall()
    restored = await rebuild(r, store, CONFIG, now=NOW + 60_000, progress_to=io.StringIO())
    assert restored.refused == {} and restored.slips == len(subs)
    assert await defined_keys(r) == keys_before
    assert await Leaderboard(r, CONFIG).top("t-cup", "board:tower", n=10, at=NOW) == before
