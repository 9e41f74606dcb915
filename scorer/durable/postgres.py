"""The production backend: PostgreSQL through asyncpg (``postgresql://user:pass@host/db``).

A batch's first applications are one binary ``COPY`` (one round trip): no conflict check per
row, no array to unpack, about two thirds of the server's CPU per row of an upsert
(docs/benchmarks.md). Its replays (``Record.replayed``: Redis had applied them before, so their
ids may be held, or be in another batch in flight) are one upsert after it, which keeps each id's
earliest application: one INSERT of one unnested array of rows typed as the table's own rows.
``executemany`` would cost a round of the protocol per row; one array per column cost the
scorer three times the CPU (7 µs per row against 2.4, measured), asyncpg checking every value of
an array against abstract base classes (Iterable, Sized) where an array of rows has it check
each row. A ``COPY`` that meets an id held after all (a batch recorded again: its first
recording's answer was lost) is refused whole, nothing written, and the whole batch is the
upsert instead.

Each statement is its own transaction and writes its rows in id order, bytewise (``COLLATE
"C"``, Python's order of str): two transactions writing the same ids (a replay and its original
in two group commits in flight, two replicas) then lock them in the same order and cannot
deadlock, which the ``COPY`` and the upsert of one batch in one transaction could (each locking
its own ids first). A batch's two commits need no atomicity: its rows are acknowledged once both
are durable, and written again they change nothing. The order of application is in ``applied``
and ``idx``, not in ``seq``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import asyncpg

from .records import Action, BoardRow, Compaction, Part, Position, Record, Slip
from .store import Fold, Store, StoreError

# The key is (game, id), the one the upsert looks up; seq needs no index of its own (it is only
# read as the last part of the applied-order index), and each index is paid for on every insert.
# A store made with seq as its primary key and (game, id) unique works the same, one index more.
SCHEMA = """
CREATE TABLE IF NOT EXISTS submissions (
    seq bigint GENERATED ALWAYS AS IDENTITY,
    game text NOT NULL, id text NOT NULL, player text NOT NULL, points bigint NOT NULL,
    ts bigint NOT NULL, op text NOT NULL, name text NOT NULL, region text NOT NULL,
    mode text NOT NULL, replayed boolean NOT NULL, applied bigint NOT NULL, idx integer NOT NULL,
    tournament text NOT NULL,
    PRIMARY KEY (game, id)
);
CREATE INDEX IF NOT EXISTS submissions_applied ON submissions (game, applied, idx, seq);
CREATE TABLE IF NOT EXISTS board_rows (
    game text NOT NULL, "window" text NOT NULL, period text NOT NULL, scope text NOT NULL,
    player text NOT NULL, score bigint NOT NULL, expire_at bigint NOT NULL,
    PRIMARY KEY (game, "window", period, scope, player)
);
CREATE TABLE IF NOT EXISTS names (
    game text NOT NULL, player text NOT NULL, name text NOT NULL,
    PRIMARY KEY (game, player)
);
"""

# The journaled actions (records.Action), ``folded`` once a compaction folded their board effect.
ACTIONS_SCHEMA = """
CREATE TABLE IF NOT EXISTS actions (
    game text NOT NULL, id text NOT NULL, at bigint NOT NULL, fn text NOT NULL, args text NOT NULL,
    folded boolean NOT NULL DEFAULT false,
    PRIMARY KEY (game, id)
);
"""

# The defined boards' slips (records.Slip) and when each expires (NULL: not computed yet; 0:
# never); additive: a store made before it gets it on open, and one made before expire_at that.
SLIPS_SCHEMA = """
CREATE TABLE IF NOT EXISTS slips (
    game text NOT NULL, id text NOT NULL, applied bigint NOT NULL, idx integer NOT NULL, fields text NOT NULL,
    PRIMARY KEY (game, id)
);
ALTER TABLE slips ADD COLUMN IF NOT EXISTS expire_at bigint;
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
_INSERT = f"""
INSERT INTO submissions (game, {_COLUMNS})
SELECT u.game, u.id, u.player, u.points, u.ts, u.op, u.name, u.region, u.mode, u.replayed, u.applied, u.idx,
       u.tournament
FROM unnest($1::submissions[]) AS u
ORDER BY u.id COLLATE "C"
{_UPSERT}
"""
_COPY_COLUMNS = ("game", *_COLUMNS.split(", "))
_BOARD_COLUMNS = '"window", period, scope, player, score, expire_at'


