"""``python -m bench.scorer --baseline REF`` at a small scale: (a) with the scorer of a git ref
and with this tree's, each applying what the producer queued, and the backlog it reads from the
scorer's group (the stream may still hold acknowledged entries the next trim drops)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from bench import results
from bench.scorer import main
from leaderboard import GameConfig, Leaderboard, Submission, now_ms
from leaderboard.queue import Queue, backlog

pytestmark = pytest.mark.timeout(120)


async def test_backlog_is_what_the_group_has_not_acknowledged(r: aioredis.Redis, config: GameConfig) -> None:
    stream = config.keys.submissions
    assert await backlog(r, stream) == 0  # no stream yet
    await Queue(r, config).submit_many([Submission(f"s{i}", f"p{i}", i, now_ms()) for i in range(6)])
    assert await backlog(r, stream) == 6  # no group yet: the stream's length
    await r.xgroup_create(stream, "scorer", id="0")
    await r.xreadgroup("scorer", "slow", {stream: ">"}, count=1)  # held pending: nothing trimmed
    taken: Any = await r.xreadgroup("scorer", "fast", {stream: ">"}, count=3)
    await r.execute_command(*Leaderboard.ack_command(stream, "scorer", [sid for sid, _ in taken[0][1]]))
    assert await r.xlen(stream) == 6 and await backlog(r, stream) == 3


def test_baseline_runs_alternate_with_this_tree(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(results, "RESULTS", tmp_path)
    argv = ["--baseline", "HEAD", "--rounds", "1", "--warmup-s", "0.5", "--sustained-s", "1"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "| HEAD | 1 |" in out and "| this tree | 1 |" in out and "this tree / HEAD, each round:" in out
    doc = results.load("scorer-baseline", tmp_path)
    assert doc is not None and doc["figures"]["baseline_ref"] == "HEAD"
    for side in ("baseline", "this"):
        [run] = doc["figures"][side]
        assert run["sustained"] > 0 and run["cores_redis"] > 0 and run["commands"]["fcall"][0] > 0
