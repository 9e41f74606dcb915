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
import asyncio
import atexit
import contextlib
import dataclasses
import hashlib
import multiprocessing as mp
import os
import resource
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import redis

from bench import results as bench_results
from bench.deltas import demo_tops
from fleet.redis_server import RedisServer, free_port
from leaderboard import Entry, GameConfig, wire
from leaderboard.settings import argument_parser
from loadtest.procstat import usage
from loadtest.stamps import recv_stamped, stamped_socket
from loadtest.wsclient import OP_TEXT, ClientReader, Closed, Message, Opened, Ping, Refused, client_frame

ROOT = Path(__file__).resolve().parent.parent
GAME = "bench"
KEYS = GameConfig(game=GAME).keys
WINDOW, BOARD = "weekly", "global"
EXTRA_BOARDS = ("region:eu", "mode:duo")  # --boards 3: what every socket also watches
NODE_GATEWAY = ROOT / "bench" / "node_gateway"
FLOOR_SOURCE = ROOT / "bench" / "floor" / "floor.c"
# forward the channel and nothing else: no /metrics, no snapshot on connect
# the floor's variants (bench/floor/floor.c says what each isolates): name -> its environment
FLOOR_VARIANTS = {
    "floor": {},
    "floor-mt": {"FLOOR_THREADS": "4"},
    "floor-touch": {"FLOOR_TOUCH": "512"},
    "floor-greet": {"FLOOR_GREET": "1400"},
}
BASELINES = ("naive", "node-ws", *FLOOR_VARIANTS)

# ---------------------------------------------------------------- client processes


class _Socket:
    """One benchmark socket: handshake, then note when each snapshot arrived (the kernel's
    receive timestamp, ``loadtest.stamps``) and when it was read; pings are answered so the
    gateways' heartbeats see a live peer."""

    __slots__ = ("arrived", "read", "reader", "ready", "received", "sock", "subscribe", "unconfirmed")

    def __init__(
        self,
        sock: socket.socket,
        sinks: Sinks,
        ready: asyncio.Future[None],
        subscribe: bytes,
        confirms: int,
        received: list[int],
        deflate: bool = False,
    ) -> None:
        self.sock = sock
        self.read, self.arrived = sinks
        self.received = received  # bytes read by this process's sockets, one counter for all
        self.reader = ClientReader("127.0.0.1", "/ws", deflate=deflate)
        self.ready = ready
        self.subscribe = subscribe  # client frames sent once the handshake is done
        self.unconfirmed = confirms  # "subscribed" replies still to come before the socket is ready

    def handshake(self) -> None:
        self.sock.send(self.reader.request())

    def readable(self) -> bool:
        """Read what is there; False once the socket is closed."""
        read = recv_stamped(self.sock)
        if read is None:
            return True
        data, arrived, now = read
        self.received[0] += len(data)
        if not data:
            if not self.ready.done():
                self.ready.set_exception(ConnectionError("closed during handshake"))
            return False
        self.feed(data, now, arrived)
        return True

    def feed(self, data: bytes, now: float, arrived: float) -> None:
        # The clients share the 2 cores with the gateway: every microsecond spent here delays the
        # gateway's fan-out, so a snapshot's version is found, not parsed.
        for event in self.reader.feed(data, arrived):
            if type(event) is Message:
                version = snapshot_version(event)
                if version is not None:
                    self.read.setdefault(version, []).append(now)
                    self.arrived.setdefault(version, []).append(arrived)
                elif event.buf.startswith(b'{"type":"subscribed"', event.start):
                    self.unconfirmed -= 1
                    if not self.unconfirmed and not self.ready.done():
                        self.ready.set_result(None)
            elif type(event) is Ping or type(event) is Closed:  # the end of the stream follows a close
                with contextlib.suppress(OSError):
                    self.sock.send(event.reply)
            elif type(event) is Opened:
                if self.subscribe:
                    with contextlib.suppress(OSError):
                        self.sock.send(self.subscribe)
                if not self.unconfirmed and not self.ready.done():
                    self.ready.set_result(None)
            elif type(event) is Refused and not self.ready.done():
                self.ready.set_exception(ConnectionError(event.reason))


