"""A private redis-server child process: the embedded default of the local fleet, and the
server every test talks to. It never touches the default port 6379 or a server someone else runs.

With ``replica_of`` (a master's ``(host, port)``) it is a replica of that master (``replicaof``),
read-only, holding what the master holds a moment later: the replicas that serve reads
(leaderboard/replicas.py). With a ``password`` the server wants it from every client
(``requirepass``), and a replica gives it to its master too (``masterauth``). The password reaches
redis-server as configuration on its stdin: on the command line every local user could read it in
/proc/<pid>/cmdline, and in a file it would outlive the server.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import random
import re
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from urllib.parse import quote

import redis

from .children import die_with_parent

log = logging.getLogger(__name__)


def ephemeral_low(path: str = "/proc/sys/net/ipv4/ip_local_port_range") -> int:
    """The lowest port the kernel hands out as a connection's local port (32768 by default)."""
    try:
        with open(path) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


# Ports handed out lately, by every process on this machine that picks them here: a pick is
# free when made, but the process meant to listen there binds it seconds later, and until then
# a pick made elsewhere (a parallel test, a second fleet starting) could land on it too.
PORT_LEDGER = Path(tempfile.gettempdir()) / "leaderboard-free-ports"
PORT_HOLD_S = 120.0  # how long a handed-out port is not handed out again


@contextlib.contextmanager
def _ledger(path: Path) -> Iterator[dict[int, float]]:
    """The ledger's ports (port -> handed out at, unix seconds; expired ones dropped), locked for
    the block and written back after it. No ledger (a file this user may not open): an empty
    one, so picking works as it did without."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        yield {}
        return
    with os.fdopen(fd, "r+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # released when the file closes
        now, held = time.time(), {}
        for line in f.read().split("\n"):
            port, _, at = line.partition(" ")
            with contextlib.suppress(ValueError):
                if now - float(at) < PORT_HOLD_S:
                    held[int(port)] = float(at)
        yield held
        f.seek(0)
        f.truncate()
        f.write("".join(f"{port} {at}\n" for port, at in held.items()))


def free_ports(count: int, host: str = "127.0.0.1", *, ledger: Path = PORT_LEDGER) -> list[int]:
    """``count`` distinct ports free on ``host``, all bound at once while picking, so none is
    handed out twice, and none handed out here (any process) in the last ``PORT_HOLD_S``
    (the ledger). Picked below the kernel's ephemeral range: a port the kernel picks (bind to
    0) is one it may also give an outgoing connection as its local port between this pick and
    the moment the process meant to listen there binds it ("address already in use"), while a
    port below that range only a listener can take."""
    below = range(max(1024, ephemeral_low() - 16384), ephemeral_low())
    picked: list[int] = []
    with _ledger(ledger) as held, contextlib.ExitStack() as stack:
        for port in random.sample(below, min(len(below), 50 * count)):
            if port in held:
                continue
            sock = stack.enter_context(socket.socket())
            try:
                sock.bind((host, port))
            except OSError:
                continue
            picked.append(port)
            if len(picked) == count:
                break
        while len(picked) < count:  # a machine with no room below its ephemeral range
            sock = stack.enter_context(socket.socket())
            sock.bind((host, 0))
            picked.append(int(sock.getsockname()[1]))
        now = time.time()
        held.update((port, now) for port in picked)
        return picked


def free_port(host: str = "127.0.0.1") -> int:
    """One free port (free_ports)."""
    return free_ports(1, host)[0]


class RedisServer:
    """``with RedisServer(data_dir, aof=True) as server: server.url`` — started, then stopped."""

    def __init__(
        self,
        data_dir: Path | str,
        *,
        port: int = 0,
        host: str = "127.0.0.1",
        aof: bool = False,
        executable: str | None = None,
        startup_timeout: float = 10.0,
        password: str | None = None,
        pass_fds: tuple[int, ...] = (),
        replica_of: tuple[str, int] | None = None,
    ) -> None:
        self.data_dir = Path(data_dir).resolve()  # redis-server changes into it before logging
        self.host = host
        self.port = port or free_port(host)
        self.aof = aof
        self.executable = executable or shutil.which("redis-server") or "redis-server"
        self.startup_timeout = startup_timeout
        if password is not None and not re.fullmatch(r"[A-Za-z0-9_-]{1,512}", password):
            raise ValueError("the Redis password must be 1..512 letters, digits, '-' or '_'")
        self.password = password
        self.pass_fds = pass_fds  # descriptors the server holds too (the fleet's data-directory lock)
        self.replica_of = replica_of
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The URL clients use, with the password in it: never log it, log ``redacted(url)``. The
        user is named (``default``, the user ``requirepass`` sets): ``redis-cli -u`` sends an
        empty one as given and is refused."""
        auth = f"default:{quote(self.password, safe='')}@" if self.password else ""
        return f"redis://{auth}{self.host}:{self.port}/0"

    def command(self) -> list[str]:
        return [
            self.executable,
            *(["-"] if self.password else []),  # "-": configuration from stdin first (the password)
            "--port", str(self.port),
            "--bind", self.host,
            "--dir", str(self.data_dir),
            "--save", "",
            "--appendonly", "yes" if self.aof else "no",
            "--protected-mode", "yes",
            "--daemonize", "no",
            "--loglevel", "warning",
            "--logfile", str(self.data_dir / "redis.log"),
            # a replica's first sync starts at once, not after Redis's 5 s wait for others to join it
            "--repl-diskless-sync-delay", "0",
            *(["--replicaof", self.replica_of[0], str(self.replica_of[1])] if self.replica_of else []),
        ]  # fmt: skip

    def start(self) -> RedisServer:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        # Its own session: a Ctrl-C meant for the fleet must not stop Redis before the scorer has
        # acked its last batch; the fleet stops it last, in order.
        self.process = subprocess.Popen(
            self.command(),
            stdin=subprocess.PIPE if self.password else subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,  # its one line before the logfile applies ("Reading config from stdin")
            start_new_session=True,
            preexec_fn=die_with_parent,
            pass_fds=self.pass_fds,
        )
        if self.password:
            assert self.process.stdin is not None
            with contextlib.suppress(BrokenPipeError), self.process.stdin:  # exited: reported below
                self.process.stdin.write(f'requirepass "{self.password}"\n'.encode())
                if self.replica_of:
                    self.process.stdin.write(f'masterauth "{self.password}"\n'.encode())
        client = redis.Redis(host=self.host, port=self.port, password=self.password, socket_connect_timeout=0.2)
        deadline = time.monotonic() + self.startup_timeout
        try:
            while True:
                if self.process.poll() is not None:
                    raise RuntimeError(
                        f"redis-server exited with {self.process.returncode}; see {self.data_dir}/redis.log"
                    )
                try:
                    client.ping()
                    return self
                except redis.ConnectionError:
                    if time.monotonic() > deadline:
                        self.stop()
                        raise RuntimeError(f"redis-server did not answer on port {self.port}") from None
                    time.sleep(0.02)
        finally:
            client.close()

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server (idempotent): SIGTERM lets it flush the AOF, SIGKILL after ``timeout``
        s. It blocks: an event loop runs it in a thread (``asyncio.to_thread``), where a second
        Ctrl-C is still heard."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            log.warning("redis-server (pid %d) did not stop in %.0f s: killing it", self.process.pid, timeout)
            self.process.kill()
            self.process.wait(timeout)

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
