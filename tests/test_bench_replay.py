"""``python -m bench.replay`` at a small scale: the scorer's batches captured once and replayed into
fresh servers, this tree against a baseline and the floor, every library applying every slip."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench import results
from bench.replay import main
from leaderboard.library import library_code

pytestmark = pytest.mark.timeout(120)


def test_replay_measures_this_tree_against_a_baseline_and_the_floor(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(results, "RESULTS", tmp_path)
    baseline = tmp_path / "library.lua"  # a library file: this tree's, assembled
    baseline.write_text(library_code())
    argv = ["--submissions", "1200", "--batch", "400", "--rounds", "2", "--floor", "--baseline-library", str(baseline)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "== 1,200 submissions in 3 batches of 400, 2 rounds" in out
    assert re.search(r"this / baseline, Redis CPU batch by batch: median [\d.]+ \(rounds [\d.]+ [\d.]+\)", out)
    doc = results.load("replay", tmp_path)
    assert doc is not None and doc["command"] == "python -m bench.replay " + " ".join(argv)
    figures = doc["figures"]
    assert figures["libraries"] == ["baseline", "this", "floor"]
    # the same library from the same batches: the same outcome, the same commands
    assert figures["statuses"]["this"] == figures["statuses"]["baseline"] == {"ok": 1200}
    assert figures["calls_by_command"]["this"] == figures["calls_by_command"]["baseline"]
    # the floor's commands once per batch: a ZMSCORE per window, one activity XADD
    floor = figures["calls_by_command"]["floor"]
    assert floor["zmscore"] == pytest.approx(3 / 400) and floor["xadd"] == pytest.approx(1 / 400)
    for key in ("fcall_us", "median_batch_us", "cpu_us", "median_batch_cpu_us", "lua_us"):
        row = figures[key]
        assert all(len(row[side]["rounds"]) == 2 and row[side]["median"] > 0 for side in figures["libraries"])
        assert row["this_vs_baseline"] > 0 and row["this_vs_floor"] > 0
    assert len(figures["batch_cpu_this_vs_floor"]["rounds"]) == 2


def test_replay_of_a_git_ref_uses_its_own_encoder(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(results, "RESULTS", tmp_path)
    assert main(["--submissions", "300", "--rounds", "1", "--baseline-library", "HEAD", "--no-write"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^baseline: per round \{'ok': 300\}", out, re.M)
    assert re.search(r"^this: per round \{'ok': 300\}", out, re.M)
    assert results.load("replay", tmp_path) is None


def test_replay_over_regions_keeps_the_games_boards_per_region(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(results, "RESULTS", tmp_path)
    assert main(["--submissions", "1000", "--rounds", "1", "--regions", "50"]) == 0
    assert "== 1,000 submissions in 2 batches of 500, 1 rounds, 50 regions" in capsys.readouterr().out
    doc = results.load("replay", tmp_path)
    assert doc is not None
    figures = doc["figures"]
    assert figures["regions"] == 50 and figures["statuses"]["this"] == {"ok": 1000}
    # each batch's region boards read apart: a layout per region, its boards' scores one ZMSCORE each
    # (without regions: three for the batch, 0.006 a submission)
    assert figures["calls_by_command"]["this"]["zmscore"] > 0.1


def test_a_game_of_more_regions_than_the_default_scope_cap_keeps_them_all(capsys: pytest.CaptureFixture[str]) -> None:
    # 400 regions over 800 slips: about 350 named, past LB_MAX_SCOPES' default (256); the game raises it
    assert main(["--submissions", "800", "--rounds", "1", "--regions", "400", "--no-write"]) == 0
    assert re.search(r"^this: per round \{'ok': 800\}", capsys.readouterr().out, re.M)


@pytest.mark.parametrize(
    "argv",
    [
        ["--submissions", "0"],
        ["--rounds", "0"],
        ["--floor", "--batch", "1001"],
        ["--regions", "-1"],
        ["--floor", "--regions", "3"],
    ],
)
def test_replay_refuses_bad_counts_with_a_usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    refusal = "must be at least|at most 1000|takes no --regions"
    assert exit_.value.code == 2 and re.search(refusal, capsys.readouterr().err)