def snapshot_version(event: Message) -> int | None:
    """The version a snapshot or a delta brings (a delta's: the one after its base), found
    rather than parsed; None for any other message."""
    buf, head, end = event.buf, event.start, event.end
    if buf.startswith(b'{"type":"snapshot"', head):
        i = buf.find(b'"version":', head, end) + 10
        return int(buf[i : buf.find(b",", i, end)])
    if buf.startswith(b'{"type":"delta"', head):
        i = buf.find(b'"base":', head, end) + 7
        return int(buf[i : buf.find(b",", i, end)]) + 1
    return None


Sink = dict[int, list[float]]  # snapshot version -> one time per socket that got it
Sinks = tuple[Sink, Sink]  # (read by the client, arrived: kernel timestamp)


async def _client_main(
    conn: Connection,
    port: int,
    count: int,
    source: str,
    read_every: float,
    boards: int = 1,
    confirmed: bool = False,
    wire: str = "",
) -> None:
    """Open ``count`` sockets, then read them every ``read_every`` seconds. ``confirmed``: a
    socket counts as connected once the gateway confirmed each extra board's subscription (the
    RSS per connection is read then); the baselines do not confirm.

    Reading on a cadence rather than the moment bytes arrive: the arrival times come from the
    kernel's timestamps either way, and the client processes, which share the 2 cores with the
    gateway here (on a real network they are other machines), do not compete with the gateway's
    fan-out while it is under way."""
    loop = asyncio.get_running_loop()
    sinks: Sinks = ({}, {})
    peers: dict[int, _Socket] = {}
    ready_fds = select.epoll()
    failed = 0
    sem = asyncio.Semaphore(100)  # handshakes in flight per process
    interval = [0.002]  # while connecting: read at once
    subscribe = b"".join(
        client_frame(OP_TEXT, b'{"type":"subscribe","board":"%s"}' % board.encode())
        for board in EXTRA_BOARDS[: boards - 1]
    )
    if "deltas" in wire:
        subscribe = client_frame(OP_TEXT, b'{"type":"hello","deltas":true}') + subscribe
    received = [0]

    async def reader() -> None:
        while True:
            await asyncio.sleep(interval[0])
            for fd, _ in ready_fds.poll(0, len(peers) + 1):  # not the default cap of 1,023 events
                peer = peers.get(fd)
                if peer is not None and not peer.readable():
                    ready_fds.unregister(fd)
                    del peers[fd]

    async def one() -> None:
        nonlocal failed
        async with sem:
            ready: asyncio.Future[None] = loop.create_future()
            try:
                sock = stamped_socket(source)
                await loop.sock_connect(sock, ("127.0.0.1", port))
                confirms = boards - 1 if confirmed else 0
                peers[sock.fileno()] = peer = _Socket(
                    sock, sinks, ready, subscribe, confirms, received, deflate="deflate" in wire
                )
                ready_fds.register(sock.fileno(), select.EPOLLIN)
                peer.handshake()
                await asyncio.wait_for(ready, 30)
            except (OSError, ConnectionError, TimeoutError):
                failed += 1

    task = loop.create_task(reader())
    await asyncio.gather(*(one() for _ in range(count)))
    interval[0] = read_every
    conn.send(("connected", count - failed))
    while await loop.run_in_executor(None, conn.recv) != "report":  # "start": the publishing begins
        received[0] = 0
    task.cancel()
    conn.send(("report", sinks, received[0]))
    for peer in peers.values():
        peer.sock.close()
    ready_fds.close()


def _client_process(conn: Connection, *args: Any) -> None:
    """A client process: ``_client_main(conn, *args)`` on uvloop."""
    import gc

    import uvloop

    # The measuring instrument must not pause: its few cycles (the transports) live until the end.
    gc.disable()

    uvloop.run(_client_main(conn, *args))


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
# the targets that take deltas, compressed frames, or both: (environment, what their clients ask for)
WIRES = {
    "gateway-deltas": ({}, "deltas"),
    "gateway-deflate": ({"LB_GW_DEFLATE": "1"}, "deflate"),
    "gateway-both": ({"LB_GW_DEFLATE": "1"}, "deltas,deflate"),
}


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


