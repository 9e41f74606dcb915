"""The production backend: PostgreSQL through asyncpg (``postgresql://user:pass@host/db``).

A batch is one INSERT of unnested arrays (one round trip, one statement, however many rows):
``executemany`` would cost a round of the protocol per row.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import asyncpg

from .base import BoardRow, Compaction, Record, Store, StoreError
from .fold import Folder

SCHEMA = """
CREATE TABLE IF NOT EXISTS submissions (
    seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    game text NOT NULL, id text NOT NULL, player text NOT NULL, points bigint NOT NULL,
    ts bigint NOT NULL, op text NOT NULL, name text NOT NULL, region text NOT NULL,
    mode text NOT NULL, replayed boolean NOT NULL,
    UNIQUE (game, id)
);
CREATE INDEX IF NOT EXISTS submissions_ts ON submissions (game, ts);
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

_COLUMNS = "id, player, points, ts, op, name, region, mode, replayed"
_INSERT = f"""
INSERT INTO submissions (game, {_COLUMNS})
SELECT $1, u.id, u.player, u.points, u.ts, u.op, u.name, u.region, u.mode, u.replayed
FROM unnest($2::text[], $3::text[], $4::bigint[], $5::bigint[], $6::text[], $7::text[],
                           $8::text[], $9::text[], $10::boolean[]) WITH ORDINALITY
     AS u(id, player, points, ts, op, name, region, mode, replayed, n)
ORDER BY n
ON CONFLICT (game, id) DO NOTHING
"""
_BOARD_COLUMNS = '"window", period, scope, player, score, expire_at'


class PostgresStore(Store):
    unavailable = (
        OSError,
        TimeoutError,
        asyncpg.PostgresConnectionError,  # lost, refused, starting up, shutting down
        asyncpg.InterfaceError,  # a pooled connection that broke under us
        asyncpg.exceptions.AdminShutdownError,
        asyncpg.exceptions.CrashShutdownError,
    )

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

    async def close(self) -> None:
        if self._pool is not None:
            pool, self._pool = self._pool, None
            await pool.close()

    async def record(self, game: str, records: Sequence[Record]) -> int:
        if not records:
            return 0
        columns: list[list[Any]] = [[] for _ in range(9)]
        for r in records:
            for column, value in zip(
                columns, (r.id, r.player, r.points, r.ts, r.op, r.name, r.region, r.mode, r.replayed), strict=True
            ):
                column.append(value)
        status: str = await self.pool.execute(_INSERT, game, *columns)
        return int(status.rsplit(" ", 1)[1])  # "INSERT 0 <rows>"

    async def scan(self, game: str, *, batch: int = 5_000) -> AsyncIterator[list[tuple[int, Record]]]:
        after = 0
        while True:
            rows = await self.pool.fetch(
                f"SELECT seq, {_COLUMNS} FROM submissions WHERE game = $1 AND seq > $2 ORDER BY seq LIMIT $3",
                game, after, batch,
            )  # fmt: skip
            if not rows:
                return
            after = rows[-1][0]
            yield [(row[0], Record(*row[1:])) for row in rows]

    async def board_rows(self, game: str, *, now_s: int, batch: int = 5_000) -> AsyncIterator[list[BoardRow]]:
        async with self.pool.acquire() as conn, conn.transaction():
            cursor = conn.cursor(
                f"SELECT {_BOARD_COLUMNS} FROM board_rows WHERE game = $1 AND (expire_at = 0 OR expire_at > $2)",
                game, now_s,
            )  # fmt: skip
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

    async def last_seq_before(self, game: str, ts: int) -> int:
        seq = await self.pool.fetchval("SELECT max(seq) FROM submissions WHERE game = $1 AND ts < $2", game, ts)
        return int(seq or 0)

    async def count(self, game: str) -> int:
        return int(await self.pool.fetchval("SELECT count(*) FROM submissions WHERE game = $1", game))

    async def compact(self, game: str, *, before_ts: int, now_s: int, folder: Folder) -> Compaction:
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(hashtext('lb-durable-compact:' || $1))", game)
            cut = await conn.fetchval("SELECT min(seq) FROM submissions WHERE game = $1 AND ts >= $2", game, before_ts)
            where, args = ("game = $1 AND seq < $2", (game, cut)) if cut is not None else ("game = $1", (game,))
            raw = await conn.fetch(f"SELECT {_COLUMNS} FROM submissions WHERE {where} ORDER BY seq", *args)
            if not raw:
                status = await conn.execute(
                    "DELETE FROM board_rows WHERE game = $1 AND expire_at > 0 AND expire_at <= $2", game, now_s
                )
                return Compaction(0, 0, int(status.rsplit(" ", 1)[1]))
            old = [
                BoardRow(*r) for r in await conn.fetch(f"SELECT {_BOARD_COLUMNS} FROM board_rows WHERE game = $1", game)
            ]
            folder.load(old)
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
                    game, list(folder.names), list(folder.names.values()),
                )  # fmt: skip
            await conn.execute(f"DELETE FROM submissions WHERE {where}", *args)
        kept = {(r.window, r.period, r.scope, r.player) for r in rows}
        expired = sum(1 for r in old if (r.window, r.period, r.scope, r.player) not in kept)
        return Compaction(len(raw), len(rows), expired)
