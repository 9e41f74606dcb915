"""``python -m loadtest --url`` through a real haproxy: what listens on the URL's port is not a
gateway, so no gateway figure is taken from it, and every row that cannot be measured says why."""

from __future__ import annotations

import asyncio
import html
import re
import sys
from pathlib import Path

import orjson
import pytest

from fleet.supervisor import Fleet, FleetSettings
from loadtest.procstat import runs_gateway

from .test_balancer import needs_haproxy

UNMEASURED = (
    "gateway CPU ms / 1k deliveries",
    "gateway CPU % (all processes)",
    "gateway RSS KB / connection",
    "gateways waiting for a core (run queue), % of a core",
    "gateway socket writes / messages delivered (their /metrics)",
    "own-rank pushes (gateways), lag p50 / p99 (the 50 ms bucket holding it) / mean s",
    "gateways: snapshot ts → fan-out start p50 / p99, one tick's write p50 / p99 (buckets) s",
    "gateways: snapshot ts → written to every socket, p50 / p99 / max (buckets) s, tick-writes",
    "gateways: GC pauses (ms, longest ≤ s), of which full (ms)",
)


def test_a_gateway_is_told_by_its_command_line() -> None:
    assert runs_gateway(["/usr/bin/python3", "-m", "gateway"])
    assert runs_gateway(["python", "-X", "dev", "-mgateway.__main__"])
    assert not runs_gateway(["haproxy", "-f", "/tmp/haproxy.cfg", "-db"])
    assert not runs_gateway(["python", "-m", "bench.naive_gateway", "--port", "1"])
    assert not runs_gateway(["python", "-m", "scorer"]) and not runs_gateway([])


async def loadtest(*argv: str, cwd: Path) -> tuple[int, str]:
    pipe = asyncio.subprocess.PIPE
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "loadtest", *argv, cwd=cwd, stdout=pipe, stderr=pipe
    )
    _, err = await asyncio.wait_for(proc.communicate(), 100)
    assert proc.returncode is not None
    return proc.returncode, err.decode()


@pytest.mark.slow
@needs_haproxy
@pytest.mark.timeout(120)
async def test_through_haproxy_the_gateway_rows_say_they_cannot_be_measured(tmp_path: Path, redis_url: str) -> None:
    settings = FleetSettings(
        redis_url=redis_url,
        data_dir=tmp_path,
        port=0,
        gateways=1,
        demo_tokens=False,
        log_level="WARNING",
        balancer="haproxy",
        env=(("LB_GAME", "balanced"),),
    )
    async with Fleet(settings) as fleet:
        (lb,) = [b.proc.pid for b in fleet.balancers if b.proc is not None]
        target = ["--url", fleet.ws_url, "--redis-url", fleet.redis_url, "--game", "balanced"]
        target += ["--quiet", "--time-limit", "90"]
        # haproxy named as a gateway is refused, before anything is written
        code, err = await loadtest("sockets", *target, "--gateway-pid", str(lb), cwd=tmp_path)
        assert code == 1 and f"process {lb} is not a gateway (python -m gateway): it runs haproxy" in err

        stem = tmp_path / "run"
        run = ["sockets", *target, "--sockets", "30", "--duration", "2", "--out", str(stem)]
        code, err = await loadtest(*run, cwd=tmp_path)
        assert code == 0, err
    f = orjson.loads(stem.with_suffix(".json").read_bytes())["figures"]["gateway"]
    assert f["snapshots"] >= 1 and f["lost"] == 0, "the run itself went through haproxy"
    assert f["gateway_pids"] == [] and f["gateway_cpu_ms_per_1k_deliveries"] is None
    assert f["gateway_rss_kb_per_conn"] is None and f["gateway_cpu_pct"] is None
    assert f["gateways_unmeasured"] == (
        f"not available with --url: port {fleet.port} is held by haproxy (pid {lb}), not a gateway; give the "
        "gateways' PIDs with --gateway-pid"
    )
    rows = {
        html.unescape(k): html.unescape(v)
        for k, v in re.findall(r"<tr><th>(.*?)</th><td>(.*?)</td></tr>", stem.with_suffix(".html").read_text())
    }
    for label in UNMEASURED:
        assert rows[label].startswith("not available with --url: "), (label, rows[label])
    assert not [k for k, v in rows.items() if v in ("–", "nan") or "nan" in v.split()], rows
