"""The durable score log end to end: the fold against lb_submit, a scorer killed between apply,
record and acknowledge, and a rebuild compared member by member with the state it replaces.
Each runs on both backends (SQLite and PostgreSQL)."""

from __future__ import annotations

import asyncio
import io
import os
import random
import sys
from pathlib import Path
from typing import Any, cast

import pytest
import redis.asyncio as aioredis

from leaderboard import GameConfig, Leaderboard, activity, now_ms
from scorer import Consumer, ScorerSettings
from scorer.consumer import GROUP
from scorer.durable import Folder, Record, Store, StoreError, open_store
from scorer.durable.recorder import Recorder
from scorer.rebuild import RebuildRefused, rebuild
from scorer.rebuild.parts import FoldTask

from .conftest import MS, NOW
from .durable_helpers import redis_state

pytest_plugins = ("tests.durable_fixtures",)  # fixtures: store_url, store (one per backend)

HOUR = 3_600_000
LATER = NOW + 600_000  # the consumer's clock: every submission lies in the recent past
# weekly in dense mode: its boards keep a distinct-points set beside the histogram, which the
# rebuild writes from the folded members (every rank mode's companions compared key by key)
CONFIG = GameConfig(game="test", windows=("daily", "weekly", "alltime"), window_rank_modes={"weekly": "dense"})


