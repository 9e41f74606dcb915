"""The submissions consumer against a real Redis: batches, idempotency, dead letters, claims."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any
from urllib.parse import urlsplit

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from leaderboard import GameConfig, Leaderboard, LibraryMismatch, Submission, connect
from leaderboard.batch import SUBMIT_LAYOUT, encode_batch
from leaderboard.library import library_code
from leaderboard.moderation import Moderation
from scorer import Consumer, ScorerSettings, Stats
from scorer.consumer import GROUP

from .conftest import MS, NOW, activity_events, until

LATER = NOW + 600_000  # the consumer's clock: every submission lies in the recent past


def settings_for(url: str, config: GameConfig, **kw: object) -> ScorerSettings:
    base: dict[str, object] = dict(
        redis_url=url, game=config, name="c1", batch=50, block_ms=20, claim_idle_ms=200, metrics_port=0
    )
    return ScorerSettings(**{**base, **kw})  # type: ignore[arg-type]


def slip(sid: str, player: str, points: int | str, ts: int = NOW, **extra: str) -> dict[str, str]:
    return {"id": sid, "player": player, "points": str(points), "ts": str(ts), **extra}


async def enqueue(r: aioredis.Redis, config: GameConfig, *entries: dict[str, str]) -> list[str]:
    async with r.pipeline(transaction=False) as pipe:
        for e in entries:
            pipe.xadd(config.keys.submissions, e)  # type: ignore[arg-type]
        return [str(i) for i in await pipe.execute()]


async def drain(consumer: Consumer) -> None:
    await asyncio.wait_for(consumer.run(burst=True), 5000 * MS)


async def test_batches_are_applied_acked_and_deleted(r: aioredis.Redis, redis_url: str, config: GameConfig) -> None:
    stats = Stats()
    consumer = Consumer(r, settings_for(redis_url, config), stats, now=lambda: LATER)
    entries = [slip(f"s{i}", f"p{i % 40}", i, NOW + i) for i in range(230)]
    await enqueue(r, config, *entries)
    await drain(consumer)
    assert (stats.applied, stats.duplicates, stats.dead_letters) == (230, 0, 0)
    assert stats.batches >= 5  # 230 entries in batches of at most 50
    assert await r.xlen(config.keys.submissions) == 0  # the stream holds only what is not applied
    assert (await r.xpending(config.keys.submissions, GROUP))["pending"] == 0
    top = (await Leaderboard(r, config).top("weekly", n=3, at=NOW)).entries
    assert [(e.player, e.score) for e in top] == [("p29", 229), ("p28", 228), ("p27", 227)]


async def test_replayed_ids_change_nothing(r: aioredis.Redis, redis_url: str, config: GameConfig) -> None:
    stats = Stats()
    consumer = Consumer(r, settings_for(redis_url, config), stats, now=lambda: LATER)
    await enqueue(r, config, slip("a", "ana", 10), slip("b", "ben", 20))
    await drain(consumer)
    # the same slips again (a game server retrying), one with different points: ids decide
    await enqueue(r, config, slip("a", "ana", 10), slip("b", "ben", 999), slip("c", "cy", 5))
    await drain(consumer)
    assert (stats.applied, stats.duplicates) == (3, 2)
    top = (await Leaderboard(r, config).top("alltime", n=10, at=NOW)).entries
    assert [(e.player, e.score) for e in top] == [("ben", 20), ("ana", 10), ("cy", 5)]
    assert [e["id"] for e in await activity_events(r, config.keys.activity)] == ["a", "b", "c"]


async def test_refused_and_unparseable_entries_are_dead_lettered_without_blocking_the_batch(
    r: aioredis.Redis, redis_url: str, config: GameConfig
) -> None:
    stats = Stats()
    consumer = Consumer(r, settings_for(redis_url, config), stats, now=lambda: LATER)
    ids = await enqueue(
        r,
        config,
        slip("ok1", "ana", 10),
        slip("bad-points", "ben", "-5"),
        slip("far-future", "cy", 1, 999_999_999_999_999),  # past the year 9999: refused, not a crash
        {"junk": "x"},
        slip("ok2", "dee", 7),
    )
    # bytes that are not UTF-8 reach the consumer as surrogates: the general send path
    raw = {"id": "raw", "player": b"\xffx", "points": "1", "ts": str(NOW)}
    ids.append(str(await r.xadd(config.keys.submissions, raw)))  # type: ignore[arg-type]
    await drain(consumer)
    assert (stats.applied, stats.dead_letters) == (2, 4)
    letters: Any = await r.xrange(config.keys.dead_letters)
    by_source = {fields["dead.id"]: fields for _, fields in letters}
    assert set(by_source) == {ids[1], ids[2], ids[3], ids[5]}
    assert by_source[ids[5]]["dead.code"] == "invalid_player"
    assert by_source[ids[1]]["dead.code"] == "invalid_points" and by_source[ids[1]]["player"] == "ben"
    assert by_source[ids[2]]["dead.code"] == "timestamp_in_future"
    assert by_source[ids[3]]["dead.code"] == "invalid_timestamp"
    assert await r.xlen(config.keys.submissions) == 0  # acked: never retried


async def test_slip_entries_and_entries_by_name_are_applied_alike(
    r: aioredis.Redis, redis_url: str, config: GameConfig
) -> None:
    """A queue holding this release's slip entries beside an earlier release's entries by name:
    both applied; a refused slip's dead letter holds its fields by name and its id leaves the
    queued set; slips not written by Submission.fields get the library's own codes."""
    stats = Stats()
    consumer = Consumer(r, settings_for(redis_url, config), stats, now=lambda: LATER)
    lb = Leaderboard(r, config)
    subs = [Submission("new-1", "ana", 30, NOW, name="Ana"), Submission("new-2", "ben", 20, NOW, region="eu")]
    await lb.enqueue([s.fields() for s in subs], backlog_max=100)
    ids = await lb.enqueue(
        [
            slip("old-1", "cy", 10),
            {"slip": f"new-3\tdee\t-4\t{NOW}\t"},  # a slip the library refuses
            {"slip": f"new-4\teve\t5\t{NOW}\tE\tve"},  # a tab in the name
            {"slip": "new-5\tfay"},  # parts missing
            {"slip": f"\tgus\t5\t{NOW}\t"},  # no id
        ],
        backlog_max=100,
    )
    assert await r.smembers(config.keys.queued) == {"new-1", "new-2", "old-1", "new-3", "new-4", "new-5"}
    await drain(consumer)
    assert (stats.applied, stats.dead_letters) == (3, 4)
    top = (await lb.top("alltime", n=10, at=NOW)).entries
    assert [(e.player, e.score, e.name) for e in top] == [("ana", 30, "Ana"), ("ben", 20, None), ("cy", 10, None)]
    eu = (await lb.top("alltime", n=10, at=NOW, scope="region:eu")).entries
    assert [e.player for e in eu] == ["ben"]
    letters: Any = await r.xrange(config.keys.dead_letters)
    by_source = {fields.pop("dead.id"): fields for _, fields in letters}
    assert {k: v for k, v in by_source[ids[1]].items() if not k.startswith("dead.")} == {
        "id": "new-3",
        "player": "dee",
        "points": "-4",
        "ts": str(NOW),
    }
    codes = [by_source[sid]["dead.code"] for sid in ids[1:]]
    assert codes == ["invalid_points", "invalid_name", "invalid_timestamp", "missing_id"]
    assert await r.smembers(config.keys.queued) == set()
    assert (await lb.status("new-3", now=LATER)).code == "invalid_points"
    assert (await lb.status("new-1", now=LATER)).status == "applied"


