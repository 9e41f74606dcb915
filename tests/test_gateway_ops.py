"""Operations: health, readiness, metrics, static files, drain, SIGTERM on `python -m gateway`."""

from __future__ import annotations

import asyncio
import gc
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
from websockets.asyncio.client import ClientConnection, connect

from fleet.redis_server import free_port
from gateway.__main__ import tune_gc
from gateway.metrics import Metrics
from gateway.server import Gateway
from gateway.settings import GatewaySettings

from .conftest import until
from .gw_helpers import T, announced_close, client, greet, http_get, request, running, settings, url

ROOT = Path(__file__).resolve().parent.parent


async def test_health_readiness_metrics_and_static_files(redis_url: str, tmp_path: Path) -> None:
    (tmp_path / "app.js").write_text("export const hi = 1;\n")
    async with running(redis_url, static_dir=tmp_path) as gw:
        assert (await http_get(gw.port, "/healthz"))[0] == 200
        assert (await http_get(gw.port, "/readyz"))[:1] == (200,)
        status, headers, body = await http_get(gw.port, "/app.js")
        assert status == 200 and headers["content-type"].startswith("text/javascript") and b"hi" in body
        # the JS package's module, wherever the page's files come from
        status, headers, body = await http_get(gw.port, "/client.js")
        assert status == 200 and body == (ROOT / "clients/js/src/client.js").read_bytes()
        assert (await http_get(gw.port, "/"))[0] == 404  # no index.html written yet
        assert (await http_get(gw.port, "/elsewhere"))[0] == 404
        async with client(gw) as ws:
            await greet(ws)
            await request(ws, {"type": "nope"})
            assert gw.metrics_port is not None
            status, headers, body = await http_get(gw.metrics_port, "/metrics")
        assert status == 200 and headers["content-type"].startswith("text/plain")
        text = body.decode()
        for line in ("lb_gw_connections 1.0", "lb_gw_accepted_total 1.0", "lb_gw_bad_input_total 1.0",
                     "lb_gw_redis_up 1.0", "lb_gw_deliveries_total", "lb_gw_broadcast_seconds_bucket",
                     "lb_gw_pubsub_lag_seconds_bucket", "lb_gw_written_lag_seconds_bucket",
                     "lb_gw_rank_push_seconds_bucket",
                     "lb_gw_redis_errors_total 0.0", "lb_gw_draining 0.0"):  # fmt: skip
            assert line in text, line


async def test_the_page_and_its_files_are_served(redis_url: str) -> None:
    async with running(redis_url) as gw:  # the real gateway/static folder
        for path, kind, needle in (("/", "text/html", b"<table"), ("/client.js", "text/javascript", b"Backoff"),
                                   ("/app.js", "text/javascript", b"LeaderboardClient"),
                                   ("/style.css", "text/css", b"@media")):  # fmt: skip
            status, headers, body = await http_get(gw.port, path)
            assert status == 200 and headers["content-type"].startswith(kind) and needle in body, path
        assert (await http_get(gw.port, "/demo-token"))[0] == 404  # off unless configured


async def test_demo_tokens_when_enabled(redis_url: str) -> None:
    async with running(redis_url, demo_tokens=True, demo_players=5) as gw:
        status, headers, body = await http_get(gw.port, "/demo-token")
        assert status == 200 and headers["content-type"] == "application/json"
        data = orjson.loads(body)
        assert data["player"] in {f"player{i}" for i in range(5)}
        async with client(gw) as ws:
            await greet(ws)
            welcome = await request(ws, {"type": "hello", "token": data["token"]})
            assert (welcome["type"], welcome["player"], welcome["role"]) == ("welcome", data["player"], "player")


async def test_drain_fails_readiness_then_closes_in_staggered_batches_with_1012(redis_url: str) -> None:
    drain = {"drain_delay": 0.3 * T, "drain_window": 0.5 * T, "drain_batches": 5}
    async with running(redis_url, **drain) as gw:
        sockets: list[ClientConnection] = [await connect(url(gw), open_timeout=2 * T) for _ in range(10)]
        for ws in sockets:
            await greet(ws)
        closed_at: list[float] = []

        async def watch(ws: ClientConnection) -> None:
            assert await announced_close(ws, 5 * T) == (1012, "draining; reconnect")
            closed_at.append(time.monotonic())

        watchers = [asyncio.create_task(watch(ws)) for ws in sockets]
        task = asyncio.create_task(gw.drain())
        await until(lambda: gw.draining, 2 * T)
        status, _, body = await http_get(gw.port, "/readyz")
        assert (status, body) == (503, b"draining\n")
        async with asyncio.timeout(5 * T):
            await task
            await asyncio.gather(*watchers)
        # five batches over 0.5 s: the first and last close are at least ~0.4 s apart
        assert max(closed_at) - min(closed_at) >= 0.3 * T
        with pytest.raises(OSError):
            await http_get(gw.port, "/healthz")  # the listener is gone


