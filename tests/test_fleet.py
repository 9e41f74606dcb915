"""The one-command local fleet: ``python -m fleet`` starts everything, Ctrl-C stops everything; it
refuses a data directory or a port another fleet uses, restarts what dies, and its Redis wants the
password that only the fleet's processes (and ``var/fleet.env``) know."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import orjson
import pytest
import redis
from websockets.asyncio.client import connect as ws_connect

from client import LeaderboardClient
from fleet.__main__ import parse_args
from fleet.children import http_ok, listening_pids
from fleet.claims import FleetRefused
from fleet.haproxy import Haproxy
from fleet.redis_server import RedisServer, ephemeral_low, free_ports
from fleet.supervisor import Fleet as SupervisedFleet
from fleet.supervisor import FleetSettings

from .conftest import MS, until
from .gw_helpers import http_get

ROOT = Path(__file__).resolve().parent.parent
T = 1000 * MS


def children(pid: int) -> set[int]:
    found: set[int] = set()
    for task in os.listdir(f"/proc/{pid}/task"):
        text = Path(f"/proc/{pid}/task/{task}/children").read_text()
        found |= {int(c) for c in text.split()}
    return found


def descendants(pid: int) -> set[int]:
    """Every process below ``pid`` (those that have already gone are left out)."""
    found, todo = set[int](), [pid]
    while todo:
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            below = children(todo.pop()) - found
            found |= below
            todo += below
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
    """``python -m fleet`` as a child: its stdout and stderr lines collected as they come."""

    def __init__(self, data_dir: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.data_dir, self.args = data_dir, args
        self.env = env or {}
        self.lines: list[str] = []
        self.errors: list[str] = []
        self._changed = asyncio.Event()
        self.proc: asyncio.subprocess.Process | None = None
        self._readers: list[asyncio.Task[None]] = []

    async def start(self) -> Fleet:
        env = {k: v for k, v in os.environ.items() if not k.startswith("LB_")}
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "fleet", "--data-dir", str(self.data_dir), "--log-level", "WARNING", *self.args,
            cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            stdin=asyncio.subprocess.DEVNULL, env={**env, **self.env},
        )  # fmt: skip
        assert self.proc.stdout is not None and self.proc.stderr is not None
        self._readers = [
            asyncio.create_task(self._read(self.proc.stdout, self.lines)),
            asyncio.create_task(self._read(self.proc.stderr, self.errors)),
        ]
        return self

    async def _read(self, stream: asyncio.StreamReader, into: list[str]) -> None:
        while line := await stream.readline():
            into.append(line.decode().rstrip("\n"))
            self._changed.set()
        self._changed.set()

    @property
    def stderr(self) -> str:
        return "\n".join(self.errors)

    async def line(self, match: Callable[[str], bool], within: float, start: int = 0, *, err: bool = False) -> str:
        """The first line (of stdout, or stderr) from ``start`` on that matches; fails if the fleet
        exits first."""
        lines = self.errors if err else self.lines
        try:
            async with asyncio.timeout(within):
                while True:
                    for line in lines[start:]:
                        if match(line):
                            return line
                    if all(r.done() for r in self._readers):
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
        assert self.proc is not None
        code = await asyncio.wait_for(self.proc.wait(), within)
        await asyncio.wait_for(asyncio.gather(*self._readers), within)
        return code

    async def stop(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            # Its processes too: each gets SIGTERM when the fleet dies and drains meanwhile, holding
            # the fleet's stdout and stderr, and proc.wait() waits for those pipes to close.
            family = descendants(self.proc.pid)
            self.proc.kill()
            for pid in family:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            await asyncio.wait_for(self.proc.wait(), 30 * T)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.gather(*self._readers), 5)


@contextlib.asynccontextmanager
async def fleet(data_dir: Path, *args: str, env: dict[str, str] | None = None) -> AsyncIterator[Fleet]:
    f = Fleet(data_dir, *args, env=env)
    try:
        yield await f.start()
    finally:
        await f.stop()


def sourced(data_dir: Path) -> dict[str, str]:
    """What ``source <data dir>/fleet.env`` exports, as the shell reads it."""
    out = subprocess.run(
        ["bash", "-c", f"source {data_dir / 'fleet.env'} && env -0"], env={}, capture_output=True, check=True
    ).stdout
    env = dict(item.split("=", 1) for item in out.decode().split("\0") if "=" in item)
    return {k: v for k, v in env.items() if k.startswith("LB_")}


def env_url(data_dir: Path) -> str:
    return sourced(data_dir)["LB_REDIS_URL"]


async def test_fleet_serves_tells_how_to_reach_its_redis_and_stops_cleanly(tmp_path: Path) -> None:
    async with fleet(tmp_path, "--port", "0", "--demo-rate", "200", "--redis-replicas", "1") as f:
        page, ws_url = await f.value("live page:"), await f.value("websocket:")
        await f.line(lambda s: "source" in s and str(tmp_path / "fleet.env") in s, 5 * T)
        assert f.proc is not None
        port = int(page.rsplit(":", 1)[1].strip("/"))
        started = children(f.proc.pid)
        assert len(started) >= 5  # redis-server and its replica, scorer, two gateways
        status, _, body = await http_get(port, "/")
        assert status == 200 and b"Live leaderboard" in body
        assert (await http_get(port, "/demo-token"))[0] == 200  # the page gets a player in the demo
        async with LeaderboardClient(ws_url) as client:
            client.subscribe("global", "weekly")
            snap = await client.wait_for(lambda m: m["type"] == "snapshot" and bool(m["entries"]), 20)
        assert snap["entries"][0]["rank"] == 1 and snap["entries"][0]["name"]
        # the replica: found in its master's INFO replication by the gateways, which read from it
        metrics = (await f.line(lambda s: s.strip().startswith("metrics:"), 5 * T)).split()[1:]
        ports = [int(u.rsplit(":", 1)[1].split("/")[0]) for u in metrics]

        async def replica_read_from() -> bool:
            answers = [await http_get(p, "/metrics") for p in ports]
            return any(b"lb_replica_current 1.0" in body for _, _, body in answers)

        await until(replica_read_from, 10 * T)

        # the env file: only its owner reads it, and its URL works (the password is in it)
        env_file = tmp_path / "fleet.env"
        assert env_file.stat().st_mode & 0o777 == 0o600
        url = env_url(tmp_path)
        password = redis.Redis.from_url(url).connection_pool.connection_kwargs["password"]
        assert password and len(password) >= 32
        with redis.Redis.from_url(url) as client_:
            assert client_.ping() and client_.dbsize() > 0  # the demo's boards
        # ... nobody without it gets in, and nothing printed for humans shows it
        # redis-cli takes it as it is (a user name, not an empty one: redis-cli would send that)
        cli = await asyncio.create_subprocess_exec(
            "redis-cli", "--no-auth-warning", "-u", url, "DBSIZE", stdout=asyncio.subprocess.PIPE
        )
        out, _ = await asyncio.wait_for(cli.communicate(), 10 * T)
        assert int(out) > 0, out
        anonymous = redis.Redis.from_url(url.replace(f"default:{password}@", ""), socket_timeout=5)
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


@pytest.mark.slow
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


def fleet_children(pid: int) -> list[int]:
    """The fleet's processes: gateways, scorer and redis-server."""
    return sorted(children(pid))


