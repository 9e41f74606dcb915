"""The journal in the durable log: operator actions, profiles, tournaments and closes are recorded
with the submissions and a rebuild restores what they left, exactly. Both backends."""

from __future__ import annotations

import asyncio
import io
from dataclasses import replace
from typing import Any, cast

import orjson
import pytest
import redis.asyncio as aioredis

from leaderboard import GameConfig, Leaderboard, boards, now_ms
from leaderboard.moderation import Moderation
from leaderboard.profiles import Profile
from leaderboard.windows import window
from scorer import Consumer, ScorerSettings
from scorer.badges import BadgeWorker
from scorer.durable import Action, ActionFolder, Folder, Record, Store, open_store
from scorer.durable.recorder import Recorder
from scorer.journal import GROUP, JournalWorker
from scorer.rebuild import rebuild

from .conftest import MS
from .durable_helpers import redis_state
from .test_durable_log import run_scorer, scorer_env

pytest_plugins = ("tests.durable_fixtures",)  # fixtures: store_url, store (one per backend)

CONFIG = GameConfig(game="test", windows=("daily", "weekly", "alltime"))
ACTOR = "ops:alice"
TOWER = {"id": "tower", "keys": [{"name": "floor"}, {"name": "time", "direction": "asc"}]}


async def journal_state(r: aioredis.Redis, config: GameConfig) -> dict[str, Any]:
    """redis_state and every key the journal's part of a rebuild restores: tombstones,
    tournaments, entrants, close markers and finals (with their expiry where they have one)."""
    state = await redis_state(r, config)
    prefix = config.keys.prefix
    async for key in r.scan_iter(match=f"{prefix}:*", count=1000):
        kind = key[len(prefix) + 1 :].split(":", 1)[0]
        if kind in ("banned", "tournaments", "boards", "deletedboards"):
            state[key] = {k: orjson.loads(v) for k, v in (await r.hgetall(key)).items()}
        elif kind == "entrants":
            state[key] = (sorted(await r.smembers(key)), await r.expiretime(key))
        elif kind == "boardsver":
            state[key] = await r.get(key)
        elif kind == "closedmark":
            state[key] = (await r.get(key), await r.expiretime(key))
        elif kind == "badges":
            state[key] = sorted(await r.smembers(key))
        elif kind == "finals":
            state[key] = [orjson.loads(x) for x in await r.lrange(key, 0, -1)]
    return state


class Game:
    """Submissions through the real consumer and the actions' journal through the real journal
    worker, both recording into ``store``, each drained after every step."""

    def __init__(self, r: aioredis.Redis, redis_url: str, store: Store) -> None:
        self.r = r
        self.lb = Leaderboard(r, CONFIG)
        self.mod = Moderation(self.lb)
        self.settings = ScorerSettings(
            redis_url=redis_url,
            game=CONFIG,
            name="c1",
            batch=7,
            block_ms=20,
            metrics_port=0,
            durable_url="sqlite:///unused",
            badge_thresholds=(("gold", 150), ("silver", 120)),
        )
        self.recorder = Recorder(store, CONFIG, retention_days=30, compact_every_s=0)
        self.n = 0

    async def submit(self, *slips: dict[str, str]) -> None:
        async with self.r.pipeline(transaction=False) as pipe:
            for fields in slips:
                self.n += 1
                entry: dict[Any, Any] = {"id": f"s{self.n}", "ts": str(now_ms() - 1000), **fields}
                pipe.xadd(CONFIG.keys.submissions, entry)
            await pipe.execute()
        await asyncio.wait_for(Consumer(self.r, self.settings, recorder=self.recorder).run(burst=True), 30_000 * MS)

    async def record_journal(self) -> None:
        # the badge worker first: its first awards are journaled too
        await asyncio.wait_for(BadgeWorker(self.r, self.settings).run(burst=True), 30_000 * MS)
        worker = JournalWorker(self.r, self.settings, self.recorder)
        await asyncio.wait_for(worker.run(burst=True), 30_000 * MS)


