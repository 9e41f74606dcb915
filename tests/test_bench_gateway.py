"""``python -m bench.gateway`` at a small scale, on its baselines: the Node.js server with ws
(bench/node_gateway/server.js) accepts every socket and forwards every published snapshot to
each of them, and its row is measured from the node process itself; so do the C floor
(bench/floor/floor.c) and a revision's gateway (``gateway@REV``)."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from bench import gateway, gateway_report, results
from loadtest import procstat

pytestmark = pytest.mark.timeout(120)


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed (the node-ws target needs it)")
def test_node_ws_delivers_every_snapshot_to_every_socket(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    why = gateway.node_ready()  # installs ws with npm ci when node_modules is missing
    if why is not None:
        pytest.skip(f"node-ws cannot run here: {why}")
    monkeypatch.setattr(results, "RESULTS", tmp_path)
    measured: set[str] = set()  # the programs whose CPU and RSS were read: node itself, no wrapper

    def usage(pid: int) -> procstat.Usage:
        measured.add(os.path.basename(os.readlink(f"/proc/{pid}/exe")))
        return procstat.usage(pid)

    monkeypatch.setattr(gateway, "usage", usage)
    assert gateway.main(["--sockets", "200", "--seconds", "2", "--targets", "node-ws", "--no-write"]) == 0
    out = capsys.readouterr().out
    row = re.search(r"^\| node-ws \| (\d+) \| (\d+)/(\d+) \| \d+ \| ([\d.]+) \(([\d.]+)\) \| ([\d.-]+) \|", out, re.M)
    assert row is not None, out
    sockets, deliveries, expected = int(row[1]), int(row[2]), int(row[3])
    assert sockets == 200 and expected == 200 * 2 and deliveries == expected
    assert "node" in measured and not {"npm", "sh", "bash"} & measured, measured
    assert list(tmp_path.iterdir()) == []  # --no-write


@pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None, reason="no C compiler for the floor")
def test_the_floor_and_a_revisions_gateway_deliver_every_snapshot_to_every_socket(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The C floor, compiled here into a fresh cache, answers the clients' upgrades (their
    Sec-WebSocket-Accept checked) and writes each snapshot to every socket, and so do its
    variants (idle threads, memory visited per socket, a frame on connect); ``gateway@HEAD``
    runs the committed tree's gateway from its own extracted copy."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(results, "RESULTS", tmp_path / "results")
    names = ("floor", "floor-mt", "floor-touch", "floor-greet", "gateway@HEAD")
    argv = ["--sockets", "200", "--seconds", "1", "--targets", ",".join(names), "--no-write"]
    assert gateway.main(argv) == 0
    out = capsys.readouterr().out
    for name in names:
        row = re.search(rf"^\| {re.escape(name)} \| (\d+) \| (\d+)/(\d+) \|", out, re.M)
        assert row is not None, out
        assert (int(row[1]), int(row[2]), int(row[3])) == (200, 200, 200), row[0]
    built = list((tmp_path / "cache" / "leaderboard-bench").iterdir())
    assert len(built) == 1 and built[0].name.startswith("floor-")  # compiled once, outside the tree


@pytest.mark.slow
def test_deltas_in_shared_compressed_frames_deliver_every_snapshot_in_fewer_bytes(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The demo's moving top 10 to sockets that take deltas in compressed frames (their clients
    inflate them and read the version from the base): every snapshot, in under half the bytes."""
    monkeypatch.setattr(gateway, "DEMO_TOPS", [])  # --traffic demo fills it: not for the other tests
    argv = ["--sockets", "200", "--seconds", "3", "--traffic", "demo", "--targets", "gateway-both", "--no-write"]
    assert gateway.main(argv) == 0
    out = capsys.readouterr().out
    row = re.search(r"^\| gateway-both \| (\d+) \| (\d+)/(\d+) \| (\d+) \|", out, re.M)
    assert row is not None, out
    assert (int(row[1]), int(row[2]), int(row[3])) == (200, 600, 600), row[0]
    full = len(gateway.snapshot_bytes(gateway.FIRST + 1))
    assert int(row[4]) < 0.5 * full, (row[4], full)


def _run(name: str, cpu: float, rss: float = 6.0) -> gateway_report.Result:
    return gateway_report.Result(
        name=name, sockets=100, deliveries=1000, expected=1000, cpu_ms_per_1k=cpu, user_ms_per_1k=cpu / 2,
        clients_ms_per_1k=1.0, gc_pauses=0, gc_pause_ms=0.0, rss_kb_per_conn=rss, bytes_per_delivery=800.0,
        spread_p50_ms=1.0,
        spread_p99_ms=2.0, read_spread_p50_ms=1.0, read_spread_p99_ms=2.0, lat_p50_ms=1.0, lat_p99_ms=2.0,
    )  # fmt: skip


def test_each_round_of_a_target_run_twice_keeps_its_own_ratios() -> None:
    """``floor,gateway,naive,floor,gateway,naive``: each round's gateway is set against that
    round's baselines, not the last run of each name against the last of the other."""
    runs = [
        _run("floor", 5.0), _run("gateway", 10.0), _run("naive", 20.0), _run("gateway@main", 12.5),
        _run("floor", 8.0), _run("gateway", 12.0), _run("naive", 15.0), _run("gateway@main", 12.0),
    ]  # fmt: skip
    assert [sorted(by) for by in gateway_report.rounds(runs)] == [["floor", "gateway", "gateway@main", "naive"]] * 2
    assert [by["gateway"].cpu_ms_per_1k for by in gateway_report.rounds(runs)] == [10.0, 12.0]
    text = gateway_report.ratios(runs)
    assert "round 1: CPU per delivery: gateway / naive = **0.50×**" in text, text
    assert "round 2: CPU per delivery: gateway / naive = **0.80×**" in text, text
    summary = gateway_report.against_floor_and_baselines(runs)
    # pooled over both rounds (22 / 13 ms per 1k), then each round on its own
    assert "gateway / floor (a C sender's write() loop), CPU per delivery: **1.69×**" in summary, summary
    assert "by round 2.00×, 1.50×" in summary, summary
    assert "by round 0.80×, 1.00×" in summary, summary  # gateway against gateway@main


def test_a_single_round_is_not_labelled() -> None:
    text = gateway_report.ratios([_run("gateway", 10.0), _run("naive", 20.0)])
    assert "- CPU per delivery: gateway / naive = **0.50×**" in text and "round" not in text
    assert "by round" not in gateway_report.against_floor_and_baselines([_run("floor", 5.0), _run("gateway", 6.0)])
