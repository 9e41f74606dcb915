"""What every wrapper of the function library shares: one call (``execute``: the library loaded
first where a node lost it), a library error reply raised as the exception tree of errors.py and
any other error of the library with its position named as ``file.lua:line`` (``library_errors``),
and ``Calls``, the part of ``Leaderboard`` each group of wrappers builds on."""

from __future__ import annotations

import copy
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

from redis.exceptions import ResponseError

from ..assembly import packaged
from ..config import GameConfig
from ..definitions import Definitions
from ..errors import LibraryMismatch, from_reply
from ..keys import Keys
from ..loading import library_code, with_library
from ..tournaments import Tournaments
from ..transport import Command, RedisClient, execute_packed

if TYPE_CHECKING:
    from ..replicas import Replicas

T = TypeVar("T")
C = TypeVar("C", bound="Calls")


def _located(exc: ResponseError) -> ResponseError:
    """A Redis error from inside the library with its position named as ``file.lua:line`` (the
    line map of assembly.py); the error itself when it names none."""
    text = str(exc)
    named = packaged().translate(text)
    return exc if named == text else type(exc)(named)


@contextmanager
def library_errors() -> Iterator[None]:
    """A library error reply ('ERR <code> ...') raised as the exception tree's; others as they
    are, a position in the library named as its file's line."""
    try:
        yield
    except ResponseError as exc:
        mapped = from_reply(str(exc))
        if mapped is not None:
            raise mapped from None
        located = _located(exc)
        if located is exc:
            raise
        raise located from exc


async def execute(redis: RedisClient, command: Command) -> Any:
    """One packed call of a library function (loaded first where missing: ``loading.with_library``),
    its library error reply raised as the exception tree's."""
    with library_errors():
        [reply] = await with_library(redis, [command], lambda: execute_packed(redis, command))
    return reply


class Calls:
    """The game's client, keys, tournament registry and board definitions (whose refresh makes
    ``config``), and the library's load and read-only call: what every group of wrappers uses."""

    redis: RedisClient
    keys: Keys
    tournaments: Tournaments
    boards: Definitions
    replicas: Replicas | None = None  # where the player-facing reads go (reading_from)

    def reading_from(self: C, replicas: Replicas) -> C:
        """This game's wrappers, their reads (top, around, ranks) served by ``replicas`` within
        its staleness bound (leaderboard/replicas.py); the same client, keys and registries.
        Only for reads that need not see their own writes: the rest keep using ``self``."""
        reading = copy.copy(self)
        reading.replicas = replicas
        return reading

    @property
    def config(self) -> GameConfig:
        """The game's configuration as of the boards' last refresh: the environment's, or with
        the operator's stored ``default`` definition applied (definitions.py)."""
        return self.boards.config

    async def load(self) -> None:
        """Load (or replace) the function library; idempotent."""
        with library_errors():  # a compile error names its file's line
            await self.redis.function_load(library_code(), replace=True)

    async def _matched(self, layout: int, call: Callable[[], Awaitable[T]]) -> T:
        """``call()`` of a function whose call carries its layout (lb_submit's, lb_ban's...): a
        library of an older release, loaded by one of its processes during an upgrade, refuses
        it (library_mismatch) and is replaced by this one's, and the call made again; a newer
        release's refusal is raised (this process waits to be replaced)."""
        try:
            return await call()
        except LibraryMismatch as exc:
            if exc.layout >= layout:
                raise
            await self.load()
            return await call()

    async def _versioned(self, layout: int, command: Command) -> Any:
        """One call of a function whose call carries its layout (``_matched``)."""
        return await self._matched(layout, lambda: execute(self.redis, command))

    async def _replica_read(self, *commands: Command) -> list[Any]:
        """Read-only ``commands`` of one slot, on a replica when this object reads from them
        (``reading_from``), else on the master: a node without the library is given it as for
        every call, on the master (a replica gets it by replication)."""
        replicas = self.replicas

        async def call() -> list[Any]:
            return await (replicas.execute(*commands) if replicas else execute_packed(self.redis, *commands))

        with library_errors():
            return await with_library(self.redis, commands, call)

    async def _fcall_ro(self, name: str, keys: list[str], *args: str | int) -> Any:
        with library_errors():
            return await with_library(self.redis, keys[0], lambda: self.redis.fcall_ro(name, len(keys), *keys, *args))
