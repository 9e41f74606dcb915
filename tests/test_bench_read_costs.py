"""``python -m bench.read_costs`` at a small scale: a row per request type, each with a Redis time
measured, and the per-player figure docs/security.md quotes; the figures recorded as numbers."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench import results
from bench.read_costs import main

pytestmark = pytest.mark.timeout(60)


def test_read_costs_measures_every_request_type(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(results, "RESULTS", tmp_path)
    assert main(["--players", "1000", "--calls", "20"]) == 0
    out = capsys.readouterr().out
    rows = {name: units for name, units, _ in re.findall(r"^(\S.*?)\s+(\d+)\s+[\d.]+\s+([\d.]+)$", out, re.M)}
    assert {"top 100", "ranks of 100", "rank", "around k=25", "stats", "finals 10"} <= set(rows)
    assert rows["ranks of 100"] == "100" and rows["rank"] == "1"
    assert re.search(r"one player or address takes at most [\d.]+ ms of Redis time per second", out)
    doc = results.load("read_costs", tmp_path)
    assert doc is not None and doc["command"] == "python -m bench.read_costs --players 1000 --calls 20"
    figures = doc["figures"]
    assert figures["requests"]["ranks of 100"]["units"] == 100
    assert all(r["redis_us"] > 0 for r in figures["requests"].values())
    assert figures["worst_us_per_unit"] == max(r["redis_us_per_unit"] for r in figures["requests"].values())


@pytest.mark.parametrize("argv", [["--players", "-5"], ["--players", "99"], ["--calls", "0"]])
def test_read_costs_refuses_bad_counts_with_a_usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2 and "must be at least" in capsys.readouterr().err
