"""Redis time of ``lb_submit`` alone, replayed: ``python -m bench.replay``.

bench.drain measures the whole path (a producer queueing, a scorer process reading, calling and
acknowledging) while both share the machine's cores with Redis; on a loaded 2-core machine its
figures move by a few µs from run to run. This benchmark takes everything but the call away:

* **captured once**: N submissions (random points over 50,000 players, uniformly or, with
  ``--players pareto``, as bench.scorer draws them: a few players submit most slips and hold
  the top; three windows, global scope) are queued through the real queue, read back from the
  stream in batches of ``--batch`` entries as the scorer reads them, and laid out by the
  scorer's encoder (``encode_batch``, with the scorer's arguments) into the FCALLs it would send;
  a baseline's batches by the baseline's own encoder, so a change of the call's layout is
  compared fairly;
* **replayed**: each round, for each library (this tree's, ``--baseline-library REF|PATH``'s,
  the ``--floor``), a fresh redis-server gets the library and the same FCALLs, one after
  another, from one client and nothing else, so every round starts from the same (empty) keys;
  the libraries alternate within a round (A B A B ...), so all are measured under the same load;
* **read** per submission: the FCALL's own time from ``INFO commandstats`` (the sum) and from the
  slow log (each batch's time: the median batch hardly moves when another process takes the
  core for a moment), the commands run inside it and the Lua around them, and the Redis process's
  CPU (``INFO cpu``, user + system), which counts only the work Redis did.

Every figure is given per round, with its median and spread (max - min) over the rounds, and this
tree against the baseline both as medians and as the median of the rounds' paired ratios.
``--baseline-library PATH`` takes a library file (this tree's encoder): a copy of the library
with one rule taken out measures that rule's cost.

Unless ``--no-write``, the figures are recorded in bench/results/replay.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Any, cast

import redis

from bench import results
from bench.drain import FLOOR_LIBRARY, OUTSIDE, PLAYERS, baseline_error, code_tree, fill, tree_library
from bench.redis_stats import usec
from fleet.redis_server import RedisServer
from leaderboard import GameConfig
from leaderboard.library import library_code
from leaderboard.settings import argument_parser
from leaderboard.submission import entry_fields

GAME = "bench"

# Run with the code of a tree on its path: the FCALLs its scorer would send for the batches on
# stdin (the scorer's arguments: Consumer._submit), as [[keys, args], ...] on stdout.
ENCODER = """
import json, sys
from leaderboard import GameConfig
from leaderboard.batch import encode_batch
job = json.load(sys.stdin)
config = GameConfig(game=job["game"], **job["settings"])
plans = (encode_batch(config, entries, job["now"], rows=False) for entries in job["batches"])
json.dump([[plan.keys, plan.args] for plan in plans], sys.stdout)
"""

Call = tuple[str, list[Any]]  # (function, [numkeys, *keys, *args])


def add_workload(p: argparse.ArgumentParser) -> None:
    """The options that choose the captured workload (capture), bench.instructions' too."""
    p.add_argument("--seed", type=int, default=1, help="seed of the generated workload")
    p.add_argument(
        "--players",
        choices=sorted(PLAYERS),
        default="uniform",
        help="who submits: uniform over 50,000 players, or pareto as bench.scorer draws them",
    )
    p.add_argument(
        "--regions",
        type=int,
        default=0,
        help="each slip names one of this many regions, so the game's boards are kept per region too: "
        "more and smaller boards per batch (0: none; LB_MAX_SCOPES is raised to fit them, as a game would)",
    )
    p.add_argument("--batch", type=int, default=500, help="entries per batch (the scorer's LB_SCORER_BATCH)")


def capture(
    submissions: int, seed: int, batch: int, players: str = "uniform", regions: int = 0
) -> tuple[list[list[dict[str, str]]], int]:
    """The queued entries' fields, in the scorer's batches, and the time they were read at. By
    name: what every release's encoder reads (a slip passed on as it came is the same argument)."""
    with tempfile.TemporaryDirectory(prefix="replay-capture-") as scratch, RedisServer(scratch) as server:
        r = redis.Redis.from_url(server.url, decode_responses=True)
        r.function_load(library_code(), replace=True)
        asyncio.run(fill(server.url, submissions, seed, min(batch, 500), players=players, regions=regions))
        now = int(r.time()[0]) * 1000
        stream = GameConfig(game=GAME).keys.submissions
        entries = [entry_fields(fields) for _, fields in cast(Any, r.xrange(stream))]
        r.close()
    return [entries[i : i + batch] for i in range(0, len(entries), batch)], now


