"""An upgrade from commit 7e58782 (the release before one board model): a Redis it wrote, and the
durable log its scorer kept, are read, written, moderated and rebuilt by this release with every
read equal.

7e58782's own code (its packages and function library, ``git archive``d as bench.replay's
``--baseline-library`` takes a release) writes tests/migration_mix.py's mix into a private
redis-server through its call layouts and its scorer: the game's boards in three windows and
four scopes, a defined board of each encoding (packed one-key asc with metadata, lex two-key, tie
last, int64-wide lex), a tournament, a closed day, a ban, corrections, profiles. Then this
release's library replaces it (FUNCTION LOAD REPLACE) and:

1. every read (top, around, ranks, rank exact and estimated, stats, previous periods, finals,
   profiles, bans) answers what 7e58782's answered;
2. the same later writes and moderation give the same answers and reads on that Redis as on a
   fresh one written by this release alone from the same slips;
3. FLUSHALL and a rebuild from the durable log (7e58782's records, then this release's) give
   every read back.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench.drain import code_tree
from fleet.redis_server import RedisServer
from leaderboard import connect
from leaderboard.library import library_code
from scorer.durable import open_store
from scorer.rebuild import rebuild

from . import migration_mix as mix

RELEASE = "7e58782"
MIX = Path(mix.__file__)

pytestmark = pytest.mark.timeout(120)


def written_by_release(redis_url: str, store_url: str, scratch: Path) -> dict[str, Any]:
    """The mix written by the release's code into an empty Redis, its answers and reads."""
    scratch.mkdir()
    tree = code_tree(RELEASE, scratch)
    # its packages first on the path, before this tree's editable install
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(
        [sys.executable, str(MIX), redis_url, store_url], cwd=tree, env=env, capture_output=True, text=True, timeout=90
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return dict(json.loads(done.stdout))


def differing(got: dict[str, Any], want: dict[str, Any]) -> list[str]:
    """The reads (by name) that differ, so a failure names them before showing values."""
    return sorted(k for k in got.keys() | want.keys() if got.get(k) != want.get(k))


async def test_a_redis_written_by_the_previous_release_reads_writes_and_rebuilds_as_a_fresh_one(tmp_path: Path) -> None:
    with RedisServer(tmp_path / "redis") as server:
        r = connect(server.url)
        old_store, fresh_store = f"sqlite:///{tmp_path}/old.db", f"sqlite:///{tmp_path}/fresh.db"
        try:
            old = written_by_release(server.url, old_store, tmp_path / "release")
            # sanity: the mix reached every kind of board (an empty read would compare equal)
            before = old["reads"]
            for name in (
                "daily/region:eu/current/top",
                "daily/mode:duo/previous/top",
                "t-cup/global/current/top",
                "daily/board:speedrun/current/top",
                "alltime/board:tower/current/top",
                "daily/board:lap/current/top",
                "alltime/board:ledger/current/top",
            ):
                assert len(before[name]["entries"]) >= 3, name
            assert before["finals/daily/None"] and before["finals/daily/board:tower"]
            assert old["answers"]["ban"]["boards"] > 0 and before["banned"]["p9"] is not None

            # 1. this release's library over the release's data: every read as it answered
            await r.function_load(library_code(), replace=True)
            now = await mix.reads(r)
            assert differing(now, before) == []

            # 2. later writes and moderation on the upgraded data ...
            store = open_store(old_store)
            await store.open()
            try:
                upgraded = await mix.more(r, server.url, store)
                after = await mix.reads(r)
                # 3. ... and a rebuild of all of it from the durable log, both releases' records
                await r.flushall()
                restored = await rebuild(
                    r, store, mix.CONFIG, now=mix.NOW + mix.HOUR + 60_000, progress_to=io.StringIO()
                )
                assert restored.refused == {}
                assert differing(await mix.reads(r), after) == []
            finally:
                await store.close()

            # ... as on a Redis this release wrote alone from the same slips
            await r.flushall()
            store = open_store(fresh_store)
            await store.open()
            try:
                assert await mix.write(r, server.url, store) == old["answers"]
                assert differing(await mix.reads(r), before) == []
                assert await mix.more(r, server.url, store) == upgraded
                assert differing(await mix.reads(r), after) == []
            finally:
                await store.close()
        finally:
            await r.aclose()
