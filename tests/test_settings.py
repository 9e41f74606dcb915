"""The one settings loader: one boolean rule, errors that name the variable, 0 = no cap, and every
entry point answering --help with its variables without starting anything."""

from __future__ import annotations

import dataclasses
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from api.settings import ApiSettings
from fleet.__main__ import FleetOptions
from fleet.config_table import DOCUMENT, document
from gateway.settings import GatewaySettings
from leaderboard import GameConfig
from leaderboard.settings import SettingsError, argument_parser, parse_bool, redacted, variables
from scorer.settings import ScorerSettings

ROOT = Path(__file__).resolve().parent.parent
CLASSES = (FleetOptions, GameConfig, ScorerSettings, GatewaySettings)


def bool_fields(cls: type) -> list[tuple[str, str]]:
    return [(f.name, f.metadata["var"]) for f in dataclasses.fields(cls) if f.type == "bool"]


@pytest.mark.parametrize("cls", [ScorerSettings, GatewaySettings])
def test_one_boolean_rule_for_every_process(cls: Any) -> None:
    assert bool_fields(cls), "each process has boolean settings"
    for name, var in bool_fields(cls):
        for raw, want in (
            ("off", False),
            ("OFF", False),
            ("no", False),
            ("0", False),
            ("false", False),
            ("on", True),
            ("Yes", True),
            ("1", True),
            ("true", True),
        ):
            assert getattr(cls.from_env({var: raw}), name) is want, (var, raw)
        with pytest.raises(SettingsError, match=f"{var}='maybe'"):
            cls.from_env({var: "maybe"})


def test_a_bad_value_names_its_variable() -> None:
    for env, var in (
        ({"LB_GW_MAX_FRAME": "big"}, "LB_GW_MAX_FRAME"),
        ({"LB_GW_MAX_FRAME": "0"}, "LB_GW_MAX_FRAME"),
        ({"LB_TOP_N": "1000"}, "LB_TOP_N"),
        ({"LB_GW_FANOUT": "smoke"}, "LB_GW_FANOUT"),
        ({"LB_LOG_LEVEL": "loud"}, "LB_LOG_LEVEL"),
        ({"LB_WINDOW_OPERATORS": "alltime"}, "LB_WINDOW_OPERATORS"),
    ):
        with pytest.raises(SettingsError, match=var):
            GatewaySettings.from_env(env)
    with pytest.raises(SettingsError, match="LB_SCORER_METRICS_PORT"):
        ScorerSettings.from_env({"LB_SCORER_METRICS_PORT": "70000"})
    assert parse_bool(" On ") is True


def test_zero_means_no_cap_or_off() -> None:
    s = GatewaySettings.from_env({"LB_GW_MAX_CONNECTIONS": "0", "LB_GW_CONNECT_RATE": "0"})
    assert (s.max_connections, s.connect_rate) == (0, 0)
    assert ScorerSettings.from_env({"LB_SCORER_METRICS_PORT": "0"}).metrics_port == 0
    assert ScorerSettings.from_env({"LB_SCORER_STATS_S": "0"}).stats_interval_s == 0
    assert GatewaySettings().reuse_port is False  # a lone gateway never shares its port unasked


def test_the_configuration_document_holds_the_table_the_settings_declare() -> None:
    assert DOCUMENT == ROOT / "docs" / "configuration.md"
    assert DOCUMENT.read_text() == document(), "docs/configuration.md is stale: python -m fleet.config_table"
    every = {var for cls in CLASSES for var, _, _ in variables(cls)}
    assert {"LB_LOG_LEVEL", "LB_GW_REUSE_PORT", "LB_REDIS_URL", "LB_SCORER_METRICS_PORT"} <= every
    for cls in CLASSES:
        assert all(text for _, _, text in variables(cls)), f"every variable of {cls.__name__} has help"


def test_passwords_never_reach_a_log_line() -> None:
    assert redacted("redis://:s3cr3t@127.0.0.1:7000/0") == "redis://:***@127.0.0.1:7000/0"
    assert redacted("redis://fleet:s3cr3t@h:1/0") == "redis://fleet:***@h:1/0"
    assert redacted("redis://127.0.0.1:7000/0") == "redis://127.0.0.1:7000/0"


