"""The scorer benchmark's measurement (a), sustained throughput, shared by ``bench.scorer`` and
its durable log's comparison (``bench.scorer_durable``): a real scorer replica (``python -m
scorer``, a child process) consumes a queue kept full by producers in this process; the
submissions, the cores each process used, Redis's time by command.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.drain import by_name, submit
from leaderboard import BacklogFull, GameConfig, RedisClient, Submission, now_ms
from leaderboard.queue import Queue, backlog
from loadtest.procstat import usage

PLAYERS = 50_000
REPLAY_SHARE = 0.1
CHUNK = 500  # submissions per submit_many call of the producer
BACKLOG_MAX = 400_000
STARTUP_S = 60.0  # the longest a scorer may take to apply its first batch
PREPARED_RATE = 40_000  # submissions per second of the sustained run generated beforehand
SUSTAINED_BACKLOG = 20_000  # the cap while measuring (a): always work queued, never a pile-up


@dataclass
class Figures:
    sustained: float = 0.0
    offered_sustained: float = 0.0
    baseline: float = 0.0
    lag_rate: float = 0.0
    lag_p50: float = 0.0
    lag_p99: float = 0.0
    lag_max: float = 0.0
    lag_samples: int = 0
    lag_missing: int = 0  # probes never seen in a snapshot
    backlog_end: int = 0
    # cores each process used during (a) (CPU seconds / wall seconds): where the two cores go
    cores_redis: float = 0.0
    cores_scorer: float = 0.0
    cores_producer: float = 0.0  # this process: the producer's submit calls and generation
    cores_database: float = 0.0  # --durable: PostgreSQL's server and its backends (SQLite's is the scorer's thread)
    redis_waited: float = 0.0  # share of (a) Redis spent runnable but waiting for a core (schedstat)
    # (a)'s INFO commandstats per submission applied: command -> (µs of Redis time, calls); calls
    # made inside an FCALL (lb_enqueue's and lb_submit's) are counted in it and again on their own
    commands: dict[str, tuple[float, float]] = field(default_factory=dict)


class Source:
    """Submissions from PLAYERS players, a share of them re-sent with an id already used."""

    def __init__(self, prefix: str, seed: int = 1) -> None:
        self.rnd = random.Random(seed)
        self.prefix = prefix
        self.serial = 0
        self.recent: list[Submission] = []
        self.ready: list[list[Submission]] = []  # chunks made by prepare(), taken first

    def prepare(self, submissions: int) -> None:
        """Generate ahead of the measurement, as the baseline does: the load generator's own CPU is
        not the system's, and on 2 shared cores it would be taken from the scorer and Redis."""
        self.ready = [self.take(CHUNK) for _ in range(submissions // CHUNK)][::-1]

    def take(self, n: int) -> list[Submission]:
        if n == CHUNK and self.ready:
            return self.ready.pop()
        out = []
        ts = now_ms()
        for _ in range(n):
            if self.recent and self.rnd.random() < REPLAY_SHARE:
                out.append(self.rnd.choice(self.recent))
                continue
            self.serial += 1
            player = int(self.rnd.paretovariate(1.1)) % PLAYERS
            sub = Submission(f"{self.prefix}{self.serial}", f"p{player}", self.rnd.randrange(1_000_000), ts)
            out.append(sub)
            if len(self.recent) < 5000:
                self.recent.append(sub)
            else:
                self.recent[self.rnd.randrange(5000)] = sub
        return out


def scorer_env(url: str, game: str, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "LB_REDIS_URL": url,
        "LB_GAME": game,
        "LB_SCORER_METRICS_PORT": "0",
        "LB_SCORER_STATS_S": "0",
        "LB_BACKLOG_MAX": str(BACKLOG_MAX),
        "LB_LOG_LEVEL": "WARNING",
        # consumer and publisher: the badge worker reads every applied entry again and belongs
        # in its own replicas when the consumers are the bottleneck
        "LB_SCORER_BADGES": "0",
        **extra,
    }


async def produce(
    queue: Queue, source: Source, stop: asyncio.Event, rate: float | None, counter: list[int], *, names: bool = False
) -> None:
    """Offer submissions at a steady rate, or (rate None) as fast as the queue takes them: the
    queue's own backlog cap is the back-pressure, so production matches consumption."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    chunk = source.take(CHUNK)
    while not stop.is_set():
        if rate is not None:
            due = started + (counter[0] + CHUNK) / rate
            if due > loop.time():
                await asyncio.sleep(due - loop.time())
        try:
            await submit(queue, chunk, names=names)
        except BacklogFull:
            await asyncio.sleep(0.005)  # the same chunk again, like a game server would
            continue
        counter[0] += CHUNK
        chunk = source.take(CHUNK)


async def first_apply(r: RedisClient, stream: str, offered: list[int], proc: asyncio.subprocess.Process) -> None:
    """Waits for the scorer's first applied batch: the warm-up counts from there, not from a start
    that takes longer on a busy machine (imports, the library's load, an earlier release's tree)."""
    deadline = time.monotonic() + STARTUP_S
    while offered[0] - await backlog(r, stream) <= 0:
        if proc.returncode is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the scorer applied nothing in {STARTUP_S:.0f} s (exit code {proc.returncode})")
        await asyncio.sleep(0.05)


async def sustained(
    url: str,
    r: RedisClient,
    warmup: float,
    seconds: float,
    fig: Figures,
    *,
    live: bool = False,
    producers: int = 1,
    game: str = "bench",
    env: dict[str, str] | None = None,
    tree: Path | None = None,
    database: int | None = None,
) -> None:
    """``database``: the pid of a database server whose CPU (its children's too) is counted."""
    config = GameConfig(game=game)
    queue = Queue(r, config, backlog_max=SUSTAINED_BACKLOG)
    stream = config.keys.submissions
    source = Source("s-")
    if not live:
        source.prepare(int((warmup + seconds + 2) * PREPARED_RATE))
    names = by_name(tree)  # an earlier release's scorer reads the entries its producers wrote
    for _ in range(SUSTAINED_BACKLOG // CHUNK):  # a queue that is full before the scorer starts
        await submit(queue, source.take(CHUNK), names=names)
    offered = [SUSTAINED_BACKLOG]
    stop = asyncio.Event()
    # several submit calls in flight, as several game servers make them: one waits for its reply
    # between calls, and alone it could not keep a fast scorer's queue full
    tasks = [asyncio.create_task(produce(queue, source, stop, None, offered, names=names)) for _ in range(producers)]
    # run from ``tree``: the scorer imports (and loads) the code it finds first on its path
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "scorer", env=scorer_env(url, game, **(env or {})), cwd=tree
    )
    redis_pid = int((await r.info("server"))["process_id"])
    pids = (redis_pid, proc.pid, os.getpid())
    try:
        await first_apply(r, stream, offered, proc)
        await asyncio.sleep(warmup)
        t0, applied0, offered0 = time.perf_counter(), offered[0] - await backlog(r, stream), offered[0]
        before = [usage(pid) for pid in pids]
        database0 = tree_cpu_s(database) if database else 0.0
        await r.config_resetstat()
        await asyncio.sleep(seconds)
        t1, applied1, offered1 = time.perf_counter(), offered[0] - await backlog(r, stream), offered[0]
        after = [usage(pid) for pid in pids]
        if database:
            fig.cores_database = (tree_cpu_s(database) - database0) / (t1 - t0)
        commands: dict[str, Any] = await r.info("commandstats")
        cores = [(b.cpu_s - a.cpu_s) / (t1 - t0) for a, b in zip(before, after, strict=True)]
        fig.cores_redis, fig.cores_scorer, fig.cores_producer = cores
        fig.redis_waited = (after[0].wait_s - before[0].wait_s) / (t1 - t0)
        fig.sustained = (applied1 - applied0) / (t1 - t0)
        fig.offered_sustained = (offered1 - offered0) / (t1 - t0)
        fig.backlog_end = await backlog(r, stream)
        applied = max(1, applied1 - applied0)
        fig.commands = {
            name.removeprefix("cmdstat_"): (int(stat["usec"]) / applied, int(stat["calls"]) / applied)
            for name, stat in sorted(commands.items(), key=lambda kv: -int(kv[1]["usec"]))
        }
    finally:
        stop.set()
        await asyncio.gather(*tasks)
        proc.terminate()
        await asyncio.wait_for(proc.wait(), 15)


def tree_cpu_s(pid: int) -> float:
    """CPU seconds of a process and of its children alive now (a database server's backends)."""
    total = usage(pid).cpu_s
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError):
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                total += usage(int(stat.parent.name)).cpu_s
    return total
