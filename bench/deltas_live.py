"""Snapshot deltas through the real scorer: the share of deliveries a delta client gets as deltas.

    python -m bench.deltas_live                               # the demo's 300 matches/s, main against this tree
    python -m bench.deltas_live --rate 3000 --rounds 2 --seconds 60

bench/deltas.py plays the demo's top 10 with versions counting up one a tick, as the gateway
needs them; this one runs what sets the versions. For each side (``--baseline``, a git
revision, extracted with ``git archive`` as bench.gateway's ``gateway@REV`` targets are, then
this tree), alternating ``--rounds`` times, on a private redis-server of its own: the side's
scorer (``python -m scorer``, its default one-second tick), this tree's gateway
(``python -m gateway``), the demo's game servers (fleet/demo.py's ladder, ten queue filings a
second at ``--rate`` matches a second: each a batch of the scorer's, many of them changing the
top 10 within one tick) and one socket that asks for deltas on the weekly global board. After
``--warmup`` seconds it counts, for ``--seconds``: the snapshots published (the weekly global
board's), how many times its top N changed meanwhile (its top-N version), what the socket got as
``delta`` and as ``snapshot``, and the bytes of each (payloads, before the frame's header). Each
delta is applied to the snapshot held (leaderboard/delta.py); one that does not fit counts as a
mismatch (none should). Prints a table and (unless --no-write) records it in
bench/results/deltas-live-<rate>.json.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import orjson
from websockets.asyncio.client import connect as ws_connect

from bench import results as bench_results
from bench.drain import baseline_error
from bench.gateway import BOARD, GAME, KEYS, WINDOW, _start_target, _wait_listening, source_tree, stop
from bench.scorer_sustained import scorer_env
from fleet.children import stop_process
from fleet.demo import traffic
from fleet.redis_server import RedisServer, free_port
from leaderboard import GameConfig, Leaderboard, connect, delta
from leaderboard.settings import argument_parser

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Side:
    """What one side's run counted over the measured seconds."""

    name: str
    top_changes: int = 0  # the board's top-N version's growth over the same seconds
    deltas: int = 0
    snapshots: int = 0
    delta_bytes: int = 0
    snapshot_bytes: int = 0
    mismatches: int = 0

    @property
    def published(self) -> int:
        """Versions of the board the socket was sent (snapshots and deltas)."""
        return self.deltas + self.snapshots

    @property
    def share(self) -> float:
        return self.deltas / max(1, self.published)

    @property
    def bytes_per_delivery(self) -> float:
        return (self.delta_bytes + self.snapshot_bytes) / max(1, self.published)

    @property
    def full_bytes(self) -> float:
        return self.snapshot_bytes / max(1, self.snapshots)


async def _top_version(r: Any) -> int:
    """The weekly global board's top-N version in its current period (the versions hash)."""
    total = 0
    for field, value in (await r.hgetall(KEYS.versions)).items():
        name = field.decode() if isinstance(field, bytes) else field
        window, _, rest = name.partition(":")
        if window == WINDOW and rest.endswith(f":{BOARD}"):
            total = max(total, int(value))
    return total


async def _watch(port: int, side: Side, measuring: asyncio.Event, done: asyncio.Event) -> None:
    """One delta client: counts what it gets once ``measuring`` is set, until ``done``."""
    async with ws_connect(f"ws://127.0.0.1:{port}/ws", compression=None, max_size=None) as ws:
        await ws.send('{"type":"hello","deltas":true}')
        held: dict[str, Any] | None = None
        while not done.is_set():
            try:
                raw = await asyncio.wait_for(ws.recv(decode=False), 0.5)
            except TimeoutError:
                continue
            msg = orjson.loads(raw)
            if msg.get("type") not in ("snapshot", "delta") or (msg["board"], msg["window"]) != (BOARD, WINDOW):
                continue
            try:
                held = delta.follow(held, msg) or held
            except delta.Mismatch:
                side.mismatches += 1
                await ws.send(orjson.dumps({"type": "resync", "board": BOARD, "window": WINDOW}))
                continue
            if not measuring.is_set():
                continue
            if msg["type"] == "delta":
                side.deltas, side.delta_bytes = side.deltas + 1, side.delta_bytes + len(raw)
            else:
                side.snapshots, side.snapshot_bytes = side.snapshots + 1, side.snapshot_bytes + len(raw)


