"""``python -m bench.scorer --durable``: what the durable score log costs the scorer's sustained
throughput (measurement (a): bench/scorer_sustained.py), run without the log, with SQLite (a file in a
temporary directory) and with PostgreSQL (a private server, fsync on), alternating, ``--rounds``
times; each round's runs against the run without the log just before them.

With ``--baseline REF`` each round also runs the three with the scorer of a git ref (its
packages and function library, as ``bench.scorer --baseline`` runs them), alternating with this
tree's, on games and SQLite files of their own: the log's cost before and after a change, on the
same machine at the same time.

Besides throughput, each run's CPU per submission applied, by process (Redis, the scorer with
SQLite's thread, the producer, PostgreSQL's server and backends): what the log adds per row,
which a machine busy with other work changes far less than it changes the throughput.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.scorer_sustained import Figures, Source, sustained, tree_cpu_s
from fleet.redis_server import RedisServer
from leaderboard import GameConfig, Leaderboard, connect

KINDS = ("off", "sqlite", "postgres")
LABELS = {"off": "none", "sqlite": "SQLite (WAL, synchronous=NORMAL)", "postgres": "PostgreSQL 15 (fsync on)"}
PROCESSES = ("Redis", "scorer", "producer", "PostgreSQL")


@dataclass
class Side:
    """One tree's runs: per kind of log, each round's sustained rate and the cores each process
    used (Redis, scorer, producer, PostgreSQL)."""

    label: str
    tree: Path | None = None  # None: this tree
    sustained: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in KINDS})
    cores: dict[str, list[list[float]]] = field(default_factory=lambda: {k: [] for k in KINDS})
    rows: dict[str, dict[str, float]] = field(default_factory=dict)  # kind -> row_cost's figures

    def figures(self) -> dict[str, object]:
        return {"sustained_per_s": self.sustained, "cores": self.cores, "per_row": self.rows}


async def durable_cost(args: argparse.Namespace, sides: list[Side]) -> None:
    """Every side's three runs, round after round, alternating sides within a round."""
    from fleet.postgres_server import PostgresServer

    with (
        tempfile.TemporaryDirectory() as tmp,
        RedisServer(Path(tmp)) as server,
        PostgresServer(durable=True) as pg,
    ):
        r = connect(server.url)
        for round_ in range(args.rounds):
            for n, side in enumerate(sides):
                # the queue's functions before the side's scorer starts (it loads its own library)
                await Leaderboard(r, GameConfig(game="bench")).load()
                urls = {"off": "", "sqlite": f"sqlite:///{tmp}/scores-{n}.db", "postgres": pg.url}
                for kind, url in urls.items():
                    fig = Figures()
                    game = f"d{round_}{kind[:2]}{n}"  # fresh boards each run, the same shape of work
                    database = pg.process.pid if kind == "postgres" and pg.process else None
                    await sustained(
                        server.url,
                        r,
                        args.warmup_s,
                        args.sustained_s,
                        fig,
                        game=game,
                        env={"LB_DURABLE_URL": url},
                        tree=side.tree,
                        database=database,
                    )
                    side.sustained[kind].append(fig.sustained)
                    used = [fig.cores_redis, fig.cores_scorer, fig.cores_producer, fig.cores_database]
                    side.cores[kind].append([round(c, 3) for c in used])
                    done = f"round {round_ + 1} {side.label} {kind}: {fig.sustained:,.0f} /s"
                    print(f"{done}, cores {side.cores[kind][-1]}", file=sys.stderr)
        await r.aclose()
        if args.row_cost:
            for kind, url in (("sqlite", f"sqlite:///{tmp}/rows.db"), ("postgres", pg.url)):
                for n, side in enumerate(sides):
                    database = pg.process.pid if kind == "postgres" and pg.process else None
                    side.rows[kind] = row_cost(side.tree, url, f"rows{n}", args.row_cost, database)
                    print(f"{side.label} {kind} per row: {side.rows[kind]}", file=sys.stderr)


def durable_table(side: Side) -> list[str]:
    by_kind = side.sustained
    off = statistics.mean(by_kind["off"])
    # each round against the run without the log just before it: the machine's drift between
    # rounds is then not counted as the log's cost (the target holds only if it holds each round)
    lines = [
        f"{side.label}:",
        "",
        "| durable log | sustained /s, each run | mean | vs no log | each round vs its run without |",
        "|---|---|---|---|---|",
    ]
    for kind, label in LABELS.items():
        runs = by_kind[kind]
        mean = statistics.mean(runs)
        cost = "" if kind == "off" else f"**{mean / off - 1:+.0%}**"
        each = (f"{x / o - 1:+.0%}" for x, o in zip(runs, by_kind["off"], strict=True))
        rounds = "" if kind == "off" else ", ".join(each)
        lines.append(f"| {label} | {', '.join(f'{x:,.0f}' for x in runs)} | {mean:,.0f} | {cost} | {rounds} |")
    return lines


