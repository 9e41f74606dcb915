"""``python -m bench.instructions`` at a small scale: the batches replayed into redis-servers run by
callgrind, and a library that does more per slip counted as doing more."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from bench import results
from bench.instructions import main
from leaderboard.library import library_code

pytestmark = pytest.mark.timeout(180)

PASS = "  return function(id, player, points_text, values, ts_text, name)\n"  # lua/common.lua's slip pass


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed (./dev installs it)")
def test_a_library_doing_more_per_slip_counts_more_instructions(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(results, "RESULTS", tmp_path)
    code = library_code()
    assert code.count(PASS) == 1
    slower = tmp_path / "library.lua"  # this tree's library, an empty loop of 200 turns added to every common slip
    slower.write_text(code.replace(PASS, PASS + "    for _ = 1, 200 do end\n"))
    argv = ["--submissions", "1000", "--baseline-library", str(slower)]
    assert main(argv) == 0
    assert "== 1,000 submissions in 2 batches of 500, uniform players" in capsys.readouterr().out
    doc = results.load("instructions", tmp_path)
    assert doc is not None and doc["command"] == "python -m bench.instructions " + " ".join(argv)
    figures = doc["figures"]
    counted = figures["instructions_per_submission"]
    # 200 turns of FORLOOP: at least a machine instruction each, on every slip
    assert counted["baseline"] - counted["this"] > 200
    assert figures["this_vs_baseline"] == pytest.approx(counted["this"] / counted["baseline"])


@pytest.mark.parametrize(
    "argv",
    [["--submissions", "0"], ["--batch", "0"], ["--regions", "-1"], ["--baseline-library", "no-such-ref-or-file"]],
)
def test_bad_arguments_get_a_usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert "error:" in capsys.readouterr().err
