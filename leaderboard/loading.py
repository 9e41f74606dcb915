"""The function library in Redis: its code, and loading it again on a node that lost it.

Every scorer loads the library at start, on every master (``Leaderboard.load``). A node that
comes back without it — restarted with no persistence (a whole shard of a cluster lost, a
single server), flushed, or new — answers every function call ``ERR Function not found``. Each
wrapper of the library (leaderboard/library/, ``with_library``) and the scorer's acknowledgement meet that
reply, load the library on the node their call went to and call once more, in whichever process
they run: scorer, gateway, HTTP API. One load per node and process is in flight at a time,
however many calls met it at once (a gateway's own-rank reads of all its players)::

    reply = await with_library(redis, [command], lambda: execute_packed(redis, command))
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from redis.exceptions import ResponseError

from .assembly import packaged
from .transport import Command, RedisClient, execute_packed, slot_key, where

log = logging.getLogger("leaderboard.loading")
T = TypeVar("T")
LIBRARY = "leaderboard"  # its name, from the code's first line (#!lua name=leaderboard)


def library_code() -> str:
    """The function library's source, its files assembled in order (assembly.py): package data,
    so an installed wheel has it too."""
    return packaged().text


def library_missing(exc: BaseException) -> bool:
    """Redis refused a function call with ``ERR Function not found``: the node that got it has no
    function library (it restarted without persistence, was flushed, or is new). Matched on the
    reply's code and Redis's fixed message for it, as redis-py parsed them, never on a search of
    free text (a library error's message may quote anything)."""
    return isinstance(exc, ResponseError) and exc.status_code == "ERR" and str(exc) == "Function not found"


# One load in flight per client and node: every call that meets the library missing there (a
# gateway's thousands of rank reads at once) awaits the same one.
_LOADING: weakref.WeakKeyDictionary[RedisClient, dict[str, asyncio.Future[None]]] = weakref.WeakKeyDictionary()


async def restore_library(redis: RedisClient, key: str) -> None:
    """Load the function library where ``key``'s calls go (on a cluster, the master of its slot)
    after a call there met it missing (``library_missing``). Whoever meets it loads it — scorer,
    gateway, API — so a node that comes back empty serves again at once, not at the next
    scorer's start. Without REPLACE: a library another process loaded meanwhile is kept."""
    loads = _LOADING.setdefault(redis, {})
    node = await where(redis, key)
    loading = loads.get(node)
    if loading is None:
        loading = loads[node] = asyncio.ensure_future(_load_missing(redis, key, node))
        loading.add_done_callback(lambda done: _loaded(loads, node, done))
    # shielded: a caller that goes away does not cancel the load the others await
    await asyncio.shield(loading)


def _loaded(loads: dict[str, asyncio.Future[None]], node: str, done: asyncio.Future[None]) -> None:
    if loads.get(node) is done:
        del loads[node]
    if not done.cancelled():
        done.exception()  # raised to the callers that awaited it, not logged as never retrieved


async def _load_missing(redis: RedisClient, key: str, node: str) -> None:
    try:
        await execute_packed(redis, ("FUNCTION", "LOAD", library_code()), route=key)
    except ResponseError as exc:
        if exc.status_code != "ERR" or str(exc) != f"Library '{LIBRARY}' already exists":
            raise
        return  # loaded by another process since the call that met it missing
    log.warning("the function library was missing on %s (restarted empty, or flushed): loaded it", node)


async def with_library(redis: RedisClient, sent: str | Sequence[Command], call: Callable[[], Awaitable[T]]) -> T:
    """``call()``, which sends ``sent`` (its commands, or the key they are routed by); if the
    node it reached has no function library, load it there and call once more. Safe for every
    function call: a call refused with "Function not found" ran nothing (inside a MULTI, only
    the other commands ran: the caller knows whether they may run twice)."""
    try:
        return await call()
    except ResponseError as exc:
        if not library_missing(exc):
            raise
    await restore_library(redis, sent if isinstance(sent, str) else slot_key(sent))
    return await call()
