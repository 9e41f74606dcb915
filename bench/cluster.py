"""Three games on a private Redis Cluster: ``python -m bench.cluster``.

Starts a 3-master / 3-replica cluster on loopback (fleet/cluster.py) with three games whose hash
tags land on three different masters, and measures:

1. **Redis time per submission on each shard**: N queued submissions per game, drained by one
   ``python -m scorer --burst`` replica serving the three games (``LB_GAMES``); then each master's
   ``INFO commandstats`` (all commands, and the batch FCALL) per submission of its game, its share
   of the cluster's Redis time, and its ``CROSSSLOT`` error count. Baseline in the same run: the
   same three games drained from one redis-server.
2. **The cost of WAIT**: one submission at a time to one game, ``LB_WAIT_REPLICAS`` 0 vs 1, in
   alternating blocks: the submit call's latency p50 / p99.
3. **What a failover loses**: submitters keep queueing batches to one game, its master is
   SIGKILLed, and once the replica is promoted every acknowledged stream id is looked up on it:
   acknowledged but gone, with WAIT 0 and with WAIT 1 (a fresh cluster each).

Unless ``--no-write``, the figures are recorded in bench/results/cluster.json.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

from bench import results
from bench.rank_reads import drain as burst
from fleet.cluster import Cluster, keyslot_names
from fleet.redis_server import RedisServer
from leaderboard import GameConfig, Leaderboard, Submission, connect, now_ms
from leaderboard.errors import NotReplicated
from leaderboard.library import library_code
from leaderboard.queue import Queue
from leaderboard.settings import argument_parser

CHUNK = 500


async def fill(url: str, games: list[str], count: int, seed: int) -> None:
    client = connect(url)
    await Leaderboard(client, GameConfig(game=games[0])).load()  # on a cluster: every master
    rnd, now = random.Random(seed), now_ms()
    for game in games:
        queue = Queue(client, GameConfig(game=game), backlog_max=count + CHUNK)
        for start in range(0, count, CHUNK):
            await queue.submit_many(
                [
                    Submission(f"s{start + i}", f"p{rnd.randrange(50_000)}", rnd.randrange(1_000_000), now)
                    for i in range(CHUNK)
                ]
            )
    await client.aclose()


async def load(url: str) -> None:
    client = connect(url)
    await Leaderboard(client, GameConfig()).load()
    await client.aclose()


def drain(url: str, games: list[str]) -> float:
    """Seconds one burst scorer replica serving ``games`` takes to apply every queued submission."""
    started = time.perf_counter()
    burst(url, LB_GAMES=",".join(games))
    return time.perf_counter() - started


def cpu(client: redis.Redis) -> float:
    """Seconds of CPU the Redis process has used (every thread), user + system: its commands and
    everything around them (sockets, the cluster bus, feeding its replica)."""
    info: dict[str, Any] = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def redis_time(client: redis.Redis) -> tuple[float, float, int]:
    """(usec of every command, usec of FCALL, CROSSSLOT errors) since the last CONFIG RESETSTAT."""
    stats = client.info("commandstats")
    errors = client.info("errorstats")
    total = sum(s["usec"] for s in stats.values())
    fcall = stats.get("cmdstat_fcall", {}).get("usec", 0)
    return total, fcall, int(errors.get("errorstat_CROSSSLOT", {}).get("count", 0))


def shards(cluster: Cluster, games: list[str], n: int, seed: int, figures: dict[str, Any]) -> None:
    print(f"== Redis time per submission: {n:,} submissions per game, 3 games")
    masters = {g: cluster.owner(f"{{{g}}}") for g in games}
    before = {}
    for g, node in masters.items():
        with node.client() as c:
            before[g] = cpu(c)
    asyncio.run(fill(cluster.url, games, n, seed))
    for node in masters.values():
        with node.client() as c:
            c.config_resetstat()
    elapsed = drain(cluster.url, games)
    print(f"cluster: drained {3 * n:,} in {elapsed:.2f} s ({3 * n / elapsed:,.0f}/s wall clock, one replica)")
    rows = []
    for g, node in masters.items():
        with node.client() as c:
            rows.append((g, node.address, *redis_time(c), cpu(c) - before[g]))
    grand = sum(r[2] for r in rows)
    print(
        "| game | master | Redis time / submission (all commands) | lb_submit FCALL / submission | share | CROSSSLOT "
        "| master's CPU / submission, queue + drain |"
    )
    print("|---|---|---|---|---|---|---|")
    figures["shards"] = {
        g: {
            "redis_us_per_submission": total / n,
            "fcall_us_per_submission": fcall / n,
            "share": total / grand,
            "crossslot": cross,
            "master_cpu_us_per_submission": spent / n * 1e6,
        }
        for g, _, total, fcall, cross, spent in rows
    }
    for g, address, total, fcall, cross, spent in rows:
        print(
            f"| {g} | {address} | {total / n:.1f} us | {fcall / n:.1f} us | {total / grand:.1%} | {cross} "
            f"| {spent / n * 1e6:.1f} us |"
        )

    for replica in (False, True):
        with (
            tempfile.TemporaryDirectory(prefix="cluster-bench-single-") as scratch,
            RedisServer(Path(scratch) / "primary") as server,
            RedisServer(Path(scratch) / "replica") as copy,
        ):
            r = redis.Redis.from_url(server.url)
            if replica:  # what replication alone costs the master, without cluster mode
                with redis.Redis.from_url(copy.url) as c:
                    c.replicaof(server.host, server.port)
                while r.info("replication").get("slave0", {}).get("state") != "online":
                    time.sleep(0.05)
            r.function_load(library_code(), replace=True)
            asyncio.run(fill(server.url, games, n, seed))
            r.config_resetstat()
            elapsed = drain(server.url, games)
            total, fcall, _ = redis_time(r)
            r.close()
        figures["one_server_with_replica" if replica else "one_server"] = {
            "redis_us_per_submission": total / (3 * n),
            "fcall_us_per_submission": fcall / (3 * n),
            "drained_per_s": 3 * n / elapsed,
        }
        print(
            f"baseline, the same 3 games on one redis-server{' with a replica' if replica else ''}: "
            f"{total / (3 * n):.1f} us all commands, {fcall / (3 * n):.1f} us FCALL per submission; "
            f"drained in {elapsed:.2f} s ({3 * n / elapsed:,.0f}/s)"
        )


async def wait_cost(url: str, game: str, per_block: int, blocks: int, figures: dict[str, Any]) -> None:
    print(f"== WAIT cost: {blocks} alternating blocks of {per_block} single submissions")
    client = connect(url)
    queues = {w: Queue(client, GameConfig(game=game), wait_replicas=w, wait_timeout_ms=1000) for w in (0, 1)}
    times: dict[int, list[float]] = {0: [], 1: []}
    i = 0
    for b in range(blocks):
        for w in (0, 1) if b % 2 == 0 else (1, 0):
            for _ in range(per_block):
                i += 1
                t0 = time.perf_counter()
                await queues[w].submit(Submission(f"w{i}", f"p{i % 5000}", i, now_ms()))
                times[w].append((time.perf_counter() - t0) * 1e6)
    await client.aclose()
    print("| LB_WAIT_REPLICAS | submit p50 | submit p99 | submissions |")
    print("|---|---|---|---|")
    figures["wait"] = {}
    for w, ts in times.items():
        q = statistics.quantiles(ts, n=100)
        figures["wait"][str(w)] = {"submit_p50_us": q[49], "submit_p99_us": q[98], "submissions": len(ts)}
        print(f"| {w} | {q[49]:.0f} us | {q[98]:.0f} us | {len(ts):,} |")


async def failover_loss(cluster: Cluster, game: str, wait: int, writers: int, batch: int) -> dict[str, Any]:
    client = connect(cluster.url)
    queue = Queue(client, GameConfig(game=game), backlog_max=10_000_000, wait_replicas=wait, wait_timeout_ms=500)
    acked: list[str] = []
    refused = 0
    stop = asyncio.Event()

    async def writer(w: int) -> None:
        nonlocal refused
        k = 0
        while not stop.is_set():
            k += 1
            subs = [Submission(f"{w}-{k}-{j}", f"p{w}-{j}", k, now_ms()) for j in range(batch)]
            try:
                acked.extend(await queue.submit_many(subs))
            except (redis.RedisError, OSError, NotReplicated):
                refused += len(subs)
                await asyncio.sleep(0.02)

    tasks = [asyncio.create_task(writer(w)) for w in range(writers)]
    await asyncio.sleep(1.0)
    key = f"{{{game}}}"
    victim = cluster.owner(key)
    acked_before_kill = len(acked)
    cluster.kill(victim)
    promoted = await asyncio.to_thread(cluster.wait_owner_changes, victim, key, 30)
    stop.set()
    await asyncio.gather(*tasks)
    await client.aclose()
    with promoted.client() as c:
        stream = GameConfig(game=game).keys.submissions
        present = {entry_id for entry_id, _ in c.xrange(stream)}
    lost = [i for i in acked if i not in present]
    return {
        "wait": wait,
        "acked": len(acked),
        "acked_before_kill": acked_before_kill,
        "lost": len(lost),
        "refused": refused,
    }


def main(argv: list[str] | None = None) -> int:
    p = argument_parser("python -m bench.cluster", __doc__ or "")
    p.add_argument("--submissions", type=int, default=40_000, help="submissions per game drained")
    p.add_argument("--seed", type=int, default=1, help="seed of the generated workload")
    p.add_argument("--wait-block", type=int, default=500, help="single submissions per WAIT block")
    p.add_argument("--wait-blocks", type=int, default=6, help="alternating WAIT blocks")
    p.add_argument("--writers", type=int, default=4, help="concurrent submitters in the failover runs")
    p.add_argument("--batch", type=int, default=20, help="submissions per submit call in the failover runs")
    p.add_argument("--shards-only", action="store_true", help="only part 1: Redis time per submission")
    results.add_no_write(p)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="cluster-bench-") as scratch:
        return measure(args, argv, Path(scratch))


def measure(args: Any, argv: list[str] | None, root: Path) -> int:
    """The benchmark's parts, each cluster in its own directory under ``root``."""
    figures: dict[str, Any] = {"submissions_per_game": args.submissions}
    with Cluster(root / "a") as cluster:
        games = keyslot_names(cluster.masters(), "bench", 3)
        shards(cluster, games, args.submissions, args.seed, figures)
        if args.shards_only:
            results.save("cluster", figures, args, module="bench.cluster", argv=argv)
            return 0
        asyncio.run(load(cluster.url))
        asyncio.run(wait_cost(cluster.url, games[0], args.wait_block, args.wait_blocks, figures))
    print("== what a failover loses (SIGKILL of the game's master under load)")
    print("| LB_WAIT_REPLICAS | acknowledged | acknowledged but gone after the failover | refused meanwhile |")
    print("|---|---|---|---|")
    figures["failovers"] = []
    for i, wait in enumerate((0, 1, 0, 1)):
        with Cluster(root / f"f{i}") as cluster:
            game = keyslot_names(cluster.masters(), "bench", 1)[0]
            asyncio.run(load(cluster.url))
            got = asyncio.run(failover_loss(cluster, game, wait, args.writers, args.batch))
        figures["failovers"].append(got)
        print(f"| {got['wait']} | {got['acked']:,} | {got['lost']:,} | {got['refused']:,} |", flush=True)
    results.save("cluster", figures, args, module="bench.cluster", argv=argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