async def test_entries_left_pending_by_a_dead_replica_are_claimed_and_applied_once(
    r: aioredis.Redis, redis_url: str, config: GameConfig
) -> None:
    stream = config.keys.submissions
    await r.xgroup_create(stream, GROUP, id="0", mkstream=True)
    await enqueue(r, config, *(slip(f"s{i}", f"p{i}", i) for i in range(30)))
    # A replica reads 20 entries, applies the first 10, and dies before acknowledging anything.
    reply: Any = await r.xreadgroup(GROUP, "dead", {stream: ">"}, count=20)
    [[_, taken]] = reply
    await Leaderboard(r, config).submit_batch([f for _, f in taken[:10]], now=LATER)

    stats = Stats()
    consumer = Consumer(r, settings_for(redis_url, config, name="live"), stats, now=lambda: LATER)
    await drain(consumer)
    assert stats.claimed == 20
    assert (stats.applied, stats.duplicates) == (20, 10)  # the re-applied ten were no-ops
    assert len(await activity_events(r, config.keys.activity)) == 30
    assert (await r.xpending(stream, GROUP))["pending"] == 0


async def test_an_entry_that_keeps_killing_its_readers_is_dead_lettered_not_retried_forever(
    r: aioredis.Redis, redis_url: str, config: GameConfig
) -> None:
    stream = config.keys.submissions
    await r.xgroup_create(stream, GROUP, id="0", mkstream=True)
    ids = await enqueue(r, config, slip("poison", "ana", 10), slip("fine", "ben", 20))
    await r.xreadgroup(GROUP, "dead-1", {stream: ">"}, count=2)
    for n in range(2, 6):  # four more replicas took the first entry over and died holding it
        await r.xclaim(stream, GROUP, f"dead-{n}", 0, [ids[0]])
    stats = Stats()
    consumer = Consumer(r, settings_for(redis_url, config, max_deliveries=5), stats, now=lambda: LATER)
    await drain(consumer)  # its own claim is the sixth delivery of "poison", the second of "fine"
    letters: Any = await r.xrange(config.keys.dead_letters)
    assert [(f["dead.id"], f["dead.code"]) for _, f in letters] == [(ids[0], "too_many_deliveries")]
    assert stats.applied == 1 and await r.xlen(stream) == 0
    top = (await Leaderboard(r, config).top("alltime", n=10, at=NOW)).entries
    assert [e.player for e in top] == ["ben"]