@dataclass
class Result:
    name: str
    sockets: int
    deliveries: int
    expected: int
    cpu_ms_per_1k: float
    user_ms_per_1k: float  # the part spent in user space (Python), not in the kernel's TCP
    clients_ms_per_1k: float  # the client processes': they share the cores, so they bound the spread
    gc_pauses: int  # the gateway's garbage collections over the whole run (connecting included) ...
    gc_pause_ms: float  # ... and the time the loop stood still for them
    rss_kb_per_conn: float
    bytes_per_delivery: float  # bytes the clients read over the publishing window, per delivery
    spread_p50_ms: float  # first to last arrival of one snapshot (kernel receive timestamps)
    spread_p99_ms: float
    read_spread_p50_ms: float  # ... and first to last read by the client processes
    read_spread_p99_ms: float
    lat_p50_ms: float
    lat_p99_ms: float


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
    import socket

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


# ---------------------------------------------------------------- report


def table(results: list[Result]) -> str:
    head = (
        "| target | sockets | deliveries | bytes / delivery | CPU ms / 1k deliveries (user space) | RSS KB / conn "
        "| spread at arrival p50 / p99 ms | spread when read p50 / p99 ms | publish→arrival p50 / p99 ms "
        "| clients' CPU ms / 1k | GC pauses (ms) |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|\n"
    )
    rows = "".join(
        f"| {x.name} | {x.sockets} | {x.deliveries}/{x.expected} | {x.bytes_per_delivery:.0f} "
        f"| {x.cpu_ms_per_1k:.1f} ({x.user_ms_per_1k:.1f}) "
        f"| {x.rss_kb_per_conn:.1f} "
        f"| {x.spread_p50_ms:.0f} / {x.spread_p99_ms:.0f} | {x.read_spread_p50_ms:.0f} / {x.read_spread_p99_ms:.0f} "
        f"| {x.lat_p50_ms:.0f} / {x.lat_p99_ms:.0f} "
        f"| {x.clients_ms_per_1k:.1f} | {'–' if x.name in BASELINES else f'{x.gc_pauses} ({x.gc_pause_ms:.0f})'} |\n"
        for x in results
    )
    return head + rows


def rounds(results: list[Result]) -> list[dict[str, Result]]:
    """The runs grouped into rounds: round k holds each target's k-th run (``--targets
    floor,gateway,floor,gateway`` is two rounds), so a target run twice is two figures, not one
    overwriting the other."""
    seen: dict[str, int] = {}
    grouped: list[dict[str, Result]] = []
    for x in results:
        k = seen.get(x.name, 0)
        seen[x.name] = k + 1
        if k == len(grouped):
            grouped.append({})
        grouped[k][x.name] = x
    return grouped


def ratios(results: list[Result]) -> str:
    """The gateway against its baselines within each round (a round's runs ran back to back, so
    the machine's load was the same for both)."""
    grouped = rounds(results)
    return "".join(_round_ratios(by, f"round {k + 1}: " if len(grouped) > 1 else "") for k, by in enumerate(grouped))


