"""Past periods, close events and tournaments on 1,000,000-member boards:
``python -m bench.windows`` (about a minute, most of it filling the boards).

Against a private redis-server it starts and stops itself, with three boards of 1M members each
(this week's and last week's weekly board, a tournament's board with 1M entrants), filled with
ZADD pipelines of packed scores:

a) reads: ``rank``, ``top`` (10) and ``around`` (k=5) of last week (``period="previous"``) against
   the same reads of this week, through the ``Leaderboard`` wrappers, one at a time, in
   alternating blocks (A/B/A/B);
b) close: ``lb_close`` of last week (the top 100 into the event, the finals list, the marker),
   its marker removed before each call so every call does the full work, against a plain top-100
   read (``lb_top``) of the same board, alternating;
c) submissions: ``lb_submit`` batches of 500 slips of random entrants into the tournament
   (one board plus the entry check) against the same batches into a weekly-only game (one
   board), alternating; submissions per second of Redis + encoding time.

Figures are ratios within this run; the command prints a Markdown table and, unless
``--no-write``, records them in bench/results/windows.json.
"""

from __future__ import annotations

import argparse
import asyncio
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
from leaderboard import GameConfig, Leaderboard, RedisClient, connect, now_ms
from leaderboard.settings import argument_parser
from leaderboard.windows import Period

FILL_CHUNK = 10_000
BATCH = 500


def player(i: int) -> str:
    return f"p{i:07d}"


async def fill(r: RedisClient, key: str, period: Period, members: int, rnd: random.Random) -> None:
    span = period.end_ms - period.start_ms
    for lo in range(0, members, FILL_CHUNK * 10):
        async with r.pipeline(transaction=False) as pipe:
            for start in range(lo, min(members, lo + FILL_CHUNK * 10), FILL_CHUNK):
                mapping = {
                    player(i): period.pack(rnd.randrange(1_000_000), period.start_ms + rnd.randrange(span))
                    for i in range(start, min(members, start + FILL_CHUNK))
                }
                pipe.zadd(key, mapping)
            await pipe.execute()


async def timed(call: Callable[[], Awaitable[Any]], n: int) -> float:
    """Microseconds per call, ``n`` calls one after another."""
    start = time.perf_counter()
    for _ in range(n):
        await call()
    return (time.perf_counter() - start) / n * 1e6


async def ab(
    a: Callable[[], Awaitable[Any]], b: Callable[[], Awaitable[Any]], n: int, rounds: int
) -> tuple[float, float]:
    """Median µs per call of a and of b, measured in alternating blocks."""
    xs, ys = [], []
    for _ in range(rounds):
        xs.append(await timed(a, n))
        ys.append(await timed(b, n))
    return statistics.median(xs), statistics.median(ys)


async def run(args: argparse.Namespace, figures: dict[str, Any]) -> list[str]:
    members, rnd = args.members, random.Random(7)
    rows: list[str] = []
    with tempfile.TemporaryDirectory() as tmp, RedisServer(Path(tmp)) as server:
        r = connect(server.url)
        weekly_game = GameConfig(game="bench", windows=("weekly",))
        lb = Leaderboard(r, weekly_game)
        await lb.load()
        now = now_ms()
        spec = weekly_game.window_specs[0]
        this, last = spec.period(now), spec.period(spec.period(now).start_ms - 1)
        tournament = await lb.create_tournament("bench", now - 3_600_000, now + 86_400_000)
        cup = tournament.period(now)
        print(f"filling 3 boards of {members:,} members ...", file=sys.stderr)
        t0 = time.perf_counter()
        for period in (this, last, cup):
            await fill(r, weekly_game.keys.board(period.window.name, period.label, "global"), period, members, rnd)
        await lb.join("bench", [player(i) for i in range(members)])
        print(f"filled in {time.perf_counter() - t0:.0f} s", file=sys.stderr)

        def someone() -> str:
            return player(rnd.randrange(members))

        n, rounds = args.reads, args.rounds
        print("reads ...", file=sys.stderr)
        prev = "previous"
        for name, past, current in (
            ("rank", lambda: lb.rank(someone(), "weekly", period=prev), lambda: lb.rank(someone(), "weekly")),
            ("top 10", lambda: lb.top("weekly", period=prev), lambda: lb.top("weekly")),
            ("around k=5", lambda: lb.around(someone(), "weekly", period=prev), lambda: lb.around(someone(), "weekly")),
        ):
            p_us, c_us = await ab(past, current, n, rounds)
            figures[f"read {name}"] = {"last_week_us": p_us, "this_week_us": c_us}
            rows.append(
                f"| read {name}: last week vs this week | {p_us:,.0f} µs | {c_us:,.0f} µs | {p_us / c_us:.2f} |"
            )

        print("close ...", file=sys.stderr)
        marker = weekly_game.keys.closed_marker("weekly", last.label)

        async def close() -> None:
            await r.delete(marker)
            assert await lb.close(last, ["global"], top_n=100, keep=10, maxlen=10_000) is not None

        c_us, t_us = await ab(close, lambda: lb.top("weekly", n=100, period="previous"), args.closes, rounds)
        what = "close event (top 100 of 1 board) vs a top-100 read"
        figures["close"] = {"close_us": c_us, "top_100_read_us": t_us}
        rows.append(f"| {what} | {c_us:,.0f} µs | {t_us:,.0f} µs | {c_us / t_us:.2f} |")

        print("submissions ...", file=sys.stderr)
        serial = [0]

        def batch(tournament_id: str | None) -> list[dict[str, str]]:
            out = []
            for _ in range(BATCH):
                serial[0] += 1
                fields = {
                    "id": f"s{serial[0]}",
                    "player": someone(),
                    "points": str(rnd.randrange(1_000_000)),
                    "ts": str(now_ms()),
                }
                if tournament_id:
                    fields["tournament"] = tournament_id
                out.append(fields)
            return out

        async def submit(tournament_id: str | None) -> None:
            applied = await lb.submit_batch(batch(tournament_id), rows=False)
            assert all(x.status == "ok" for x in applied), applied[0]

        t_us, w_us = await ab(lambda: submit("bench"), lambda: submit(None), args.batches, rounds)
        figures["submissions_per_s"] = {"tournament": BATCH / t_us * 1e6, "weekly_only": BATCH / w_us * 1e6}
        rows.append(
            f"| submissions, batches of {BATCH}: tournament vs weekly-only game | {BATCH / t_us * 1e6:,.0f}/s "
            f"| {BATCH / w_us * 1e6:,.0f}/s | {w_us / t_us:.2f} (throughput) |"
        )
        await r.aclose()
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argument_parser("python -m bench.windows", __doc__ or "")
    p.add_argument("--members", type=int, default=1_000_000, help="members per board")
    p.add_argument("--reads", type=int, default=2000, help="reads per block")
    p.add_argument("--closes", type=int, default=50, help="close calls per block")
    p.add_argument("--batches", type=int, default=20, help="submission batches per block")
    p.add_argument("--rounds", type=int, default=4, help="alternating A/B blocks")
    results.add_no_write(p)
    args = p.parse_args(argv)
    figures: dict[str, Any] = {"members": args.members}
    rows = asyncio.run(run(args, figures))
    print(f"| what ({args.members:,}-member boards) | A | B | A / B |")
    print("|---|---|---|---|")
    print("\n".join(rows))
    results.save("windows", figures, args, module="bench.windows", argv=argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
