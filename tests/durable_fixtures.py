"""Fixtures of the durable score log's tests: a store of each backend (a private PostgreSQL
server per session; skipped, saying why, where PostgreSQL is not installed)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import pytest

from fleet.postgres_server import PostgresServer, postgres_bin
from scorer.durable import Store, open_store

BACKENDS = ("sqlite", "postgres")


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    if postgres_bin() is None:
        pytest.skip("PostgreSQL is not installed (./dev test installs Debian's postgresql where it can)")
    with PostgresServer(durable=False) as server:
        yield server


async def _empty_postgres(url: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute("DROP TABLE IF EXISTS submissions, board_rows, names, actions, slips, audit")
    finally:
        await conn.close()


@pytest.fixture(params=BACKENDS)
async def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/scores.db"
    server: PostgresServer = request.getfixturevalue("postgres_server")
    await _empty_postgres(server.url)
    return server.url


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[Store]:
    s = open_store(store_url)
    await s.open()
    yield s
    await s.close()