def _round_ratios(by: dict[str, Result], tag: str) -> str:
    ours, naive = by.get("gateway"), by.get("naive")
    ka = by.get("gateway-keepalive")
    if ours is not None and ka is not None:
        others = (
            f"- {tag}heartbeat sweep vs websockets' keepalive task per socket: CPU per delivery "
            f"{ours.cpu_ms_per_1k:.1f} vs {ka.cpu_ms_per_1k:.1f} ms / 1k, RSS per connection "
            f"{ours.rss_kb_per_conn:.1f} vs {ka.rss_kb_per_conn:.1f} KB\n"
        )
    else:
        others = ""
    peer = by.get("node-ws")
    if ours is not None and peer is not None:
        others += (
            f"- {tag}gateway vs Node.js with ws (the peers' fan-out): CPU per delivery {ours.cpu_ms_per_1k:.1f} vs "
            f"{peer.cpu_ms_per_1k:.1f} ms / 1k (**{ours.cpu_ms_per_1k / peer.cpu_ms_per_1k:.2f}×**), RSS per "
            f"connection {ours.rss_kb_per_conn:.1f} vs {peer.rss_kb_per_conn:.1f} KB, spread p99 "
            f"{ours.spread_p99_ms:.0f} vs {peer.spread_p99_ms:.0f} ms\n"
        )
    if ours is None or naive is None:
        return others
    lines = [
        f"- {tag}CPU per delivery: gateway / naive = **{ours.cpu_ms_per_1k / naive.cpu_ms_per_1k:.2f}×** "
        f"(target ≤ 0.5×); user-space CPU only (without the kernel's loopback TCP, which also carries the "
        f"clients' receive path here): **{ours.user_ms_per_1k / naive.user_ms_per_1k:.2f}×**",
        f"- {tag}RSS per connection: gateway / naive = "
        f"**{ours.rss_kb_per_conn / naive.rss_kb_per_conn:.2f}×** "
        f"({ours.rss_kb_per_conn:.1f} KB; target ≤ 10 KB)",
        f"- {tag}spread p99 (target ≤ 100 ms): at arrival gateway {ours.spread_p99_ms:.0f} ms vs naive "
        f"{naive.spread_p99_ms:.0f} ms; when read by the clients {ours.read_spread_p99_ms:.0f} vs "
        f"{naive.read_spread_p99_ms:.0f} ms",
        f"- {tag}publish→arrival p99: gateway / naive = {ours.lat_p99_ms / max(naive.lat_p99_ms, 1e-9):.2f}×",
    ]
    bc = by.get("gateway-broadcast")
    if bc is not None:
        lines.append(
            f"- {tag}frame once vs websockets.broadcast() inside the gateway: CPU per delivery "
            f"{ours.cpu_ms_per_1k:.1f} vs {bc.cpu_ms_per_1k:.1f} ms / 1k "
            f"(**{ours.cpu_ms_per_1k / bc.cpu_ms_per_1k:.2f}×**), spread p99 {ours.spread_p99_ms:.0f} vs "
            f"{bc.spread_p99_ms:.0f} ms"
        )
    return "\n".join(lines) + "\n" + others


@dataclass
class Pooled:
    """One target's runs (A/B/A/B) taken together: CPU weighted by deliveries, RSS averaged."""

    cpu_ms_per_1k: float
    user_ms_per_1k: float
    rss_kb_per_conn: float
    spread_p99_ms: float  # the worst run's
    deliveries: int
    expected: int


def pooled(results: list[Result], name: str) -> Pooled | None:
    runs = [x for x in results if x.name == name]
    if not runs:
        return None
    deliveries = sum(x.deliveries for x in runs)
    return Pooled(
        cpu_ms_per_1k=sum(x.cpu_ms_per_1k * x.deliveries for x in runs) / max(1, deliveries),
        user_ms_per_1k=sum(x.user_ms_per_1k * x.deliveries for x in runs) / max(1, deliveries),
        rss_kb_per_conn=sum(x.rss_kb_per_conn for x in runs) / len(runs),
        spread_p99_ms=max(x.spread_p99_ms for x in runs),
        deliveries=deliveries,
        expected=sum(x.expected for x in runs),
    )