ENTRY_POINTS = [
    (["-m", "gateway"], GatewaySettings),
    (["-m", "api"], ApiSettings),
    (["-m", "scorer"], ScorerSettings),
    (["-m", "scorer", "submit"], ScorerSettings),
    *((["-m", "scorer", command], ScorerSettings) for command in ("ban", "unban", "correct", "profile")),
    (["-m", "scorer", "rebuild"], ScorerSettings),
    (["-m", "scorer", "rank-index"], ScorerSettings),
    (["-m", "fleet"], FleetOptions),
    (["-m", "loadtest"], None),
    (["-m", "loadtest", "sockets"], None),
    (["-m", "loadtest", "storm"], None),
    (["-m", "loadtest.cleanup"], None),
    (["-m", "bench.gateway"], None),
    (["-m", "bench.scorer"], None),
    (["-m", "bench.drain"], None),
    (["-m", "bench.moderation"], None),
    (["-m", "bench.durable"], None),
    (["-m", "bench.naive_gateway"], None),
    (["-m", "bench.conn_memory"], None),
    (["-m", "bench.publish_fanout"], None),
    (["-m", "bench.plots"], None),
    (["-m", "bench.tls"], None),
    (["-m", "fleet.certs"], None),
]


@pytest.mark.parametrize(("args", "cls"), ENTRY_POINTS, ids=[" ".join(a[1:]) for a, _ in ENTRY_POINTS])
def test_every_entry_point_answers_help_and_starts_nothing(args: list[str], cls: type | None) -> None:
    # A Redis URL nobody listens on: an entry point that started instead of helping would hang or fail.
    env = {"PATH": "/usr/bin:/bin", "LB_REDIS_URL": "redis://127.0.0.1:1/0", "LB_GW_PORT": "1"}
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, *args, "--help"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=20
    )
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert time.monotonic() - started < 15
    out = done.stdout
    assert out.startswith("usage:") and "``" not in out  # plain text, no reStructuredText
    for var, _, _ in variables(cls) if cls else ():
        assert var in out, f"{' '.join(args)} --help does not list {var}"


@pytest.mark.parametrize(
    ("args", "env"),
    [
        (["-m", "gateway"], {"LB_GW_REUSE_PORT": "maybe"}),
        (["-m", "scorer"], {"LB_SCORER_PUBLISH": "off-ish"}),
        (["-m", "scorer", "submit", "--player", "mia", "--points", "5"], {"LB_TOP_N": "ten"}),
        (["-m", "fleet"], {"LB_FLEET_PORT": "eighty"}),
    ],
    ids=["gateway", "scorer", "scorer submit", "fleet"],
)
def test_a_bad_variable_stops_the_process_with_one_line_and_status_2(args: list[str], env: dict[str, str]) -> None:
    [(var, raw)] = env.items()
    base = {"PATH": "/usr/bin:/bin", "LB_REDIS_URL": "redis://127.0.0.1:1/0", "LB_GW_PORT": "0"}
    done = subprocess.run(
        [sys.executable, *args], cwd=ROOT, env={**base, **env}, capture_output=True, text=True, timeout=20
    )
    assert done.returncode == 2 and done.stdout == "", done.stderr
    [line] = done.stderr.splitlines()  # one line, no traceback
    assert line.startswith(f"configuration error: {var}={raw!r}: "), line


def test_loadtest_help_lists_the_variables_it_reads_and_no_empty_defaults() -> None:
    for args in (["--help"], ["submit", "--help"], ["sockets", "--help"]):
        out = subprocess.run(
            [sys.executable, "-m", "loadtest", *args], cwd=ROOT, capture_output=True, text=True, timeout=20, check=True
        ).stdout
        assert "LB_GAME [arena]" in out, args
        assert "(default: )" not in out and "(default: [])" not in out, out


def test_loadtest_names_the_redis_it_could_not_reach(tmp_path: Path) -> None:
    dead = "redis://127.0.0.1:1/0"
    for mode in ("submit", "sockets"):
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "loadtest",
                mode,
                "--url",
                "ws://127.0.0.1:1/ws",
                "--redis-url",
                dead,
                "--game",
                "lt",
                "--duration",
                "1",
                "--quiet",
                "--out",
                str(tmp_path / mode),
            ],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
        [line] = done.stderr.strip().splitlines()
        assert dead in line and "--redis-url" in line, line


def test_a_password_in_the_query_string_is_hidden_too() -> None:
    assert redacted("unix:///run/redis.sock?db=2&password=s3cr3t") == "unix:///run/redis.sock?db=2&password=***"
    assert redacted("redis://u:a@h:1/0?password=b") == "redis://u:***@h:1/0?password=***"


def test_help_shows_a_default_of_zero() -> None:
    p = argument_parser("prog", "what it does")
    p.add_argument("--share", type=float, default=0.0, help="share of players")
    p.add_argument("--count", type=int, default=0, help="how many")
    p.add_argument("--flag", action="store_true", help="a switch")
    out = " ".join(p.format_help().split())
    assert "share of players (default: 0.0)" in out and "how many (default: 0)" in out
    assert "a switch (default" not in out