def encoded(batches: list[list[dict[str, str]]], now: int, tree: Path | None) -> list[Call]:
    """The FCALLs of the scorer whose code is in ``tree`` (None: this tree's). A game of more regions
    than LB_MAX_SCOPES allows by default raises it, as its operators would: else the slips of the
    regions past the cap are refused (too_many_scopes), and the run times refusals."""
    scopes = len({entry["region"] for entries in batches for entry in entries if entry.get("region")})
    settings = {"max_scopes": scopes} if scopes > GameConfig(game=GAME).max_scopes else {}
    job = json.dumps({"game": GAME, "now": now, "batches": batches, "settings": settings})
    out = subprocess.run(
        [sys.executable, "-c", ENCODER], input=job, capture_output=True, text=True, check=True, cwd=tree or results.ROOT
    ).stdout
    return [("lb_submit", [len(keys), *keys, *args]) for keys, args in json.loads(out)]


def floor_calls(batches: list[list[dict[str, str]]]) -> list[Call]:
    """The same submissions for bench.drain's floor: only the commands a three-window best needs
    (packed scores of lb_submit's magnitude)."""
    keys = [f"f:{{b}}:{name}" for name in ("daily", "weekly", "alltime", "activity", "seen", "h1", "h2", "h3")]
    calls: list[Call] = []
    for entries in batches:
        flat = [x for f in entries for x in (f["id"], f["player"], int(f["points"]) * 2**26)]
        calls.append(("floor_submit", [len(keys), *keys, *flat]))
    return calls


def sample(r: redis.Redis) -> tuple[float, int]:
    """The Redis process's CPU seconds and the FCALLs' usec so far, in one INFO."""
    info: dict[str, Any] = r.info("cpu", "commandstats")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"]), int(info.get("cmdstat_fcall", {}).get("usec", 0))


def replay(sides: dict[str, tuple[str, list[Call]]], submissions: int) -> dict[str, dict[str, Any]]:
    """One round: a fresh server per library, and the batches replayed into them in step (batch
    1 into each, then batch 2 ...; who goes first rotates), so every library's batch i runs
    within milliseconds of the others', under the same load. Each FCALL is followed by an INFO:
    its own time and the process's CPU, per batch. The figures per submission, per library."""
    with ExitStack() as stack:
        scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="replay-")))
        clients: dict[str, redis.Redis] = {}
        for side, (code, _) in sides.items():
            server = stack.enter_context(RedisServer(scratch / side))
            r = clients[side] = redis.Redis.from_url(server.url)
            stack.callback(r.close)
            r.function_load(code, replace=True)
            r.config_resetstat()
        names = list(sides)
        last = {side: sample(clients[side]) for side in names}
        batch_us: dict[str, list[int]] = {side: [] for side in names}
        batch_cpu: dict[str, list[float]] = {side: [] for side in names}
        statuses: dict[str, dict[str, int]] = {side: {} for side in names}
        batches = len(next(iter(sides.values()))[1])
        for i in range(batches):
            for side in names[i % len(names) :] + names[: i % len(names)]:
                function, arguments = sides[side][1][i]
                replies = clients[side].fcall(function, *arguments)
                now = sample(clients[side])
                batch_cpu[side].append((now[0] - last[side][0]) * 1e6)
                batch_us[side].append(now[1] - last[side][1])
                last[side] = now
                for reply in replies if function == "lb_submit" else ():
                    status = (reply if isinstance(reply, bytes) else reply[0]).decode()  # 'ok', or ['ok']
                    statuses[side][status] = statuses[side].get(status, 0) + 1
        figures = {}
        for side in names:
            stats = usec(clients[side])
            inside = {name: stat for name, stat in stats.items() if name not in OUTSIDE}
            fcall_us = stats.get("fcall", (0, 0))[0] / submissions
            inside_us = sum(u for u, _ in inside.values()) / submissions
            per_batch = batches / submissions  # batches per submission: a median batch's share
            figures[side] = {
                "fcall_us": fcall_us,
                "median_batch_us": statistics.median(batch_us[side]) * per_batch,
                "cpu_us": sum(batch_cpu[side]) / submissions,
                "median_batch_cpu_us": statistics.median(batch_cpu[side]) * per_batch,
                "calls": sum(c for _, c in inside.values()) / submissions,
                "lua_us": fcall_us - inside_us,
                "by_command": {name: c / submissions for name, (_, c) in inside.items()},
                "statuses": statuses[side],
                "batch_cpu": batch_cpu[side],
            }
    return figures


FIGURES = (
    ("FCALL us/submission", "fcall_us"),
    ("median batch us/submission", "median_batch_us"),
    ("Redis CPU us/submission", "cpu_us"),
    ("median batch CPU us/submission", "median_batch_cpu_us"),
    ("Redis calls/submission", "calls"),
    ("Lua around them us", "lua_us"),
)


