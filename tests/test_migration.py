"""An upgrade from commit 7e58782 (the release before one board model): a Redis it wrote, and the
durable log its scorer kept, are read, written, moderated and rebuilt by this release with every
read equal.

7e58782's own code (its packages and function library, ``git archive``d as bench.replay's
``--baseline-library`` takes a release) writes tests/migration_mix.py's mix into a private
redis-server through its call layouts and its scorer: the game's boards in three windows and
four scopes, a defined board of each encoding (packed one-key asc with metadata, lex two-key, tie
last, int64-wide lex), a tournament, a closed day, a ban, corrections, profiles. Then this
release's library replaces it (FUNCTION LOAD REPLACE) and:

0. the two-key board's keys are bounded so that a board created by this release would be packed:
   its stored record (no ``encoding`` field, as 7e58782 stored it) keeps it lex (its members, its
   members hash) through every step below, as on the fresh Redis, which created it asking for lex;

1. every read (top, around, ranks, rank exact and estimated, stats, previous periods, finals,
   profiles, bans) answers what 7e58782's answered, but a defined board's estimated rank (this
   release estimates it from the board's histogram: ``mix.across_releases``); then the
   upgrade's ``python -m scorer rank-index`` rebuilds the histograms 7e58782 did not keep;
2. the same later writes and moderation give the same answers and reads on that Redis as on a
   fresh one written by this release alone from the same slips;
3. FLUSHALL and a rebuild from the durable log (7e58782's records, then this release's) give
   every read back.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import sys
from argparse import Namespace
from asyncio.subprocess import PIPE
from pathlib import Path
from typing import Any, cast

import pytest

from bench.drain import code_tree
from fleet.redis_server import RedisServer
from leaderboard import Leaderboard, RedisClient, boards, connect
from leaderboard.library import library_code
from scorer import ScorerSettings
from scorer.__main__ import rank_index
from scorer.durable import open_store
from scorer.rebuild import rebuild

from . import migration_mix as mix

RELEASE = "7e58782"
MIX = Path(mix.__file__)

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def release(tmp_path: Path) -> Path:
    """The release's packages and function library, as bench.replay takes a baseline's."""
    (tmp_path / "release").mkdir()
    return code_tree(RELEASE, tmp_path / "release")


async def written_by_release(tree: Path, redis_url: str, store_url: str) -> dict[str, Any]:
    """The mix written by the release's code (in ``tree``) into an empty Redis, its answers and
    reads."""
    # its packages first on the path, before this tree's editable install
    env = {**os.environ, "PYTHONPATH": str(tree)}
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(MIX), redis_url, store_url, cwd=tree, env=env, stdout=PIPE, stderr=PIPE
    )
    async with asyncio.timeout(90):
        out, err = await process.communicate()
    assert process.returncode == 0, err.decode()[-4000:]
    return dict(json.loads(out))


async def written_by_this_release(redis_url: str, store_url: str) -> dict[str, Any]:
    """The mix, then the later writes and moderation, written by this release alone into an
    empty Redis: their answers and the reads after each."""
    r, store = connect(redis_url), open_store(store_url)
    await store.open()
    try:
        answers, reads = await mix.write(r, redis_url, store), await mix.reads(r)
        more = await mix.more(r, redis_url, store)
        return {"answers": answers, "reads": reads, "more": more, "after": await mix.reads(r)}
    finally:
        await store.close()
        await r.aclose()


async def still_lex(r: RedisClient) -> None:
    """The two-key board as 7e58782 stored it: its record without ``encoding``, read as lex (this
    release would pack a new one), its entries lex members (score 0, each in the members hash)."""
    lb = Leaderboard(r, mix.CONFIG)
    stored = await r.hget(mix.CONFIG.keys.boards, "tower")
    assert stored is not None and "encoding" not in json.loads(stored)
    tower = await lb.board_period("alltime", "board:tower", mix.NOW + mix.HOUR)
    assert tower.definition.encoding == boards.LEX and boards.parse(stored).natural == boards.PACKED
    entries = dict(cast(list[tuple[str, float]], await r.zrange(tower.board, 0, -1, withscores=True)))
    assert entries and set(entries.values()) == {0}
    assert sorted(await r.hvals(tower.members)) == sorted(entries)


def differing(got: dict[str, Any], want: dict[str, Any]) -> list[str]:
    """The reads (by name) that differ, so a failure names them before showing values."""
    return sorted(k for k in got.keys() | want.keys() if got.get(k) != want.get(k))


async def test_a_redis_written_by_the_previous_release_reads_writes_and_rebuilds_as_a_fresh_one(
    tmp_path: Path, release: Path
) -> None:
    with RedisServer(tmp_path / "old") as server, RedisServer(tmp_path / "fresh") as other:
        admin = connect(other.url)
        await admin.function_load(library_code(), replace=True)
        await admin.aclose()
        # the release's process and this release's fresh Redis at once: neither reads the other's
        old, fresh = await asyncio.gather(
            written_by_release(release, server.url, f"sqlite:///{tmp_path}/old.db"),
            written_by_this_release(other.url, f"sqlite:///{tmp_path}/fresh.db"),
        )
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
        # this release, from the same slips, answered and read as the release did
        assert fresh["answers"] == old["answers"]
        assert differing(mix.across_releases(fresh["reads"]), mix.across_releases(before)) == []

        r, store = connect(server.url), open_store(f"sqlite:///{tmp_path}/old.db")
        await store.open()
        try:
            # 1. this release's library over the release's data: every read as it answered
            await r.function_load(library_code(), replace=True)
            await still_lex(r)
            assert differing(mix.across_releases(await mix.reads(r)), mix.across_releases(before)) == []
            # the upgrade's one step (docs/operations.md): the rank companions rebuilt, so a lex
            # board's histogram counts the entries the release wrote without one
            with mix.pinned(mix.NOW + mix.HOUR):
                out = await rank_index(ScorerSettings(redis_url=server.url, game=mix.CONFIG), Namespace(window=None))
            assert "skipped" not in out and "board:tower: " in out, out
            # 2. later writes and moderation on the upgraded data: as on the fresh Redis
            assert await mix.more(r, server.url, store) == fresh["more"]
            after = await mix.reads(r)
            assert differing(after, fresh["after"]) == []
            await still_lex(r)
            # 3. FLUSHALL and a rebuild from the durable log, both releases' records: the same reads
            await r.flushall()
            restored = await rebuild(
                r, store, mix.CONFIG, now=mix.NOW + mix.HOUR + 60_000, workers=1, progress_to=io.StringIO()
            )
            assert restored.refused == {}
            assert differing(await mix.reads(r), after) == []
            await still_lex(r)
        finally:
            await store.close()
            await r.aclose()
