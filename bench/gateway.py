"""Gateway benchmark: N sockets on ONE gateway process, a ~1 KB snapshot every second.

    python -m bench.gateway                 # 10,000 sockets, 15 snapshots per target
    python -m bench.gateway --sockets 2000 --seconds 5 --no-write
    python -m bench.gateway --boards 3 --targets gateway,gateway-nocoalesce,gateway,gateway-nocoalesce
    python -m bench.gateway --targets floor,gateway,gateway@main,floor,gateway,gateway@main

A target ``NAME@REV`` (``gateway@main``) is that gateway target with the code of git revision REV,
extracted with ``git archive`` into a temporary directory and run from there: today's code against
an earlier one in the same run.

Starts a private redis-server, then for each target in turn — ``floor``, the least a sender can
do (bench/floor/floor.c: one C process that answers the same upgrades and write()s each published
message, framed once, to every socket in a plain loop; compiled on first use with the system's
cc into ~/.cache/leaderboard-bench, the target skipped saying why when there is no cc), this
project's gateway (``python -m gateway``, frame-once fan-out), the same gateway with
``LB_GW_FANOUT=broadcast`` (websockets.broadcast), the naive gateway (bench/naive_gateway.py) and,
as the peers' baseline, ``node-ws``: a Node.js server with the ``ws`` library
(bench/node_gateway/server.js; Debian's ``node``, its dependency installed with ``npm ci`` on
first use, the target skipped saying why when that cannot be done) — opens the sockets
from several client processes (raw non-blocking sockets read with recvmsg, each process on its own 127.0.0.x source
address), publishes snapshots as the scorer does (SET latest + PUBLISH), and measures:

* CPU ms per 1,000 deliveries: the gateway process's CPU time over the publishing window (its
  threads' run time, loadtest/procstat.py), divided by the deliveries the clients counted;
* RSS per connection: VmRSS after connecting minus VmRSS idle, over the socket count;
* fan-out spread: per snapshot, last minus first across all sockets (p50/p99), both as the
  kernel stamped the bytes' arrival (SO_TIMESTAMPNS: on loopback, inside the sender's write) and
  as the client processes read them (they share the cores, so they read late when busy);
* publish -> arrival latency over every delivery (p50/p99), from the same kernel timestamps.

It prints a table and (unless --no-write) records the run in bench/results/gateway.json (or
gateway-boards3.json), which ``python -m bench.plots`` draws and docs/benchmarks.md quotes. No
document is edited.

With ``--boards 3`` every socket also subscribes to ``region:eu`` and ``mode:duo``, and each second
all three boards change, published back to back as the scorer publishes a tick (one pipeline).
Then ``gateway`` (a tick's messages joined in one write per socket) runs against
``gateway-nocoalesce`` (``LB_GW_COALESCE=0``: one write per message), best alternated A/B/A/B in
one run.
"""

from __future__ import annotations

import argparse
import atexit
import dataclasses
import hashlib
import multiprocessing as mp
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import unquote, urlsplit

import redis

from bench import results as bench_results
from bench.deltas import demo_tops
from bench.gateway_clients import EXTRA_BOARDS, Sinks, _client_process
from bench.gateway_report import (
    BASELINES,
    FLOOR_VARIANTS,
    WIRES,
    Result,
    against_floor_and_baselines,
    bytes_and_cpu,
    coalescing,
    ratios,
    table,
)
from fleet.redis_server import RedisServer, free_port
from leaderboard import Entry, GameConfig, wire
from leaderboard.settings import argument_parser
from loadtest.procstat import usage

ROOT = Path(__file__).resolve().parent.parent
GAME = "bench"
KEYS = GameConfig(game=GAME).keys
WINDOW, BOARD = "weekly", "global"
NODE_GATEWAY = ROOT / "bench" / "node_gateway"
FLOOR_SOURCE = ROOT / "bench" / "floor" / "floor.c"
# forward the channel and nothing else: no /metrics, no snapshot on connect

# ---------------------------------------------------------------- measurement


def _rss_kb(pid: int) -> float:
    return usage(pid).rss_bytes / 1024


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


