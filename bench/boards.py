"""Defined boards against the default one: ``python -m bench.boards``.

Board shapes, each kept in three windows (daily, weekly, alltime) and filled to ``--members``
members per window first (pipelined writes of what lb_submit would store: a packed board's
scores, a lex board's members with its members hash and distinct key parts), then, on one
private redis-server:

* ``default``: the game's own board (one key, points, packed double), its common slips;
* ``default_general``: the same board, its slips sent with an operator: lb_submit's general path
  (a lex board's slips, and any slip with an operator, incr or metadata), not the common slip's
  one pass (lua/common.lua, which a packed board's best or set slips take);
* ``two_keys``: a defined board of two unbounded keys, desc then asc (lex members);
* ``two_keys_packed``: two bounded keys, a level 0..99 desc then a time 0..1,000,000 ms asc
  (packed: their ranges fit one double with alltime's 26 bits of time);
* ``five_keys``: a defined board of five unbounded keys, directions alternating (lex members);
* ``five_keys_packed``: five keys of 0..39 each, directions alternating (40^5 ≤ 2^27: packed).

All are filled first, side by side in one Redis; then the writes go in ``--rounds`` rounds,
each round a share of ``--submissions`` slips to every shape in turn (the order rotating from one
round to the next), so a shape is never measured minutes apart from the one it is compared with.
For each: per submission through ``lb_submit`` (random players of the board, random values,
batches of 500, the scorer's ``rows=False``) the Redis CPU time of its main thread (``INFO cpu``:
time on a core, which other load on the machine does not add to) and the Redis time of the calls
(``INFO commandstats``: wall time inside them, which includes waiting for a core on a loaded
machine); per rank read of random players through ``lb_ranks`` (chunks of 500, the gateways'
own-rank read, ``--reads`` a shape split over the rounds) the same two, in rounds as the writes
(every shape each round, the order rotating); and the memory per member of one window's board
with its companions (``MEMORY USAGE``). The ratios to ``default`` are the figures to read: of
each round's CPU time, their median.

``--baseline-library REF|PATH`` (a git ref of this repository, or a library file with this
tree's Python, as bench.drain takes it): the rank reads of each shape made by the baseline's code
and library too, on the same boards, alternating with this tree's (``--rounds`` pairs, B A B A
...): each side's library loaded in turn (``FUNCTION LOAD REPLACE``) and its reads made by its own
``Leaderboard.ranks`` in a process started in its tree; the medians and their ratio recorded.

Unless ``--no-write``, the figures are recorded in bench/results/boards.json.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

from bench import results
from bench.drain import baseline_error, code_tree, tree_library
from bench.redis_stats import main_thread_cpu, usec
from fleet.redis_server import RedisServer
from leaderboard import GameConfig, Leaderboard, boards, connect, now_ms
from leaderboard.library import library_code
from leaderboard.settings import argument_parser

CONFIG = GameConfig(game="bench", windows=("daily", "weekly", "alltime"))
WINDOWS = ("daily", "weekly", "alltime")
CHUNK = 500
# The default board again, its slips sent with an operator (``op``): lb_submit then plans and
# writes them by the general path (a lex board's slips take it, and any slip with an operator),
# not the common slip's pass (lua/common.lua), so the two paths' costs are read side by side.
GENERAL = "default_general"
SHAPES: dict[str, dict[str, Any] | None] = {
    "default": None,
    "two_keys": {"id": "two", "keys": [{"name": "level"}, {"name": "time", "direction": "asc"}]},
    GENERAL: None,
    "five_keys": {
        "id": "five",
        "keys": [{"name": f"k{i}", "direction": "desc" if i % 2 == 0 else "asc"} for i in range(5)],
    },
    "two_keys_packed": {
        "id": "twop",
        "keys": [
            {"name": "level", "min": 0, "max": 99},
            {"name": "time", "direction": "asc", "min": 0, "max": 1_000_000},
        ],
    },
    "five_keys_packed": {
        "id": "fivep",
        "keys": [{"name": f"k{i}", "direction": ("desc", "asc")[i % 2], "min": 0, "max": 39} for i in range(5)],
    },
}


def values_of(rnd: random.Random, definition: boards.Definition) -> tuple[int, ...]:
    """A random tuple: a bounded key anywhere in its bounds; an unbounded first key spreads widely,
    the others tie often (as levels do)."""
    return tuple(
        rnd.randint(k.min, k.max) if (k.min, k.max) != (boards.INT64_MIN, boards.INT64_MAX) else rnd.randrange(n)
        for k, n in zip(definition.keys, (1_000_000, 100, 100, 100, 100), strict=False)
    )


def fill(r: redis.Redis, definition: boards.Definition | None, members: int, now: int, seed: int) -> None:
    """``members`` players on each window's board, written as lb_submit would have left them."""
    rnd, keys = random.Random(seed), CONFIG.keys
    for name in WINDOWS:
        if definition is None:
            period = CONFIG.window_specs[WINDOWS.index(name)].period(now)
            scope = "global"
        else:
            period = boards.period(definition, name, now)
            scope = f"board:{definition.id}"
        at = (name, period.label, scope)
        board, holders, distinct = keys.board(*at), keys.members(*at), keys.points(*at)
        for start in range(0, members, 10_000):
            pipe = r.pipeline(transaction=False)
            scores: dict[str, float] = {}
            lex: dict[str, float] = {}
            owners: dict[str, str] = {}
            for i in range(start, min(start + 10_000, members)):
                ts = max(period.start_ms, now - rnd.randrange(60_000))
                player = f"p{i}"
                if definition is None:
                    scores[player] = period.pack(rnd.randrange(1_000_000), ts)
                    continue
                values = values_of(rnd, definition)
                if definition.encoding == boards.PACKED:
                    scores[player] = boards.pack(definition, name, values, ts, period.start_ms)
                    continue
                member = boards.encode_member(definition, values, ts, player)
                lex[member], owners[player] = 0, member
            if definition is None or scores:
                pipe.zadd(board, scores)
            else:
                pipe.zadd(board, lex)
                pipe.hset(holders, mapping=owners)  # type: ignore[arg-type]
                if definition.rank_mode == "dense":  # the distinct key parts: dense boards only
                    pipe.zadd(distinct, {m[: len(definition.keys) * boards.KEY_HEX]: 0 for m in lex})
            pipe.execute()


