"""Durable score log benchmark: ``python -m bench.durable`` (a few minutes).

In one run, with a private redis-server and PostgreSQL server it starts and stops itself:

a) size: ``--submissions`` applied submissions (``--players`` players, three windows, a third
   with a region) recorded in batches of 500 into SQLite and into PostgreSQL — bytes per million
   submissions; then compacted into per-board rows — bytes per player;
b) rebuild speed from SQLite into an empty Redis: right after the loss (every submission inside
   the idempotency horizon: folded, their ids restored, the newest 10,000 through ``lb_submit``),
   and as if three days later (every one outside the horizon: all folded).

``--rebuild-only``: b) alone (the log recorded into SQLite only, no PostgreSQL, no compaction),
``--rounds`` times each, alternating; ``--workers``: the rebuild's worker processes;
``--replay N``: a third rebuild right after the loss with the newest N through ``lb_submit``, what
an action that cannot be folded (replayed through its function instead) forces on every
submission applied after it.

Unless ``--no-write``, the figures are recorded in bench/results/durable.json
(durable-rebuild.json with ``--rebuild-only``), which ``python -m bench.plots`` draws.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import asyncpg

from bench import results
from fleet.postgres_server import PostgresServer
from fleet.redis_server import RedisServer
from leaderboard import GameConfig, connect, now_ms
from leaderboard.settings import argument_parser
from scorer.durable import Folder, Record, Store, open_store
from scorer.rebuild import rebuild

BATCH = 500
DAY_MS = 86_400_000


def batches(n: int, players: int, now: int, seed: int = 1) -> list[list[Record]]:
    """The log of a scorer that applied ``n`` submissions over the last hour, batch by batch."""
    rnd = random.Random(seed)
    out = []
    start_us = (now - 3_600_000) * 1000
    for b in range(0, n, BATCH):
        applied = start_us + b * 3_600_000_000 // n
        out.append(
            [
                Record(
                    f"m-{i:09d}",
                    f"player-{rnd.randrange(players):07d}",
                    rnd.randrange(1_000_000),
                    now - 3_600_000 + i * 3_600_000 // n,
                    region=rnd.choice(("eu", "us", "")) if i % 3 == 0 else "",
                    applied_us=applied,
                    index=i - b,
                )
                for i in range(b, min(b + BATCH, n))
            ]
        )
    return out


async def fill(store: Store, log: list[list[Record]]) -> float:
    started = time.perf_counter()
    for batch in log:
        await store.record("bench", batch)
    return sum(map(len, log)) / (time.perf_counter() - started)


async def sqlite_size(path: Path) -> int:
    store = open_store(f"sqlite:///{path}")
    await store.open()
    db = store.db  # type: ignore[attr-defined]
    async with db.execute("PRAGMA wal_checkpoint(TRUNCATE)"):
        pass
    async with db.execute("VACUUM"):
        pass
    await store.close()
    return files_size(path)


def files_size(path: Path) -> int:
    """The database file and its -wal / -shm companions."""
    return path.stat().st_size + sum(p.stat().st_size for p in path.parent.glob(path.name + "-*"))


async def postgres_size(url: str) -> int:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute("VACUUM FULL submissions, board_rows, names")
        size = await conn.fetchval(
            "SELECT pg_total_relation_size('submissions') + pg_total_relation_size('board_rows')"
            " + pg_total_relation_size('names')"
        )
        return int(size)
    finally:
        await conn.close()


async def rebuild_speeds(path: Path, redis_url: str, now: int, args: argparse.Namespace) -> dict[str, list[float]]:
    """b): submissions/s of each rebuild, right after the loss and three days later, alternating."""
    config = GameConfig(game="bench")
    r = connect(redis_url)
    store = open_store(f"sqlite:///{path}")
    await store.open()
    speeds: dict[str, list[float]] = {}
    try:
        kinds: list[tuple[str, int, int | None]] = [
            ("right after the loss", now, None),
            ("three days later", now + 3 * DAY_MS, None),
        ]
        if args.replay:
            kinds.append((f"right after the loss, the newest {args.replay:,} through lb_submit", now, args.replay))
        for _ in range(args.rounds):
            for label, at, replay in kinds:
                await r.flushall()
                print(f"rebuild {label} ...", file=sys.stderr)
                restored = await rebuild(
                    r, store, config, batch=1000, replay=replay, progress_to=io.StringIO(), now=at,
                    workers=args.workers,
                )  # fmt: skip
                speeds.setdefault(label, []).append((restored.folded + restored.replayed) / restored.seconds)
    finally:
        await store.close()
        await r.aclose()
    return speeds


def speed_lines(n: int, players: int, speeds: dict[str, list[float]], workers: int) -> list[str]:
    return [
        f"Rebuild from SQLite into an empty Redis ({n:,} submissions, {players:,} players, {workers} workers):",
        "",
        "| rebuild | submissions/s, each run |",
        "|---|---|",
        *(f"| {label} | **{', '.join(f'{v:,.0f}' for v in runs)}** |" for label, runs in speeds.items()),
    ]


async def run(args: argparse.Namespace) -> tuple[list[str], dict[str, Any]]:
    """The printed lines and the recorded figures."""
    config = GameConfig(game="bench")
    now = now_ms()
    log = batches(args.submissions, args.players, now)
    n = args.submissions
    players = len({rec.player for batch in log for rec in batch})
    if args.rebuild_only:
        with tempfile.TemporaryDirectory() as tmp, RedisServer(Path(tmp)) as redis:
            path = Path(tmp) / "scores.db"
            store = open_store(f"sqlite:///{path}")
            await store.open()
            print("sqlite: recording ...", file=sys.stderr)
            await fill(store, log)
            await store.close()
            speeds = await rebuild_speeds(path, redis.url, now, args)
            figures = {"submissions": n, "players": players, "workers": args.workers, "rebuild_per_s": speeds}
            return speed_lines(n, players, speeds, args.workers), figures
    lines = [
        f"{n:,} submissions of {args.players:,} players (three windows: daily, weekly, all-time; a third with a "
        "region), recorded 500 per batch:",
        "",
        "| | SQLite | PostgreSQL |",
        "|---|---|---|",
    ]
    with tempfile.TemporaryDirectory() as tmp, PostgresServer(durable=True) as pg, RedisServer(Path(tmp)) as redis:
        path = Path(tmp) / "scores.db"
        stores = {"sqlite": open_store(f"sqlite:///{path}"), "postgres": open_store(pg.url)}
        rates, raw, compacted, rows = {}, {}, {}, {}
        for kind, store in stores.items():
            await store.open()
            print(f"{kind}: recording ...", file=sys.stderr)
            rates[kind] = await fill(store, log)
            await store.close()
            raw[kind] = await (sqlite_size(path) if kind == "sqlite" else postgres_size(pg.url))
        # b) rebuild speed from SQLite, before compaction (compaction empties the raw log)
        speeds = await rebuild_speeds(path, redis.url, now, args)
        for kind, store in stores.items():
            await store.open()
            print(f"{kind}: compacting ...", file=sys.stderr)
            done = await store.compact("bench", before_ts=now + 1, now_s=now // 1000, folder=Folder(config))
            rows[kind] = done.board_rows
            await store.close()
            compacted[kind] = await (sqlite_size(path) if kind == "sqlite" else postgres_size(pg.url))
    lines += [
        f"| recording, rows/s (one transaction per 500) | {rates['sqlite']:,.0f} | {rates['postgres']:,.0f} |",
        f"| raw log, bytes per million submissions | {raw['sqlite'] * 1e6 / n / 1e6:,.0f} MB "
        f"| {raw['postgres'] * 1e6 / n / 1e6:,.0f} MB |",
        f"| compacted: board rows ({rows['sqlite'] / players:.1f} per player) + names, bytes per player "
        f"| {compacted['sqlite'] / players:,.0f} | {compacted['postgres'] / players:,.0f} |",
        "",
        *speed_lines(n, players, speeds, args.workers),
    ]
    figures = {
        "submissions": n,
        "players": players,
        "workers": args.workers,
        "rebuild_per_s": speeds,
        "record_rows_per_s": rates,
        "raw_bytes": raw,
        "compacted_bytes": compacted,
        "board_rows": rows,
    }
    return lines, figures


def main(argv: list[str] | None = None) -> int:
    p = argument_parser("python -m bench.durable", __doc__ or "")
    p.add_argument("--submissions", type=int, default=1_000_000, help="submissions in the log (default 1,000,000)")
    p.add_argument("--players", type=int, default=100_000, help="distinct players drawn from (default 100,000)")
    p.add_argument("--rebuild-only", action="store_true", help="only the rebuild speed (SQLite, no PostgreSQL)")
    p.add_argument("--rounds", type=int, default=1, help="rebuilds of each kind, alternating (default 1)")
    p.add_argument("--workers", type=int, default=2, help="the rebuild's worker processes (default 2)")
    p.add_argument("--replay", type=int, default=0, help="also rebuild with the newest N through lb_submit")
    results.add_no_write(p)
    args = p.parse_args(argv)
    lines, figures = asyncio.run(run(args))
    print("\n".join(lines))
    name = "durable-rebuild" if args.rebuild_only else "durable"
    results.save(name, figures, args, module="bench.durable", argv=argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