async def test_stop_finishes_the_batch_in_flight(r: aioredis.Redis, redis_url: str, config: GameConfig) -> None:
    stats = Stats()
    consumer = Consumer(r, settings_for(redis_url, config, concurrency=1), stats, now=lambda: LATER)
    await enqueue(r, config, *(slip(f"s{i}", f"p{i}", i) for i in range(500)))
    stop = asyncio.Event()
    handled = asyncio.Event()
    original = consumer.handle

    async def handle_then_stop(batch: list[tuple[str, dict[str, str]]]) -> None:
        stop.set()  # stop arrives while this batch is in flight
        await original(batch)
        handled.set()

    consumer.handle = handle_then_stop  # type: ignore[method-assign]
    await asyncio.wait_for(consumer.run(stop), 5000 * MS)
    assert handled.is_set() and stats.applied == 50  # that batch, and no further one
    assert (await r.xpending(config.keys.submissions, GROUP))["pending"] == 0
    assert await r.xlen(config.keys.submissions) == 450


class Door:
    """A loopback TCP relay in front of the test's Redis. Shut, it hangs up on each connection as
    it arrives (what a client meets while Redis is down: no reply, the connection closed) and
    notes when it came; open, it relays bytes both ways. Each knock is one connection attempt."""

    def __init__(self, redis_url: str) -> None:
        upstream = urlsplit(redis_url)
        self.upstream = (upstream.hostname or "127.0.0.1", upstream.port or 6379)
        self.open = False
        self.knocks: list[float] = []  # loop times of the attempts while shut
        self._knocked = asyncio.Condition()
        self._writers: list[asyncio.StreamWriter] = []

    async def __aenter__(self) -> Door:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"redis://127.0.0.1:{self._server.sockets[0].getsockname()[1]}/0"
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._server.close()
        for writer in self._writers:
            writer.close()
        await self._server.wait_closed()

    async def knocked(self, count: int) -> None:
        async with self._knocked:
            await self._knocked.wait_for(lambda: len(self.knocks) >= count)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self.open:
            writer.close()
            async with self._knocked:
                self.knocks.append(asyncio.get_running_loop().time())
                self._knocked.notify_all()
            return
        up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        self._writers += [writer, up_writer]

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(ConnectionError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))


