"""Redis time per submission of the scorer's path: ``python -m bench.drain``.

Queues N submissions (random points over 50,000 players, three windows; ``--submit-batch`` per
submit call: 1 is a game server submitting one at a time), drains them with one
``python -m scorer --burst`` replica (``--scorer-batch`` entries per read: a backed-up queue fills
every read, a light load gives a few), and reads per submission:

* ``INFO commandstats`` of the drain: the batch FCALL and every command (XREADGROUP, the
  acknowledging MULTI, ...). Redis time per submission is what bounds the Redis core, and unlike
  wall-clock throughput it hardly moves with other load on the machine;
* the same for queueing them, and for the whole path (queue + drain);
* the Redis process's own CPU (``INFO cpu``, user + system) for the whole path: commands and
  everything around them (reading and writing sockets, feeding a replica).

Calls per submission: the commands run inside ``lb_submit`` (everything the drain ran but the
scorer's own per-batch commands), and the Lua around them: the FCALL's time less theirs.

``--baseline-library REF``: the same workload drained by the code of a git ref (its library and
the scorer and encoder that call it, exported to a temporary directory), or by the library file
at a path with this tree's scorer, alternating with this tree (``--rounds`` pairs, A B A B...), so
both are measured under the same load; each is queued the entries its release's producers wrote
(fields by name before slip entries). ``--replica``: every run again with a replica attached to
the server, and the replica's CPU.

``--floor``: the same workload through a function doing only the commands a three-window best
needs, each once per batch as ``lb_submit`` does (a ZMSCORE per board of the batch's players and a
ZADD per board of those it improves, one activity XADD of the ids, players and points as
columns, one SADD of the ids, a PFADD per window), with no rule and the least Lua: the floor
``lb_submit`` stands on.

Unless ``--no-write``, the figures are recorded in bench/results/drain.json.
"""

from __future__ import annotations

import asyncio
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import redis

from bench import results
from bench.rank_reads import drain
from bench.redis_stats import cpu, usec
from fleet.redis_server import RedisServer
from leaderboard import GameConfig, Submission, connect, now_ms
from leaderboard.assembly import MANIFEST, SINGLE_FILE, from_directory
from leaderboard.library import library_code
from leaderboard.queue import Queue
from leaderboard.settings import argument_parser
from leaderboard.submission import entry_fields


def by_name(tree: Path | None) -> bool:
    """Whether the scorer in ``tree`` (None: this tree's) is of a release that reads stream
    entries of fields by name only, as its producers wrote them, rather than slips."""
    return tree is not None and 'SLIP = "slip"' not in (tree / "leaderboard" / "submission.py").read_text()


async def submit(queue: Queue, subs: Sequence[Submission], *, names: bool = False) -> None:
    """Queue ``subs`` as this release's producers do, or (``names``) as an earlier release's did:
    fields by name, the entries its scorer reads."""
    if names:
        await queue.lb.enqueue([entry_fields(s.fields()) for s in subs], backlog_max=queue.backlog_max)
    else:
        await queue.submit_many(subs)


# Who submits: ``uniform`` over 50,000 players (most slips write), or ``pareto`` as
# bench.scorer draws them (a few players submit most slips, and they hold the top).
PLAYERS: dict[str, Callable[[random.Random], int]] = {
    "uniform": lambda rnd: rnd.randrange(50_000),
    "pareto": lambda rnd: int(rnd.paretovariate(1.1)) % 50_000,
}


async def fill(
    url: str,
    count: int,
    seed: int,
    per_call: int,
    *,
    names: bool = False,
    players: str = "uniform",
    regions: int = 0,
) -> None:
    """``count`` submissions queued; with ``regions``, each names one of that many regions (the
    game's boards are then kept per region too: more, smaller boards in each batch)."""
    client = connect(url)
    queue = Queue(client, GameConfig(game="bench"), backlog_max=count + per_call)
    rnd, now, player = random.Random(seed), now_ms(), PLAYERS[players]
    subs = [
        Submission(
            f"s{i}",
            f"p{player(rnd)}",
            rnd.randrange(1_000_000),
            now,
            region=f"r{rnd.randrange(regions)}" if regions else None,
        )
        for i in range(count)
    ]
    for start in range(0, count, per_call):
        await submit(queue, subs[start : start + per_call], names=names)
    await client.aclose()


# What the scorer sends around its FCALL, once per batch (read, acknowledge: a MULTI, or lb_ack's
# commands) or once per run: everything else the drain ran, ran inside lb_submit.
OUTSIDE = frozenset(
    {
        "fcall",
        "xreadgroup",
        "multi",
        "exec",
        "xack",
        "xdel",
        "srem",
        "xtrim",
        "xinfo|groups",
        "xautoclaim",
        "xpending",
        "xgroup|create",
        "function|load",
        "hello",
        "client|setinfo",
        "client|setname",
        "info",
        "config|resetstat",
        "ping",
    }
)

