"""The audit log's table in the durable store: the moderators' actions (leaderboard/audit.py),
one row per entry of ``lb:{g}:audit`` keyed by its stream id, so a rebuild writes the stream
back exactly (scorer/auditlog.py). Added beside the store's tables, not into them: a store made
before it gets it when the audit log first opens it (``CREATE TABLE IF NOT EXISTS``).

Rows are JSON text of the entry's fields (``AuditEntry.fields``): the audit log's shape is the
stream's, and a new field needs no new column.
"""

from __future__ import annotations

from collections.abc import Sequence

import orjson

from leaderboard.audit import AuditEntry

from .store import Store, StoreError

_SQLITE = """
CREATE TABLE IF NOT EXISTS audit (
    game TEXT NOT NULL, id TEXT NOT NULL, ms INTEGER NOT NULL, seq INTEGER NOT NULL, fields TEXT NOT NULL,
    PRIMARY KEY (game, ms, seq)
) WITHOUT ROWID;
"""
_POSTGRES = """
CREATE TABLE IF NOT EXISTS audit (
    game text NOT NULL, id text NOT NULL, ms bigint NOT NULL, seq bigint NOT NULL, fields text NOT NULL,
    PRIMARY KEY (game, ms, seq)
);
"""


def order(stream_id: str) -> tuple[int, int]:
    """A stream id as the table (and a stream) orders it: ``<ms>-<seq>``, numbers (text would put 10 before 9)."""
    ms, _, seq = stream_id.partition("-")
    return int(ms), int(seq or 0)


class AuditStore:
    """The audit table of ``store`` (an opened SQLiteStore or PostgresStore)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._ready = False

    async def _open(self) -> None:
        if self._ready:
            return
        from .postgres import PostgresStore
        from .sqlite import SQLiteStore

        await self.store.open()
        if isinstance(self.store, SQLiteStore):
            await self.store.db.executescript(_SQLITE)
        elif isinstance(self.store, PostgresStore):
            async with self.store.pool.acquire() as conn, conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock(hashtext('lb-durable-schema'))")
                await conn.execute(_POSTGRES)
        else:
            raise StoreError(f"no audit table for {type(self.store).__name__}")
        self._ready = True

    async def record(self, game: str, entries: Sequence[AuditEntry]) -> int:
        """Keep ``entries`` (one transaction); an id already held is left as it is. Rows written."""
        if not entries:
            return 0
        await self._open()
        rows = [(game, e.id, *order(e.id), orjson.dumps(e.fields()).decode()) for e in entries]
        from .postgres import PostgresStore
        from .sqlite import SQLiteStore

        if isinstance(self.store, SQLiteStore):  # the store's own write transaction, its writers taking turns
            return await self.store._insert_many(
                "INSERT INTO audit (game, id, ms, seq, fields) VALUES (?,?,?,?,?) ON CONFLICT DO NOTHING", rows
            )
        assert isinstance(self.store, PostgresStore)
        status: str = await self.store.pool.execute(
            "INSERT INTO audit (game, id, ms, seq, fields)"
            " SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::text[])"
            " ON CONFLICT DO NOTHING",
            *(list(column) for column in zip(*rows, strict=True)),
        )
        return int(status.rsplit(" ", 1)[1])

    async def entries(self, game: str) -> list[AuditEntry]:
        """Every entry kept for ``game``, oldest first."""
        await self._open()
        sql = "SELECT id, fields FROM audit WHERE game = {} ORDER BY ms, seq"
        from .sqlite import SQLiteStore

        if isinstance(self.store, SQLiteStore):
            async with self.store.db.execute(sql.format("?"), (game,)) as cursor:
                rows = list(await cursor.fetchall())
        else:
            from .postgres import PostgresStore

            assert isinstance(self.store, PostgresStore)
            rows = list(await self.store.pool.fetch(sql.format("$1"), game))
        return [AuditEntry.of(str(r[0]), orjson.loads(r[1])) for r in rows]