# --traffic demo: the demo's top 10 tick by tick (bench/deltas.py), the published version
# ``FIRST + k`` showing its k-th; else one fixed top 10 (~1 KB) at every version
DEMO_TOPS: list[list[Entry]] = []
FIRST = 999  # the version stored before the sockets connect; the run publishes 1000, 1001, ...


def snapshot_bytes(version: int, board: str = BOARD) -> bytes:
    """A realistic ~1 KB top-10 snapshot (--traffic demo: the demo's top 10 at that tick)."""
    if DEMO_TOPS:
        entries = DEMO_TOPS[(version - FIRST) % len(DEMO_TOPS)]
    else:
        entries = [
            Entry(i + 1, f"player-{i:04d}-{'x' * 20}", 100_000 - i * 37, {"name": f"Display Name {i} {'y' * 24}"})
            for i in range(10)
        ]
    return wire.snapshot(
        board=board,
        window=WINDOW,
        period="2026-W48",
        version=version,
        ts_ms=int(time.time() * 1000),
        entries=entries,
    )


def _start_target(
    name: str,
    port: int,
    metrics_port: int,
    redis_url: str,
    ping_interval: float | None,
    fanout_threads: int,
    boards: int = 1,
) -> subprocess.Popen[bytes]:
    if name == "naive":
        channel = KEYS.snapshot_channel(WINDOW, BOARD)
        cmd = [sys.executable, "-m", "bench.naive_gateway", "--port", str(port), "--redis-url", redis_url]
        cmd += ["--channel", channel]
        return subprocess.Popen(cmd, cwd=ROOT)
    elif name == "node-ws":
        # node itself, not an npm wrapper: its pid is the one measured
        cmd = [shutil.which("node") or "node", "server.js", str(port), KEYS.snapshot_channel(WINDOW, BOARD)]
        return subprocess.Popen(cmd, cwd=NODE_GATEWAY, env={**os.environ, "LB_REDIS_URL": redis_url})
    elif name in FLOOR_VARIANTS:
        url = urlsplit(redis_url)
        binary = floor_binary()
        assert isinstance(binary, Path), binary  # main() skips the target otherwise
        cmd = [str(binary), str(port), url.hostname or "127.0.0.1", str(url.port or 6379)]
        cmd.append(KEYS.snapshot_channel(WINDOW, BOARD))
        env = {**os.environ, **FLOOR_VARIANTS[name], "LB_REDIS_PASSWORD": unquote(url.password or "")}
        return subprocess.Popen(cmd, env=env)
    else:
        cmd = [sys.executable, "-m", "gateway"]
        # gateway@REV: that revision's code, from its own tree (python -m puts the tree first on
        # sys.path, ahead of this checkout's editable install)
        name, _, rev = name.partition("@")
        cwd = source_tree(rev) if rev else ROOT
        env = {
            **os.environ,
            "LB_REDIS_URL": redis_url,
            "LB_GAME": GAME,
            "LB_GW_PORT": str(port),
            "LB_GW_CONNECT_RATE": "0",
            "LB_GW_MAX_CONNECTIONS": "50000",
            # every socket here is a spectator on one of two addresses, whose read budget (a
            # subscribe costs a unit) would otherwise refuse most --boards subscriptions
            "LB_GW_READ_RATE": "1000000",
            "LB_GW_READ_BURST": "1000000",
            "LB_LOG_LEVEL": "WARNING",
            "LB_GW_FANOUT": "broadcast" if name == "gateway-broadcast" else "frame",
            "LB_GW_FANOUT_THREADS": str(fanout_threads),
            "LB_GW_HEARTBEAT": "websockets" if name == "gateway-keepalive" else "sweep",
            "LB_GW_METRICS_PORT": str(metrics_port),
            "LB_GW_BOARDS": ",".join(EXTRA_BOARDS[: boards - 1]),
            "LB_GW_COALESCE": "0" if name == "gateway-nocoalesce" else "0.005",
            **WIRES.get(name, ({}, ""))[0],
        }
        if ping_interval is not None:
            env["LB_GW_PING_INTERVAL"] = env["LB_GW_PING_TIMEOUT"] = str(ping_interval)
        return subprocess.Popen(cmd, cwd=cwd, env=env)


_TREES: dict[str, Path] = {}  # revision -> its extracted tree, for this run


