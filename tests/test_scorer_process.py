"""Whole scorer replicas: real ``python -m scorer`` processes killed and stopped by signals, the
CLI, and an in-process replica's end-to-end path and metrics endpoint."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import orjson
import redis.asyncio as aioredis

from fleet.redis_server import free_port
from leaderboard import WINDOWS, GameConfig, Leaderboard, Submission, boards, now_ms
from leaderboard.submission import entry_fields
from scorer import Scorer, ScorerSettings
from scorer.consumer import GROUP

from .conftest import MS, activity_events, until


def env_for(url: str, name: str, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "LB_REDIS_URL": url,
        "LB_GAME": "test",
        "LB_SCORER_NAME": name,
        "LB_SCORER_METRICS_PORT": "0",
        "LB_SCORER_STATS_S": "0",
        "LB_SCORER_CLAIM_IDLE_MS": "400",
        "LB_TICK_MS": "100",
        "LB_LEASE_TTL_MS": "500",
        "LB_ACTIVITY_MAXLEN": "1000000",
        "PYTHONUNBUFFERED": "1",
        **extra,
    }


class Replica:
    """A ``python -m scorer`` child; its log is read as it comes so the pipe never fills."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self._started = asyncio.Event()
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self.proc.stderr is not None
        async for raw in self.proc.stderr:
            line = raw.decode(errors="replace").rstrip()
            self.lines.append(line)
            if " started" in line:
                self._started.set()

    async def started(self) -> None:
        await asyncio.wait_for(self._started.wait(), 10_000 * MS)

    async def exited(self, seconds: float) -> int:
        rc = await asyncio.wait_for(self.proc.wait(), seconds)
        await self._reader
        return rc


@asynccontextmanager
async def replica(url: str, name: str, *args: str, **extra: str) -> AsyncIterator[Replica]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "scorer", *args, env=env_for(url, name, **extra), stderr=asyncio.subprocess.PIPE
    )
    rep = Replica(proc)
    try:
        yield rep
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        rep._reader.cancel()


async def flood(r: aioredis.Redis, config: GameConfig, unique: int, replays: int) -> list[dict[str, str]]:
    """Pre-fill the queue with ``unique`` slips plus ``replays`` re-sent ones (same id and fields)."""
    rnd = random.Random(7)
    ts = now_ms() - 1000
    slips = [
        {
            "id": f"s{i}",
            "player": f"p{rnd.randrange(300)}",
            "points": str(rnd.randrange(100_000)),
            "ts": str(ts),
        }
        for i in range(unique)
    ]
    entries = slips + [rnd.choice(slips) for _ in range(replays)]
    rnd.shuffle(entries)
    async with r.pipeline(transaction=False) as pipe:
        for e in entries:
            pipe.xadd(config.keys.submissions, e)  # type: ignore[arg-type]
        await pipe.execute()
    return slips


async def test_sigkill_mid_flood_loses_nothing_and_applies_nothing_twice(
    r: aioredis.Redis, redis_url: str, config: GameConfig
) -> None:
    stream = config.keys.submissions
    slips = await flood(r, config, unique=6000, replays=1000)
    total = 7000
    left: Any = []
    for attempt in range(3):  # the kill must land while a batch is read and unacknowledged
        name = f"victim{attempt}"
        async with replica(redis_url, name, LB_SCORER_BATCH="100", LB_SCORER_CONCURRENCY="4") as victim:
            await victim.started()
            applied_before = total - int(await r.xlen(stream))

            async def mid_batch(before: int = applied_before) -> bool:  # some acked, some read only
                done = total - int(await r.xlen(stream)) - before
                return done >= 500 and bool((await r.xpending(stream, GROUP))["pending"])

            await until(mid_batch, 20_000 * MS)
            victim.proc.send_signal(signal.SIGKILL)
            assert await victim.exited(5) == -signal.SIGKILL
        left = await r.xpending_range(stream, GROUP, "-", "+", 10_000, consumername=name)
        if left:
            break
    assert left, "no victim died holding a batch; the scenario did not happen"
    async with replica(redis_url, "survivor", "--burst", LB_SCORER_BATCH="200") as survivor:
        assert await survivor.exited(60) == 0
    assert await r.xlen(stream) == 0
    assert (await r.xpending(stream, GROUP))["pending"] == 0
    # exactly one activity event per unique submission id: nothing lost, nothing applied twice
    activity = await activity_events(r, config.keys.activity)
    assert sorted(e["id"] for e in activity) == sorted(s["id"] for s in slips)
    # the boards equal personal bests computed independently from the submitted data
    best: dict[str, int] = {}
    for s in slips:
        best[s["player"]] = max(best.get(s["player"], -1), int(s["points"]))
    period = WINDOWS["weekly"].period(int(slips[0]["ts"])).label
    board: Any = await r.zrange(config.keys.board("weekly", period, "global"), 0, -1, withscores=True)
    assert {p: WINDOWS["weekly"].unpack(score) for p, score in board} == best


