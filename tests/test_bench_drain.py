"""bench.drain's lb_submit figure: commandstats has one FCALL line for lb_submit and the
acknowledging lb_ack; the acknowledgement's commands are taken out of it, and not counted as
lb_submit's calls."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import redis

from bench import results
from bench.drain import baseline_error, by_name, code_tree, fill, function_figures, main, tree_library
from leaderboard import GameConfig
from leaderboard.assembly import assemble
from leaderboard.library import library_code
from leaderboard.submission import entry_fields


def test_the_acknowledgements_commands_are_not_lb_submits() -> None:
    stats = {"fcall": (12_000, 4), "zadd": (3_000, 300), "xack": (500, 2), "srem": (300, 2), "xtrim": (200, 2)}
    with_ack = function_figures(stats, 100, 0.001, acks=True)
    assert with_ack["fcall_us_per_submission"] == 110.0  # 12,000 - 1,000 us over 100 submissions
    assert with_ack["calls_per_submission"] == 3.0 and with_ack["lua_us_per_submission"] == 80.0
    # a library that acknowledges with a MULTI: its XACK ran outside the FCALL, which is all lb_submit
    assert function_figures(stats, 100, 0.001)["fcall_us_per_submission"] == 120.0


def test_a_baseline_that_is_no_ref_nor_file_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert baseline_error("HEAD") is None and baseline_error(None) is None
    with pytest.raises(SystemExit) as exit_:
        main(["--baseline-library", "no-such-ref", "--no-write"])
    assert exit_.value.code == 2
    assert "'no-such-ref' is neither a library file nor a git ref" in capsys.readouterr().err


async def test_each_release_is_queued_the_entries_its_scorer_reads(tmp_path: Path, redis_url: str) -> None:
    """A baseline from before slip entries gets entries by name (all its scorer reads); this tree's
    code, or a ref's that has them, gets slips."""
    assert not by_name(None)
    (tmp_path / "head").mkdir()
    assert not by_name(code_tree("HEAD", tmp_path / "head"))
    earlier = tmp_path / "earlier" / "leaderboard"
    earlier.mkdir(parents=True)
    (earlier / "submission.py").write_text('FIELDS = ("id", "player", "points", "ts")\n')
    assert by_name(earlier.parent)
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    r.function_load(library_code(), replace=True)
    stream = GameConfig(game="bench").keys.submissions
    await fill(redis_url, 2, 1, 2, names=True)
    await fill(redis_url, 2, 1, 2)
    entries: Any = r.xrange(stream)
    assert [sorted(fields) for _, fields in entries] == [["id", "player", "points", "ts"]] * 2 + [["slip"]] * 2
    same = [{k: v for k, v in entry_fields(fields).items() if k != "ts"} for _, fields in entries]  # one seed
    assert same[2:] == same[:2]
    r.close()


def test_a_baseline_library_is_assembled_as_the_loader_assembles_it(tmp_path: Path) -> None:
    """A ref's library from its own lua/ (the manifest's files, or the one file of a release from
    before them); a library file as it is."""

    def show(ref: str, name: str) -> str:
        found = subprocess.run(["git", "show", f"{ref}:lua/{name}"], cwd=results.ROOT, capture_output=True, text=True)
        if found.returncode != 0:
            raise FileNotFoundError(name)
        return found.stdout

    (tmp_path / "head").mkdir()
    assert tree_library(code_tree("HEAD", tmp_path / "head")) == assemble(lambda name: show("HEAD", name)).text
    split = subprocess.run(
        ["git", "rev-list", "-1", "HEAD", "--", "lua/leaderboard.lua"],
        cwd=results.ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()  # fmt: skip: the commit that split the one file
    one_file = show(f"{split}^", "leaderboard.lua")
    (tmp_path / "before").mkdir()
    assert tree_library(code_tree(f"{split}^", tmp_path / "before")) == one_file
    library = tmp_path / "library.lua"
    library.write_text("#!lua name=leaderboard\n-- a copy with one rule taken out\n")
    (tmp_path / "file").mkdir()
    assert tree_library(code_tree(str(library), tmp_path / "file")) == library.read_text()