def memory_per_member(r: redis.Redis, definition: boards.Definition | None, members: int, now: int) -> float:
    keys = CONFIG.keys
    if definition is None:
        period = CONFIG.window_specs[WINDOWS.index("alltime")].period(now)
        at = ("alltime", period.label, "global")
        names = [keys.board(*at), keys.histogram(*at)]
    else:
        period = boards.period(definition, "alltime", now)
        at = ("alltime", period.label, f"board:{definition.id}")
        names = [keys.board(*at), keys.members(*at), keys.points(*at), keys.histogram(*at)]
    total = sum(int(r.memory_usage(name, samples=0) or 0) for name in names)
    return total / members


async def submit(
    url: str, definition: boards.Definition | None, args: Any, now: int, slips: int, round_: int, op: str = ""
) -> None:
    client = connect(url)
    # the general path's slips are others than the common ones' of the round (on the same board,
    # the same slips would find their values stored and write nothing)
    lb, rnd = Leaderboard(client, CONFIG), random.Random(args.seed + 1 + 1000 * round_ + 500 * bool(op))
    n = 0
    for _ in range(0, slips, CHUNK):
        entries = []
        for _ in range(CHUNK):
            n += 1
            # an id of its own per shape and round: one game's ids are applied once, on any board
            slip_id = f"{definition.id if definition else 'default'}{op}-{round_}-{n}"
            fields = {"id": slip_id, "player": f"p{rnd.randrange(args.members)}", "ts": str(now)}
            if definition is None:
                fields["points"] = str(rnd.randrange(1_000_000))
            else:
                fields["board"] = definition.id
                fields["values"] = ",".join(map(str, values_of(rnd, definition)))
            if op:
                fields["op"] = op
            entries.append(fields)
        results_ = await lb.submit_batch(entries, now=now, rows=False)
        bad = [x for x in results_ if x.status != "ok"]
        if bad:
            raise RuntimeError(f"not applied: {bad[0].status} {bad[0].code} {bad[0].message}")
    await client.aclose()


async def read(url: str, definition: boards.Definition | None, args: Any, now: int, reads: int, round_: int) -> None:
    client = connect(url)
    lb, rnd = Leaderboard(client, CONFIG), random.Random(args.seed + 2 + 1000 * round_)
    scope = "global" if definition is None else f"board:{definition.id}"
    for _ in range(0, reads, CHUNK):
        ranks = await lb.ranks([f"p{rnd.randrange(args.members)}" for _ in range(CHUNK)], "alltime", scope, at=now)
        assert all(s.rank is not None for s in ranks.standings)
    await client.aclose()


