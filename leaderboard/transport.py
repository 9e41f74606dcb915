"""The Redis transport of the wrappers: the client they expect, and packed pipelined calls.

One client abstraction for a single redis-server and a Redis Cluster: ``connect()`` gives a
cluster-aware client when the URL's scheme is ``redis+cluster://`` (or ``rediss+cluster://``),
naming one or several of its nodes (``redis+cluster://h1:7000,h2:7000``: whichever answers
first tells the client the rest); everything above this module calls the same methods either way.
Every key of a game shares the hash tag ``{game}``, so each call touches one slot, and the
cluster client sends it to the master owning that slot (following ``MOVED`` after a resharding
or a failover). The few things redis-py's cluster client does not do the way the hot paths need
are here, once: ``execute_packed`` (hiredis-packed pipelines, sent to the slot's master) and
``shard_pubsub`` (a sharded pub/sub connection on the node that owns a game's slot).

Every connection of every client is made here, and every call goes through here, so what must
hold for all of them holds here: pools bounded per node and waited for (``RedisPool``: past the
wait, ``Unavailable``); a connection torn down under a command raised as a lost connection; a
cluster that cannot serve a call now (``CLUSTERDOWN``, ``TRYAGAIN``, no node reachable, not
settled yet) raised as ``ClusterDown``, a lost connection too. Callers need only retry
``ConnectionError``. Inside ``redis_budget(seconds)`` (an HTTP request's calls) the calls'
time adds up to at most ``seconds``, however many retries and topology refreshes redis-py
makes within them; past it, ``TimeoutError``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeAlias, TypeVar, cast

import hiredis
import redis.asyncio as aioredis
from redis.asyncio.client import Pipeline, PubSub
from redis.asyncio.cluster import ClusterNode, ClusterPipeline, RedisCluster
from redis.asyncio.connection import Connection, parse_url
from redis.exceptions import (
    AskError,
    ClusterDownError,
    ClusterError,
    MaxConnectionsError,
    MovedError,
    RedisClusterException,
    RedisClusterUnreachableError,
    ResponseError,
    SlotNotCoveredError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from .errors import ClusterDown, Unavailable
from .settings import RedisPool, cluster_seeds

RedisClient: TypeAlias = aioredis.Redis | RedisCluster
"""What ``connect()`` returns: a plain client, or a cluster-aware one for a cluster URL."""

_CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}
_REDIRECTS = (MovedError, AskError, TryAgainError, ClusterDownError)
_NODE_OPTIONS = {
    "connection_class",
    "username",
    "password",
    "credential_provider",
    "client_name",
    "protocol",
    "socket_timeout",
    "socket_connect_timeout",
    "socket_keepalive",
    "socket_keepalive_options",
    "decode_responses",
    "encoding",
    "encoding_errors",
}
_REDIRECT_TRIES = 5  # a slot moving, or a failover being agreed on, settles within a few retries
_LOST = (ConnectionError, TimeoutError, OSError, RedisConnectionError, RedisTimeoutError)
# What redis-py raises when a cluster cannot serve a call now (ClusterError: CLUSTERDOWN,
# MASTERDOWN, redirects past their TTL; AskError: MOVED or ASK still moving after our retries),
# raised to the callers as ClusterDown: Redis is down, back off (see errors.ClusterDown).
_CLUSTER_DOWN = (ClusterError, TryAgainError, AskError, SlotNotCoveredError, RedisClusterUnreachableError)
T = TypeVar("T")


def _down(exc: BaseException) -> ClusterDown:
    """What the callers get for one of ``_CLUSTER_DOWN``: raised ``from`` it."""
    return ClusterDown(f"Redis Cluster unavailable: {exc or type(exc).__name__}")


@dataclass(slots=True)
class _Budget:
    seconds: float
    left: float


# The Redis time left to the calls of one HTTP request (redis_budget), and whether a call that
# counts against it is under way in this task (the calls redis-py makes inside it are its own).
_BUDGET: ContextVar[_Budget | None] = ContextVar("lb_redis_budget", default=None)
_BUDGETED: ContextVar[bool] = ContextVar("lb_redis_budgeted", default=False)


@contextlib.contextmanager
def redis_budget(seconds: float | None) -> Iterator[None]:
    """Bound the Redis time of every call made inside (and in the tasks started inside): the
    calls' durations add up, and the call that would take the sum past ``seconds`` is cut and
    raised as a redis ``TimeoutError``. A socket timeout bounds one read or connect; a cluster
    client retries, refreshes its topology and tries node after node within one call, so only
    a bound on the call itself bounds a request. None or 0: no bound::

        with redis_budget(2.0):      # the HTTP API, around each request
            await lb.top("weekly")
    """
    if not seconds:
        yield
        return
    token = _BUDGET.set(_Budget(seconds, seconds))
    try:
        yield
    finally:
        _BUDGET.reset(token)


async def _bounded(call: Awaitable[T]) -> T:
    """``call`` within the budget left (redis_budget), its duration taken from it."""
    budget = _BUDGET.get()
    if budget is None or _BUDGETED.get():
        return await call
    token = _BUDGETED.set(True)
    loop = asyncio.get_running_loop()
    started = loop.time()
    timeout = asyncio.timeout(max(budget.left, 0.0))
    try:
        async with timeout:
            return await call
    except TimeoutError:
        if not timeout.expired():
            raise
        raise RedisTimeoutError(f"Redis did not answer within the request's {budget.seconds:g} s") from None
    finally:
        budget.left -= loop.time() - started
        _BUDGETED.reset(token)


def is_cluster_url(url: str) -> bool:
    return url.partition("://")[0].lower() in _CLUSTER_SCHEMES


def connect(url: str, *, decode: bool = True, pool: RedisPool | None = None, **kwargs: Any) -> RedisClient:
    """A client as the wrappers expect it: str replies, undecodable bytes kept, not raised.
    ``decode=False``: bytes replies (snapshots forwarded unchanged). A ``redis+cluster://`` URL
    (one seed node or several, comma-separated) gives a cluster-aware client (see the module
    docstring). ``pool``: connections per node and the wait for a free one (default: the
    documented defaults of ``RedisPool``)."""
    pool = pool or RedisPool()
    if decode:
        kwargs.update(decode_responses=True, encoding_errors="surrogateescape")
    seeds = cluster_seeds(url)
    if seeds is None:
        blocking = _BlockingPool.from_url(url, max_connections=pool.size, timeout=pool.wait, **kwargs)
        blocking.connection_class = _lost_when_torn_down(blocking.connection_class)
        return _Redis.from_pool(blocking)
    # A replica promoted in a failover answers within about the cluster's node timeout; redis-py
    # retries a command through its own topology refreshes, and the callers' backoff does the rest.
    kwargs.pop("health_check_interval", None)  # not a cluster-client option
    others = [ClusterNode(str(parsed["host"]), int(parsed.get("port", 6379))) for parsed in map(parse_url, seeds[1:])]
    return _Cluster.from_url(seeds[0], startup_nodes=others, max_connections=pool.size, pool_wait=pool.wait, **kwargs)


def _torn_down(exc: AttributeError) -> bool:
    """A command on a connection that another task disconnected under it. redis-py (8.1)
    disconnects connections that are in use: its cluster client every connection of a node that a
    topology refresh drops (a failover), also one a command is connecting or writing on at that
    moment. That command then fails with ``AttributeError`` on the connection's writer or reader,
    now None, instead of a ``ConnectionError``."""
    return exc.obj is None and exc.name in ("writelines", "drain", "write", "read", "readline", "readexactly")


class _LostWhenTornDown(Connection):
    """Every command of every client goes through here: a connection torn down under it is
    raised as what it is, a lost connection, which every caller already retries."""

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        task = asyncio.current_task()
        cancels = task.cancelling() if task is not None else 0
        try:
            await super().send_packed_command(command, check_health)
        except AttributeError as exc:
            if not _torn_down(exc):
                raise
            raise RedisConnectionError(f"connection closed by another task while in use ({exc})") from exc
        if task is not None and task.cancelling() > cancels:
            # With a socket timeout redis-py bounds the write with asyncio.wait_for, which on
            # Python 3.11 returns normally when the cancellation arrives just as the write ends:
            # the task would run on (a loop of Redis calls never stops, and a shutdown awaiting it
            # hangs). Raised here instead; the reply is never read, so the connection goes.
            await self.disconnect(nowait=True)
            raise asyncio.CancelledError

    async def read_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().read_response(*args, **kwargs)
        except AttributeError as exc:
            if not _torn_down(exc):
                raise
            await self.disconnect(nowait=True)
            raise RedisConnectionError(f"connection closed by another task while in use ({exc})") from exc


_SAFE: dict[type[Any], type[Any]] = {}


def _lost_when_torn_down(cls: type[Any]) -> type[Any]:
    """``cls`` (a plain, TLS or unix-socket connection) with ``_LostWhenTornDown`` over it."""
    if issubclass(cls, _LostWhenTornDown):
        return cls
    if cls not in _SAFE:
        _SAFE[cls] = type(f"LostWhenTornDown{cls.__name__}", (_LostWhenTornDown, cls), {})
    return _SAFE[cls]


class _BlockingPool(aioredis.BlockingConnectionPool):
    """redis-py's bounded pool, whose wait for a free connection is bounded too; past it, the call is
    refused ``unavailable`` (not redis-py's bare "No connection available")."""

    async def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().get_connection(*args, **kwargs)  # type: ignore[no-untyped-call]
        except RedisConnectionError as exc:
            if not isinstance(exc.__cause__, asyncio.TimeoutError):
                raise
            raise _pool_busy(self.max_connections, self.timeout or 0) from exc


class _Redis(aioredis.Redis):
    """redis-py's client of one server, its calls within the caller's budget (redis_budget)."""

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        return await _bounded(super().execute_command(*args, **options))  # type: ignore[no-untyped-call]

    def pipeline(self, transaction: bool = True, shard_hint: str | None = None) -> Pipeline:
        return _RedisPipeline(self.connection_pool, self.response_callbacks, transaction, shard_hint)


class _RedisPipeline(Pipeline):
    async def execute(self, raise_on_error: bool = True) -> list[Any]:
        return await _bounded(super().execute(raise_on_error))


def _pool_busy(size: int, wait: float) -> Unavailable:
    return Unavailable(f"all {size} pooled Redis connections stayed busy for {wait:g} s (LB_REDIS_POOL_SIZE)")


# redis-py resets a cluster client after a node's error by closing every node's connections
# (``RedisCluster.aclose()`` from a pipeline's retry and from its ClusterDownError handling): the
# commands other games have in flight on healthy masters were cut with them, so one shard's
# failover cost every game a tick. Inside a call, a reset only marks the layout to be learnt
# again; redis-py's refresh then recycles the connections lazily, once their commands are done.
_IN_CALL: ContextVar[bool] = ContextVar("lb_in_cluster_call", default=False)


class _Cluster(RedisCluster):
    """redis-py's cluster client, with what the fleet needs of it on top:

    * each node's pool bounded and waited for (``pool_wait``) as ``_BlockingPool`` is: redis-py's
      cluster nodes refuse at once with ``MaxConnectionsError`` when their pool is full;
    * a cluster that cannot serve a call now (no node reachable, the layout not settled yet,
      ``CLUSTERDOWN`` once redis-py's own retries are spent) is ``ClusterDown``, a lost
      connection (the callers back off and retry), not an error that ends a process;
    * connections torn down under a command are lost connections (``_LostWhenTornDown``);
    * every call within the caller's budget (``redis_budget``)."""

    def __init__(self, *args: Any, pool_wait: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._pool_wait = pool_wait
        self._gates: dict[str, asyncio.Semaphore] = {}
        # connection_kwargs is the dict every node (those learnt later included) is built from
        safe = _lost_when_torn_down(self.connection_kwargs["connection_class"])
        self.connection_kwargs["connection_class"] = safe
        for node in self.startup_nodes:
            node.connection_class = safe

    @contextlib.asynccontextmanager
    async def gate(self, node: ClusterNode) -> AsyncIterator[None]:
        """One of the node's ``max_connections`` places, waited for up to ``pool_wait``."""
        gate = self._gates.get(node.name)
        if gate is None:
            gate = self._gates[node.name] = asyncio.Semaphore(node.max_connections)
        try:
            async with asyncio.timeout(self._pool_wait):
                await gate.acquire()
        except TimeoutError:
            raise _pool_busy(node.max_connections, self._pool_wait) from None
        try:
            yield
        finally:
            gate.release()

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await _bounded(super().execute_command(*args, **kwargs))
        except _CLUSTER_DOWN as exc:
            raise _down(exc) from exc

    async def _execute_command(self, target_node: ClusterNode, *args: Any, **kwargs: Any) -> Any:
        token = _IN_CALL.set(True)
        try:
            async with self.gate(target_node):
                try:
                    return await super()._execute_command(target_node, *args, **kwargs)
                except MaxConnectionsError as exc:  # a pipeline held the rest: as busy as the gate
                    raise _pool_busy(target_node.max_connections, self._pool_wait) from exc
        finally:
            _IN_CALL.reset(token)

    def pipeline(self, transaction: Any | None = None, shard_hint: Any | None = None) -> ClusterPipeline:
        if shard_hint:
            return super().pipeline(transaction, shard_hint)  # refused by redis-py, as it words it
        return _Pipeline(self, transaction)  # type: ignore[abstract]  # as redis-py instantiates its own

    async def aclose(self) -> None:
        if _IN_CALL.get():
            self._initialize = True  # redis-py resetting after a node's error: see _IN_CALL
            return
        await super().aclose()

    async def initialize(self, *args: Any, **kwargs: Any) -> RedisCluster:
        try:
            return await super().initialize(*args, **kwargs)
        except RedisClusterException as exc:
            if "Cluster mode is not enabled" in str(exc):
                raise  # a URL naming a server that is not a cluster node: a configuration error
            # no seed answers, or the nodes do not cover every slot or agree on who serves
            # which yet (a cluster being created, a failover being agreed on): wait for it
            raise ClusterDown(str(exc)) from exc


class _Pipeline(ClusterPipeline):
    """redis-py's cluster pipeline, whose retry after a node's error resets the client without
    cutting the other nodes' connections (``_IN_CALL``)."""

    async def execute(self, raise_on_error: bool = True, allow_redirections: bool = True) -> list[Any]:
        token = _IN_CALL.set(True)
        try:
            return await _bounded(super().execute(raise_on_error, allow_redirections))
        except _CLUSTER_DOWN as exc:
            raise _down(exc) from exc
        finally:
            _IN_CALL.reset(token)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


Command = Sequence[str | int]


async def execute_packed(redis: RedisClient, *commands: Command, route: str | None = None) -> list[Any]:
    """Send ``commands`` packed by hiredis in C, pipelined on one pooled connection; one reply
    each, and the first error reply raised once every reply has been read.

    For the hot paths that send thousands of arguments per call (a batch FCALL carries about
    twenty per submission, an enqueue eight, an acknowledgement one per entry): redis-py's
    asyncio client packs each argument in Python, which was the largest cost of those calls.
    On a cluster, all ``commands`` must touch one slot (one game's keys); they go to its master
    (``route``: the master of that key's slot instead, for commands without keys)."""
    packed = b"".join(_pack(command) for command in commands)
    if isinstance(redis, RedisCluster):
        try:
            return await _bounded(_execute_cluster(redis, packed, commands, route or slot_key(commands)))
        except _CLUSTER_DOWN as exc:
            raise _down(exc) from exc
    return await _bounded(_execute_single(redis, packed, len(commands)))


async def _execute_single(redis: aioredis.Redis, packed: bytes, count: int) -> list[Any]:
    pool = redis.connection_pool
    conn = await pool.get_connection()  # type: ignore[no-untyped-call]
    try:
        return await _send(conn, packed, count)
    finally:
        await pool.release(conn)


async def _execute_cluster(cluster: RedisCluster, packed: bytes, commands: Sequence[Command], key: str) -> list[Any]:
    for attempt in range(_REDIRECT_TRIES):
        await cluster.initialize()
        node = cluster.get_node_from_key(key)
        if node is None:  # pragma: no cover - get_node_from_key raises for an uncovered slot
            raise ClusterDownError(f"no node serves the slot of {key!r}")
        gate = cluster.gate(node) if isinstance(cluster, _Cluster) else contextlib.nullcontext()
        async with gate:
            try:
                conn = node.acquire_connection()
            except MaxConnectionsError as exc:  # pragma: no cover - the gate keeps within the pool
                raise _pool_busy(node.max_connections, 0) from exc
            try:
                if not conn.is_connected:
                    try:
                        await conn.connect()  # type: ignore[no-untyped-call]
                    except _LOST:
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
            except _LOST:
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


def slot_key(commands: Sequence[Command]) -> str:
    """The key that decides where ``commands`` go: the first key of the first keyed command."""
    for command in commands:
        name = str(command[0]).upper()
        if name in ("FCALL", "FCALL_RO"):
            if int(command[2]) > 0:
                return str(command[3])
        elif name == "XREADGROUP":
            return str(command[[str(part).upper() for part in command].index("STREAMS") + 1])
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


async def where(redis: RedisClient, key: str) -> str:
    """The address of the server ``key``'s calls go to: on a cluster, the master of its slot as
    the client knows the layout now (for logs, and to tell one node's trouble from another's)."""
    if isinstance(redis, RedisCluster):
        try:
            await redis.initialize()
            node = redis.get_node_from_key(key)
        except _CLUSTER_DOWN as exc:
            raise _down(exc) from exc
        if node is None:  # pragma: no cover - get_node_from_key raises for an uncovered slot
            raise ClusterDown(f"no node serves the slot of {key!r}")
        return str(node.name)
    options = redis.connection_pool.connection_kwargs
    return str(options.get("path") or f"{options.get('host', 'localhost')}:{options.get('port', 6379)}")


async def shard_address(redis: RedisClient, key: str) -> tuple[str, int] | None:
    """Where a sharded pub/sub connection for ``key``'s slot must go: the master that owns it
    (freshly learnt: this is asked after a disconnect, when the layout may have changed).
    None on a single server: the client's own address serves every channel."""
    if not isinstance(redis, RedisCluster):
        return None
    try:
        await redis.initialize()
        await redis.nodes_manager.initialize()
        node = redis.get_node_from_key(key)
    except _CLUSTER_DOWN as exc:
        raise _down(exc) from exc
    if node is None:  # pragma: no cover
        raise ClusterDown(f"no node serves the slot of {key!r}")
    return str(node.host), int(node.port)


async def shard_pubsub(redis: RedisClient, channel: str) -> PubSub:
    """A pub/sub connection for sharded channels in ``channel``'s slot: on a cluster, its own
    connection to the master owning that slot (SSUBSCRIBE must reach the shard that SPUBLISHes);
    on a single server, the client's own."""
    if not isinstance(redis, RedisCluster):
        return redis.pubsub()
    host, port = cast(tuple[str, int], await shard_address(redis, channel))
    pool = aioredis.ConnectionPool(host=host, port=port, **_node_options(redis))
    return aioredis.Redis(connection_pool=pool).pubsub()


def _node_options(redis: RedisClient) -> dict[str, Any]:
    """The connection options of ``redis`` that make sense for a connection to one node of the
    same deployment (credentials, timeouts, TLS, decoding); the rest are the client's own (a
    cluster client's callbacks and pool sizes, a plain client's address and database)."""
    if isinstance(redis, RedisCluster):
        return {k: v for k, v in redis.get_connection_kwargs().items() if k in _NODE_OPTIONS or k.startswith("ssl")}
    pool = redis.connection_pool
    # its database too: a replica holds every database of its master
    options = {k: v for k, v in pool.connection_kwargs.items() if k in _NODE_OPTIONS or k.startswith(("ssl", "db"))}
    if "path" not in pool.connection_kwargs:  # a unix socket's class cannot reach a node by address
        options["connection_class"] = pool.connection_class
    return options


def node_client(redis: RedisClient, host: str, port: int, *, readonly: bool = False, size: int = 8) -> aioredis.Redis:
    """A client of one node of ``redis``'s deployment by its address (a replica of its master, a
    master of its cluster), with ``redis``'s credentials, timeouts and TLS, at most ``size``
    connections. ``readonly``: every connection sends ``READONLY`` first, which a Redis Cluster
    replica wants before it serves its master's slots."""
    options = _node_options(redis)
    options["connection_class"] = _lost_when_torn_down(options.get("connection_class", Connection))
    if readonly:
        options["redis_connect_func"] = _read_only
    pool = _BlockingPool(host=host, port=port, max_connections=size, timeout=RedisPool().wait, **options)
    return _Redis.from_pool(pool)


async def _read_only(conn: Connection) -> None:
    await conn.on_connect()
    await conn.send_command("READONLY")
    await conn.read_response()  # an error reply fails the connect, as a refused AUTH does


def _pack(command: Command) -> bytes:
    try:
        return cast(bytes, hiredis.pack_command(tuple(command)))  # type: ignore[arg-type]  # stub: 1-tuple
    except UnicodeEncodeError:
        # Undecodable bytes kept as surrogates (see connect()): send back the original bytes.
        raw = tuple(a.encode("utf-8", "surrogateescape") if isinstance(a, str) else a for a in command)
        return cast(bytes, hiredis.pack_command(raw))  # type: ignore[arg-type]
