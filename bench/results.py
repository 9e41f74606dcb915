"""Where a benchmark's figures go: one JSON document per benchmark under ``bench/results/``.

Each run replaces its benchmark's document (the history is git's): the figures the run measured,
the command that measured them, the commit it ran on and the machine it ran on. ``python -m
bench.plots`` draws docs' charts from these documents; docs/benchmarks.md quotes them. A benchmark
never edits a document written by hand.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson

from loadtest.procstat import cpu_model

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"
# what benchmarks and bench.plots write: a tree differing only there measured the commit itself
_RECORDS = (":!bench/results", ":!docs/figures")


def commit() -> str:
    """The commit the run measured, ``+dirty`` when the work tree differs from it; ``unknown``
    outside a git checkout (an installed wheel)."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", ".", *_RECORDS],
            cwd=ROOT,
            capture_output=True,
            text=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def machine() -> dict[str, Any]:
    """The facts a reader needs to compare two runs: cores, CPU model, memory, OS, Python."""
    try:
        mem_kb = next(
            int(line.split()[1])
            for line in Path("/proc/meminfo").read_text().splitlines()
            if line.startswith("MemTotal")
        )
    except (OSError, StopIteration, ValueError):
        mem_kb = 0
    return {
        "cores": os.cpu_count(),
        "cpu": cpu_model(),
        "memory_gib": round(mem_kb / 2**20, 1),
        "os": platform.platform(),
        "python": platform.python_version(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def command(module: str, argv: list[str] | None) -> str:
    """The command line that reproduces the run."""
    args = argv if argv is not None else sys.argv[1:]
    return " ".join(["python", "-m", module, *args])


def add_no_write(parser: argparse.ArgumentParser) -> None:
    """The ``--no-write`` option every benchmark takes: print the figures, record nothing."""
    parser.add_argument("--no-write", action="store_true", help="do not record the run in bench/results/")


def save(name: str, figures: dict[str, Any], args: argparse.Namespace, *, module: str, argv: list[str] | None) -> None:
    """Record the run unless ``--no-write`` was given, and say where."""
    if not args.no_write:
        print("recorded", record(name, figures, cmd=command(module, argv)))


def record(name: str, figures: dict[str, Any], *, cmd: str, directory: Path | None = None) -> Path:
    """Write ``<directory>/<name>.json`` (``bench/results/`` unless told) for this run and return its path."""
    directory = directory if directory is not None else RESULTS
    doc = {
        "benchmark": name,
        "command": cmd,
        "commit": commit(),
        "when": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": machine(),
        "figures": figures,
    }
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.json"
    path.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n")
    return path


def load(name: str, directory: Path | None = None) -> dict[str, Any] | None:
    """The last recorded run of a benchmark, or None when it has never been recorded."""
    path = (directory if directory is not None else RESULTS) / f"{name}.json"
    if not path.exists():
        return None
    doc: dict[str, Any] = orjson.loads(path.read_bytes())
    return doc
