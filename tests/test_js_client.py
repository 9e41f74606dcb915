"""The JS package (clients/js/): its typed usage example passes ``tsc --noEmit``, its Node test
suite (``node --test``) passes against a real fleet started here, and its conformance adapter
(clients/js/conformance/adapter.mjs) speaks the runner's stdin/stdout contract against the same
fleet. Node.js and the package's npm dependencies come from ``./dev install`` (``npm ci``)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from fleet.redis_server import RedisServer
from fleet.supervisor import Fleet, FleetSettings
from leaderboard.auth import issue

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "clients" / "js"
NODE = shutil.which("node")
GAME = "jsclient"

pytestmark = pytest.mark.skipif(NODE is None, reason="node is not installed (./dev install installs it)")


def node_modules() -> Path:
    found = PACKAGE / "node_modules"
    assert (found / "ws").is_dir(), "clients/js/node_modules is missing: ./dev install runs npm ci there"
    return found


def test_the_typed_usage_example_and_the_declarations_check() -> None:
    tsc = node_modules() / ".bin" / "tsc"
    done = subprocess.run([tsc, "--noEmit", "-p", PACKAGE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


class Running:
    def __init__(self, fleet: Fleet, secret: str) -> None:
        self.fleet = fleet
        self.secret = secret

    def token(self, player: str, role: str = "player") -> str:
        return issue(player, role, self.secret, exp=time.time() + 600)


@pytest.fixture(scope="module")
async def running(redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Running]:
    """One fleet (a scorer and a gateway) for the module, on a game of its own."""
    settings = FleetSettings(
        redis_url=redis_server.url,
        data_dir=tmp_path_factory.mktemp("jsfleet"),
        port=0,
        gateways=1,
        demo_tokens=False,
        log_level="WARNING",
        env=(("LB_GAME", GAME),),
    )
    async with Fleet(settings) as fleet:
        yield Running(fleet, settings.jwt_secret)


async def test_the_node_suite_passes_against_a_fleet(running: Running) -> None:
    node_modules()
    env = {
        "PATH": os.environ["PATH"],
        "LB_TEST_WS_URL": running.fleet.ws_url,
        "LB_TEST_SERVER_TOKEN": running.token("game-server-1", "server"),
        "LB_TEST_PLAYER": "mia",
        "LB_TEST_PLAYER_TOKEN": running.token("mia"),
    }
    proc = await asyncio.create_subprocess_exec(
        NODE or "node", "--test", "test/", cwd=PACKAGE, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(proc.communicate(), 90)
    report = out.decode()
    assert proc.returncode == 0, report
    # every test ran (none skipped for want of the fleet), and none failed
    assert "# fail 0" in report and "# skipped 0" in report and "# pass 0" not in report, report


class Adapter:
    """The adapter process, as the conformance runner drives it."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    async def send(self, command: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(command).encode() + b"\n")
        await self.proc.stdin.drain()

    async def read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = await asyncio.wait_for(self.proc.stdout.readline(), 15)
        assert line.endswith(b"\n"), f"the adapter ended: {line!r}"
        event: dict[str, Any] = json.loads(line)
        return event

    async def until(self, event: str, **fields: Any) -> dict[str, Any]:
        """The next line of this event with these fields (the others before it skipped)."""
        while True:
            line = await self.read()
            if line["event"] == event and all(line.get(k) == v for k, v in fields.items()):
                return line


async def test_the_conformance_adapter_drives_the_client(running: Running) -> None:
    node_modules()
    proc = await asyncio.create_subprocess_exec(
        NODE or "node", "clients/js/conformance/adapter.mjs", cwd=ROOT,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    adapter = Adapter(proc)
    try:
        version = json.loads((PACKAGE / "package.json").read_text())["version"]
        assert await adapter.read() == {"event": "ready", "client": "js", "version": version, "protocol": 1}
        await adapter.send({"cmd": "start", "url": running.fleet.ws_url, "token": running.token("ana"), "deltas": True})
        await adapter.until("status", status="live")
        await adapter.send({"cmd": "subscribe", "board": "global", "window": "daily"})
        snapshot = (await adapter.until("snapshot"))["message"]
        assert snapshot["type"] == "snapshot" and snapshot["board"] == "global"
        await adapter.send({"cmd": "request", "ref": "r1", "message": {"type": "stats", "window": "daily"}})
        reply = await adapter.until("reply", ref="r1")
        assert reply["message"]["type"] == "stats" and reply["message"]["window"] == "daily"
        await adapter.send({"cmd": "request", "ref": "r2", "message": {"type": "top", "board": "no:such:board"}})
        assert (await adapter.until("reply_error", ref="r2"))["code"] == "bad_board"
        await adapter.send({"cmd": "send", "message": {"type": "ping"}})
        await adapter.send({"cmd": "stop"})
        await adapter.until("stopped")
        assert await asyncio.wait_for(proc.wait(), 10) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