def source_tree(rev: str) -> Path:
    """The repository's tree at ``rev`` (``git archive``), extracted once per run into a
    temporary directory that is removed at exit: the baseline a ``gateway@REV`` target runs."""
    if rev not in _TREES:
        tree = Path(tempfile.mkdtemp(prefix=f"gwbench-{rev.replace('/', '-')}-"))
        atexit.register(shutil.rmtree, tree, ignore_errors=True)
        archive = subprocess.run(["git", "archive", rev], cwd=ROOT, capture_output=True, check=True, timeout=60)
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True, timeout=60)
        _TREES[rev] = tree
    return _TREES[rev]


def floor_binary() -> Path | str:
    """The floor sender (bench/floor/floor.c) compiled with the system's cc, or why it cannot
    be. Built once per version of the source, into a cache directory outside the repository."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return "no C compiler (apt-get install gcc)"
    source = FLOOR_SOURCE.read_bytes()
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "leaderboard-bench"
    binary = cache / f"floor-{hashlib.sha256(source).hexdigest()[:16]}"
    if binary.is_file():
        return binary
    cache.mkdir(parents=True, exist_ok=True)
    partial = binary.with_suffix(f".{os.getpid()}")
    done = subprocess.run(
        [cc, "-O2", "-o", str(partial), str(FLOOR_SOURCE)], capture_output=True, text=True, timeout=120, check=False
    )
    if done.returncode != 0:
        return f"cc failed ({done.returncode}): {(done.stderr.strip() or 'no output').splitlines()[-1]}"
    partial.rename(binary)  # atomic: a concurrent run sees the whole binary or none
    return binary


def node_ready() -> str | None:
    """None when the node-ws target can run, else why not. Installs its dependency (``ws``, pinned
    by package-lock.json) with ``npm ci`` when node_modules is missing."""
    if shutil.which("node") is None:
        return "node is not installed"
    if (NODE_GATEWAY / "node_modules" / "ws").is_dir():
        return None
    npm = shutil.which("npm")
    if npm is None:
        return "npm is not installed (needed once, to install ws)"
    if not (NODE_GATEWAY / "package-lock.json").is_file():
        return f"no {NODE_GATEWAY / 'package-lock.json'}"
    try:
        done = subprocess.run(
            [npm, "ci", "--omit=dev", "--no-audit", "--no-fund"],
            cwd=NODE_GATEWAY,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return "npm ci did not finish within 300 s"
    if done.returncode != 0:
        last = (done.stderr.strip() or done.stdout.strip() or "no output").splitlines()[-1]
        return f"npm ci failed ({done.returncode}): {last}"
    return None


def _gc_pauses(port: int) -> tuple[int, float]:
    """The gateway's garbage collections so far (its /metrics): count, total ms."""
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    count, total = 0, 0.0
    for line in text.splitlines():
        if line.startswith("lb_gw_gc_pause_seconds_count"):
            count += int(float(line.rsplit(" ", 1)[1]))
        elif line.startswith("lb_gw_gc_pause_seconds_sum"):
            total += float(line.rsplit(" ", 1)[1]) * 1000
    return count, total


def _wait_listening(port: int, proc: subprocess.Popen[bytes]) -> None:

    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"target exited with {proc.returncode}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError("target did not listen")


