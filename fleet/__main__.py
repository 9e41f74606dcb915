"""The local fleet, one command: ``./dev run`` (``python -m fleet``).

Starts the embedded redis-server (AOF on, data under var/) unless LB_REDIS_URL is set, loads the
function library and feeds it demo traffic, printing the weekly top 10 every few seconds.
Ctrl-C stops everything in order.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
from pathlib import Path

from leaderboard import GameConfig, Leaderboard, connect
from leaderboard.redis_server import RedisServer

from .demo import submissions

log = logging.getLogger("fleet")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m fleet", description=__doc__.split("\n\n")[0])
    p.add_argument("--redis-url", default=os.environ.get("LB_REDIS_URL"),
                   help="use this Redis instead of starting one (env LB_REDIS_URL)")  # fmt: skip
    p.add_argument("--data-dir", default=os.environ.get("LB_DATA_DIR", "var"),
                   help="embedded Redis data directory (env LB_DATA_DIR, default var/)")  # fmt: skip
    p.add_argument("--demo-rate", type=float, default=float(os.environ.get("LB_DEMO_RATE", "300")),
                   help="demo submissions per second (env LB_DEMO_RATE, default 300)")  # fmt: skip
    p.add_argument("--no-demo", action="store_true", help="no demo traffic")
    p.add_argument("--duration", type=float, default=None, help="stop by itself after this many seconds")
    p.add_argument("--log-level", default=os.environ.get("LB_LOG_LEVEL", "INFO"))
    return p.parse_args(argv)


async def demo_traffic(lb: Leaderboard, rate: float) -> None:
    """Apply demo submissions in batches, ten times a second."""
    source = submissions()
    per_tick = max(1, int(rate / 10))
    while True:
        batch = [next(source).fields() for _ in range(per_tick)]
        await lb.submit_batch(batch)
        await asyncio.sleep(0.1)


async def report(lb: Leaderboard) -> None:
    while True:
        await asyncio.sleep(5)
        top = await lb.top("weekly", n=10)
        players = await lb.distinct_players("weekly")
        rows = ", ".join(f"#{e.rank} {e.name or e.player} {e.score}" for e in top[:5])
        log.info("weekly top: %s | %d players this week", rows, players)


async def serve(args: argparse.Namespace, url: str) -> None:
    redis = connect(url)
    lb = Leaderboard(redis, GameConfig.from_env())
    await lb.load()
    log.info("function library loaded; redis at %s", url)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    tasks = [asyncio.create_task(report(lb))]
    if not args.no_demo:
        tasks.append(asyncio.create_task(demo_traffic(lb, args.demo_rate)))
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), args.duration)
    log.info("stopping")
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await redis.aclose()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if args.redis_url:
        asyncio.run(serve(args, args.redis_url))
        return 0
    with RedisServer(Path(args.data_dir) / "redis", aof=True) as server:
        log.info("embedded redis-server on port %d (AOF on, data in %s)", server.port, server.data_dir)
        asyncio.run(serve(args, server.url))
    log.info("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