def history(n: int, *, seed: int = 1, hours: int = 38) -> list[dict[str, str]]:
    """Slips over the ``hours`` before NOW, roughly in time order (some arrive up to two hours
    late): mixed operators, scopes and names, few players (so writes meet), with about one in
    four re-sent (same id, same fields)."""
    rnd = random.Random(seed)
    slips: list[dict[str, str]] = []
    for i in range(n):
        if slips and rnd.random() < 0.25:
            slips.append(rnd.choice(slips))
            continue
        fields = {
            "id": f"s{i}",
            "player": f"p{rnd.randrange(25)}",
            "points": str(rnd.randrange(1, 500)),
            "ts": str(NOW - hours * HOUR + i * hours * HOUR // n - rnd.randrange(2 * HOUR)),
        }
        if op := rnd.choice(("", "best", "incr", "set")):
            fields["op"] = op
        if rnd.random() < 0.3:  # one region only early on: its scope is known from the folded part alone
            fields["region"] = rnd.choice(("apac",) if i < n // 4 else ("eu", "us"))
        if rnd.random() < 0.2:
            fields["mode"] = "duo"
        if rnd.random() < 0.2:
            fields["name"] = f"Name {rnd.randrange(5)}/é"
        slips.append(fields)
    return slips


def record_of(fields: dict[str, str]) -> Record:
    return Record(
        fields["id"],
        fields["player"],
        int(fields["points"]),
        int(fields["ts"]),
        fields.get("op", ""),
        fields.get("name", ""),
        fields.get("region", ""),
        fields.get("mode", ""),
    )


async def board_scores(r: aioredis.Redis) -> dict[tuple[str, str, str], dict[str, int]]:
    prefix = CONFIG.keys.prefix + ":board:"
    out: dict[tuple[str, str, str], dict[str, int]] = {}
    key: str
    async for key in r.scan_iter(match=prefix + "*"):
        window, period, scope = key[len(prefix) :].split(":", 2)
        members: Any = await r.zrange(key, 0, -1, withscores=True)
        out[window, period, scope] = {m: int(s) for m, s in members}
    return out


async def test_the_fold_leaves_every_board_as_lb_submit_does(r: aioredis.Redis) -> None:
    lb = Leaderboard(r, CONFIG)
    slips = history(600, seed=3)
    folder = Folder(CONFIG)
    rnd = random.Random(5)
    i = 0
    while i < len(slips):  # batches of random sizes, as the consumer sends them
        batch = slips[i : i + rnd.randrange(1, 60)]
        i += len(batch)
        results = await lb.submit_batch(batch, now=LATER, rows=False)
        folder.apply([record_of(f) for f, res in zip(batch, results, strict=True) if res.status == "ok"])
    boards = await board_scores(r)
    assert boards == folder.boards
    assert folder.applied == sum(1 for _ in {s["id"] for s in slips})


# ---------------------------------------------------------------- crash between the steps


def scorer_env(redis_url: str, store_url: str, name: str, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "LB_REDIS_URL": redis_url,
        "LB_GAME": "test",
        "LB_SCORER_NAME": name,
        "LB_DURABLE_URL": store_url,
        "LB_SCORER_METRICS_PORT": "0",
        "LB_SCORER_STATS_S": "0",
        "LB_SCORER_CLAIM_IDLE_MS": "200",
        "LB_SCORER_PUBLISH": "0",
        "LB_SCORER_BADGES": "0",
        "LB_SCORER_BATCH": "100",
        "PYTHONUNBUFFERED": "1",
        **extra,
    }


async def run_scorer(env: dict[str, str]) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "scorer", "--burst", env=env, stderr=asyncio.subprocess.PIPE
    )
    try:
        _, err = await asyncio.wait_for(proc.communicate(), 60_000 * MS)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode is not None
    return proc.returncode, err.decode(errors="replace")


@pytest.mark.parametrize("loops", [1, 8], ids=["one-loop", "eight-loops"])
@pytest.mark.parametrize("step", ["applied", "recorded"])
async def test_a_scorer_killed_between_apply_record_and_ack_loses_and_doubles_nothing(
    r: aioredis.Redis, redis_url: str, store_url: str, step: str, loops: int
) -> None:
    # one loop: the first batch dies at that step; eight: the others are wherever they are then
    # (applied, recorded in a group commit, acknowledged), all five batches in flight at once
    # incr everywhere: a submission applied twice would show in the totals
    ts = now_ms() - 1000
    rnd = random.Random(11)
    slips = [
        {
            "id": f"s{i}",
            "player": f"p{rnd.randrange(40)}",
            "points": str(rnd.randrange(1, 1000)),
            "ts": str(ts),
            "op": "incr",
        }
        for i in range(450)
    ]
    entries = slips + slips[:50]  # and some re-sent
    async with r.pipeline(transaction=False) as pipe:
        for e in entries:
            pipe.xadd(CONFIG.keys.submissions, e)  # type: ignore[arg-type]
        await pipe.execute()

    victim = scorer_env(redis_url, store_url, "victim", LB_SCORER_CRASH_AT=step, LB_SCORER_CONCURRENCY=str(loops))
    rc, err = await run_scorer(victim)
    assert rc == 70, err
    pending = await r.xpending(CONFIG.keys.submissions, GROUP)
    if loops == 1:
        assert pending["pending"] == 100  # the first batch: applied (and recorded), not acknowledged
    else:
        assert pending["pending"] >= 100  # that batch, and those the others had not acknowledged
    rc, err = await run_scorer(scorer_env(redis_url, store_url, "survivor"))
    assert rc == 0, err

    assert await r.xlen(CONFIG.keys.submissions) == 0
    assert (await r.xpending(CONFIG.keys.submissions, GROUP))["pending"] == 0
    totals: dict[str, int] = {}
    for s in slips:
        totals[s["player"]] = totals.get(s["player"], 0) + int(s["points"])
    lb = Leaderboard(r, CONFIG)
    top = await lb.top("alltime", n=100, at=ts)
    assert {e.player: e.score for e in top.entries} == totals
    log = open_store(store_url)
    await log.open()
    try:
        recorded = [rec async for chunk in log.scan("test") for rec in chunk]
    finally:
        await log.close()
    assert sorted(rec.id for rec in recorded) == sorted(x["id"] for x in slips)  # each once
    # after a crash before the record, the redelivered batch is recorded from its "duplicate"
    # (with eight loops, another batch may have been between apply and record at the crash)
    assert any(rec.replayed for rec in recorded) == (step == "applied") or (loops > 1 and step == "recorded")
    assert {(rec.id, rec.points) for rec in recorded} == {(x["id"], int(x["points"])) for x in slips}


# ---------------------------------------------------------------- rebuild


async def fill(r: aioredis.Redis, redis_url: str, store: Store, slips: list[dict[str, str]]) -> int:
    """Through the real consumer with the log on (its default loops: batches are applied, and
    recorded in group commits, concurrently), a hundred at a time, its clock just after the
    newest of each hundred; the last clock."""
    settings = ScorerSettings(
        redis_url=redis_url,
        game=CONFIG,
        name="c1",
        batch=17,
        block_ms=20,
        metrics_port=0,
        durable_url="sqlite:///unused",
    )
    assert settings.concurrency > 1
    recorder = Recorder(store, CONFIG, retention_days=30, compact_every_s=0)
    clock = 0
    for i in range(0, len(slips), 100):
        chunk = slips[i : i + 100]
        async with r.pipeline(transaction=False) as pipe:
            for e in chunk:
                pipe.xadd(CONFIG.keys.submissions, e)  # type: ignore[arg-type]
            await pipe.execute()
        clock = max(clock, max(int(e["ts"]) for e in chunk) + 60_000)
        consumer = Consumer(r, settings, now=lambda c=clock: c, recorder=recorder)  # type: ignore[misc]
        await asyncio.wait_for(consumer.run(burst=True), 30_000 * MS)
    return clock


async def newest_activity(r: aioredis.Redis) -> list[dict[str, str]]:
    """The newest 100 events of the feed (the rebuild's batches may group them otherwise)."""
    return activity.newest(
        cast(list[tuple[str, dict[str, str]]], await r.xrevrange(CONFIG.keys.activity, count=100)), 100
    )


def alive_seen(state: dict[str, Any], at: int) -> dict[str, Any]:
    """The state less the seen buckets that would have expired by ``at``."""
    out = {}
    for key, value in state.items():
        if ":seen:" in key:
            hour = int(key.rsplit(":", 1)[1])
            if ((hour + 1) * HOUR + CONFIG.idempotency_s * 1000) // 1000 <= at // 1000:
                continue
        out[key] = value
    return out


@pytest.mark.parametrize(
    ("later_h", "replay", "workers"),
    [(0, None, 2), (0, 150, 2), (30, None, 2), (30, None, 1), (30, None, 4)],
    ids=["at-once", "at-once-150-replayed", "30-hours-later", "30-hours-later-in-process", "30-hours-later-4-parts"],
)
async def test_rebuild_restores_every_board_member_and_score_exactly(
    r: aioredis.Redis, redis_url: str, store: Store, later_h: int, replay: int | None, workers: int
) -> None:
    # 100 hours of history: more than the 48-hour idempotency horizon, so every path is taken:
    # board rows compacted from the log, raw rows folded, the rest through lb_submit
    slips = history(1500, seed=9, hours=100)
    clock = await fill(r, redis_url, store, slips[:900])
    # fold raw rows older than their retention (here: the idempotency horizon) into board rows
    retention = CONFIG.idempotency_s * 1000
    done = await store.compact("test", before_ts=clock - retention, now_s=clock // 1000, folder=Folder(CONFIG))
    assert done.folded > 0
    clock = await fill(r, redis_url, store, slips[900:])
    before = await redis_state(r, CONFIG)
    assert sum(":board:" in k for k in before) > 20
    feed = await newest_activity(r)

    await r.flushall()
    out = io.StringIO()
    at = clock + later_h * HOUR
    restored = await rebuild(r, store, CONFIG, batch=100, replay=replay, progress_to=out, now=at, workers=workers)
    after = await redis_state(r, CONFIG)
    assert after == alive_seen(before, at)
    assert restored.refused == {}
    assert restored.board_rows > 0 and restored.folded > 0 and restored.replayed > 0
    if replay:
        assert restored.replayed == replay
    # the newest events of the activity feed come back as they were (only their stream ids and
    # how they are grouped into entries differ)
    assert await newest_activity(r) == feed
    assert "rebuild: 100%" in out.getvalue()  # not a terminal: plain progress lines

    # the rebuilt Redis remembers the ids: the same slips again change nothing
    lb = Leaderboard(r, CONFIG)
    results = await lb.submit_batch(slips[-300:], now=at, rows=False)
    assert {res.status for res in results} <= {"duplicate", "error"}
    assert await redis_state(r, CONFIG) == after


async def test_rebuild_refuses_a_redis_holding_the_game_unless_forced(
    r: aioredis.Redis, redis_url: str, store: Store
) -> None:
    await fill(r, redis_url, store, history(100, seed=2))
    before = await redis_state(r, CONFIG)
    with pytest.raises(RebuildRefused, match="--force"):
        await rebuild(r, store, CONFIG, now=LATER, progress_to=io.StringIO())
    restored = await rebuild(r, store, CONFIG, now=LATER, force=True, progress_to=io.StringIO())
    assert restored.applied == 0 and restored.duplicates == restored.replayed
    assert await redis_state(r, CONFIG) == before


async def test_a_write_redis_refuses_fails_the_rebuild_and_leaves_nothing_running(
    r: aioredis.Redis, redis_url: str, store: Store
) -> None:
    # the folded state goes out with one batch in flight while the next is built: a batch Redis
    # refuses (a board's key holding a string) fails the rebuild, and no write is left behind it
    await fill(r, redis_url, store, history(300, seed=4))
    boards = sorted(k for k in await redis_state(r, CONFIG) if ":board:" in k)
    await r.flushall()
    await r.set(boards[0], "not a board")
    with pytest.raises(aioredis.ResponseError, match="WRONGTYPE"):
        await rebuild(r, store, CONFIG, now=LATER, force=True, progress_to=io.StringIO(), workers=1)
    assert [t for t in asyncio.all_tasks() if t is not asyncio.current_task()] == []


async def test_rebuild_command_prints_what_it_restored(r: aioredis.Redis, redis_url: str, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/scores.db"
    log = open_store(url)
    await log.open()
    ts = now_ms() - 1000
    await log.record("test", [Record(f"s{i}", f"p{i % 7}", i, ts, name="Ann" if i == 3 else "") for i in range(50)])
    await log.record("test", [Record("t1", "p1", 10**6, ts, tournament="cup", applied_us=1)])
    await log.close()
    env = {**os.environ, "LB_REDIS_URL": redis_url, "LB_GAME": "test", "LB_DURABLE_URL": url}

    async def command(*args: str) -> tuple[int, str, str]:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "scorer",
            "rebuild",
            *args,
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), 30_000 * MS)
        return proc.returncode or 0, out.decode(), err.decode()

    rc, out, err = await command()
    assert rc == 0, err
    assert "restored 50 submissions" in out and "50 applied" in out
    assert "not restored: 1 tournament submissions" in out
    assert "rebuild: 100% 51/51 submissions" in err
    assert (await Leaderboard(r, CONFIG).rank("p6", "alltime", at=ts)).score == 48
    rc, out, err = await command()
    assert rc == 3 and "refused: Redis already holds data of game 'test'" in err
    rc, out, err = await command("--force", "--replay", "0", "--workers", "4")  # folded in four processes
    assert rc == 0 and "folded: 51 submissions" in out and "not restored: 1 tournament submissions" in out, err
    assert (await Leaderboard(r, CONFIG).rank("p6", "alltime", at=ts)).score == 48
    rc, out, err = await command("--workers", "3")
    assert rc == 2 and "--workers" in err and out == ""
    env["LB_DURABLE_URL"] = ""
    rc, out, err = await command()
    assert rc == 2 and "set LB_DURABLE_URL" in err


async def test_a_failed_rebuild_worker_is_a_store_error(tmp_path: Path) -> None:
    # a worker that cannot open the store (a path under a file) exits non-zero: the rebuild says
    # which part failed, as an error the CLI prints in one line, and leaves no process behind
    (tmp_path / "file").write_text("")
    task = FoldTask(CONFIG, None, now_ms(), 0, 5_000)
    with pytest.raises(StoreError, match="worker for part 1 of 2 failed"):
        await task.fold_apart(f"sqlite:///{tmp_path}/file/scores.db", (1, 2), [], lambda n: None)


async def test_rebuild_workers_report_every_chunk_they_fold(r: aioredis.Redis, redis_url: str, store: Store) -> None:
    # the progress bar moves while the worker processes fold, not once per worker at its end
    await fill(r, redis_url, store, history(300, seed=3, hours=2))
    total = await store.count("test")
    task = FoldTask(CONFIG, await store.position("test", total - 1), now_ms(), 0, 10)
    chunks: list[list[int]] = [[], []]
    parts = await asyncio.gather(*(task.fold_apart(store.url, (i, 2), [], chunks[i].append) for i in range(2)))
    for part, sizes in zip(parts, chunks, strict=True):
        assert len(sizes) > 1 and sum(sizes) == part.folded
    assert sum(part.folded for part in parts) == total