async def test_redis_down_is_retried_with_backoff_then_resumed(
    r: aioredis.Redis, redis_url: str, config: GameConfig, caplog: pytest.LogCaptureFixture
) -> None:
    """A consumer that hung, crashed or retried in a tight loop fails here: while Redis is down it
    tries again and again, spaced by its backoff; once Redis is back it applies what waited."""
    caplog.set_level(logging.INFO, logger="scorer")
    stats = Stats()
    async with Door(redis_url) as door:
        client = connect(door.url)
        consumer = Consumer(client, settings_for(redis_url, config), stats, now=lambda: LATER)
        stop = asyncio.Event()
        task = asyncio.create_task(consumer.run(stop))
        eight = asyncio.create_task(door.knocked(8))
        try:
            await asyncio.wait([task, eight], timeout=5000 * MS, return_when=asyncio.FIRST_COMPLETED)
            assert not task.done(), f"the consumer ended while Redis was down: {task.exception()!r}"
            assert eight.done(), f"{len(door.knocks)} attempts in 5 s: the consumer stopped trying"
            # Spaced by the backoff (full jitter, caps 0.05 s doubling to 0.5 s: 1.1 s expected for
            # seven waits, under 0.1 s with a chance below 1e-6), not a loop that reconnects at once
            # (seven loopback connects take a few milliseconds).
            assert door.knocks[7] - door.knocks[0] >= 0.1, door.knocks
            warned = [m for m in caplog.messages if "redis unavailable" in m]
            assert 1 <= len(warned) < len(door.knocks)  # the outage is logged, not each attempt

            await enqueue(r, config, slip("a", "ana", 5))
            door.open = True
            await until(lambda: stats.applied == 1, 5000 * MS)
            assert not task.done()
            assert any("redis is back after" in m for m in caplog.messages)
        finally:
            stop.set()
            eight.cancel()
            stopped, _ = await asyncio.wait([task], timeout=5000 * MS)
            task.cancel()  # a consumer that hung must not outlive the test
            await client.aclose()
    assert stopped, "the consumer did not stop"
    task.result()
    top = (await Leaderboard(r, config).top("alltime", n=10, at=NOW)).entries
    assert [(e.player, e.score) for e in top] == [("ana", 5)]


async def test_names_of_gone_replicas_are_forgotten_unless_they_hold_entries(
    redis_url: str, r: aioredis.Redis, config: GameConfig
) -> None:
    client = connect(redis_url)
    consumer = Consumer(client, settings_for(redis_url, config, claim_idle_ms=60_000, forget_after_s=1))
    stream = config.keys.submissions
    await consumer.ensure_group()
    await enqueue(r, config, slip("a", "ana", 5))
    await r.xreadgroup(GROUP, "holder", {stream: ">"}, count=1)  # reads the entry, never acknowledges
    await r.xgroup_createconsumer(stream, GROUP, "ghost")  # a replica that read nothing, then died
    await r.xgroup_createconsumer(stream, GROUP, "c1")

    async def names() -> set[str]:
        return {str(c["name"]) for c in await r.xinfo_consumers(stream, GROUP)}

    assert await names() == {"holder", "ghost", "c1"}
    await asyncio.sleep(1.1)  # the ghost's idleness past forget_after_s: the condition under test
    assert await consumer.read() == []  # the holder's entry is not idle long enough to be claimed
    assert await names() == {"holder", "c1"}  # the ghost is gone; a name holding an entry never is
    # idle or not, a name holding entries stays, and so does the caller's own
    assert await client.fcall("lb_forget", 1, stream, GROUP, "0", "c1") == []
    await client.aclose()


