"""``python -m bench.publish_reads`` at a small scale: every way reads every board (the bench
fails otherwise), the pipelined way holds one connection, and the figures are recorded."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench import results
from bench.publish_reads import main

pytestmark = pytest.mark.timeout(60)


def test_publish_reads_measures_every_way(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(results, "RESULTS", tmp_path)
    assert main(["--boards", "150", "--rounds", "1"]) == 0
    rows = re.findall(r"^\| (.+?) \| ([\d.]+) \| ([\d.]+) \| (\d+) \|$", capsys.readouterr().out, re.M)
    assert [r[0] for r in rows][-1].startswith("pipelined") and len(rows) == 3
    assert int(rows[-1][3]) == 1 and int(rows[1][3]) <= 16
    doc = results.load("publish_reads", tmp_path)
    assert doc is not None and doc["figures"]["boards"] == 150
    ways = doc["figures"]["ways"]
    assert [ways[r[0]]["connections"] for r in rows] == [int(r[3]) for r in rows]
    assert all(isinstance(w["wall_ms"], float) and w["wall_ms"] > 0 for w in ways.values())
    with pytest.raises(SystemExit) as refused:  # a usage error, before any server starts
        main(["--boards", "1"])
    assert refused.value.code == 2