# The rank reads of one side, run in its tree (its leaderboard first on the path): what read() does.
READER = """
import asyncio, random, sys
from leaderboard import GameConfig, Leaderboard, connect

async def main(url, scope, members, reads, seed, now):
    client = connect(url)
    lb = Leaderboard(client, GameConfig(game="bench", windows=("daily", "weekly", "alltime")))
    rnd = random.Random(seed + 2)
    for _ in range(0, reads, 500):
        ranks = await lb.ranks([f"p{rnd.randrange(members)}" for _ in range(500)], "alltime", scope, at=now)
        assert all(s.rank is not None for s in ranks.standings)
    await client.aclose()

url, scope = sys.argv[1:3]
asyncio.run(main(url, scope, *map(int, sys.argv[3:])))
"""


def read_in(tree: Path, r: redis.Redis, url: str, definition: boards.Definition | None, args: Any, now: int) -> float:
    """Redis time per rank read of the code in ``tree``, its library loaded first."""
    r.function_load(library_code() if tree == results.ROOT else tree_library(tree), replace=True)
    r.config_resetstat()
    scope = "global" if definition is None else f"board:{definition.id}"
    argv = [url, scope, str(args.members), str(args.reads), str(args.seed), str(now)]
    subprocess.run([sys.executable, "-c", READER, *argv], cwd=tree, check=True)
    return float(usec(r).get("fcall_ro", (0, 0))[0] / args.reads)


def compare_reads(
    r: redis.Redis, url: str, definition: boards.Definition | None, args: Any, now: int, trees: dict[str, Path]
) -> dict[str, Any]:
    """Rank reads of the baseline and of this tree, alternating, on the same boards."""
    runs: dict[str, list[float]] = {"baseline": [], "this": []}
    for _ in range(args.rounds):
        for side in ("baseline", "this"):
            runs[side].append(read_in(trees[side], r, url, definition, args, now))
    r.function_load(library_code(), replace=True)
    base, this = statistics.median(runs["baseline"]), statistics.median(runs["this"])
    name = definition.id if definition else "default"
    print(f"{name:<10} rank read {base:6.2f} -> {this:6.2f} us ({this / base:.3f}x; rounds {runs})")
    return {
        "rank_read_runs": runs,
        "baseline_rank_read_us": base,
        "rank_read_us": this,
        "rank_read_vs_baseline": this / base,
    }


def definition_of(shape: str) -> boards.Definition | None:
    """A shape's definition as its board is created: packed where its keys fit (boards.created)."""
    raw = SHAPES[shape]
    return None if raw is None else boards.created(boards.parse({**raw, "windows": list(WINDOWS)}))


def write_round(r: redis.Redis, url: str, shape: str, args: Any, now: int, round_: int) -> tuple[float, float]:
    """One round's slips to ``shape``: (Redis main-thread CPU, Redis call time) per submission, µs."""
    slips = args.submissions // args.rounds // CHUNK * CHUNK
    r.config_resetstat()
    before = main_thread_cpu(r)
    asyncio.run(submit(url, definition_of(shape), args, now, slips, round_, "best" if shape == GENERAL else ""))
    cpu_us = (main_thread_cpu(r) - before) * 1e6 / slips
    return cpu_us, usec(r).get("fcall", (0, 0))[0] / slips


def read_round(r: redis.Redis, url: str, shape: str, args: Any, now: int, round_: int) -> tuple[float, float]:
    """One round's rank reads of ``shape``: (Redis main-thread CPU, Redis call time) per read, µs."""
    reads = args.reads // args.rounds // CHUNK * CHUNK
    r.config_resetstat()
    before = main_thread_cpu(r)
    asyncio.run(read(url, definition_of(shape), args, now, reads, round_))
    cpu_us = (main_thread_cpu(r) - before) * 1e6 / reads
    return cpu_us, usec(r).get("fcall_ro", (0, 0))[0] / reads


def in_rounds(r: redis.Redis, url: str, args: Any, now: int, one: Any, what: str) -> dict[str, dict[str, Any]]:
    """``one`` round (write_round or read_round) of every shape, round by round, the order
    rotating: each round's figures, their medians and the median of each round's CPU ratio to
    the default, named ``what`` (submission, rank_read)."""
    shapes = list(SHAPES)
    runs: dict[str, dict[str, list[float]]] = {s: {"cpu": [], "call": []} for s in shapes}
    for round_ in range(args.rounds):
        for shape in shapes[round_ % len(shapes) :] + shapes[: round_ % len(shapes)]:
            cpu_us, call_us = one(r, url, shape, args, now, round_)
            runs[shape]["cpu"].append(cpu_us)
            runs[shape]["call"].append(call_us)
    out: dict[str, dict[str, Any]] = {}
    for shape in shapes:
        ratios = [c / d for c, d in zip(runs[shape]["cpu"], runs["default"]["cpu"], strict=True)]
        out[shape] = {
            f"cpu_us_per_{what}": statistics.median(runs[shape]["cpu"]),
            f"fcall_us_per_{what}": statistics.median(runs[shape]["call"]),
            f"{what}_rounds": runs[shape],
            f"cpu_per_{what}_vs_default": statistics.median(ratios),
            f"cpu_{what}_vs_default_rounds": ratios,
        }
    return out


