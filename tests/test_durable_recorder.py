"""The recorder's group commit, on both backends: batches recorded concurrently share one
transaction, each caller returns once its rows are committed, and a transaction the database
refuses fails every batch it carried, none of which is then acknowledged."""

from __future__ import annotations

import asyncio
import gc
import sqlite3
from typing import cast

import asyncpg
import orjson
import redis.asyncio as aioredis

from leaderboard import GameConfig, Submission, SubmitResult
from leaderboard.submission import entry_fields
from scorer import Consumer, ScorerSettings
from scorer.consumer import GROUP
from scorer.durable import Store, StoreError
from scorer.durable.recorder import Recorder, records_of, slips_of

from .conftest import MS, NOW, until

pytest_plugins = ("tests.durable_fixtures",)  # fixtures: store_url, store (one per backend)

CONFIG = GameConfig(game="g", windows=("alltime",))
Applied = tuple[list[dict[str, str]], list[SubmitResult]]  # a batch's entries and what Redis answered


def batch(ids: range | list[int], applied_us: int, *, player: str = "p") -> Applied:
    entries = [{"id": f"s{i}", "player": player, "points": str(i), "ts": str(NOW)} for i in ids]
    return entries, [SubmitResult(e["id"], "ok", applied_us=applied_us) for e in entries]


async def refuse_player(store_url: str, player: str) -> None:
    """Make the database itself refuse any submission of ``player`` (a trigger): a write that
    fails for a reason other than the store being unavailable, so it is not retried."""
    if store_url.startswith("sqlite:"):
        with sqlite3.connect(store_url.removeprefix("sqlite:///")) as db:
            db.execute(
                f"CREATE TRIGGER refuse BEFORE INSERT ON submissions WHEN NEW.player = '{player}'"
                " BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"
            )
        return
    conn = await asyncpg.connect(store_url)
    try:
        await conn.execute(f"""
            CREATE OR REPLACE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN IF NEW.player = '{player}' THEN RAISE EXCEPTION 'refused by the test'; END IF; RETURN NEW; END $$;
            CREATE TRIGGER refuse BEFORE INSERT ON submissions FOR EACH ROW EXECUTE FUNCTION refuse();
        """)
    finally:
        await conn.close()


async def occupy(recorder: Recorder, store: Store) -> list[asyncio.Task[None]]:
    """A batch for each of the store's writers (ids s100 and up), once they are all writing."""
    tasks = [
        asyncio.create_task(recorder.record(*batch(range(100 + 10 * i, 110 + 10 * i), 50 + i)))
        for i in range(store.writers)
    ]
    await until(recorder._committing.locked, 5000 * MS, every=0)
    return tasks


async def recorded_ids(store: Store) -> set[str]:
    return {rec.id async for chunk in store.scan("g") for rec in chunk}


async def test_batches_recorded_while_a_commit_runs_share_the_next_one(store: Store) -> None:
    recorder = Recorder(store, CONFIG, retention_days=30, compact_every_s=0)
    # the first takes the store (and with two writers, the second the other one); the others
    # queue behind and go together, the same id twice among them: the earlier application is
    # the one kept, as written one by one
    batches = [
        batch(range(0, 50), 100),
        batch(range(50, 100), 400),
        batch([100, 101], 300),
        batch(range(102, 150), 200),
        batch([100], 250),
    ]
    await asyncio.gather(*(recorder.record(entries, results) for entries, results in batches))
    assert store.writers in (1, 2) and recorder.commits == 1 + store.writers
    assert recorder.recorded == 150
    rows = [item async for chunk in store.scan("g") for item in chunk]
    assert len(rows) == 150
    assert [(r.applied_us, r.index) for r in rows] == sorted((r.applied_us, r.index) for r in rows)
    assert {r.applied_us for r in rows if r.id == "s100"} == {250}


