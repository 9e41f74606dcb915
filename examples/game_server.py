"""A game server filing a match result into the leaderboard queue.

source var/fleet.env    # written by ./dev run: LB_REDIS_URL (its Redis, with the password)
python examples/game_server.py mia 1200 --region eu
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import uuid

from leaderboard import GameConfig, Submission, connect, now_ms
from leaderboard.queue import Queue


async def report_match(redis_url: str, player: str, points: int, region: str | None) -> None:
    config = GameConfig.from_env()  # LB_GAME, LB_WINDOWS, ...: the same settings as the scorer's
    redis = connect(redis_url)
    try:
        queue = Queue(redis, config)
        # The id makes a retry safe: the same id is applied once, however often it is sent.
        result = Submission(
            id=f"match-{uuid.uuid4().hex[:12]}", player=player, points=points, ts_ms=now_ms(), region=region
        )
        stream_id = await queue.submit(result)
        print(f"queued {result.id}: {player}, {points} points (stream entry {stream_id})")
    finally:
        await redis.aclose()


if __name__ == "__main__":
    p = argparse.ArgumentParser(description="File one match result into the leaderboard queue.")
    p.add_argument("player")
    p.add_argument("points", type=int)
    p.add_argument("--region", help="region scope, e.g. eu")
    args = p.parse_args()
    url = os.environ.get("LB_REDIS_URL", "")
    if not url:
        sys.exit("LB_REDIS_URL is not set: `source var/fleet.env` (./dev run writes its Redis's URL there)")
    asyncio.run(report_match(url, args.player, args.points, args.region))
