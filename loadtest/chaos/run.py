"""``python -m loadtest chaos``: every fault against private fleets, then docs/reliability.md.

Each fault gets a fleet of its own (embedded redis-server with AOF and a password, scorer,
gateways), so one fault's damage cannot colour the next one's figures. A fault that fails to run
is reported as a failed promise and the run goes on; the whole run is bounded by
``--time-limit``, and whatever it started is stopped on the way out."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import datetime as dt
import logging
import os
import platform
import random
import shutil
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson

from ..procstat import cpu_model
from ..progress import Progress
from . import gateway_kill, properties, readers, redis_faults, scorer_kills
from .markdown import render
from .verdicts import promises

FAULTS = ("scorer", "redis", "gateway", "readers", "properties")


@dataclasses.dataclass(frozen=True, slots=True)
class Scale:
    scorer: scorer_kills.Plan
    redis: redis_faults.Plan
    gateway: gateway_kill.Plan
    readers: readers.Plan
    property_scale: float


FULL = Scale(
    scorer_kills.Plan(),
    redis_faults.Plan(),
    gateway_kill.Plan(),
    readers.Plan(),
    property_scale=20.0,
)
QUICK = Scale(
    scorer_kills.Plan(submissions=600, players=80, rate=200.0, chunk=20, kill_every=(0.7, 1.4), drain_timeout=30),
    redis_faults.Plan(sockets=20, restart_outage_s=1.0, down_s=3.0, frozen_s=3.0, wait_snapshot_s=10.0),
    gateway_kill.Plan(sockets=60, gateways=2, connect_rate=500.0, max_wait_s=30.0),
    readers.Plan(healthy=20, stalled=10, slow=5, half_open=10, ping_interval_s=1.0, ping_timeout_s=1.0, baseline_s=2.0),
    property_scale=0.2,
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quick", action="store_true", help="every fault at small scale (about 45 s)")
    p.add_argument("--out", help="report path (default docs/reliability.md; with --quick: chaos-quick.md)")
    p.add_argument("--json", help="also write the figures as JSON here")
    p.add_argument("--seed", type=int, default=0, help="random seed of the kills and replays (default: random)")
    p.add_argument(
        "--property-scale", type=float, help="example-count factor of the property tests (default 20; quick 0.2)"
    )
    p.add_argument("--faults", default=",".join(FAULTS), help=f"comma-separated subset of {','.join(FAULTS)}")
    p.add_argument("--time-limit", type=float, default=600.0, help="hard bound on the whole run in seconds")
    p.add_argument("--quiet", action="store_true", help="no live progress line")


async def run_all(args: argparse.Namespace, progress: Progress) -> dict[str, Any]:
    scale = QUICK if args.quick else FULL
    seed = args.seed or random.randrange(1, 2**31)
    rng = random.Random(seed)
    wanted = [f.strip() for f in args.faults.split(",") if f.strip()]
    unknown = set(wanted) - set(FAULTS)
    if unknown:
        raise ValueError(f"unknown fault(s) {', '.join(sorted(unknown))}; choose from {', '.join(FAULTS)}")
    pscale = args.property_scale if args.property_scale is not None else scale.property_scale
    results: dict[str, Any] = {}
    seconds: dict[str, float] = {}
    deadline = time.monotonic() + args.time_limit
    with tempfile.TemporaryDirectory(prefix="chaos-") as tmp:
        work = Path(tmp)
        steps: dict[str, Callable[[], Awaitable[dict[str, Any]]]] = {
            "scorer": lambda: scorer_kills.run(work, scale.scorer, rng, progress.show),
            "redis": lambda: redis_faults.run(work, scale.redis, rng, progress.show),
            "gateway": lambda: gateway_kill.run(work, scale.gateway, progress.show),
            "readers": lambda: readers.run(work, scale.readers, progress.show),
            "properties": lambda: properties.run(pscale, timeout=max(10.0, deadline - time.monotonic())),
        }
        for fault in FAULTS:
            if fault not in wanted:
                continue
            left = deadline - time.monotonic()
            progress.note(f"chaos: {fault} ({left:.0f} s left of --time-limit)")
            t0 = time.monotonic()
            try:
                if left <= 0:
                    raise TimeoutError("not started: --time-limit reached")
                async with asyncio.timeout(left):
                    results[fault] = await steps[fault]()
            except (RuntimeError, OSError, TimeoutError, ValueError) as exc:
                results[fault] = {"error": f"{type(exc).__name__}: {exc}"}
            seconds[fault] = round(time.monotonic() - t0, 1)
            progress.end()
    return {"seed": seed, "quick": bool(args.quick), "seconds": seconds, "results": _plain(results)}


def _plain(value: Any) -> Any:
    """Dataclasses (a Verdict) as dicts, so the report and the JSON see one shape."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _plain(dataclasses.asdict(value))
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def machine() -> dict[str, Any]:
    redis_version = ""
    exe = shutil.which("redis-server")
    if exe:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, check=False).stdout
        redis_version = next((w[2:] for w in out.split() if w.startswith("v=")), "")
    return {
        "cpus": os.cpu_count(),
        "cpu": cpu_model(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "redis": redis_version,
    }


def main(args: argparse.Namespace, argv: list[str]) -> int:
    # the fleets' supervisors log each kill this run makes on purpose: only errors are news here
    logging.getLogger("fleet").setLevel(logging.ERROR)
    progress = Progress(args.quiet)
    started = time.time()
    doc = asyncio.run(run_all(args, progress))
    doc.update(
        command="python -m loadtest " + " ".join(argv),
        started=dt.datetime.fromtimestamp(started, dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        total_s=round(time.time() - started, 1),
        machine=machine(),
    )
    checks = promises(doc["results"])
    doc["promises"] = [dataclasses.asdict(p) for p in checks]
    doc["passed"] = all(p.ok for p in checks)
    out = Path(args.out or ("chaos-quick.md" if args.quick else "docs/reliability.md"))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render(doc, checks))
    if args.json:
        Path(args.json).write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    failed = [p for p in checks if not p.ok]
    print(f"{len(checks) - len(failed)} of {len(checks)} promises kept; report: {out}")
    for p in failed:
        print(f"FAILED  {p.fault}: {p.text} — {p.figure}")
    return 0 if not failed else 1
