"""A private redis-server child process: the embedded default of the local fleet, and the
server every test talks to. It never touches the default port 6379 or a server someone else runs.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType

import redis

from .children import die_with_parent


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


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
    ) -> None:
        self.data_dir = Path(data_dir).resolve()  # redis-server changes into it before logging
        self.host = host
        self.port = port or free_port(host)
        self.aof = aof
        self.executable = executable or shutil.which("redis-server") or "redis-server"
        self.startup_timeout = startup_timeout
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    def command(self) -> list[str]:
        return [
            self.executable,
            "--port", str(self.port),
            "--bind", self.host,
            "--dir", str(self.data_dir),
            "--save", "",
            "--appendonly", "yes" if self.aof else "no",
            "--protected-mode", "yes",
            "--daemonize", "no",
            "--loglevel", "warning",
            "--logfile", str(self.data_dir / "redis.log"),
        ]  # fmt: skip

    def start(self) -> RedisServer:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        # Its own session: a Ctrl-C meant for the fleet must not stop Redis before the scorer has
        # acked its last batch; the fleet stops it last, in order.
        self.process = subprocess.Popen(
            self.command(), stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=die_with_parent
        )
        client = redis.Redis(host=self.host, port=self.port, socket_connect_timeout=0.2)
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

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server (idempotent): SIGTERM lets it flush the AOF, SIGKILL if it hangs."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
