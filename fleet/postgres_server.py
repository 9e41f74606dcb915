"""A private PostgreSQL server child process, for the tests and benchmarks of the durable score
log's PostgreSQL backend: initdb into a fresh directory, ``postgres`` on a free loopback port,
stopped (and its directory removed) on exit. It never touches a cluster someone else runs.

PostgreSQL refuses to run as root; as root, the server runs as the ``postgres`` user (which
Debian's package creates) and its directory belongs to that user.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

from .children import die_with_parent, end_server
from .redis_server import free_port


def postgres_bin() -> Path | None:
    """The directory of Debian's PostgreSQL server binaries (initdb, postgres), or None."""

    def version(path: str) -> int:
        part = Path(path).parts[4]  # /usr/lib/postgresql/<version>/bin/initdb
        return int(part) if part.isdigit() else 0

    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=version)
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).resolve().parent if initdb else None


class PostgresServer:
    """``with PostgresServer() as pg: pg.url`` — a throwaway server, trust auth, user ``lb``.

    ``durable=False`` (tests) turns fsync off; benchmarks keep PostgreSQL's defaults."""

    def __init__(self, *, host: str = "127.0.0.1", durable: bool = True, startup_timeout: float = 30.0) -> None:
        bindir = postgres_bin()
        if bindir is None:
            raise FileNotFoundError("PostgreSQL is not installed (Debian: apt-get install postgresql)")
        self.bindir = bindir
        self.host = host
        self.port = free_port(host)
        self.durable = durable
        self.startup_timeout = startup_timeout
        self.dir: Path | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self._user: pwd.struct_passwd | None = pwd.getpwnam("postgres") if os.geteuid() == 0 else None

    @property
    def url(self) -> str:
        return f"postgresql://lb@{self.host}:{self.port}/postgres"

    @property
    def _uid(self) -> int | None:
        return None if self._user is None else self._user.pw_uid

    @property
    def _gid(self) -> int | None:
        return None if self._user is None else self._user.pw_gid

    @property
    def _groups(self) -> list[int] | None:
        return None if self._user is None else []  # drop root's supplementary groups too

    def start(self) -> PostgresServer:
        self.dir = Path(tempfile.mkdtemp(prefix="lb-postgres-"))
        data = self.dir / "data"
        if self._user is not None:
            os.chown(self.dir, self._user.pw_uid, self._user.pw_gid)
        uid, gid, groups = self._uid, self._gid, self._groups
        initdb = [str(self.bindir / "initdb"), "-D", str(data), "-U", "lb", "--auth=trust", "-E", "UTF8", "--no-sync"]
        subprocess.run(
            initdb,
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            cwd=self.dir,
            user=uid,
            group=gid,
            extra_groups=groups,
        )
        settings = ["-c", f"listen_addresses={self.host}", "-c", f"unix_socket_directories={self.dir}"]
        if not self.durable:
            settings += ["-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"]
        with open(self.dir / "postgres.log", "wb") as logfile:
            self.process = subprocess.Popen(
                [str(self.bindir / "postgres"), "-D", str(data), "-p", str(self.port), *settings],
                stdout=subprocess.DEVNULL,
                stderr=logfile,
                cwd=self.dir,
                start_new_session=True,
                preexec_fn=die_with_parent,
                user=uid,
                group=gid,
                extra_groups=groups,
            )
        deadline = time.monotonic() + self.startup_timeout
        ready = [str(self.bindir / "pg_isready"), "-q", "-h", self.host, "-p", str(self.port), "-U", "lb"]
        while subprocess.run(ready, check=False).returncode != 0:
            if self.process.poll() is not None or time.monotonic() > deadline:
                log = (self.dir / "postgres.log").read_text(errors="replace")[-2000:]
                self.stop()
                raise RuntimeError(f"postgres did not start on port {self.port}: {log}")
            time.sleep(0.05)
        return self

    def stop(self, timeout: float = 20.0) -> None:
        """Idempotent: SIGINT is PostgreSQL's fast shutdown (SIGKILL if it hangs), then the
        directory goes."""
        end_server(self.process, self.dir, signal.SIGINT, timeout)
        self.dir = None

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
