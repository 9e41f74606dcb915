"""Start and stop a local fleet: embedded redis-server, scorer, N gateways on one port.

The load test and the tests use it too::

    async with Fleet(FleetSettings(gateways=2, port=0)) as fleet:
        print(fleet.page_url)

Children run in their own sessions (a Ctrl-C in the terminal reaches only this process, which
then stops them in order) and die with this process if it is killed (PR_SET_PDEATHSIG). A gateway
or the scorer that exits while the fleet runs is logged and started again with backoff.

The fleet protects what it owns: its data directory is locked (``fleet.lock``, flock) for its life,
so a second fleet cannot start a second redis-server on the same AOF, and it refuses a port that
something else listens on unless told to join it. The embedded redis-server listens on loopback
only and wants a password generated at each start; the URL with it goes to the child processes'
environment and to ``<data dir>/fleet.env`` (0600), never to a log, with the gateways' token secret
(so a local game server can sign tokens the gateways accept).

A stop never hangs: each phase (gateways' drain, the scorer's last batch, Redis's flush) has a
bound, ``stop_timeout``, after which its processes are killed; ``kill()`` is the forced form (a
second Ctrl-C in ``__main__``).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import logging
import os
import secrets
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from leaderboard.backoff import Backoff
from leaderboard.library import library_code
from leaderboard.lifecycle import Service
from leaderboard.transport import connect

from .children import die_with_parent, http_ok, listening_pids, stop_process
from .haproxy import BalancerConfig, Gateway, Haproxy
from .redis_server import RedisServer, free_port
from .rollout import Layout, Member

log = logging.getLogger("fleet")


@dataclass(frozen=True, slots=True)
class FleetSettings:
    redis_url: str | None = None  # None: start the embedded redis-server
    data_dir: Path = Path("var")
    host: str = "127.0.0.1"
    port: int = 8000  # 0: a free port
    gateways: int = 2
    join: bool = False  # add our gateways to a port other processes already listen on
    restart: bool = True  # restart a gateway or the scorer that exits, with backoff
    scorer_metrics_port: int = 0  # 0: a free port
    jwt_secret: str = field(default_factory=lambda: secrets.token_urlsafe(32))
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
    metrics_port: int = 0  # the scorer's metrics port, gateway N's is this + N; 0: free ones

    def __post_init__(self) -> None:
        if not 1 <= self.gateways <= 64:
            raise ValueError("gateways must be 1..64")
        if self.balancer not in ("", "haproxy"):
            raise ValueError(f"balancer must be haproxy or empty, not {self.balancer!r}")
        if not 1 <= self.balancers <= 16:
            raise ValueError("balancers must be 1..16")
        if self.stop_timeout <= 0:
            raise ValueError("stop_timeout must be > 0")


class FleetRefused(RuntimeError):
    """The data directory or the port belongs to someone else; nothing was started."""


@dataclass(slots=True)
class _Child:
    """A supervised process: the scorer (``index`` None) or gateway ``index``."""

    name: str
    index: int | None
    proc: asyncio.subprocess.Process
    backoff: Backoff
    started: float = field(default_factory=time.monotonic)


class Fleet(Service):
    def __init__(self, settings: FleetSettings, *, on_status: Callable[[str], None] | None = None) -> None:
        self.settings = settings
        self.port = settings.port or free_port(settings.host)
        self.scorer_metrics_port = settings.scorer_metrics_port or settings.metrics_port or free_port(settings.host)
        self.redis_server: RedisServer | None = None
        self.redis_url = settings.redis_url or ""
        self.scorer: asyncio.subprocess.Process | None = None
        self.gateways: list[asyncio.subprocess.Process] = []
        # each gateway process answers /metrics on a port of its own (the shared port would reach
        # a random one); the same port again when a gateway is replaced
        self.gateway_metrics_ports: dict[int, int] = {}
        # behind a balancer: each gateway's own address, kept when it is replaced
        self.gateway_addresses: dict[int, tuple[str, int]] = {}
        self.balancers: list[Haproxy] = []
        self.on_status = on_status
        self._lock = DataDirLock(settings.data_dir)
        self._stopping = asyncio.Event()
        self._watchers: list[asyncio.Task[None]] = []
        self._redis_watch: int | None = None  # pidfd of the embedded redis-server
        self._killed = False

    @property
    def page_url(self) -> str:
        return f"http://{self.settings.host}:{self.port}/"

    @property
    def ws_url(self) -> str:
        return f"ws://{self.settings.host}:{self.port}/ws"

    @property
    def env_file(self) -> Path:
        """``export LB_REDIS_URL=… LB_JWT_SECRETS=…`` for other commands; only the user can read
        it (the URL holds the password, the secret signs tokens), removed when the fleet stops."""
        return self.settings.data_dir / "fleet.env"

    @property
    def owns_redis(self) -> bool:
        """Whether this fleet started the Redis it uses (else it shares someone else's data)."""
        return self.settings.redis_url is None

    @property
    def metrics_urls(self) -> list[str]:
        host = self.settings.host
        ports = [*self.gateway_metrics_ports.values(), self.scorer_metrics_port]
        return [f"http://{host}:{port}/metrics" for port in ports]

    def status(self) -> str:
        """One line: ``fleet: 2/2 gateways, scorer up, redis up``."""
        up = sum(g.returncode is None for g in self.gateways)
        scorer = "up" if self.scorer is not None and self.scorer.returncode is None else "DOWN"
        redis_state = "up" if self.redis_server is None or self.redis_server.running() else "DOWN"
        if self.redis_server is None:
            redis_state = "external"
        line = f"fleet: {up}/{len(self.gateways)} gateways, scorer {scorer}, redis {redis_state}"
        if self.balancers:
            running = sum(b.proc is not None and b.proc.returncode is None for b in self.balancers)
            line += f", haproxy {running}/{len(self.balancers)}"
        return line

    @property
    def layout_file(self) -> Path:
        """The balancer's stats sockets and the gateways behind it, for ``python -m fleet rollout``."""
        return self.settings.data_dir / "fleet.json"

    def layout(self) -> Layout:
        return Layout(
            tuple(b.stats_socket for b in self.balancers),
            tuple(
                Member(f"gw-{i + 1}", *self.gateway_address(i), self.gateway_metrics_ports[i])
                for i in range(len(self.gateways))
            ),
        )

    def gateway_address(self, index: int) -> tuple[str, int]:
        """Where gateway ``index`` listens: the shared port, or behind a balancer 127.0.0.<index + 2>
        on a port of its own."""
        if not self.settings.balancer:
            return self.settings.host, self.port
        if index not in self.gateway_addresses:
            host = f"127.0.0.{index + 2}"
            self.gateway_addresses[index] = (host, self.settings.gateway_port or free_port(host))
        return self.gateway_addresses[index]

    def gateway_metrics_port(self, index: int) -> int:
        """Gateway ``index``'s /metrics port: ``metrics_port`` + index + 1, or a free one; kept
        when the gateway is replaced."""
        if index not in self.gateway_metrics_ports:
            base = self.settings.metrics_port
            self.gateway_metrics_ports[index] = base + index + 1 if base else free_port(self.settings.host)
        return self.gateway_metrics_ports[index]

    def pinned_addresses(self) -> list[tuple[str, int]]:
        """The addresses the settings pin (not the free ports this fleet picks): checked before
        anything starts."""
        s = self.settings
        pinned = [(s.host, self.scorer_metrics_port)] if s.metrics_port or s.scorer_metrics_port else []
        if s.metrics_port:
            pinned += [(s.host, self.gateway_metrics_port(i)) for i in range(s.gateways)]
        if s.balancer and s.gateway_port:
            pinned += [self.gateway_address(i) for i in range(s.gateways)]
        return pinned

    def _status_changed(self) -> None:
        if self.on_status is not None:
            self.on_status(self.status())

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
        # Both checks before anything starts: a refused fleet must leave the running one untouched
        # (a second redis-server appending to the same AOF would corrupt it).
        self._lock.acquire(f"fleet pid {os.getpid()}, page {self.page_url}")
        if not s.join:
            check_port_free(s.host, self.port)
        for host, port in self.pinned_addresses():
            check_port_free(host, port, join_hint=False)
        if s.redis_url is None:
            # Redis first: everything else needs it. AOF on, so a restart loses no applied score.
            # It inherits the lock: a fleet killed outright keeps the directory locked until its
            # redis-server has flushed and exited.
            self.redis_server = RedisServer(
                s.data_dir / "redis", aof=True, password=secrets.token_hex(24), pass_fds=(self._lock.fd,)
            ).start()
            self.redis_url = self.redis_server.url
            log.info("embedded redis-server on port %d (AOF on, password set, data in %s)",
                     self.redis_server.port, self.redis_server.data_dir)  # fmt: skip
            self._watch_redis()
        write_private(self.env_file, env_file_text(self.redis_url, s.jwt_secret))
        client = connect(self.redis_url)  # a cluster URL loads it on every master
        try:
            await client.function_load(library_code(), replace=True)  # before any child calls it
        finally:
            await client.aclose()
        self.scorer = await self.start_scorer()
        for i in range(s.gateways):
            self.gateways.append(await self.start_gateway(i))
        await self._wait_ready()
        if s.balancer:
            # after the gateways answer: haproxy's first health checks find them up
            await self._start_balancers()
            await self._wait_ready()
        children = [_Child("scorer", None, self.scorer, self._backoff())]
        children += [_Child(f"gw-{i + 1}", i, proc, self._backoff()) for i, proc in enumerate(self.gateways)]
        self._watchers = [asyncio.create_task(self._watch(child)) for child in children]
        return self

    def _backoff(self) -> Backoff:
        return Backoff(base=0.5, ceiling=30.0, stable_after=self.settings.stable_after)

    async def start_scorer(self) -> asyncio.subprocess.Process:
        env = self.child_env(LB_SCORER_METRICS_PORT=str(self.scorer_metrics_port))
        # The durable score log: SQLite beside Redis's data unless LB_DURABLE_URL says otherwise
        # (set empty: none).
        env.setdefault("LB_DURABLE_URL", f"sqlite:///{self.settings.data_dir.resolve()}/scores.db")
        return await self._spawn("scorer", "-m", "scorer", env=env)

    async def _start_balancers(self) -> None:
        s = self.settings
        members = [Gateway(f"gw-{i + 1}", "{}:{}".format(*self.gateway_address(i))) for i in range(s.gateways)]
        for n in range(s.balancers):
            config = BalancerConfig(
                tuple(members), bind=f"{s.host}:{self.port}", maxconn=s.balancer_maxconn, stats_socket="",
            )  # fmt: skip
            self.balancers.append(await Haproxy(config, name=f"haproxy-{n + 1}").start())
        write_private(self.layout_file, self.layout().dump())

    async def start_gateway(self, index: int) -> asyncio.subprocess.Process:
        """Start gateway process ``index`` (also to replace one that died)."""
        s = self.settings
        metrics_port = self.gateway_metrics_port(index)
        host, port = self.gateway_address(index)
        # behind the balancer every peer is haproxy (from 127.0.0.1): its X-Forwarded-For is the player
        behind = {"LB_GW_TRUSTED_PROXIES": "127.0.0.1"} if s.balancer else {}
        env = self.child_env(
            LB_GW_HOST=host, LB_GW_PORT=str(port), LB_GW_REUSE_PORT="0" if s.balancer else "1",
            LB_GW_ID=f"gw-{index + 1}", **behind,
            LB_GW_METRICS_PORT=str(metrics_port),
            LB_GW_DEMO_TOKENS="1" if s.demo_tokens else "0",
            # 0 unless given: the fleet's own rollout takes a gateway out of haproxy first
            LB_GW_DRAIN_DELAY=dict(s.env).get("LB_GW_DRAIN_DELAY", "0"),
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

    async def _watch(self, child: _Child) -> None:
        """Log the child's exit and, unless the fleet is stopping, start it again after a jittered,
        growing delay (reset once a child stayed up ``stable_after``): a crash loop waits longer
        and longer instead of spinning, and a one-off crash is healed within half a second."""
        while True:
            exited = asyncio.ensure_future(child.proc.wait())
            stopping = asyncio.ensure_future(self._stopping.wait())
            await asyncio.wait({exited, stopping}, return_when=asyncio.FIRST_COMPLETED)
            stopping.cancel()
            if self._stopping.is_set():
                exited.cancel()
                return  # close() stops it, in order
            uptime = time.monotonic() - child.started
            code = exited.result()
            # 0 is a gateway that drained on SIGTERM (a rolling restart): expected, not a fault
            log.log(logging.INFO if code == 0 else logging.WARNING, "%s (pid %d) %s after %.1f s",
                    child.name, child.proc.pid, exit_status(code), uptime)  # fmt: skip
            self._status_changed()
            if not self.settings.restart:
                return
            child.backoff.connected_for(uptime)
            delay = child.backoff.next_delay()
            log.info("restarting %s in %.1f s", child.name, delay)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), delay)
            if self._stopping.is_set():
                return
            # not cancelled midway (close() waits for this task): a process half-started could be lost
            try:
                if child.index is None:
                    child.proc = self.scorer = await self.start_scorer()
                else:
                    child.proc = self.gateways[child.index] = await self.start_gateway(child.index)
            except OSError as exc:  # e.g. out of processes: the next round waits longer
                log.error("could not restart %s: %s", child.name, exc)
                continue
            child.started = time.monotonic()
            self._status_changed()

    def _watch_redis(self) -> None:
        """Learn at once that the embedded redis-server died (a pidfd becomes readable); it is not
        restarted (its clients would find their data gone if it could not reload), only reported."""
        assert self.redis_server is not None and self.redis_server.process is not None
        proc = self.redis_server.process
        try:
            fd = os.pidfd_open(proc.pid)
        except (OSError, AttributeError):
            return  # an old kernel: the status line still asks the process
        self._redis_watch = fd

        def exited() -> None:
            asyncio.get_running_loop().remove_reader(fd)
            if self._stopping.is_set():
                return
            log.error("redis-server (pid %d) %s", proc.pid, exit_status(proc.wait()))
            self._status_changed()

        asyncio.get_running_loop().add_reader(fd, exited)

    async def _wait_ready(self) -> None:
        """Every gateway listens (each answers /readyz on its own connection) and the scorer's
        metrics endpoint answers."""
        deadline = time.monotonic() + self.settings.start_timeout
        host = self.settings.host
        pending = {(host, self.scorer_metrics_port, "/metrics")}
        if self.balancers or not self.settings.balancer:
            pending.add((host, self.port, "/readyz"))  # the players' port: a gateway, or through haproxy
        pending |= {(*self.gateway_address(i), "/readyz") for i in range(len(self.gateways))}
        while pending:
            for proc in (self.scorer, *self.gateways):
                if proc is not None and proc.returncode is not None:
                    raise RuntimeError(f"a fleet process (pid {proc.pid}) {exit_status(proc.returncode)} at start")
            for where in list(pending):
                if await http_ok(*where):
                    pending.discard(where)
            if time.monotonic() > deadline:
                raise RuntimeError(f"the fleet did not become ready within {self.settings.start_timeout} s")
            await asyncio.sleep(0.1)
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
        await asyncio.gather(*(self.stop_process(g, self.settings.drain_window + bound) for g in self.gateways))
        # the balancers after the gateways: the drained players' reconnects find a 503, not a refusal
        for balancer in self.balancers:
            await balancer.close()
        if self.balancers:
            with contextlib.suppress(FileNotFoundError):
                self.layout_file.unlink()
        if self.scorer is not None:
            await self.stop_process(self.scorer, bound)
        if self._redis_watch is not None:
            with contextlib.suppress(ValueError, RuntimeError):
                asyncio.get_running_loop().remove_reader(self._redis_watch)
            os.close(self._redis_watch)
            self._redis_watch = None
        if self.redis_server is not None:
            await stop_redis(self.redis_server, bound)
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
        procs = [*self.gateways, self.scorer, *(b.proc for b in self.balancers)]
        for proc in procs:
            if proc is not None and proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
        if self.redis_server is not None and self.redis_server.running():
            assert self.redis_server.process is not None
            with contextlib.suppress(ProcessLookupError):
                self.redis_server.process.terminate()
        if self._lock.held:
            for path in (self.env_file, self.layout_file):
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()


