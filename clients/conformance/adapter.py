"""One adapter process as the runner sees it: commands written to its stdin, events read from its
stdout, each stamped on receipt with the runner's monotonic clock (the adapter contract,
docs/clients.md "Conformance")."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

Event = dict[str, Any]


class AdapterFailed(Exception):
    """The adapter broke the contract itself: did not start, wrote a line that is not an event,
    or exited before it was told to stop."""


@dataclass(frozen=True, slots=True)
class Received:
    at: float  # time.monotonic() when the runner read the line
    event: Event


def command_line(template: Sequence[str]) -> list[str]:
    """An adapters.json entry as a command: ``{python}`` is the interpreter running the suite."""
    return [sys.executable if part == "{python}" else part for part in template]


class Adapter:
    """``async with Adapter(cmd, cwd) as a: a.send({...})`` — started, then stopped (``stop``,
    then EOF, then a kill if it hangs); ``await a.exited()`` after, for its exit code."""

    def __init__(self, command: Sequence[str], cwd: Path, *, ready_timeout: float = 20.0) -> None:
        self.command = list(command)
        self.cwd = cwd
        self.ready_timeout = ready_timeout
        self.events: list[Received] = []
        self.ready: Event = {}
        self.stderr = b""
        self._proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None
        self._stderr: asyncio.Task[bytes] | None = None
        self._changed = asyncio.Event()
        self._broken: str | None = None
        self._eof = False

    async def __aenter__(self) -> Adapter:
        self._proc = await asyncio.create_subprocess_exec(
            *self.command,
            cwd=self.cwd,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            limit=16 * 1024 * 1024,  # a snapshot on one line
        )
        assert self._proc.stdout is not None and self._proc.stderr is not None
        self._reader = asyncio.create_task(self._read(self._proc.stdout))
        self._stderr = asyncio.create_task(self._proc.stderr.read())
        try:
            await self.wait_until(lambda: bool(self.events), self.ready_timeout)
        except TimeoutError:
            raise AdapterFailed(f"no ready line within {self.ready_timeout:g} s") from None
        first = self.events[0].event
        if first.get("event") != "ready" or not isinstance(first.get("protocol"), int):
            raise AdapterFailed(f"the first line must be ready with its protocol, not {first}")
        self.ready = first
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def send(self, command: Event) -> None:
        if self._proc is None or self._proc.stdin is None or self._proc.stdin.is_closing():
            return
        self._proc.stdin.write(orjson.dumps(command) + b"\n")

    @property
    def broken(self) -> str | None:
        """Why the adapter broke the contract (None: it has not)."""
        return self._broken

    async def wait_until(self, condition: Any, timeout: float) -> None:
        """Until ``condition()`` holds, re-checked as each line arrives; TimeoutError after ``timeout``."""
        async with asyncio.timeout(max(0.0, timeout)):
            while not condition():
                if self._broken is not None:
                    raise AdapterFailed(self._broken)
                if self._eof:
                    raise AdapterFailed("the adapter closed its stdout (exited) before this came")
                self._changed.clear()
                await self._changed.wait()

    async def close(self, timeout: float = 5.0) -> None:
        """``stop``, then EOF; returns once the adapter said ``stopped`` or closed its stdout (its
        exit is ``exited()``'s to await: an interpreter's teardown need not hold up the next
        scenario). A process that says neither within ``timeout`` is killed. Idempotent."""
        proc = self._proc
        if proc is None:
            return
        if proc.returncode is None and proc.stdin is not None and not proc.stdin.is_closing():
            self.send({"cmd": "stop"})
            with contextlib.suppress(ConnectionError):
                await proc.stdin.drain()
            proc.stdin.close()
        try:
            await self.wait_until(lambda: any(r.event.get("event") == "stopped" for r in self.events), timeout)
        except (TimeoutError, AdapterFailed):
            if proc.returncode is None:
                proc.kill()

    async def exited(self, timeout: float = 5.0) -> int:
        """The adapter's exit code, once it has exited (killed after ``timeout``), its output read."""
        proc = self._proc
        if proc is None:
            return 0
        try:
            await asyncio.wait_for(proc.wait(), timeout)
        except TimeoutError:
            proc.kill()
            await proc.wait()
        for task in (self._reader, self._stderr):
            if task is not None:
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.wait_for(task, timeout)
        if self._stderr is not None and self._stderr.done() and not self._stderr.cancelled():
            self.stderr = self._stderr.result()
        return proc.returncode if proc.returncode is not None else -1

    async def _read(self, stdout: asyncio.StreamReader) -> None:
        while line := await stdout.readline():
            at = time.monotonic()
            try:
                event = orjson.loads(line)
            except orjson.JSONDecodeError:
                event = None
            if not isinstance(event, dict) or not isinstance(event.get("event"), str):
                self._broken = f"a line that is not an event: {line[:200]!r}"
            else:
                self.events.append(Received(at, event))
            self._changed.set()
        self._eof = True
        self._changed.set()