def run_target(name: str, r: redis.Redis, redis_url: str, args: argparse.Namespace) -> Result:
    port = free_port()
    boards = (BOARD, *EXTRA_BOARDS[: args.boards - 1])
    for board in boards:
        r.set(KEYS.latest(WINDOW, board), snapshot_bytes(FIRST, board))  # what every socket gets on connect
    metrics_port = free_port()
    proc = _start_target(name, port, metrics_port, redis_url, args.ping_interval, args.fanout_threads, args.boards)
    try:
        _wait_listening(port, proc)
        time.sleep(0.5)
        idle_kb = _rss_kb(proc.pid)
        n, k = args.sockets, args.clients
        per = [n // k + (1 if i < n % k else 0) for i in range(k)]
        pipes, procs = [], []
        ctx = mp.get_context("fork")
        confirmed = name not in BASELINES  # the baselines answer no subscribe
        for i, count in enumerate(per):
            parent, child = ctx.Pipe()
            p = ctx.Process(
                target=_client_process,
                args=(
                    child,
                    port,
                    count,
                    f"127.0.0.{i + 2}",
                    args.read_every_ms / 1000,
                    args.boards,
                    confirmed,
                    WIRES.get(name.partition("@")[0], ({}, ""))[1],
                ),
                daemon=True,
            )
            p.start()
            pipes.append(parent)
            procs.append(p)
        t0 = time.monotonic()
        connected = sum(pipe.recv()[1] for pipe in pipes)
        connect_s = time.monotonic() - t0
        time.sleep(1.0)  # let the welcome/initial snapshots and allocations settle
        conn_kb = _rss_kb(proc.pid)
        published: dict[int, float] = {}
        cpu0 = usage(proc.pid)
        clients0 = sum(usage(p.pid).cpu_s for p in procs if p.pid is not None)
        for pipe in pipes:
            pipe.send("start")  # the clients count the bytes they read from now on
        start = time.monotonic()
        for k in range(args.seconds):
            # one tick: every board changes, each snapshot with its own version
            payloads = [(FIRST + 1 + k * len(boards) + i, board) for i, board in enumerate(boards)]
            built = [(version, board, snapshot_bytes(version, board)) for version, board in payloads]
            # sleep to the next whole second of the run: one tick per second, like the scorer
            time.sleep(max(0.0, start + k + 0.5 - time.monotonic()))
            tick = r.pipeline(transaction=False)  # back to back, as the scorer's one call publishes them
            for version, board, payload in built:
                published[version] = time.time()
                tick.set(KEYS.latest(WINDOW, board), payload)
                tick.spublish(KEYS.snapshot_channel(WINDOW, board), payload)  # sharded, as the scorer's
            tick.execute()
        time.sleep(1.5)  # the last snapshot's stragglers
        cpu1 = usage(proc.pid)  # before this benchmark's own /metrics request below
        gc_pauses, gc_pause_ms = _gc_pauses(metrics_port) if name not in BASELINES else (0, 0.0)
        clients_s = sum(usage(p.pid).cpu_s for p in procs if p.pid is not None) - clients0
        reports: list[Sinks] = []
        received = 0
        for pipe in pipes:
            pipe.send("report")
        for pipe in pipes:
            _, sinks, got = pipe.recv()
            reports.append(sinks)
            received += got
        for p in procs:
            p.join(10)
        spreads: list[float] = []  # at arrival (kernel timestamps)
        read_spreads: list[float] = []  # as the clients read them
        lats: list[float] = []
        deliveries = 0
        for version, sent in published.items():
            times = [t for read, _ in reports for t in read.get(version, [])]
            arrived = [t for _, arrival in reports for t in arrival.get(version, [])]
            deliveries += len(times)
            if times:
                read_spreads.append((max(times) - min(times)) * 1000)
                spreads.append((max(arrived) - min(arrived)) * 1000)
                lats.extend((t - sent) * 1000 for t in arrived)
        cpu_ms = (cpu1.cpu_s - cpu0.cpu_s) * 1000
        user_ms = (cpu1.user_s - cpu0.user_s) * 1000
        print(f"  {name}: {connected}/{args.sockets} sockets connected in {connect_s:.1f} s", flush=True)
        per_1k = 1000 / max(1, deliveries)
        return Result(
            name=name,
            sockets=connected,
            deliveries=deliveries,
            expected=connected * len(published) if name not in BASELINES or args.boards == 1 else 0,
            cpu_ms_per_1k=cpu_ms * per_1k,
            user_ms_per_1k=user_ms * per_1k,
            clients_ms_per_1k=clients_s * 1000 * per_1k,
            bytes_per_delivery=received / max(1, deliveries),
            gc_pauses=gc_pauses,
            gc_pause_ms=gc_pause_ms,
            rss_kb_per_conn=(conn_kb - idle_kb) / max(1, connected),
            spread_p50_ms=_pct(spreads, 0.5),
            spread_p99_ms=_pct(spreads, 0.99),
            read_spread_p50_ms=_pct(read_spreads, 0.5),
            read_spread_p99_ms=_pct(read_spreads, 0.99),
            lat_p50_ms=_pct(lats, 0.5),
            lat_p99_ms=_pct(lats, 0.99),
        )
    finally:
        stop(proc)


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL after 15 s."""
    proc.terminate()
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def main(argv: list[str] | None = None) -> int:
    p = argument_parser("python -m bench.gateway", __doc__ or "")
    p.add_argument("--sockets", type=int, default=10_000, help="sockets held open")
    p.add_argument("--seconds", type=int, default=15, help="snapshots published per target, one per second")
    p.add_argument("--clients", type=int, default=2, help="client processes")
    p.add_argument(
        "--targets",
        default="floor,gateway,gateway-broadcast,naive,node-ws",
        help="comma-separated: gateway, gateway-broadcast, gateway-keepalive (websockets' keepalive task "
        "per socket instead of the sweep), naive, node-ws (Node.js with the ws library), floor (a C "
        "program's write() loop, bench/floor/floor.c), floor-mt (the same with 4 idle threads, as uvloop's "
        "worker pool), floor-touch (the same visiting 512 bytes of its own memory per socket before each "
        "fan-out), floor-greet (the same sending a 1,400-byte frame on connect, as the gateway's welcome and "
        "snapshot); NAME@REV runs a gateway target with the code of git "
        "revision REV (e.g. gateway@main), extracted with git archive",
    )
    p.add_argument(
        "--read-every-ms",
        type=float,
        default=100.0,
        help="the client processes read their sockets this often once connected (arrival times are the "
        "kernel's either way); 1 reads almost at once, competing with the fan-out for the cores",
    )
    p.add_argument(
        "--fanout-threads",
        type=int,
        default=1,
        help="LB_GW_FANOUT_THREADS of the gateway targets (default 1, the gateway's own default; 2 shortens "
        "the spread for more CPU per delivery: docs/benchmarks.md)",
    )
    p.add_argument(
        "--ping-interval", type=float, default=None, help="protocol ping interval and timeout of the gateway targets"
    )
    p.add_argument(
        "--boards",
        type=int,
        default=1,
        choices=(1, 2, 3),
        help="boards every socket watches, all changing every second (>1: the coalescing comparison; "
        "targets gateway and gateway-nocoalesce; the table is printed, docs are not written)",
    )
    p.add_argument(
        "--traffic",
        default="fixed",
        choices=("fixed", "demo"),
        help="fixed: one ~1 KB top 10 at every version; demo: the demo's moving top 10, tick by tick "
        "(bench/deltas.py; for the delta targets: recorded as gateway-demo)",
    )
    p.add_argument("--no-write", action="store_true", help="do not record the run in bench/results/")
    args = p.parse_args(argv)
    if args.traffic == "demo":
        if args.boards != 1:
            p.error("--traffic demo publishes one board")
        DEMO_TOPS[:] = demo_tops(args.seconds + 1)
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # children inherit it
    tmp = tempfile.mkdtemp(prefix="gwbench-")
    results = []
    try:
        with RedisServer(tmp) as server:
            r = redis.Redis.from_url(server.url)
            size = len(snapshot_bytes(1))
            print(f"payload {size} bytes; {args.sockets} sockets; {args.seconds} snapshots per target")
            for name in args.targets.split(","):
                if name == "node-ws" and (why := node_ready()) is not None:
                    print(f"  node-ws skipped: {why}", flush=True)
                    continue
                if name in FLOOR_VARIANTS and isinstance(built := floor_binary(), str):
                    print(f"  {name} skipped: {built}", flush=True)
                    continue
                results.append(run_target(name, r, server.url, args))
            r.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out = table(results)
    print(out)
    summary = (coalescing(results) if args.boards > 1 else ratios(results)) + against_floor_and_baselines(results)
    summary += bytes_and_cpu(results)
    print(summary)
    if not args.no_write:
        name = "gateway" if args.boards == 1 else f"gateway-boards{args.boards}"
        name += "-demo" if args.traffic == "demo" else ""
        figures = {
            "payload_bytes": len(snapshot_bytes(1)),
            "sockets": args.sockets,
            "seconds": args.seconds,
            "boards": args.boards,
            "traffic": args.traffic,
            "targets": [dataclasses.asdict(x) for x in results],
        }
        print("recorded", bench_results.record(name, figures, cmd=bench_results.command("bench.gateway", argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