async def test_a_refused_commit_fails_every_batch_it_carried_and_no_other(store_url: str, store: Store) -> None:
    await refuse_player(store_url, "cheater")
    recorder = Recorder(store, CONFIG, retention_days=30, compact_every_s=0)
    # one batch for each of the store's writers, then three that queue behind them
    firsts = [batch(range(0, 10), 100), batch(range(40, 50), 150)][: store.writers]
    group = [batch(range(10, 20), 200), batch(range(20, 30), 300, player="cheater"), batch(range(30, 40), 400)]
    outcomes = await asyncio.gather(*(recorder.record(*b) for b in [*firsts, *group]), return_exceptions=True)
    assert outcomes[: len(firsts)] == [None] * len(firsts)
    errors = outcomes[len(firsts) :]
    assert all(isinstance(e, Exception) and "refused by the test" in str(e) for e in errors), errors
    assert len({id(e) for e in errors}) == 1  # the one failure, handed to each of its batches
    firsts_ids = {f"s{i}" for i in (*range(10), *range(40, 50)[: 10 * (store.writers - 1)])}
    assert await recorded_ids(store) == firsts_ids  # the group's transaction rolled back
    # the next commit is not affected
    await recorder.record(*batch(range(50, 55), 500))
    assert len(await recorded_ids(store)) == len(firsts_ids) + 5


async def test_no_batch_of_a_refused_commit_is_acknowledged(
    r: aioredis.Redis, redis_url: str, store_url: str, store: Store
) -> None:
    await refuse_player(store_url, "cheater")
    stream = CONFIG.keys.submissions
    for i in range(40):
        player = "cheater" if i == 25 else f"p{i % 7}"
        await r.xadd(stream, {"id": f"s{i}", "player": player, "points": str(i), "ts": str(NOW - 1000)})
    settings = ScorerSettings(
        redis_url=redis_url, game=CONFIG, name="c1", batch=10, block_ms=20, metrics_port=0, durable_url=store_url
    )
    recorder = Recorder(store, CONFIG, retention_days=30, compact_every_s=0)
    consumer = Consumer(r, settings, now=lambda: NOW, recorder=recorder)
    await consumer.ensure_group()
    batches = [await consumer.read() for _ in range(4)]
    assert [len(b) for b in batches] == [10] * 4
    # the batches handled at once, as the consumer's loops do: applied, recorded (grouped), acked
    outcomes = await asyncio.gather(*(consumer.handle(b) for b in batches), return_exceptions=True)
    failed = [b for b, o in zip(batches, outcomes, strict=True) if o is not None]
    assert any(fields["player"] == "cheater" for b in failed for _, fields in b)
    pending = {p["message_id"] for p in await r.xpending_range(stream, GROUP, min="-", max="+", count=100)}
    recorded = await recorded_ids(store)
    for b, outcome in zip(batches, outcomes, strict=True):
        ids = {fields["id"] for _, fields in b}
        if outcome is None:  # acknowledged, deleted, and recorded
            assert not pending & {sid for sid, _ in b} and ids <= recorded
        else:  # applied to Redis, not recorded, not acknowledged: it will be redelivered
            assert {sid for sid, _ in b} <= pending and not ids & recorded
    # the stream is trimmed below the oldest entry still to apply, never at or above it
    oldest = min((int(ms), int(seq)) for ms, seq in (str(sid).split("-") for sid in pending))
    left = [sid for sid, _ in cast(list[tuple[str, dict[str, str]]], await r.xrange(stream))]
    assert left == [sid for b in batches for sid, _ in b if tuple(map(int, sid.split("-"))) >= oldest]


async def test_a_cancelled_commit_fails_the_batches_it_carried(store: Store) -> None:
    recorder = Recorder(store, CONFIG, retention_days=30, compact_every_s=0)
    await recorder.open()
    first = await occupy(recorder, store)  # every writer is writing
    leader, carried = (asyncio.create_task(recorder.record(*batch(range(i, i + 10), 100 + i))) for i in (10, 20))
    await until(lambda: len(recorder._waiting) == 2, 5000 * MS, every=0)  # they wait behind it
    # a first commit's end woke the next: it took both batches and is writing them (with two
    # writers the other first one may still be writing: not waited for, or this one might end)
    await until(lambda: not recorder._waiting, 5000 * MS, every=0)
    leader.cancel()
    outcomes = await asyncio.gather(leader, carried, return_exceptions=True)
    await asyncio.gather(*first)
    assert isinstance(outcomes[0], asyncio.CancelledError)
    # the other cannot know whether it committed: it fails, and is not acknowledged
    assert isinstance(outcomes[1], StoreError) and "interrupted" in str(outcomes[1]), outcomes
    await recorder.record(*batch(range(30, 35), 400))  # and the next commit is not affected
    assert {f"s{i}" for i in (*range(100, 100 + 10 * store.writers), *range(30, 35))} <= await recorded_ids(store)


