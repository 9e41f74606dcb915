"""The same batches of slips leave the same Redis behind in this release's function library as in
7e58782's (the release before one board model): every reply, and every key's type, content and
expiry. The batches are bench.replay's (slips through the real queue, then each release's own
encoder), on the game's boards kept globally and per region, so the one pass, the general path
(the first batch of a region), the held reads, the chunked writes and the flushes all run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import redis

from bench.drain import code_tree, tree_library
from bench.replay import Call, capture, encoded
from fleet.redis_server import RedisServer
from leaderboard.library import library_code

RELEASE = "7e58782"

pytestmark = pytest.mark.timeout(120)


def contents(r: Any, key: bytes) -> Any:
    kind = r.type(key).decode()
    if kind == "zset":
        return r.zrange(key, 0, -1, withscores=True)
    if kind == "hash":
        return sorted(r.hgetall(key).items())
    if kind == "set":
        return sorted(r.smembers(key))
    if kind == "stream":  # entry ids are the times they were added at
        return [fields for _, fields in r.xrange(key)]
    return r.dump(key)  # a string: a distinct-player log, a counter


def written(code: str, calls: list[Call], scratch: Path) -> tuple[list[Any], dict[bytes, Any]]:
    """Each call's reply, and every key the calls left: its type, contents and expiry."""
    scratch.mkdir()
    with RedisServer(scratch) as server:
        r: Any = redis.Redis.from_url(server.url)
        r.function_load(code, replace=True)
        replies = [r.fcall(function, *args) for function, args in calls]
        state = {key: (r.type(key), contents(r, key), r.pexpiretime(key)) for key in r.keys("*")}
        r.close()
    return replies, state


@pytest.mark.parametrize(("players", "regions"), [("uniform", 30), ("pareto", 0)])
def test_the_same_batches_leave_the_same_redis_as_the_release_before(
    tmp_path: Path, players: str, regions: int
) -> None:
    batches, now = capture(2000, 1, 500, players, regions)
    (tmp_path / "release").mkdir()
    tree = code_tree(RELEASE, tmp_path / "release")
    theirs = written(tree_library(tree), encoded(batches, now, tree), tmp_path / "theirs")
    ours = written(library_code(), encoded(batches, now, None), tmp_path / "ours")
    assert ours[0] == theirs[0]
    assert sorted(ours[1]) == sorted(theirs[1])
    assert [key for key in theirs[1] if ours[1][key] != theirs[1][key]] == []
    # what was compared: every slip written (none refused), the region boards apart
    assert {status for reply in theirs[0] for status in reply} == {b"ok"}
    assert len([key for key in theirs[1] if b":board:" in key and b":region:r" in key]) == 3 * regions
