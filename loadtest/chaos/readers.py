"""Fault 4: stalled readers, slow readers and half-open connections on one gateway, next to
healthy sockets. Each kind comes from its own loopback source address, so the gateway's side of
its connections can be counted in /proc/net/tcp: a connection is freed when the gateway's end of
it is no longer ESTABLISHED.

* stalled: raw sockets with a tiny receive buffer that complete the handshake and never read;
* slow: the same, reading 64 bytes a second (never answering a ping);
* half-open: a load-test client process SIGSTOPped with its sockets open — the kernel keeps
  acknowledging, nothing answers: to the gateway a peer that vanished without a FIN.

The healthy sockets' snapshot latency is compared before and while the bad ones hang on."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from leaderboard import GameConfig, connect

from .. import frames
from ..flood import Flood, Source
from ..procstat import usage
from ..stats import summary
from ..swarm import Swarm
from .rig import chaos_fleet

STALLED, SLOW = "127.0.0.61", "127.0.0.62"
SLACK_S = 1.0  # the sweep runs every min(interval, timeout) / 4; a loaded machine adds a little


@dataclass(frozen=True, slots=True)
class Plan:
    healthy: int = 500
    stalled: int = 300
    slow: int = 100
    half_open: int = 300
    ping_interval_s: float = 2.0
    ping_timeout_s: float = 2.0
    baseline_s: float = 8.0
    feed_rate: float = 50.0


def established(port: int, source: str) -> int:
    """Connections on the gateway's ``port`` from ``source`` the gateway still holds open."""
    want_local = f"{_hex_ip('127.0.0.1')}:{port:04X}"
    want_remote = _hex_ip(source)
    count = 0
    with contextlib.suppress(OSError):
        for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
            cols = line.split()
            if cols[1] == want_local and cols[2].split(":")[0] == want_remote and cols[3] == "01":
                count += 1
    return count


def _hex_ip(ip: str) -> str:
    return "".join(f"{int(b):02X}" for b in reversed(ip.split(".")))


async def _raw_socket(port: int, source: str, read_rate: int) -> socket.socket:
    """A handshaken WebSocket that (almost) never reads: receive buffer as small as the kernel allows."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
    sock.bind((source, 0))
    sock.setblocking(False)
    loop = asyncio.get_running_loop()
    await loop.sock_connect(sock, ("127.0.0.1", port))
    await loop.sock_sendall(sock, frames.handshake("127.0.0.1", "/ws"))
    if read_rate:
        await loop.sock_recv(sock, 64)  # the 101's first bytes: the server accepted it
    return sock


async def run(tmp: Path, plan: Plan, say: Any) -> dict[str, Any]:
    interval, timeout = plan.ping_interval_s, plan.ping_timeout_s
    env = {
        "LB_GW_PING_INTERVAL": str(interval),
        "LB_GW_PING_TIMEOUT": str(timeout),
        "LB_GW_STALL_TIMEOUT": str(timeout),
        "LB_GW_WINDOW": "weekly",
    }
    bound = interval + timeout + SLACK_S
    async with chaos_fleet(tmp, "readers", gateways=1, env=env) as target:
        fleet = target.fleet
        assert fleet is not None
        gw_pid, port = fleet.gateways[0].pid, fleet.port
        config = GameConfig(game=target.game)
        redis = connect(target.redis_url)
        flood = Flood(redis, config, Source(players=2_000, op="incr", seed=4), rate=plan.feed_rate)
        healthy = Swarm(target.ws_url, sockets=plan.healthy, rate=1000, first_source=70)
        sick = Swarm(target.ws_url, sockets=plan.half_open, rate=1000, first_source=90)
        raw: list[socket.socket] = []
        rss: list[tuple[float, int]] = []
        stopped = False
        readers: list[asyncio.Task[None]] = []
        try:
            flood.start()
            await healthy.start()
            if not await healthy.wait_open(30, want=plan.healthy):
                raise RuntimeError("the healthy sockets did not open")
            await asyncio.sleep(1.5)
            rss_start = usage(gw_pid).rss_bytes
            mark = len(healthy.live_lat)
            await asyncio.sleep(plan.baseline_s)
            base_lat = healthy.live_lat[mark:]
            say("readers: opening stalled, slow and half-open sockets")
            await sick.start()
            if not await sick.wait_open(30, want=plan.half_open):
                raise RuntimeError("the half-open clients did not open")
            t_open = time.monotonic()
            raw += await asyncio.gather(*(_raw_socket(port, STALLED, 0) for _ in range(plan.stalled)))
            t_stalled = time.monotonic()
            slow = await asyncio.gather(*(_raw_socket(port, SLOW, 64) for _ in range(plan.slow)))
            raw += slow
            t_slow = time.monotonic()

            async def trickle(sock: socket.socket) -> None:
                loop = asyncio.get_running_loop()
                with contextlib.suppress(OSError):
                    while await loop.sock_recv(sock, 64):  # noqa: ASYNC110 (the reading pace is the point)
                        await asyncio.sleep(1.0)

            readers = [asyncio.create_task(trickle(s)) for s in slow]
            [sick_pid] = [p.pid for p in sick.procs]
            os.kill(sick_pid, signal.SIGSTOP)
            stopped = True
            t_stop = time.monotonic()
            mark = len(healthy.live_lat)
            sources = {"stalled": (STALLED, t_stalled), "slow": (SLOW, t_slow), "half_open": (sick.sources[0], t_stop)}
            held = {k: established(port, src) for k, (src, _) in sources.items()}
            freed_after: dict[str, float] = {}
            deadline = time.monotonic() + bound * 3 + 5
            while time.monotonic() < deadline and len(freed_after) < len(sources):
                rss.append((time.monotonic() - t_open, usage(gw_pid).rss_bytes))
                for kind, (src, t0) in sources.items():
                    if kind not in freed_after and established(port, src) == 0:
                        freed_after[kind] = round(time.monotonic() - t0, 2)
                say(f"readers: freed {sorted(freed_after)}")
                await asyncio.sleep(0.1)
            await asyncio.sleep(1.0)
            bad_lat = healthy.live_lat[mark:]
            rss_end = usage(gw_pid).rss_bytes
            end = await healthy.report([], since=time.time())
        finally:
            for task in readers:
                task.cancel()
            await asyncio.gather(*readers, return_exceptions=True)
            for sock in raw:
                sock.close()
            if stopped:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(sick_pid, signal.SIGCONT)
            await sick.close()
            await healthy.close()
            await flood.stop()
            await redis.aclose()
    base, bad = summary(base_lat), summary(bad_lat)
    peak = max((r for _, r in rss), default=rss_end)
    return {
        "plan": {"healthy": plan.healthy, "stalled": plan.stalled, "slow": plan.slow, "half_open": plan.half_open,
                 "ping_interval_s": interval, "ping_timeout_s": timeout, "bound_s": bound},
        "held_at_start": held,
        "freed_after_s": freed_after,
        "all_freed": len(freed_after) == len(sources),
        "freed_within_bound": all(freed_after.get(k, 1e9) <= bound for k in ("stalled", "half_open")),
        "healthy_latency_ms_before": base,
        "healthy_latency_ms_during": bad,
        "healthy_dropped": sum(r["drops"] for r in end),
        "healthy_open_at_end": sum(r["eligible"] for r in end),
        "rss_mb": {"start": round(rss_start / 2**20, 1), "peak": round(peak / 2**20, 1),
                   "end": round(rss_end / 2**20, 1)},
    }  # fmt: skip