async def test_sigterm_finishes_the_batch_in_flight_and_exits_0(
    r: aioredis.Redis, redis_url: str, config: GameConfig
) -> None:
    stream = config.keys.submissions
    await flood(r, config, unique=4000, replays=0)
    async with replica(redis_url, "graceful", LB_SCORER_BATCH="100") as rep:
        await rep.started()

        async def some_applied() -> bool:
            return int(await r.xlen(stream)) < 3500

        await until(some_applied, 20_000 * MS)
        rep.proc.send_signal(signal.SIGTERM)
        assert await rep.exited(10) == 0
    assert any("stopped" in line for line in rep.lines)
    assert (await r.xpending(stream, GROUP))["pending"] == 0  # what it read, it acknowledged
    left = await r.xlen(stream)
    assert left > 0  # it stopped reading rather than draining the queue
    assert len(await activity_events(r, config.keys.activity)) == 4000 - left  # and applied exactly what it took


async def cli(url: str, *args: str, **extra: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "scorer",
        "submit",
        *args,
        env=env_for(url, "cli", **extra),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 10)
    return int(proc.returncode or 0), out.decode(), err.decode()


async def test_cli_submit(r: aioredis.Redis, redis_url: str, config: GameConfig) -> None:
    rc, out, _ = await cli(redis_url, "--player", "mia", "--points", "120", "--id", "m-1", "--region", "eu")
    assert rc == 0
    rows: Any = await r.xrange(config.keys.submissions)
    [(sid, fields)] = rows
    assert entry_fields(fields) | {"ts": "?"} == {
        "id": "m-1",
        "player": "mia",
        "points": "120",
        "ts": "?",
        "region": "eu",
    }
    assert out.strip() == f"queued m-1: player mia, 120 points (stream entry {sid})"  # says what it queued
    rc, _, err = await cli(redis_url, "--player", "mia", "--points", "-3")
    assert rc == 2 and "invalid_points" in err
    rc, _, err = await cli(redis_url, "--player", "mia", "--points", "3", LB_BACKLOG_MAX="1")
    assert rc == 3 and "backlog full" in err
    assert await r.xlen(config.keys.submissions) == 1


async def test_cli_submit_names_the_redis_it_could_not_reach(
    redis_url: str, r: aioredis.Redis, config: GameConfig
) -> None:
    dead = f"redis://127.0.0.1:{free_port()}/0"
    rc, out, err = await cli(dead, "--player", "mia", "--points", "5")
    # one line, naming the URL tried and how to point elsewhere; no traceback
    assert rc == 1 and out == "" and len(err.strip().splitlines()) == 1, err
    assert dead in err and "--redis-url" in err and "LB_REDIS_URL" in err and "Traceback" not in err
    # --redis-url wins over the environment, before or after the subcommand
    for args in (("submit", "--redis-url", redis_url), ("--redis-url", redis_url, "submit")):
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "scorer",
            *args,
            "--player",
            "mia",
            "--points",
            "5",
            env=env_for(dead, "cli"),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        _, err_b = await asyncio.wait_for(proc.communicate(), 10)
        assert proc.returncode == 0, err_b
    assert await r.xlen(config.keys.submissions) == 2


async def operator(url: str, *args: str, **env: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "scorer",
        *args,
        env=env_for(url, "cli", **env),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 10)
    return int(proc.returncode or 0), out.decode().strip(), err.decode().strip()


