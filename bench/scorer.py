"""Scorer benchmark: ``python -m bench.scorer`` (about a minute and a half).

In one run, against a private redis-server it starts and stops itself:

a) sustained: a real scorer replica (``python -m scorer``, a child process) consumes a queue kept
   full by ``--producers`` submit calls in flight (``Queue.submit_many`` of submissions generated
   beforehand, as the baseline's are; one producer waiting for each reply could not keep a fast
   scorer's queue full); throughput = entries applied and acknowledged per second, with three
   windows and ~10% replayed ids (dedupe);
b) baseline: the same kind of submissions applied one FCALL per submission, one at a time
   (``lb.submit_batch([one])`` in sequence) — the seed lesson's path;
c) publish lag: while the producer offers a steady load, probe submissions that enter the top 10
   are timed from the moment the queue accepted them to the moment a subscriber receives the
   weekly snapshot containing them.

``--baseline REF``: (a) again, alternating (``--rounds`` pairs), with the scorer of a git ref (its
packages and function library, exported to a temporary directory: the library it loads replaces
this tree's, so the queue's ``lb_enqueue`` is the ref's too) and with this tree's, each on a game of
its own; the producer stays this tree's Python, writing the entries the ref's scorer reads (fields
by name for a release before slip entries). Prints both side by side: the same load, one run.

``--durable`` measures instead the cost of the durable score log (bench/scorer_durable.py): (a)
repeated without the log, with SQLite and with PostgreSQL, alternating, ``--rounds`` times, and
prints the ratios; with ``--baseline REF``, the ref's scorer's three runs too, in the same rounds.

Unless ``--no-write``, the figures are recorded in bench/results/scorer.json (scorer-durable.json
with ``--durable``), which ``python -m bench.plots`` draws.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

import orjson

from bench import results
from bench.drain import baseline_error, code_tree
from bench.scorer_durable import Side, durable_cost, report
from bench.scorer_sustained import BACKLOG_MAX, Figures, Source, produce, scorer_env, sustained
from fleet.redis_server import RedisServer
from leaderboard import GameConfig, Leaderboard, RedisClient, Submission, connect, now_ms
from leaderboard.queue import Queue
from leaderboard.settings import argument_parser


async def baseline(r: RedisClient, seconds: float) -> float:
    lb = Leaderboard(r, GameConfig(game="base"))
    source = Source("b-")
    subs = [s.fields() for s in source.take(200_000)]
    done = 0
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        for fields in subs[done : done + 100]:
            await lb.submit_batch([fields])
        done += 100
    return done / (time.perf_counter() - started)


async def publish_lag(url: str, r: RedisClient, rate: float, seconds: float, fig: Figures) -> None:
    config = GameConfig(game="lag")
    queue = Queue(r, config, backlog_max=BACKLOG_MAX)
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "scorer", env=scorer_env(url, "lag"))
    pubsub = r.pubsub()
    await pubsub.ssubscribe(config.keys.snapshot_channel("weekly", "global"))
    accepted: dict[str, float] = {}
    lags: list[float] = []

    async def listen() -> None:
        while True:
            msg = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
            if msg is None:
                continue
            seen = time.perf_counter()
            for entry in orjson.loads(msg["data"])["entries"]:
                at = accepted.pop(entry["player"], None)
                if at is not None:
                    lags.append(seen - at)

    async def probe() -> None:
        i = 0
        while True:
            # Five probes per 1 s tick: with ten, a tick that came late found eleven or more new
            # probes and pushed the oldest out of the top 10 unseen (counted as infinite lag).
            await asyncio.sleep(0.2)
            i += 1
            # each probe beats everything before it, so it is in the top 10 at once
            sub = Submission(f"probe-{i}", f"probe{i}", 100_000_000 + i, now_ms())
            # timed from just before the submit call: the snapshot may be read before the reply
            accepted[sub.player] = time.perf_counter()
            await queue.submit(sub)

    stop = asyncio.Event()
    counter = [0]
    tasks = [asyncio.create_task(listen())]
    producer = asyncio.create_task(produce(queue, Source("l-"), stop, rate, counter))
    try:
        await asyncio.sleep(2.0)  # the replica is up and the load steady before probing
        started, count0 = time.perf_counter(), counter[0]
        tasks.append(asyncio.create_task(probe()))
        await asyncio.sleep(seconds)
        fig.lag_rate = (counter[0] - count0) / (time.perf_counter() - started)
        tasks[1].cancel()
        await asyncio.sleep(5.0)  # the last probes' snapshots
        # a probe never seen counts as an infinite lag: leaving it out would flatter the p99
        lags = sorted(lags) + [float("inf")] * len(accepted)
        fig.lag_samples = len(lags)
        fig.lag_missing = len(accepted)
        if lags:
            fig.lag_p50 = statistics.median(lags)
            fig.lag_p99 = lags[min(len(lags) - 1, int(len(lags) * 0.99))]
            fig.lag_max = lags[-1]
    finally:
        stop.set()
        await producer
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await pubsub.aclose()
        proc.terminate()
        await asyncio.wait_for(proc.wait(), 15)


def table(fig: Figures) -> list[str]:
    ratio = fig.sustained / fig.baseline if fig.baseline else 0.0

    def per(cores: float) -> float:  # µs of CPU per submission applied
        return cores / fig.sustained * 1e6 if fig.sustained else 0.0

    by_command = ", ".join(
        f"{name.upper()} {us:.2f} µs ({calls:.3g} calls)" for name, (us, calls) in fig.commands.items() if us >= 0.05
    )
    return [
        "| measure | figure | target |",
        "|---|---|---|",
        f"| (a) sustained, stream → one FCALL per batch → ack (3 windows, ~10% replayed ids) "
        f"| **{fig.sustained:,.0f} /s** (producer offered {fig.offered_sustained:,.0f} /s; "
        f"backlog at the end {fig.backlog_end:,}) | ≥ 20,000 /s |",
        f"| (a) cores used: Redis, scorer, producer (Redis waited for a core {fig.redis_waited:.0%} of the time) "
        f"| {fig.cores_redis:.2f}, {fig.cores_scorer:.2f}, {fig.cores_producer:.2f} | |",
        f"| (a) CPU per submission: Redis, scorer, producer | {per(fig.cores_redis):.1f}, {per(fig.cores_scorer):.1f}, "
        f"{per(fig.cores_producer):.1f} µs | |",
        "| (a) Redis time per submission by command (INFO commandstats; FCALL holds lb_enqueue's and lb_submit's "
        f"calls, counted again on their own) | {by_command} | |",
        f"| (b) baseline, one FCALL per submission, one at a time | {fig.baseline:,.0f} /s | |",
        f"| (a) / (b) | **{ratio:.1f}×** | ≥ 8× |",
        f"| (c) publish lag, accepted → snapshot received, at {fig.lag_rate:,.0f} /s offered "
        f"({fig.lag_samples} probes, {fig.lag_missing} never seen) "
        f"| p50 {fig.lag_p50 * 1000:.0f} ms, **p99 {fig.lag_p99 * 1000:.0f} ms**, "
        f"max {fig.lag_max * 1000:.0f} ms | p99 ≤ 1,500 ms |",
    ]


async def run(args: argparse.Namespace) -> Figures:
    fig = Figures()
    with tempfile.TemporaryDirectory() as tmp, RedisServer(Path(tmp)) as server:
        r = connect(server.url)
        await Leaderboard(r, GameConfig(game="bench")).load()
        print("baseline ...", file=sys.stderr)
        fig.baseline = await baseline(r, args.baseline_s)
        print("sustained ...", file=sys.stderr)
        await sustained(
            server.url, r, args.warmup_s, args.sustained_s, fig, live=args.live_producer, producers=args.producers
        )
        rate = args.lag_rate or round(min(10_000.0, 0.75 * fig.sustained), -2)
        print(f"publish lag at {rate:,.0f}/s ...", file=sys.stderr)
        await publish_lag(server.url, r, rate, args.lag_s, fig)
        await r.aclose()
    return fig


async def against_baseline(args: argparse.Namespace, tree: Path) -> dict[str, list[Figures]]:
    """(a) with the scorer of ``tree`` and with this tree's, alternating, in one run."""
    runs: dict[str, list[Figures]] = {"baseline": [], "this": []}
    with tempfile.TemporaryDirectory() as tmp, RedisServer(Path(tmp)) as server:
        r = connect(server.url)
        for round_ in range(args.rounds):
            for side, cwd in (("baseline", tree), ("this", None)):
                fig = Figures()
                await Leaderboard(r, GameConfig(game="bench")).load()  # the queue's before the scorer's start
                await sustained(server.url, r, args.warmup_s, args.sustained_s, fig, game=f"{side}{round_}", tree=cwd)
                runs[side].append(fig)
                print(f"round {round_ + 1} {side}: {fig.sustained:,.0f} /s", file=sys.stderr)
        await r.aclose()
    return runs


