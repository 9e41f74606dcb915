"""Redis time per own-rank read: ``python -m bench.rank_reads``.

The gateways read every connected player's rank once per ``LB_GW_RANK_INTERVAL`` in chunks of
``LB_GW_RANK_CHUNK`` players, one ``lb_ranks`` FCALL_RO per chunk. This fills a board with
``--players`` players (drained through the real scorer, as in production), then reads the ranks of
random chunks of them for ``--seconds`` and reads ``INFO commandstats``: microseconds of Redis time
per player's rank, which is what bounds a Redis core (a primary or each read replica).

``--replica``: own-rank reads served by a replica (``LB_READ_REPLICAS``, leaderboard/replicas.py)
against served by the master, in one run. A master with one replica, ``--players`` on the board;
twice, for ``--seconds`` each — reads on the master, then through ``Replicas`` — the gateways'
pace of ``--players`` subscribed players (every one read once per ``--interval`` s, in chunks of
``--chunk``) while the master takes ``--writes`` submissions a second (``lb_submit`` batches of 10,
as the scorer writes them). Printed per phase: the master's Redis time in ``lb_ranks`` per second
and its whole CPU per second (``INFO commandstats``, ``INFO cpu``), the replica's, and the
staleness of what was read: after each chunk, the newest activity-stream entry the same node
holds (its id is the master's clock at that write) against the time of the read — on the master
the writes' own spacing, on the replica that plus how far it trails; and the bound ``Replicas``
held for the replica at each read.

Unless ``--no-write``, the figures are recorded in bench/results/rank_reads.json
(``rank_reads_replica.json`` with ``--replica``).
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
from typing import Any

import redis

from bench import results
from bench.redis_stats import cpu, usec
from fleet.redis_server import RedisServer
from leaderboard import GameConfig, Leaderboard, Submission, connect, now_ms
from leaderboard.library import library_code
from leaderboard.queue import Queue
from leaderboard.replicas import Replicas
from leaderboard.settings import ReplicaReads, argument_parser

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


async def _write(
    lb: Leaderboard, players: int, per_s: int, seed: int, stop: asyncio.Event, phase: str, begun: asyncio.Event
) -> int:
    """Batches of 10 submissions on the master at ``per_s`` a second until ``stop``; how many.
    Their ids are the phase's own: a phase repeating another's would write nothing (dedupe)."""
    rnd, n = random.Random(seed), 0
    loop = asyncio.get_running_loop()
    started = loop.time()
    while not stop.is_set():
        batch = [
            Submission(f"{phase}-{n + i}", f"p{rnd.randrange(players)}", rnd.randrange(1_000_000), now_ms())
            for i in range(10)
        ]
        await lb.submit_batch([s.fields() for s in batch], rows=False)
        begun.set()
        n += len(batch)
        await asyncio.sleep(max(0.0, started + n / per_s - loop.time()))
    return n


async def _paced(master_url: str, args: Any, replicas: bool) -> tuple[dict[str, float], list[float], list[float]]:
    """One phase: the gateways' own-rank reads at their pace, on the master or through
    ``Replicas``, while the master takes writes. (figures, ages of what was read in ms, the
    ``Replicas`` bounds at each replica read in ms)."""
    client = connect(master_url)
    lb = Leaderboard(client, GameConfig(game="bench"))
    router = Replicas(client, ReplicaReads(enabled=replicas))
    checks = asyncio.create_task(router.run_forever())
    reading = lb.reading_from(router)
    if replicas:
        await until_current(router)
    stop = asyncio.Event()
    phase = "replica" if replicas else "master"
    begun = asyncio.Event()  # the phase's first write landed: the reads' ages are of this phase's
    writer = asyncio.create_task(_write(lb, args.players, args.writes, args.seed, stop, phase, begun))
    await begun.wait()
    rnd, loop = random.Random(args.seed), asyncio.get_running_loop()
    step = args.interval * args.chunk / args.players  # a chunk's slot: the gateways' spread
    ages: list[float] = []
    bounds: list[float] = []
    reads, started = 0, loop.time()
    while loop.time() - started < args.seconds:
        due = started + reads / args.chunk * step
        await asyncio.sleep(max(0.0, due - loop.time()))
        await reading.ranks([f"p{rnd.randrange(args.players)}" for _ in range(args.chunk)], "weekly")
        sent = now_ms()
        [newest] = await router.execute(("XREVRANGE", lb.keys.activity, "+", "-", "COUNT", 1))
        ages.append(sent - int(newest[0][0].split("-")[0]))
        bounds += [r.staleness(loop.time()) * 1000 for r in router.current()]
        reads += args.chunk
    elapsed = loop.time() - started
    stop.set()
    writes = await writer
    checks.cancel()
    await asyncio.gather(checks, return_exceptions=True)
    figures = {"reads": reads, "seconds": elapsed, "writes": writes, **{k: float(v) for k, v in router.counts.items()}}
    await router.aclose()
    await client.aclose()
    return figures, ages, bounds


async def until_current(router: Replicas, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not router.current():  # the replica found and checked: no event announces it
        if time.monotonic() > deadline:
            raise RuntimeError("the replica did not become current")
        await asyncio.sleep(0.01)


def replica_run(args: Any) -> dict[str, Any]:
    """Both phases on one master and its replica (see the module docstring)."""
    with (
        tempfile.TemporaryDirectory(prefix="rank-bench-") as scratch,
        RedisServer(Path(scratch) / "master") as server,
        RedisServer(Path(scratch) / "replica", replica_of=(server.host, server.port)) as copy,
    ):
        m, rep = redis.Redis.from_url(server.url), redis.Redis.from_url(copy.url)
        m.function_load(library_code(), replace=True)
        asyncio.run(fill(server.url, args.players, args.seed))
        drain(server.url)
        out: dict[str, Any] = {}
        for phase in ("master", "replica"):
            for node in (m, rep):
                node.config_resetstat()
            cpu_m, cpu_r = cpu(m), cpu(rep)
            figures, ages, bounds = asyncio.run(_paced(server.url, args, phase == "replica"))
            spent = figures["seconds"]
            on_m, on_r = usec(m).get("fcall_ro", (0, 0)), usec(rep).get("fcall_ro", (0, 0))
            out[phase] = {
                **figures,
                "master_ranks_us_per_s": on_m[0] / spent,
                "master_ranks_calls": on_m[1],
                "replica_ranks_us_per_s": on_r[0] / spent,
                "replica_ranks_calls": on_r[1],
                "master_cpu_ms_per_s": (cpu(m) - cpu_m) * 1000 / spent,
                "replica_cpu_ms_per_s": (cpu(rep) - cpu_r) * 1000 / spent,
                "age_ms_p50": percentile(ages, 50),
                "age_ms_p99": percentile(ages, 99),
                "bound_ms_p50": percentile(bounds, 50) if bounds else None,
                "bound_ms_p99": percentile(bounds, 99) if bounds else None,
            }
        m.close()
        rep.close()
    base, moved = out["master"], out["replica"]
    out["master_ranks_us_saved_per_s"] = base["master_ranks_us_per_s"] - moved["master_ranks_us_per_s"]
    out["master_cpu_ms_saved_per_s"] = base["master_cpu_ms_per_s"] - moved["master_cpu_ms_per_s"]
    for phase in ("master", "replica"):
        f = out[phase]
        print(
            f"reads on the {phase}: {f['reads'] / f['seconds']:,.0f} rank reads/s ({f['reads']:,.0f}), "
            f"{f['writes'] / f['seconds']:,.0f} writes/s; "
            f"master: lb_ranks {f['master_ranks_us_per_s'] / 1000:.1f} ms/s "
            f"({f['master_ranks_calls']} calls), CPU {f['master_cpu_ms_per_s']:.1f} ms/s; replica: lb_ranks "
            f"{f['replica_ranks_us_per_s'] / 1000:.1f} ms/s ({f['replica_ranks_calls']} calls), CPU "
            f"{f['replica_cpu_ms_per_s']:.1f} ms/s; age of what was read p50 {f['age_ms_p50']:.1f} ms, "
            f"p99 {f['age_ms_p99']:.1f} ms; bound p50/p99 {f['bound_ms_p50']} / {f['bound_ms_p99']} ms; "
            f"fallbacks lag {f.get('lag', 0):.0f}, unanswered {f.get('unanswered', 0):.0f}"
        )
    print(
        f"master's Redis time saved: lb_ranks {out['master_ranks_us_saved_per_s'] / 1000:.1f} ms per second, "
        f"CPU {out['master_cpu_ms_saved_per_s']:.1f} ms per second"
    )
    return out


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def main(argv: list[str] | None = None) -> int:
    p = argument_parser("python -m bench.rank_reads", __doc__ or "")
    p.add_argument("--players", type=int, default=100_000, help="players on the board")
    p.add_argument("--chunk", type=int, default=CHUNK, help="players per lb_ranks call (LB_GW_RANK_CHUNK)")
    p.add_argument("--seconds", type=float, default=10.0, help="seconds of reading")
    p.add_argument("--seed", type=int, default=1, help="seed of the generated workload")
    p.add_argument("--replica", action="store_true", help="reads on a replica against on the master, same run")
    p.add_argument(
        "--interval", type=float, default=5.0, help="--replica: seconds per round of every player (LB_GW_RANK_INTERVAL)"
    )
    p.add_argument("--writes", type=int, default=1000, help="--replica: submissions per second on the master meanwhile")
    results.add_no_write(p)
    args = p.parse_args(argv)
    if args.replica:
        results.save("rank_reads_replica", replica_run(args), args, module="bench.rank_reads", argv=argv)
        return 0
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
