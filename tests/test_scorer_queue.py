"""The submit API's queue (lb_enqueue) and the lease function (lb_lease), against a real Redis."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from leaderboard import BacklogFull, GameConfig, InvalidSubmission, Leaderboard, Submission, now_ms
from leaderboard.keys import HOUR_MS
from leaderboard.queue import Queue
from leaderboard.results import Refiled


def sub(i: int, points: int = 10) -> Submission:
    return Submission(f"s-{i}", f"p{i}", points, now_ms())


async def test_submit_appends_stream_entries(r: aioredis.Redis, config: GameConfig) -> None:
    queue = Queue(r, config, backlog_max=10)
    first = await queue.submit(Submission("a", "ana", 5, now_ms(), name="Ana", region="eu"))
    subs = [sub(1), sub(2)]
    ids = await queue.submit_many(subs)
    rows: Any = await r.xrange(config.keys.submissions)
    assert [sid for sid, _ in rows] == [first, *ids]
    # the slip in one field (the text lb_submit takes), then the optional fields set
    ts = rows[0][1]["slip"].split("\t")[3]
    assert rows[0][1] == {"slip": f"a\tana\t5\t{ts}\tAna", "region": "eu"}
    assert rows[1][1] == subs[0].fields()
    assert set(await r.smembers(config.keys.queued)) == {"a", "s-1", "s-2"}  # lb_status: pending


async def test_a_retry_with_the_same_body_is_not_appended_again(r: aioredis.Redis, config: GameConfig) -> None:
    """The HTTP API stamps a body without ts with its own clock, so a retry's slip may carry a
    stamp in a later hour than its first filing's: lb_submit dedupes an id within its stamp's
    hour's seen bucket only, and would add the points again. The id's first body fingerprint
    stands for it instead: a retry with the same one is not appended, pending or applied."""
    lb, queue = Leaderboard(r, config), Queue(r, config, backlog_max=10)
    now = now_ms()
    first, retry = (Submission("k-1", "ana", 5, ts, op="incr") for ts in (now - 2 * HOUR_MS, now))
    assert first.ts_ms // HOUR_MS != retry.ts_ms // HOUR_MS  # another seen bucket
    [stream_id] = await queue.submit_many([first], bodies=["fp"])
    assert isinstance(stream_id, str)
    # still pending: the same entry stands, queued once
    assert await queue.submit(retry, body="fp") == Refiled(stream_id)
    assert await r.smembers(config.keys.queued) == {"k-1"}
    # applied as the scorer applies it (lb_submit), then filed again
    entries: Any = await r.xrange(config.keys.submissions)
    await lb.submit_batch([fields for _, fields in entries], now=now_ms(), rows=False)
    assert await queue.submit(retry, body="fp") == Refiled(stream_id)
    # what the scorer would read next: nothing appended for either retry
    later: Any = await r.xrange(config.keys.submissions, min="(" + stream_id)
    if later:
        await lb.submit_batch([fields for _, fields in later], now=now_ms(), rows=False)
    assert (await lb.rank("ana", "alltime")).score == 5
    assert later == []
    assert (await lb.status("k-1")).status == "applied"
    # another body under the id is still refused; without bodies (socket, CLI) every entry is appended
    with pytest.raises(InvalidSubmission) as refused:
        await queue.submit(retry, body="other")
    assert refused.value.code == "idempotency_conflict"
    assert await queue.submit(retry) != stream_id
    assert await r.xlen(config.keys.submissions) == 2


async def test_backlog_full_refuses_the_whole_batch(r: aioredis.Redis, config: GameConfig) -> None:
    queue = Queue(r, config, backlog_max=3)
    await queue.submit_many([sub(1), sub(2)])
    with pytest.raises(BacklogFull, match="backlog"):
        await queue.submit_many([sub(3), sub(4)])
    assert await r.xlen(config.keys.submissions) == 2  # nothing of the refused batch, nothing trimmed
    await queue.submit(sub(3))
    with pytest.raises(BacklogFull):
        await queue.submit(sub(4))


async def test_a_malformed_enqueue_appends_nothing(r: aioredis.Redis, config: GameConfig) -> None:
    """Every entry's shape is checked before the first append: an entry cut short, a pair count
    that is no number, or arguments past the last entry refuse the whole call."""
    keys = (config.keys.submissions, config.keys.queued)
    good = ["1", "slip", f"a\tana\t5\t{now_ms()}\t"]
    for args in (
        [10, 2, *good, "2", "id", "b"],  # the second entry's second pair missing
        [10, 2, *good, "x", "id", "b"],
        [10, 2, *good, "0"],
        [10, 1, *good, "extra"],
    ):
        with pytest.raises(ResponseError, match="bad_request"):
            await r.fcall("lb_enqueue", 2, *keys, *args)
        assert not await r.exists(*keys)
    # an entry by name, one slip with other fields, one slip with no id: queued by what they hold
    await r.fcall(
        "lb_enqueue",
        2,
        *keys,
        10,
        3,
        "2",
        "player",
        "ana",
        "id",
        "n-1",
        *good[:2],
        "\tben\t1\t1\t",
        "2",
        *good[1:],
        "op",
        "incr",
    )
    assert await r.xlen(config.keys.submissions) == 3
    assert await r.smembers(config.keys.queued) == {"n-1", "a"}


async def test_backlog_check_is_atomic_under_concurrent_submitters(r: aioredis.Redis, config: GameConfig) -> None:
    queue = Queue(r, config, backlog_max=50)
    outcomes = await asyncio.gather(*(queue.submit(sub(i)) for i in range(80)), return_exceptions=True)
    assert sum(isinstance(o, BacklogFull) for o in outcomes) == 30
    assert await r.xlen(config.keys.submissions) == 50


async def test_invalid_submission_appends_nothing(r: aioredis.Redis, config: GameConfig) -> None:
    queue = Queue(r, config)
    with pytest.raises(InvalidSubmission) as info:
        await queue.submit_many([sub(1), Submission("x", "", 1, now_ms())])
    assert info.value.code == "invalid_player"
    assert await r.xlen(config.keys.submissions) == 0


async def test_lease_is_held_renewed_and_released_by_its_owner_only(r: aioredis.Redis) -> None:
    async def lease(owner: str, action: str = "hold") -> int:
        return int(await r.fcall("lb_lease", 1, "lb:{test}:publisher", owner, 5000, action))

    assert await lease("a") == 1
    assert await lease("b") == 0
    assert await lease("a") == 1  # renewal
    assert await lease("b", "release") == 0 and await lease("b") == 0  # b cannot release a's lease
    await lease("a", "release")
    assert await lease("b") == 1


async def test_ack_trims_only_below_the_oldest_entry_still_to_apply(r: aioredis.Redis, config: GameConfig) -> None:
    """lb_ack acknowledges and trims: entries another consumer holds pending, and every one after
    them, stay (to be applied or claimed); once nothing older is pending, the stream is empty."""
    queue, stream, group = Queue(r, config, backlog_max=100), config.keys.submissions, "scorer"
    await r.xgroup_create(stream, group, id="0", mkstream=True)
    await queue.submit_many([sub(i) for i in range(10)])
    held: Any = await r.xreadgroup(group, "slow", {stream: ">"}, count=4)  # pending, never acked here
    taken: Any = await r.xreadgroup(group, "fast", {stream: ">"}, count=4)
    later = [sid for sid, _ in taken[0][1]]
    ack = queue.lb.ack_command(stream, group, later, queued=config.keys.queued, submission_ids=["s-4", "s-5"])
    assert await r.execute_command(*ack) == 4
    assert await r.xlen(stream) == 10  # nothing below the slow consumer's oldest pending entry
    assert await r.smembers(config.keys.queued) == {f"s-{i}" for i in (0, 1, 2, 3, 6, 7, 8, 9)}
    assert await r.execute_command(*ack) == 0  # acknowledged twice: nothing more
    held_ids = [sid for sid, _ in held[0][1]]
    assert await r.execute_command(*queue.lb.ack_command(stream, group, held_ids[:2])) == 2
    kept: Any = await r.xrange(stream)
    assert [sid for sid, _ in kept][:2] == held_ids[2:]  # trimmed up to the next pending
    await r.execute_command(*queue.lb.ack_command(stream, group, held_ids[2:]))
    assert await r.xlen(stream) == 2  # the two never delivered
    rest: Any = await r.xreadgroup(group, "fast", {stream: ">"})
    await r.execute_command(*queue.lb.ack_command(stream, group, [sid for sid, _ in rest[0][1]]))
    assert await r.xlen(stream) == 0


async def test_backlog_counts_what_is_not_acknowledged_not_the_streams_length(
    r: aioredis.Redis, config: GameConfig
) -> None:
    """Acknowledged entries held in the stream behind a pending one do not fill the queue: the
    backlog is what the group has not acknowledged, and the cap still holds exactly."""
    queue, stream, group = Queue(r, config, backlog_max=10), config.keys.submissions, "scorer"
    await r.xgroup_create(stream, group, id="0", mkstream=True)
    await queue.submit_many([sub(i) for i in range(10)])
    await r.xreadgroup(group, "slow", {stream: ">"}, count=1)  # holds the oldest entry pending
    taken: Any = await r.xreadgroup(group, "fast", {stream: ">"}, count=6)
    await r.execute_command(*queue.lb.ack_command(stream, group, [sid for sid, _ in taken[0][1]]))
    assert await r.xlen(stream) == 10  # all kept behind the pending one; 4 still to apply
    await queue.submit_many([sub(i) for i in range(10, 16)])  # 4 + 6: exactly the cap
    with pytest.raises(BacklogFull, match="holds 10 of 10"):
        await queue.submit(sub(16))
    assert await r.xlen(stream) == 16
