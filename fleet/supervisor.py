"""Start and stop a local fleet: embedded redis-server, scorer, N gateways on one port.

The load test and the tests use it too::

    async with Fleet(FleetSettings(gateways=2, port=0)) as fleet:
        print(fleet.page_url)

Children run in their own sessions (a Ctrl-C in the terminal reaches only this process, which
then stops them in order) and die with this process if it is killed (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

import redis

from leaderboard.library import library_code

from .children import die_with_parent, listening_pids
from .redis_server import RedisServer, free_port

log = logging.getLogger("fleet")


@dataclass(frozen=True, slots=True)
class FleetSettings:
    redis_url: str | None = None  # None: start the embedded redis-server
    data_dir: Path = Path("var")
    host: str = "127.0.0.1"
    port: int = 8000  # 0: a free port
    gateways: int = 2
    scorer_metrics_port: int = 0  # 0: a free port
    jwt_secret: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    demo_tokens: bool = True  # the page gets a demo player token from /demo-token
    log_level: str = "INFO"
    env: tuple[tuple[str, str], ...] = ()  # extra environment for every child (LB_* settings)
    start_timeout: float = 20.0
    drain_window: float = 1.0  # a local Ctrl-C should not take the production drain window

    def __post_init__(self) -> None:
        if not 1 <= self.gateways <= 64:
            raise ValueError("gateways must be 1..64")


class Fleet:
    def __init__(self, settings: FleetSettings) -> None:
        self.settings = settings
        self.port = settings.port or free_port(settings.host)
        self.scorer_metrics_port = settings.scorer_metrics_port or free_port(settings.host)
        self.redis_server: RedisServer | None = None
        self.redis_url = settings.redis_url or ""
        self.scorer: asyncio.subprocess.Process | None = None
        self.gateways: list[asyncio.subprocess.Process] = []
        # each gateway process answers /metrics on a port of its own (the shared port would reach
        # a random one); the same port again when a gateway is replaced
        self.gateway_metrics_ports: dict[int, int] = {}
        self._closed = False

    @property
    def page_url(self) -> str:
        return f"http://{self.settings.host}:{self.port}/"

    @property
    def ws_url(self) -> str:
        return f"ws://{self.settings.host}:{self.port}/ws"

    @property
    def metrics_urls(self) -> list[str]:
        host = self.settings.host
        ports = [*self.gateway_metrics_ports.values(), self.scorer_metrics_port]
        return [f"http://{host}:{port}/metrics" for port in ports]

    def child_env(self, **extra: str) -> dict[str, str]:
        s = self.settings
        env = {
            **os.environ,
            "LB_REDIS_URL": self.redis_url,
            "LB_LOG_LEVEL": s.log_level,
            "LB_JWT_SECRETS": s.jwt_secret,
            **dict(s.env),
            **extra,
        }
        env.setdefault("PYTHONUNBUFFERED", "1")
        return env

    async def start(self) -> Fleet:
        s = self.settings
        if s.redis_url is None:
            # Redis first: everything else needs it. AOF on, so a restart loses no applied score.
            self.redis_server = RedisServer(s.data_dir / "redis", aof=True).start()
            self.redis_url = self.redis_server.url
            log.info("embedded redis-server on port %d (AOF on, data in %s)", self.redis_server.port,
                     self.redis_server.data_dir)  # fmt: skip
        client = redis.Redis.from_url(self.redis_url)
        try:
            client.function_load(library_code(), replace=True)  # before any child calls it
        finally:
            client.close()
        self.scorer = await self._spawn(
            "scorer", "-m", "scorer", env=self.child_env(LB_SCORER_METRICS_PORT=str(self.scorer_metrics_port))
        )
        for i in range(s.gateways):
            self.gateways.append(await self.start_gateway(i))
        await self._wait_ready()
        return self

    async def start_gateway(self, index: int) -> asyncio.subprocess.Process:
        """Start gateway process ``index`` (also to replace one that died)."""
        s = self.settings
        metrics_port = self.gateway_metrics_ports.setdefault(index, free_port(s.host))
        env = self.child_env(
            LB_GW_HOST=s.host, LB_GW_PORT=str(self.port), LB_GW_REUSE_PORT="1", LB_GW_ID=f"gw-{index + 1}",
            LB_GW_METRICS_PORT=str(metrics_port),
            LB_GW_DEMO_TOKENS="1" if s.demo_tokens else "0", LB_GW_DRAIN_DELAY="0",
            LB_GW_DEMO_PLAYERS="40",  # the demo's most active players: the page shows a real rank
            LB_GW_DRAIN_WINDOW=str(s.drain_window),
        )  # fmt: skip
        return await self._spawn(f"gw-{index + 1}", "-m", "gateway", env=env)

    async def _spawn(self, name: str, *args: str, env: dict[str, str]) -> asyncio.subprocess.Process:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, *args, env=env, stdin=asyncio.subprocess.DEVNULL,
            start_new_session=True, preexec_fn=die_with_parent,
        )  # fmt: skip
        log.info("started %s (pid %d)", name, proc.pid)
        return proc

    async def _wait_ready(self) -> None:
        """Every gateway listens (each answers /readyz on its own connection) and the scorer's
        metrics endpoint answers."""
        deadline = time.monotonic() + self.settings.start_timeout
        pending = {self.port, self.scorer_metrics_port}
        while pending:
            for proc in (self.scorer, *self.gateways):
                if proc is not None and proc.returncode is not None:
                    raise RuntimeError(f"a fleet process (pid {proc.pid}) exited with {proc.returncode}")
            for port in list(pending):
                path = "/readyz" if port == self.port else "/metrics"
                if await _http_ok(self.settings.host, port, path):
                    pending.discard(port)
            if time.monotonic() > deadline:
                raise RuntimeError(f"the fleet did not become ready within {self.settings.start_timeout} s")
            await asyncio.sleep(0.1)
        # SO_REUSEPORT spreads connections over listening processes; give late ones a moment to bind
        for _ in range(50):
            if {p.pid for p in self.gateways} <= set(listening_pids(self.port)):
                return
            await asyncio.sleep(0.1)

    async def stop_process(self, proc: asyncio.subprocess.Process, timeout: float) -> int:
        """SIGTERM (the process drains or finishes its batch), SIGKILL if it hangs; the exit code."""
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), timeout)
            except TimeoutError:
                log.warning("pid %d did not stop in %.0f s: killing it", proc.pid, timeout)
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
        return proc.returncode if proc.returncode is not None else -1

    async def close(self) -> None:
        """Stop in order (idempotent): gateways drain first so clients move on, then the scorer
        finishes and acks its batch, then Redis flushes its AOF."""
        if self._closed:
            return
        self._closed = True
        await asyncio.gather(*(self.stop_process(g, self.settings.drain_window + 10) for g in self.gateways))
        if self.scorer is not None:
            await self.stop_process(self.scorer, 20)
        if self.redis_server is not None:
            self.redis_server.stop()

    async def __aenter__(self) -> Fleet:
        try:
            return await self.start()
        except BaseException:
            await self.close()
            raise

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()


async def _http_ok(host: str, port: int, path: str) -> bool:
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 1)
    except (OSError, TimeoutError):
        return False
    try:
        writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        line = await asyncio.wait_for(reader.readline(), 2)
        return line.split()[1:2] == [b"200"]
    except (OSError, TimeoutError, IndexError):
        return False
    finally:
        writer.close()