def _part(n: int) -> str:
    """records.part_of in SQL, its two numbers in parameters $n and $n+1: the last byte of the
    player's UTF-8 form (whatever the database's encoding), modulo the first, equals the second."""
    utf8 = "convert_to(player, 'UTF8')"
    return f" AND get_byte({utf8}, octet_length({utf8}) - 1) % ${n} = ${n + 1}"


class PostgresStore(Store):
    unavailable = (
        OSError,
        TimeoutError,
        asyncpg.PostgresConnectionError,  # lost, refused, starting up, shutting down
        asyncpg.InterfaceError,  # a pooled connection that broke under us
        asyncpg.exceptions.AdminShutdownError,
        asyncpg.exceptions.CrashShutdownError,
        asyncpg.exceptions.DeadlockDetectedError,  # the write is idempotent: simply written again
    )

    # Two group commits at a time (the pool's other connections left to the journal, the audit
    # log and compactions): while one waits for its fsync the next one's rows are inserted.
    # Their rows go in id order, so an id in both waits for the first to commit, and then the
    # upsert keeps the earlier application.
    writers = 2

    def __init__(self, url: str) -> None:
        self.url = url
        self._pool: asyncpg.Pool | None = None

    @property
    def pool(self) -> asyncpg.Pool:
        if self._pool is None:
            raise StoreError("the store is not open")
        return self._pool

    async def open(self) -> None:
        if self._pool is not None:
            return
        try:
            self._pool = await asyncpg.create_pool(self.url, min_size=1, max_size=4)
        except (OSError, asyncpg.PostgresError) as exc:
            raise StoreError(f"cannot reach the PostgreSQL store: {exc}") from None
        # two replicas starting together would race on CREATE ... IF NOT EXISTS
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(hashtext('lb-durable-schema'))")
            await conn.execute(SCHEMA)
            await conn.execute(ACTIONS_SCHEMA)
            await conn.execute(SLIPS_SCHEMA)

    async def close(self) -> None:
        if self._pool is not None:
            pool, self._pool = self._pool, None
            await pool.close()

    async def record(self, game: str, records: Sequence[Record]) -> int:
        if not records:
            return 0
        ordered = sorted(records)  # by id (a Record's first field; ids are distinct in a call)
        first = [r for r in ordered if not r.replayed]
        upsert = [r for r in ordered if r.replayed]
        written = 0
        async with self.pool.acquire() as conn:
            if first:
                try:
                    await conn.copy_records_to_table(
                        "submissions", records=[(game, *r) for r in first], columns=_COPY_COLUMNS
                    )
                    written = len(first)
                except asyncpg.UniqueViolationError:  # held after all: the whole batch upserted
                    upsert = ordered
            if upsert:
                # the table's row type, (seq, game, id, ...) in every schema so far: seq None (the
                # INSERT leaves it to the identity), then a Record is the rest, columns in order
                status: str = await conn.execute(_INSERT, [(None, game, *r) for r in upsert])
                written += int(status.rsplit(" ", 1)[1])  # "INSERT 0 <rows>"
        return written

    async def scan(
        self,
        game: str,
        *,
        after: Position | None = None,
        through: Position | None = None,
        part: Part | None = None,
        batch: int = 5_000,
    ) -> AsyncIterator[list[Record]]:
        last = after if after is not None else (-1, -1, -1)
        where, args = "", list[object]([batch])
        if through is not None:
            where, args = " AND (applied, idx, seq) <= ($6, $7, $8)", [*args, *through]
        if part is not None:
            where, args = where + _part(len(args) + 5), [*args, part[1], part[0]]
        while True:
            rows = await self.pool.fetch(
                f"SELECT {_COLUMNS}, seq FROM submissions WHERE game = $1 AND (applied, idx, seq) > ($2, $3, $4){where}"
                " ORDER BY applied, idx, seq LIMIT $5",
                game,
                *last,
                *args,
            )
            if not rows:
                return
            last = (rows[-1][9], rows[-1][10], rows[-1][12])
            yield [Record(*row[:12]) for row in rows]

    async def position(self, game: str, offset: int) -> Position | None:
        row = await self.pool.fetchrow(
            "SELECT applied, idx, seq FROM submissions WHERE game = $1 ORDER BY applied, idx, seq LIMIT 1 OFFSET $2",
            game,
            offset,
        )
        return (int(row[0]), int(row[1]), int(row[2])) if row else None

    async def board_rows(
        self, game: str, *, now_s: int, part: Part | None = None, batch: int = 5_000
    ) -> AsyncIterator[list[BoardRow]]:
        where, args = "", list[object]([game, now_s])
        if part is not None:
            where, args = _part(3), [*args, part[1], part[0]]
        async with self.pool.acquire() as conn, conn.transaction():
            cursor = conn.cursor(
                f"SELECT {_BOARD_COLUMNS} FROM board_rows WHERE game = $1 AND (expire_at = 0 OR expire_at > $2){where}",
                *args,
            )
            rows: list[BoardRow] = []
            async for row in cursor:
                rows.append(BoardRow(*row))
                if len(rows) >= batch:
                    yield rows
                    rows = []
            if rows:
                yield rows

    async def names(self, game: str) -> dict[str, str]:
        rows = await self.pool.fetch("SELECT player, name FROM names WHERE game = $1", game)
        return {row[0]: row[1] for row in rows}

    async def last_before(self, game: str, ts: int) -> Position | None:
        row = await self.pool.fetchrow(
            "SELECT applied, idx, seq FROM submissions WHERE game = $1 AND ts < $2"
            " ORDER BY applied DESC, idx DESC, seq DESC LIMIT 1",
            game,
            ts,
        )
        return (int(row[0]), int(row[1]), int(row[2])) if row else None

    async def count(self, game: str) -> int:
        return int(await self.pool.fetchval("SELECT count(*) FROM submissions WHERE game = $1", game))

    async def record_actions(self, game: str, actions: Sequence[Action]) -> int:
        if not actions:
            return 0
        rows = [a.row(game) for a in actions]
        status: str = await self.pool.execute(
            "INSERT INTO actions (game, id, at, fn, args)"
            " SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[], $5::text[])"
            " ON CONFLICT DO NOTHING",
            *(list(column) for column in zip(*rows, strict=True)),
        )
        return int(status.rsplit(" ", 1)[1])

    async def actions(self, game: str) -> list[Action]:
        rows = await self.pool.fetch(
            "SELECT id, at, fn, args, folded FROM actions WHERE game = $1 ORDER BY at, id", game
        )
        return [Action.of_row(r) for r in rows]

    async def record_slips(self, game: str, slips: Sequence[Slip]) -> int:
        if not slips:
            return 0
        # in id order, as submissions: two replicas writing the same ids cannot deadlock
        rows = sorted((game, *slip) for slip in slips)
        status: str = await self.pool.execute(
            "INSERT INTO slips (game, id, applied, idx, fields)"
            " SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::integer[], $5::text[])"
            " ON CONFLICT (game, id) DO UPDATE SET applied = excluded.applied, idx = excluded.idx,"
            " fields = excluded.fields, expire_at = NULL"
            " WHERE (excluded.applied, excluded.idx) < (slips.applied, slips.idx)",
            *(list(column) for column in zip(*rows, strict=True)),
        )
        return int(status.rsplit(" ", 1)[1])

    async def slips(self, game: str) -> list[Slip]:
        rows = await self.pool.fetch(
            "SELECT id, applied, idx, fields FROM slips WHERE game = $1 ORDER BY applied, idx", game
        )
        return [Slip(*r) for r in rows]

    async def prune_slips(self, game: str, *, now_s: int, lifetime: Callable[[Slip], int]) -> int:
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(hashtext('lb-durable-compact:' || $1))", game)
            fresh = [
                Slip(*r)
                for r in await conn.fetch(
                    "SELECT id, applied, idx, fields FROM slips WHERE game = $1 AND expire_at IS NULL", game
                )
            ]
            if fresh:
                await conn.execute(
                    "UPDATE slips SET expire_at = u.expire_at FROM unnest($2::text[], $3::bigint[]) AS u(id, expire_at)"
                    " WHERE slips.game = $1 AND slips.id = u.id",
                    game,
                    [s.id for s in fresh],
                    [lifetime(s) for s in fresh],
                )
            status: str = await conn.execute(
                "DELETE FROM slips WHERE game = $1 AND expire_at > 0 AND expire_at <= $2", game, now_s
            )
        return int(status.rsplit(" ", 1)[1])

    async def compact(self, game: str, *, before_ts: int, now_s: int, folder: Fold) -> Compaction:
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(hashtext('lb-durable-compact:' || $1))", game)
            cut = await conn.fetchrow(
                "SELECT applied, idx, seq FROM submissions WHERE game = $1 AND ts >= $2"
                " ORDER BY applied, idx, seq LIMIT 1",
                game,
                before_ts,
            )
            where, args = (
                ("game = $1 AND (applied, idx, seq) < ($2, $3, $4)", (game, *cut)) if cut else ("game = $1", (game,))
            )
            raw = await conn.fetch(
                f"SELECT {_COLUMNS} FROM submissions WHERE {where} ORDER BY applied, idx, seq", *args
            )
            if not raw:
                status = await conn.execute(
                    "DELETE FROM board_rows WHERE game = $1 AND expire_at > 0 AND expire_at <= $2", game, now_s
                )
                return Compaction(0, 0, int(status.rsplit(" ", 1)[1]))
            old = [
                BoardRow(*r) for r in await conn.fetch(f"SELECT {_BOARD_COLUMNS} FROM board_rows WHERE game = $1", game)
            ]
            folder.load(old)
            await _fold_actions(conn, game, folder, cut[0] if cut else None)
            folder.apply([Record(*r) for r in raw])
            rows = folder.rows(now_s=now_s)
            await conn.execute("DELETE FROM board_rows WHERE game = $1", game)
            await conn.copy_records_to_table(
                "board_rows",
                records=[(game, r.window, r.period, r.scope, r.player, r.score, r.expire_at_s) for r in rows],
            )
            if folder.names:
                await conn.execute(
                    "INSERT INTO names SELECT $1, * FROM unnest($2::text[], $3::text[])"
                    " ON CONFLICT (game, player) DO UPDATE SET name = excluded.name",
                    game,
                    list(folder.names),
                    list(folder.names.values()),
                )
            await conn.execute(f"DELETE FROM submissions WHERE {where}", *args)
        kept = {(r.window, r.period, r.scope, r.player) for r in rows}
        expired = sum(1 for r in old if (r.window, r.period, r.scope, r.player) not in kept)
        return Compaction(len(raw), len(rows), expired)


async def _fold_actions(conn: Any, game: str, folder: Fold, until: int | None) -> None:
    """Inside a compaction: hand the actions up to ``until`` (Redis's clock of the first raw row
    kept; None: all) to ``folder`` and mark them folded, in the compaction's transaction; and the
    tournaments folded before, whose slips may still be raw."""
    where, args = (
        ("game = $1 AND NOT folded", (game,))
        if until is None
        else ("game = $1 AND NOT folded AND at <= $2", (game, until))
    )
    known = await conn.fetch(
        "SELECT id, at, fn, args, folded FROM actions WHERE game = $1 AND folded AND fn = 'tournament'", game
    )
    rows = await conn.fetch(f"UPDATE actions SET folded = true WHERE {where} RETURNING id, at, fn, args, false", *args)
    if rows or known:
        folder.take([Action.of_row(r) for r in [*rows, *known]])
