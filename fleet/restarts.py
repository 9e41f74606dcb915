"""The restart policy: a child that exits while its fleet runs is logged and started again after a
jittered, growing delay, reset once it stayed up ``stable_after`` — a crash loop waits longer and
longer instead of spinning, and a one-off crash is healed within half a second. A process that
must not be restarted (the embedded redis-server: its clients would find their data gone if it
could not reload) is only watched, and its exit reported at once."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import subprocess
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from leaderboard.backoff import Backoff

from .children import exit_status

log = logging.getLogger("fleet")  # the fleet's own lines: its children's exits and restarts


@dataclass(slots=True)
class Child:
    """A supervised process, and how to start it again (``respawn`` returns the new process)."""

    name: str
    proc: asyncio.subprocess.Process
    respawn: Callable[[], Awaitable[asyncio.subprocess.Process]]
    backoff: Backoff
    started: float = field(default_factory=time.monotonic)


async def supervise(child: Child, stopping: asyncio.Event, *, restart: bool, on_change: Callable[[], None]) -> None:
    """Until ``stopping`` is set (the fleet's stop then stops the child, in order), or the child
    exited and ``restart`` is off. ``on_change`` is called when the child exits or is back."""
    while True:
        exited = asyncio.ensure_future(child.proc.wait())
        stop = asyncio.ensure_future(stopping.wait())
        await asyncio.wait({exited, stop}, return_when=asyncio.FIRST_COMPLETED)
        stop.cancel()
        if stopping.is_set():
            exited.cancel()
            return
        uptime = time.monotonic() - child.started
        code = exited.result()
        # 0 is a gateway that drained on SIGTERM (a rolling restart): expected, not a fault
        log.log(
            logging.INFO if code == 0 else logging.WARNING,
            "%s (pid %d) %s after %.1f s",
            child.name,
            child.proc.pid,
            exit_status(code),
            uptime,
        )
        on_change()
        if not restart:
            return
        child.backoff.connected_for(uptime)
        delay = child.backoff.next_delay()
        log.info("restarting %s in %.1f s", child.name, delay)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stopping.wait(), delay)
        if stopping.is_set():
            return
        # not cancelled midway (the fleet's stop waits for this task): a process half-started could be lost
        try:
            child.proc = await child.respawn()
        except OSError as exc:  # e.g. out of processes: the next round waits longer
            log.error("could not restart %s: %s", child.name, exc)
            continue
        child.started = time.monotonic()
        on_change()


class ExitWatch:
    """Calls ``on_exit(code)`` as soon as ``proc`` exits (its pidfd becomes readable); on a kernel
    without pidfds it does nothing (a status line still asks the process)."""

    def __init__(self, proc: subprocess.Popen[bytes], on_exit: Callable[[int], None]) -> None:
        self._fd = -1
        try:
            self._fd = os.pidfd_open(proc.pid)
        except (OSError, AttributeError):
            return
        loop = asyncio.get_running_loop()

        def exited() -> None:
            loop.remove_reader(self._fd)
            on_exit(proc.wait())

        loop.add_reader(self._fd, exited)

    def close(self) -> None:
        """Idempotent."""
        if self._fd < 0:
            return
        with contextlib.suppress(ValueError, RuntimeError):
            asyncio.get_running_loop().remove_reader(self._fd)
        os.close(self._fd)
        self._fd = -1