def summary(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Print each library's figures (rounds, median, spread) and this tree's paired ratios to the
    baseline and the floor; return the medians, spreads and ratios."""
    out: dict[str, Any] = {}
    for label, key in FIGURES:
        print(f"{label}:")
        row: dict[str, Any] = {}
        for side, rounds in runs.items():
            values = [run[key] for run in rounds]
            median, spread = statistics.median(values), max(values) - min(values)
            row[side] = {"median": median, "spread": spread, "rounds": values}
            print(f"  {side:<9} {' '.join(f'{v:6.2f}' for v in values)}  median {median:6.2f}  spread {spread:5.2f}")
        for other in ("baseline", "floor"):
            if other in runs and key != "calls":
                ratios = [t[key] / o[key] for t, o in zip(runs["this"], runs[other], strict=True) if o[key] > 0]
                if ratios:
                    ratio = row[f"this_vs_{other}"] = statistics.median(ratios)
                    print(f"  this / {other}: {ratio:.3f} (rounds {min(ratios):.3f}-{max(ratios):.3f})")
        out[key] = row
    # the steadiest comparison: each batch against the same batch of the other library, run
    # within milliseconds of it
    for other in ("baseline", "floor"):
        if other in runs:
            pairs = [
                t / o
                for this, that in zip(runs["this"], runs[other], strict=True)
                for t, o in zip(this["batch_cpu"], that["batch_cpu"], strict=True)
                if o > 0
            ]
            per_round = [
                statistics.median(t / o for t, o in zip(this["batch_cpu"], that["batch_cpu"], strict=True) if o > 0)
                for this, that in zip(runs["this"], runs[other], strict=True)
            ]
            ratio = statistics.median(pairs)
            out[f"batch_cpu_this_vs_{other}"] = {"median": ratio, "rounds": per_round}
            print(
                f"this / {other}, Redis CPU batch by batch: median {ratio:.3f} "
                f"(rounds {' '.join(f'{x:.3f}' for x in per_round)})"
            )
    return out


def main(argv: list[str] | None = None) -> int:
    p = argument_parser("python -m bench.replay", __doc__ or "")
    p.add_argument("--submissions", type=int, default=60_000, help="submissions captured and replayed")
    add_workload(p)
    p.add_argument("--rounds", type=int, default=5, help="rounds; each replays every library once, alternating")
    p.add_argument(
        "--baseline-library",
        metavar="REF|PATH",
        help="also replay the code of a git ref (its library and encoder), or a library file (this tree's encoder)",
    )
    p.add_argument("--floor", action="store_true", help="also replay the floor: only the commands a best needs")
    results.add_no_write(p)
    args = p.parse_args(argv)
    if min(args.submissions, args.batch, args.rounds) < 1 or args.regions < 0:
        p.error("--submissions, --batch and --rounds must be at least 1, --regions at least 0")
    if args.floor and args.regions:
        p.error("--floor writes the global boards only: it takes no --regions")
    if args.floor and args.batch > 1000:
        p.error("--floor takes at most 1000 entries per batch (unpack() bounds a call's arguments)")
    if error := baseline_error(args.baseline_library):
        p.error(f"--baseline-library: {error}")
    batches, now = capture(args.submissions, args.seed, args.batch, args.players, args.regions)
    n = sum(len(b) for b in batches)
    sides: dict[str, tuple[str, list[Call]]] = {}
    with tempfile.TemporaryDirectory(prefix="replay-baseline-") as scratch:
        if args.baseline_library:
            tree = code_tree(args.baseline_library, Path(scratch))
            code = tree_library(tree)
            sides["baseline"] = (code, encoded(batches, now, tree))
        sides["this"] = (library_code(), encoded(batches, now, None))
    if args.floor:
        sides["floor"] = (FLOOR_LIBRARY, floor_calls(batches))
    regions = f", {args.regions} regions" if args.regions else ""
    print(f"== {n:,} submissions in {len(batches)} batches of {args.batch}, {args.rounds} rounds{regions}")
    runs: dict[str, list[dict[str, Any]]] = {side: [] for side in sides}
    for _ in range(args.rounds):
        for side, figures in replay(sides, n).items():
            runs[side].append(figures)
    for side, rounds in runs.items():
        print(f"{side}: per round {rounds[0]['statuses'] or '(the floor)'}; per submission ", end="")
        by = sorted(rounds[0]["by_command"].items(), key=lambda kv: -kv[1])
        print(", ".join(f"{c:.2f} {name.upper()}" for name, c in by if c >= 0.005))
    figures = {
        "submissions": n,
        "batch": args.batch,
        "rounds": args.rounds,
        "players": args.players,
        "regions": args.regions,
        "baseline_library": args.baseline_library,
        "libraries": list(sides),
        **summary(runs),
        "statuses": {side: rounds[0]["statuses"] for side, rounds in runs.items()},
        "calls_by_command": {side: rounds[0]["by_command"] for side, rounds in runs.items()},
    }
    results.save("replay", figures, args, module="bench.replay", argv=argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
