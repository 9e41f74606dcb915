"""``python -m bench.boards`` and ``python -m bench.lex_floor`` at a small scale: every shape's
slips applied (a refused or duplicate slip stops the run), its writes measured round by round
with each round's ratio to the default, and the floor's three shapes written."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import boards, lex_floor, results

pytestmark = pytest.mark.timeout(120)


def test_the_shapes_are_written_round_by_round_against_the_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(results, "RESULTS", tmp_path)
    argv = ["--members", "2000", "--submissions", "3000", "--reads", "1500", "--rounds", "3"]
    assert boards.main(argv) == 0
    doc = results.load("boards", tmp_path)
    assert doc is not None and doc["command"] == "python -m bench.boards " + " ".join(argv)
    figures = doc["figures"]
    for shape in boards.SHAPES:
        row = figures[shape]
        for what in ("submission", "rank_read"):  # each round's figure and its ratio to the default
            assert len(row[f"{what}_rounds"]["cpu"]) == len(row[f"cpu_{what}_vs_default_rounds"]) == 3
            assert row[f"fcall_us_per_{what}"] > 0 and row[f"cpu_us_per_{what}"] > 0
    assert figures["default"]["cpu_submission_vs_default_rounds"] == [1.0, 1.0, 1.0]
    assert figures["default"]["cpu_rank_read_vs_default_rounds"] == [1.0, 1.0, 1.0]
    assert figures["two_keys"]["encoding"] == figures["five_keys"]["encoding"] == "lex"
    assert figures["two_keys_packed"]["encoding"] == figures["five_keys_packed"]["encoding"] == "packed"
    assert figures[boards.GENERAL]["encoding"] == "packed"  # the default's board by the general path


def test_a_round_too_small_for_one_batch_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        boards.main(["--members", "2000", "--submissions", "1000", "--reads", "1500", "--rounds", "3", "--no-write"])
    assert "per round" in capsys.readouterr().err


def test_the_floor_writes_each_shape(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(results, "RESULTS", tmp_path)
    assert lex_floor.main(["--members", "2000", "--writes", "1000", "--reads", "1000", "--rounds", "1"]) == 0
    doc = results.load("lex_floor", tmp_path)
    assert doc is not None
    figures = doc["figures"]
    assert {"packed", "lex_text", "lex_bytes", "packed_rank", "lex_text_rank", "lex_bytes_rank"} <= set(figures)
    assert figures["packed"]["vs_packed"] == figures["packed_rank"]["vs_packed"] == 1.0  # reads against reads


@pytest.mark.parametrize("argv", [["--members", "100"], ["--writes", "0"], ["--reads", "499"], ["--rounds", "0"]])
def test_the_floor_refuses_counts_below_a_batch_with_a_usage_error(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        lex_floor.main([*argv, "--no-write"])
    assert exit_.value.code == 2 and "must be at least" in capsys.readouterr().err
