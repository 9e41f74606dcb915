"""Redis time per own-rank read: ``python -m bench.rank_reads``.

The gateways read every connected player's rank once per ``LB_GW_RANK_INTERVAL`` in chunks of
``LB_GW_RANK_CHUNK`` players, one ``lb_ranks`` FCALL_RO per chunk. This fills a board with
``--players`` players (drained through the real scorer, as in production), then reads the ranks of
random chunks of them for ``--seconds`` and reads ``INFO commandstats``: microseconds of Redis time
per player's rank, which is what bounds a Redis core (a primary or each read replica).

With ``--push``, the gateway's own-rank push itself (``python -m gateway``, one process) is
measured instead, with and without ``overtaken`` events, alternated in one run (``--rounds``
pairs): ``--subscribed`` player sockets (the board's first players, each a real WebSocket with its
own token) watch the board; with the event on, each sends a ``watch`` of ``--friends`` players
drawn from ``--friends-from`` (``board``: any of the board's players, most of them not connected,
so their standings are read only for the event; ``connected``: the other sockets' players, who
are read anyway). A writer moves ``--writes`` random players per second meanwhile, so ranks
change, passes happen and events go out. The figure: Redis time per second of the gateway's
``lb_ranks`` calls (INFO commandstats of FCALL_RO over ``--seconds``), its calls per second, and
the events the gateway counted (``lb_gw_overtaken_total``).

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
(``rank_push.json`` with ``--push``, ``rank_reads_replica.json`` with ``--replica``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import orjson
import redis

from bench import results
from bench.gateway import _wait_listening
from bench.redis_stats import cpu, usec
from fleet.redis_server import RedisServer, free_port
from leaderboard import GameConfig, Leaderboard, Submission, connect, now_ms
from leaderboard.auth import issue
from leaderboard.library import library_code
from leaderboard.queue import Queue
from leaderboard.replicas import Replicas
from leaderboard.settings import ReplicaReads, argument_parser
from loadtest.wsclient import OP_TEXT, ClientReader, Closed, Message, Ping, client_frame

CHUNK = 500
SECRET = "rank-push-bench-secret-of-32-bytes!!"


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


class _Player(asyncio.Protocol):
    """One player's socket: the handshake, its ``watch`` (if any) once the welcome came, pings
    answered, everything else read and dropped. ``ready`` once the gateway confirmed the watch
    (or, without one, sent the board's first snapshot)."""

    def __init__(self, path: str, watch: bytes, ready: asyncio.Future[None]) -> None:
        self.reader = ClientReader("127.0.0.1", path, max_size=None)
        self.watch = watch
        self.ready = ready
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.write(self.reader.request())

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        for event in self.reader.feed(data, 0.0):
            if type(event) is Message:
                buf = event.buf
                if buf.startswith(b'{"type":"welcome"', event.start) and self.watch:
                    self.transport.write(self.watch)
                elif not self.ready.done() and (
                    buf.startswith(b'{"type":"watching"', event.start)
                    or (not self.watch and buf.startswith(b'{"type":"snapshot"', event.start))
                ):
                    self.ready.set_result(None)
            elif type(event) is Ping or type(event) is Closed:
                self.transport.write(event.reply)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.ready.done():
            self.ready.set_exception(ConnectionError("closed"))


async def _connect(port: int, players: list[str], friends: dict[str, list[str]]) -> list[asyncio.Transport]:
    loop = asyncio.get_running_loop()
    sem = asyncio.Semaphore(200)  # handshakes in flight
    exp = time.time() + 3600
    transports: list[asyncio.Transport] = []

    async def one(player: str) -> None:
        watch = b""
        if player in friends:
            body = orjson.dumps({"type": "watch", "friends": friends[player]})
            watch = client_frame(OP_TEXT, body)
        async with sem:
            ready = loop.create_future()
            path = f"/ws?token={issue(player, 'player', SECRET, exp=exp)}"
            transport, _ = await loop.create_connection(lambda: _Player(path, watch, ready), "127.0.0.1", port)
            transports.append(transport)
            await asyncio.wait_for(ready, 60)

    await asyncio.gather(*(one(p) for p in players))
    return transports


async def _measure(url: str, players: int, writes: int, seconds: float, seed: int) -> tuple[dict[str, int], int]:
    """Move ``writes`` random players per second for ``seconds`` (``set``: each write lands, up
    or down); the FCALL_RO stats then."""
    client = connect(url)
    lb = Leaderboard(client, GameConfig(game="bench"))
    rnd = random.Random(seed)
    run = time.time_ns()  # ids of their own: a submission id applied in an earlier run is a duplicate
    await client.config_resetstat()
    started = time.monotonic()
    n = 0
    while (elapsed := time.monotonic() - started) < seconds:
        batch = [
            {"id": f"w{run}-{n + i}", "player": f"p{rnd.randrange(players)}", "op": "set",
             "points": str(rnd.randrange(1_000_000)), "ts": str(now_ms())}
            for i in range(max(1, writes // 10))
        ]  # fmt: skip
        await lb.submit_batch(batch, rows=False)
        n += len(batch)
        await asyncio.sleep(max(0.0, n / max(writes, 1) - elapsed))
    stats = await client.info("commandstats")
    await client.aclose()
    return stats.get("cmdstat_fcall_ro", {}), n


def _metrics(port: int, *names: str) -> list[float]:
    """The gateway's counters ``names`` (their ``_total`` or ``_count`` lines), from /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        lines = dict(line.split(" ", 1) for line in reply.read().decode().splitlines() if not line.startswith("#"))
    return [float(lines.get(name, "0")) for name in names]


async def _rounds_done(port: int, after: float) -> None:
    """Wait until the gateway has finished a rank round (a chunk) begun after ``after`` chunks."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 60
    while (await loop.run_in_executor(None, _metrics, port, _CHUNKS))[0] <= after:
        if loop.time() > deadline:
            raise RuntimeError("the gateway made no rank round in 60 s")
        await asyncio.sleep(0.2)


_CHUNKS = "lb_gw_rank_push_seconds_count"
_COUNTED = (_CHUNKS, "lb_gw_rank_pushes_total", "lb_gw_overtaken_total", "lb_gw_overtaken_limited_total")


def push_run(url: str, args: argparse.Namespace, event: bool, seed: int) -> dict[str, float]:
    """One gateway, ``--subscribed`` player sockets, the event on or off: Redis time per second
    of its rank reads over ``--seconds``."""
    rnd = random.Random(seed)
    connected = [f"p{i}" for i in range(args.subscribed)]
    pool = connected if args.friends_from == "connected" else [f"p{i}" for i in range(args.players)]
    friends = {p: rnd.sample(pool, args.friends) for p in connected} if event else {}
    port, metrics_port = free_port(), free_port()
    env = {
        **os.environ,
        "LB_REDIS_URL": url,
        "LB_GAME": "bench",
        "LB_JWT_SECRETS": SECRET,
        "LB_GW_PORT": str(port),
        "LB_GW_METRICS_PORT": str(metrics_port),
        "LB_GW_CONNECT_RATE": "0",
        "LB_GW_MAX_CONNECTIONS": "50000",
        "LB_GW_READ_RATE": "1000000",
        "LB_GW_READ_BURST": "1000000",
        "LB_GW_FLEET_BEAT_S": "0",
        "LB_GW_RANK_INTERVAL": str(args.interval),
        "LB_LOG_LEVEL": "WARNING",
    }
    proc = subprocess.Popen([sys.executable, "-m", "gateway"], env=env)
    try:
        _wait_listening(port, proc)

        async def run() -> tuple[dict[str, int], int, list[float]]:
            transports = await _connect(port, connected, friends)
            try:
                # every chunk's first look done (each player's and friend's first standing read)
                chunks = -(-args.subscribed // 500)
                await _rounds_done(metrics_port, _metrics(metrics_port, _CHUNKS)[0] + chunks)
                before = _metrics(metrics_port, *_COUNTED)
                fcall_ro, moved = await _measure(url, args.players, args.writes, args.seconds, seed)
                return fcall_ro, moved, [a - b for a, b in zip(_metrics(metrics_port, *_COUNTED), before, strict=True)]
            finally:
                for t in transports:
                    t.close()

        fcall_ro, moved, counted = asyncio.run(run())
    finally:
        proc.terminate()
        proc.wait(15)
    return {
        "redis_ms_per_s": fcall_ro.get("usec", 0) / 1000 / args.seconds,
        "calls_per_s": fcall_ro.get("calls", 0) / args.seconds,
        "us_per_call": fcall_ro.get("usec_per_call", 0.0),
        "moved_per_s": moved / args.seconds,
        "chunks": counted[0],
        "rank_pushes": counted[1],
        "events": counted[2],
        "events_limited": counted[3],
    }


def push_main(url: str, args: argparse.Namespace, argv: list[str] | None) -> int:
    runs: dict[str, list[dict[str, float]]] = {"off": [], "on": []}
    for i in range(args.rounds):
        for name in ("off", "on"):
            runs[name].append(push_run(url, args, name == "on", args.seed + i))
            r = runs[name][-1]
            print(
                f"event {name:3}: lb_ranks {r['redis_ms_per_s']:.2f} ms of Redis time per s, "
                f"{r['calls_per_s']:.1f} calls/s, {r['us_per_call']:.0f} us per call; "
                f"{r['chunks']:.0f} chunks read, {r['rank_pushes']:.0f} rank pushes, {r['events']:.0f} overtaken "
                f"events ({r['events_limited']:.0f} over the bound)"
            )
    mean = {name: sum(r["redis_ms_per_s"] for r in rs) / len(rs) for name, rs in runs.items()}
    calls = {name: sum(r["calls_per_s"] for r in rs) / len(rs) for name, rs in runs.items()}
    ratio = mean["on"] / mean["off"] if mean["off"] else float("nan")
    print(
        f"{args.subscribed:,} subscribed players, {args.friends} friends each (from the {args.friends_from}): "
        f"Redis time of the rank reads {mean['on']:.2f} against {mean['off']:.2f} ms/s (x{ratio:.2f}); "
        f"calls/s {calls['on']:.1f} against {calls['off']:.1f}"
    )
    figures = {"subscribed": args.subscribed, "friends": args.friends, "friends_from": args.friends_from,
               "players": args.players, "writes": args.writes, "runs": runs, "ratio": ratio}  # fmt: skip
    results.save("rank_push", figures, args, module="bench.rank_reads", argv=argv)
    return 0


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
    p.add_argument("--seconds", type=float, default=10.0, help="seconds of reading (--push: of measuring)")
    p.add_argument("--seed", type=int, default=1, help="seed of the generated workload")
    p.add_argument("--push", action="store_true", help="the gateway's rank push, overtaken events off and on")
    p.add_argument("--replica", action="store_true", help="reads on a replica against on the master, same run")
    p.add_argument("--subscribed", type=int, default=10_000, help="--push: player sockets")
    p.add_argument("--friends", type=int, default=20, help="--push: friends per watching socket")
    p.add_argument("--friends-from", choices=("board", "connected"), default="board", help="--push: friends drawn from")
    p.add_argument("--writes", type=int, default=1000, help="--push, --replica: players moved per second meanwhile")
    p.add_argument("--rounds", type=int, default=2, help="--push: off/on pairs, alternated")
    p.add_argument(
        "--interval",
        type=float,
        default=5.0,
        help="--push, --replica: seconds per round of every player (LB_GW_RANK_INTERVAL)",
    )
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
        if args.push:
            _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # the gateway inherits it
            return push_main(server.url, args, argv)
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
