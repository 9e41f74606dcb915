"""Reads from replicas with a bounded staleness (``LB_READ_REPLICAS``).

A hot game's own-rank reads cost its master a core (docs/operations.md) while its replicas idle.
``Replicas`` sends a process's player-facing reads (own-rank pushes, top, around, ranks) to a
replica of the master that owns the game's keys — on a single master with replicas and on Redis
Cluster (there with ``READONLY``) — but only while that replica is known to be current::

    replicas = Replicas(redis, ReplicaReads(enabled=True))
    registry.register(ReplicaMetrics(replicas))            # lb_replica_* (docs/operations.md)
    task = asyncio.create_task(replicas.run_forever())    # the checks, off the read path
    lb_reads = lb.reading_from(replicas)                   # its top/around/ranks go through it
    ...
    await replicas.aclose()

How current a replica is, is checked every ``check_ms`` (never on a read): each master's ``INFO
replication`` gives its replication offset and its replicas' addresses, then each replica's gives
the offset it has applied. The master's offsets are remembered with the time they were read
(before the call went out), so a replica at offset R holds at least every write the master had
when it was at an offset <= R: its staleness is at most the age of the newest such sample. Between
checks that bound only grows with the clock, so a replica is used while ``bound at its check +
time since`` stays within ``max_lag_ms``: the bound holds even if the checks stop (a master that
does not answer them), when every read goes back to the master by itself.

A replica that does not answer a read within ``timeout_ms`` (paused, or its host gone) is left at
once and the read made on the master, so a player never sees the replica's trouble; the next check
that finds it answering and current takes it back. Anything else a replica refuses — its library
not there yet, a slot it no longer serves, a load in progress — is read on the master as well; a
refusal of the library itself (``ERR <code>``: bad input) is the master's answer too, and raised.

Writes, the scorer and reads that must see their own writes (a submission's status, the console's
lookup after an action, the HTTP API's rank after ``wait=applied``) never come here: they use the
``Leaderboard`` the process writes with, not the one ``reading_from`` gives.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import math
from collections import Counter, deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import RedisError, ResponseError

from .errors import from_reply
from .settings import RedisPool, ReplicaReads
from .transport import Command, RedisClient, execute_packed, node_client, slot_key, where

log = logging.getLogger("leaderboard.replicas")

SERVED = ("replica", "master")
# Why a read meant for a replica went to the master: none current (behind, or unchecked for too
# long), or the one tried did not answer in time, or refused the call.
FALLBACKS = ("lag", "unanswered", "refused")


class ReplicaMetrics(Collector):
    """The metrics every process that reads from replicas exports (docs/operations.md), made at
    scrape time from the plain counts of ``Replicas`` (a labelled client-library counter would
    take a lock on each read)::

        registry.register(ReplicaMetrics(replicas))
    """

    def __init__(self, replicas: Replicas) -> None:
        self._replicas = replicas

    _COUNTERS = (
        (
            "lb_replica_reads",
            "player-facing reads (own ranks, top, around, ranks) by where they were served: replica, master",
            "served",
            SERVED,
        ),
        (
            "lb_replica_fallbacks",
            "reads meant for a replica that went to the master: lag (none current), unanswered, refused",
            "reason",
            FALLBACKS,
        ),
    )

    def collect(self) -> Iterator[Metric]:
        for name, text, label, values in self._COUNTERS:
            family = CounterMetricFamily(name, text, labels=[label])
            for value in values:
                family.add_metric([value], self._replicas.counts[value])
            yield family
        yield GaugeMetricFamily(
            "lb_replica_current", "replicas current enough to serve reads now", value=len(self._replicas.current())
        )


@dataclass(eq=False)
class Replica:
    address: str
    client: Redis
    fresh_at: float = -math.inf  # loop time: the replica held every write the master had by then

    def staleness(self, now: float) -> float:
        """Seconds of writes this replica may be missing now, at most."""
        return now - self.fresh_at


@dataclass(eq=False)
class _Shard:
    """One master, its recent replication offsets (loop time, offset) and its replicas."""

    client: Redis
    offsets: deque[tuple[float, int]] = field(default_factory=deque)
    replicas: dict[str, Replica] = field(default_factory=dict)


class Replicas:
    """Routes read-only calls to a current replica of the master they would reach (see the
    module docstring); ``enabled`` off: every call goes to the master and nothing is checked."""

    def __init__(
        self,
        redis: RedisClient,
        settings: ReplicaReads,
        *,
        pool: RedisPool | None = None,
    ) -> None:
        self.redis = redis
        self._size = (pool or RedisPool()).size  # connections per replica, as per master
        self.settings = settings
        self._shards: dict[str, _Shard] = {}  # by master address, as transport.where names it
        self._turn = itertools.count()
        self._max_lag = settings.max_lag_ms / 1000
        self._timeout = settings.timeout_ms / 1000
        # reads by where they were served (SERVED) and by why a replica's went to the master (FALLBACKS)
        self.counts: Counter[str] = Counter()

    # ------------------------------------------------------------ reads

    async def execute(self, *commands: Command) -> list[Any]:
        """``commands`` (read-only, one slot: ``execute_packed``'s rules) on a current replica
        of their master, else on the master; a replica's failure is never the caller's."""
        replica = await self._pick(slot_key(commands)) if self.settings.enabled else None
        if replica is None:
            return await self._master(commands)
        try:
            async with asyncio.timeout(self._timeout):
                replies = await execute_packed(replica.client, *commands)
        except ResponseError as exc:
            if from_reply(str(exc)) is not None:
                raise  # the library refused the call itself: the master would refuse it alike
            log.debug("replica %s refused a read (%s): read on the master", replica.address, exc)
            return await self._master(commands, "refused")
        except (TimeoutError, RedisError, OSError) as exc:
            replica.fresh_at = -math.inf  # until a check finds it answering and current again
            log.debug("replica %s did not answer a read (%r): read on the master", replica.address, exc)
            return await self._master(commands, "unanswered")
        self.counts["replica"] += 1
        return replies

    async def _master(self, commands: Sequence[Command], fallback: str | None = None) -> list[Any]:
        self.counts["master"] += 1
        if fallback is not None:
            self.counts[fallback] += 1
        return await execute_packed(self.redis, *commands)

    async def _pick(self, key: str) -> Replica | None:
        shard = self._shards.get(await where(self.redis, key))
        if shard is None or not shard.replicas:
            return None  # a master without replicas: plain master reads, not fallbacks
        now = asyncio.get_running_loop().time()
        current = [r for r in shard.replicas.values() if r.staleness(now) <= self._max_lag]
        if not current:
            self.counts["lag"] += 1
            return None
        return current[next(self._turn) % len(current)]

    def current(self) -> list[Replica]:
        """The replicas reads may go to now."""
        now = asyncio.get_running_loop().time()
        return [r for s in self._shards.values() for r in s.replicas.values() if r.staleness(now) <= self._max_lag]

    def replicas(self) -> list[Replica]:
        return [r for s in self._shards.values() for r in s.replicas.values()]

    # ------------------------------------------------------------ checks

    async def run_forever(self) -> None:
        """Check every ``check_ms`` until cancelled; a failed check is retried at the next."""
        if not self.settings.enabled:
            return
        while True:
            try:
                await self.check()
            except (RedisError, OSError) as exc:
                log.debug("replica check failed: %r", exc)
            await asyncio.sleep(self.settings.check_ms / 1000)

    async def check(self) -> None:
        """One round: every master's offset, then each of its replicas' (all masters at once)."""
        masters = await self._masters()
        for gone in self._shards.keys() - masters.keys():
            await self._drop(self._shards.pop(gone))
        for address, (host, port) in masters.items():
            if address not in self._shards:
                self._shards[address] = _Shard(node_client(self.redis, host, port, size=2))
        await asyncio.gather(*(self._check(s) for s in self._shards.values()))

    async def _masters(self) -> dict[str, tuple[str, int]]:
        """The masters reads may reach, by the address ``where`` gives for them."""
        if isinstance(self.redis, RedisCluster):
            await self.redis.initialize()
            return {node.name: (node.host, int(node.port)) for node in self.redis.get_primaries()}
        options = self.redis.connection_pool.connection_kwargs
        if "path" in options:
            return {}  # a master on a unix socket: its replicas' reads stay with it
        address = await where(self.redis, "")
        return {address: (str(options.get("host", "localhost")), int(options.get("port", 6379)))}

    async def _check(self, shard: _Shard) -> None:
        loop = asyncio.get_running_loop()
        sent = loop.time()
        try:
            async with asyncio.timeout(self._timeout):
                info = await shard.client.info("replication")
        except (TimeoutError, RedisError, OSError):
            return  # the master unanswered: the replicas' bounds age until reads leave them
        shard.offsets.append((sent, int(info.get("master_repl_offset", 0))))
        # the samples a bound of max_lag can still need, and the newest one older than that
        while len(shard.offsets) > 1 and shard.offsets[1][0] < sent - self._max_lag:
            shard.offsets.popleft()
        listed = {f"{v['ip']}:{v['port']}": v for k, v in info.items() if k.startswith("slave") and isinstance(v, dict)}
        for gone in shard.replicas.keys() - listed.keys():
            await self._drop_replica(shard.replicas.pop(gone))
        for address, link in listed.items():
            if address not in shard.replicas and link.get("state") == "online":
                readonly = isinstance(self.redis, RedisCluster)
                client = node_client(self.redis, str(link["ip"]), int(link["port"]), readonly=readonly, size=self._size)
                shard.replicas[address] = Replica(address, client)
        await asyncio.gather(*(self._check_replica(shard, r) for r in shard.replicas.values()))

    async def _check_replica(self, shard: _Shard, replica: Replica) -> None:
        try:
            async with asyncio.timeout(self._timeout):
                info = await replica.client.info("replication")
        except (TimeoutError, RedisError, OSError):
            replica.fresh_at = -math.inf  # unanswered: left at once, not when its bound runs out
            return
        if info.get("master_link_status") != "up":
            return  # resyncing, or cut off: its bound ages from the last time it was current
        applied = int(info.get("slave_repl_offset", -1))
        # the newest sample of the master's offset this replica had reached
        reached = [t for t, offset in shard.offsets if offset <= applied]
        if reached:
            replica.fresh_at = max(replica.fresh_at, reached[-1])

    async def _drop(self, shard: _Shard) -> None:
        for replica in shard.replicas.values():
            await self._drop_replica(replica)
        with contextlib.suppress(RedisError, OSError):
            await shard.client.aclose()

    async def _drop_replica(self, replica: Replica) -> None:
        with contextlib.suppress(RedisError, OSError):
            await replica.client.aclose()

    async def aclose(self) -> None:
        """Close the replicas' and masters' own clients (the routed client is the caller's)."""
        for shard in list(self._shards.values()):
            await self._drop(shard)
        self._shards.clear()
