"""What Prometheus scraping costs the fleet: ``python -m bench.scrape``.

Starts a fleet (a private redis-server, the scorer, two gateways, an HTTP API; one submission
applied so that every series exists), then alternates, ``--rounds`` times, a window of
``--window`` seconds with nothing scraping (the baseline: the processes' own idle work, ticks
and heartbeats) and one with Debian's Prometheus scraping every process every ``--interval``
(the jobs of deploy/prometheus/compose.yml, the alert rules loaded). Each process's CPU time
(its CPU clock, every thread) is read at both ends of each window; a scrape's cost is the CPU a
scraped window took beyond the same length of baseline, over the scrapes Prometheus made of that
process in it. Prints, per process kind, the CPU per scrape, the /metrics body's size, and what
a production interval (15 s) costs as a share of a core.

Unless ``--no-write``, the figures are recorded in bench/results/scrape.json.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import httpx

from bench import results
from fleet.prometheus_server import PrometheusServer, targets_of
from fleet.redis_server import RedisServer
from fleet.supervisor import Fleet, FleetSettings
from leaderboard.auth import issue
from leaderboard.settings import argument_parser
from loadtest.procstat import usage

SECRET = "a-scrape-benchmark-secret-of-32-bytes!"
PRODUCTION_INTERVAL_S = 15.0


def processes(fleet: Fleet) -> dict[str, tuple[str, int]]:
    """``job/host:port`` of each process's /metrics -> (its kind, its pid)."""
    assert fleet.scorer is not None
    pids = {"leaderboard-scorer": [fleet.scorer.pid], "leaderboard-gateway": [p.pid for p in fleet.gateways]}
    pids["leaderboard-api"] = [p.pid for p in fleet.apis]
    out = {}
    for job, targets in targets_of(fleet).items():
        for target, pid in zip(targets, pids[job], strict=True):
            out[f"{job}/{target}"] = (job.removeprefix("leaderboard-"), pid)
    return out


def cpu(pids: dict[str, tuple[str, int]]) -> dict[str, float]:
    return {target: usage(pid).cpu_s for target, (_, pid) in pids.items()}


def body_bytes(target: str) -> int:
    with urllib.request.urlopen(f"http://{target.split('/', 1)[1]}/metrics", timeout=10) as resp:
        return len(resp.read())


async def applied_one(fleet: Fleet) -> None:
    server = {"Authorization": "Bearer " + issue("game-1", "server", SECRET, exp=time.time() + 600)}
    async with httpx.AsyncClient(base_url=fleet.api_url, timeout=10) as http:
        slip = {"player_id": "mia", "score": 1200, "match_id": "bench-1"}
        resp = await http.post("boards/global/scores", params={"wait": "applied"}, json=slip, headers=server)
        assert resp.status_code in (200, 202), resp.text
        await http.get("boards/global/top")


async def measure(fleet: Fleet, rounds: int, window: float, interval: str) -> dict[str, Any]:
    """The figures, on a running fleet."""
    pids = processes(fleet)
    idle: dict[str, list[float]] = {t: [] for t in pids}
    scraped: dict[str, list[float]] = {t: [] for t in pids}
    scrapes: dict[str, list[int]] = {t: [] for t in pids}
    prometheus_cpu: list[float] = []
    for _ in range(rounds):
        before = cpu(pids)
        await asyncio.sleep(window)  # the baseline: nothing scrapes
        after = cpu(pids)
        for t in pids:
            idle[t].append(after[t] - before[t])
        with PrometheusServer(targets_of(fleet), interval=interval) as prom:
            await asyncio.to_thread(prom.wait_scraped, 1)
            assert prom.process is not None
            counted, before, prom_before = prom.scrapes(), cpu(pids), usage(prom.process.pid).cpu_s
            await asyncio.sleep(window)
            after, prom_after, counted_after = cpu(pids), usage(prom.process.pid).cpu_s, prom.scrapes()
        prometheus_cpu.append((prom_after - prom_before) / max(1, sum(counted_after.values()) - sum(counted.values())))
        for t in pids:
            scraped[t].append(after[t] - before[t])
            scrapes[t].append(counted_after[t] - counted[t])
    sizes = {t: body_bytes(t) for t in pids}
    per_process = {}
    for t, (kind, _) in pids.items():
        # each round's scraped window less the same round's baseline, per scrape
        costs = [(s - i) / n for s, i, n in zip(scraped[t], idle[t], scrapes[t], strict=True) if n]
        per_process[t] = {
            "kind": kind,
            "cpu_us_per_scrape": statistics.median(costs) * 1e6,
            "cpu_us_per_scrape_rounds": [round(c * 1e6, 1) for c in costs],
            "idle_cpu_ms_per_s": statistics.median(idle[t]) / window * 1000,
            "scrapes_per_window": statistics.median(scrapes[t]),
            "metrics_bytes": sizes[t],
        }
    return {
        "rounds": rounds,
        "window_s": window,
        "interval": interval,
        "processes": per_process,
        "prometheus_cpu_us_per_scrape": statistics.median(prometheus_cpu) * 1e6,
    }


def main(argv: list[str] | None = None) -> int:
    p = argument_parser("python -m bench.scrape", __doc__ or "")
    p.add_argument("--rounds", type=int, default=5, help="baseline and scraped windows, alternated")
    p.add_argument("--window", type=float, default=10.0, help="seconds of each window")
    p.add_argument("--interval", default="100ms", help="Prometheus's scrape interval while scraping")
    results.add_no_write(p)
    args = p.parse_args(argv)
    if args.rounds < 1 or args.window <= 0:
        p.error("--rounds must be at least 1 and --window above 0")

    async def run(data: Path, redis_url: str) -> dict[str, Any]:
        settings = FleetSettings(
            redis_url=redis_url, data_dir=data, port=0, gateways=2, apis=1, demo_tokens=False,
            log_level="WARNING", jwt_secret=SECRET,
        )  # fmt: skip
        async with Fleet(settings) as fleet:
            await applied_one(fleet)
            return await measure(fleet, args.rounds, args.window, args.interval)

    with tempfile.TemporaryDirectory(prefix="bench-scrape-") as data, RedisServer(Path(data) / "redis") as redis:
        figures = asyncio.run(run(Path(data) / "fleet", redis.url))
    print(
        f"Prometheus scraping every process every {args.interval}: CPU per scrape beyond the same window "
        f"unscraped (median of {args.rounds} rounds of {args.window:g} s)"
    )
    at = f"at {PRODUCTION_INTERVAL_S:g} s: % of a core"
    print(f"| process | CPU µs per scrape | /metrics bytes | idle CPU ms/s | {at} |")
    print("|---|---|---|---|---|")
    procs = figures["processes"]
    assert isinstance(procs, dict)
    for target, f in procs.items():
        share = f["cpu_us_per_scrape"] / 1e6 / PRODUCTION_INTERVAL_S * 100
        print(
            f"| {f['kind']} {target.split('/', 1)[1]} | {f['cpu_us_per_scrape']:.0f} | {f['metrics_bytes']} | "
            f"{f['idle_cpu_ms_per_s']:.2f} | {share:.4f} |"
        )
    print(f"Prometheus itself: {figures['prometheus_cpu_us_per_scrape']:.0f} µs of CPU per scrape")
    results.save("scrape", figures, args, module="bench.scrape", argv=argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