async def gone(pids: list[int], within: float) -> bool:
    async with asyncio.timeout(within):
        while any(alive(p) for p in pids):  # noqa: ASYNC110 (another process's exit: no event to await)
            await asyncio.sleep(0.05)
    return True


@pytest.mark.slow
async def test_ctrl_c_after_a_restart_and_a_second_fleet_on_its_redis_stops_in_bounded_time(tmp_path: Path) -> None:
    """The sequence that once hung a Ctrl-C: a gateway killed and restarted, a second fleet started
    after ``source var/fleet.env`` (so on the first one's Redis), busy demo traffic, Ctrl-C. The
    second fleet says it uses a Redis it did not start and keeps its demo traffic out of it."""
    async with fleet(tmp_path / "a", "--port", "0", "--demo-rate", "2000", "--stop-timeout", "3") as first:
        await first.value("live page:")
        assert first.proc is not None
        mark = len(first.lines)
        os.kill(gateway_pids(first.proc.pid)[0], signal.SIGKILL)
        await first.line(lambda s: s.startswith("fleet: 2/2 gateways"), 20 * T, mark)
        env = sourced(tmp_path / "a")
        assert set(env) == {"LB_REDIS_URL", "LB_JWT_SECRETS", "LB_API_URL"}
        async with fleet(tmp_path / "b", "--port", "0", "--stop-timeout", "3", env=env) as second:
            await second.value("live page:")
            [shared] = [line for line in second.errors if "did not start" in line]
            assert "source var/fleet.env" in shared and "unset LB_REDIS_URL" in shared
            assert "default:***@" in shared and env["LB_REDIS_URL"] not in second.output()
            assert any("demo traffic off" in line and "--demo-external" in line for line in second.errors)
            started = fleet_children(first.proc.pid)
            first.proc.send_signal(signal.SIGINT)
            assert await first.exit_code(30 * T) == 0, first.output()
            assert await gone(started, 5 * T)
            assert not (tmp_path / "a" / "fleet.env").exists()
            assert second.proc is not None
            second.proc.send_signal(signal.SIGINT)  # its Redis is gone: each phase still ends in time
            assert await second.exit_code(30 * T) == 0, second.output()


