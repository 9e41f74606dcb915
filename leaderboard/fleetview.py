"""What the fleet records of itself in Redis, read as one view for operators (the admin console,
``GET /v1/fleet``): the gateways and their connections (each gateway's heartbeat, ``beat``), the
scorer replicas (the consumer group's members: what each has pending, how long it has been
idle), the publisher lease's holder, and the backlog (entries not yet delivered, delivered and not
yet acknowledged) and dead letters::

    await beat(redis, keys, "gw-a", {"connections": 812}, every_s=5)  # a gateway, every 5 s
    view = await read(redis, keys)  # {"gateways": [...], "scorers": [...], "lease": ..., ...}

A heartbeat is a field of one hash per game (``lb:{g}:heartbeats``) holding the time it was
written and its interval: a gateway not heard from for three intervals is shown as gone (and its
field removed by the next read), so a crashed process drops out by itself.
"""

from __future__ import annotations

from typing import Any

import orjson
from redis.exceptions import ResponseError

from .keys import Keys
from .queue import SCORER_GROUP
from .transport import RedisClient, now_ms

MISSED = 3  # intervals without a heartbeat after which a process is gone


async def beat(redis: RedisClient, keys: Keys, name: str, info: dict[str, Any], *, every_s: float) -> None:
    """Record that ``name`` is alive now, with ``info`` (JSON values), until its next beat."""
    record = {**info, "at": now_ms(), "every_ms": int(every_s * 1000)}
    await redis.hset(keys.heartbeats, name, orjson.dumps(record).decode())


async def forget(redis: RedisClient, keys: Keys, name: str) -> None:
    """A process stopping removes its heartbeat (it is not gone by accident)."""
    await redis.hdel(keys.heartbeats, name)


async def read(redis: RedisClient, keys: Keys, *, now: int | None = None) -> dict[str, Any]:
    now = now_ms() if now is None else now
    beats = await redis.hgetall(keys.heartbeats)
    gateways, gone = [], []
    for name, raw in sorted(beats.items()):
        record = orjson.loads(raw)
        if now - int(record.get("at", 0)) > MISSED * int(record.get("every_ms", 0)):
            gone.append(name)
            continue
        gateways.append({"id": str(name), **record})
    if gone:
        await redis.hdel(keys.heartbeats, *gone)
    try:
        groups = {str(g["name"]): g for g in await redis.xinfo_groups(keys.submissions)}
        members = await redis.xinfo_consumers(keys.submissions, SCORER_GROUP) if SCORER_GROUP in groups else []
    except ResponseError:  # no stream yet: nothing submitted, no scorer started
        groups, members = {}, []
    group = groups.get(SCORER_GROUP, {})
    scorers = [{"name": str(m["name"]), "pending": int(m["pending"]), "idle_ms": int(m["idle"])} for m in members]
    lease = await redis.get(keys.publish_lease)
    return {
        "gateways": gateways,
        "connections": sum(int(g.get("connections", 0)) for g in gateways),
        "scorers": scorers,
        "lease": None if lease is None else str(lease),
        "backlog": {
            "queued": int(await redis.xlen(keys.submissions)),
            "undelivered": int(group.get("lag") or 0),  # None when Redis cannot tell: counted as 0
            "pending": int(group.get("pending") or 0),
        },
        "dead_letters": int(await redis.xlen(keys.dead_letters)),
        "at": now,
    }