async def blocked_reads(r: aioredis.Redis) -> int:
    return sum("cmd=xreadgroup" in line for line in (await r.execute_command("CLIENT", "LIST")).splitlines())


async def test_a_stream_deleted_under_a_blocked_read_is_recreated(
    r: aioredis.Redis, redis_url: str, config: GameConfig
) -> None:
    """Redis answers a read blocked on a stream that is deleted (DEL, FLUSHALL, or the slot moving
    to another cluster node) with UNBLOCKED: the consumer makes the group again and goes on."""
    stats = Stats()
    consumer = Consumer(r, settings_for(redis_url, config, block_ms=60_000), stats, now=lambda: LATER)
    stop = asyncio.Event()
    task = asyncio.create_task(consumer.run(stop))
    try:
        async with asyncio.timeout(5000 * MS):  # until both reads are blocked on the stream
            while await blocked_reads(r) < 2:  # noqa: ASYNC110 (a state inside Redis: no event to await)
                await asyncio.sleep(0.01)
        await r.delete(config.keys.submissions)
        await enqueue(r, config, slip("late", "lia", 5))
        async with asyncio.timeout(5000 * MS):
            while stats.applied < 1:
                assert not task.done(), task.exception()
                await asyncio.sleep(0.01)
    finally:
        stop.set()
        r2 = connect(redis_url)
        try:
            # Each blocked read returns on an entry of its own and then sees stop; one entry can
            # wake only one of them (a read that was just being sent blocks after it), so wake
            # again until every reader is done.
            async with asyncio.timeout(5000 * MS):
                while not task.done():
                    await r2.xadd(config.keys.submissions, {"wake": "1"})
                    await asyncio.wait([task], timeout=0.05)
        finally:
            await r2.aclose()
        await task


async def test_a_banned_players_slips_are_dead_lettered_and_counted(
    r: aioredis.Redis, redis_url: str, config: GameConfig
) -> None:
    await Moderation(Leaderboard(r, config)).ban("cheat", actor="ops", reason="bot")
    stats = Stats()
    consumer = Consumer(r, settings_for(redis_url, config), stats, now=lambda: LATER)
    await enqueue(r, config, slip("a", "cheat", 10), slip("b", "ben", 20))
    await drain(consumer)
    assert (stats.applied, stats.dead_letters, stats.banned) == (1, 1, 1)
    [(_, letter)] = await r.xrange(config.keys.dead_letters) or []
    assert letter is not None
    assert letter["player"] == "cheat" and letter["dead.code"] == "banned"


async def test_a_library_lost_between_apply_and_acknowledgement_is_loaded_again(
    r: aioredis.Redis, redis_url: str, config: GameConfig
) -> None:
    """Redis restarted without persistence after the batch was applied: the acknowledgement
    (lb_ack) loads the function library and goes through, so the batch is not retried forever."""
    stats = Stats()
    consumer = Consumer(r, settings_for(redis_url, config), stats, now=lambda: LATER)
    await enqueue(r, config, *(slip(f"s{i}", f"p{i}", i) for i in range(5)), slip("bad", "", 1))
    applied = consumer.apply

    async def apply_then_lose_the_library(entries: Any, **options: Any) -> Any:
        results = await applied(entries, **options)
        await r.function_flush()
        return results

    consumer.apply = apply_then_lose_the_library  # type: ignore[method-assign]
    await drain(consumer)
    assert stats.applied == 5 and stats.dead_letters == 1  # the MULTI with a dead letter went through
    assert (await r.xpending(config.keys.submissions, GROUP))["pending"] == 0
    assert await r.xlen(config.keys.submissions) == 0


