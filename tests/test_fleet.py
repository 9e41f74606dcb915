"""The one-command local fleet: ``python -m fleet`` starts everything, Ctrl-C stops everything; it
refuses a data directory or a port another fleet uses, restarts what dies, and its Redis wants the
password that only the fleet's processes (and ``var/fleet.env``) know."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import orjson
import pytest
import redis
from websockets.asyncio.client import connect as ws_connect

from client import LeaderboardClient
from fleet.children import listening_pids
from fleet.redis_server import RedisServer

from .conftest import MS
from .gw_helpers import http_get

ROOT = Path(__file__).resolve().parent.parent
T = 1000 * MS


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


def gateway_pids(fleet_pid: int) -> list[int]:
    return sorted(
        pid for pid in children(fleet_pid) if b"gateway" in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    )


class Fleet:
    """``python -m fleet`` as a child: its stdout lines collected as they come."""

    def __init__(self, data_dir: Path, *args: str) -> None:
        self.data_dir, self.args = data_dir, args
        self.lines: list[str] = []
        self.stderr = ""
        self._changed = asyncio.Event()
        self.proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None

    async def start(self) -> Fleet:
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "fleet", "--data-dir", str(self.data_dir), "--log-level", "WARNING", *self.args,
            cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            stdin=asyncio.subprocess.DEVNULL, env={k: v for k, v in os.environ.items() if not k.startswith("LB_")},
        )  # fmt: skip
        self._reader = asyncio.create_task(self._read())
        return self

    async def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None and self.proc.stderr is not None
        err = asyncio.create_task(self.proc.stderr.read())
        while line := await self.proc.stdout.readline():
            self.lines.append(line.decode().rstrip("\n"))
            self._changed.set()
        self.stderr = (await err).decode()
        self._changed.set()

    async def line(self, match: Callable[[str], bool], within: float, start: int = 0) -> str:
        """The first line from ``start`` on that matches; fails if the fleet exits first."""
        try:
            async with asyncio.timeout(within):
                while True:
                    for line in self.lines[start:]:
                        if match(line):
                            return line
                    assert self._reader is not None
                    if self._reader.done():
                        raise AssertionError(f"the fleet exited without printing it:\n{self.output()}")
                    self._changed.clear()
                    await self._changed.wait()
        except TimeoutError:
            raise AssertionError(f"not printed within {within:.0f} s:\n{self.output()}") from None

    async def value(self, label: str, within: float = 30 * T) -> str:
        return (await self.line(lambda s: s.strip().startswith(label), within)).split()[-1]

    def output(self) -> str:
        return "\n".join(self.lines) + "\n" + self.stderr

    async def exit_code(self, within: float) -> int:
        assert self.proc is not None and self._reader is not None
        code = await asyncio.wait_for(self.proc.wait(), within)
        await asyncio.wait_for(self._reader, within)
        return code

    async def stop(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()
        if self._reader is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._reader, 5)


@contextlib.asynccontextmanager
async def fleet(data_dir: Path, *args: str) -> AsyncIterator[Fleet]:
    f = Fleet(data_dir, *args)
    try:
        yield await f.start()
    finally:
        await f.stop()


def env_url(data_dir: Path) -> str:
    text = (data_dir / "fleet.env").read_text()
    match = re.search(r"^export LB_REDIS_URL=(\S+)$", text, re.M)
    assert match, text
    return match.group(1)


async def test_fleet_serves_tells_how_to_reach_its_redis_and_stops_cleanly(tmp_path: Path) -> None:
    async with fleet(tmp_path, "--port", "0", "--demo-rate", "200") as f:
        page, ws_url = await f.value("live page:"), await f.value("websocket:")
        await f.line(lambda s: "source" in s and str(tmp_path / "fleet.env") in s, 5 * T)
        assert f.proc is not None
        port = int(page.rsplit(":", 1)[1].strip("/"))
        started = children(f.proc.pid)
        assert len(started) >= 4  # redis-server, scorer, two gateways
        status, _, body = await http_get(port, "/")
        assert status == 200 and b"Live leaderboard" in body
        assert (await http_get(port, "/demo-token"))[0] == 200  # the page gets a player in the demo
        async with LeaderboardClient(ws_url) as client:
            client.subscribe("global", "weekly")
            snap = await client.wait_for(lambda m: m["type"] == "snapshot" and bool(m["entries"]), 20)
        assert snap["entries"][0]["rank"] == 1 and snap["entries"][0]["name"]

        # the env file: only its owner reads it, and its URL works (the password is in it)
        env_file = tmp_path / "fleet.env"
        assert env_file.stat().st_mode & 0o777 == 0o600
        url = env_url(tmp_path)
        password = redis.Redis.from_url(url).connection_pool.connection_kwargs["password"]
        assert password and len(password) >= 32
        with redis.Redis.from_url(url) as client_:
            assert client_.ping() and client_.dbsize() > 0  # the demo's boards
        # ... nobody without it gets in, and nothing printed for humans shows it
        anonymous = redis.Redis.from_url(url.replace(f":{password}@", ""), socket_timeout=5)
        with anonymous, pytest.raises(redis.AuthenticationError):
            anonymous.get("x")
        assert password not in f.output()
        assert password not in (tmp_path / "redis" / "redis.log").read_text()

        f.proc.send_signal(signal.SIGINT)  # what Ctrl-C does
        assert await f.exit_code(30 * T) == 0, f.output()
        assert not [pid for pid in started if alive(pid)], "a child process was left running"
        assert (tmp_path / "redis" / "appendonlydir").is_dir()  # the embedded Redis kept an AOF
        assert not env_file.exists()  # a stale URL would point at nothing (or at someone else)
        assert password not in f.output()


async def test_a_killed_gateway_is_logged_restarted_and_serves_again(tmp_path: Path) -> None:
    async with fleet(tmp_path, "--port", "0", "--no-demo") as f:
        ws_url = await f.value("websocket:")
        port = int(ws_url.rsplit(":", 1)[1].split("/")[0])
        assert f.proc is not None
        before = gateway_pids(f.proc.pid)
        assert len(before) == 2
        mark = len(f.lines)
        os.kill(before[0], signal.SIGKILL)
        await f.line(lambda s: s.startswith("fleet: 1/2 gateways, scorer up, redis up"), 10 * T, mark)
        await f.line(lambda s: s.startswith("fleet: 2/2 gateways, scorer up, redis up"), 20 * T, mark)
        after = gateway_pids(f.proc.pid)
        assert before[1] in after and before[0] not in after and len(after) == 2
        # the replacement kept its id (gw-1) and answers: new connections land on either process
        seen: set[str] = set()
        async with asyncio.timeout(20 * T):
            while seen != {"gw-1", "gw-2"}:
                async with ws_connect(ws_url, open_timeout=5 * T) as ws:
                    seen.add(orjson.loads(await ws.recv())["gateway"])
        assert set(after) - set(before) <= set(listening_pids(port))
        f.proc.send_signal(signal.SIGINT)
        assert await f.exit_code(30 * T) == 0, f.output()
        assert not [pid for pid in after if alive(pid)]
        assert f"gw-1 (pid {before[0]}) killed by SIGKILL" in f.stderr, f.stderr
        # the exits of the stop are not crashes: neither logged as such nor restarted
        assert f.stderr.count("fleet WARNING") == 1, f.stderr


async def test_a_second_fleet_on_the_same_data_dir_or_port_is_refused(tmp_path: Path) -> None:
    async with fleet(tmp_path / "a", "--port", "0", "--no-demo", "--gateways", "1") as first:
        page = await first.value("live page:")
        port = page.rsplit(":", 1)[1].strip("/")
        assert first.proc is not None
        (first_gw,) = gateway_pids(first.proc.pid)
        async with fleet(tmp_path / "a", "--port", "0", "--no-demo") as second:
            assert await second.exit_code(30 * T) != 0
        assert f"pid {first.proc.pid}" in second.stderr and page in second.stderr, second.stderr
        assert "--data-dir" in second.stderr
        async with fleet(tmp_path / "b", "--port", port, "--no-demo") as third:
            assert await third.exit_code(30 * T) != 0
        assert f"port {port}" in third.stderr and "--join" in third.stderr, third.stderr
        assert not (tmp_path / "b" / "redis" / "appendonlydir").exists()  # refused before it started anything
        # the first fleet was not disturbed
        assert first.proc.returncode is None
        assert (await http_get(int(port), "/readyz"))[0] == 200
        # told to join, a fleet adds its gateways to the port
        async with fleet(tmp_path / "c", "--port", port, "--no-demo", "--join", "--gateways", "1") as joined:
            await joined.value("live page:")
            assert joined.proc is not None
            (gw,) = gateway_pids(joined.proc.pid)
            assert gw in listening_pids(int(port)) and first_gw in listening_pids(int(port))
            joined.proc.send_signal(signal.SIGINT)
            assert await joined.exit_code(30 * T) == 0, joined.output()
        first.proc.send_signal(signal.SIGINT)
        assert await first.exit_code(30 * T) == 0, first.output()


def test_the_embedded_redis_refuses_clients_without_the_password(tmp_path: Path) -> None:
    with RedisServer(tmp_path, password="pw-of-the-test-" + "x" * 20) as server:
        assert ":pw-of-the-test-" in server.url
        with redis.Redis.from_url(server.url) as ok:
            assert ok.ping()
        for password in (None, "wrong"):
            client = redis.Redis(port=server.port, password=password, socket_timeout=5)
            with client, pytest.raises(redis.AuthenticationError):
                client.ping()
        assert b"pw-of-the-test" not in Path(f"/proc/{server.process.pid}/cmdline").read_bytes()  # type: ignore[union-attr]
