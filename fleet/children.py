"""Child processes (Linux): started so that they never outlive their parent, awaited until they
answer, stopped with a bound; and who listens on a port."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import shutil
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

_PR_SET_PDEATHSIG = 1
_AFTER_KILL = 5.0  # seconds a SIGKILLed process gets to be reaped

log = logging.getLogger(__name__)


def die_with_parent() -> None:
    """``preexec_fn`` for a child: it gets SIGTERM when the process that started it dies, so a
    killed fleet or test run leaves no redis-server, scorer or gateway behind."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


async def spawn(*args: str, env: dict[str, str]) -> asyncio.subprocess.Process:
    """``python *args`` in a session of its own (a Ctrl-C in the terminal reaches only the parent,
    which stops its children in order), dying with its parent."""
    return await asyncio.create_subprocess_exec(
        sys.executable,
        *args,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        start_new_session=True,
        preexec_fn=die_with_parent,
    )


def listening_pids(port: int) -> list[int]:
    """PIDs holding a listening TCP socket on ``port`` (own processes only: /proc/<pid>/fd of
    others is unreadable), from /proc/net/tcp{,6} and each process's descriptors."""
    inodes: set[str] = set()
    for name in ("tcp", "tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/net/{name}").read_text().splitlines()[1:]:
                cols = line.split()
                if cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                    inodes.add(f"socket:[{cols[9]}]")
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fds = os.listdir(f"/proc/{entry}/fd")
            if any(os.readlink(f"/proc/{entry}/fd/{fd}") in inodes for fd in fds):
                pids.append(int(entry))
        except OSError:
            continue
    return sorted(pids)


async def http_ok(host: str, port: int, path: str, *, tls: bool = False) -> bool:
    """Whether GET ``path`` answers 200 (a gateway's /readyz): connect within 1 s, status
    line within 2 s. ``tls``: through the fleet's own TLS balancer, whose certificate is not
    checked — the question is whether it routes, asked of a process this fleet started on its
    own address, and the fleet is not given the CA its players trust."""
    try:
        context = _unverified() if tls else None
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port, ssl=context), 1)
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


def _unverified() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


async def wait_answering(
    endpoints: Iterable[tuple[str, int, str]],
    procs: Sequence[asyncio.subprocess.Process | None],
    timeout: float,
    *,
    tls: bool = False,
) -> None:
    """Until every ``(host, port, path)`` answers 200 (``http_ok``); RuntimeError if one of
    ``procs`` exits first, or after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    pending = set(endpoints)
    while pending:
        for proc in procs:
            if proc is not None and proc.returncode is not None:
                raise RuntimeError(f"a fleet process (pid {proc.pid}) {exit_status(proc.returncode)} at start")
        for where in list(pending):
            if await http_ok(*where, tls=tls):
                pending.discard(where)
        if time.monotonic() > deadline:
            raise RuntimeError(f"the fleet did not become ready within {timeout} s")
        await asyncio.sleep(0.1)


async def stop_process(proc: asyncio.subprocess.Process, timeout: float, *, sig: int | None = signal.SIGTERM) -> int:
    """Send ``sig`` (None: the caller already asked it to stop), wait up to ``timeout`` s,
    SIGKILL if it hangs; the exit code (-1 if unknown)."""
    if proc.returncode is None:
        if sig is not None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(sig)
        try:
            await asyncio.wait_for(proc.wait(), timeout)
        except TimeoutError:
            log.warning("pid %d did not stop in %.0f s: killing it", proc.pid, timeout)
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            try:  # bounded too: a process stuck in the kernel (D state) must not hang its caller
                await asyncio.wait_for(proc.wait(), _AFTER_KILL)
            except TimeoutError:
                log.error("pid %d did not exit %.0f s after SIGKILL; leaving it", proc.pid, _AFTER_KILL)
    return proc.returncode if proc.returncode is not None else -1


def end_server(process: subprocess.Popen[bytes] | None, directory: Path | None, sig: int, timeout: float) -> None:
    """A private server's stop (PostgreSQL, Prometheus): ``sig`` to a
    running ``process``, SIGKILL if it outlives ``timeout`` s, then its ``directory`` removed."""
    if process is not None and process.poll() is None:
        process.send_signal(sig)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    if directory is not None:
        shutil.rmtree(directory, ignore_errors=True)


def exit_status(code: int | None) -> str:
    """``exited with 1`` / ``killed by SIGKILL``, for the log."""
    if code is None:
        return "is running"
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
        return f"killed by signal {-code}"
    return f"exited with {code}"
