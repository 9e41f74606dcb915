"""Redis time per submission of the scorer's path: ``python -m bench.drain``.

Queues N submissions (random points over 50,000 players, three windows; ``--submit-batch`` per
submit call: 1 is a game server submitting one at a time), drains them with one
``python -m scorer --burst`` replica (``--scorer-batch`` entries per read: a backed-up queue fills
every read, a light load gives a few), and reads per submission:

* ``INFO commandstats`` of the drain: the batch FCALL and every command (XREADGROUP, the
  acknowledging MULTI, ...). Redis time per submission is what bounds the Redis core, and unlike
  wall-clock throughput it hardly moves with other load on the machine;
* the same for queueing them, and for the whole path (queue + drain);
* the Redis process's own CPU (``INFO cpu``, user + system) for the whole path: commands and
  everything around them (reading and writing sockets, feeding a replica).

``--replica``: the same run again with a replica attached to the server (one run each, same
workload), and the replica's CPU.

Unless ``--no-write``, the figures are recorded in bench/results/drain.json.
"""

from __future__ import annotations

import asyncio
import random
import sys
import tempfile
import time
from typing import Any

import redis

from bench import results
from bench.rank_reads import drain
from fleet.redis_server import RedisServer
from leaderboard import GameConfig, Submission, connect, now_ms
from leaderboard.library import library_code
from leaderboard.queue import Queue
from leaderboard.settings import argument_parser


async def fill(url: str, count: int, seed: int, per_call: int) -> None:
    client = connect(url)
    queue = Queue(client, GameConfig(game="bench"), backlog_max=count + per_call)
    rnd, now = random.Random(seed), now_ms()
    subs = [Submission(f"s{i}", f"p{rnd.randrange(50_000)}", rnd.randrange(1_000_000), now) for i in range(count)]
    for start in range(0, count, per_call):
        await queue.submit_many(subs[start : start + per_call])
    await client.aclose()


def cpu(client: redis.Redis) -> float:
    """Seconds of CPU the Redis process has used (every thread), user + system."""
    info: dict[str, Any] = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def usec(client: redis.Redis) -> dict[str, tuple[int, int]]:
    """Command -> (usec, calls) since the last CONFIG RESETSTAT."""
    stats: dict[str, Any] = client.info("commandstats")
    return {name.removeprefix("cmdstat_"): (int(s["usec"]), int(s["calls"])) for name, s in stats.items()}


def run(args: Any, replica: bool) -> dict[str, Any]:
    """Print one run's figures and return them."""
    n = args.submissions
    with (
        RedisServer(tempfile.mkdtemp(prefix="drain-bench-")) as server,
        RedisServer(tempfile.mkdtemp(prefix="drain-bench-replica-")) as copy,
    ):
        r, c = redis.Redis.from_url(server.url), redis.Redis.from_url(copy.url)
        if replica:
            c.replicaof(server.host, server.port)
            deadline = time.monotonic() + 30
            while r.info("replication").get("slave0", {}).get("state") != "online":
                if time.monotonic() > deadline:
                    raise RuntimeError("the replica did not come online")
                time.sleep(0.05)
        r.function_load(library_code(), replace=True)
        r.config_resetstat()
        cpu0, replica_cpu0 = cpu(r), cpu(c)
        asyncio.run(fill(server.url, n, args.seed, args.submit_batch))
        queued = usec(r)
        r.config_resetstat()
        started = time.perf_counter()
        drain(server.url, LB_SCORER_BATCH=str(args.scorer_batch))
        elapsed = time.perf_counter() - started
        drained = usec(r)
        if replica:  # the replica has applied everything the master sent before its CPU is read
            offset = r.info("replication")["master_repl_offset"]
            while c.info("replication").get("slave_repl_offset", -1) < offset:
                time.sleep(0.01)
        spent, replica_spent = cpu(r) - cpu0, cpu(c) - replica_cpu0
        r.close()
        c.close()
    total_q, total_d = (sum(u for u, _ in stats.values()) / n for stats in (queued, drained))
    what = "with a replica" if replica else "no replica"
    print(f"== {what}: {n:,} submissions, {args.submit_batch} per submit call, scorer batch {args.scorer_batch}")
    print(f"drained in {elapsed:.2f} s ({n / elapsed:,.0f}/s wall clock)")
    print(f"lb_submit FCALL: {drained.get('fcall', (0, 0))[0] / n:.1f} us of Redis time per submission")
    print(f"all commands: queueing {total_q:.1f} + draining {total_d:.1f} = {total_q + total_d:.1f} us per submission")
    print(f"Redis process CPU, queue + drain: {spent / n * 1e6:.1f} us per submission", end="")
    print(f"; the replica's: {replica_spent / n * 1e6:.1f} us" if replica else "")
    print("per command (calls made inside an FCALL are counted in it and again on their own):")
    for phase, stats in (("queue", queued), ("drain", drained)):
        for name, (u, calls) in sorted(stats.items(), key=lambda kv: -kv[1][0])[:6]:
            print(f"  {phase} {name:<12} {u / n:6.2f} us/submission  {calls:>9,} calls")
    return {
        "submissions": n,
        "drained_per_s": n / elapsed,
        "fcall_us_per_submission": drained.get("fcall", (0, 0))[0] / n,
        "queue_us_per_submission": total_q,
        "drain_us_per_submission": total_d,
        "redis_cpu_us_per_submission": spent / n * 1e6,
        "replica_cpu_us_per_submission": replica_spent / n * 1e6 if replica else None,
        "per_command_us": {
            phase: {name: u / n for name, (u, _) in stats.items()}
            for phase, stats in (("queue", queued), ("drain", drained))
        },
    }


def main(argv: list[str] | None = None) -> int:
    p = argument_parser("python -m bench.drain", __doc__ or "")
    p.add_argument("--submissions", type=int, default=60_000, help="submissions queued and drained")
    p.add_argument("--seed", type=int, default=1, help="seed of the generated workload")
    p.add_argument("--submit-batch", type=int, default=500, help="submissions per submit call")
    p.add_argument("--scorer-batch", type=int, default=500, help="entries per scorer read (LB_SCORER_BATCH)")
    p.add_argument("--replica", action="store_true", help="also run with a replica attached")
    results.add_no_write(p)
    args = p.parse_args(argv)
    if min(args.submissions, args.submit_batch, args.scorer_batch) < 1:
        p.error("--submissions, --submit-batch and --scorer-batch must be at least 1")
    figures = {
        "with_replica" if replica else "no_replica": run(args, replica)
        for replica in ((False, True) if args.replica else (False,))
    }
    results.save("drain", figures, args, module="bench.drain", argv=argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