async def test_a_stop_without_the_drain_announces_its_1012(redis_url: str) -> None:
    async with running(redis_url) as gw:
        sockets = [await connect(url(gw), open_timeout=2 * T) for _ in range(2)]
        for ws in sockets:
            await greet(ws)
        closing = asyncio.create_task(gw.close())
        closes = await asyncio.gather(*(announced_close(ws) for ws in sockets))
        await closing
    assert closes == [(1012, "draining; reconnect")] * 2


async def test_sigterm_drains_then_exits_0_and_a_second_signal_exits_at_once(redis_url: str) -> None:
    port = free_port()
    env = {
        **os.environ, "LB_REDIS_URL": redis_url, "LB_GAME": "test", "LB_GW_PORT": str(port),
        "LB_GW_DRAIN_DELAY": "0.1", "LB_GW_DRAIN_WINDOW": "0.2", "LB_LOG_LEVEL": "WARNING",
    }  # fmt: skip
    for second_signal in (False, True):
        if second_signal:
            env["LB_GW_DRAIN_WINDOW"] = "30"  # a long drain the second signal cuts short
        proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "gateway", cwd=ROOT, env=env)
        try:
            async with asyncio.timeout(10 * T):
                while True:
                    try:
                        if (await http_get(port, "/readyz"))[0] == 200:
                            break
                    except OSError:
                        pass
                    await asyncio.sleep(0.05)
            async with connect(f"ws://127.0.0.1:{port}/ws", open_timeout=2 * T) as ws:
                await greet(ws)
                proc.send_signal(signal.SIGTERM)
                if second_signal:

                    async def draining() -> bool:
                        try:
                            return (await http_get(port, "/readyz"))[0] == 503
                        except OSError:  # the listener closed: the drain is past its start
                            return True

                    await until(draining, 5 * T)  # the second signal reaches a drain under way
                    proc.send_signal(signal.SIGTERM)
                    assert await asyncio.wait_for(proc.wait(), 5 * T) == 1
                else:
                    await asyncio.wait_for(ws.wait_closed(), 5 * T)
                    assert ws.close_code == 1012
                    assert await asyncio.wait_for(proc.wait(), 5 * T) == 0
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()


async def test_listen_backlog_and_settings_from_env(redis_url: str) -> None:
    env = {"LB_GW_BACKLOG": "777", "LB_GW_FANOUT_THREADS": "2", "LB_GW_GC_THRESHOLD": "0"}
    s = GatewaySettings.from_env(env)
    assert (s.backlog, s.fanout_threads, s.gc_threshold) == (777, 2, 0)
    for bad in ({"LB_GW_BACKLOG": "0"}, {"LB_GW_FANOUT_THREADS": "0"}, {"LB_GW_GC_THRESHOLD": "-1"}):
        with pytest.raises(ValueError):
            GatewaySettings.from_env(bad)
    with pytest.raises(ValueError, match="LB_GW_BACKLOG='lots'"):  # names the variable at fault
        GatewaySettings.from_env({"LB_GW_BACKLOG": "lots"})
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway", cwd=ROOT, env={**os.environ, "LB_GW_BACKLOG": "lots"},
        stderr=subprocess.PIPE,
    )  # fmt: skip
    _, err = await proc.communicate()
    assert proc.returncode == 2 and err.decode().startswith("configuration error: LB_GW_BACKLOG='lots'")
    if shutil.which("ss") is None:
        pytest.skip("ss (iproute2) is not installed")
    async with running(redis_url, backlog=777) as gw:
        ss = await asyncio.create_subprocess_exec("ss", "-ltnH", f"sport = :{gw.port}", stdout=subprocess.PIPE)
        out, _ = await ss.communicate()
    assert out.split()[2] == b"777"  # a listening socket's Send-Q is its accept queue's size


def test_tune_gc_raises_the_threshold_and_times_every_collection() -> None:
    before = gc.get_threshold()
    metrics = Metrics()
    try:
        tune_gc(12_345, metrics)
        assert gc.get_threshold() == (12_345, *before[1:])
        gc.collect()
        text = metrics.render().decode()
        assert 'lb_gw_gc_pause_seconds_count{generation="2"}' in text
    finally:
        gc.callbacks.pop()
        gc.unfreeze()
        gc.set_threshold(*before)


async def test_a_gateway_listens_once_its_games_can_serve(redis_url: str) -> None:
    """With SO_REUSEPORT a new process gets connections the moment it listens: a socket that
    arrives as soon as start() returns is admitted, not refused as "game unavailable"."""
    gw = Gateway(settings(redis_url))
    try:
        await gw.start()
        async with client(gw) as ws:
            welcome, _ = await greet(ws)
            assert welcome["type"] == "welcome"
    finally:
        await gw.close()