# The commands of lb_ack, the acknowledging function (where the library has it): commandstats
# counts its FCALLs on the same line as lb_submit's, so their time is taken out of that line (what
# remains of lb_ack there is the Lua of one call per batch, well under 0.1 µs a submission).
ACK_COMMANDS = ("xack", "srem", "xtrim", "xinfo|groups", "xpending")


FLOOR_LIBRARY = """#!lua name=drainfloor
-- KEYS: three boards, the activity stream, the seen bucket, three distinct-player logs
-- ARGV: id, player, points for each submission
-- The commands of a three-window best, each once per batch: no rule, no check, least Lua.
local function floor_submit(keys, args)
  local ids, players, points_column, best, distinct = {}, {}, {}, {}, {}
  local n = 0
  for i = 1, #args, 3 do
    local player, points = args[i + 1], tonumber(args[i + 2])
    n = n + 1
    ids[n], players[n], points_column[n] = args[i], player, args[i + 2]
    if not best[player] then
      distinct[#distinct + 1] = player
      best[player] = points
    elseif points > best[player] then
      best[player] = points
    end
  end
  for b = 1, 3 do
    local olds, writes = redis.call('ZMSCORE', keys[b], unpack(distinct)), {}
    for j, player in ipairs(distinct) do
      local old = olds[j]
      if not old or best[player] > tonumber(old) then
        writes[#writes + 1] = best[player]
        writes[#writes + 1] = player
      end
    end
    if #writes > 0 then
      redis.call('ZADD', keys[b], unpack(writes))
    end
  end
  redis.call('XADD', keys[4], 'MAXLEN', '~', 10000, '*', 'n', n, 'id', table.concat(ids, '\\n'),
    'player', table.concat(players, '\\n'), 'points', table.concat(points_column, '\\n'))
  redis.call('SADD', keys[5], unpack(ids))
  for h = 6, 8 do
    redis.call('PFADD', keys[h], unpack(distinct))
  end
  return n
end
redis.register_function('floor_submit', floor_submit)
"""


def function_figures(stats: dict[str, tuple[int, int]], n: int, spent: float, acks: bool = False) -> dict[str, Any]:
    """Print and return the figures of the function calls in ``stats`` (commandstats of ``n``
    submissions, ``spent`` seconds of the Redis process's CPU meanwhile): its Redis time, the
    calls inside it and the Lua around them, per submission. ``acks``: the FCALL line also holds
    the acknowledgements (lb_ack), whose commands' time is taken out of it."""
    inside = {name: stat for name, stat in stats.items() if name not in OUTSIDE}
    acking = sum(stats.get(name, (0, 0))[0] for name in ACK_COMMANDS) if acks else 0
    fcall_us = (stats.get("fcall", (0, 0))[0] - acking) / n
    inside_us, inside_calls = sum(u for u, _ in inside.values()) / n, sum(c for _, c in inside.values()) / n
    print(f"FCALL: {fcall_us:.1f} us of Redis time per submission")
    print(f"  inside it: {inside_calls:.2f} Redis calls per submission, {inside_us:.1f} us", end="")
    print(f"; Lua around them {fcall_us - inside_us:.1f} us")
    by_calls = sorted(inside.items(), key=lambda kv: -kv[1][1])
    print("  " + ", ".join(f"{c / n:.2f} {name.upper()}" for name, (_, c) in by_calls if c / n >= 0.005))
    # wall-clock usec (above) grow when the machine is busy; the process's CPU hardly does
    print(f"Redis process CPU meanwhile: {spent / n * 1e6:.1f} us per submission")
    return {
        "fcall_us_per_submission": fcall_us,
        "calls_per_submission": inside_calls,
        "lua_us_per_submission": fcall_us - inside_us,
        "calls_per_submission_by_command": {name: c / n for name, (_, c) in inside.items()},
        "call_cpu_us_per_submission": spent / n * 1e6,
    }


