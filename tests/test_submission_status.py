"""How a game server learns what became of a slip the queue acknowledged: ``Leaderboard.status``
(lb_status), the server-role socket's ``status`` request and ``python -m scorer status``. The case
that made it needed: an ``incr`` that overflows the board is acknowledged by the queue (it checks
the points alone), then refused by the scorer (the total does not fit)."""

from __future__ import annotations

import asyncio
import sys

import pytest
import redis.asyncio as aioredis

from leaderboard import GameConfig, Leaderboard, Submission, now_ms
from leaderboard.errors import BadRequest
from leaderboard.queue import Queue
from scorer import Consumer, ScorerSettings, Stats

from .gw_helpers import T, client, greet, request, running, token


def consumer(r: aioredis.Redis, redis_url: str, config: GameConfig, stats: Stats) -> Consumer:
    settings = ScorerSettings(redis_url=redis_url, game=config, name="c1", block_ms=20, metrics_port=0)
    return Consumer(r, settings, stats)


async def overflow(r: aioredis.Redis, config: GameConfig, sid: str) -> None:
    """Two incr slips the queue acknowledges whose sum the board cannot hold: ``sid`` is refused."""
    top, now = config.rules().max_points, now_ms()
    await Queue(r, config).submit_many(
        [Submission(f"{sid}-a", "ben", top, now, op="incr"), Submission(sid, "ben", top, now + 1, op="incr")]
    )


async def test_a_slip_is_pending_then_applied_or_refused_with_its_code(
    r: aioredis.Redis, redis_url: str, config: GameConfig
) -> None:
    lb, queue = Leaderboard(r, config), Queue(r, config)
    top = config.rules().max_points
    now = now_ms()
    await queue.submit_many(
        [
            Submission("ok-1", "mia", 10, now),
            Submission("big-1", "ben", top, now, op="incr"),
            Submission("big-2", "ben", top, now + 1, op="incr"),  # acknowledged: 2 x top does not fit
        ]
    )
    assert [(await lb.status(i)).status for i in ("ok-1", "big-2", "never")] == ["pending", "pending", "unknown"]
    stats = Stats()
    await asyncio.wait_for(consumer(r, redis_url, config, stats).run(burst=True), 5)
    assert (stats.applied, stats.dead_letters) == (2, 1)
    assert (await lb.status("ok-1")).status == "applied"
    refused = await lb.status("big-2")
    assert (refused.status, refused.code) == ("refused", "points_out_of_range")
    assert refused.message is not None and "points must stay below" in refused.message
    assert await r.scard(config.keys.queued) == 0  # the queued set holds only what waits
    # the same id sent again (the server fixed the slip): pending again, then applied
    await queue.submit(Submission("big-2", "ben", 1, now + 2, op="set"))
    assert (await lb.status("big-2")).status == "pending"
    await asyncio.wait_for(consumer(r, redis_url, config, Stats()).run(burst=True), 5)
    assert (await lb.status("big-2")).status == "applied"


async def test_a_refusal_is_found_until_ids_are_forgotten(
    r: aioredis.Redis, redis_url: str, config: GameConfig
) -> None:
    lb = Leaderboard(r, config)
    await overflow(r, config, "late")
    await asyncio.wait_for(consumer(r, redis_url, config, Stats()).run(burst=True), 5)
    found = await lb.status("late")
    assert (found.status, found.code) == ("refused", "points_out_of_range")
    [key] = [k async for k in r.scan_iter(match=config.keys.refused(0)[:-1] + "*")]
    # kept as long as ids are remembered: about LB_IDEMPOTENCY_S past the hour of the refusal
    ttl = await r.ttl(key)
    assert config.idempotency_s <= ttl <= config.idempotency_s + 3600
    assert (await lb.status("late", now=now_ms() + config.idempotency_s * 1000 + 7_200_000)).status == "unknown"
    with pytest.raises(BadRequest):
        await lb.status("")


