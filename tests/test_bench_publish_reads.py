"""``python -m bench.publish_reads`` at a small scale: every way reads every board (the bench
fails otherwise), and the pipelined way holds one connection."""

from __future__ import annotations

import re

import pytest

from bench.publish_reads import main

pytestmark = pytest.mark.timeout(60)


def test_publish_reads_measures_every_way(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--boards", "150", "--rounds", "1"]) == 0
    rows = re.findall(r"^\| (.+?) \| ([\d.]+) \| ([\d.]+) \| (\d+) \|$", capsys.readouterr().out, re.M)
    assert [r[0] for r in rows][-1].startswith("pipelined") and len(rows) == 3
    assert int(rows[-1][3]) == 1 and int(rows[1][3]) <= 16
    with pytest.raises(SystemExit) as refused:  # a usage error, before any server starts
        main(["--boards", "1"])
    assert refused.value.code == 2
