"""The conformance suite in the build: every scenario against every client of adapters.json whose
toolchain this machine has, each a test of its own, on one fleet for the module (docs/clients.md,
"Conformance"); and the runner failing a client that misbehaves."""

from __future__ import annotations

import shutil
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from clients.conformance import runner
from clients.conformance.adapter import command_line
from clients.conformance.stage import Stage

ROOT = Path(__file__).resolve().parent.parent
BROKEN = [sys.executable, "tests/conformance_broken_adapter.py"]


def missing(command: list[str]) -> str | None:
    """What this machine lacks to run an adapter: its program, or a file it names (not built)."""
    if shutil.which(command[0]) is None:
        return f"{command[0]} is not installed"
    for part in command[1:]:
        if "/" in part and not (ROOT / part).exists():
            return f"{part} does not exist (not built?)"
    return None


CASES = [
    pytest.param(client, scenario["name"], id=f"{client}-{scenario['name']}")
    for client in runner.adapters()
    for scenario in runner.scenarios()
]


@pytest.fixture(scope="module")
async def stage(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stage]:
    async with Stage(tmp_path_factory.mktemp("conformance")) as s:
        yield s


@pytest.fixture(scope="module")
async def exits() -> AsyncIterator[runner.Exits]:
    """Every adapter's exit: each must exit 0 once stopped."""
    tasks: runner.Exits = []
    yield tasks
    assert await runner.exit_problems(tasks) == []


@pytest.mark.parametrize(("client", "name"), CASES)
async def test_client_passes_scenario(stage: Stage, exits: runner.Exits, client: str, name: str) -> None:
    command = command_line(runner.adapters()[client])
    lacking = missing(command)
    if lacking:
        pytest.skip(lacking)
    [scenario] = runner.scenarios([name])
    outcome = await runner.play(stage, scenario, command, client, exits)
    assert outcome.passed, outcome.line()


async def test_the_runner_fails_a_client_that_retries_a_refused_token(stage: Stage, exits: runner.Exits) -> None:
    [scenario] = runner.scenarios(["refused"])
    outcome = await runner.play(stage, scenario, BROKEN, "broken", exits)
    assert not outcome.passed
    # it stopped as told, then connected again with the same token: the steps after "stopped" say so
    assert outcome.reason.startswith(("step 4 ", "step 5 ")), outcome.reason


def test_the_docs_table_is_the_scenarios() -> None:
    assert runner.table() in (ROOT / "docs" / "clients.md").read_text(), "python -m clients.conformance.runner --table"
