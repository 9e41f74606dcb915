"""Objects that own processes, tasks or sockets: ``async with`` starts them and closes them.

::

    class Thing(Service):
        async def start(self) -> Thing: ...   # open, in order; may fail part-way
        async def _close(self) -> None: ...   # undo what start() did, whatever of it was done

    async with Thing() as thing:              # start(); on a failed start, close() then raise
        ...                                   # close() on the way out

A start that fails part-way is closed before the error propagates, so what it had already
opened (children, connections, tasks, listening sockets) is not left behind; ``_close()`` must
therefore cope with a partial start. ``close()`` is idempotent: the shutdown runs once, in a task
of its own, and every caller awaits that one run; a caller cancelled while it waits does not
cut the shutdown short (the task is shielded), so nothing is left half-closed.
"""

from __future__ import annotations

import asyncio
import contextlib
from types import TracebackType
from typing import Any, Self


class Service:
    _closing: asyncio.Task[None] | None = None

    async def start(self) -> Any:
        raise NotImplementedError

    async def _close(self) -> None:
        """The shutdown steps, in order; runs once, after a complete start or a partial one."""
        raise NotImplementedError

    @property
    def closing(self) -> bool:
        """Whether close() was called (it may still be running)."""
        return self._closing is not None

    async def close(self) -> None:
        """Idempotent: the first call runs ``_close()``; every call returns once it is done."""
        if self._closing is None:
            self._closing = asyncio.create_task(self._close(), name=f"close {type(self).__name__}")
        await asyncio.shield(self._closing)

    async def __aenter__(self) -> Self:
        try:
            await self.start()
        except BaseException:
            await self.close()
            raise
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()


async def stop(task: asyncio.Task[Any] | None) -> None:
    """Cancel ``task`` (None: nothing to stop) and wait until it ended: what it closes on its way
    out is closed when this returns."""
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
