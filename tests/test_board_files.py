"""Boards as code against a real redis-server: ``python -m scorer board apply FILES...`` plans
(created, updated, unchanged, refused) and applies idempotently; a reordering change, a file the
published schema refuses and a duplicate id are refused with the API's codes, exit 2, nothing
applied; ``--dry-run`` writes nothing. The published schema is the one the code generates, a
valid JSON Schema that the example files meet."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import redis.asyncio as aioredis

from leaderboard import GameConfig, Leaderboard
from leaderboard.boardschema import file_schema
from scorer import boardfiles

from .test_scorer_process import operator

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted(str(p) for p in (ROOT / "examples" / "boards").glob("*.json"))


def write(tmp_path: Path, name: str, definition: dict[str, Any] | str) -> str:
    path = tmp_path / f"{name}.json"
    path.write_text(definition if isinstance(definition, str) else json.dumps(definition))
    return str(path)


def tower(**changes: Any) -> dict[str, Any]:
    definition: dict[str, Any] = json.loads((ROOT / "examples" / "boards" / "tower.json").read_text())
    return definition | changes


def test_the_published_schema_is_the_generated_one_and_the_examples_meet_it() -> None:
    published = json.loads((ROOT / "docs" / "board-definition.schema.json").read_text())
    assert published == file_schema(), "regenerate: python -m scorer board schema > docs/board-definition.schema.json"
    jsonschema.Draft202012Validator.check_schema(published)
    assert len(EXAMPLES) >= 2
    for path in EXAMPLES:
        jsonschema.Draft202012Validator(published).validate(json.loads(Path(path).read_text()))
    # what the schema refuses, the files' check refuses too (a JSON Schema validator in a CI agrees)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(published).validate({"keys": [{"name": "floor"}]})  # no id


async def test_apply_creates_then_is_unchanged_then_updates(
    r: aioredis.Redis, redis_url: str, config: GameConfig, tmp_path: Path
) -> None:
    rc, out, err = await operator(redis_url, "board", "apply", *EXAMPLES)
    assert rc == 0, err
    assert [line.split()[:2] for line in out.splitlines()[:-1]] == [["created", "speedrun"], ["created", "tower"]]
    assert out.splitlines()[-1] == "2 created, 0 updated, 0 unchanged, 0 refused"
    lb = Leaderboard(r, config)
    await lb.boards.refresh()
    stored = lb.boards.get("tower")
    assert stored is not None and stored.version == 1 and stored.rank_mode == "dense"

    text, status = await boardfiles.apply_files(lb, EXAMPLES)  # idempotent
    assert status == 0 and text.splitlines()[-1] == "0 created, 0 updated, 2 unchanged, 0 refused"
    # two bounded keys: created packed (stored with the field), and the same file, which names no
    # encoding, is unchanged after
    keys = [{"name": "level", "min": 0, "max": 99}, {"name": "ms", "direction": "asc", "min": 0, "max": 999_999}]
    race = write(tmp_path, "race", {"id": "race", "keys": keys})
    text, status = await boardfiles.apply_files(lb, [race])
    assert status == 0 and text.splitlines()[0].endswith(": packed encoding"), text
    text, status = await boardfiles.apply_files(lb, [race])
    assert status == 0 and text.splitlines()[-1] == "0 created, 0 updated, 1 unchanged, 0 refused"

    bigger = write(tmp_path, "tower", tower(top_n=25))
    rc, out, _ = await operator(redis_url, "board", "apply", "--dry-run", bigger)
    assert rc == 0 and out.splitlines()[0].split()[:2] == ["updated", "tower"] and "top_n" in out
    await lb.boards.refresh()
    assert lb.boards.get("tower").top_n == 10  # type: ignore[union-attr]  # dry run: nothing written

    plan = await boardfiles.plan_files(lb, [bigger])
    done = await boardfiles.apply(lb, plan)
    assert [(s.action, s.definition.version if s.definition else None) for s in done] == [("updated", 2)]
    assert [s.action for s in await boardfiles.plan_files(lb, [bigger])] == ["unchanged"]


async def test_refusals_carry_the_api_codes_and_apply_nothing(
    r: aioredis.Redis, redis_url: str, config: GameConfig, tmp_path: Path
) -> None:
    lb = Leaderboard(r, config)
    assert (await boardfiles.apply_files(lb, [EXAMPLES[1]]))[1] == 0  # tower
    before = await r.hgetall(config.keys.boards)
    new = write(tmp_path, "new", {"id": "coins", "keys": [{"name": "coins"}]})
    reorder = write(tmp_path, "tower", tower(keys=[{"name": "floor", "min": 0, "max": 1000, "direction": "asc"}]))
    rc, out, _ = await operator(redis_url, "board", "apply", new, reorder)
    assert rc == 2
    lines = out.splitlines()
    assert lines[0].split()[:2] == ["created", "coins"]
    assert lines[1].split()[:2] == ["refused", "tower"] and ": board_reorder: " in lines[1]
    assert lines[-1] == "1 created, 0 updated, 0 unchanged, 1 refused (nothing applied)"
    assert await r.hgetall(config.keys.boards) == before  # not even the valid file

    cases: dict[str, tuple[dict[str, Any] | str, str]] = {
        "not-json": ("{", "invalid_board"),
        "no-id": ({"keys": [{"name": "x"}]}, "missing_field"),
        "unknown-field": ({"id": "a", "keys": [{"name": "x"}], "colour": "red"}, "unknown_field"),
        "too-many-keys": ({"id": "a", "keys": [{"name": f"k{i}"} for i in range(6)]}, "board_too_many_keys"),
        "bad-direction": ({"id": "a", "keys": [{"name": "x", "direction": "up"}]}, "invalid_direction"),
        "season-alone": ({"id": "a", "keys": [{"name": "x"}], "windows": ["season"]}, "invalid_season"),
    }
    paths = [write(tmp_path, name, body) for name, (body, _) in cases.items()]
    plan = await boardfiles.plan_files(lb, [*paths, new, new, str(tmp_path / "missing.json")])
    assert [(s.action, s.code) for s in plan] == [
        *(("refused", code) for _, code in cases.values()),
        ("created", ""),
        ("refused", "invalid_board"),  # the same id twice
        ("refused", "invalid_board"),  # no such file
    ]
    assert await r.hgetall(config.keys.boards) == before
