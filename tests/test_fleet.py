"""The one-command local fleet: ``python -m fleet`` starts everything, Ctrl-C stops everything."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

from client import LeaderboardClient

from .gw_helpers import http_get

ROOT = Path(__file__).resolve().parent.parent


def children(pid: int) -> set[int]:
    found: set[int] = set()
    for task in os.listdir(f"/proc/{pid}/task"):
        text = Path(f"/proc/{pid}/task/{task}/children").read_text()
        found |= {int(c) for c in text.split()}
    return found


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"


async def test_fleet_starts_serves_the_page_and_snapshots_and_stops_cleanly(tmp_path: Path) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "fleet", "--port", "0", "--data-dir", str(tmp_path), "--demo-rate", "200",
        "--log-level", "WARNING", cwd=ROOT, stdout=asyncio.subprocess.PIPE, stdin=asyncio.subprocess.DEVNULL,
        env={k: v for k, v in os.environ.items() if not k.startswith("LB_")},
    )  # fmt: skip
    assert proc.stdout is not None
    try:
        page = ""
        async with asyncio.timeout(30):
            while not page:
                line = (await proc.stdout.readline()).decode()
                assert line, "the fleet exited before printing its URLs"
                if "live page:" in line:
                    page = line.split()[-1]
            while "websocket:" not in line:
                line = (await proc.stdout.readline()).decode()
        ws_url = line.split()[-1]
        port = int(page.rsplit(":", 1)[1].strip("/"))
        started = children(proc.pid)
        assert len(started) >= 4  # redis-server, scorer, two gateways
        status, _, body = await http_get(port, "/")
        assert status == 200 and b"Live leaderboard" in body
        assert (await http_get(port, "/demo-token"))[0] == 200  # the page gets a player in the demo
        async with LeaderboardClient(ws_url) as client:
            client.subscribe("global", "weekly")
            snap = await client.wait_for(lambda m: m["type"] == "snapshot" and bool(m["entries"]), 20)
        assert snap["entries"][0]["rank"] == 1 and snap["entries"][0]["name"]
        proc.send_signal(signal.SIGINT)  # what Ctrl-C does
        assert await asyncio.wait_for(proc.wait(), 30) == 0
        assert not [pid for pid in started if alive(pid)], "a child process was left running"
        assert (tmp_path / "redis" / "appendonlydir").is_dir()  # the embedded Redis kept an AOF
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