async def test_a_stop_phase_that_hangs_is_bounded(tmp_path: Path) -> None:
    """A gateway that does not answer SIGTERM (stopped, SIGSTOP) is killed once its phase's time
    is up, and the rest of the stop goes on."""
    async with fleet(tmp_path, "--port", "0", "--no-demo", "--gateways", "1", "--stop-timeout", "1") as f:
        await f.value("live page:")
        assert f.proc is not None
        started = fleet_children(f.proc.pid)
        [gw] = gateway_pids(f.proc.pid)
        os.kill(gw, signal.SIGSTOP)
        f.proc.send_signal(signal.SIGINT)
        # drain window 1 s + the phase's 1 s, then a SIGKILL
        assert await f.exit_code(15 * T) == 0, f.output()
        assert f"pid {gw} did not stop in 2 s: killing it" in f.stderr, f.stderr
        assert await gone(started, 5 * T)
        assert not (tmp_path / "fleet.env").exists()


async def test_a_second_ctrl_c_kills_the_fleet_at_once(tmp_path: Path) -> None:
    async with fleet(tmp_path, "--port", "0", "--no-demo", "--gateways", "1", "--log-level", "INFO") as f:
        await f.value("live page:")
        assert f.proc is not None
        started = fleet_children(f.proc.pid)
        [gw] = gateway_pids(f.proc.pid)
        os.kill(gw, signal.SIGSTOP)  # the stop would wait for it for the whole drain phase (11 s)
        f.proc.send_signal(signal.SIGINT)
        await f.line(lambda s: "stopping the fleet" in s, 10 * T, err=True)
        f.proc.send_signal(signal.SIGINT)
        assert await f.exit_code(5 * T) == 1, f.output()
        assert "SIGINT again: killing the fleet's processes" in f.stderr
        assert await gone(started, 5 * T)  # the stopped gateway too; Redis after flushing its AOF
        assert not (tmp_path / "fleet.env").exists()


async def test_bad_configuration_is_one_line_and_exit_2_before_anything_starts(tmp_path: Path) -> None:
    async with fleet(tmp_path, "--port", "0", env={"LB_WINDOWS": "dayly,weekly"}) as f:
        assert await f.exit_code(30 * T) == 2
    assert f.errors == [
        "configuration error: LB_WINDOWS: unknown window 'dayly'; expected one of daily, weekly, monthly, alltime"
    ], f.output()
    assert not (tmp_path / "redis").exists()


def test_a_fleet_picks_its_ports_below_the_ephemeral_range() -> None:
    # a port from the ephemeral range may become an outgoing connection's local port before the
    # child meant to listen on it binds it
    ports = free_ports(20)
    assert len(set(ports)) == 20 and all(1024 <= port < ephemeral_low() for port in ports)
    with contextlib.ExitStack() as stack:
        for port in ports:
            stack.enter_context(socket.socket()).bind(("127.0.0.1", port))


def test_a_port_handed_out_is_not_handed_out_again_to_any_process_for_a_while(tmp_path: Path) -> None:
    # Picks released at once, as a fleet's are until its child binds them: 200 here and 200 in
    # another process share no port (by chance alone, 400 picks of ~16,000 ports would repeat
    # one about 99 times in 100).
    ledger = tmp_path / "ports"
    here = [port for _ in range(200) for port in free_ports(1, ledger=ledger)]
    pick = f"free_ports(1, ledger={str(ledger)!r})[0]"
    code = f"from fleet.redis_server import free_ports; print(*({pick} for _ in range(200)))"
    there = [
        int(p)
        for p in subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    ]
    assert len(there) == 200 and len(set(here) | set(there)) == 400