async def test_cli_ban_correct_unban_and_profile(r: aioredis.Redis, redis_url: str, config: GameConfig) -> None:
    lb = Leaderboard(r, config)
    ts = now_ms()
    await lb.submit_batch(
        [
            {"id": "1", "player": "mia", "points": "50", "ts": str(ts), "region": "eu"},
            {"id": "2", "player": "cheat", "points": "900", "ts": str(ts)},
        ]
    )
    rc, out, err = await operator(redis_url, "ban", "--player", "cheat", "--reason", "aimbot", "--actor", "ops")
    assert rc == 0 and out == "banned cheat: removed from 3 boards (3 top 10s changed)", err
    rc, out, err = await operator(
        redis_url, "correct", "--player", "mia", "--points", "40", "--reason", "dup", "--window", "weekly"
    )
    assert rc == 0 and out.startswith("corrected mia: weekly ") and "region:eu: 50 -> 40 (#1)" in out, err
    rc, out, err = await operator(redis_url, "correct", "--player", "cheat", "--points", "1", "--reason", "x")
    assert rc == 2 and out == "" and err.startswith("refused: banned: "), err
    rc, out, err = await operator(redis_url, "correct", "--player", "mia", "--points", "1", "--reason", "")
    assert rc == 2 and err.startswith("refused: invalid_reason: "), err
    rc, out, _ = await operator(redis_url, "unban", "--player", "cheat")
    assert rc == 0 and out == "unbanned cheat"
    rc, out, _ = await operator(redis_url, "profile", "--player", "mia", "--name", "Mia", "--country", "SE")
    assert rc == 0 and out == 'profile of mia: {"name":"Mia","country":"SE"}'
    rc, _, err = await operator(redis_url, "profile", "--player", "mia", "--avatar", "http://x/a.png")
    assert rc == 2 and "invalid_avatar" in err
    rows: Any = await r.xrange(config.keys.activity)
    actions = [(f["action"], f["by"]) for _, f in rows if "action" in f]
    assert actions[0] == ("ban", "ops") and [a for a, _ in actions] == ["ban", "correct", "unban"]


async def test_cli_rank_index_rebuilds_every_boards_companions(
    r: aioredis.Redis, redis_url: str, config: GameConfig
) -> None:
    lb = Leaderboard(r, config)
    ts = now_ms()
    await lb.submit_batch(
        [
            {
                "id": str(i),
                "player": f"p{i}",
                "points": str(10 * (i % 7)),
                "ts": str(ts),
                **({"region": "eu"} if i % 2 else {}),
            }
            for i in range(40)
        ]
    )
    hist = sorted(await r.keys(f"{config.keys.prefix}:hist:*"))
    before = {k: await r.hgetall(k) for k in hist}
    assert len(hist) == 6  # three windows, global and region:eu
    await r.delete(*hist)  # boards written before they had companions (an upgrade)
    # and the weekly window switched to dense: its boards have no distinct-points set yet
    rc, out, err = await operator(redis_url, "rank-index", LB_WINDOW_RANK_MODES="weekly=dense")
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[-1] == "rebuilt the rank companions of 6 boards, 180 members", out
    assert sum(" region:eu: 20 members" in line for line in lines) == 3
    assert sum("(dense)" in line for line in lines) == 2 and all("weekly" in line for line in lines if "dense" in line)
    assert {k: await r.hgetall(k) for k in hist} == before
    points = await r.keys(f"{config.keys.prefix}:points:*")
    assert len(points) == 2 and all(":weekly:" in k for k in points)
    assert sorted(await r.zrange(points[0], 0, -1, withscores=True))[:1] == [("0", 0.0)]
    # --window: only those boards, a defined board's among them (a lex one of two keys, whose
    # histogram buckets its first key); an unknown window changes nothing and says why
    tower = {"id": "tower", "keys": [{"name": "floor"}, {"name": "time", "direction": "asc"}], "windows": ["daily"]}
    await lb.create_board(boards.parse(tower))
    await lb.submit_batch(
        [Submission(f"t{i}", f"p{i}", 0, ts, board="tower", values=(i, 100)).fields() for i in range(5)]
    )
    [tower_hist] = await r.keys(f"{config.keys.prefix}:hist:daily:*:board:tower")
    kept = await r.hgetall(tower_hist)
    await r.delete(*hist, tower_hist)
    rc, out, err = await operator(redis_url, "rank-index", "--window", "daily")
    assert rc == 0 and out.splitlines()[-1] == "rebuilt the rank companions of 3 boards, 65 members", err
    assert sum("board:tower: 5 members (ordinal)" in line for line in out.splitlines()) == 1
    daily = sorted([tower_hist, *(k for k in hist if ":daily:" in k)])
    assert sorted(await r.keys(f"{config.keys.prefix}:hist:*")) == daily
    assert len(kept) == 5 and await r.hgetall(tower_hist) == kept
    rc, out, err = await operator(redis_url, "rank-index", "--window", "monthly")
    assert rc == 2 and out == "" and err.startswith("refused: "), err
    assert len(await r.keys(f"{config.keys.prefix}:hist:*")) == 3