DEAD = "redis://:hunter2@127.0.0.1:1/0"  # nobody listens on port 1; the password must never be shown
QUIET = {"PATH": "/usr/bin:/bin", "LB_GW_PORT": "0", "LB_GW_METRICS_PORT": "0", "LB_SCORER_METRICS_PORT": "0"}


@pytest.mark.parametrize(
    ("args", "url"),
    [
        (["-m", "gateway"], "http://:hunter2@127.0.0.1:1/0"),
        (["-m", "scorer"], "redis://127.0.0.1:six/0"),
        (["-m", "scorer", "submit", "--player", "mia", "--points", "5"], "http://:hunter2@127.0.0.1:1/0"),
        (["-m", "fleet", "--port", "0"], "localhost:6379"),
    ],
    ids=["gateway", "scorer", "scorer submit", "fleet"],
)
def test_a_malformed_redis_url_is_a_configuration_error(args: list[str], url: str) -> None:
    done = subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env={**QUIET, "LB_REDIS_URL": url},
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert done.returncode == 2 and done.stdout == "", done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith("configuration error: LB_REDIS_URL") and "hunter2" not in line, line


def test_a_malformed_redis_url_option_is_refused_in_one_line() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "scorer", "submit", "--player", "mia", "--points", "5", "--redis-url", "127.0.0.1:6379"],
        cwd=ROOT,
        env=QUIET,
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.splitlines()
    assert "LB_REDIS_URL" in line and "127.0.0.1:6379" in line, line


def test_the_fleet_names_the_redis_it_could_not_reach_in_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "fleet", "--port", "0", "--no-demo", "--redis-url", DEAD],
        cwd=ROOT,
        env=QUIET,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    [line] = done.stderr.splitlines()
    assert "redis://:***@127.0.0.1:1/0" in line and "--redis-url" in line and "hunter2" not in line, line


@pytest.mark.parametrize("module", ["gateway", "scorer"])
def test_a_daemon_waiting_for_redis_names_it_once_redacted(module: str) -> None:
    """The daemons wait for Redis by design (no crash loop); their warning says which Redis."""
    proc = subprocess.Popen(
        [sys.executable, "-m", module], cwd=ROOT, env={**QUIET, "LB_REDIS_URL": DEAD}, stderr=subprocess.PIPE, text=True
    )
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        for x in proc.stderr or ():
            lines.put(x)

    pumping = threading.Thread(target=pump, daemon=True)
    pumping.start()
    # SIGTERM once its signal handlers are in place: the gateway's come when it listens
    wanted = {"redis://:***@127.0.0.1:1/0": "", **({"listening on": ""} if module == "gateway" else {})}
    try:
        deadline = time.monotonic() + 15
        while not all(wanted.values()):
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            assert "Traceback" not in line, line
            for text in wanted:
                wanted[text] = wanted[text] or (line if text in line else "")
        warning = wanted["redis://:***@127.0.0.1:1/0"]
        assert "WARNING" in warning, warning
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
    pumping.join(timeout=5)  # stderr closed with the process: every line is queued
    rest = [lines.get_nowait() for _ in range(lines.qsize())]
    # a SIGTERM that beats the gateway's signal handlers (installed after "listening") ends it unhandled
    assert proc.returncode in (0, -signal.SIGTERM) and "hunter2" not in "".join([*wanted.values(), *rest])
    assert not [x for x in rest if "127.0.0.1:1" in x], rest  # once, not per retry


