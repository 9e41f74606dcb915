"""The floor of a board write in Redis alone: ``python -m bench.lex_floor``.

What one entry's write costs Redis's main thread (``INFO cpu``) on a sorted set of ``--members``
entries, without the function library: a packed board's ``ZADD`` of a new score for a member, and
a lex board's ``ZREM`` of the member written before, ``ZADD`` of the new one and ``HSET`` of its
player -> member hash (two keys, then
the time and the player part, as lb_submit writes them: docs/data-model.md, "Encodings") with the
member as text (16 hex digits per key, today's) and as bytes (8 per key, big-endian: a compact
member). Batches of 500 entries per call, as lb_submit's held writes flush them. It bounds what a
compact member can save of a lex write: the rest of a lex write's cost over a packed one is the
library's own work (bench.boards gives the whole).

Then the rank reads' floor on the same boards, the commands lb_ranks makes for 500 players at a
time (as the gateways ask; every rank exact): a packed board's ``ZSCORE`` and ``ZREVRANK`` of
each player, pipelined; a lex board's ``HMGET`` of their members, then a ``ZRANK`` of each.

Unless ``--no-write``, the figures are recorded in bench/results/lex_floor.json.
"""

from __future__ import annotations

import random
import statistics
import sys
import tempfile
from collections.abc import Callable
from typing import cast

import redis

from bench import results
from bench.redis_stats import main_thread_cpu
from fleet.redis_server import RedisServer
from leaderboard.settings import argument_parser

BATCH = 500
TS = 1_764_000_000_000
Member = Callable[[int, int, int], bytes]


def player_part(player: int) -> bytes:
    return bytes(255 - b for b in f"p{player}".encode()) + b"\xff"


def text_member(player: int, first: int, second: int) -> bytes:
    return f"{first ^ (1 << 64) - 1:016x}{second:016x}{TS:012x}".encode() + player_part(player)


def byte_member(player: int, first: int, second: int) -> bytes:
    head = (first ^ (1 << 64) - 1).to_bytes(8, "big") + second.to_bytes(8, "big") + TS.to_bytes(6, "big")
    return head + player_part(player)


def values(rnd: random.Random) -> tuple[int, int]:
    """Two keys as a lex member holds them (sign bit flipped): a wide first key, a tied second."""
    return rnd.randrange(1 << 40) + (1 << 63), rnd.randrange(100) + (1 << 63)


def lex_write(r: redis.Redis, key: str, member: Member, members: int, writes: int, rnd: random.Random) -> float:
    held = {}
    for start in range(0, members, 10_000):
        batch = {}
        for p in range(start, min(start + 10_000, members)):
            held[p] = member(p, *values(rnd))
            batch[held[p]] = 0
        r.zadd(key, batch)
        r.hset(key + ":members", mapping={str(p): held[p] for p in range(start, min(start + 10_000, members))})
    before = main_thread_cpu(r)
    for _ in range(writes // BATCH):
        players = rnd.sample(range(members), BATCH)
        old = [held[p] for p in players]
        for p in players:
            held[p] = member(p, *values(rnd))
        r.zrem(key, *old)
        r.zadd(key, {held[p]: 0 for p in players})
        r.hset(key + ":members", mapping={str(p): held[p] for p in players})
    return (main_thread_cpu(r) - before) * 1e6 / writes


def packed_write(r: redis.Redis, key: str, members: int, writes: int, rnd: random.Random) -> float:
    for start in range(0, members, 10_000):
        r.zadd(key, {f"p{p}": rnd.randrange(1 << 40) for p in range(start, min(start + 10_000, members))})
    before = main_thread_cpu(r)
    for _ in range(writes // BATCH):
        r.zadd(key, {f"p{p}": rnd.randrange(1 << 40) for p in rnd.sample(range(members), BATCH)})
    return (main_thread_cpu(r) - before) * 1e6 / writes


def packed_read(r: redis.Redis, key: str, members: int, reads: int, rnd: random.Random) -> float:
    before = main_thread_cpu(r)
    for _ in range(reads // BATCH):
        pipe = r.pipeline(transaction=False)
        for p in rnd.sample(range(members), BATCH):
            pipe.zscore(key, f"p{p}")
            pipe.zrevrank(key, f"p{p}")
        pipe.execute()
    return (main_thread_cpu(r) - before) * 1e6 / reads


def lex_read(r: redis.Redis, key: str, members: int, reads: int, rnd: random.Random) -> float:
    before = main_thread_cpu(r)
    for _ in range(reads // BATCH):
        held = cast(list[bytes], r.hmget(key + ":members", [str(p) for p in rnd.sample(range(members), BATCH)]))
        pipe = r.pipeline(transaction=False)
        for member in held:
            pipe.zrank(key, member)
        pipe.execute()
    return (main_thread_cpu(r) - before) * 1e6 / reads


def main(argv: list[str] | None = None) -> int:
    p = argument_parser("python -m bench.lex_floor", __doc__ or "")
    p.add_argument("--members", type=int, default=200_000, help="entries on the board")
    p.add_argument("--writes", type=int, default=100_000, help="entries written per shape and round")
    p.add_argument("--reads", type=int, default=100_000, help="players' ranks read per shape and round")
    p.add_argument("--rounds", type=int, default=3, help="rounds of the three shapes, written then read")
    p.add_argument("--seed", type=int, default=1)
    results.add_no_write(p)
    args = p.parse_args(argv)
    if min(args.members, args.writes, args.reads) < BATCH or args.rounds < 1:
        p.error(f"--members, --writes and --reads must be at least {BATCH} (a batch), --rounds at least 1")
    runs: dict[str, list[float]] = {
        shape: [] for shape in ("packed", "lex_text", "lex_bytes", "packed_rank", "lex_text_rank", "lex_bytes_rank")
    }
    with tempfile.TemporaryDirectory(prefix="lex-floor-") as scratch, RedisServer(scratch) as server:
        r = redis.Redis.from_url(server.url, socket_timeout=None)
        for round_ in range(args.rounds):
            rnd = random.Random(args.seed + round_)
            r.flushall()
            runs["packed"].append(packed_write(r, "packed", args.members, args.writes, rnd))
            runs["lex_text"].append(lex_write(r, "text", text_member, args.members, args.writes, rnd))
            runs["lex_bytes"].append(lex_write(r, "bytes", byte_member, args.members, args.writes, rnd))
            runs["packed_rank"].append(packed_read(r, "packed", args.members, args.reads, rnd))
            runs["lex_text_rank"].append(lex_read(r, "text", args.members, args.reads, rnd))
            runs["lex_bytes_rank"].append(lex_read(r, "bytes", args.members, args.reads, rnd))
        r.close()
    figures: dict[str, object] = {
        "members": args.members,
        "writes": args.writes,
        "reads": args.reads,
        "runs_us_per_entry": runs,
    }
    for shape, run in runs.items():
        reads = shape.endswith("_rank")
        base = statistics.median(runs["packed_rank" if reads else "packed"])
        median = statistics.median(run)
        figures[shape] = {"us_per_entry": median, "vs_packed": median / base}
        rounds = ", ".join(f"{x:.2f}" for x in run)
        what = "rank read" if reads else "entry written"
        print(f"{shape:<14} {median:6.2f} us of Redis CPU per {what} ({median / base:.2f}x; rounds {rounds})")
    results.save("lex_floor", figures, args, module="bench.lex_floor", argv=argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