async def test_a_replica_end_to_end_with_prometheus_metrics(
    r: aioredis.Redis, redis_url: str, config: GameConfig
) -> None:
    settings = ScorerSettings(
        redis_url=redis_url,
        game=config,
        name="e2e",
        block_ms=20,
        tick_ms=50,
        lease_ttl_ms=200,
        metrics_port=free_port(),
        stats_interval_s=0,
    )
    ts = now_ms()
    async with r.pipeline(transaction=False) as pipe:
        for i in range(10):
            pipe.xadd(config.keys.submissions, {"id": f"s{i}", "player": f"p{i}", "points": str(i), "ts": str(ts)})
        pipe.xadd(config.keys.submissions, {"id": "bad", "player": "x", "points": "-1", "ts": str(ts)})
        await pipe.execute()
    pubsub = r.pubsub()
    await pubsub.ssubscribe(config.keys.snapshot_channel("alltime", "global"))
    async with Scorer(settings) as scorer:

        async def full_snapshot() -> Any:
            while True:
                msg = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
                if msg and len(orjson.loads(msg["data"])["entries"]) == 10:
                    return orjson.loads(msg["data"])

        async def get(path: str) -> str:
            reader, writer = await asyncio.open_connection("127.0.0.1", settings.metrics_port)
            writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            answer = (await asyncio.wait_for(reader.read(), 5000 * MS)).decode()
            writer.close()
            return answer

        snap = await asyncio.wait_for(full_snapshot(), 5000 * MS)
        assert snap["entries"][0] == {"rank": 1, "player": "p9", "score": 9}
        body = await get("/metrics")
        assert body.startswith("HTTP/1.1 200 OK")
        for line in (
            "lb_scorer_applied_total 10.0",
            "lb_scorer_dead_letters_total 1.0",
            "lb_scorer_publisher 1.0",
        ):
            assert line in body
        assert "lb_scorer_backlog" in body and "lb_scorer_oldest_age_seconds" in body
        assert "lb_scorer_published_total" in body and "lb_scorer_badges_awarded_total" in body
        assert "lb_scorer_redis_errors_total 0.0" in body
        assert scorer.stats.applied == 10
        # the orchestrator's probe: ready while working, not once asked to stop
        assert (await get("/readyz")).startswith("HTTP/1.1 200 OK")
        scorer.stop()
        assert (await get("/readyz")).startswith("HTTP/1.1 503 ")
    await pubsub.aclose()
    assert not await r.exists(config.keys.publish_lease)  # released on close


async def test_a_worker_dying_of_a_bug_exits_the_replica_non_zero(
    r: aioredis.Redis, redis_url: str, config: GameConfig
) -> None:
    """A worker task that dies of something not retried (here the publisher, on a versions field
    it cannot parse) must not leave a replica that looks alive and does nothing: the process exits
    non-zero, with the traceback, so its supervisor (fleet, systemd) starts it again."""
    async with replica(redis_url, "doomed") as rep:
        await rep.started()
        await r.hset(config.keys.versions, "not-a-board-field", "1")
        assert await rep.exited(10_000 * MS) != 0
    assert any("not-a-board-field" in line or "ValueError" in line for line in rep.lines), rep.lines[-20:]
