"""Where a gateway's memory per connection goes: N idle subscribed sockets, measured from inside.

    python -m bench.conn_memory                 # 5,000 sockets
    python -m bench.conn_memory --sockets 2000 --top 30

Starts a private redis-server and one gateway in this process (uvloop, as ``python -m gateway``
runs it), with ``tracemalloc`` on, then opens N sockets from a client process (the same raw
sockets as bench/gateway.py: each gets its welcome and the default board's snapshot, then stays
idle). Before and after, it takes a tracemalloc snapshot and counts live objects by type, and
prints, per connection: Python heap bytes by allocation site (the top ``--top``), live objects by
type, and asyncio tasks. RSS (without tracemalloc's own overhead) is bench/gateway.py's figure;
this tool says which objects make it up.

Unless ``--no-write``, the figures are recorded in bench/results/conn_memory.json, which
``python -m bench.plots`` draws.
"""

from __future__ import annotations

import asyncio
import gc
import multiprocessing as mp
import os
import resource
import shutil
import sys
import tempfile
import time
import tracemalloc
from collections import Counter
from typing import Any

import redis
import uvloop

from bench import results
from bench.gateway import BOARD, GAME, KEYS, WINDOW, snapshot_bytes
from bench.gateway_clients import _client_process
from fleet.redis_server import RedisServer
from gateway.server import Gateway
from gateway.settings import GatewaySettings
from leaderboard import GameConfig
from leaderboard.settings import argument_parser
from loadtest.procstat import usage


def where(filename: str) -> str:
    """A source file as a reader finds it (``websockets/protocol.py``, ``gateway/client.py``,
    ``python3.11/asyncio/events.py``), without this machine's directories."""
    for root in ("/site-packages/", f"{results.ROOT}/", "/lib/"):
        if root in filename:
            return filename.split(root, 1)[1]
    return filename


def _types() -> Counter[str]:
    return Counter(type(o).__qualname__ for o in gc.get_objects())


async def measure(redis_url: str, sockets: int, top: int, clients: int) -> tuple[str, dict[str, Any]]:
    """The printed report and the recorded figures."""
    settings = GatewaySettings(
        port=0, redis_url=redis_url, game=GameConfig(game=GAME), connect_rate=0, max_connections=0, metrics_port=0
    )
    lines: list[str] = []
    async with Gateway(settings) as gw:
        await asyncio.wait_for(gw.hub.connected.wait(), 10)
        gc.collect()
        before, types0, tasks0 = tracemalloc.take_snapshot(), _types(), len(asyncio.all_tasks())
        rss0 = usage(os.getpid()).rss_bytes
        ctx = mp.get_context("fork")
        per = [sockets // clients + (1 if i < sockets % clients else 0) for i in range(clients)]
        pipes, procs = [], []
        for i, count in enumerate(per):
            parent, child = ctx.Pipe()
            p = ctx.Process(target=_client_process, args=(child, gw.port, count, f"127.0.0.{i + 2}", 0.1), daemon=True)
            p.start()
            pipes.append(parent)
            procs.append(p)
        loop = asyncio.get_running_loop()
        connected = sum([(await loop.run_in_executor(None, pipe.recv))[1] for pipe in pipes])
        await asyncio.sleep(1.0)  # welcomes and snapshots written, handlers parked in recv()
        gc.collect()
        n = len(gw.clients)
        after, types1, tasks1 = tracemalloc.take_snapshot(), _types(), len(asyncio.all_tasks())
        rss1 = usage(os.getpid()).rss_bytes
        stats = after.compare_to(before, "lineno")
        total = sum(s.size_diff for s in stats)
        lines.append(f"{connected} sockets connected, {n} clients in the gateway")
        lines.append(
            f"Python heap (tracemalloc) per connection: {total / n:,.0f} B; RSS per connection (with "
            f"tracemalloc's overhead): {(rss1 - rss0) / n:,.0f} B; asyncio tasks per connection: "
            f"{(tasks1 - tasks0) / n:.2f}"
        )
        lines.append("\nbytes per connection by allocation site:")
        sites = {}
        for s in stats[:top]:
            frame = s.traceback[0]
            site = f"{where(frame.filename)}:{frame.lineno}"
            sites[site] = s.size_diff / n
            lines.append(f"  {s.size_diff / n:8,.0f} B  {s.count_diff / n:5.2f} blocks  {site}")
        lines.append("\nlive objects per connection by type:")
        diff = {t: types1[t] - types0.get(t, 0) for t in types1}
        for t, d in sorted(diff.items(), key=lambda kv: -kv[1])[:top]:
            if d / n >= 0.5:
                lines.append(f"  {d / n:5.2f}  {t}")
        for pipe in pipes:
            pipe.send("report")
        for pipe in pipes:
            await loop.run_in_executor(None, pipe.recv)
        for p in procs:
            p.join(10)
    figures = {
        "sockets": connected,
        "clients": n,
        "heap_bytes_per_conn": total / n,
        "rss_bytes_per_conn_with_tracemalloc": (rss1 - rss0) / n,
        "tasks_per_conn": (tasks1 - tasks0) / n,
        "heap_bytes_per_conn_by_site": sites,
    }
    return "\n".join(lines), figures


def main(argv: list[str] | None = None) -> int:
    p = argument_parser("python -m bench.conn_memory", __doc__ or "")
    p.add_argument("--sockets", type=int, default=5000, help="idle subscribed sockets")
    p.add_argument("--clients", type=int, default=2, help="client processes")
    p.add_argument("--top", type=int, default=25, help="allocation sites and types listed")
    results.add_no_write(p)
    args = p.parse_args(argv)
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    tmp = tempfile.mkdtemp(prefix="connmem-")
    try:
        with RedisServer(tmp) as server:
            r = redis.Redis.from_url(server.url)
            r.set(KEYS.latest(WINDOW, BOARD), snapshot_bytes(1))
            r.close()
            tracemalloc.start(1)
            started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
            print(f"{started}: {args.sockets} sockets")
            report, figures = uvloop.run(measure(server.url, args.sockets, args.top, args.clients))
            print(report)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    results.save("conn_memory", figures, args, module="bench.conn_memory", argv=argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
