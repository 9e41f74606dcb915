"""What a fleet claims before it starts anything, and never takes from another: its data
directory (an ``flock`` held for its life, so a second fleet cannot start a second redis-server on
the same AOF), the ports it must listen on (refused while something else listens there), and the
files holding its secrets (only its user can read them; the token secret kept across starts)."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import secrets
import socket
from pathlib import Path

from leaderboard.auth import MIN_SECRET_BYTES

from .children import listening_pids

JWT_SECRET_FILE = "jwt-secret"  # in the data directory: the tokens' secret when none is exported


class FleetRefused(RuntimeError):
    """The data directory or the port belongs to someone else; nothing was started."""


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


def kept_secret(path: Path) -> str:
    """The token secret kept in ``path`` (0600), made there the first time: a fleet started again
    on the same data directory verifies the tokens the last one signed (a page's, a game server's
    from ``python -m api token``), where a new secret at each start refused them all. Raises
    ValueError for a file that holds no usable secret (it is not replaced: someone wrote it)."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        write_private(path, secrets.token_hex(32) + "\n")  # hex: never begins with "-"
    secret = path.read_text().strip()
    if len(secret.encode()) < MIN_SECRET_BYTES or "," in secret:
        raise ValueError(
            f"{path} holds no token secret of at least {MIN_SECRET_BYTES} bytes: remove it (the next start makes "
            "one) or export LB_JWT_SECRETS"
        )
    return secret


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to a file only its owner can read (created 0600, never world-readable)."""
    tmp = path.with_name(path.name + ".tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)
