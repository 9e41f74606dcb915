"""What TLS at the balancer costs: haproxy in front of ONE gateway, with and without TLS, same run.

    python -m bench.tls                          # 10,000 sockets, plain then TLS, twice
    python -m bench.tls --sockets 2000 --seconds 5 --rounds 1 --no-write

Starts a private redis-server, a private CA and a server certificate (``fleet.certs``: made here,
gone at exit), one gateway (``python -m gateway``, as bench.gateway's ``gateway`` target) and, in
front of it, haproxy processes on one port (SO_REUSEPORT; each at most 9,000 players under the
20,000-descriptor limit) rendered by ``fleet.haproxy`` exactly as the fleet runs them, plain or
with ``--tls-cert``. Then, per mode, client processes (each on its own 127.0.0.x source address,
a verifying TLS context trusting only the private CA) open the sockets, each one a new TCP and,
with TLS, a full handshake (no session resumption: a player's first connection), and the gateway
publishes a ~1 KB snapshot every second, as bench.gateway does. Measured, per mode:

* haproxy's CPU per new connection: its processes' CPU time (loadtest/procstat.py) while the
  sockets open, over the sockets opened — with TLS it holds the handshake's key exchange and
  signature (TLS 1.3: ECDHE, and ECDSA with the P-256 key fleet.certs makes);
* connect latency p50/p99: from the client's connect() to the gateway's 101 through haproxy
  (TCP, the TLS handshake, the upgrade);
* haproxy's CPU per 1,000 deliveries: its CPU time over the publishing window over the
  snapshots the clients received — TLS adds the encryption of every byte it forwards.

The client processes share the 2 cores with haproxy and the gateway: haproxy's CPU time, not the
wall clock, is the figure. It prints a table and (unless --no-write) records the run in
bench/results/tls.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import multiprocessing as mp
import resource
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import cast

import redis

from bench import results as bench_results
from bench.gateway import (
    BOARD,
    KEYS,
    WINDOW,
    _pct,
    _start_target,
    _wait_listening,
    snapshot_bytes,
    stop,
)
from bench.gateway_clients import snapshot_version
from fleet import certs
from fleet.haproxy import BalancerConfig, Gateway, Haproxy, _haproxy_child, render
from fleet.redis_server import RedisServer, free_port
from leaderboard.settings import argument_parser
from loadtest.procstat import usage
from loadtest.wsclient import ClientReader, Closed, Message, Opened, Ping, Refused

MAXCONN = 9_000  # per haproxy process: 2 descriptors each, under the 20,000 limit
MODES = ("plain", "tls")

# ---------------------------------------------------------------- client processes


class _Player(asyncio.Protocol):
    """One socket: the upgrade, then a count of the snapshots it receives (version -> sockets)."""

    def __init__(self, started: float, opened: asyncio.Future[float], got: dict[int, int]) -> None:
        self.reader = ClientReader("127.0.0.1", "/ws")
        self.started, self.opened, self.got = started, opened, got
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's are not asyncio's classes
        self.transport.write(self.reader.request())

    def data_received(self, data: bytes) -> None:
        now = time.monotonic()
        for event in self.reader.feed(data, now):
            if type(event) is Message:
                version = snapshot_version(event)
                if version is not None:
                    self.got[version] = self.got.get(version, 0) + 1
            elif (type(event) is Ping or type(event) is Closed) and self.transport is not None:
                self.transport.write(event.reply)
            elif type(event) is Opened and not self.opened.done():
                self.opened.set_result(now - self.started)
            elif type(event) is Refused and not self.opened.done():
                self.opened.set_exception(ConnectionError(event.reason))

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.opened.done():
            self.opened.set_exception(ConnectionError(f"closed before the upgrade: {exc!r}"))


async def _client_main(conn: Connection, port: int, count: int, source: str, ca_file: str) -> None:
    loop = asyncio.get_running_loop()
    context = ssl.create_default_context(cafile=ca_file) if ca_file else None
    got: dict[int, int] = {}
    latencies: list[float] = []
    transports: list[asyncio.Transport] = []
    failed = 0
    sem = asyncio.Semaphore(50)  # handshakes in flight per process

    async def one() -> None:
        nonlocal failed
        async with sem:
            opened: asyncio.Future[float] = loop.create_future()
            started = time.monotonic()
            try:
                transport, _ = await loop.create_connection(
                    lambda: _Player(started, opened, got),
                    "127.0.0.1",
                    port,
                    ssl=context,
                    local_addr=(source, 0),
                    ssl_handshake_timeout=30 if context else None,
                )
                transports.append(transport)
                latencies.append(await asyncio.wait_for(opened, 30))
            except (OSError, ConnectionError, TimeoutError):
                failed += 1

    await asyncio.gather(*(one() for _ in range(count)))
    conn.send(("connected", count - failed, latencies))
    await loop.run_in_executor(None, conn.recv)  # "report"
    conn.send(("report", got))
    for transport in transports:
        transport.abort()


def _client_process(conn: Connection, port: int, count: int, source: str, ca_file: str) -> None:
    import gc

    import uvloop

    gc.disable()  # the instrument must not pause
    uvloop.run(_client_main(conn, port, count, source, ca_file))


# ---------------------------------------------------------------- one mode


@dataclass
class Result:
    mode: str
    sockets: int
    connect_s: float
    haproxy_ms_per_connection: float  # haproxy's CPU while the sockets opened, per socket
    connect_p50_ms: float
    connect_p99_ms: float
    deliveries: int
    expected: int
    haproxy_ms_per_1k: float  # haproxy's CPU over the publishing window, per 1,000 deliveries
    gateway_ms_per_1k: float  # the gateway's, the same window: it does the same work in both modes


def _balancers(gateway_port: int, port: int, pem: str, count: int, directory: Path) -> list[subprocess.Popen[bytes]]:
    """``count`` haproxy processes on ``port`` in front of the gateway, as the fleet renders them."""
    binary = Haproxy.binary()
    if binary is None:
        raise RuntimeError("haproxy is not installed (./dev install installs Debian's)")
    procs = []
    for n in range(count):
        config = BalancerConfig(
            (Gateway("gw-1", f"127.0.0.1:{gateway_port}"),),
            bind=f"127.0.0.1:{port}",
            tls_cert=pem,
            maxconn=MAXCONN,
            stats_socket=str(directory / f"stats-{n}.sock"),
            log="",
            # one gateway, known to run: a /readyz answered late while 10,000 handshakes hold the
            # shared cores must not take it out (haproxy would answer the rest 503)
            check_fall=1_000_000,
        )
        cfg = directory / f"haproxy-{n}.cfg"
        cfg.write_text(render(config))
        procs.append(
            subprocess.Popen([binary, "-db", "-f", str(cfg)], stdin=subprocess.DEVNULL, preexec_fn=_haproxy_child)
        )
    for proc in procs:
        _wait_listening(port, proc)
    return procs


def _cpu_s(procs: list[subprocess.Popen[bytes]]) -> float:
    return sum(usage(p.pid).cpu_s for p in procs)


def run_mode(mode: str, r: redis.Redis, redis_url: str, made: certs.Certificates, args: argparse.Namespace) -> Result:
    directory = Path(tempfile.mkdtemp(prefix="tlsbench-"))
    r.set(KEYS.latest(WINDOW, BOARD), snapshot_bytes(999))  # what every socket gets on connect
    gateway_port, port = free_port(), free_port()
    gateway = _start_target("gateway", gateway_port, free_port(), redis_url, None, 1)
    balancers: list[subprocess.Popen[bytes]] = []
    clients: list[mp.process.BaseProcess] = []
    try:
        _wait_listening(gateway_port, gateway)
        tls = mode == "tls"
        balancers = _balancers(gateway_port, port, str(made.server) if tls else "", args.balancers, directory)
        time.sleep(2.5)  # haproxy's first health checks (every second) see the gateway up
        n, k = args.sockets, args.clients
        per = [n // k + (1 if i < n % k else 0) for i in range(k)]
        pipes = []
        ctx = mp.get_context("fork")
        lb0 = _cpu_s(balancers)
        t0 = time.monotonic()
        for i, count in enumerate(per):
            parent, child = ctx.Pipe()
            ca = str(made.ca) if tls else ""
            client = ctx.Process(target=_client_process, args=(child, port, count, f"127.0.0.{i + 2}", ca), daemon=True)
            client.start()
            pipes.append(parent)
            clients.append(client)
        connected, latencies = 0, []
        for pipe in pipes:
            _, ok, lat = pipe.recv()
            connected += ok
            latencies.extend(lat)
        connect_s = time.monotonic() - t0
        lb1 = _cpu_s(balancers)
        time.sleep(1.0)  # the welcomes and first snapshots through
        lb2, gw2 = _cpu_s(balancers), usage(gateway.pid).cpu_s
        start = time.monotonic()
        for s in range(args.seconds):
            payload = snapshot_bytes(1000 + s)
            time.sleep(max(0.0, start + s + 0.5 - time.monotonic()))
            tick = r.pipeline(transaction=False)
            tick.set(KEYS.latest(WINDOW, BOARD), payload)
            tick.spublish(KEYS.snapshot_channel(WINDOW, BOARD), payload)
            tick.execute()
        time.sleep(1.5)  # the last snapshot's stragglers
        lb3, gw3 = _cpu_s(balancers), usage(gateway.pid).cpu_s
        for pipe in pipes:
            pipe.send("report")
        deliveries = 0
        for pipe in pipes:
            got = pipe.recv()[1]
            deliveries += sum(c for v, c in got.items() if v >= 1000)
        per_1k = 1000 / max(1, deliveries)
        print(f"  {mode}: {connected}/{args.sockets} sockets connected in {connect_s:.1f} s", flush=True)
        return Result(
            mode=mode,
            sockets=connected,
            connect_s=connect_s,
            haproxy_ms_per_connection=(lb1 - lb0) * 1000 / max(1, connected),
            connect_p50_ms=_pct(latencies, 0.5) * 1000,
            connect_p99_ms=_pct(latencies, 0.99) * 1000,
            deliveries=deliveries,
            expected=connected * args.seconds,
            haproxy_ms_per_1k=(lb3 - lb2) * 1000 * per_1k,
            gateway_ms_per_1k=(gw3 - gw2) * 1000 * per_1k,
        )
    finally:
        for worker in clients:
            worker.join(5)  # each exits once it reported; one stuck after a failure is killed
            if worker.is_alive():
                worker.kill()
        for proc in [*balancers, gateway]:
            stop(proc)
        shutil.rmtree(directory, ignore_errors=True)


# ---------------------------------------------------------------- report


def table(results: list[Result]) -> str:
    rows = [
        "| mode | sockets | haproxy CPU ms / new connection | connect p50 / p99 ms | deliveries | "
        "haproxy CPU ms / 1k deliveries | gateway CPU ms / 1k deliveries |",
        "|---|---|---|---|---|---|---|",
    ]
    for x in results:
        rows.append(
            f"| {x.mode} | {x.sockets} | {x.haproxy_ms_per_connection:.3f} | {x.connect_p50_ms:.1f} / "
            f"{x.connect_p99_ms:.1f} | {x.deliveries}/{x.expected} | {x.haproxy_ms_per_1k:.1f} | "
            f"{x.gateway_ms_per_1k:.1f} |"
        )
    return "\n".join(rows)


def ratios(results: list[Result]) -> str:
    """TLS over plain, each TLS run against the plain run just before it (same round)."""
    lines = []
    for plain, tls in zip(results[::2], results[1::2], strict=False):
        handshake = tls.haproxy_ms_per_connection / plain.haproxy_ms_per_connection
        lines.append(
            f"TLS / plain: haproxy CPU per new connection x{handshake:.1f}, "
            f"per delivery x{tls.haproxy_ms_per_1k / plain.haproxy_ms_per_1k:.2f}, "
            f"connect p50 x{tls.connect_p50_ms / plain.connect_p50_ms:.1f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argument_parser("python -m bench.tls", __doc__ or "")
    p.add_argument("--sockets", type=int, default=10_000, help="sockets held open per mode")
    p.add_argument("--seconds", type=int, default=10, help="snapshots published per mode, one per second")
    p.add_argument("--clients", type=int, default=4, help="client processes (each under 20,000 descriptors)")
    p.add_argument("--balancers", type=int, default=2, help=f"haproxy processes on the port ({MAXCONN:,} each)")
    p.add_argument("--rounds", type=int, default=2, help="plain then TLS, this many times")
    bench_results.add_no_write(p)
    args = p.parse_args(argv)
    if args.sockets > args.balancers * MAXCONN:
        p.error(f"{args.sockets} sockets need {-(-args.sockets // MAXCONN)} balancers ({MAXCONN:,} each)")
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # children inherit it
    tmp = Path(tempfile.mkdtemp(prefix="tlsbench-"))
    results = []
    try:
        made = certs.make(tmp / "certs")
        with RedisServer(tmp / "redis") as server:
            r = redis.Redis.from_url(server.url)
            print(f"payload {len(snapshot_bytes(1))} bytes; {args.sockets} sockets; {args.seconds} snapshots per mode")
            for _ in range(args.rounds):
                for mode in MODES:
                    results.append(run_mode(mode, r, server.url, made, args))
            r.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(table(results))
    print(ratios(results))
    if not args.no_write:
        figures = {
            "payload_bytes": len(snapshot_bytes(1)),
            "sockets": args.sockets,
            "seconds": args.seconds,
            "modes": [dataclasses.asdict(x) for x in results],
        }
        print("recorded", bench_results.record("tls", figures, cmd=bench_results.command("bench.tls", argv)))
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