class DataDirLock:
    """``flock`` on ``<data dir>/fleet.lock``, held for the fleet's life: one fleet per data
    directory. The file says who holds it, so the next one can name the running fleet."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.path = data_dir / "fleet.lock"
        self.fd = -1

    @property
    def held(self) -> bool:
        return self.fd >= 0

    def acquire(self, owner: str) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        # no O_TRUNC: the holder's description must survive our failed attempt
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 4096).decode(errors="replace").strip() or "a process"
            os.close(fd)
            raise FleetRefused(
                f"the data directory {self.data_dir} is in use by another fleet ({holder}); stop that one "
                "first (Ctrl-C in its terminal), or give this one another --data-dir"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{owner}\n".encode())
        self.fd = fd

    def release(self) -> None:
        """Idempotent. The file stays: removing it would let a process that opened it a moment
        ago lock an orphaned inode while a third locks a new file."""
        if self.fd < 0:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(self.fd, 0)
        os.close(self.fd)
        self.fd = -1


def check_port_free(host: str, port: int, *, join_hint: bool = True) -> None:
    """Refuse a port something already listens on: our gateways bind with SO_REUSEPORT and
    would otherwise silently share it with a stray gateway or another fleet."""
    with socket.socket() as probe:
        # SO_REUSEADDR: a port with only TIME_WAIT connections left on it is free
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
            return
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
    holders = listening_pids(port)
    who = f" (pid {', '.join(map(str, holders))})" if holders else ""
    if not join_hint:
        raise FleetRefused(f"port {port} on {host} is already in use{who}; stop what listens there or choose another")
    raise FleetRefused(
        f"port {port} on {host} is already in use{who}; stop what listens there, choose another --port, "
        "or give --join to add this fleet's gateways to the processes on it"
    )


async def stop_redis(server: RedisServer, timeout: float) -> None:
    """``server.stop()`` without blocking the event loop (a second Ctrl-C must still be heard):
    SIGTERM, so it flushes its AOF; SIGKILL after ``timeout``."""
    proc = server.process
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        await asyncio.to_thread(proc.wait, timeout)
    except subprocess.TimeoutExpired:
        log.warning("redis-server (pid %d) did not stop in %.0f s: killing it", proc.pid, timeout)
        proc.kill()
        await asyncio.to_thread(proc.wait, timeout)


def env_file_text(redis_url: str, jwt_secrets: str) -> str:
    """``fleet.env``: what another command needs to reach this fleet, for ``source``."""
    return f"export LB_REDIS_URL={shlex.quote(redis_url)}\nexport LB_JWT_SECRETS={shlex.quote(jwt_secrets)}\n"


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to a file only its owner can read (created 0600, never world-readable)."""
    tmp = path.with_name(path.name + ".tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def exit_status(code: int | None) -> str:
    """``exited with 1`` / ``killed by SIGKILL``, for the log."""
    if code is None:
        return "is running"
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
        return f"killed by signal {-code}"
    return f"exited with {code}"
