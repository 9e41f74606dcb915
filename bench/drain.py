"""Redis time per submission of the scorer's path: ``python -m bench.drain``.

Queues N submissions (random points over 50,000 players, three windows), drains them with one
``python -m scorer --burst`` replica, and reads ``INFO commandstats``: microseconds of Redis time
per submission for the batch FCALL and for every command. Redis time is what bounds a single
Redis core, and unlike wall-clock throughput it hardly moves with other load on the machine.
"""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
import tempfile
import time

import redis

from fleet.redis_server import RedisServer
from leaderboard import GameConfig, Submission, connect, now_ms
from leaderboard.library import library_code
from leaderboard.queue import Queue
from leaderboard.settings import argument_parser

CHUNK = 500


async def fill(url: str, count: int, seed: int) -> None:
    client = connect(url)
    queue = Queue(client, GameConfig(game="bench"), backlog_max=count + CHUNK)
    rnd, now = random.Random(seed), now_ms()
    for start in range(0, count, CHUNK):
        await queue.submit_many(
            [
                Submission(f"s{start + i}", f"p{rnd.randrange(50_000)}", rnd.randrange(1_000_000), now)
                for i in range(CHUNK)
            ]
        )
    await client.aclose()


def main(argv: list[str] | None = None) -> int:
    p = argument_parser("python -m bench.drain", __doc__ or "")
    p.add_argument("--submissions", type=int, default=60_000, help="submissions drained")
    p.add_argument("--seed", type=int, default=1, help="seed of the generated workload")
    args = p.parse_args(argv)
    with RedisServer(tempfile.mkdtemp(prefix="drain-bench-")) as server:
        r = redis.Redis.from_url(server.url)
        r.function_load(library_code(), replace=True)
        asyncio.run(fill(server.url, args.submissions, args.seed))
        r.config_resetstat()
        env = {**os.environ, "LB_REDIS_URL": server.url, "LB_GAME": "bench", "LB_SCORER_METRICS_PORT": "0",
               "LB_SCORER_STATS_S": "0", "LB_SCORER_BADGES": "0", "LB_SCORER_PUBLISH": "0",
               "LB_LOG_LEVEL": "WARNING"}  # fmt: skip
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "scorer", "--burst"], env=env, check=True)
        elapsed = time.perf_counter() - started
        stats = r.info("commandstats")
        r.close()
    n = args.submissions
    fcall = stats.get("cmdstat_fcall", {}).get("usec", 0) / n
    print(f"drained {n:,} submissions in {elapsed:.2f} s ({n / elapsed:,.0f}/s wall clock)")
    print(f"lb_submit FCALL: {fcall:.1f} us of Redis time per submission")
    print("per command (calls made inside the FCALL are counted in it and again on their own):")
    for name, stat in sorted(stats.items(), key=lambda kv: -kv[1]["usec"])[:10]:
        print(f"  {name.removeprefix('cmdstat_'):<12} {stat['usec'] / n:6.2f} us/submission  {stat['calls']:>9,} calls")
    return 0


if __name__ == "__main__":
    sys.exit(main())
