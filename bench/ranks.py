"""Rank modes, percentiles and deep ranks on 1,000,000-member boards: ``python -m bench.ranks``.

In one run, against a private redis-server it starts and stops itself, for each of two boards of
``--members`` players (one submission each through ``lb_submit``, so the histogram and the
distinct points are built by the real write path):

- ``lognormal``: points = exp(N(9, 1.2)), many ties at the low end (a typical game's spread);
- ``uniform``: points uniform in 0..999,999, nearly no ties.

a) write cost at 1M: ``--updates`` personal-best submissions of random members (about half land)
   after the board is full, in alternated phases of ordinal mode (histogram kept) and dense mode
   (histogram and distinct-points set kept); Redis time per submission of the FCALL, and of the
   commands only the companions issue (INFO commandstats; calls made inside a function are counted
   in the FCALL and again on their own);
b) reads: ``lb_ranks`` for ``--sample`` random members in chunks of 500 (as the gateway's own-rank
   push reads them), in each rank mode and approximate, alternated round by round (ordinal,
   competition, dense, approximate, ordinal, ...): Redis time per player (commandstats of
   FCALL_RO, reset before each measurement) and wall-clock per call; ``lb_around`` (k = 5) the same
   way, per call;
c) error of the approximate rank against the exact ordinal rank for the same sample: the raw
   estimate, in ranks and in percentile points, by depth;
d) the time of ``lb_rank_rebuild`` (both companions rebuilt from the board, one atomic call).

Unless ``--no-write``, the figures are recorded in bench/results/ranks.json.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from bench import results
from fleet.redis_server import RedisServer
from leaderboard import GameConfig, Leaderboard, connect, now_ms
from leaderboard.ranking import RANK_MODES
from leaderboard.transport import RedisClient

CHUNK = 500
LOAD_BATCH = 1000
COMPANION_COMMANDS = ("hincrby", "hdel", "zcount", "zrem")


def points_of(dist: str, rng: random.Random) -> int:
    if dist == "lognormal":
        return int(math.exp(rng.gauss(9, 1.2)))
    return rng.randrange(1_000_000)


async def load(lb: Leaderboard, dist: str, members: int, rng: random.Random) -> float:
    """One submission per member; returns seconds taken."""
    now = now_ms()
    started = time.perf_counter()
    for start in range(0, members, LOAD_BATCH):
        batch = [
            {"id": f"l{i}", "player": f"p{i}", "points": str(points_of(dist, rng)), "ts": str(now)}
            for i in range(start, min(members, start + LOAD_BATCH))
        ]
        await lb.submit_batch(batch, rows=False)
    return time.perf_counter() - started


async def commandstats(r: RedisClient) -> dict[str, dict[str, Any]]:
    stats: dict[str, dict[str, Any]] = await r.info("commandstats")
    return {name.removeprefix("cmdstat_"): value for name, value in stats.items()}


async def write_cost(
    r: RedisClient, game: str, dist: str, members: int, updates: int, rng: random.Random, rounds: int
) -> dict[str, dict[str, Any]]:
    """Alternated phases of ``updates // (2 * rounds)`` submissions in ordinal mode (histogram
    only) and dense mode (histogram and points set); the median of each mode's phases."""
    runs: dict[str, list[dict[str, Any]]] = {}
    for _ in range(rounds):
        for mode in ("ordinal", "dense"):
            lb = Leaderboard(r, GameConfig(game=game, windows=("weekly",), rank_mode=mode))
            runs.setdefault(mode, []).append(await write_phase(lb, dist, members, updates // (2 * rounds), rng))
    return {mode: {k: statistics.median(p[k] for p in phases) for k in phases[0]} for mode, phases in runs.items()}


async def write_phase(lb: Leaderboard, dist: str, members: int, updates: int, rng: random.Random) -> dict[str, Any]:
    r = lb.redis
    await r.config_resetstat()
    now = now_ms()
    for start in range(0, updates, LOAD_BATCH):
        batch = [
            {
                "id": f"u{rng.random()}",
                "player": f"p{rng.randrange(members)}",
                "points": str(points_of(dist, rng)),
                "ts": str(now),
            }
            for i in range(start, start + LOAD_BATCH)
        ]
        await lb.submit_batch(batch, rows=False)
    stats = await commandstats(r)
    fcall = stats["fcall"]["usec"] / updates
    companions = sum(stats.get(c, {}).get("usec", 0) for c in COMPANION_COMMANDS) / updates
    zadd = stats.get("zadd", {})
    return {
        "fcall_us": fcall,
        "companion_us": companions,
        "zadd_calls": zadd.get("calls", 0),
        "zadd_us": zadd.get("usec", 0) / updates,
    }


async def redis_us(r: RedisClient, body: Callable[[], Awaitable[int]]) -> tuple[float, float]:
    """Redis time per unit (FCALL_RO commandstats) and wall-clock per call of ``body``, which
    returns how many units (players or calls) it read and makes ``calls`` calls."""
    await r.config_resetstat()
    started = time.perf_counter()
    units = await body()
    wall = time.perf_counter() - started
    stats = await commandstats(r)
    fcall_ro = stats.get("fcall_ro", {})
    calls = fcall_ro.get("calls", 1)
    return fcall_ro.get("usec", 0) / units, wall / calls * 1e6


async def reads(
    r: RedisClient, game: str, players: list[str], around_players: list[str], rounds: int
) -> dict[str, Any]:
    variants = [(mode, 0) for mode in RANK_MODES] + [("ordinal", 1)]
    ranks: dict[str, list[tuple[float, float]]] = {}
    around: dict[str, list[tuple[float, float]]] = {}
    for _ in range(rounds):
        for mode, deep in variants:
            lb = Leaderboard(r, GameConfig(game=game, windows=("weekly",), rank_mode=mode))
            name = "approximate" if deep else mode

            async def read_ranks(lb: Leaderboard = lb, deep: int = deep) -> int:
                for i in range(0, len(players), CHUNK):
                    await lb.ranks(players[i : i + CHUNK], "weekly", deep_from=deep)
                return len(players)

            ranks.setdefault(name, []).append(await redis_us(r, read_ranks))
            if deep:
                continue

            async def read_around(lb: Leaderboard = lb) -> int:
                for p in around_players:
                    await lb.around(p, "weekly", k=5)
                return len(around_players)

            around.setdefault(name, []).append(await redis_us(r, read_around))
    med = {
        name: (statistics.median(v[0] for v in runs), statistics.median(v[1] for v in runs))
        for name, runs in ranks.items()
    }
    med_around = {
        name: (statistics.median(v[0] for v in runs), statistics.median(v[1] for v in runs))
        for name, runs in around.items()
    }
    return {"ranks": med, "around": med_around}


async def error(r: RedisClient, lb: Leaderboard, players: list[str]) -> list[tuple[str, int, float, float, float]]:
    """Per depth band: (band, members sampled, median / p99 relative error, p99 error in percentile
    points) of the raw estimate against the exact ordinal rank."""
    spec = lb.config.window_specs[0]
    period = spec.period(now_ms())
    keys = [
        lb.keys.board("weekly", period.label, "global"),
        lb.keys.points("weekly", period.label, "global"),
        lb.keys.histogram("weekly", period.label, "global"),
    ]
    pairs: list[tuple[int, int]] = []
    size = 0
    for i in range(0, len(players), CHUNK):
        chunk = players[i : i + CHUNK]
        exact = await r.fcall_ro("lb_ranks", 3, *keys, "ordinal", spec.shift, 0, *chunk)
        approx = await r.fcall_ro("lb_ranks", 3, *keys, "ordinal", spec.shift, 1, *chunk)
        size = int(exact[0])
        pairs += [(int(e), int(a)) for e, a in zip(exact[1::4], approx[1::4], strict=True)]
    bands = [
        ("rank ≤ 10,000", 1, 10_000),
        ("10,001–100,000", 10_001, 100_000),
        ("> 100,000", 100_001, size),
        ("all", 1, size),
    ]
    out = []
    for name, lo, hi in bands:
        rel = sorted(abs(a - e) / e for e, a in pairs if lo <= e <= hi)
        pts = sorted(100 * abs(a - e) / size for e, a in pairs if lo <= e <= hi)
        if rel:
            out.append(
                (name, len(rel), rel[len(rel) // 2], rel[int(0.99 * (len(rel) - 1))], pts[int(0.99 * (len(pts) - 1))])
            )
    return out


async def run(args: argparse.Namespace, figures: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    with tempfile.TemporaryDirectory() as tmp, RedisServer(Path(tmp)) as server:
        r = connect(server.url)
        for dist in ("lognormal", "uniform"):
            rng = random.Random(args.seed)
            # loaded in dense mode: both companions built, so every mode's reads find theirs
            lb = Leaderboard(r, GameConfig(game=dist, windows=("weekly",), rank_mode="dense"))
            await lb.load()
            print(f"{dist}: loading {args.members:,} members ...", file=sys.stderr)
            took = await load(lb, dist, args.members, rng)
            period = lb.config.window_specs[0].period(now_ms())
            key = lb.keys.board("weekly", period.label, "global")
            hist, pts = (
                lb.keys.histogram("weekly", period.label, "global"),
                lb.keys.points("weekly", period.label, "global"),
            )
            sizes = [await r.zcard(key), await r.hlen(hist), await r.zcard(pts)]
            memory = [await r.memory_usage(k) or 0 for k in (key, hist, pts)]
            sample = [f"p{i}" for i in rng.sample(range(args.members), args.sample)]
            print(f"{dist}: reads ...", file=sys.stderr)
            read = await reads(r, dist, sample, sample[: args.around], args.rounds)
            print(f"{dist}: error ...", file=sys.stderr)
            err = await error(r, lb, sample)
            print(f"{dist}: write cost ...", file=sys.stderr)  # last: ordinal phases leave the points set stale
            cost = await write_cost(r, dist, dist, args.members, args.updates, rng, args.rounds)
            print(f"{dist}: rebuild ...", file=sys.stderr)
            # seconds per million members: longer than a client's default 5 s read timeout
            patient = connect(server.url, socket_timeout=None)
            started = time.perf_counter()
            await Leaderboard(patient, lb.config).rebuild_rank_index("weekly")
            rebuild = time.perf_counter() - started
            await patient.aclose()
            lines += report(dist, args, took, sizes, memory, cost, read, err, rebuild)
            figures[dist] = {
                "members": sizes[0],
                "histogram_buckets": sizes[1],
                "distinct_points": sizes[2],
                "load_s": took,
                "memory_bytes": dict(zip(("board", "histogram", "points"), memory, strict=True)),
                "write_cost": cost,
                "reads_us": {
                    kind: {name: {"redis_us": us, "wall_us": wall} for name, (us, wall) in by_mode.items()}
                    for kind, by_mode in read.items()
                },
                "approximate_error": {
                    name: {"members": n, "median": med, "p99": p99, "p99_points": pts} for name, n, med, p99, pts in err
                },
                "rank_rebuild_s": rebuild,
            }
            await r.flushall()
        await r.aclose()
    return lines


def report(
    dist: str,
    args: argparse.Namespace,
    took: float,
    sizes: list[int],
    memory: list[int],
    cost: dict[str, dict[str, Any]],
    read: dict[str, Any],
    err: list[Any],
    rebuild: float,
) -> list[str]:
    base_r, base_a = read["ranks"]["ordinal"], read["around"]["ordinal"]
    lines = [
        f"### {dist} board: {sizes[0]:,} members, {sizes[2]:,} distinct points values, {sizes[1]} histogram buckets",
        "",
        f"Loaded through lb_submit in {took:.1f} s ({sizes[0] / took:,.0f} members/s). Memory (MEMORY USAGE): "
        f"board {memory[0] / 2**20:.1f} MiB, distinct points {memory[2] / 2**20:.2f} MiB, histogram "
        f"{memory[1] / 1024:.1f} KiB.",
        "",
        f"Write cost at {sizes[0]:,} members ({args.updates:,} personal-best submissions of random members, "
        f"about half land; {args.rounds} alternated phases per mode, medians): Redis time per submission",
        "",
        "| mode (companions kept) | lb_submit µs | HINCRBY + HDEL + ZCOUNT + ZREM µs (companions only) | share "
        "| ZADD µs (board + points set) | ZADD calls |",
        "|---|---|---|---|---|---|",
        *(
            f"| {mode} ({'histogram + points set' if mode == 'dense' else 'histogram'}) | {c['fcall_us']:.2f} "
            f"| {c['companion_us']:.2f} | {100 * c['companion_us'] / c['fcall_us']:.0f} % | {c['zadd_us']:.2f} "
            f"| {c['zadd_calls']:,.0f} |"
            for mode, c in cost.items()
        ),
        "",
        f"Rebuilding both companions from the board (lb_rank_rebuild, dense mode, one atomic call): {rebuild:.2f} s.",
        "",
        f"| read ({args.sample:,} players, chunks of {CHUNK}; median of {args.rounds} alternated rounds) "
        "| Redis µs / player | vs ordinal | wall µs / call | vs ordinal |",
        "|---|---|---|---|---|",
    ]
    for name, (us, wall) in read["ranks"].items():
        lines.append(f"| lb_ranks {name} | {us:.2f} | {us / base_r[0]:.2f}× | {wall:,.0f} | {wall / base_r[1]:.2f}× |")
    for name, (us, wall) in read["around"].items():
        lines.append(
            f"| lb_around k=5 {name} ({args.around:,} calls) | {us:.2f} per call | {us / base_a[0]:.2f}× "
            f"| {wall:,.0f} | {wall / base_a[1]:.2f}× |"
        )
    lines += [
        "",
        f"| approximate vs exact ordinal rank ({args.sample:,} random members) | members | median error "
        "| p99 error | p99 error in percentile points |",
        "|---|---|---|---|---|",
    ]
    for name, n, med, p99, pts in err:
        lines.append(f"| {name} | {n:,} | {100 * med:.2f} % | {100 * p99:.2f} % | {pts:.3f} |")
    return [*lines, ""]


def main(argv: list[str] | None = None) -> int:
    from leaderboard.settings import argument_parser

    p = argument_parser("python -m bench.ranks", __doc__ or "")
    p.add_argument("--members", type=int, default=1_000_000, help="members per board")
    p.add_argument("--updates", type=int, default=100_000, help="submissions of the write-cost phase")
    p.add_argument("--sample", type=int, default=10_000, help="players read per rank variant and round")
    p.add_argument("--around", type=int, default=2_000, help="lb_around calls per mode and round")
    p.add_argument("--rounds", type=int, default=3, help="alternated rounds of the reads")
    p.add_argument("--seed", type=int, default=1, help="seed of the generated boards")
    results.add_no_write(p)
    args = p.parse_args(argv)
    figures: dict[str, Any] = {}
    lines = asyncio.run(run(args, figures))
    print("\n".join(lines))
    results.save("ranks", figures, args, module="bench.ranks", argv=argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
