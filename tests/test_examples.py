"""The README's examples run as written: examples/game_server.py files scores, examples/bot.py
watches its rank on the board it subscribed to, both against a real fleet (redis-server, scorer,
gateway processes)."""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import sys
from pathlib import Path

import pytest

from fleet.supervisor import Fleet, FleetSettings
from leaderboard import GameConfig, connect

ROOT = Path(__file__).resolve().parent.parent


async def run_example(data_dir: Path, *args: str, env: dict[str, str] | None = None) -> asyncio.subprocess.Process:
    """``source <data dir>/fleet.env && python <example> ...`` in examples/, as README says: the
    fleet's env file is all the example gets (``env`` then overrides it)."""
    assignments = [shlex.quote(f"{k}={v}") for k, v in (env or {}).items()]
    command = " ".join(
        [
            "source",
            shlex.quote(str(data_dir / "fleet.env")),
            "&&",
            "exec",
            "env",
            *assignments,
            shlex.quote(sys.executable),
            *map(shlex.quote, args),
        ]
    )
    return await asyncio.create_subprocess_exec(
        "bash",
        "-c",
        command,
        cwd=ROOT / "examples",
        env={"PATH": os.environ["PATH"], "LB_GAME": "examples"},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def output(proc: asyncio.subprocess.Process, timeout: float = 60, code: int = 0) -> list[str]:
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    assert proc.returncode == code, err.decode()
    return (out if code == 0 else err).decode().splitlines()


async def test_the_examples_run_against_a_fleet(tmp_path: Path, redis_url: str) -> None:
    # the fleet's own secret (random, as ./dev run makes it): the examples learn it from fleet.env
    settings = FleetSettings(
        redis_url=redis_url, data_dir=tmp_path, port=0, gateways=1, demo_tokens=False, env=(("LB_GAME", "examples"),)
    )
    async with Fleet(settings) as fleet:
        [queued] = await output(await run_example(tmp_path, "game_server.py", "mia", "1200", "--region", "eu"))
        assert queued.startswith("queued match-") and "mia, 1200 points" in queued
        redis = connect(fleet.redis_url)
        try:  # the scorer applied and published it: the bot's first snapshot is a published one, not a built 0
            latest = GameConfig(game="examples").keys.latest("weekly", "region:eu")
            async with asyncio.timeout(20):
                while not await redis.exists(latest):  # noqa: ASYNC110 (a key in Redis: no event to await)
                    await asyncio.sleep(0.05)
        finally:
            await redis.aclose()
        bot = await run_example(tmp_path, "bot.py", fleet.ws_url, "mia", "--board", "region:eu", "--updates", "2")
        assert bot.stdout is not None
        first = (await asyncio.wait_for(bot.stdout.readline(), 30)).decode()
        assert re.match(r"region:eu weekly v[1-9][0-9]*: leader mia", first) and "mia is #1 with 1200" in first
        await output(await run_example(tmp_path, "game_server.py", "bo", "1500", "--region", "eu"))
        [second] = await output(bot)
        assert "leader bo" in second and "mia is #2 with 1200" in second

        # a token signed with another secret: refused, and said so at once (not a 30 s timeout)
        other = {"LB_JWT_SECRETS": "not-this-fleets-secret-but-32-bytes-long"}
        refused = await run_example(tmp_path, "bot.py", fleet.ws_url, "mia", env=other)
        lines = await output(refused, timeout=10, code=1)
        assert len(lines) == 1, lines
        [line] = lines
        assert "refused" in line and "1008 invalid_token" in line and "source var/fleet.env" in line, line


async def test_without_the_fleets_env_the_examples_say_what_to_do(tmp_path: Path) -> None:
    (tmp_path / "fleet.env").write_text("")  # nothing exported: as without `source var/fleet.env`
    for example, variable in (
        ("game_server.py", "LB_REDIS_URL"),
        ("rewards.py", "LB_REDIS_URL"),
        ("bot.py", "LB_JWT_SECRETS"),
    ):
        args = ("ws://127.0.0.1:1/ws", "mia") if example == "bot.py" else ("mia", "1") if "game" in example else ()
        [line] = await output(await run_example(tmp_path, example, *args), timeout=30, code=1)
        assert line.startswith(f"{variable} is not set: `source var/fleet.env`"), line


def test_the_docs_quote_the_examples() -> None:
    for name, doc in (("game_server.py", "README.md"), ("bot.py", "docs/clients.md")):
        source = (ROOT / "examples" / name).read_text()
        start = re.search(r"^(async )?def ", source, re.MULTILINE)
        assert start is not None
        body = source[start.start() : source.index('\n\n\nif __name__ == "__main__":')]
        assert body in (ROOT / doc).read_text(), f"{doc} must quote examples/{name}'s functions as they are"


def readme_commands() -> list[str]:
    """The shell commands of README's "A first submission" (the two ./dev commands aside; the bot,
    quoted in docs/clients.md, watches for ever without traffic and is run above)."""
    readme = (ROOT / "README.md").read_text()
    using = readme[readme.index("## A first submission") : readme.index("## A first page")]
    blocks = re.findall(r"```sh\n(.*?)```", using, re.S)
    return [line for block in blocks for line in block.splitlines() if line.strip() and "bot.py" not in line]


@pytest.mark.slow
async def test_the_readmes_commands_run_as_written(tmp_path: Path, redis_url: str) -> None:
    commands = readme_commands()
    assert any("tournament create" in c for c in commands) and any("game_server.py" in c for c in commands)
    settings = FleetSettings(redis_url=redis_url, data_dir=tmp_path / "var", port=0, gateways=1, demo_tokens=False)
    async with Fleet(settings):
        # as in a checkout beside a running ./dev run: var/fleet.env, examples/, the virtualenv's python
        (tmp_path / "examples").symlink_to(ROOT / "examples")
        (tmp_path / "bin").mkdir()
        python = tmp_path / "bin" / "python"  # a script, not a symlink: the virtualenv is found from the real path
        python.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$@"\n')
        python.chmod(0o755)
        script = "set -e\nsource var/fleet.env\n" + "\n".join(commands) + "\n"
        path = f"{tmp_path / 'bin'}:{os.environ['PATH']}"
        proc = await asyncio.create_subprocess_exec(
            "bash",
            "-c",
            script,
            cwd=tmp_path,
            env={"PATH": path, "PYTHONPATH": str(ROOT)},
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, f"{out.decode()}\n{err.decode()}"
    assert out.decode().count("queued ") == 3, out.decode()  # two plain submissions, one in the tournament
