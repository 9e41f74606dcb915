"""Objects that own processes, tasks or sockets: ``async with`` starts them and closes them.

A start that fails part-way is closed before the error propagates, so what it had already started
(children, connections) is not left behind; ``close()`` must therefore cope with a partial start.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any, Self


class Service:
    async def start(self) -> Any:
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError

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