def measure(
    r: redis.Redis, url: str, shape: str, args: Any, now: int, trees: dict[str, Path] | None = None
) -> dict[str, Any]:
    """A filled shape's memory, and with ``trees`` its rank reads by both trees' code, alternating."""
    definition = definition_of(shape)
    memory = memory_per_member(r, definition, args.members, now)
    compared = {} if trees is None else compare_reads(r, url, definition, args, now, trees)
    encoding = "packed" if definition is None else definition.encoding
    return {"encoding": encoding, "bytes_per_member": memory, **compared}


def main(argv: list[str] | None = None) -> int:
    p = argument_parser("python -m bench.boards", __doc__ or "")
    p.add_argument("--members", type=int, default=1_000_000, help="members per window's board")
    p.add_argument("--submissions", type=int, default=20_000, help="slips through lb_submit per shape")
    p.add_argument("--reads", type=int, default=50_000, help="rank reads per shape")
    p.add_argument("--seed", type=int, default=1, help="seed of the generated boards and workload")
    p.add_argument("--baseline-library", metavar="REF|PATH", help="rank reads by this code too, alternating")
    p.add_argument(
        "--rounds", type=int, default=5, help="rounds of writes and rank reads (every shape each), and of a baseline's"
    )
    results.add_no_write(p)
    args = p.parse_args(argv)
    if args.rounds < 1 or min(args.members, args.submissions // args.rounds, args.reads // args.rounds) < CHUNK:
        p.error(f"--members, and --reads and --submissions per round (of --rounds), must be at least {CHUNK}")
    if error := baseline_error(args.baseline_library):
        p.error(f"--baseline-library: {error}")
    print(f"{args.members:,} members per board, three windows; {args.submissions:,} slips, {args.reads:,} rank reads")
    with tempfile.TemporaryDirectory(prefix="boards-bench-") as scratch, RedisServer(scratch) as server:
        trees = None
        if args.baseline_library:
            (Path(scratch) / "baseline").mkdir()
            baseline = code_tree(args.baseline_library, Path(scratch) / "baseline")
            trees = {"baseline": baseline, "this": results.ROOT}
        # a lex member's player part is not UTF-8: written as connect()'s clients write it; no socket
        # timeout: filling millions of members outlasts redis-py's 5 s on a loaded machine
        r = redis.Redis.from_url(server.url, encoding_errors="surrogateescape", socket_timeout=None)
        r.function_load(library_code(), replace=True)
        now = now_ms()
        for shape in (s for s in SHAPES if s != GENERAL):  # the default's board is the general path's too
            definition = definition_of(shape)
            if definition is not None:
                asyncio.run(Leaderboard(connect(server.url), CONFIG).create_board(definition))
            started = time.perf_counter()
            fill(r, definition, args.members, now, args.seed)
            print(f"{shape:<10} filled in {time.perf_counter() - started:.0f} s")
        writes = in_rounds(r, server.url, args, now, write_round, "submission")
        reads = in_rounds(r, server.url, args, now, read_round, "rank_read")
        figures: dict[str, Any] = {
            shape: {**writes[shape], **reads[shape], **measure(r, server.url, shape, args, now, trees)}
            for shape in SHAPES
        }
        figures["baseline_library"] = args.baseline_library
        r.close()
    base = figures["default"]
    for shape in SHAPES:
        f = figures[shape]
        writes_ = ", ".join(f"{x:.2f}" for x in f["cpu_submission_vs_default_rounds"])
        reads_ = ", ".join(f"{x:.2f}" for x in f["cpu_rank_read_vs_default_rounds"])
        print(
            f"{shape:<16} {f['encoding']:<6} {f['cpu_us_per_submission']:6.1f} us CPU/submission "
            f"({f['cpu_per_submission_vs_default']:.2f}x; rounds {writes_})  {f['cpu_us_per_rank_read']:5.2f} us "
            f"CPU/rank read ({f['cpu_per_rank_read_vs_default']:.2f}x; rounds {reads_})  "
            f"{f['bytes_per_member']:6.1f} bytes/member"
        )
    for shape in (s for s in SHAPES if s != "default"):
        for name in ("fcall_us_per_submission", "fcall_us_per_rank_read", "bytes_per_member"):
            figures[shape][f"{name}_vs_default"] = figures[shape][name] / base[name]
    figures["members"], figures["submissions"], figures["reads"] = args.members, args.submissions, args.reads
    results.save("boards", figures, args, module="bench.boards", argv=argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
