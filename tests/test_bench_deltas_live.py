"""``python -m bench.deltas_live`` at a small scale: a scorer of a git ref and this tree's, each with
the demo's traffic and one delta socket; on a board whose top N changes several times a tick the
socket is sent deltas that apply, not full snapshots."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import results
from bench.deltas_live import main

pytestmark = pytest.mark.timeout(180)


def test_a_busy_board_reaches_a_delta_socket_as_deltas_on_both_sides(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(results, "RESULTS", tmp_path)
    argv = ["--baseline", "HEAD", "--rate", "300", "--warmup", "5", "--seconds", "6"]
    assert main(argv) == 0
    assert "weekly global board, 300 matches/s, 6 s per side and round" in capsys.readouterr().out
    doc = results.load("deltas-live-300", tmp_path)
    assert doc is not None and doc["command"] == "python -m bench.deltas_live " + " ".join(argv)
    sides = doc["figures"]["sides"]
    assert [s["name"] for s in sides] == ["scorer@HEAD", "scorer (this tree)"]
    for side in sides:
        assert side["mismatches"] == 0
        # a publish after several batches moved the top 10 is still the next version: a delta
        assert side["deltas"] >= 1 and side["share"] >= 0.5, side


@pytest.mark.parametrize(
    "argv", [["--rate", "0"], ["--rounds", "0"], ["--seconds", "0"], ["--baseline", "no-such-ref"]]
)
def test_bad_arguments_get_a_usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert "error:" in capsys.readouterr().err