def cores_table(side: Side) -> list[str]:
    """Where the cores went (means of the rounds), and the CPU per submission applied that
    makes them: Redis, the scorer (SQLite's thread included), the producer (this process) and
    PostgreSQL's server."""
    lines = [
        "| durable log | cores: "
        + " | ".join(PROCESSES)
        + " | total | CPU per submission (µs): "
        + " | ".join(PROCESSES)
        + " | total |",
        "|---|" + "---|" * (2 * len(PROCESSES) + 2),
    ]
    for kind, label in (("off", "none"), ("sqlite", "SQLite"), ("postgres", "PostgreSQL")):
        runs = side.cores[kind]
        mean = [statistics.mean(run[i] for run in runs) for i in range(len(PROCESSES))]
        per = [
            statistics.mean(run[i] / rate * 1e6 for run, rate in zip(runs, side.sustained[kind], strict=True) if rate)
            for i in range(len(PROCESSES))
        ]
        lines.append(
            f"| {label} | "
            + " | ".join(f"{c:.2f}" for c in mean)
            + f" | {sum(mean):.2f} | "
            + " | ".join(f"{us:.1f}" for us in per)
            + f" | {sum(per):.1f} |"
        )
    return lines


def rows_table(sides: list[Side]) -> list[str]:
    """row_cost's figures, each side's on a line: µs of CPU per row recorded."""
    lines = [
        "| code | log | rows | making the records (µs) | writing them: the process (µs) | the database server (µs) "
        "| total (µs) |",
        "|---|---|---|---|---|---|---|",
    ]
    for kind in ("sqlite", "postgres"):
        for side in sides:
            if kind in side.rows:
                f = side.rows[kind]
                total = f["records_us"] + f["writing_us"] + f["database_us"]
                lines.append(
                    f"| {side.label} | {kind} | {f['rows']:,.0f} | {f['records_us']:.2f} | {f['writing_us']:.2f} "
                    f"| {f['database_us']:.2f} | {total:.2f} |"
                )
    return lines


def report(sides: list[Side]) -> list[str]:
    lines: list[str] = []
    for side in sides:
        lines += [*durable_table(side), "", *cores_table(side), ""]
    if any(side.rows for side in sides):
        lines += [*rows_table(sides), ""]
    if len(sides) == 2:
        base, this = sides

        def cost(side: Side, kind: str) -> list[float]:
            return [x / o for x, o in zip(side.sustained[kind], side.sustained["off"], strict=True) if o]

        for kind in ("sqlite", "postgres"):
            pairs = zip(cost(base, kind), cost(this, kind), strict=True)
            lines.append(
                f"{LABELS[kind]}, throughput with the log / without, each round: "
                + ", ".join(f"{base.label} {b:.2f}×, {this.label} {t:.2f}×" for b, t in pairs)
            )
    return lines


ROW_BATCHES = 4  # the batches of 500 one commit carries: what the group commit made of 8 loops' batches


def row_cost(tree: Path | None, url: str, game: str, rows: int, database: int | None) -> dict[str, float]:
    """Per row recorded, in a child process running ``tree``'s store (None: this tree's): the CPU
    of turning applied batches into records (``records_of``, in the scorer's thread), of the rest
    of the process (writing; SQLite's thread included) and of ``database`` (a PostgreSQL server's
    pid: its backends). The same submissions as measurement (a)'s, ~10 % of them replays."""
    import json
    import subprocess

    from bench import results

    code = "import sys; from bench.scorer_durable import _row_cost_child as c; c(*sys.argv[1:])"
    env = {**os.environ, "PYTHONPATH": str(results.ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", code, url, game, str(rows), str(database or 0)],
        cwd=tree or results.ROOT,  # the store code the child imports first: the tree's
        env=env,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:  # say why: the child's own error, not only its exit status
        raise RuntimeError(f"row cost in {tree or results.ROOT} exited {done.returncode}: {done.stderr[-2000:]}")
    figures: dict[str, float] = json.loads(done.stdout.splitlines()[-1])
    return figures


def _row_cost_child(url: str, game: str, rows: str, database: str) -> None:
    import asyncio
    import json
    import resource

    from leaderboard.results import SubmitResult
    from scorer.durable import open_store
    from scorer.durable.recorder import earliest, records_of

    source, seen = Source("s-"), set()
    batches = []
    for b in range(int(rows) // 500):
        subs = source.take(500)
        results = []
        for s in subs:
            results.append(
                SubmitResult(s.id, "duplicate" if s.id in seen else "ok", applied_us=1_700_000_000_000_000 + b)
            )
            seen.add(s.id)
        batches.append(([s.fields() for s in subs], results))

    async def run() -> dict[str, float]:
        store = open_store(url)
        await store.open()
        pid = int(database)
        making = 0.0
        cpu0, db0 = resource.getrusage(resource.RUSAGE_SELF), tree_cpu_s(pid) if pid else 0.0
        recorded = 0
        for i in range(0, len(batches), ROW_BATCHES):
            t = time.thread_time()
            records = earliest([records_of(e, r) for e, r in batches[i : i + ROW_BATCHES]])
            making += time.thread_time() - t
            recorded += len(records)
            await store.record(game, records)
        cpu1, db1 = resource.getrusage(resource.RUSAGE_SELF), tree_cpu_s(pid) if pid else 0.0
        await store.close()
        cpu = cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime
        return {
            "rows": recorded,
            "records_us": making / recorded * 1e6,
            "writing_us": (cpu - making) / recorded * 1e6,
            "database_us": (db1 - db0) / recorded * 1e6,
        }

    print(json.dumps(asyncio.run(run())))
