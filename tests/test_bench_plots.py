"""``python -m bench.plots`` on small recorded runs written here: every chart whose documents
exist is a PNG, one whose document is missing is skipped saying so, and drawing the same
documents again changes no byte."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from bench import plots, results

pytestmark = pytest.mark.timeout(60)

PNG = b"\x89PNG\r\n\x1a\n"


def target(name: str, scale: float) -> dict[str, object]:
    return {
        "name": name,
        "cpu_ms_per_1k": 9.0 * scale,
        "user_ms_per_1k": 4.0 * scale,
        "rss_kb_per_conn": 7.0 * scale,
        "lat_p50_ms": 50.0 * scale,
        "lat_p99_ms": 100.0 * scale,
        "spread_p50_ms": 60.0 * scale,
        "spread_p99_ms": 90.0 * scale,
    }


# bench.gateway's targets as a run records them (node-ws: the peers' Node.js server with ws)
TARGETS = {"gateway": 1.0, "gateway-broadcast": 1.3, "naive": 2.0, "node-ws": 1.6}


def write_runs(directory: Path) -> None:
    scorer = {"sustained": 30_000.0, "baseline": 3_000.0, "ratio": 10.0, "lag_p99": None}
    results.record("scorer", scorer, cmd="python -m bench.scorer", directory=directory)
    targets = [target(name, scale) for name, scale in TARGETS.items()]
    gateway = {"sockets": 100, "payload_bytes": 1316, "targets": targets}
    results.record("gateway", gateway, cmd="python -m bench.gateway --sockets 100", directory=directory)
    memory = {"clients": 100, "heap_bytes_per_conn": 7000.0, "rss_bytes_per_conn_with_tracemalloc": 11000.0}
    results.record("conn_memory", memory, cmd="python -m bench.conn_memory", directory=directory)


def size(png: bytes) -> tuple[int, int]:
    """Width and height from the PNG's IHDR chunk."""
    assert png[12:16] == b"IHDR"
    width, height = struct.unpack(">II", png[16:24])
    return width, height


def test_charts_are_pngs_a_missing_run_is_skipped_and_a_redraw_is_identical(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs, out = tmp_path / "results", tmp_path / "figures"
    write_runs(runs)
    assert plots.main(["--results", str(runs), "--out", str(out)]) == 0
    said = capsys.readouterr().out
    drawn = {p.name: p.read_bytes() for p in out.iterdir()}
    assert set(drawn) == {"throughput.png", "cpu_per_delivery.png", "latency.png", "memory_per_connection.png"}
    for name, png in drawn.items():
        assert png.startswith(PNG), name
        width, height = size(png)
        assert 400 <= width <= 2000 and 300 <= height <= 1000, (name, width, height)
    assert "skipped rebuild.png: no durable.json or durable-rebuild.json" in said
    assert plots.main(["--results", str(runs), "--out", str(out)]) == 0
    assert {p.name: p.read_bytes() for p in out.iterdir()} == drawn


def test_a_chart_follows_its_figures_and_names_its_run(tmp_path: Path) -> None:
    runs = tmp_path / "results"
    write_runs(runs)
    first = plots.draw(runs, tmp_path / "a")
    assert any("drew" in line and "throughput.png" in line for line in first)
    before = (tmp_path / "a" / "throughput.png").read_bytes()
    results.record("scorer", {"sustained": 40_000.0, "baseline": 3_000.0}, cmd="python -m bench.scorer", directory=runs)
    plots.draw(runs, tmp_path / "b")
    assert (tmp_path / "b" / "throughput.png").read_bytes() != before
    doc = results.load("gateway", runs)
    assert doc is not None and plots.caption(doc).startswith("python -m bench.gateway --sockets 100 · commit ")


def test_the_gateway_charts_show_the_peers_node_ws_server_beside_ours(tmp_path: Path) -> None:
    runs = tmp_path / "results"
    write_runs(runs)
    doc = results.load("gateway", runs)
    assert doc is not None
    docs = {"gateway": doc}
    named = ["gateway (frame once)", "gateway with websockets.broadcast", "naive gateway", "Node ws (peer)"]
    cpu, latency, memory = plots.cpu_per_delivery(docs), plots.latency(docs), plots.memory_per_connection(docs)
    assert cpu is not None and latency is not None and memory is not None
    for panel in [*cpu.panels, *latency.panels, *memory.panels]:
        assert list(panel.categories) == named, panel.title
    assert cpu.panels[0].series["CPU (user + kernel)"][3] == 9.0 * TARGETS["node-ws"]
    assert memory.panels[0].series["RSS"][3] == 7.0 * TARGETS["node-ws"]