def floor(args: Any) -> dict[str, Any]:
    """The same workload through FLOOR_LIBRARY, in batches of --scorer-batch: its Redis time."""
    n, batch = args.submissions, min(args.scorer_batch, 1000)  # unpack() bounds a call's ids
    rnd = random.Random(args.seed)
    # the packed scores of lb_submit are points * 2^k + a tie part: of the same magnitude here
    subs = [(f"s{i}", f"p{rnd.randrange(50_000)}", rnd.randrange(1_000_000) * 2**26) for i in range(n)]
    keys = [
        "f:{b}:daily",
        "f:{b}:weekly",
        "f:{b}:alltime",
        "f:{b}:activity",
        "f:{b}:seen",
        "f:{b}:h1",
        "f:{b}:h2",
        "f:{b}:h3",
    ]
    with tempfile.TemporaryDirectory(prefix="drain-floor-") as scratch, RedisServer(scratch) as server:
        r = redis.Redis.from_url(server.url)
        r.function_load(FLOOR_LIBRARY, replace=True)
        r.config_resetstat()
        cpu0 = cpu(r)
        for start in range(0, n, batch):
            flat = [x for sub in subs[start : start + batch] for x in sub]
            r.fcall("floor_submit", len(keys), *keys, *flat)
        spent = cpu(r) - cpu0
        stats = usec(r)
        r.close()
    print(f"== the floor: {n:,} submissions, {batch} per call")
    return function_figures(stats, n, spent)


def baseline_error(baseline: str | None) -> str | None:
    """Why ``baseline`` (``--baseline-library`` / ``--baseline``) can't be used, or None: it
    must be a library file or a git ref of this repository."""
    if baseline is None or Path(baseline).is_file():
        return None
    found = subprocess.run(
        ["git", "rev-parse", "--verify", "--quiet", f"{baseline}^{{commit}}"], cwd=results.ROOT, capture_output=True
    )
    return None if found.returncode == 0 else f"{baseline!r} is neither a library file nor a git ref of this repository"


def code_tree(baseline: str, directory: Path) -> Path:
    """A directory holding the packages the scorer runs (leaderboard, scorer) and its library:
    a git ref's (``git archive``), or this tree's with the library file at ``baseline`` (a whole
    library, assembled: its lua/ holds that file alone, which a tree without a manifest names)."""
    if Path(baseline).is_file():
        for package in ("leaderboard", "scorer"):
            shutil.copytree(results.ROOT / package, directory / package, ignore=shutil.ignore_patterns("__pycache__"))
        ignore = shutil.ignore_patterns("__pycache__", "*.lua", MANIFEST)  # this tree's library: not the baseline's
        shutil.copytree(results.ROOT / "lua", directory / "leaderboard" / "lua", ignore=ignore)
        shutil.copyfile(baseline, directory / "leaderboard" / "lua" / SINGLE_FILE)
        return directory
    archive = subprocess.run(
        ["git", "archive", baseline, "leaderboard", "scorer", "lua"], cwd=results.ROOT, capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(directory)], input=archive, check=True)
    (directory / "lua").rename(directory / "leaderboard" / "lua")  # where the package maps it
    return directory


def tree_library(tree: Path) -> str:
    """The function library of a tree made by ``code_tree``, assembled as this release loads its
    own (leaderboard/assembly.py: its manifest's files, or the one file of an older release)."""
    return from_directory(tree / "leaderboard" / "lua").text


def run(args: Any, replica: bool, tree: Path | None = None) -> dict[str, Any]:
    """Print one run's figures and return them: this tree's code, or the one in ``tree``."""
    n = args.submissions
    code = tree_library(tree) if tree else library_code()
    with (
        tempfile.TemporaryDirectory(prefix="drain-bench-") as scratch,
        RedisServer(Path(scratch) / "primary") as server,
        RedisServer(Path(scratch) / "replica") as copy,
    ):
        r, c = redis.Redis.from_url(server.url), redis.Redis.from_url(copy.url)
        if replica:
            c.replicaof(server.host, server.port)
            deadline = time.monotonic() + 30
            while r.info("replication").get("slave0", {}).get("state") != "online":
                if time.monotonic() > deadline:
                    raise RuntimeError("the replica did not come online")
                time.sleep(0.05)
        r.function_load(code, replace=True)
        r.config_resetstat()
        cpu0, replica_cpu0 = cpu(r), cpu(c)
        asyncio.run(fill(server.url, n, args.seed, args.submit_batch, names=by_name(tree)))
        queued = usec(r)
        r.config_resetstat()
        drain_cpu0 = cpu(r)
        started = time.perf_counter()
        # run from the tree: the scorer imports (and loads) the code it finds first on its path
        drain(server.url, cwd=tree, LB_SCORER_BATCH=str(args.scorer_batch))
        elapsed = time.perf_counter() - started
        drain_spent = cpu(r) - drain_cpu0
        drained = usec(r)
        if replica:  # the replica has applied everything the master sent before its CPU is read
            offset = r.info("replication")["master_repl_offset"]
            while c.info("replication").get("slave_repl_offset", -1) < offset:
                time.sleep(0.01)
        spent, replica_spent = cpu(r) - cpu0, cpu(c) - replica_cpu0
        r.close()
        c.close()
    total_q, total_d = (sum(u for u, _ in stats.values()) / n for stats in (queued, drained))
    what = ("with a replica" if replica else "no replica") + (f", the code of {args.baseline_library}" if tree else "")
    print(f"== {what}: {n:,} submissions, {args.submit_batch} per submit call, scorer batch {args.scorer_batch}")
    print(f"drained in {elapsed:.2f} s ({n / elapsed:,.0f}/s wall clock)")
    print("lb_submit ", end="")
    # CPU while draining: the FCALLs and the scorer's reads and acknowledgements (the same for any code)
    submit = function_figures(drained, n, drain_spent, acks="'lb_ack'" in code)
    print(f"all commands: queueing {total_q:.1f} + draining {total_d:.1f} = {total_q + total_d:.1f} us per submission")
    print(f"Redis process CPU, queue + drain: {spent / n * 1e6:.1f} us per submission", end="")
    print(f"; the replica's: {replica_spent / n * 1e6:.1f} us" if replica else "")
    print("per command (calls made inside an FCALL are counted in it and again on their own):")
    for phase, stats in (("queue", queued), ("drain", drained)):
        for name, (u, calls) in sorted(stats.items(), key=lambda kv: -kv[1][0])[:6]:
            print(f"  {phase} {name:<12} {u / n:6.2f} us/submission  {calls:>9,} calls")
    return {
        "submissions": n,
        "drained_per_s": n / elapsed,
        **submit,
        "queue_us_per_submission": total_q,
        "drain_us_per_submission": total_d,
        "redis_cpu_us_per_submission": spent / n * 1e6,
        "replica_cpu_us_per_submission": replica_spent / n * 1e6 if replica else None,
        "per_command_us": {
            phase: {name: u / n for name, (u, _) in stats.items()}
            for phase, stats in (("queue", queued), ("drain", drained))
        },
    }


