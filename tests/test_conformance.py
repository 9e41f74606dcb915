"""The conformance suite in the build: every scenario against every client of adapters.json whose
toolchain this machine has, each a test of its own, on one fleet for the module (docs/clients.md,
"Conformance"); and the runner failing a client that misbehaves. The C# client is built for the
module (clients/csharp/build.sh) wherever mono is installed (./dev install installs it)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from clients.conformance import runner
from clients.conformance.adapter import command_line
from clients.conformance.patterns import ScenarioError, matches, resolve
from clients.conformance.stage import Stage

ROOT = Path(__file__).resolve().parent.parent
BROKEN = [sys.executable, "tests/conformance_broken_adapter.py"]
CSHARP_OUT = "var/csharp/"  # where adapters.json expects clients/csharp/build.sh's output


def missing(command: list[str]) -> str | None:
    """What this machine lacks to run an adapter: its program, or a file it names (not built)."""
    if shutil.which(command[0]) is None:
        hint = ": ./dev install installs Debian's mono-complete" if command[0] == "mono" else ""
        return f"{command[0]} is not installed{hint}"
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
def csharp_build(tmp_path_factory: pytest.TempPathFactory) -> Path | None:
    """The C# client and its adapter, built for this module (None: no mono here, so no build)."""
    if shutil.which("mono") is None or shutil.which("mcs") is None:
        return None
    out = tmp_path_factory.mktemp("csharp")
    subprocess.run([str(ROOT / "clients" / "csharp" / "build.sh"), str(out)], check=True, timeout=120)
    return out


def built(command: list[str], csharp: Path | None) -> list[str]:
    """An adapter's command line, the C# build's files taken from this module's build."""
    if csharp is None:
        return command
    return [str(csharp / part.removeprefix(CSHARP_OUT)) if part.startswith(CSHARP_OUT) else part for part in command]


@pytest.fixture(scope="module")
async def suite(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[runner.Suite]:
    async with Stage(tmp_path_factory.mktemp("conformance")) as stage:
        played = runner.Suite(stage)
        try:
            yield played
        finally:
            problems = await played.close()
        assert problems == []  # every adapter exited 0 once stopped


@pytest.mark.parametrize(("client", "name"), CASES)
async def test_client_passes_scenario(suite: runner.Suite, csharp_build: Path | None, client: str, name: str) -> None:
    command = built(command_line(runner.adapters()[client]), csharp_build)
    lacking = missing(command)
    if lacking:
        pytest.skip(lacking)
    [scenario] = runner.scenarios([name])
    outcome = await suite.play(scenario, command, client)
    assert outcome.passed, outcome.line()


async def test_the_runner_fails_a_client_that_retries_a_refused_token(suite: runner.Suite) -> None:
    [scenario] = runner.scenarios(["refused"])
    outcome = await suite.play(scenario, BROKEN, "broken")
    assert not outcome.passed
    # it stopped as told, then connected again with the same token: the steps after "stopped" say so
    assert outcome.reason.startswith(("step 4 ", "step 5 ")), outcome.reason


def test_the_docs_table_is_the_scenarios() -> None:
    assert runner.table() in (ROOT / "docs" / "clients.md").read_text(), "python -m clients.conformance.runner --table"


def test_the_runners_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert runner.main(["--table"]) == 0
    assert capsys.readouterr().out == runner.table()
    with pytest.raises(SystemExit) as refused:
        runner.main(["--client", "cobol"])  # not in adapters.json: refused before anything starts
    assert refused.value.code == 2
    with pytest.raises(ScenarioError):
        runner.scenarios(["no-such-scenario"])


def test_patterns_name_events_and_values() -> None:
    status = {"event": "status", "status": "reconnecting", "retry_in": 0.4, "reason": None}
    assert matches(status, {"event": "status", "retry_in": {">=": 0, "<=": 1.0}})
    assert not matches(status, {"retry_in": {">": 1.0}})
    assert not matches({**status, "retry_in": None}, {"retry_in": {"<=": 1.0}})  # null is no number
    assert not matches(status, {"message.gateway": "gw-1"})  # a path it does not have
    assert matches({"message": {"entries": [{"player": "mia"}]}}, {"message.entries.0.player": "mia"})
    assert matches(status, {"status": {"in": ["reconnecting", "stopped"]}})
    names = {"gw": "gw-2", "rising": iter([1000, 2000]).__next__}
    assert resolve({"message.gateway": {"!=": "$gw"}}, names) == {"message.gateway": {"!=": "gw-2"}}
    assert resolve(["$rising", "$rising"], names) == [1000, 2000]  # a new value at each use
    with pytest.raises(ScenarioError):
        resolve("$unknown", names)
