"""``python -m bench.publish_fanout`` at a small scale: every publish reaches every subscriber
(the bench fails otherwise), the table has a row per subscriber count, and --no-write records
nothing."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench import results
from bench.publish_fanout import main

pytestmark = pytest.mark.timeout(60)


def test_publish_fanout_measures_every_subscriber_count(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(results, "RESULTS", tmp_path)
    assert main(["--subscribers", "1,3", "--publishes", "500", "--rounds", "2", "--no-write"]) == 0
    out = capsys.readouterr().out
    rows = re.findall(r"^\| (\d+) \| ([\d.]+), ([\d.]+) \| ([\d.]+) \| ([\d.]+)× \|$", out, re.M)
    assert [int(r[0]) for r in rows] == [1, 3]
    assert all(float(x) > 0 for r in rows for x in r[1:3]) and rows[0][4] == "1.0"
    assert list(tmp_path.iterdir()) == []  # --no-write
    with pytest.raises(SystemExit) as refused:  # a usage error, before any server starts
        main(["--subscribers", "1,0"])
    assert refused.value.code == 2 and "at least 1, got '0'" in capsys.readouterr().err