def slip(player: str, points: int, **fields: str) -> dict[str, str]:
    return {"player": player, "points": str(points), **fields}


async def play(game: Game, store: Store, *, compact: bool) -> None:
    """Submissions, then every kind of action between more submissions."""
    mod, lb = game.mod, game.lb
    await game.submit(*(slip(f"p{i}", 100 + 10 * i, region="eu" if i % 2 else "us", name=f"P{i}") for i in range(8)))
    await mod.set_profile("p1", Profile(avatar="https://cdn.example/p1.png", country="FR"))
    await mod.set_profile("p2", Profile(name="Zed", country="DE"))
    await mod.ban("p3", actor=ACTOR, reason="speed hack")
    await game.submit(slip("p3", 999), slip("p2", 50, op="set"))  # p3's is refused: banned
    await mod.correct("p4", 7, actor=ACTOR, reason="double-counted match")
    # lb_correct's one form on the game's boards: p2 taken off this week's global board
    this_week, game_board = window("weekly").period(now_ms()), lb.boards.get(boards.DEFAULT_ID)
    assert game_board is not None
    await lb.correct("p2", None, [(this_week, "global")], definition=game_board, actor=ACTOR, reason="void")
    await mod.unban("p3", actor=ACTOR)
    await game.submit(slip("p3", 20, mode="duo"), slip("p1", 5, name="Later"))
    start = now_ms() - 60_000
    await lb.create_tournament("cup", start, start + 3_600_000)
    await lb.join("cup", ["p0", "p1", "p6"])
    tower = boards.parse(TOWER)
    await lb.create_board(tower)
    await lb.update_board(boards.parse({**TOWER, "top_n": 50}))
    await lb.create_board(boards.parse({**TOWER, "id": "gone"}))
    await lb.delete_board("gone")
    await game.submit(slip("p0", 40, tournament="cup"), slip("p1", 41, tournament="cup"), slip("p0", 45, op="incr"))
    await game.record_journal()
    if compact:  # fold everything so far, the actions among it included, into board rows
        await store.compact("test", before_ts=now_ms() + 1, now_s=now_ms() // 1000, folder=ActionFolder(CONFIG))
    await mod.ban("p5", actor=ACTOR, reason="abuse")
    await mod.correct("p6", 3, actor=ACTOR, reason="refund", window_name="t-cup")
    # right after the correction that put p6 on the board: from now on p6 counts as a player of it
    await game.submit(slip("p6", 2, tournament="cup"))
    daily = window("daily")
    yesterday = daily.period(now_ms() - 86_400_000)
    assert await lb.close(yesterday, ["global"], top_n=3, keep=5, maxlen=100) is not None
    await mod.set_profile("p1", Profile(country=""))
    await lb.join("cup", ["p7"])
    await game.submit(slip("p7", 12, tournament="cup"), slip("p6", 300), slip("p0", 1))
    await game.record_journal()
    if compact:  # again: the tournament was folded the first time, its later slips now
        await store.compact("test", before_ts=now_ms() + 1, now_s=now_ms() // 1000, folder=ActionFolder(CONFIG))
        assert await store.count("test") == 0


@pytest.mark.parametrize("workers", [1, 2], ids=["in-process", "two-parts"])
@pytest.mark.parametrize("compact", [False, True], ids=["raw", "compacted"])
async def test_rebuild_restores_what_the_actions_left_exactly(
    r: aioredis.Redis, redis_url: str, store: Store, compact: bool, workers: int
) -> None:
    game = Game(r, redis_url, store)
    await play(game, store, compact=compact)
    assert await r.xlen(CONFIG.keys.journal) == 0  # recorded and deleted
    before = await journal_state(r, CONFIG)
    lb = game.lb
    # the scenario reached every kind of state the rebuild promises
    assert set(orjson.loads(await r.hget(CONFIG.keys.banned, "p5") or "{}")) == {"by", "reason", "at"}
    assert await r.hget(CONFIG.keys.banned, "p3") is None
    assert (await lb.rank("p3", "alltime")).score == 20  # unbanned, started again
    assert (await lb.rank("p4", "alltime")).score == 7  # corrected down
    assert (await lb.rank("p2", "weekly")).rank is None and (await lb.rank("p2", "daily")).score == 50
    assert (await lb.rank("p5", "alltime")).rank is None
    assert (await lb.rank("p1", "t-cup")).score == 41 and (await lb.rank("p6", "t-cup")).score == 3
    profiles = before[CONFIG.keys.profiles]
    assert profiles["p2"] == {"name": "Zed", "country": "DE"}  # the set later kept the name
    assert profiles["p1"] == {"name": "Later", "avatar": "https://cdn.example/p1.png"}
    assert sum(":closedmark:" in k for k in before) == 1 and sum(":finals:" in k for k in before) == 1
    assert sum(":entrants:" in k for k in before) == 1
    assert before[CONFIG.keys.badges("p7")] == ["gold", "silver", "top10"]
    assert before[CONFIG.keys.boards]["tower"]["top_n"] == 50 and before[CONFIG.keys.boards_version] == "4"
    assert before[CONFIG.keys.deleted_boards]["gone"]["id"] == "gone"

    await r.flushall()
    # in parts (the default), the actions are shared between them: p0, p2, ... in one, p1, p3, ... in the other
    restored = await rebuild(r, store, CONFIG, batch=5, progress_to=io.StringIO(), workers=workers)
    after = await journal_state(r, CONFIG)
    if compact:  # compacted ids are no longer remembered (retention shorter than the horizon)
        before = {k: v for k, v in before.items() if ":seen:" not in k}
        after = {k: v for k, v in after.items() if ":seen:" not in k}
        # Known and documented: the distinct-player logs are rebuilt from the board rows, and a
        # ban folded by a compaction took p5 off them: p5 played today but is no longer counted;
        # nor is p2 this week, whom a correction folded the same way took off the weekly board.
        for window_name in ("daily", "weekly", "alltime"):
            key = CONFIG.keys.players(window_name, window(window_name).period(now_ms()).label)
            assert after[key] == before[key] - (2 if window_name == "weekly" else 1)
            after[key] = before[key]
    assert after == before
    assert restored.refused == {} and restored.tournament_slips == 0
    # only what was applied after the newest ban, unban, correction or name change is replayed
    # through lb_submit: the four slips after p6's correction (closes, joins, a country do not count)
    assert restored.replayed == (0 if compact else 4)
    assert restored.journal == {
        "tombstones": 1,
        "tournaments": 1,
        "entrants": 4,
        "closed periods": 1,
        "badges": sum(len(v) for k, v in before.items() if ":badges:" in k),
        "board definitions": 1,
        "deleted board definitions": 1,
    }
    assert any(line.startswith("  journal: ") for line in restored.lines())


async def test_a_scorer_killed_between_recording_and_acknowledging_the_journal_records_each_action_once(
    r: aioredis.Redis, redis_url: str, store_url: str
) -> None:
    lb = Leaderboard(r, CONFIG)
    mod = Moderation(lb)
    await lb.submit_batch([slip(f"p{i}", i, id=f"s{i}", ts=str(now_ms() - 1000)) for i in range(5)])
    for i in range(12):  # more than one batch of the victim (LB_SCORER_BATCH=100: all in one)
        await mod.set_profile(f"p{i % 5}", Profile(country=("FR", "DE", "IT")[i % 3]))
    await mod.ban("p4", actor=ACTOR, reason="bot")
    entries = await r.xlen(CONFIG.keys.journal)
    assert entries == 13

    rc, err = await run_scorer(scorer_env(redis_url, store_url, "victim", LB_SCORER_CRASH_AT="journaled"))
    assert rc == 70, err
    assert (await r.xpending(CONFIG.keys.journal, GROUP))["pending"] == entries  # recorded, not acknowledged
    rc, err = await run_scorer(scorer_env(redis_url, store_url, "survivor"))
    assert rc == 0, err
    assert await r.xlen(CONFIG.keys.journal) == 0
    assert (await r.xpending(CONFIG.keys.journal, GROUP))["pending"] == 0
    log = open_store(store_url)
    await log.open()
    try:
        actions = await log.actions("test")
    finally:
        await log.close()
    assert len(actions) == entries == len({a.id for a in actions})  # each once
    assert [a.fn for a in actions] == ["profile"] * 12 + ["ban"]
    assert [a.at for a in actions] == sorted(a.at for a in actions)


async def test_a_compaction_without_the_actions_rules_is_refused_and_changes_nothing(store: Store) -> None:
    ts = now_ms() - 10_000
    await store.record("test", [Record("s1", "p1", 10, ts, applied_us=ts * 1000)])
    await store.record_actions("test", [Action(ts * 1000 + 1, "1-0", "ban", ("p1", ACTOR, "cheat", str(ts)))])
    with pytest.raises(TypeError, match="ActionFolder"):  # a plain Folder would leave p1's score standing
        await store.compact("test", before_ts=now_ms(), now_s=now_ms() // 1000, folder=Folder(CONFIG))
    assert await store.count("test") == 1 and not (await store.actions("test"))[0].folded
    done = await store.compact("test", before_ts=now_ms(), now_s=now_ms() // 1000, folder=ActionFolder(CONFIG))
    assert done.folded == 1 and await store.count("test") == 0
    assert [a.folded for a in await store.actions("test")] == [True]
    assert [row async for rows in store.board_rows("test", now_s=now_ms() // 1000) for row in rows] == []


def as_earlier_release(action: Action) -> Action:
    """A correction as 7e58782 journaled it: ``correct`` (player, points, actor, reason, now_ms,
    the board records) on the game's boards, ``correct_defined`` (this release's arguments) on a
    defined board's."""
    if action.fn != "correction":
        return action
    a = action.args
    if a[15].split(":", 2)[2].startswith("board:"):
        return replace(action, fn="correct_defined")
    return replace(action, fn="correct", args=(a[0], a[1], a[4], a[5], a[6], *a[15:]))


async def test_a_log_holding_the_earlier_releases_correction_forms_rebuilds_what_they_did(
    r: aioredis.Redis, redis_url: str, store: Store
) -> None:
    game = Game(r, redis_url, store)
    lb, mod = game.lb, game.mod
    await lb.create_board(boards.parse(TOWER))
    await game.submit(*(slip(f"p{i}", 100 + i, region="eu") for i in range(4)))
    await game.submit(*({"player": f"p{i}", "board": "tower", "values": f"{i},{900 - i}"} for i in range(3)))
    await mod.correct("p1", 7, actor=ACTOR, reason="double-counted match")  # keeps its reached time
    await mod.correct("new", 300, actor=ACTOR, reason="lost run", scopes=["global", "region:eu"])
    await mod.correct("p2", actor=ACTOR, reason="video", scopes=["board:tower"], values=[9, 1])
    await mod.correct("p0", actor=ACTOR, reason="glitch", scopes=["board:tower"], remove=True)
    await game.submit(slip("p3", 500), slip("new", 310, region="eu"))
    entries = cast(list[tuple[str, dict[str, str]]], await r.xrange(CONFIG.keys.journal))
    journaled = [Action.parse(entry_id, fields) for entry_id, fields in entries]
    assert sorted(a.fn for a in journaled if a is not None) == ["board", *["correction"] * 4]
    await store.record_actions("test", [as_earlier_release(a) for a in journaled if a is not None])
    # the game's as 7e58782's correct, the defined board's (correct_defined) read as this release's form
    assert sorted(a.fn for a in await store.actions("test")) == [
        "board",
        "correct",
        "correct",
        "correction",
        "correction",
    ]
    before = await journal_state(r, CONFIG)
    assert (await lb.rank("p1", "alltime")).score == 7 and (await lb.rank("new", "alltime", "region:eu")).score == 310

    await r.flushall()
    restored = await rebuild(r, store, CONFIG, batch=5, progress_to=io.StringIO(), workers=2)
    assert restored.refused == {} and restored.defined_corrections == 2
    assert await journal_state(r, CONFIG) == before