def baseline_table(ref: str, runs: dict[str, list[Figures]]) -> list[str]:
    def per(fig: Figures) -> str:  # µs of CPU per submission applied: Redis, scorer, producer
        cores = (fig.cores_redis, fig.cores_scorer, fig.cores_producer)
        return ", ".join(f"{c / fig.sustained * 1e6:.1f}" for c in cores) if fig.sustained else "-"

    def commands(fig: Figures) -> str:
        return ", ".join(f"{name.upper()} {us:.2f}" for name, (us, _) in fig.commands.items() if us >= 0.3)

    lines = [
        "| code | round | sustained /s | CPU per submission: Redis, scorer, producer (µs) "
        "| Redis waited | Redis time per submission by command (µs) |",
        "|---|---|---|---|---|---|",
    ]
    for side, label in (("baseline", ref), ("this", "this tree")):
        for i, fig in enumerate(runs[side]):
            lines.append(
                f"| {label} | {i + 1} | {fig.sustained:,.0f} | {per(fig)} | {fig.redis_waited:.0%} | {commands(fig)} |"
            )
    ratios = [t.sustained / b.sustained for b, t in zip(runs["baseline"], runs["this"], strict=True) if b.sustained]
    lines.append(f"this tree / {ref}, each round: " + ", ".join(f"{x:.2f}×" for x in ratios))
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argument_parser("python -m bench.scorer", __doc__ or "")
    p.add_argument("--baseline-s", type=float, default=8.0, help="seconds of the one-call-per-submission baseline")
    p.add_argument("--warmup-s", type=float, default=3.0, help="seconds of load before the sustained measurement")
    p.add_argument("--sustained-s", type=float, default=15.0, help="seconds of the sustained measurement")
    p.add_argument("--lag-s", type=float, default=12.0, help="seconds of the publish-lag probe")
    p.add_argument("--lag-rate", type=float, default=None, help="offered load while probing (default 10k/s)")
    p.add_argument(
        "--live-producer",
        action="store_true",
        help="generate the sustained run's submissions while measuring (on the same cores)",
    )
    p.add_argument("--producers", type=int, default=2, help="submit calls in flight while measuring (a) (game servers)")
    results.add_no_write(p)
    p.add_argument("--durable", action="store_true", help="measure (a) without and with the durable log instead")
    p.add_argument(
        "--row-cost",
        type=int,
        default=200_000,
        metavar="N",
        help="--durable: then each log's CPU per row, recording N submissions outside the scorer (0: not)",
    )
    p.add_argument(
        "--baseline",
        metavar="REF",
        help="(a), or --durable's runs, alternating with the scorer and library of a git ref",
    )
    p.add_argument(
        "--rounds", type=int, default=2, help="--durable: rounds of (none, SQLite, PostgreSQL); --baseline: pairs"
    )
    args = p.parse_args(argv)
    if args.producers < 1:
        p.error("--producers must be at least 1")
    if error := baseline_error(args.baseline):
        p.error(f"--baseline: {error}")
    if args.durable:
        with tempfile.TemporaryDirectory(prefix="scorer-baseline-") as scratch:
            sides = [Side("this tree")]
            if args.baseline:
                sides.insert(0, Side(args.baseline, code_tree(args.baseline, Path(scratch))))
            asyncio.run(durable_cost(args, sides))
        print("\n".join(report(sides)))
        figures = {
            **sides[-1].figures(),
            **({"baseline_ref": args.baseline, "baseline": sides[0].figures()} if args.baseline else {}),
        }
        results.save("scorer-durable", figures, args, module="bench.scorer", argv=argv)
        return 0
    if args.baseline:
        with tempfile.TemporaryDirectory(prefix="scorer-baseline-") as scratch:
            by_side = asyncio.run(against_baseline(args, code_tree(args.baseline, Path(scratch))))
        print("\n".join(baseline_table(args.baseline, by_side)))
        figures = {"baseline_ref": args.baseline, **{k: [asdict(f) for f in v] for k, v in by_side.items()}}
        results.save("scorer-baseline", figures, args, module="bench.scorer", argv=argv)
        return 0
    fig = asyncio.run(run(args))
    print("\n".join(table(fig)))
    figures = {**asdict(fig), "ratio": fig.sustained / fig.baseline if fig.baseline else 0.0}
    results.save("scorer", figures, args, module="bench.scorer", argv=argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
