"""Machine instructions of ``lb_submit``, counted: ``python -m bench.instructions``.

bench.replay times the same batches in two libraries by Redis CPU; on this 2-core machine its
rounds move by ±5 % and its median by about 2 % from one hour to the next, as much as the changes
it is asked to judge. This benchmark counts instead. The batches are captured as bench.replay
captures them (the real queue, the scorer's encoder for each side); each library's redis-server
runs under valgrind's callgrind, which counts the machine instructions executed inside ``FCALL``
(``--toggle-collect=fcallCommand``: Lua, the commands it calls and the conversions at the border)
while the batches are replayed into it once. The count repeats within about 0.2 % (Redis's hash
seeds move it); it does not see cache misses, which time does: find and size a change by its
count, confirm it with bench.replay.

    python -m bench.instructions --baseline-library 7e58782 [--players pareto]

Unless ``--no-write``, the figures are recorded in bench/results/instructions.json.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import redis

from bench import results
from bench.drain import baseline_error, code_tree, tree_library
from bench.replay import Call, add_workload, capture, encoded
from fleet.redis_server import RedisServer
from leaderboard.library import library_code
from leaderboard.settings import argument_parser

VALGRIND = "valgrind"


class CountedRedis(RedisServer):
    """A redis-server run by callgrind, counting instructions inside FCALL only, into ``out``."""

    def __init__(self, data_dir: Path, out: Path) -> None:
        super().__init__(data_dir, startup_timeout=120.0)  # valgrind translates the binary first
        self.out = out

    def command(self) -> list[str]:
        tool = ["--tool=callgrind", "--toggle-collect=fcallCommand", f"--callgrind-out-file={self.out}"]
        return [VALGRIND, "--quiet", *tool, *super().command()]


def total(out: Path) -> int:
    """The instructions a callgrind profile counted (its ``summary:`` or ``totals:`` line)."""
    for line in out.read_text().splitlines():
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
    raise RuntimeError(f"{out} holds no instruction count")


def count(code: str, calls: list[Call], scratch: Path) -> int:
    """The instructions inside FCALL of ``calls`` replayed once into a fresh server with ``code``."""
    out = scratch / "callgrind.out"
    with CountedRedis(scratch / "redis", out) as server:
        r = redis.Redis.from_url(server.url)
        r.function_load(code, replace=True)
        for function, arguments in calls:
            r.fcall(function, *arguments)
        r.close()
    return total(out)  # written as the server exits


def main(argv: list[str] | None = None) -> int:
    p = argument_parser("python -m bench.instructions", __doc__ or "")
    p.add_argument("--submissions", type=int, default=10_000, help="submissions captured and replayed")
    add_workload(p)
    p.add_argument(
        "--baseline-library",
        metavar="REF|PATH",
        help="also count the code of a git ref (its library and encoder), or a library file (this tree's encoder)",
    )
    results.add_no_write(p)
    args = p.parse_args(argv)
    if min(args.submissions, args.batch) < 1 or args.regions < 0:
        p.error("--submissions and --batch must be at least 1, --regions at least 0")
    if error := baseline_error(args.baseline_library):
        p.error(f"--baseline-library: {error}")
    if shutil.which(VALGRIND) is None:
        p.error("valgrind is not installed (Debian: apt-get install valgrind)")
    batches, now = capture(args.submissions, args.seed, args.batch, args.players, args.regions)
    n = sum(len(b) for b in batches)
    regions = f", {args.regions} regions" if args.regions else ""
    print(f"== {n:,} submissions in {len(batches)} batches of {args.batch}, {args.players} players{regions}")
    per_submission: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="instructions-") as scratch:
        sides: dict[str, tuple[str, list[Call]]] = {}
        if args.baseline_library:
            tree = Path(scratch) / "baseline-tree"
            tree.mkdir()
            code_tree(args.baseline_library, tree)
            sides["baseline"] = (tree_library(tree), encoded(batches, now, tree))
        sides["this"] = (library_code(), encoded(batches, now, None))
        for side, (code, calls) in sides.items():
            per_submission[side] = count(code, calls, Path(scratch) / side) / n
            print(f"{side}: {per_submission[side]:,.0f} instructions inside FCALL per submission", flush=True)
    figures: dict[str, object] = {
        "submissions": n,
        "batch": args.batch,
        "players": args.players,
        "regions": args.regions,
        "baseline_library": args.baseline_library,
        "instructions_per_submission": per_submission,
    }
    if "baseline" in per_submission:
        ratio = per_submission["this"] / per_submission["baseline"]
        figures["this_vs_baseline"] = ratio
        print(f"this / baseline: {ratio:.4f}")
    results.save("instructions", figures, args, module="bench.instructions", argv=argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
