"""The publisher's reads when many boards are due in one tick: ``python -m bench.publish_reads``.

Makes N boards (N - 1 regions and the global board, one window, ten players each) on a private
redis-server, then reads every board's top 10 as a tick with all of them due does, three ways:
one call per board all at once (``asyncio.gather``, what the publisher did), one call per board
with 16 in flight, and pipelined batches of ``scorer.publisher.READS_PER_CALL`` boards per call
(what it does). Prints, per way, the median wall time and client CPU of one tick's reads, and
the connections the pool opened for them.

Unless ``--no-write``, the figures are recorded in bench/results/publish_reads.json.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable

import redis.asyncio as aioredis

from bench import results
from fleet.redis_server import RedisServer
from leaderboard import BoardEntries, GameConfig, Leaderboard, connect, now_ms
from leaderboard.library import library_code
from leaderboard.settings import argument_parser
from scorer.publisher import READS_PER_CALL

PLAYERS_PER_BOARD = 10


async def run(url: str, boards: int, rounds: int) -> list[tuple[str, float, float, int]]:
    config = GameConfig(game="bench", windows=("alltime",))
    lb = Leaderboard(connect(url), config)
    await lb.redis.function_load(library_code(), replace=True)
    now = now_ms()
    slips = [
        {"id": f"s{i}", "player": f"p{i}", "points": str(i), "ts": str(now), "region": f"r{i % (boards - 1)}"}
        for i in range(PLAYERS_PER_BOARD * (boards - 1))
    ]
    for start in range(0, len(slips), 1000):
        await lb.submit_batch(slips[start : start + 1000], now=now)
    await lb.redis.aclose()
    due = [("alltime", "global"), *(("alltime", f"region:r{i}") for i in range(boards - 1))]

    async def gathered(lb: Leaderboard) -> list[BoardEntries]:
        return await asyncio.gather(*(lb.top(w, s, 10, at=now) for w, s in due))

    async def bounded(lb: Leaderboard) -> list[BoardEntries]:
        out: list[BoardEntries] = []
        for i in range(0, len(due), 16):
            out += await asyncio.gather(*(lb.top(w, s, 10, at=now) for w, s in due[i : i + 16]))
        return out

    async def pipelined(lb: Leaderboard) -> list[BoardEntries]:
        out: list[BoardEntries] = []
        for i in range(0, len(due), READS_PER_CALL):
            out += await lb.tops(due[i : i + READS_PER_CALL], at=now)
        return out

    ways: list[tuple[str, Callable[[Leaderboard], Awaitable[list[BoardEntries]]]]] = [
        ("one call per board, all at once", gathered),
        ("one call per board, 16 in flight", bounded),
        (f"pipelined, {READS_PER_CALL} boards per call", pipelined),
    ]
    rows = []
    for name, way in ways:
        lb = Leaderboard(connect(url), config)  # a fresh pool per way: its connections are counted
        walls, cpus = [], []
        for _ in range(rounds):
            cpu, wall = time.process_time(), time.perf_counter()
            tops = await way(lb)
            walls.append(time.perf_counter() - wall)
            cpus.append(time.process_time() - cpu)
            assert len(tops) == boards and all(len(t.entries) == PLAYERS_PER_BOARD for t in tops[1:])
        assert isinstance(lb.redis, aioredis.Redis)
        pool = lb.redis.connection_pool
        opened = len(pool._available_connections) + len(pool._in_use_connections)
        rows.append((name, statistics.median(walls) * 1000, statistics.median(cpus) * 1000, opened))
        await lb.redis.aclose()
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argument_parser("python -m bench.publish_reads", __doc__ or "")
    p.add_argument("--boards", type=int, default=1000, help="boards due in the tick (at least 2)")
    p.add_argument("--rounds", type=int, default=7, help="ticks measured per way (the median is shown)")
    results.add_no_write(p)
    args = p.parse_args(argv)
    if args.boards < 2 or args.rounds < 1:
        p.error("--boards must be at least 2 and --rounds at least 1")
    with tempfile.TemporaryDirectory(prefix="publish-reads-") as data, RedisServer(data) as server:
        rows = asyncio.run(run(server.url, args.boards, args.rounds))
    print(f"{args.boards} boards due in one tick, top 10 each (median of {args.rounds} ticks)")
    print("| reads | wall ms | client CPU ms | connections |")
    print("|---|---|---|---|")
    for name, wall, cpu, opened in rows:
        print(f"| {name} | {wall:.1f} | {cpu:.1f} | {opened} |")
    ways = {name: {"wall_ms": wall, "client_cpu_ms": cpu, "connections": opened} for name, wall, cpu, opened in rows}
    results.save("publish_reads", {"boards": args.boards, "ways": ways}, args, module="bench.publish_reads", argv=argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
