"""The durable score log's store, the same tests for every backend (SQLite and PostgreSQL)."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from typing import Any

import asyncpg
import pytest

from leaderboard import GameConfig
from leaderboard.settings import SettingsError
from scorer.durable import Folder, Record, Slip, Store, StoreError, open_store
from scorer.durable.postgres import SCHEMA as POSTGRES_SCHEMA
from scorer.durable.records import PARTS, part_of
from scorer.durable.sqlite import SCHEMA as SQLITE_SCHEMA
from scorer.durable.sqlite import SQLiteStore
from scorer.settings import ScorerSettings

from .conftest import NOW

pytest_plugins = ("tests.durable_fixtures",)  # fixtures: store_url, store (one per backend)

DAY = 86_400_000


def rec(i: int, player: str = "mia", points: int = 10, ts: int = NOW, **kw: object) -> Record:
    return Record(f"s{i}", player, points, ts, **kw)  # type: ignore[arg-type]


async def scanned(store: Store, game: str = "g", **bounds: Any) -> list[Record]:
    return [item async for chunk in store.scan(game, batch=3, **bounds) for item in chunk]


async def test_records_are_kept_once_per_id_in_the_order_applied(store: Store) -> None:
    first = [
        rec(
            i,
            points=i,
            op="incr" if i % 2 else "",
            region="eu" if i == 3 else "",
            applied_us=200,
            index=i,
            tournament="cup" if i == 4 else "",
        )
        for i in range(5)
    ]
    assert await store.record("g", first) == 5
    # a copy applied later (a duplicate) changes nothing, whatever it carries
    replay = rec(5, name="Mia", replayed=True, applied_us=300)
    await store.record("g", [rec(2, points=999, applied_us=300, index=1), replay])
    # a batch Redis applied before the first one, recorded after it (another replica's)
    earlier = [rec(6, ts=NOW - 5, applied_us=100), rec(7, applied_us=100)]
    assert await store.record("g", earlier) == 2
    assert await store.record("other", [rec(2)]) == 1  # ids are per game
    rows = await scanned(store)
    assert rows == [*earlier, *first, replay]
    assert [type(r.replayed) for r in rows] == [bool] * 8
    positions = [p for i in range(8) if (p := await store.position("g", i))]
    assert positions == sorted(positions) and positions[0][0] == 100
    assert [p[1] for p in positions] == [0, 0, 0, 1, 2, 3, 4, 0]  # each one's index in its batch
    assert await store.position("g", 8) is None
    assert await store.count("g") == 8
    # a part of the log: after one position, through another
    assert await scanned(store, after=positions[1], through=positions[6]) == first
    assert await scanned(store, through=positions[0]) == earlier[:1]
    assert await scanned(store, after=positions[6]) == [replay]
    # the original of a copy recorded first takes its place (concurrent batches: see store.py)
    await store.record("g", [rec(5, applied_us=250, index=3)])
    rows = await scanned(store)
    assert rows == [*earlier, *first, rec(5, applied_us=250, index=3)]
    assert await store.last_before("g", NOW + 1) == await store.position("g", 7)
    assert await store.last_before("g", NOW - 5) is None
    assert await store.last_before("g", NOW) == positions[0]


async def test_a_batch_of_new_ids_and_replays_keeps_each_id_once_at_its_earliest_application(store: Store) -> None:
    # PostgreSQL copies the first applications in and upserts the replays (postgres.py)
    await store.record("g", [rec(0, applied_us=100), rec(1, applied_us=300)])
    mixed = [
        rec(2, applied_us=200),  # new
        rec(0, points=5, replayed=True, applied_us=200, index=1),  # held, applied earlier: kept as it is
        rec(1, points=6, replayed=True, applied_us=200, index=2),  # held, applied later: this one replaces it
        rec(3, replayed=True, applied_us=200, index=3),  # a replay whose first application was never recorded
    ]
    assert await store.record("g", mixed) == 3
    assert [(r.id, r.points, r.applied_us) for r in await scanned(store)] == [
        ("s0", 10, 100),
        ("s2", 10, 200),
        ("s1", 6, 200),
        ("s3", 10, 200),
    ]
    # a new id among them that is held after all (applied again past the idempotency horizon):
    # the whole batch as one upsert, nothing lost or doubled
    assert await store.record("g", [rec(4, applied_us=400), rec(0, points=7, applied_us=400, index=1)]) == 1
    assert await store.count("g") == 5


async def test_every_value_a_slip_can_carry_is_recorded_exactly(store: Store) -> None:
    # quotes, escapes, any character (SQLite: a NUL too), int64's ends and the flag come back as
    # they went in
    odd = ["q\"uo'te", "back\\slash", "tab\tnew\nline", "zoë 名前 🎮", "\u2028\x7f", ""]
    records = [
        rec(
            i,
            player=text or "p",
            points=(-(1 << 63), (1 << 63) - 1)[i % 2],
            name=text,
            op=text,
            region=text,
            mode=text,
            tournament=text,
            replayed=bool(i % 2),
            applied_us=(1 << 62) + i,
            index=i,
        )
        for i, text in enumerate(odd)
    ]
    assert await store.record("g", records) == len(records)
    late = [rec(98, player="\\u0000", name="\\u0000", applied_us=(1 << 62) + 98)]
    if isinstance(store, SQLiteStore):  # PostgreSQL's text holds no NUL
        late.append(rec(99, player="nul\x00", name="a\x00b", applied_us=(1 << 62) + 99))
    for one in late:
        assert await store.record("g", [one]) == 1
    assert await scanned(store) == [*records, *late]
    assert [type(r.replayed) for r in await scanned(store)] == [bool] * (len(records) + len(late))


async def test_the_log_cuts_into_parts_by_player_as_part_of_says(store: Store) -> None:
    # last characters of one to four UTF-8 bytes, odd and even last bytes
    players = ["mia", "bo", "p0", "p1", "p17", "zoë", "ø", "José", "li€", "名前", "名", "🎮", "x🎲"]
    records = [rec(i, player=p, applied_us=100 + i) for i, p in enumerate(players)]
    await store.record("g", records)
    config = GameConfig(game="g", windows=("alltime",))
    folder = Folder(config)
    folder.apply(records)
    await store.compact("g", before_ts=NOW + 1, now_s=NOW // 1000, folder=folder)
    await store.record("g", records[:5])  # raw again, after the board rows (ids are free again)
    for n in PARTS:
        parts = [await scanned(store, part=(i, n)) for i in range(n)]
        assert sorted(r for part in parts for r in part) == sorted(records[:5])
        assert all(part_of(r.player, n) == i for i, part in enumerate(parts) for r in part)
        rows = [
            [row.player async for chunk in store.board_rows("g", now_s=NOW // 1000, part=(i, n)) for row in chunk]
            for i in range(n)
        ]
        assert sorted(p for part in rows for p in part) == sorted(players)
        assert all(part_of(p, n) == i for i, part in enumerate(rows) for p in part)
    assert {part_of(p, 2) for p in players} == {0, 1}


async def test_compaction_folds_the_oldest_prefix_and_drops_expired_boards(store: Store) -> None:
    config = GameConfig(game="g", windows=("daily", "alltime"))
    old, recent = NOW - 10 * DAY, NOW - DAY
    # applied order: old, old, recent, old (a late arrival), recent
    records = [
        rec(0, "a", 5, old),
        rec(1, "b", 7, old, name="Bee"),
        rec(2, "a", 9, recent),
        rec(3, "c", 1, old),
        rec(4, "b", 8, recent),
    ]
    await store.record("g", records)
    done = await store.compact("g", before_ts=NOW - 2 * DAY, now_s=NOW // 1000, folder=Folder(config))
    # only the prefix before the first recent one: the late old one stays raw, after it
    assert done.folded == 2
    assert [r.id for r in await scanned(store)] == ["s2", "s3", "s4"]
    rows = [row async for chunk in store.board_rows("g", now_s=NOW // 1000) for row in chunk]
    # the daily boards of ten days ago expired after seven: only the all-time rows are kept
    assert {(r.window, r.player) for r in rows} == {("alltime", "a"), ("alltime", "b")}
    assert await store.names("g") == {"b": "Bee"}
    # folding the same records in one go gives the same rows
    whole = Folder(config)
    whole.apply(records[:2])
    assert sorted(rows, key=str) == sorted(whole.rows(now_s=NOW // 1000), key=str)
    # later, when every board expired (all-time never does) and nothing raw is old enough
    later = await store.compact("g", before_ts=0, now_s=NOW // 1000, folder=Folder(config))
    assert later.folded == 0


async def test_board_rows_of_expired_periods_are_not_read(store: Store) -> None:
    config = GameConfig(game="g", windows=("daily",))
    await store.record("g", [rec(0, "a", 5, NOW - DAY)])
    await store.compact("g", before_ts=NOW, now_s=NOW // 1000, folder=Folder(config))
    now_s = NOW // 1000
    assert [r async for r in store.board_rows("g", now_s=now_s)] != []
    assert [r async for r in store.board_rows("g", now_s=now_s + 8 * 86_400)] == []


def test_store_urls_are_checked() -> None:
    with pytest.raises(StoreError, match="scheme"):
        open_store("mysql://x")
    with pytest.raises(StoreError, match="path"):
        open_store("sqlite://")
    with pytest.raises(SettingsError, match="LB_DURABLE_URL"):
        ScorerSettings.from_env({"LB_DURABLE_URL": "redis://x"})
    with pytest.raises(SettingsError, match="LB_DURABLE_RETENTION_DAYS"):
        ScorerSettings.from_env({"LB_DURABLE_RETENTION_DAYS": "1"})  # shorter than the 48 h idempotency
    assert ScorerSettings.from_env({}).durable_url == ""


async def test_concurrent_writers_of_one_store_take_turns(store: Store) -> None:
    # the scorer's loops share one store: their transactions must not interleave on it
    batches = [[rec(b * 100 + i, applied_us=b, index=i) for i in range(100)] for b in range(8)]
    written = await asyncio.gather(*(store.record("g", batch) for batch in batches))
    assert written == [100] * 8
    assert await store.count("g") == 800


async def test_batches_of_the_same_ids_in_flight_at_once_keep_each_once_without_a_deadlock(store: Store) -> None:
    # an original batch and its re-sent copy (some of it replays, some applied again) written at
    # once, their rows given in opposite orders: each store writes them in one order
    for r in range(12):
        ids = [r * 40 + i for i in range(40)]
        originals = [rec(i, points=1, applied_us=1000 + r, index=k) for k, i in enumerate(ids)]
        copies = [
            rec(i, points=2, replayed=i % 3 == 0, applied_us=2000 + r, index=k) for k, i in enumerate(reversed(ids))
        ]
        await asyncio.gather(store.record("g", copies), store.record("g", originals))
    rows = await scanned(store)
    assert len(rows) == 480 and {r.points for r in rows} == {1}  # each id once, its earlier application


async def test_rows_recorded_after_a_compaction_come_after_the_rows_kept(store: Store) -> None:
    # Recorded first but applied last (another replica's batch): after the compaction folds the
    # rows recorded last, SQLite may hand their seqs out again (durable/sqlite.py says why that
    # is safe); the rows recorded next still sort after every row kept.
    config = GameConfig(game="g", windows=("alltime",))
    await store.record("g", [rec(i, applied_us=300, index=i) for i in range(3)])
    await store.record("g", [rec(i, ts=NOW - 10 * DAY, applied_us=100, index=i - 3) for i in range(3, 6)])
    done = await store.compact("g", before_ts=NOW - DAY, now_s=NOW // 1000, folder=Folder(config))
    assert done.folded == 3
    await store.record("g", [rec(i, applied_us=400, index=i - 6) for i in range(6, 9)])
    assert [r.id for r in await scanned(store)] == [f"s{i}" for i in (0, 1, 2, 6, 7, 8)]
    positions = [await store.position("g", offset) for offset in range(6)]
    assert [p for p in positions if p] == sorted(p for p in positions if p) and len(positions) == 6
    assert len({p[2] for p in positions if p}) == 6  # no seq held twice


async def test_a_store_made_with_the_earlier_schema_opens_and_records_as_before(store_url: str) -> None:
    # SQLite: seq with AUTOINCREMENT; PostgreSQL: seq the primary key, (game, id) unique
    if store_url.startswith("sqlite:"):
        before = SQLITE_SCHEMA.replace("seq INTEGER PRIMARY KEY,", "seq INTEGER PRIMARY KEY AUTOINCREMENT,")
        with sqlite3.connect(store_url.removeprefix("sqlite:///")) as db:
            db.executescript(before)
    else:
        before = POSTGRES_SCHEMA.replace("AS IDENTITY,", "AS IDENTITY PRIMARY KEY,")
        before = before.replace("PRIMARY KEY (game, id)", "UNIQUE (game, id)")
        conn = await asyncpg.connect(store_url)
        try:
            await conn.execute(before)
        finally:
            await conn.close()
    assert before not in (SQLITE_SCHEMA, POSTGRES_SCHEMA)
    store = open_store(store_url)
    await store.open()
    try:
        await store.record("g", [rec(0, applied_us=200)])
        await store.record("g", [rec(1, applied_us=100), rec(2, applied_us=300), rec(0, applied_us=150)])
        assert [(r.id, r.applied_us) for r in await scanned(store)] == [("s1", 100), ("s0", 150), ("s2", 300)]
    finally:
        await store.close()


async def test_a_slips_table_made_before_its_expiry_column_gets_it_and_keeps_its_rows(store_url: str) -> None:
    earlier = "CREATE TABLE slips (game TEXT NOT NULL, id TEXT NOT NULL, applied BIGINT NOT NULL, idx INTEGER NOT NULL,"
    earlier += " fields TEXT NOT NULL, PRIMARY KEY (game, id));"
    row = ("g", "x1", 5, 0, '{"id": "x1", "board": "gone", "ts": "1"}')
    if store_url.startswith("sqlite:"):
        with sqlite3.connect(store_url.removeprefix("sqlite:///")) as db:
            db.executescript(earlier)
            db.execute("INSERT INTO slips VALUES (?,?,?,?,?)", row)
    else:
        conn = await asyncpg.connect(store_url)
        try:
            await conn.execute(earlier)
            await conn.execute("INSERT INTO slips VALUES ($1,$2,$3,$4,$5)", *row)
        finally:
            await conn.close()
    for _ in range(2):  # opened again: the column is there already
        store = open_store(store_url)
        await store.open()
        try:
            assert [s.id for s in await store.slips("g")] == ["x1"]
            # no definition of its board in the log: kept, whatever the clock
            assert await store.prune_slips("g", now_s=2**40, lifetime=lambda slip: 0) == 0
        finally:
            await store.close()
    store = open_store(store_url)
    await store.open()
    try:
        await store.record_slips("g", [Slip("x2", 7, 0, '{"id": "x2"}')])
        # the expiry is given once, when first pruned: x1's stays "never" although the lifetime changed
        assert await store.prune_slips("g", now_s=100, lifetime=lambda slip: 50) == 1
        assert [s.id for s in await store.slips("g")] == ["x1"]
    finally:
        await store.close()


async def test_a_cancelled_compaction_leaves_the_store_usable(store: Store) -> None:
    # A compaction cancelled (a replica stopping) while its BEGIN or first reads still run on the
    # database's side must not leave the connection inside that transaction.
    config = GameConfig(game="g", windows=("alltime",))
    await store.record("g", [rec(i, ts=NOW - 10 * DAY, applied_us=100, index=i) for i in range(3)])
    for ticks in range(1, 5):
        task = asyncio.create_task(store.compact("g", before_ts=NOW - DAY, now_s=NOW // 1000, folder=Folder(config)))
        for _ in range(ticks):  # the cancel lands after 1, 2, 3, 4 steps of the loop: the thing under test
            await asyncio.sleep(0)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    await store.record("g", [rec(9, applied_us=200)])
    await store.compact("g", before_ts=NOW - DAY, now_s=NOW // 1000, folder=Folder(config))
    assert [r.id for r in await scanned(store)] == ["s9"]