@pytest.mark.parametrize(
    "args",
    [["-m", "loadtest", "submit", "--duration", "1"], ["-m", "fleet", "--port", "0", "--no-demo"]],
    ids=["loadtest", "fleet"],
)
def test_a_malformed_redis_url_option_is_a_usage_error(args: list[str], tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, *args, "--redis-url", "http://:hunter2@127.0.0.1:1/0"],
        cwd=tmp_path,
        env={**QUIET, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "argument --redis-url: is not a Redis URL" in done.stderr and "hunter2" not in done.stderr


def test_loadtest_refuses_a_gateway_pid_that_is_not_running(tmp_path: Path) -> None:
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True
    ).stdout.strip()
    started = time.monotonic()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "loadtest",
            "storm",
            "--url",
            "ws://127.0.0.1:1/ws",
            "--redis-url",
            "redis://127.0.0.1:1/0",
            "--game",
            "lt",
            "--victim-pid",
            gone,
            "--quiet",
            "--out",
            str(tmp_path / "storm"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert time.monotonic() - started < 10, "refused before any load starts"
    [line] = done.stderr.strip().splitlines()
    assert f"no process {gone}" in line, line


@pytest.mark.parametrize(
    ("env", "var"),
    [
        ({"LB_OPERATOR": "max"}, "LB_OPERATOR"),
        ({"LB_WINDOW_OPERATORS": "alltime=max"}, "LB_WINDOW_OPERATORS"),
        ({"LB_WINDOW_OPERATORS": "monthly=incr"}, "LB_WINDOW_OPERATORS"),
        ({"LB_WINDOWS": "hourly"}, "LB_WINDOWS"),
        ({"LB_WINDOWS": ","}, "LB_WINDOWS"),
        ({"LB_GAME": "a{b"}, "LB_GAME"),
        ({"LB_IDEMPOTENCY_S": "99999999"}, "LB_IDEMPOTENCY_S"),
    ],
)
def test_the_game_checks_name_the_variable_too(env: dict[str, str], var: str) -> None:
    with pytest.raises(SettingsError, match=f"^{var}: "):
        GameConfig.from_env(env)


def test_help_shows_a_url_default_with_its_password_hidden(capsys: pytest.CaptureFixture[str]) -> None:
    p = argument_parser("x", "a command")
    p.add_argument("--redis-url", default="redis://default:hunter2@127.0.0.1:7000/0", help="Redis to use")
    p.add_argument("--other", default="unix:///tmp/r.sock?password=hunter2&db=1", help="another (default: %(default)s)")
    with pytest.raises(SystemExit):
        p.parse_args(["--help"])
    out = capsys.readouterr().out
    assert "hunter2" not in out
    assert "redis://default:***@127.0.0.1:7000/0" in out and "password=***&db=1" in out


# Every command line of the product (``--help`` of each, subcommands included), run in one
# interpreter: each reads LB_REDIS_URL, which after `source var/fleet.env` holds the password.
COMMANDS = [
    "fleet",
    "fleet rollout",
    "fleet.cluster",
    "fleet.haproxy",
    "scorer",
    "scorer submit",
    "scorer tournament",
    "scorer tournament create",
    "scorer ban",
    "scorer correct",
    "scorer profile",
    "scorer rebuild",
    "scorer rank-index",
    "gateway",
    "api",
    "loadtest",
    "loadtest sockets",
    "loadtest chaos",
    "loadtest.cleanup",
    *(f"bench.{p.stem}" for p in sorted((ROOT / "bench").glob("*.py")) if "__main__" in p.read_text()),
]
HELPS = """
import contextlib, io, runpy, sys
for command in sys.argv[1:]:
    module, *args = command.split()
    sys.argv = [module, *args, "--help"]
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out), contextlib.suppress(SystemExit):
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    print(f"=== {command}\\n{out.getvalue()}")
"""


def test_no_help_text_shows_the_redis_password() -> None:
    env = {**QUIET, "LB_REDIS_URL": "redis://default:hunter2-of-the-fleet@127.0.0.1:7000/0"}
    done = subprocess.run(
        [sys.executable, "-c", HELPS, *COMMANDS], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    helps = dict(part.split("\n", 1) for part in done.stdout.split("=== ")[1:])
    assert set(helps) == set(COMMANDS)
    for command, text in helps.items():
        assert "usage:" in text, (command, text)
        assert "hunter2" not in text, (command, text)
    assert "bench.scorer" in helps and "--redis-url" in helps["fleet"]


# A subcommand given a flag it does not know, after whatever it requires: the command's own usage.
SUBCOMMANDS = {
    "scorer submit": "--player mia --points 5",
    "scorer status": "--id m1",
    "scorer tournament list": "",
    "scorer tournament create": "spring --start 2030-01-01T00:00:00 --end 2030-01-02T00:00:00",
    "scorer board list": "",
    "scorer ban": "--player mia --reason r",
    "loadtest submit": "",
    "loadtest chaos": "",
    "fleet rollout": "",
    "fleet rebalance": "",
    "fleet.haproxy servers": "",
    "fleet.haproxy state": "gw-1 drain",
    "api token": "mia",
}
WRONG_FLAGS = """
import contextlib, io, runpy, sys
for command in sys.argv[1:]:
    module, *args = command.split()
    sys.argv = [module, *args, "--no-such-flag"]
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out), contextlib.suppress(SystemExit):
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    print(f"=== {command}\\n{out.getvalue()}")
"""


def test_a_wrong_flag_after_a_subcommand_shows_the_subcommands_usage() -> None:
    commands = [f"{name} {args}".strip() for name, args in SUBCOMMANDS.items()]
    done = subprocess.run(
        [sys.executable, "-c", WRONG_FLAGS, *commands], cwd=ROOT, env=QUIET, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    answers = [part.split("\n", 1)[1] for part in done.stdout.split("=== ")[1:]]
    assert len(answers) == len(SUBCOMMANDS)
    for name, text in zip(SUBCOMMANDS, answers, strict=True):
        prog = f"python -m {name}"
        assert f"usage: {prog} " in text, (name, text)
        assert f"{prog}: error: unrecognized arguments: --no-such-flag" in text, (name, text)