def main(argv: list[str] | None = None) -> int:
    p = argument_parser("python -m bench.drain", __doc__ or "")
    p.add_argument("--submissions", type=int, default=60_000, help="submissions queued and drained")
    p.add_argument("--seed", type=int, default=1, help="seed of the generated workload")
    p.add_argument("--submit-batch", type=int, default=500, help="submissions per submit call")
    p.add_argument("--scorer-batch", type=int, default=500, help="entries per scorer read (LB_SCORER_BATCH)")
    p.add_argument("--replica", action="store_true", help="also run with a replica attached")
    p.add_argument(
        "--baseline-library",
        metavar="REF|PATH",
        help="also drain with the code of a git ref (its library, scorer and encoder), or with a library file",
    )
    p.add_argument("--rounds", type=int, default=2, help="baseline/this-tree pairs, alternating (with a baseline)")
    p.add_argument("--floor", action="store_true", help="also run the floor: only the commands a best needs")
    results.add_no_write(p)
    args = p.parse_args(argv)
    if min(args.submissions, args.submit_batch, args.scorer_batch, args.rounds) < 1:
        p.error("--submissions, --submit-batch, --scorer-batch and --rounds must be at least 1")
    if error := baseline_error(args.baseline_library):
        p.error(f"--baseline-library: {error}")
    with tempfile.TemporaryDirectory(prefix="drain-baseline-") as scratch:
        tree = code_tree(args.baseline_library, Path(scratch)) if args.baseline_library else None
        figures: dict[str, Any] = {}
        for replica in (False, True) if args.replica else (False,):
            name = "with_replica" if replica else "no_replica"
            if tree is None:
                figures[name] = run(args, replica)
                continue
            runs: dict[str, list[dict[str, Any]]] = {"baseline": [], "this": []}
            for _ in range(args.rounds):
                runs["baseline"].append(run(args, replica, tree))
                runs["this"].append(run(args, replica))
            figures[name] = {"baseline_library": args.baseline_library, **runs}
            summary(runs)
        if args.floor:
            figures["floor"] = floor(args)
    results.save("drain", figures, args, module="bench.drain", argv=argv)
    return 0


def summary(runs: dict[str, list[dict[str, Any]]]) -> None:
    """The alternating runs side by side: each figure's runs and median, baseline first."""
    print("== baseline -> this tree (each run, then the median)")
    for label, key in (
        ("lb_submit us/submission", "fcall_us_per_submission"),
        ("Redis calls/submission", "calls_per_submission"),
        ("Lua around them us", "lua_us_per_submission"),
        ("Redis CPU draining us/sub", "call_cpu_us_per_submission"),
        ("Redis CPU queue+drain us/sub", "redis_cpu_us_per_submission"),
    ):
        base, this = ([run[key] for run in runs[side]] for side in ("baseline", "this"))
        print(
            f"  {label:<29} {', '.join(f'{x:.2f}' for x in base)} (median {statistics.median(base):.2f})"
            f" -> {', '.join(f'{x:.2f}' for x in this)} (median {statistics.median(this):.2f})"
        )


if __name__ == "__main__":
    sys.exit(main())
