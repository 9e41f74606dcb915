"""What a load test runs against, and how it watches it.

* ``private_fleet``: a fleet of its own (``fleet.supervisor.Fleet``: embedded redis-server on a
  free port unless a Redis URL is given, a scorer, N gateways on one free port);
* an existing fleet: ``--url`` and ``--redis-url``; gateway PIDs given or found in /proc as the
  processes listening on the URL's port;
* ``NaiveGateway``: bench/naive_gateway.py as a child, relaying the same board's channel.

``SnapshotMonitor`` subscribes to the board's channel like a gateway does: what it sees published
is what every socket should receive.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

from redis.asyncio.client import PubSub

from fleet.children import die_with_parent, listening_pids
from fleet.redis_server import free_port
from fleet.supervisor import Fleet, FleetSettings
from leaderboard import connect
from leaderboard.transport import shard_pubsub

from .messages import snapshot_identity
from .procstat import command_line, runs_gateway, usage
from .swarm import with_game


def _summed(pids: list[int], field: str) -> float:
    """A /proc figure of the processes (procstat.Usage), summed; a process gone counts 0."""
    total = 0.0
    for pid in pids:
        with contextlib.suppress(OSError):
            total += getattr(usage(pid), field)
    return total


def cpu_s(pids: list[int]) -> float:
    """CPU seconds the processes used, summed."""
    return _summed(pids, "cpu_s")


def wait_s(pids: list[int]) -> float:
    """Seconds the processes' threads waited runnable for a core, summed."""
    return _summed(pids, "wait_s")


def rss_bytes(pids: list[int]) -> int:
    return int(_summed(pids, "rss_bytes"))


def gateway_processes(port: int, given: list[int]) -> tuple[list[int], str]:
    """The gateway processes a run against a running fleet measures (CPU, memory): those given,
    each checked to be a gateway, else the gateways listening on the URL's port. When there are
    none (a balancer holds the port), ([], why): the figures that need them are left out and
    their rows say why, rather than count a process that is not a gateway."""
    for pid in given:
        if not runs_gateway(argv := command_line(pid)):
            raise ValueError(f"process {pid} is not a gateway (python -m gateway): it runs {_program(argv)}")
    if given:
        return given, ""
    listening = listening_pids(port)
    pids = [pid for pid in listening if runs_gateway(command_line(pid))]
    if pids:
        return pids, ""
    if listening:
        held = ", ".join(f"{_program(command_line(pid))} (pid {pid})" for pid in listening)
        return [], f"port {port} is held by {held}, not a gateway; give the gateways' PIDs with --gateway-pid"
    return [], f"no process of this user listens on port {port}; give the gateways' PIDs with --gateway-pid"


def _program(argv: list[str]) -> str:
    """What a command line runs, by name only (its arguments may hold secrets)."""
    return os.path.basename(argv[0]) if argv else "nothing readable"


@dataclass
class Target:
    """Where sockets connect and submissions go; ``fleet`` is set when this tool started it.

    ``player_prefix`` names the run's synthetic players (``<prefix><index>``); in a Redis this tool
    did not start it is unique to the run (``cleanup.run_prefix()``), and ``clean_up`` is set: the
    run removes its players afterwards (loadtest/cleanup.py)."""

    ws_url: str
    redis_url: str
    game: str
    jwt_secret: str = ""
    gateway_pids: list[int] = field(default_factory=list)
    gateways_unmeasured: str = ""  # why there are no gateway_pids (``gateway_processes``)
    fleet: Fleet | None = None
    balancer_pids: list[int] = field(default_factory=list)  # haproxy in front (--balancer haproxy)
    direct_urls: list[str] = field(default_factory=list)  # each gateway's own URL, behind a balancer
    player_prefix: str = "p"
    clean_up: bool = False


def fleet_settings(
    *,
    gateways: int,
    redis_url: str | None,
    data_dir: Path,
    game: str,
    env: dict[str, str],
    balancer: str = "",
    balancers: int = 1,
    balancer_maxconn: int = 9_000,
    drain_window: float = 1.0,
) -> FleetSettings:
    base = {
        "LB_GAME": game,
        # spread load-test handshakes are not an attack: the cap applies in storm only (see there)
        "LB_GW_MAX_CONNECTIONS": "50000",
        "LB_SCORER_STATS_S": "0",
    }
    return FleetSettings(
        redis_url=redis_url,
        data_dir=data_dir,
        port=0,
        gateways=gateways,
        demo_tokens=False,
        log_level="WARNING",
        env=tuple({**base, **env}.items()),
        drain_window=drain_window,
        # storm kills a gateway on purpose and measures the survivors; a rolling restart needs
        # the fleet to start each drained gateway again
        restart=balancer != "",
        balancer=balancer,
        balancers=balancers,
        balancer_maxconn=balancer_maxconn,
    )