def library_of_layout(layout: int) -> str:
    """This release's library, as a release whose call layout is ``layout`` would ship it."""
    code = library_code()
    ours = f"batch.SUBMIT_LAYOUT = '{SUBMIT_LAYOUT}'"  # lua/batch.lua
    assert ours in code
    return code.replace(ours, f"batch.SUBMIT_LAYOUT = '{layout}'")


async def test_a_newer_releases_library_leaves_the_batches_queued_until_the_library_matches(
    r: aioredis.Redis, redis_url: str, config: GameConfig, caplog: pytest.LogCaptureFixture
) -> None:
    """An upgrade under way: a replica of the next release loaded its library. This replica's
    batches are neither refused nor dead-lettered: they wait, queued, and are applied once the
    library in Redis reads this release's layout again."""
    caplog.set_level(logging.INFO, logger="scorer")
    stats = Stats()
    consumer = Consumer(r, settings_for(redis_url, config), stats, now=lambda: LATER)
    await enqueue(r, config, *(slip(f"s{i}", f"p{i}", i) for i in range(5)))
    await r.function_load(library_of_layout(SUBMIT_LAYOUT + 1), replace=True)
    stop = asyncio.Event()
    task = asyncio.create_task(consumer.run(stop))
    try:
        said = f"waiting: the function library reads layout {SUBMIT_LAYOUT + 1}"
        await until(lambda: any(said in m for m in caplog.messages), 5000 * MS)
        assert (stats.applied, stats.dead_letters) == (0, 0)
        assert (await r.xpending(config.keys.submissions, GROUP))["pending"] == 5
        assert not await r.exists(config.keys.dead_letters)
        await r.function_load(library_code(), replace=True)  # the upgrade rolled back, or this replica's release
        await until(lambda: stats.applied == 5, 5000 * MS)
        assert stats.dead_letters == 0
        # the end of the wait is said as what it was: no outage of Redis
        assert any("scorer: the function library matches again after" in m for m in caplog.messages)
        assert not any("redis" in m for m in caplog.messages)
    finally:
        stop.set()
        await asyncio.wait_for(task, 5000 * MS)
        await r.function_load(library_code(), replace=True)


async def test_an_older_releases_library_is_replaced_by_this_ones(r: aioredis.Redis, config: GameConfig) -> None:
    """A replica of the previous release restarted during the upgrade and loaded its library:
    this release's is loaded again and the batch goes through. A newer release's is left alone."""
    lb = Leaderboard(r, config)

    async def reads(layout: int) -> bool:
        """Whether the library in Redis takes a call of ``layout`` (an empty batch: writes nothing)."""
        plan = encode_batch(config, [], LATER)
        try:
            await r.fcall("lb_submit", len(plan.keys), *plan.keys, layout, *plan.args[1:])
        except ResponseError as exc:
            assert "library_mismatch" in str(exc)
            return False
        return True

    try:
        await r.function_load(library_of_layout(SUBMIT_LAYOUT - 1), replace=True)
        [result] = await lb.submit_batch([slip("a", "ana", 5)], now=LATER)
        assert result.status == "ok" and await reads(SUBMIT_LAYOUT)
        await r.function_load(library_of_layout(SUBMIT_LAYOUT + 1), replace=True)
        with pytest.raises(LibraryMismatch) as refused:
            await lb.submit_batch([slip("b", "ben", 6)], now=LATER)
        assert refused.value.layout == SUBMIT_LAYOUT + 1
        assert await reads(SUBMIT_LAYOUT + 1) and not await reads(SUBMIT_LAYOUT)  # left as it was
    finally:
        await r.function_load(library_code(), replace=True)
    top = (await lb.top("alltime", n=10, at=NOW)).entries
    assert [(e.player, e.score) for e in top] == [("ana", 5)]
