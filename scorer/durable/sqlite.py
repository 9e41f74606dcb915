"""The embedded backend: one SQLite file in WAL mode (``sqlite:///var/scores.db``), through
aiosqlite (the database runs on one thread of its own; the event loop never waits on the disk).

WAL with ``synchronous=NORMAL``: a commit is durable against a crash of the process (the scorer
acknowledges only after it), and against a power loss up to the last checkpoint; ``FULL`` would
cost an fsync per batch for the power-loss case (docs/operations.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Sequence
from itertools import chain
from pathlib import Path
from typing import Any

import aiosqlite

from .records import Action, BoardRow, Compaction, Part, Position, Record, Slip
from .store import Fold, Store, StoreError

# seq is the rowid without AUTOINCREMENT, which would read and write sqlite_sequence on every
# insert. SQLite then gives a new row max(seq) + 1: larger than the seq of every row present, which
# is all the order (applied, idx, seq) needs of it. A seq freed by a compaction (the rows with the
# largest seqs folded away) may be handed out again, to a row that sorts after every row still
# there; nothing keeps a deleted row's position. A store created with AUTOINCREMENT (before this
# schema) keeps it: CREATE ... IF NOT EXISTS leaves it as it is, same columns, same order.
SCHEMA = """
CREATE TABLE IF NOT EXISTS submissions (
    seq INTEGER PRIMARY KEY,
    game TEXT NOT NULL, id TEXT NOT NULL, player TEXT NOT NULL, points INTEGER NOT NULL,
    ts INTEGER NOT NULL, op TEXT NOT NULL, name TEXT NOT NULL, region TEXT NOT NULL,
    mode TEXT NOT NULL, replayed INTEGER NOT NULL, applied INTEGER NOT NULL, idx INTEGER NOT NULL,
    tournament TEXT NOT NULL,
    UNIQUE (game, id)
);
CREATE INDEX IF NOT EXISTS submissions_applied ON submissions (game, applied, idx, seq);
CREATE TABLE IF NOT EXISTS board_rows (
    game TEXT NOT NULL, window TEXT NOT NULL, period TEXT NOT NULL, scope TEXT NOT NULL,
    player TEXT NOT NULL, score INTEGER NOT NULL, expire_at INTEGER NOT NULL,
    PRIMARY KEY (game, window, period, scope, player)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS names (
    game TEXT NOT NULL, player TEXT NOT NULL, name TEXT NOT NULL,
    PRIMARY KEY (game, player)
) WITHOUT ROWID;
"""

# The journaled actions (records.Action), ``folded`` once a compaction folded their board effect.
ACTIONS_SCHEMA = """
CREATE TABLE IF NOT EXISTS actions (
    game TEXT NOT NULL, id TEXT NOT NULL, at INTEGER NOT NULL, fn TEXT NOT NULL, args TEXT NOT NULL,
    folded INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (game, id)
) WITHOUT ROWID;
"""

# The defined boards' slips (records.Slip) and when each expires (NULL: not computed yet; 0:
# never); additive: a store made before it gets it on open, and one made before expire_at that.
SLIPS_SCHEMA = """
CREATE TABLE IF NOT EXISTS slips (
    game TEXT NOT NULL, id TEXT NOT NULL, applied INTEGER NOT NULL, idx INTEGER NOT NULL, fields TEXT NOT NULL,
    expire_at INTEGER,
    PRIMARY KEY (game, id)
) WITHOUT ROWID;
"""

# No index on ts: every write pays for each index, and the two queries that filter on ts (a
# rebuild's cut, a compaction's) walk the applied-order index from one end, once per run.
_COLUMNS = "id, player, points, ts, op, name, region, mode, replayed, applied, idx, tournament"
# An id already held keeps the earlier of its two applications: the row is replaced only by one
# applied before it (store.py says why a later copy can arrive first).
_UPSERT = (
    "ON CONFLICT (game, id) DO UPDATE SET "
    + ", ".join(f"{column} = excluded.{column}" for column in _COLUMNS.split(", ")[1:])
    + " WHERE (excluded.applied, excluded.idx) < (submissions.applied, submissions.idx)"
)
_ROW = "(" + ",".join("?" * (1 + len(_COLUMNS.split(", ")))) + ")"
_INSERT_ROW = f"INSERT INTO submissions (game, {_COLUMNS}) VALUES {_ROW} {_UPSERT}"
# Rows per INSERT of a batch: 64 rows of 13 values, below the 999 variables of the oldest SQLite.
# SQLite inserts a statement's rows one after another, each meeting the rows before it as a
# statement of its own would (the upsert included).
_ROWS = 64
_INSERT_ROWS = f"INSERT INTO submissions (game, {_COLUMNS}) VALUES {','.join([_ROW] * _ROWS)} {_UPSERT}"
# records.part_of in SQL: the last hex digit of the player's UTF-8 bytes, as a number, modulo n
_PART = " AND (instr('0123456789ABCDEF', substr(hex(player), -1)) - 1) % ? = ?"


class SQLiteStore(Store):
    # locked past busy_timeout, disk full, I/O errors
    unavailable = (OSError, TimeoutError, sqlite3.OperationalError)

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.url = f"sqlite:///{self.path}"
        self._db: aiosqlite.Connection | None = None
        # One connection, shared by the scorer's loops: its write transactions must not interleave
        # (a second BEGIN on it would fail), so they take turns. SQLite has one writer anyway.
        self._writing = asyncio.Lock()

    @property
    def db(self) -> aiosqlite.Connection:
        if self._db is None:
            raise StoreError("the store is not open")
        return self._db

    async def open(self) -> None:
        if self._db is not None:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # isolation_level=None: transactions are explicit (BEGIN IMMEDIATE below), so a
            # writer takes the lock before reading what it will rewrite.
            self._db = await aiosqlite.connect(self.path, isolation_level=None)
        except (OSError, aiosqlite.Error) as exc:
            raise StoreError(f"cannot open SQLite store {self.path}: {exc}") from None
        await self.db.execute("PRAGMA journal_mode=WAL")
        await self.db.execute("PRAGMA synchronous=NORMAL")
        await self.db.execute("PRAGMA busy_timeout=10000")  # other replicas on the same file
        # Most of a row's cost is its insert into the (game, id) index, at a place as random as
        # the ids: 64 MiB of page cache (2 MiB by default) keeps that index's pages in memory
        # for millions of rows, instead of reading them back from the OS at each insert.
        await self.db.execute("PRAGMA cache_size=-65536")
        await self.db.executescript(SCHEMA)
        await self.db.executescript(ACTIONS_SCHEMA)
        await self.db.executescript(SLIPS_SCHEMA)
        async with self.db.execute("SELECT 1 FROM pragma_table_info('slips') WHERE name = 'expire_at'") as cursor:
            has_expiry = await cursor.fetchone()
        if not has_expiry:
            try:
                await self.db.execute("ALTER TABLE slips ADD COLUMN expire_at INTEGER")
            except sqlite3.OperationalError as exc:  # another replica added it first
                if "duplicate column" not in str(exc):
                    raise

    async def close(self) -> None:
        if self._db is not None:
            db, self._db = self._db, None
            await db.close()

    async def record(self, game: str, records: Sequence[Record]) -> int:
        if not records:
            return 0
        # a Record is its row, columns in order (the flag stored as 0 / 1)
        rows = [(game, *r) for r in records]
        # _ROWS rows per statement, the rest one by one: with a statement per row (a step, a reset,
        # a release and a retake of the GIL each) the database's thread took 4.1-4.3 µs of CPU per
        # row, against 3.0-3.4 (docs/benchmarks.md)
        whole = len(rows) - len(rows) % _ROWS
        async with self._transaction() as db:
            before = db.total_changes
            if whole:
                await db.executemany(
                    _INSERT_ROWS, (tuple(chain.from_iterable(rows[i : i + _ROWS])) for i in range(0, whole, _ROWS))
                )
            if whole < len(rows):
                await db.executemany(_INSERT_ROW, rows[whole:])
            return db.total_changes - before

    async def _insert_many(self, sql: str, rows: Sequence[tuple[object, ...]]) -> int:
        """``sql`` once per row in one write transaction; the rows it wrote, once committed."""
        async with self._transaction() as db:
            before = db.total_changes
            await db.executemany(sql, rows)
            return db.total_changes - before

    @contextlib.asynccontextmanager
    async def _transaction(self) -> AsyncIterator[aiosqlite.Connection]:
        """One write transaction (BEGIN IMMEDIATE ... COMMIT), this process's writers taking
        turns; rolled back on any error or cancellation."""
        async with self._writing:
            db = self.db
            try:
                await db.execute("BEGIN IMMEDIATE")
                yield db
                await db.execute("COMMIT")
            except BaseException:
                # Also when cancelled waiting for BEGIN, which still runs on the database's thread
                # (the ROLLBACK queues behind it): else the connection stays in that transaction
                # and every later BEGIN fails. No transaction to roll back if BEGIN itself failed.
                with contextlib.suppress(sqlite3.OperationalError):
                    await db.execute("ROLLBACK")
                raise

    async def scan(
        self,
        game: str,
        *,
        after: Position | None = None,
        through: Position | None = None,
        part: Part | None = None,
        batch: int = 5_000,
    ) -> AsyncIterator[list[Record]]:
        where, args = "", list[object]([game])
        for compare, bound in ((">", after), ("<=", through)):
            if bound is not None:
                where += f" AND (applied, idx, seq) {compare} (?, ?, ?)"
                args += bound
        if part is not None:
            where, args = where + _PART, [*args, part[1], part[0]]
        # One statement (a read transaction: one snapshot of the log), read a chunk ahead: the
        # connection's thread steps through the next chunk while the caller works on this one.
        async with self.db.execute(
            f"SELECT {_COLUMNS} FROM submissions WHERE game = ?{where} ORDER BY applied, idx, seq", args
        ) as cursor:
            ahead = await _started(cursor.fetchmany(batch))
            try:
                while rows := await ahead:
                    ahead = await _started(cursor.fetchmany(batch))
                    yield [_record(row) for row in rows]
            finally:
                ahead.cancel()

    async def position(self, game: str, offset: int) -> Position | None:
        async with self.db.execute(
            "SELECT applied, idx, seq FROM submissions WHERE game = ? ORDER BY applied, idx, seq LIMIT 1 OFFSET ?",
            (game, offset),
        ) as cursor:
            row = await cursor.fetchone()
        return (int(row[0]), int(row[1]), int(row[2])) if row else None

    async def board_rows(
        self, game: str, *, now_s: int, part: Part | None = None, batch: int = 5_000
    ) -> AsyncIterator[list[BoardRow]]:
        where, args = "", list[object]([game, now_s])
        if part is not None:
            where, args = _PART, [*args, part[1], part[0]]
        async with self.db.execute(
            "SELECT window, period, scope, player, score, expire_at FROM board_rows"
            f" WHERE game = ? AND (expire_at = 0 OR expire_at > ?){where}",
            args,
        ) as cursor:
            while rows := list(await cursor.fetchmany(batch)):
                yield [BoardRow(*row) for row in rows]

    async def names(self, game: str) -> dict[str, str]:
        async with self.db.execute("SELECT player, name FROM names WHERE game = ?", (game,)) as cursor:
            return {player: name for player, name in await cursor.fetchall()}

    async def last_before(self, game: str, ts: int) -> Position | None:
        async with self.db.execute(
            "SELECT applied, idx, seq FROM submissions WHERE game = ? AND ts < ?"
            " ORDER BY applied DESC, idx DESC, seq DESC LIMIT 1",
            (game, ts),
        ) as cursor:
            row = await cursor.fetchone()
        return (int(row[0]), int(row[1]), int(row[2])) if row else None

    async def count(self, game: str) -> int:
        async with self.db.execute("SELECT count(*) FROM submissions WHERE game = ?", (game,)) as cursor:
            row = await cursor.fetchone()
        return int(row[0]) if row else 0

    async def record_actions(self, game: str, actions: Sequence[Action]) -> int:
        if not actions:
            return 0
        return await self._insert_many(
            "INSERT INTO actions (game, id, at, fn, args) VALUES (?,?,?,?,?) ON CONFLICT DO NOTHING",
            [a.row(game) for a in actions],
        )

    async def actions(self, game: str) -> list[Action]:
        async with self.db.execute(
            "SELECT id, at, fn, args, folded FROM actions WHERE game = ? ORDER BY at, id", (game,)
        ) as cursor:
            return [Action.of_row(r) for r in await cursor.fetchall()]

    async def record_slips(self, game: str, slips: Sequence[Slip]) -> int:
        if not slips:
            return 0
        return await self._insert_many(
            "INSERT INTO slips (game, id, applied, idx, fields) VALUES (?,?,?,?,?)"
            " ON CONFLICT (game, id) DO UPDATE SET applied = excluded.applied, idx = excluded.idx,"
            " fields = excluded.fields, expire_at = NULL"
            " WHERE (excluded.applied, excluded.idx) < (slips.applied, slips.idx)",
            [(game, *slip) for slip in slips],
        )

    async def slips(self, game: str) -> list[Slip]:
        async with self.db.execute(
            "SELECT id, applied, idx, fields FROM slips WHERE game = ? ORDER BY applied, idx", (game,)
        ) as cursor:
            return [Slip(*row) for row in await cursor.fetchall()]

    async def prune_slips(self, game: str, *, now_s: int, lifetime: Callable[[Slip], int]) -> int:
        async with self._transaction() as db:
            async with db.execute(
                "SELECT id, applied, idx, fields FROM slips WHERE game = ? AND expire_at IS NULL", (game,)
            ) as cursor:
                fresh = [Slip(*row) for row in await cursor.fetchall()]
            await db.executemany(
                "UPDATE slips SET expire_at = ? WHERE game = ? AND id = ?", [(lifetime(s), game, s.id) for s in fresh]
            )
            cursor = await db.execute(
                "DELETE FROM slips WHERE game = ? AND expire_at > 0 AND expire_at <= ?", (game, now_s)
            )
            return max(cursor.rowcount, 0)

    async def _fold_actions(self, game: str, folder: Fold, until: int | None) -> None:
        """Inside a compaction: hand the actions up to ``until`` (Redis's clock of the first raw
        row kept; None: all) to ``folder`` and mark them folded, in the compaction's transaction;
        and the tournaments folded before, whose slips may still be raw."""
        where, args = (
            ("game = ? AND NOT folded", (game,))
            if until is None
            else ("game = ? AND NOT folded AND at <= ?", (game, until))
        )
        async with self.db.execute(
            "SELECT id, at, fn, args, folded FROM actions WHERE game = ? AND folded AND fn = 'tournament'", (game,)
        ) as cursor:
            known = [Action.of_row(r) for r in await cursor.fetchall()]
        async with self.db.execute(f"SELECT id, at, fn, args, folded FROM actions WHERE {where}", args) as cursor:
            found = [Action.of_row(r) for r in await cursor.fetchall()]
        if found or known:
            folder.take(found + known)
            await self.db.execute(f"UPDATE actions SET folded = 1 WHERE {where}", args)

    async def compact(self, game: str, *, before_ts: int, now_s: int, folder: Fold) -> Compaction:
        async with self._transaction() as db:
            async with db.execute(
                "SELECT applied, idx, seq FROM submissions WHERE game = ? AND ts >= ?"
                " ORDER BY applied, idx, seq LIMIT 1",
                (game, before_ts),
            ) as cursor:
                row = await cursor.fetchone()
            where, args = (
                ("game = ? AND (applied, idx, seq) < (?, ?, ?)", (game, *row)) if row else ("game = ?", (game,))
            )
            async with db.execute(
                f"SELECT {_COLUMNS} FROM submissions WHERE {where} ORDER BY applied, idx, seq", args
            ) as cursor:
                records = [_record(r) for r in await cursor.fetchall()]
            if not records:
                cursor = await db.execute(
                    "DELETE FROM board_rows WHERE game = ? AND expire_at > 0 AND expire_at <= ?", (game, now_s)
                )
                return Compaction(0, 0, max(cursor.rowcount, 0))
            async with db.execute(
                "SELECT window, period, scope, player, score, expire_at FROM board_rows WHERE game = ?", (game,)
            ) as cursor:
                old = [BoardRow(*r) for r in await cursor.fetchall()]
            folder.load(old)
            await self._fold_actions(game, folder, row[0] if row else None)
            folder.apply(records)
            rows = folder.rows(now_s=now_s)
            await db.execute("DELETE FROM board_rows WHERE game = ?", (game,))
            await db.executemany(
                "INSERT INTO board_rows VALUES (?,?,?,?,?,?,?)",
                [(game, r.window, r.period, r.scope, r.player, r.score, r.expire_at_s) for r in rows],
            )
            await db.executemany(
                "INSERT INTO names VALUES (?,?,?) ON CONFLICT (game, player) DO UPDATE SET name = excluded.name",
                [(game, player, name) for player, name in folder.names.items()],
            )
            await db.execute(f"DELETE FROM submissions WHERE {where}", args)
        kept = {(r.window, r.period, r.scope, r.player) for r in rows}
        expired = sum(1 for r in old if (r.window, r.period, r.scope, r.player) not in kept)
        return Compaction(len(records), len(rows), expired)


_new = tuple.__new__


async def _started(fetch: Coroutine[Any, Any, Iterable[sqlite3.Row]]) -> asyncio.Task[Iterable[sqlite3.Row]]:
    """``fetch`` as a task that has handed its work to the connection's thread already (a task
    starts only when the loop runs; the caller may compute for a while before it awaits)."""
    task = asyncio.ensure_future(fetch)
    await asyncio.sleep(0)
    return task


def _record(row: Sequence[Any]) -> Record:
    # the columns are declared INTEGER and TEXT, in Record's order: SQLite hands back int and str
    # already, and the row becomes a Record in one C call (the flag stored as 0 / 1 made a bool)
    return _new(Record, (*row[:8], row[8] != 0, *row[9:]))
