"""The shipped systemd units (deploy/systemd/): systemd accepts them, and their stop timeout and
descriptor limit fit the processes' defaults."""

from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from api.settings import ApiSettings
from gateway.settings import GatewaySettings
from scorer.settings import ScorerSettings

UNITS = Path(__file__).resolve().parent.parent / "deploy" / "systemd"


def unit(name: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # keys are case-sensitive
    parser.read(UNITS / name)
    return parser


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
@pytest.mark.parametrize(
    ("template", "instance"),
    [("leaderboard-gateway@", "8000"), ("leaderboard-scorer@", "1"), ("leaderboard-api@", "8081")],
)
def test_systemd_accepts_the_units(tmp_path: Path, template: str, instance: str) -> None:
    text = (UNITS / f"{template}.service").read_text()
    # verify checks that ExecStart's program exists: this interpreter stands for the deployed venv's
    assert "ExecStart=/opt/leaderboard/venv/bin/python -m " in text
    path = tmp_path / f"{template}{instance}.service"
    path.write_text(text.replace("/opt/leaderboard/venv/bin/python", sys.executable))
    done = subprocess.run(["systemd-analyze", "verify", str(path)], capture_output=True, text=True, timeout=60)
    # systemd ignores an unknown or malformed setting with a warning and status 0: both must be clean
    assert (done.returncode, done.stderr) == (0, ""), done.stderr


def test_the_units_leave_the_drain_its_time_and_the_players_their_descriptors() -> None:
    gw = GatewaySettings(redis_url="redis://127.0.0.1:6379/0")
    service = unit("leaderboard-gateway@.service")["Service"]
    assert float(service["TimeoutStopSec"]) > gw.drain_delay + gw.drain_window + gw.close_timeout
    assert int(service["LimitNOFILE"]) > gw.max_connections
    assert service["KillSignal"] == "SIGTERM" and service["Restart"] == "always"
    api = unit("leaderboard-api@.service")["Service"]
    assert float(api["TimeoutStopSec"]) > ApiSettings(redis_url="redis://127.0.0.1:6379/0").drain_timeout
    assert api["KillSignal"] == "SIGTERM" and api["Restart"] == "always"
    scorer = unit("leaderboard-scorer@.service")["Service"]
    assert float(scorer["TimeoutStopSec"]) > ScorerSettings(redis_url="redis://127.0.0.1:6379/0").graceful_timeout_s
