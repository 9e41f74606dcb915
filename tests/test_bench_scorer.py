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
from bench.scorer_durable import Side, report
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


def test_durable_report_compares_each_round_with_its_run_without_the_log() -> None:
    # the figures of two rounds of --durable --baseline REF, as durable_cost leaves them
    base, this = Side("REF"), Side("this tree")
    for side, logged in ((base, (40.0, 30.0)), (this, (45.0, 38.0))):
        side.sustained = {"off": [50.0, 60.0], "sqlite": [logged[0], 54.0], "postgres": [logged[1], 42.0]}
        side.cores = {kind: [[0.5, 0.25, 0.1, 0.0], [0.6, 0.3, 0.12, 0.0]] for kind in side.sustained}
    lines = report([base, this])
    sqlite_ref = next(line for line in lines if line.startswith("| SQLite") and "40" in line)
    assert "| 47 | **-15%** | -20%, -10% |" in sqlite_ref  # 47 against 55 on average; 40/50, 54/60 each round
    [ratios] = [line for line in lines if line.startswith("SQLite") and "each round" in line]
    assert ratios.endswith("REF 0.80×, this tree 0.90×, REF 0.90×, this tree 0.90×")
    # CPU per submission: cores over the rate (0.5 / 50 and 0.6 / 60 of a core: 10,000 µs)
    offs = [line for line in lines if line.startswith("| none | 0.55 |")]
    assert len(offs) == 2 and all("| 10000.0 | 5000.0 | 2000.0 | 0.0 | 17000.0 |" in line for line in offs)