async def test_a_refusal_whose_message_holds_any_bytes_is_kept_and_read(
    r: aioredis.Redis, redis_url: str, config: GameConfig
) -> None:
    # a writer bypassing the queue: points that are not UTF-8, echoed in the library's message
    await r.xadd(config.keys.submissions, {"id": "raw", "player": "mia", "points": b"\xff9", "ts": str(now_ms())})
    stats = Stats()
    await asyncio.wait_for(consumer(r, redis_url, config, stats).run(burst=True), 5)
    assert stats.dead_letters == 1
    found = await Leaderboard(r, config).status("raw")
    assert (found.status, found.code) == ("refused", "invalid_points")
    assert found.message is not None and found.message.startswith("points must be a non-negative integer, got")


async def test_a_server_connection_asks_for_a_slips_status(
    redis_url: str, r: aioredis.Redis, config: GameConfig
) -> None:
    async with running(redis_url) as gw, client(gw, f"?token={token('backend-1', 'server')}") as ws:
        await greet(ws)
        reply = await request(ws, {"type": "submit", "submission": {"id": "s-1", "player": "mia", "points": 5}})
        assert reply["type"] == "submitted"
        assert await request(ws, {"type": "status", "submission": "s-1", "id": 1}) == {
            "type": "status",
            "submission": "s-1",
            "status": "pending",
            "id": 1,
        }
        await asyncio.wait_for(consumer(r, redis_url, config, Stats()).run(burst=True), 5 * T)
        assert (await request(ws, {"type": "status", "submission": "s-1"}))["status"] == "applied"
        bad = await request(ws, {"type": "status", "submission": ""})
        assert (bad["type"], bad["code"]) == ("error", "bad_message")
    async with running(redis_url) as gw, client(gw, f"?token={token('mia', 'player')}") as ws:
        await greet(ws)
        refused = await request(ws, {"type": "status", "submission": "s-1"})
        assert (refused["type"], refused["code"]) == ("error", "forbidden")


async def test_the_command_line_answers_with_a_line_and_an_exit_status(
    r: aioredis.Redis, redis_url: str, config: GameConfig
) -> None:
    await overflow(r, config, "c-1")
    await asyncio.wait_for(consumer(r, redis_url, config, Stats()).run(burst=True), 5)

    async def status(sid: str) -> tuple[int, str]:
        env = {"LB_REDIS_URL": redis_url, "LB_GAME": config.game, "PATH": "/usr/bin:/bin"}
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "scorer", "status", "--id", sid, env=env, stdout=asyncio.subprocess.PIPE
        )
        out, _ = await asyncio.wait_for(proc.communicate(), 10)
        return int(proc.returncode or 0), out.decode().strip()

    rc, line = await status("c-1")
    assert (rc, line.split(": ")[:3]) == (6, ["c-1", "refused", "points_out_of_range"])
    assert await status("c-1-a") == (0, "c-1-a: applied")
    assert await status("nobody-sent-this") == (7, "nobody-sent-this: unknown")


async def status_calls(r: aioredis.Redis) -> int:
    stats = await r.info("commandstats")
    return int(stats.get("cmdstat_fcall_ro", {}).get("calls", 0))


async def test_the_command_line_waits_while_a_submission_is_pending(
    r: aioredis.Redis, redis_url: str, config: GameConfig
) -> None:
    """``--wait``: a script that has just submitted is answered once the scorer decided, not with
    the ``pending`` of the moment; a wait out of bounds is a usage error."""
    await Queue(r, config).submit(Submission("w-1", "wes", 10, now_ms()))
    env = {"LB_REDIS_URL": redis_url, "LB_GAME": config.game, "PATH": "/usr/bin:/bin"}
    asked = await status_calls(r)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "scorer", "status", "--id", "w-1", "--wait", "20", env=env, stdout=asyncio.subprocess.PIPE
    )
    async with asyncio.timeout(10):  # the command has asked (and heard "pending") before the scorer runs
        while await status_calls(r) == asked:  # noqa: ASYNC110 (Redis's own count is the only signal)
            await asyncio.sleep(0.02)
    await asyncio.wait_for(consumer(r, redis_url, config, Stats()).run(burst=True), 5)
    out, _ = await asyncio.wait_for(proc.communicate(), 20)
    assert (proc.returncode, out.decode().strip()) == (0, "w-1: applied")
    bad = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "scorer", "status", "--id", "w-1", "--wait", "-1", env=env, stderr=asyncio.subprocess.PIPE
    )
    _, err = await asyncio.wait_for(bad.communicate(), 10)
    assert bad.returncode == 2 and b"--wait is 0..600 s" in err