async def run_side(name: str, tree: Path, args: Any) -> Side:
    side = Side(name)
    config = GameConfig(game=GAME)
    with tempfile.TemporaryDirectory() as tmp, RedisServer(Path(tmp)) as server:
        r = connect(server.url)
        await Leaderboard(r, config).load()  # the queue's, before the scorer loads its own
        scorer = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "scorer", cwd=tree, env=scorer_env(server.url, GAME)
        )
        port = free_port()
        gateway = _start_target("gateway-deltas", port, free_port(), server.url, None, 1)
        stop_traffic, measuring, done = asyncio.Event(), asyncio.Event(), asyncio.Event()
        try:
            await asyncio.to_thread(_wait_listening, port, gateway)
            producer = asyncio.create_task(traffic(server.url, config, args.rate, stop=stop_traffic, seed=1))
            watcher = asyncio.create_task(_watch(port, side, measuring, done))
            await asyncio.sleep(args.warmup)
            before = await _top_version(r)
            measuring.set()
            started = time.monotonic()
            await asyncio.sleep(args.seconds)
            side.top_changes = await _top_version(r) - before
            stop_traffic.set()
            await producer
            # the last tick's snapshot, published after the traffic stopped, still counts
            await asyncio.sleep(1.5)
            done.set()
            await watcher
            print(f"{name}: {time.monotonic() - started:.0f} s measured", file=sys.stderr)
        finally:
            stop_traffic.set()
            done.set()
            with contextlib.suppress(ProcessLookupError):
                stop(gateway)
            await stop_process(scorer, 15)
            await r.aclose()
    return side


def table(sides: list[Side]) -> list[str]:
    lines = [
        "| side | snapshots sent | top-N changes | changes per snapshot | sent as deltas | bytes / delivery | "
        "full snapshot bytes | mismatches |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in sides:
        lines.append(
            f"| {s.name} | {s.published} | {s.top_changes} | {s.top_changes / max(1, s.published):.1f} | "
            f"{s.share:.1%} | {s.bytes_per_delivery:.0f} | {s.full_bytes:.0f} | {s.mismatches} |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argument_parser("python -m bench.deltas_live", __doc__ or "")
    p.add_argument("--baseline", default="main", help="the git revision whose scorer is the baseline")
    p.add_argument("--rate", type=int, default=300, help="matches a second (the demo's default: 300)")
    p.add_argument("--warmup", type=float, default=10.0, help="seconds of traffic before counting")
    p.add_argument("--seconds", type=float, default=30.0, help="seconds counted per side and round")
    p.add_argument("--rounds", type=int, default=1, help="each side this many times, alternating")
    bench_results.add_no_write(p)
    args = p.parse_args(argv)
    if min(args.rate, args.rounds) < 1 or args.seconds <= 0 or args.warmup < 0:
        p.error("--rate and --rounds must be at least 1, --seconds above 0 and --warmup at least 0")
    if Path(args.baseline).is_file() or baseline_error(args.baseline):
        p.error(f"--baseline: {args.baseline!r} is not a git ref of this repository")
    sides: list[Side] = []
    for _ in range(args.rounds):
        for name, tree in ((f"scorer@{args.baseline}", source_tree(args.baseline)), ("scorer (this tree)", ROOT)):
            sides.append(asyncio.run(run_side(name, tree, args)))
    print(f"weekly global board, {args.rate} matches/s, {args.seconds:.0f} s per side and round")
    print("\n".join(table(sides)))
    rows = [
        {**asdict(s), "published": s.published, "share": s.share, "bytes_per_delivery": s.bytes_per_delivery}
        for s in sides
    ]
    figures = {"rate": args.rate, "seconds": args.seconds, "baseline": args.baseline, "sides": rows}
    bench_results.save(f"deltas-live-{args.rate}", figures, args, module="bench.deltas_live", argv=argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
