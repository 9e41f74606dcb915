"""The Redis transport of the wrappers: the client they expect, and packed pipelined calls.

One client abstraction for a single redis-server and a Redis Cluster: ``connect()`` gives a
cluster-aware client when the URL's scheme is ``redis+cluster://`` (or ``rediss+cluster://``),
naming any node of the cluster; everything above this module calls the same methods either way.
Every key of a game shares the hash tag ``{game}``, so each call touches one slot, and the
cluster client sends it to the master owning that slot (following ``MOVED`` after a resharding
or a failover). The few things redis-py's cluster client does not do the way the hot paths need
are here, once: ``execute_packed`` (hiredis-packed pipelines, sent to the slot's master) and
``shard_pubsub`` (a sharded pub/sub connection on the node that owns a game's slot).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from typing import Any, TypeAlias, cast

import hiredis
import redis.asyncio as aioredis
from redis.asyncio.client import PubSub
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import Connection
from redis.exceptions import AskError, ClusterDownError, MovedError, ResponseError, TryAgainError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

RedisClient: TypeAlias = aioredis.Redis | RedisCluster
"""What ``connect()`` returns: a plain client, or a cluster-aware one for a cluster URL."""

_CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}
_REDIRECTS = (MovedError, AskError, TryAgainError, ClusterDownError)
_NODE_OPTIONS = {
    "connection_class", "username", "password", "credential_provider", "client_name", "protocol",
    "socket_timeout", "socket_connect_timeout", "socket_keepalive", "socket_keepalive_options",
    "decode_responses", "encoding", "encoding_errors",
}  # fmt: skip
_REDIRECT_TRIES = 5  # a slot moving, or a failover being agreed on, settles within a few retries


def is_cluster_url(url: str) -> bool:
    return url.partition("://")[0].lower() in _CLUSTER_SCHEMES


def connect(url: str, *, decode: bool = True, **kwargs: Any) -> RedisClient:
    """A client as the wrappers expect it: str replies, undecodable bytes kept, not raised.
    ``decode=False``: bytes replies (snapshots forwarded unchanged). A ``redis+cluster://`` URL
    gives a cluster-aware client (see the module docstring)."""
    if decode:
        kwargs.update(decode_responses=True, encoding_errors="surrogateescape")
    scheme, sep, rest = url.partition("://")
    plain = _CLUSTER_SCHEMES.get(scheme.lower())
    if plain is None:
        return aioredis.Redis.from_url(url, **kwargs)
    # A replica promoted in a failover answers within about the cluster's node timeout; redis-py
    # retries a command through its own topology refreshes, and the callers' backoff does the rest.
    kwargs.pop("health_check_interval", None)  # not a cluster-client option
    return RedisCluster.from_url(f"{plain}{sep}{rest}", **kwargs)


def torn_down(exc: BaseException) -> bool:
    """A command on a connection that another task disconnected under it. redis-py's cluster
    client (8.1) disconnects every connection of a node that a topology refresh drops, a failover
    included, also one a command is connecting or writing on at that moment: that command then
    fails with ``AttributeError`` on the connection's writer (now None) instead of a
    ``ConnectionError``. It is a lost connection, and callers treat it as one (back off, retry)."""
    return isinstance(exc, AttributeError) and exc.obj is None and exc.name in ("writelines", "drain")


def now_ms() -> int:
    return time.time_ns() // 1_000_000


Command = Sequence[str | int]


async def execute_packed(redis: RedisClient, *commands: Command) -> list[Any]:
    """Send ``commands`` packed by hiredis in C, pipelined on one pooled connection; one reply
    each, and the first error reply raised once every reply has been read.

    For the hot paths that send thousands of arguments per call (a batch FCALL carries about
    twenty per submission, an enqueue eight, an acknowledgement one per entry): redis-py's
    asyncio client packs each argument in Python, which was the largest cost of those calls.
    On a cluster, all ``commands`` must touch one slot (one game's keys); they go to its master."""
    packed = b"".join(_pack(command) for command in commands)
    if isinstance(redis, RedisCluster):
        return await _execute_cluster(redis, packed, commands)
    pool = redis.connection_pool
    conn = await pool.get_connection()  # type: ignore[no-untyped-call]
    try:
        return await _send(conn, packed, len(commands))
    finally:
        await pool.release(conn)


async def _execute_cluster(cluster: RedisCluster, packed: bytes, commands: Sequence[Command]) -> list[Any]:
    key = _slot_key(commands)
    for attempt in range(_REDIRECT_TRIES):
        await cluster.initialize()
        node = cluster.get_node_from_key(key)
        if node is None:  # pragma: no cover - get_node_from_key raises for an uncovered slot
            raise ClusterDownError(f"no node serves the slot of {key!r}")
        conn = node.acquire_connection()
        try:
            if not conn.is_connected:
                try:
                    await conn.connect()  # type: ignore[no-untyped-call]
                except (ConnectionError, TimeoutError, OSError, RedisConnectionError, RedisTimeoutError):
                    # Nothing was sent: the node is gone (a failover) or the layout is stale.
                    # Learn it anew and retry; until a replica is promoted this still fails.
                    if attempt == _REDIRECT_TRIES - 1:
                        raise
                    await _refresh_later(cluster)
                    await asyncio.sleep(0.05 * (attempt + 1))
                    continue
            return await _send(conn, packed, len(commands))
        except _REDIRECTS:
            # Nothing ran (a redirect is refused before execution): learn the new layout, retry.
            if attempt == _REDIRECT_TRIES - 1:
                raise
            await cluster.nodes_manager.initialize()
            await asyncio.sleep(0.05 * attempt)
        except (ConnectionError, TimeoutError, OSError, RedisConnectionError, RedisTimeoutError):
            # The master may be gone: learn the layout anew on the next call. Not retried here,
            # because the command may have run; the callers' backoff decides.
            await _refresh_later(cluster)
            raise
        finally:
            node.release(conn)
    raise AssertionError("unreachable")


async def _refresh_later(cluster: RedisCluster) -> None:
    with contextlib.suppress(Exception):  # every node may be unreachable for now; the next call retries
        await cluster.nodes_manager.initialize()


def _slot_key(commands: Sequence[Command]) -> str:
    """The key that decides where ``commands`` go: the first key of the first keyed command."""
    for command in commands:
        name = str(command[0]).upper()
        if name in ("FCALL", "FCALL_RO"):
            if int(command[2]) > 0:
                return str(command[3])
        elif name not in ("MULTI", "EXEC", "WAIT") and len(command) > 1:
            return str(command[1])
    raise ValueError("no key to route these commands by")


async def _send(conn: Connection, packed: bytes, count: int) -> list[Any]:
    try:
        await conn.send_packed_command(packed, check_health=False)
        replies: list[Any] = []
        error: ResponseError | None = None
        for _ in range(count):
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


async def shard_address(redis: RedisClient, key: str) -> tuple[str, int] | None:
    """Where a sharded pub/sub connection for ``key``'s slot must go: the master that owns it
    (freshly learnt: this is asked after a disconnect, when the layout may have changed).
    None on a single server: the client's own address serves every channel."""
    if not isinstance(redis, RedisCluster):
        return None
    await redis.initialize()
    await redis.nodes_manager.initialize()
    node = redis.get_node_from_key(key)
    if node is None:  # pragma: no cover
        raise ClusterDownError(f"no node serves the slot of {key!r}")
    return str(node.host), int(node.port)


async def shard_pubsub(redis: RedisClient, channel: str) -> PubSub:
    """A pub/sub connection for sharded channels in ``channel``'s slot: on a cluster, its own
    connection to the master owning that slot (SSUBSCRIBE must reach the shard that SPUBLISHes);
    on a single server, the client's own."""
    if not isinstance(redis, RedisCluster):
        return redis.pubsub()
    host, port = cast(tuple[str, int], await shard_address(redis, channel))
    # The cluster's connection options that make sense for one connection (credentials, timeouts,
    # TLS, decoding); the rest are the cluster client's own (its callbacks, its pool sizes).
    kwargs: dict[str, Any] = {
        k: v for k, v in redis.get_connection_kwargs().items() if k in _NODE_OPTIONS or k.startswith("ssl")
    }
    pool = aioredis.ConnectionPool(host=host, port=port, **kwargs)
    return aioredis.Redis(connection_pool=pool).pubsub()


def _pack(command: Command) -> bytes:
    try:
        return cast(bytes, hiredis.pack_command(tuple(command)))  # type: ignore[arg-type]  # stub: 1-tuple
    except UnicodeEncodeError:
        # Undecodable bytes kept as surrogates (see connect()): send back the original bytes.
        raw = tuple(a.encode("utf-8", "surrogateescape") if isinstance(a, str) else a for a in command)
        return cast(bytes, hiredis.pack_command(raw))  # type: ignore[arg-type]