@contextlib.asynccontextmanager
async def private_fleet(
    *,
    gateways: int,
    redis_url: str | None,
    data_dir: Path,
    game: str,
    env: dict[str, str],
    balancer: str = "",
    balancers: int = 1,
    balancer_maxconn: int = 9_000,
    drain_window: float = 1.0,
) -> AsyncIterator[Target]:
    settings = fleet_settings(
        gateways=gateways,
        redis_url=redis_url,
        data_dir=data_dir,
        game=game,
        env=env,
        balancer=balancer,
        balancers=balancers,
        balancer_maxconn=balancer_maxconn,
        drain_window=drain_window,
    )
    async with Fleet(settings) as fleet:
        yield Target(
            # named in the URL: the processes may serve several games (LB_GAMES in --gateway-env)
            ws_url=with_game(fleet.ws_url, game),
            redis_url=fleet.redis_url,
            game=game,
            jwt_secret=settings.jwt_secret,
            gateway_pids=[p.pid for p in fleet.gateways],
            fleet=fleet,
            balancer_pids=[b.proc.pid for b in fleet.balancers if b.proc is not None],
            direct_urls=[
                with_game("ws://{}:{}/ws".format(*fleet.gateway_address(i)), game) for i in range(len(fleet.gateways))
            ]
            if fleet.balancers
            else [],
        )


async def wait_listening(port: int, pids: list[int], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not set(pids) <= set(listening_pids(port)):
        if time.monotonic() > deadline:
            raise RuntimeError(f"gateway processes {pids} do not listen on port {port}")
        await asyncio.sleep(0.05)


class NaiveGateway:
    """``python -m bench.naive_gateway`` on a free port, relaying ``channel``."""

    def __init__(self, redis_url: str, channel: str, host: str = "127.0.0.1") -> None:
        self.redis_url, self.channel, self.host = redis_url, channel, host
        self.port = free_port(host)
        self.proc: asyncio.subprocess.Process | None = None

    @property
    def ws_url(self) -> str:
        return f"ws://{self.host}:{self.port}/ws"

    async def __aenter__(self) -> NaiveGateway:
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bench.naive_gateway",
            "--port",
            str(self.port),
            "--channel",
            self.channel,
            # in the environment, not the command line: any local user can read /proc/<pid>/cmdline
            env={**os.environ, "LB_REDIS_URL": self.redis_url},
            stdin=asyncio.subprocess.DEVNULL,
            preexec_fn=die_with_parent,
        )
        try:
            await wait_listening(self.port, [self.proc.pid])
        except BaseException:
            await self.__aexit__()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.proc.wait(), 10)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()


class SnapshotMonitor:
    """Every snapshot published on ``channel``: (key, ts ms, wall time seen). Subscribed as a
    gateway does (``shard_pubsub``): on a cluster, on the master that owns the channel's slot."""

    def __init__(self, redis_url: str, channel: str) -> None:
        self.redis = connect(redis_url, decode=False)
        self.channel = channel
        self.seen: list[tuple[str, int, float]] = []
        self.pubsub: PubSub | None = None
        self._task: asyncio.Task[None] | None = None

    async def _run(self, pubsub: PubSub) -> None:
        async for message in pubsub.listen():
            if message["type"] == "smessage":
                ident = snapshot_identity(message["data"])
                if ident is not None:
                    self.seen.append((ident[0], ident[1], time.time()))

    async def __aenter__(self) -> SnapshotMonitor:
        # subscribed here, not in the task: an unreachable Redis fails the run at once, by name
        try:
            async with asyncio.timeout(10):
                self.pubsub = await shard_pubsub(self.redis, self.channel)
                await self.pubsub.ssubscribe(self.channel)
        except BaseException:
            await self.__aexit__()
            raise
        self._task = asyncio.create_task(self._run(self.pubsub))
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self.pubsub is not None:
            await self.pubsub.aclose()
        await self.redis.aclose()

    def between(self, t0: float, t1: float) -> list[tuple[str, int]]:
        """Snapshots built (``ts``) within [t0, t1] (wall seconds)."""
        return [(k, ts) for k, ts, _ in self.seen if t0 <= ts / 1000 <= t1]