def against_floor_and_baselines(results: list[Result]) -> str:
    """The gateway against the floor (bench/floor/floor.c) and against its own code at other
    revisions (``gateway@REV`` targets), each target's runs pooled."""
    ours, floor = pooled(results, "gateway"), pooled(results, "floor")
    lines = []
    if ours is not None and floor is not None:
        lines.append(
            f"- gateway / floor (a C sender's write() loop), CPU per delivery: "
            f"**{ours.cpu_ms_per_1k / floor.cpu_ms_per_1k:.2f}×** ({ours.cpu_ms_per_1k:.1f} vs "
            f"{floor.cpu_ms_per_1k:.1f} ms / 1k; user space {ours.user_ms_per_1k:.1f} vs {floor.user_ms_per_1k:.1f})"
            f"{by_round(results, 'gateway', 'floor')}"
        )
    for name in dict.fromkeys(x.name for x in results if "@" in x.name):
        base = pooled(results, name)
        mine = pooled(results, name.partition("@")[0])
        if base is None or mine is None:
            continue
        lines.append(
            f"- {name.partition('@')[0]} against {name}: CPU per delivery {mine.cpu_ms_per_1k:.1f} vs "
            f"{base.cpu_ms_per_1k:.1f} ms / 1k (**{mine.cpu_ms_per_1k / base.cpu_ms_per_1k:.2f}×**), RSS per "
            f"connection **{mine.rss_kb_per_conn:.2f} vs {base.rss_kb_per_conn:.2f} KB**"
            f"{by_round(results, name.partition('@')[0], name)}"
        )
    return "".join(line + "\n" for line in lines)


def bytes_and_cpu(results: list[Result]) -> str:
    """Deltas, compressed frames and both against full snapshots (``gateway``), each target's
    runs pooled: bytes per delivery, CPU per delivery, the fan-out spread's p99."""
    full = pooled(results, "gateway")
    lines = []
    for name in WIRES:
        mine = pooled(results, name)
        if full is None or mine is None:
            continue
        b_full = sum(x.bytes_per_delivery * x.deliveries for x in results if x.name == "gateway") / full.deliveries
        b_mine = sum(x.bytes_per_delivery * x.deliveries for x in results if x.name == name) / max(1, mine.deliveries)
        lines.append(
            f"- {name} against gateway (full snapshots): bytes per delivery {b_mine:.0f} vs {b_full:.0f} "
            f"(**{b_mine / b_full:.3f}×**), CPU per delivery {mine.cpu_ms_per_1k:.1f} vs {full.cpu_ms_per_1k:.1f} "
            f"ms / 1k (**{mine.cpu_ms_per_1k / full.cpu_ms_per_1k:.2f}×**{by_round(results, name, 'gateway')}), "
            f"spread p99 {mine.spread_p99_ms:.0f} vs {full.spread_p99_ms:.0f} ms"
        )
    return "".join(line + "\n" for line in lines)


def by_round(results: list[Result], name: str, base: str) -> str:
    """``name`` / ``base`` CPU per delivery in each round that ran both, when there is more than one."""
    figures = [by[name].cpu_ms_per_1k / by[base].cpu_ms_per_1k for by in rounds(results) if name in by and base in by]
    if len(figures) < 2:
        return ""
    return "; by round " + ", ".join(f"{x:.2f}×" for x in figures)


def coalescing(results: list[Result]) -> str:
    """The --boards comparison: each target's runs pooled (A/B/A/B), then on / off."""
    on, off = pooled(results, "gateway"), pooled(results, "gateway-nocoalesce")
    if on is None or off is None:
        return ""
    return (
        f"- coalescing on / off, CPU per delivered snapshot: **{on.cpu_ms_per_1k / off.cpu_ms_per_1k:.2f}×** "
        f"({on.cpu_ms_per_1k:.1f} vs {off.cpu_ms_per_1k:.1f} ms / 1k; target ≤ 0.5×); user space only "
        f"{on.user_ms_per_1k / off.user_ms_per_1k:.2f}× ({on.user_ms_per_1k:.1f} vs {off.user_ms_per_1k:.1f})\n"
        f"- spread p99 at arrival, worst run: on {on.spread_p99_ms:.0f} ms, off {off.spread_p99_ms:.0f} ms "
        f"(target ≤ 100 ms)\n"
        f"- delivered / expected: on {on.deliveries:,} / {on.expected:,}, off {off.deliveries:,} / {off.expected:,}\n"
    )


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
