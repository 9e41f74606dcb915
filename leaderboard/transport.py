"""The Redis transport of the wrappers: the client they expect, and packed pipelined calls."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, cast

import hiredis
import redis.asyncio as aioredis
from redis.exceptions import ResponseError


def connect(url: str, **kwargs: Any) -> aioredis.Redis:
    """A client as the wrappers expect it: str replies, undecodable bytes kept, not raised."""
    return aioredis.Redis.from_url(url, decode_responses=True, encoding_errors="surrogateescape", **kwargs)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


Command = Sequence[str | int]


async def execute_packed(redis: aioredis.Redis, *commands: Command) -> list[Any]:
    """Send ``commands`` packed by hiredis in C, pipelined on one pooled connection; one reply
    each, and the first error reply raised once every reply has been read.

    For the hot paths that send thousands of arguments per call (a batch FCALL carries about
    twenty per submission, an enqueue eight, an acknowledgement one per entry): redis-py's
    asyncio client packs each argument in Python, which was the largest cost of those calls."""
    packed = b"".join(_pack(command) for command in commands)
    pool = redis.connection_pool
    conn = await pool.get_connection()  # type: ignore[no-untyped-call]
    try:
        await conn.send_packed_command(packed, check_health=False)
        replies: list[Any] = []
        error: ResponseError | None = None
        for _ in commands:
            try:
                replies.append(await conn.read_response())
            except ResponseError as exc:  # read on: the connection must end in step with Redis
                error = error or exc
                replies.append(exc)
        if error is not None:
            raise error
        return replies
    except BaseException as exc:
        if not isinstance(exc, ResponseError):
            # A reply may still be in flight on this connection: never reuse it.
            await conn.disconnect()
        raise
    finally:
        await pool.release(conn)


def _pack(command: Command) -> bytes:
    try:
        return cast(bytes, hiredis.pack_command(tuple(command)))  # type: ignore[arg-type]  # stub: 1-tuple
    except UnicodeEncodeError:
        # Undecodable bytes kept as surrogates (see connect()): send back the original bytes.
        raw = tuple(a.encode("utf-8", "surrogateescape") if isinstance(a, str) else a for a in command)
        return cast(bytes, hiredis.pack_command(raw))  # type: ignore[arg-type]
