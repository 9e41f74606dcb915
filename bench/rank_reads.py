"""Redis time per own-rank read: ``python -m bench.rank_reads``.

The gateways read every connected player's rank once per ``LB_GW_RANK_INTERVAL`` in chunks of
``LB_GW_RANK_CHUNK`` players, one ``lb_ranks`` FCALL_RO per chunk. This fills a board with
``--players`` players (drained through the real scorer, as in production), then reads the ranks of
random chunks of them for ``--seconds`` and reads ``INFO commandstats``: microseconds of Redis time
per player's rank, which is what bounds a Redis core (a primary or each read replica).

Unless ``--no-write``, the figures are recorded in bench/results/rank_reads.json.
"""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis

from bench import results
from fleet.redis_server import RedisServer
from leaderboard import GameConfig, Leaderboard, Submission, connect, now_ms
from leaderboard.library import library_code
from leaderboard.queue import Queue
from leaderboard.settings import argument_parser

CHUNK = 500


async def fill(url: str, players: int, seed: int) -> None:
    client = connect(url)
    queue = Queue(client, GameConfig(game="bench"), backlog_max=players + CHUNK)
    rnd, now = random.Random(seed), now_ms()
    for start in range(0, players, CHUNK):
        await queue.submit_many(
            [Submission(f"s{i}", f"p{i}", rnd.randrange(1_000_000), now) for i in range(start, start + CHUNK)]
        )
    await client.aclose()


async def read(url: str, players: int, chunk: int, seconds: float, seed: int) -> tuple[int, int]:
    """(rank reads made, board size)"""
    client = connect(url)
    lb = Leaderboard(client, GameConfig(game="bench"))
    rnd = random.Random(seed)
    reads = size = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        size = (await lb.ranks([f"p{rnd.randrange(players)}" for _ in range(chunk)], "weekly")).size
        reads += chunk
    await client.aclose()
    return reads, size


def drain(url: str, cwd: Path | None = None, **extra: str) -> None:
    """Apply every queued submission with one burst scorer replica (``python -m scorer --burst``,
    ``extra`` added to its environment, run in ``cwd`` if given), as in production."""
    env = {
        **os.environ,
        "LB_REDIS_URL": url,
        "LB_GAME": "bench",
        "LB_SCORER_METRICS_PORT": "0",
        "LB_SCORER_STATS_S": "0",
        "LB_SCORER_BADGES": "0",
        "LB_SCORER_PUBLISH": "0",
        "LB_LOG_LEVEL": "WARNING",
        **extra,
    }
    subprocess.run([sys.executable, "-m", "scorer", "--burst"], env=env, cwd=cwd, check=True)


def main(argv: list[str] | None = None) -> int:
    p = argument_parser("python -m bench.rank_reads", __doc__ or "")
    p.add_argument("--players", type=int, default=100_000, help="players on the board")
    p.add_argument("--chunk", type=int, default=CHUNK, help="players per lb_ranks call (LB_GW_RANK_CHUNK)")
    p.add_argument("--seconds", type=float, default=10.0, help="seconds of reading")
    p.add_argument("--seed", type=int, default=1, help="seed of the generated workload")
    results.add_no_write(p)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="rank-bench-") as scratch, RedisServer(scratch) as server:
        r = redis.Redis.from_url(server.url)
        r.function_load(library_code(), replace=True)
        asyncio.run(fill(server.url, args.players, args.seed))
        drain(server.url)
        r.config_resetstat()
        started = time.perf_counter()
        reads, size = asyncio.run(read(server.url, args.players, args.chunk, args.seconds, args.seed))
        elapsed = time.perf_counter() - started
        stats = r.info("commandstats")
        r.close()
    usec = stats.get("cmdstat_fcall_ro", {}).get("usec", 0)
    print(
        f"board of {size:,} players; {reads:,} rank reads in chunks of {args.chunk} in {elapsed:.1f} s "
        f"({reads / elapsed:,.0f}/s wall clock, one client)"
    )
    print(
        f"lb_ranks FCALL_RO: {usec / reads:.2f} us of Redis time per player's rank "
        f"({1e6 / (usec / reads):,.0f} rank reads per second of one Redis core)"
    )
    figures = {
        "players": size,
        "chunk": args.chunk,
        "reads": reads,
        "reads_per_s_wall": reads / elapsed,
        "redis_us_per_rank": usec / reads,
    }
    results.save("rank_reads", figures, args, module="bench.rank_reads", argv=argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
