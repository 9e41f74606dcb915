"""A rewards service: reads the close events of ended periods (last week's board, a finished
tournament) and grants each one's winners their reward, exactly once.

source var/fleet.env    # written by ./dev run: LB_REDIS_URL (its Redis, with the password)
python examples/rewards.py --burst      # grant what is waiting, then exit

Each event is read through a consumer group, so several copies of this service share the work.
The grants of an event and its XACK are one MULTI: the ledger holds an event's grants exactly
when the event is acknowledged. An event delivered again (this process died before its MULTI)
has no grant in the ledger yet, and HSETNX keeps a grant single even if two consumers race on
one event. The event id ``<window>:<period>`` is added once per period by the function library.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import Any

import orjson
from redis.exceptions import ResponseError

from leaderboard import GameConfig, RedisClient, connect

GROUP = "rewards"
# rank -> coins; everyone else in the event's top N gets the last amount
REWARDS = ((1, 1000), (2, 500), (3, 250), (10, 100))
PARTICIPATION = 10


def reward_for(rank: int) -> int:
    for last, coins in REWARDS:
        if rank <= last:
            return coins
    return PARTICIPATION


async def grant(redis: RedisClient, config: GameConfig, stream_id: str, event: dict[str, Any]) -> int:
    """Grant one event's rewards and acknowledge it, atomically; how many grants were new."""
    keys = config.keys
    top = orjson.loads(event.get("top", "{}"))
    async with redis.pipeline(transaction=True) as tx:
        for scope, entries in sorted(top.items()):
            for e in entries:
                tx.hsetnx(keys.rewards, f"{event['id']}|{scope}|{e['player']}", reward_for(int(e["rank"])))
        tx.xack(keys.closed, GROUP, stream_id)
        replies = await tx.execute()
    return sum(int(r) for r in replies[:-1])


async def run(redis: RedisClient, config: GameConfig, *, consumer: str, burst: bool, block_ms: int = 2000) -> int:
    """Consume close events; with ``burst``, return once none is waiting. Grants made.
    ``block_ms`` stays below the client's socket timeout (redis-py's default: 5 s), which would
    otherwise end an idle wait with a TimeoutError."""
    keys = config.keys
    try:
        await redis.xgroup_create(keys.closed, GROUP, id="0", mkstream=True)
    except ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise
    granted = 0
    backlog = True  # first what this consumer was given and did not acknowledge (a crash), then new
    while True:
        start = "0" if backlog else ">"
        block = None if backlog else block_ms
        reply: Any = await redis.xreadgroup(GROUP, consumer, {keys.closed: start}, count=10, block=block)
        events: list[tuple[str, dict[str, Any]]] = reply[0][1] if reply else []
        if backlog and not events:
            backlog = False
            continue
        if not events and burst:
            return granted
        for stream_id, fields in events:
            granted += await grant(redis, config, stream_id, fields)


async def main() -> None:
    p = argparse.ArgumentParser(description="Grant rewards for closed leaderboard periods, exactly once.")
    p.add_argument("--burst", action="store_true", help="exit once no event is waiting")
    p.add_argument("--consumer", default=f"rewards-{os.getpid()}", help="consumer name in the group")
    args = p.parse_args()
    url = os.environ.get("LB_REDIS_URL", "")
    if not url:
        sys.exit("LB_REDIS_URL is not set: `source var/fleet.env` (./dev run writes its Redis's URL there)")
    redis = connect(url)
    try:
        granted = await run(redis, GameConfig.from_env(), consumer=args.consumer, burst=args.burst)
        print(f"granted {granted} rewards")
    finally:
        await redis.aclose()


if __name__ == "__main__":
    asyncio.run(main())
