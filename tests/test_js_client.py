"""The JS package (clients/js/): its typed usage example passes ``tsc --noEmit``, its Node test
suite (``node --test``) passes against a real fleet started here, its conformance adapter
(clients/js/conformance/adapter.mjs) speaks the runner's stdin/stdout contract against the same
fleet, and docs/clients.md's Node.js example runs as written and its compatibility table is true.
Node.js and the package's npm dependencies come from ``./dev install`` (``npm ci``)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import time
import tomllib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import websockets

from fleet.redis_server import RedisServer
from fleet.supervisor import Fleet, FleetSettings
from leaderboard.auth import issue
from leaderboard.wire import PROTOCOL

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


def test_the_compatibility_matrix_is_true() -> None:
    """docs/clients.md's table: each client's protocol and version as its code and package say."""
    doc = (ROOT / "docs" / "clients.md").read_text()
    table = doc.split("## Compatibility", 1)[1].split("\n\n")[2]
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in table.splitlines()[2:]]
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    package = json.loads((PACKAGE / "package.json").read_text())
    js_protocol = re.search(r"^export const PROTOCOL = (\d+);$", (PACKAGE / "src/client.js").read_text(), re.M)
    assert js_protocol is not None
    assert rows == [
        [str(PROTOCOL), "Python (`client/`)", f"`{pyproject['name']}` (pip, the server's wheel)", pyproject["version"]],
        [js_protocol[1], "JS, browsers and Node.js (`clients/js/`)", f"`{package['name']}` (npm)", package["version"]],
        rows[2],  # the C# client's, held by tests/test_csharp.py
    ]
    assert int(js_protocol[1]) == PROTOCOL, "the JS client speaks the server's protocol"


async def test_the_docs_node_example_runs_as_written(running: Running, tmp_path: Path) -> None:
    """The Node.js example of docs/clients.md, installed as the page says (the package beside it
    in node_modules, as `npm install <path>` links it), prints the all-time board's leader."""
    node_modules()
    doc = (ROOT / "docs" / "clients.md").read_text()
    example = doc.split("## JavaScript package", 1)[1].split("```js\n", 1)[1].split("```", 1)[0]
    assert len(example.splitlines()) <= 15
    (tmp_path / "leader.mjs").write_text(example)
    (tmp_path / "node_modules").mkdir()
    (tmp_path / "node_modules" / "leaderboard-fleet-client").symlink_to(PACKAGE)
    async with websockets.connect(running.fleet.ws_url) as ws:  # a game server files the best score
        await ws.send(json.dumps({"type": "hello", "token": running.token("gs", "server")}))
        await ws.send(json.dumps({"type": "subscribe", "board": "global", "window": "alltime"}))
        sub = {"id": "docs-1", "player": "docs-leader", "points": 99_000_000}
        await ws.send(json.dumps({"type": "submit", "submission": sub}))
        async with asyncio.timeout(20):
            while True:  # until the board's published snapshot shows it: what the example reads
                msg = json.loads(await ws.recv())
                top = msg.get("entries") if msg["type"] == "snapshot" and msg["window"] == "alltime" else None
                if top and top[0]["player"] == "docs-leader":
                    break
    proc = await asyncio.create_subprocess_exec(
        NODE or "node", "leader.mjs", running.fleet.ws_url, cwd=tmp_path, env={"PATH": os.environ["PATH"]},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, err.decode()
    assert re.fullmatch(r"global alltime v\d+: docs-leader 99000000\n", out.decode()), out
