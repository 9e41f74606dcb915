"""The headline charts, drawn from the recorded runs: ``python -m bench.plots``.

Reads the benchmarks' documents in bench/results/ (bench/results.py) and draws, into docs/figures/:

- ``throughput.png``: the scorer's sustained submissions/s against its one-call-per-submission
  baseline (bench.scorer);
- ``cpu_per_delivery.png``: CPU ms per 1,000 deliveries of each bench.gateway target the run
  measured (the floor, a C write() loop; the gateway; its code of main; the gateway fanning out
  with websockets.broadcast; the naive gateway; the peers' Node.js server with ws), with each
  one's user-space share;
- ``latency.png``: publish → arrival and the fan-out spread, p50 and p99 (bench.gateway);
- ``memory_per_connection.png``: RSS per connection of each gateway (bench.gateway) and the
  gateway's Python heap per connection (bench.conn_memory, tracemalloc);
- ``rebuild.png``: the durable log's rebuild speed into an empty Redis (bench.durable).

Each chart names in small print the command and the commit its figures came from. A chart whose
document is missing is skipped, saying so. The PNGs carry no timestamp: drawing the same
documents again changes no byte.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import results
from leaderboard.settings import argument_parser
from loadtest import charts
from loadtest.charts import Panel, number

FIGURES = results.ROOT / "docs" / "figures"
Doc = Mapping[str, Any]

# bench.gateway's targets, in the charts' order, with the names a reader knows them by
TARGETS = {
    "floor": "floor (a C write() loop)",
    "gateway": "gateway (frame once)",
    "gateway@main": "gateway, code of main",
    "gateway-broadcast": "gateway with websockets.broadcast",
    "naive": "naive gateway",
    "gateway-keepalive": "gateway with a keepalive task per socket",
    "node-ws": "Node ws (peer)",
}


@dataclass(frozen=True)
class Chart:
    """What one PNG shows: a title, its panels, and the runs its figures came from."""

    title: str
    panels: list[Panel]
    sources: list[Doc]


def caption(doc: Doc) -> str:
    """The small print under a chart: the command, the commit, the machine and how busy it was
    (other work shares its cores)."""
    machine = doc.get("machine", {})
    where = f"{machine.get('cores', '?')} cores, {machine.get('cpu') or 'unknown CPU'}"
    if load := machine.get("load_average"):
        where += f", load average {load[0]:g} at the end"
    return f"{doc.get('command', '?')} · commit {doc.get('commit', '?')} · {where}"


def throughput(docs: Mapping[str, Doc]) -> Chart | None:
    doc = docs.get("scorer")
    if doc is None:
        return None
    f = doc["figures"]
    ratio = number(f.get("ratio"))
    panel = Panel(
        "stream → one FCALL per batch → ack, 3 windows, ~10 % replayed ids",
        ["scorer (a batch per call)", "baseline (one call per submission)"],
        {"submissions/s": [number(f["sustained"]), number(f["baseline"])]},
        "submissions per second",
        notes=[f"{ratio:.1f}× the baseline, same run"] if math.isfinite(ratio) else [],
    )
    return Chart("Scorer throughput", [panel], [doc])


def _targets(doc: Doc) -> list[Doc]:
    """bench.gateway's targets in the charts' order (a target run twice: its first run)."""
    by_name: dict[str, Doc] = {}
    for target in doc["figures"]["targets"]:
        by_name.setdefault(target["name"], target)
    return [by_name[name] for name in TARGETS if name in by_name]


def _labels(targets: list[Doc]) -> list[str]:
    return [TARGETS[t["name"]] for t in targets]


def cpu_per_delivery(docs: Mapping[str, Doc]) -> Chart | None:
    doc = docs.get("gateway")
    if doc is None:
        return None
    targets = _targets(doc)
    f = doc["figures"]
    panel = Panel(
        f"{f['sockets']:,} sockets, a {f['payload_bytes']:,}-byte snapshot a second",
        _labels(targets),
        {"CPU (user + kernel)": [number(t["cpu_ms_per_1k"]) for t in targets]},
        "gateway CPU ms per 1,000 deliveries",
        shares=[number(t["user_ms_per_1k"]) for t in targets],
        share_label="of which user space",
        decimals=1,
    )
    return Chart("Gateway CPU per delivery (lower is better)", [panel], [doc])


def latency(docs: Mapping[str, Doc]) -> Chart | None:
    doc = docs.get("gateway")
    if doc is None:
        return None
    targets = _targets(doc)
    labels = _labels(targets)
    arrival = Panel(
        "publish → arrival (kernel receive time)",
        labels,
        {"p50": [number(t["lat_p50_ms"]) for t in targets], "p99": [number(t["lat_p99_ms"]) for t in targets]},
        "ms",
    )
    spread = Panel(
        "spread: first to last socket, per snapshot",
        labels,
        {
            "p50": [number(t["spread_p50_ms"]) for t in targets],
            "p99": [number(t["spread_p99_ms"]) for t in targets],
        },
        "ms",
    )
    return Chart(f"Snapshot latency at {doc['figures']['sockets']:,} sockets", [arrival, spread], [doc])


def memory_per_connection(docs: Mapping[str, Doc]) -> Chart | None:
    gateway, heap = docs.get("gateway"), docs.get("conn_memory")
    panels, sources = [], []
    if gateway is not None:
        targets = _targets(gateway)
        panels.append(
            Panel(
                f"RSS per connection, {gateway['figures']['sockets']:,} sockets (bench.gateway)",
                _labels(targets),
                {"RSS": [number(t["rss_kb_per_conn"]) for t in targets]},
                "KB per connection",
                decimals=1,
            )
        )
        sources.append(gateway)
    if heap is not None:
        f = heap["figures"]
        tasks = number(f.get("tasks_per_conn"))
        panels.append(
            Panel(
                f"Python heap, {f['clients']:,} idle sockets (bench.conn_memory)",
                ["Python heap (tracemalloc)"],
                {"KB": [number(f["heap_bytes_per_conn"]) / 1024]},
                "KB per connection",
                decimals=1,
                notes=[f"{tasks:.2f} asyncio tasks per connection"] if math.isfinite(tasks) else [],
            )
        )
        sources.append(heap)
    return Chart("Memory per connection", panels, sources) if panels else None


def rebuild(docs: Mapping[str, Doc]) -> Chart | None:
    doc = docs.get("durable") or docs.get("durable-rebuild")
    if doc is None:
        return None
    f = doc["figures"]
    speeds: dict[str, list[float]] = f["rebuild_per_s"]
    rounds = max(len(runs) for runs in speeds.values())
    panel = Panel(
        f"{f['submissions']:,} submissions of {f['players']:,} players from SQLite, {f['workers']} workers",
        list(speeds),
        {
            f"run {i + 1}": [number(runs[i]) if i < len(runs) else math.nan for runs in speeds.values()]
            for i in range(rounds)
        },
        "submissions restored per second",
    )
    return Chart("Durable log: rebuild into an empty Redis", [panel], [doc])


# file -> (the documents it is drawn from, the chart)
CHARTS: dict[str, tuple[tuple[str, ...], Callable[[Mapping[str, Doc]], Chart | None]]] = {
    "throughput.png": (("scorer",), throughput),
    "cpu_per_delivery.png": (("gateway",), cpu_per_delivery),
    "latency.png": (("gateway",), latency),
    "memory_per_connection.png": (("gateway", "conn_memory"), memory_per_connection),
    "rebuild.png": (("durable", "durable-rebuild"), rebuild),
}


def draw(source: Path, out: Path) -> list[str]:
    """Draw every chart whose documents are in ``source`` into ``out``; one line per chart."""
    lines = []
    for filename, (names, build) in CHARTS.items():
        docs = {name: doc for name in names if (doc := results.load(name, source)) is not None}
        chart = build(docs)
        if chart is None:
            wanted = " or ".join(f"{name}.json" for name in names)
            lines.append(f"skipped {filename}: no {wanted} in {source}")
            continue
        out.mkdir(parents=True, exist_ok=True)
        image = charts.png(chart.title, chart.panels, [caption(doc) for doc in chart.sources])
        (out / filename).write_bytes(image)
        lines.append(f"drew {out / filename} ({len(image):,} bytes)")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argument_parser("python -m bench.plots", __doc__ or "")
    p.add_argument("--results", type=Path, default=results.RESULTS, help="the recorded runs' directory")
    p.add_argument("--out", type=Path, default=FIGURES, help="where the PNGs go")
    args = p.parse_args(argv)
    if not charts.available():
        print("the charts need matplotlib (pip install -e '.[dev]')", file=sys.stderr)
        return 1
    print("\n".join(draw(args.results, args.out)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