def free_on(*hosts: str) -> int:
    """A port free on every one of ``hosts`` (the gateways bind the same port on each): a port the
    kernel picks free on one may be another connection's local port on the next, when a test or
    benchmark connects from that address."""
    for _ in range(50):
        with contextlib.ExitStack() as stack:
            first = stack.enter_context(socket.socket())
            first.bind((hosts[0], 0))
            port = int(first.getsockname()[1])
            try:
                for host in hosts[1:]:
                    stack.enter_context(socket.socket()).bind((host, port))
            except OSError:
                continue
            return port
    raise AssertionError(f"no port free on {', '.join(hosts)}")


def free_run(count: int) -> int:
    """The first of ``count`` consecutive free ports on 127.0.0.1 (held open while looking)."""
    for _ in range(50):
        with contextlib.ExitStack() as stack:
            first = stack.enter_context(socket.socket())
            first.bind(("127.0.0.1", 0))
            base = first.getsockname()[1]
            try:
                for offset in range(1, count):
                    stack.enter_context(socket.socket()).bind(("127.0.0.1", base + offset))
            except OSError:
                continue
            return int(base)
    raise AssertionError("no run of free ports")


@pytest.mark.slow
@pytest.mark.skipif(Haproxy.binary() is None, reason="haproxy is not installed (./dev install installs it, as root)")
async def test_behind_haproxy_the_gateways_and_metrics_ports_can_be_pinned(tmp_path: Path, redis_url: str) -> None:
    metrics = free_run(3)
    gateway_port = free_on("127.0.0.2", "127.0.0.3")
    settings = FleetSettings(
        redis_url=redis_url, data_dir=tmp_path, port=0, gateways=2, balancer="haproxy", demo_tokens=False,
        log_level="WARNING", gateway_port=gateway_port, metrics_port=metrics,
    )  # fmt: skip
    async with SupervisedFleet(settings) as f:
        assert [f.gateway_address(i) for i in range(2)] == [("127.0.0.2", gateway_port), ("127.0.0.3", gateway_port)]
        assert f.addresses.metrics_urls == [f"http://127.0.0.1:{metrics + n}/metrics" for n in (1, 2, 0)]
        for host, port in [f.gateway_address(0), f.gateway_address(1)]:
            assert await http_ok(host, port, "/readyz")
        assert await http_ok("127.0.0.1", metrics + 1, "/metrics")
        # a pinned port in use is refused before anything starts
        taken = FleetSettings(
            redis_url=redis_url, data_dir=tmp_path / "b", port=0, gateways=1, balancer="haproxy", metrics_port=metrics
        )
        with pytest.raises(FleetRefused, match=f"port {metrics} on 127.0.0.1 is already in use"):
            async with SupervisedFleet(taken):
                pass
        assert not (tmp_path / "b" / "redis").exists()


def test_the_secret_a_fleet_makes_passes_a_command_line_as_one_argument() -> None:
    # `loadtest --jwt-secret <secret>`: argparse takes a value that begins with "-" for an option
    # (a URL-safe secret did so once in 64 fleets), so a made secret must never begin with one.
    made = [FleetSettings().jwt_secret for _ in range(2000)]
    assert not [s for s in made if s.startswith("-")]
    assert len(set(made)) == len(made) and all(len(s.encode()) >= 32 for s in made)


def test_the_token_secret_made_at_the_first_start_is_kept_for_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in [v for v in os.environ if v.startswith("LB_")]:
        monkeypatch.delenv(var)
    first = parse_args(["--data-dir", str(tmp_path)]).jwt_secret
    kept = tmp_path / "jwt-secret"
    assert kept.stat().st_mode & 0o777 == 0o600 and len(first) >= 32
    assert parse_args(["--data-dir", str(tmp_path)]).jwt_secret == first  # tokens signed before still verify
    # an exported one is the game backend's: used as it is, the kept one left alone
    monkeypatch.setenv("LB_JWT_SECRETS", "b" * 32)
    assert parse_args(["--data-dir", str(tmp_path)]).jwt_secret == "b" * 32
    assert kept.read_text().strip() == first
    # a file holding no usable secret is a usage error naming it, not replaced
    monkeypatch.delenv("LB_JWT_SECRETS")
    kept.write_text("short\n")
    with pytest.raises(SystemExit) as refused:
        parse_args(["--data-dir", str(tmp_path)])
    assert refused.value.code == 2 and kept.read_text() == "short\n"
