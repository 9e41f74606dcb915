"""Board definitions at scale: ``python -m bench.definitions --stored 1000,10000,100000``.

For each count of stored definitions, on a private redis-server: the definitions are written as
``lb_board_put`` leaves them (the boards hash, the change log, the counter, its epoch; one key, daily and
alltime windows, every other one in Europe/Paris; the Redis memory they take is reported), then
``--registries`` processes each hold a registry (``Definitions.refresh()`` every ``--tick-ms``,
as a gateway's watch does once a second) and one process runs a scorer's publisher
(``Publisher.tick()`` every ``--tick-ms``, holding the lease). Once each has loaded, one
definition is created (``lb_board_put``), and each process says when it first used it: the
registries when ``get()`` returns it, the publisher when a tick returned with it in its
registry. Reported per process: the first load's time, its longest stall of the event loop (a
5 ms ticker's worst lateness), its memory (RSS after the load minus before, per stored
definition), the time from the create to its use, and the publisher's tick time before the
change (``tick_s``: median of the five ticks after the first, while it still publishes every
board's first snapshot) and once it has published them all (``steady_tick_s``: ticking until a
tick publishes nothing, at most ``--deadline`` seconds).

``--baseline REF`` runs the same with the code of a git ref (its leaderboard, scorer and
library: ``git archive``, as bench.drain does), alternating with this tree's per count. A process
that has not loaded ``--load-deadline`` seconds after it started, or not used the change
``--deadline`` seconds after it was made, is reported so (null figures), not waited for.

Unless ``--no-write``, the figures are recorded in bench/results/definitions.json.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

from bench import results
from bench.drain import code_tree, tree_library
from fleet.redis_server import RedisServer
from leaderboard import boards
from leaderboard.library import library_code
from leaderboard.settings import argument_parser

GAME = "bench"
PROBE = "probe"


def definition_json(i: int, version: int = 1) -> str:
    zone = "Europe/Paris" if i % 2 else "UTC"
    spec = {"id": f"g{i}", "keys": [{"name": "points"}], "windows": ["daily", "alltime"], "time_zone": zone}
    return boards.parse({**spec, "version": version}).to_json()


def seed(url: str, n: int, code: str) -> int:
    """``n`` definitions, as lb_board_put leaves them: hash, change log (version i), counter,
    the log's epoch; the bytes of Redis memory they took."""
    r = redis.Redis.from_url(url, decode_responses=True)
    r.function_load(code, replace=True)
    before = int(r.info("memory")["used_memory"])
    prefix = f"lb:{{{GAME}}}"
    pipe = r.pipeline(transaction=False)
    for i in range(1, n + 1):
        pipe.hset(f"{prefix}:boards", f"g{i}", definition_json(i))
        pipe.zadd(f"{prefix}:boardlog", {f"g{i}": i})
        if i % 5000 == 0:
            pipe.execute()
    pipe.set(f"{prefix}:boardsver", n)
    pipe.set(f"{prefix}:boardepoch", time.time_ns() // 1000)  # the log's epoch (a baseline's code ignores it)
    pipe.execute()
    used = int(r.info("memory")["used_memory"]) - before
    r.close()
    return used


def rss_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


async def worker(url: str, kind: str, tick_ms: int) -> None:
    """One process: load, say so, then refresh (or tick) until the probe is seen; one JSON line
    per event on stdout. Imports the code it finds first on its path (a baseline's tree)."""
    from leaderboard import GameConfig, connect
    from leaderboard.definitions import Definitions
    from scorer import Publisher, ScorerSettings

    r = connect(url)
    config = GameConfig(game=GAME, windows=("daily", "alltime"))
    worst = 0.0

    async def ticker() -> None:
        nonlocal worst
        loop = asyncio.get_running_loop()
        while True:
            at = loop.time()
            await asyncio.sleep(0.005)
            worst = max(worst, loop.time() - at - 0.005)

    watch = asyncio.create_task(ticker())
    await asyncio.sleep(0.02)
    before = rss_kb()
    publisher = None
    started = time.perf_counter()
    if kind == "publisher":
        settings = ScorerSettings(redis_url=url, game=config, name="bench", metrics_port=0, tick_ms=tick_ms)
        publisher = Publisher(r, settings)
        registry = publisher.lb.boards
        await publisher.tick()
    else:
        registry = Definitions(r, config)
        await registry.refresh()
    loaded = time.perf_counter() - started
    ticks: list[float] = []
    if publisher is not None:
        for _ in range(5):
            t = time.perf_counter()
            await publisher.tick()
            ticks.append(time.perf_counter() - t)
    print(json.dumps({"event": "loaded", "load_s": loaded, "rss_kb": rss_kb() - before, "ticks": ticks}), flush=True)
    while registry.get(PROBE) is None:
        await asyncio.sleep(tick_ms / 1000)
        if publisher is not None:
            await publisher.tick()
        else:
            await registry.refresh()
    print(json.dumps({"event": "seen", "at": time.time(), "stall_s": worst}), flush=True)
    if publisher is not None:  # once every board is published: what a tick costs from then on
        for _ in range(1000):
            if not await publisher.tick():
                break
            await asyncio.sleep(tick_ms / 1000)
        steady = []
        for _ in range(5):
            t = time.perf_counter()
            await publisher.tick()
            steady.append(time.perf_counter() - t)
        print(json.dumps({"event": "steady", "tick_s": statistics.median(steady)}), flush=True)
    watch.cancel()


def run_side(args: Any, n: int, tree: Path | None) -> dict[str, Any]:
    code = tree_library(tree) if tree else library_code()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with tempfile.TemporaryDirectory(prefix="bench-defs-") as data, RedisServer(Path(data)) as server:
        t = time.perf_counter()
        redis_bytes = seed(server.url, n, code)
        seeded = time.perf_counter() - t
        kinds = ["publisher", *["registry"] * args.registries]
        cmd = [
            sys.executable,
            "-m",
            "bench.definitions",
            "--worker",
            "--url",
            server.url,
            "--tick-ms",
            str(args.tick_ms),
        ]
        procs = [
            subprocess.Popen(
                # each process imports the code it finds first on its path: the tree's
                [*cmd, "--kind", kind],
                cwd=tree or results.ROOT,
                env=env,
                stdout=subprocess.PIPE,
                text=True,
            )
            for kind in kinds
        ]
        try:
            loaded: list[dict[str, Any]] = []  # each loads first
            until = time.monotonic() + args.load_deadline
            for p in procs:
                try:
                    loaded.append(json.loads(_readline(p, until) or "{}"))
                except TimeoutError:
                    loaded.append({})
            from leaderboard import GameConfig, connect

            async def create() -> float:
                r = connect(server.url)
                # lb_board_put as this tree's wrapper calls it, with the keys each release passes
                k = GameConfig(game=GAME).keys
                keys = [k.boards, k.boards_version, k.journal, k.deleted_boards]
                spec = boards.parse({"id": PROBE, "keys": [{"name": "points"}], "version": 1}).to_json()
                extra: list[Any] = []
                # a release with the change log (lb:{g}:boardlog) passes it and a cap; one that
                # refuses a reshaping default, the activity stream and whether it reshapes; one
                # with the log's epoch, that too
                wrapper = (tree or results.ROOT) / "leaderboard" / "library" / "definitions.py"
                passed = wrapper.read_text() if wrapper.exists() else ""
                if tree is None or "board_changes" in (tree / "leaderboard" / "keys.py").read_text():
                    keys.append(k.board_changes)
                    extra = [0]
                if "k.activity" in passed:
                    keys.append(k.activity)
                    extra.append(0)
                if "k.board_epoch" in passed:
                    keys.append(k.board_epoch)
                at = time.time()
                await r.fcall("lb_board_put", len(keys), *keys, PROBE, spec, "", "", *extra)
                await r.aclose()
                return at

            created = asyncio.run(create())
            seen: list[dict[str, Any]] = []
            deadline = time.monotonic() + args.deadline
            for p in procs:
                assert p.stdout is not None
                try:
                    line = _readline(p, deadline)
                except TimeoutError:
                    line = ""
                seen.append(json.loads(line) if line else {})
            try:
                steady = json.loads(_readline(procs[0], time.monotonic() + args.deadline) or "{}")
            except TimeoutError:
                steady = {}
        finally:
            for p in procs:
                p.kill()
                p.wait()
    per = round(redis_bytes / n)
    out: dict[str, Any] = {
        "stored": n,
        "seeded_s": round(seeded, 2),
        "redis_bytes_per_definition": per,
        "processes": [],
    }
    for kind, load, s in zip(kinds, loaded, seen, strict=True):
        figures = {
            "kind": kind,
            "load_s": round(load.get("load_s", -1), 3),
            "rss_mb": round(load.get("rss_kb", 0) / 1024, 1),
            "bytes_per_definition": round(load.get("rss_kb", 0) * 1024 / n),
            "change_to_use_s": round(s["at"] - created, 3) if s else None,
            "stall_s": round(s["stall_s"], 3) if s else None,
        }
        if kind == "publisher":
            figures["tick_s"] = round(statistics.median(load["ticks"]), 4) if load.get("ticks") else None
            figures["steady_tick_s"] = round(steady["tick_s"], 4) if steady else None
        out["processes"].append(figures)
    return out


def _readline(p: subprocess.Popen[str], deadline: float) -> str:
    """A line of ``p``'s output before ``deadline`` (TimeoutError after it)."""
    import selectors

    assert p.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(p.stdout, selectors.EVENT_READ)
        if not sel.select(max(0.0, deadline - time.monotonic())):
            raise TimeoutError
    return p.stdout.readline()


def main(argv: list[str] | None = None) -> int:
    p = argument_parser("python -m bench.definitions", __doc__ or "")
    p.add_argument("--stored", default="1000,10000,100000", help="counts of stored definitions, comma-separated")
    p.add_argument("--registries", type=int, default=2, help="registry processes (besides the publisher)")
    p.add_argument("--tick-ms", type=int, default=100, help="each process's refresh (or tick) interval")
    p.add_argument("--deadline", type=float, default=60.0, help="seconds a process may take to use the change")
    p.add_argument("--load-deadline", type=float, default=300.0, help="seconds a process may take to load")
    p.add_argument("--baseline", metavar="REF", help="also run the code of a git ref")
    p.add_argument("--worker", action="store_true", help=argparse_hidden())
    p.add_argument("--kind", default="registry", help=argparse_hidden())
    p.add_argument("--url", default="", help=argparse_hidden())
    results.add_no_write(p)
    args = p.parse_args(argv)
    if args.worker:
        asyncio.run(worker(args.url, args.kind, args.tick_ms))
        return 0
    counts = [int(c) for c in args.stored.split(",")]
    runs: dict[str, list[dict[str, Any]]] = {"this": []}
    with tempfile.TemporaryDirectory(prefix="bench-defs-tree-") as scratch:
        tree = code_tree(args.baseline, Path(scratch)) if args.baseline else None
        if tree is not None:
            runs["baseline"] = []
        for n in counts:
            for side in runs:
                figures = run_side(args, n, tree if side == "baseline" else None)
                runs[side].append(figures)
                per = figures["redis_bytes_per_definition"]
                print(f"{side} {n:,} stored (seeded in {figures['seeded_s']} s, {per} bytes each in Redis):")
                for f in figures["processes"]:
                    print("   ", ", ".join(f"{k} {v}" for k, v in f.items()))
    results.save(
        "definitions",
        {"baseline": args.baseline, "tick_ms": args.tick_ms, "runs": runs},
        args,
        module="bench.definitions",
        argv=argv,
    )
    return 0


def argparse_hidden() -> str:
    import argparse

    return argparse.SUPPRESS


if __name__ == "__main__":
    sys.exit(main())