async def test_a_caller_cancelled_while_a_commit_carries_its_batch_leaves_no_unretrieved_failure(
    store_url: str, store: Store
) -> None:
    """Its batch is in a commit that then fails: nobody is left to raise that failure, and asyncio
    must not log it as never retrieved (a shutdown that cancels the loops did)."""
    await refuse_player(store_url, "cheater")
    loop = asyncio.get_running_loop()
    unhandled: list[dict[str, object]] = []
    loop.set_exception_handler(lambda _, context: unhandled.append(context))
    recorder = Recorder(store, CONFIG, retention_days=30, compact_every_s=0)
    await recorder.open()
    first = await occupy(recorder, store)  # every writer is writing
    leader = asyncio.create_task(recorder.record(*batch(range(10, 20), 200, player="cheater")))
    carried = asyncio.create_task(recorder.record(*batch(range(20, 30), 300)))
    await until(lambda: len(recorder._waiting) == 2, 5000 * MS, every=0)  # they wait behind it
    # until the leader has taken both batches (it is writing them; with two writers, the other
    # first one may still be writing: not waited for, or the leader's commit might end)
    await until(lambda: not recorder._waiting, 5000 * MS, every=0)
    carried.cancel()  # the other caller goes away meanwhile
    outcomes = await asyncio.gather(leader, carried, return_exceptions=True)
    await asyncio.gather(*first)
    assert "refused by the test" in str(outcomes[0]) and isinstance(outcomes[1], asyncio.CancelledError)
    del leader, carried, outcomes
    gc.collect()
    await asyncio.sleep(0)  # one step, for any callback the collection scheduled (an absence has no event)
    assert unhandled == []
    assert await recorded_ids(store) == {f"s{i}" for i in range(100, 100 + 10 * store.writers)}


def test_a_batch_reads_the_same_records_from_its_slips_as_from_its_fields_by_name() -> None:
    """The consumer hands the queue's entries as they are (nearly all a slip alone): each row is
    made from the slip's parts, and is the row the fields by name make."""
    subs = [
        Submission("a", "ana", 10, NOW),
        Submission("b", "ben", 20, NOW, name="Ben", region="eu", op="incr"),
        Submission("a", "ana", 10, NOW),  # the same id again in the batch: one record
        Submission("t", "cyd", 5, NOW, tournament="cup"),
        Submission("d", "dan", 1, NOW, board="tower", values=(1, 2)),  # a defined board's: a Slip
    ]
    entries = [s.fields() for s in subs] + [{"slip": "junk\tx\tnot a number\t\t"}, {"slip": "e\teve\t7\t" + str(NOW)}]
    statuses = ["ok", "ok", "duplicate", "ok", "ok", "duplicate", "error"]
    results = [SubmitResult(f"r{i}", status, applied_us=99) for i, status in enumerate(statuses)]
    by_name = [entry_fields(e) for e in entries]
    records = records_of(entries, results)
    assert records == records_of(by_name, results)
    assert [(r.id, r.op, r.region, r.name, r.tournament, r.index) for r in records] == [
        ("a", "", "", "", "", 0),
        ("b", "incr", "eu", "Ben", "", 1),
        ("t", "", "", "", "cup", 3),
    ]  # the junk duplicate and the refused slip are not recorded
    assert slips_of(entries, results) == slips_of(by_name, results)
    [slip] = slips_of(entries, results)
    assert slip.id == "d" and orjson.loads(slip.fields)["values"] == "1,2"
