"""The local fleet: embedded redis-server, scorer, N gateways on one port, M HTTP API processes,
started and stopped in order.

The load test and the tests use it too::

    async with Fleet(FleetSettings(gateways=2, port=0)) as fleet:
        print(fleet.page_url)

Children run in their own sessions (a Ctrl-C in the terminal reaches only this process, which
then stops them in order) and die with this process if it is killed (PR_SET_PDEATHSIG). A gateway
or the scorer that exits while the fleet runs is logged and started again with backoff
(fleet/restarts.py). Where each part listens is fleet/addresses.py's.

The fleet protects what it owns (fleet/claims.py): its data directory is locked for its life, and
it refuses a port that something else listens on unless told to join it. The embedded
redis-server listens on loopback only and wants a password generated at each start; the URL with
it goes to the child processes' environment and to ``<data dir>/fleet.env`` (0600), never to a
log, with the gateways' token secret (so a local game server can sign tokens the gateways accept).

A stop never hangs: each phase (gateways' drain, the scorer's last batch, Redis's flush) has a
bound, ``stop_timeout``, after which its processes are killed; ``kill()`` is the forced form (a
second Ctrl-C in ``__main__``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from leaderboard.backoff import Backoff
from leaderboard.library import library_code
from leaderboard.lifecycle import Service
from leaderboard.transport import connect

from .addresses import Addresses, env_file_text
from .children import exit_status, listening_pids, spawn, stop_process, wait_answering
from .claims import DataDirLock, check_port_free, write_private
from .haproxy import API_BACKEND, BalancerConfig, Gateway, Haproxy
from .layout import Layout, Member
from .redis_server import RedisServer
from .restarts import Child, ExitWatch, supervise

log = logging.getLogger("fleet")


@dataclass(frozen=True, slots=True)
class FleetSettings:
    redis_url: str | None = None  # None: start the embedded redis-server
    data_dir: Path = Path("var")
    host: str = "127.0.0.1"
    port: int = 8000  # 0: a free port
    gateways: int = 2
    apis: int = 0  # HTTP API processes: behind a balancer on the public port (/v1/), else on api_port
    api_port: int = 0  # without a balancer, the API processes' shared port; 0: port + 1 if pinned, else free
    join: bool = False  # add our gateways to a port other processes already listen on
    restart: bool = True  # restart a gateway or the scorer that exits, with backoff
    scorer_metrics_port: int = 0  # 0: a free port
    # hex: a secret never begins with "-", so it passes any command line as one argument
    jwt_secret: str = field(default_factory=lambda: secrets.token_hex(32))
    demo_tokens: bool = True  # the page gets a demo player token from /demo-token
    log_level: str = "INFO"
    env: tuple[tuple[str, str], ...] = ()  # extra environment for every child (LB_* settings)
    start_timeout: float = 20.0
    drain_window: float = 1.0  # a local Ctrl-C should not take the production drain window
    stable_after: float = 10.0  # a child up this long gets its restart backoff reset
    stop_timeout: float = 10.0  # each phase of a stop, beyond the drain window, before a SIGKILL
    # "haproxy": gateways on their own loopback addresses (127.0.0.2, .3, … as if on several
    # hosts), ``balancers`` haproxy processes in front of them on host:port
    balancer: str = ""
    balancers: int = 1
    balancer_maxconn: int = 9_000  # per haproxy process (two descriptors per player)
    gateway_port: int = 0  # behind a balancer: every gateway's port on its own address; 0: a free one each
    # a PEM holding the certificate and its key: the balancer's port speaks TLS (https://, wss://)
    tls_cert: str = ""
    metrics_port: int = 0  # the scorer's metrics port, gateway N's is this + N; 0: free ones
    # replicas of the embedded redis-server; with any, the gateways and the API read from them
    redis_replicas: int = 0

    def __post_init__(self) -> None:
        if not 1 <= self.gateways <= 64:
            raise ValueError("gateways must be 1..64")
        if not 0 <= self.apis <= 16:
            raise ValueError("apis must be 0..16")
        if self.balancer not in ("", "haproxy"):
            raise ValueError(f"balancer must be haproxy or empty, not {self.balancer!r}")
        if not 1 <= self.balancers <= 16:
            raise ValueError("balancers must be 1..16")
        if self.tls_cert and not self.balancer:
            raise ValueError("a TLS certificate is the balancer's: it needs --balancer haproxy")
        if self.tls_cert and not os.access(self.tls_cert, os.R_OK):
            raise ValueError(f"the TLS certificate {self.tls_cert} is not a readable file")
        if self.stop_timeout <= 0:
            raise ValueError("stop_timeout must be > 0")
        if not 0 <= self.redis_replicas <= 8:
            raise ValueError("redis_replicas must be 0..8")
        if self.redis_replicas and self.redis_url is not None:
            raise ValueError("replicas are the embedded redis-server's: not with a Redis URL given")


class Fleet(Service):
    def __init__(self, settings: FleetSettings, *, on_status: Callable[[str], None] | None = None) -> None:
        self.settings = settings
        self.addresses = Addresses(
            settings.host,
            settings.port,
            balanced=bool(settings.balancer),
            tls=bool(settings.tls_cert),
            gateway_port=settings.gateway_port,
            metrics_port=settings.metrics_port,
            scorer_metrics_port=settings.scorer_metrics_port,
            api_port=settings.api_port,
        )
        self.redis_server: RedisServer | None = None
        self.redis_replicas: list[RedisServer] = []
        self.redis_url = settings.redis_url or ""
        self.scorer: asyncio.subprocess.Process | None = None
        self.gateways: list[asyncio.subprocess.Process] = []
        self.apis: list[asyncio.subprocess.Process] = []
        self.balancers: list[Haproxy] = []
        self.on_status = on_status
        self._lock = DataDirLock(settings.data_dir)
        self._stopping = asyncio.Event()
        self._watchers: list[asyncio.Task[None]] = []
        self._redis_watch: ExitWatch | None = None
        self._killed = False

    @property
    def port(self) -> int:
        """The players' port."""
        return self.addresses.port

    @property
    def page_url(self) -> str:
        return self.addresses.page_url

    @property
    def ws_url(self) -> str:
        return self.addresses.ws_url

    @property
    def api_url(self) -> str:
        """The HTTP API's base URL (``…/v1/``); empty without API processes."""
        return self.addresses.api_url if self.settings.apis else ""

    def gateway_address(self, index: int) -> tuple[str, int]:
        return self.addresses.gateway(index)

    @property
    def env_file(self) -> Path:
        """``export LB_REDIS_URL=… LB_JWT_SECRETS=…`` for other commands; only the user can read
        it (the URL holds the password, the secret signs tokens), removed when the fleet stops."""
        return self.settings.data_dir / "fleet.env"

    @property
    def owns_redis(self) -> bool:
        """Whether this fleet started the Redis it uses (else it shares someone else's data)."""
        return self.settings.redis_url is None

    def status(self) -> str:
        """One line: ``fleet: 2/2 gateways, scorer up, redis up``."""
        up = sum(g.returncode is None for g in self.gateways)
        scorer = "up" if self.scorer is not None and self.scorer.returncode is None else "DOWN"
        redis_state = "up" if self.redis_server is None or self.redis_server.running() else "DOWN"
        if self.redis_server is None:
            redis_state = "external"
        line = f"fleet: {up}/{len(self.gateways)} gateways, scorer {scorer}, redis {redis_state}"
        if self.apis:
            line += f", http api {sum(a.returncode is None for a in self.apis)}/{len(self.apis)}"
        if self.balancers:
            running = sum(b.proc is not None and b.proc.returncode is None for b in self.balancers)
            line += f", haproxy {running}/{len(self.balancers)}"
        return line

    @property
    def layout_file(self) -> Path:
        """The balancer's stats sockets and the gateways behind it, for ``python -m fleet rollout``."""
        return self.settings.data_dir / "fleet.json"

    def layout(self) -> Layout:
        a = self.addresses
        return Layout(
            tuple(b.stats_socket for b in self.balancers),
            tuple(Member(f"gw-{i + 1}", *a.gateway(i), a.gateway_metrics_port(i)) for i in range(len(self.gateways))),
            tuple(Member(f"api-{i + 1}", *a.api(i), a.api(i)[1], backend=API_BACKEND) for i in range(len(self.apis))),
        )

    def _status_changed(self) -> None:
        if self.on_status is not None:
            self.on_status(self.status())

    def child_env(self, **extra: str) -> dict[str, str]:
        s = self.settings
        env = {
            **({"LB_READ_REPLICAS": "1"} if s.redis_replicas else {}),  # what replicas are started for
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
        # Both checks before anything starts: a refused fleet must leave the running one untouched
        # (a second redis-server appending to the same AOF would corrupt it).
        self._lock.acquire(f"fleet pid {os.getpid()}, page {self.page_url}")
        if not s.join:
            check_port_free(s.host, self.port)
        # joining a port also means sharing the API's with the processes already there
        for host, port in self.addresses.pinned(s.gateways, 0 if s.join else s.apis):
            check_port_free(host, port, join_hint=False)
        if s.redis_url is None:
            # Redis first: everything else needs it. AOF on, so a restart loses no applied score.
            # It inherits the lock: a fleet killed outright keeps the directory locked until its
            # redis-server has flushed and exited.
            self.redis_server = RedisServer(
                s.data_dir / "redis", aof=True, password=secrets.token_hex(24), pass_fds=(self._lock.fd,)
            ).start()
            self.redis_url = self.redis_server.url
            log.info(
                "embedded redis-server on port %d (AOF on, password set, data in %s)",
                self.redis_server.port,
                self.redis_server.data_dir,
            )
            assert self.redis_server.process is not None
            self._redis_watch = ExitWatch(self.redis_server.process, self._redis_exited)
            master = (self.redis_server.host, self.redis_server.port)
            for i in range(s.redis_replicas):
                # no AOF: a replica restarted resyncs from its master; the master's password for both ways
                replica = RedisServer(
                    s.data_dir / f"redis-replica-{i + 1}", password=self.redis_server.password, replica_of=master
                )
                self.redis_replicas.append(replica.start())
                log.info("redis-server replica on port %d", replica.port)
        write_private(self.env_file, env_file_text(self.redis_url, s.jwt_secret, self.api_url))
        client = connect(self.redis_url)  # a cluster URL loads it on every master
        try:
            await client.function_load(library_code(), replace=True)  # before any child calls it
        finally:
            await client.aclose()
        self.scorer = await self.start_scorer()
        for i in range(s.gateways):
            self.gateways.append(await self.start_gateway(i))
        for i in range(s.apis):
            self.apis.append(await self.start_api(i))
        await self._wait_ready()
        if s.balancer:
            # after the gateways answer: haproxy's first health checks find them up
            await self._start_balancers()
            await self._wait_ready()
        children = [Child("scorer", self.scorer, functools.partial(self._restart, None), self._backoff())]
        children += [
            Child(f"gw-{i + 1}", proc, functools.partial(self._restart, i), self._backoff())
            for i, proc in enumerate(self.gateways)
        ]
        children += [
            Child(f"api-{i + 1}", proc, functools.partial(self._restart_api, i), self._backoff())
            for i, proc in enumerate(self.apis)
        ]
        self._watchers = [
            asyncio.create_task(supervise(child, self._stopping, restart=s.restart, on_change=self._status_changed))
            for child in children
        ]
        return self

    def _backoff(self) -> Backoff:
        return Backoff(base=0.5, ceiling=30.0, stable_after=self.settings.stable_after)

    async def _restart(self, index: int | None) -> asyncio.subprocess.Process:
        """Start the scorer (``index`` None) or gateway ``index`` again, in its place."""
        if index is None:
            self.scorer = await self.start_scorer()
            return self.scorer
        self.gateways[index] = await self.start_gateway(index)
        return self.gateways[index]

    async def _restart_api(self, index: int) -> asyncio.subprocess.Process:
        self.apis[index] = await self.start_api(index)
        return self.apis[index]

    def _redis_exited(self, code: int) -> None:
        if self._stopping.is_set():
            return
        assert self.redis_server is not None and self.redis_server.process is not None
        log.error("redis-server (pid %d) %s", self.redis_server.process.pid, exit_status(code))
        self._status_changed()

    async def start_scorer(self) -> asyncio.subprocess.Process:
        env = self.child_env(LB_SCORER_METRICS_PORT=str(self.addresses.scorer_metrics_port))
        # The durable score log: SQLite beside Redis's data unless LB_DURABLE_URL says otherwise
        # (set empty: none).
        env.setdefault("LB_DURABLE_URL", f"sqlite:///{self.settings.data_dir.resolve()}/scores.db")
        return await self._spawn("scorer", "-m", "scorer", env=env)

    async def _start_balancers(self) -> None:
        s = self.settings
        members = [Gateway(f"gw-{i + 1}", "{}:{}".format(*self.gateway_address(i))) for i in range(s.gateways)]
        apis = [Gateway(f"api-{i + 1}", "{}:{}".format(*self.addresses.api(i))) for i in range(s.apis)]
        config = BalancerConfig(
            tuple(members),
            bind=f"{s.host}:{self.port}",
            apis=tuple(apis),
            tls_cert=s.tls_cert,  # a relative path: from the fleet's directory, haproxy's too
            maxconn=s.balancer_maxconn,
            stats_socket="",
        )
        for n in range(s.balancers):
            # listed before it starts: a start that fails part-way is closed with the fleet
            balancer = Haproxy(config, name=f"haproxy-{n + 1}")
            self.balancers.append(balancer)
            await balancer.start()
        write_private(self.layout_file, self.layout().dump())

    async def start_gateway(self, index: int) -> asyncio.subprocess.Process:
        """Start gateway process ``index`` (also to replace one that died)."""
        s = self.settings
        host, port = self.gateway_address(index)
        # behind the balancer every peer is haproxy (from 127.0.0.1): its X-Forwarded-For is the player
        behind = {"LB_GW_TRUSTED_PROXIES": "127.0.0.1"} if s.balancer else {}
        env = self.child_env(
            LB_GW_HOST=host,
            LB_GW_PORT=str(port),
            LB_GW_REUSE_PORT="0" if s.balancer else "1",
            LB_GW_ID=f"gw-{index + 1}",
            **behind,
            LB_GW_METRICS_PORT=str(self.addresses.gateway_metrics_port(index)),
            LB_GW_DEMO_TOKENS="1" if s.demo_tokens else "0",
            # 0 unless given: the fleet's own rollout takes a gateway out of haproxy first
            LB_GW_DRAIN_DELAY=dict(s.env).get("LB_GW_DRAIN_DELAY", "0"),
            LB_GW_DEMO_PLAYERS="40",  # the demo's most active players: the page shows a real rank
            LB_GW_DRAIN_WINDOW=str(s.drain_window),
        )
        return await self._spawn(f"gw-{index + 1}", "-m", "gateway", env=env)

    async def start_api(self, index: int) -> asyncio.subprocess.Process:
        """Start HTTP API process ``index`` (also to replace one that died)."""
        s = self.settings
        host, port = self.addresses.api(index)
        # behind the balancer every peer is haproxy (from 127.0.0.1): its X-Forwarded-For is the client
        behind = {"LB_API_TRUSTED_PROXIES": "127.0.0.1"} if s.balancer else {}
        env = self.child_env(
            LB_API_HOST=host,
            LB_API_PORT=str(port),
            LB_API_REUSE_PORT="0" if s.balancer else "1",
            LB_API_METRICS_PORT=str(self.addresses.api_metrics_port(index)),
            **behind,
            # a local stop should not wait long for slow requests (?wait=applied is bounded)
            LB_API_DRAIN_TIMEOUT=dict(s.env).get("LB_API_DRAIN_TIMEOUT", str(max(1, int(s.drain_window) + 2))),
        )
        return await self._spawn(f"api-{index + 1}", "-m", "api", env=env)

    async def _spawn(self, name: str, *args: str, env: dict[str, str]) -> asyncio.subprocess.Process:
        proc = await spawn(*args, env=env)
        log.info("started %s (pid %d)", name, proc.pid)
        return proc

    async def _wait_ready(self) -> None:
        """Every gateway listens (each answers /readyz on its own connection) and the scorer's
        metrics endpoint answers."""
        host = self.settings.host
        endpoints = {(host, self.addresses.scorer_metrics_port, "/metrics")}
        endpoints |= {(*self.gateway_address(i), "/readyz") for i in range(len(self.gateways))}
        endpoints |= {(*self.addresses.api(i), "/readyz") for i in range(len(self.apis))}
        procs = [self.scorer, *self.gateways, *self.apis]
        await wait_answering(endpoints, procs, self.settings.start_timeout)
        if self.balancers or not self.settings.balancer:
            # the players' port: a gateway, or through haproxy (in TLS when it speaks it)
            players = {(host, self.port, "/readyz")}
            await wait_answering(players, procs, self.settings.start_timeout, tls=bool(self.settings.tls_cert))
        if self.balancers:
            return  # each gateway answered on its own address
        # SO_REUSEPORT spreads connections over listening processes; give late ones a moment to bind
        for _ in range(50):
            if {p.pid for p in self.gateways} <= set(listening_pids(self.port)):
                return
            await asyncio.sleep(0.1)

    async def stop_process(self, proc: asyncio.subprocess.Process, timeout: float) -> int:
        """SIGTERM (the process drains or finishes its batch), SIGKILL if it hangs; the exit code."""
        return await stop_process(proc, timeout)

    async def _close(self) -> None:
        """Stop in order: no more restarts; gateways drain first so clients move on,
        then the scorer finishes and acks its batch, then Redis flushes its AOF; the lock goes last,
        when nothing of this fleet writes to the data directory any more. Each phase is bounded
        (``stop_timeout``, plus the drain window for the gateways): what hangs is killed, and the
        next phase runs. Nothing after kill()."""
        if self._killed:
            return
        self._stopping.set()
        bound = self.settings.stop_timeout
        # each returns at once, or after the restart it is finishing (a spawn: quick, but bounded too)
        if self._watchers:
            await asyncio.wait(self._watchers, timeout=bound)
        # the HTTP API's processes with them: each finishes the requests under way, then exits
        stopping = [*self.gateways, *self.apis]
        await asyncio.gather(*(self.stop_process(p, self.settings.drain_window + bound) for p in stopping))
        # the balancers after the gateways: the drained players' reconnects find a 503, not a refusal
        for balancer in self.balancers:
            await balancer.close()
        if self.balancers:
            with contextlib.suppress(FileNotFoundError):
                self.layout_file.unlink()
        if self.scorer is not None:
            await self.stop_process(self.scorer, bound)
        if self._redis_watch is not None:
            self._redis_watch.close()
        for replica in self.redis_replicas:  # before their master: nothing of theirs to keep
            await asyncio.to_thread(replica.stop, bound)
        if self.redis_server is not None:
            await asyncio.to_thread(self.redis_server.stop, bound)  # in a thread: a second Ctrl-C is heard
        if self._lock.held:
            with contextlib.suppress(FileNotFoundError):
                self.env_file.unlink()
        self._lock.release()

    def kill(self) -> None:
        """The forced stop (a second Ctrl-C), synchronous so that it works whatever the event loop
        is stuck in: SIGKILL to the gateways, the scorer and the balancers (the scorer's unacked
        batch stays pending in the stream and is applied again later: nothing is lost), SIGTERM to
        Redis (it flushes its AOF and exits by itself; it holds the data directory's lock until
        then), and ``fleet.env`` removed. The caller exits right after."""
        self._killed = True
        procs = [*self.gateways, *self.apis, self.scorer, *(b.proc for b in self.balancers)]
        for proc in procs:
            if proc is not None and proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
        for server in (self.redis_server, *self.redis_replicas):
            if server is not None and server.running():
                assert server.process is not None
                with contextlib.suppress(ProcessLookupError):
                    server.process.terminate()
        if self._lock.held:
            for path in (self.env_file, self.layout_file):
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
