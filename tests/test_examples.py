"""The README's examples run as written: examples/game_server.py files scores, examples/bot.py
watches its rank on the board it subscribed to, both against a real fleet (redis-server, scorer,
gateway processes)."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from pathlib import Path

from fleet.supervisor import Fleet, FleetSettings
from leaderboard import GameConfig, connect

ROOT = Path(__file__).resolve().parent.parent
SECRET = "examples-secret-of-at-least-32-bytes!"


async def run_example(env: dict[str, str], *args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, *args, cwd=ROOT / "examples", env=env, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip


async def output(proc: asyncio.subprocess.Process, timeout: float = 60) -> list[str]:
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    assert proc.returncode == 0, err.decode()
    return out.decode().splitlines()


async def test_the_examples_run_against_a_fleet(tmp_path: Path, redis_url: str) -> None:
    settings = FleetSettings(redis_url=redis_url, data_dir=tmp_path, port=0, gateways=1, jwt_secret=SECRET,
                             demo_tokens=False, env=(("LB_GAME", "examples"),))  # fmt: skip
    async with Fleet(settings) as fleet:
        env = {"PATH": os.environ["PATH"], "LB_REDIS_URL": fleet.redis_url, "LB_JWT_SECRETS": SECRET,
               "LB_GAME": "examples"}  # fmt: skip
        [queued] = await output(await run_example(env, "game_server.py", "mia", "1200", "--region", "eu"))
        assert queued.startswith("queued match-") and "mia, 1200 points" in queued
        redis = connect(fleet.redis_url)
        try:  # the scorer applied and published it: the bot's first snapshot is version 1, not a built 0
            latest = GameConfig(game="examples").keys.latest("weekly", "region:eu")
            async with asyncio.timeout(20):
                while not await redis.exists(latest):  # noqa: ASYNC110 (a key in Redis: no event to await)
                    await asyncio.sleep(0.05)
        finally:
            await redis.aclose()
        bot = await run_example(env, "bot.py", fleet.ws_url, "mia", "--board", "region:eu", "--updates", "2")
        assert bot.stdout is not None
        first = (await asyncio.wait_for(bot.stdout.readline(), 30)).decode()
        assert first.startswith("region:eu weekly v1: leader mia") and "mia is #1 with 1200" in first
        await output(await run_example(env, "game_server.py", "bo", "1500", "--region", "eu"))
        [second] = await output(bot)
        assert "leader bo" in second and "mia is #2 with 1200" in second


def test_the_readme_quotes_the_examples() -> None:
    readme = (ROOT / "README.md").read_text()
    for name in ("game_server.py", "bot.py"):
        source = (ROOT / "examples" / name).read_text()
        start = re.search(r"^(async )?def ", source, re.MULTILINE)
        assert start is not None
        body = source[start.start() : source.index('\n\n\nif __name__ == "__main__":')]
        assert body in readme, f"README must quote examples/{name}'s functions as they are"
