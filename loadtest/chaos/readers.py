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

from ..flood import Flood, Source
from ..procstat import usage
from ..stats import summary
from ..swarm import Swarm
from ..wsclient import handshake
from .rig import chaos_fleet

STALLED, SLOW = "127.0.0.61", "127.0.0.62"
# The heartbeat sweep runs every min(interval, timeout) / 4: a ping goes out up to one sweep after
# it is due and the timeout is noticed up to one sweep late; a busy machine adds a little.
SLACK_S = 0.5


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


def established(port: int, source: str) -> set[int]:
    """Client ports of the connections from ``source`` the gateway on ``port`` still holds open."""
    want_local = f"{_hex_ip('127.0.0.1')}:{port:04X}"
    want_remote = _hex_ip(source)
    ports = set()
    with contextlib.suppress(OSError):
        for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
            cols = line.split()
            ip, _, peer_port = cols[2].partition(":")
            if cols[1] == want_local and ip == want_remote and cols[3] == "01":
                ports.add(int(peer_port, 16))
    return ports


def _hex_ip(ip: str) -> str:
    return "".join(f"{int(b):02X}" for b in reversed(ip.split(".")))


async def _raw_socket(port: int, source: str, read_rate: int) -> tuple[socket.socket, float]:
    """A handshaken WebSocket that (almost) never reads: receive buffer as small as the kernel allows."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
    sock.bind((source, 0))
    sock.setblocking(False)
    loop = asyncio.get_running_loop()
    await loop.sock_connect(sock, ("127.0.0.1", port))
    await loop.sock_sendall(sock, handshake("127.0.0.1", "/ws"))
    start = time.monotonic()
    if read_rate:
        await loop.sock_recv(sock, 64)  # the 101's first bytes: the server accepted it
    return sock, start


async def run(tmp: Path, plan: Plan, say: Any) -> dict[str, Any]:
    interval, timeout = plan.ping_interval_s, plan.ping_timeout_s
    env = {
        "LB_GW_PING_INTERVAL": str(interval),
        "LB_GW_PING_TIMEOUT": str(timeout),
        "LB_GW_STALL_TIMEOUT": str(timeout),
        "LB_GW_WINDOW": "weekly",
    }
    bound = interval + timeout + 2 * min(interval, timeout) / 4 + SLACK_S
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
            # each raw socket's own start: it never read from its first byte on
            stalled = list(await asyncio.gather(*(_raw_socket(port, STALLED, 0) for _ in range(plan.stalled))))
            slow = list(await asyncio.gather(*(_raw_socket(port, SLOW, 64) for _ in range(plan.slow))))
            raw += [s for s, _ in stalled + slow]

            async def trickle(sock: socket.socket) -> None:
                loop = asyncio.get_running_loop()
                with contextlib.suppress(OSError):
                    while await loop.sock_recv(sock, 64):  # noqa: ASYNC110 (the reading pace is the point)
                        await asyncio.sleep(1.0)

            readers = [asyncio.create_task(trickle(s)) for s, _ in slow]
            [sick_pid] = [p.pid for p in sick.procs]
            os.kill(sick_pid, signal.SIGSTOP)
            stopped = True
            t_stop = time.monotonic()
            mark = len(healthy.live_lat)
            # stalled and slow: each from its own handshake; half-open: from the SIGSTOP
            kinds: dict[str, tuple[str, dict[int, float]]] = {
                "stalled": (STALLED, {s.getsockname()[1]: t for s, t in stalled}),
                "slow": (SLOW, {s.getsockname()[1]: t for s, t in slow}),
                "half_open": (sick.sources[0], {p: t_stop for p in established(port, sick.sources[0])}),
            }
            held = {k: len(established(port, src) & set(ports)) for k, (src, ports) in kinds.items()}
            freed_at: dict[str, dict[int, float]] = {k: {} for k in kinds}
            deadline = time.monotonic() + bound * 3 + 5
            while time.monotonic() < deadline and any(len(freed_at[k]) < len(p) for k, (_, p) in kinds.items()):
                now = time.monotonic()
                rss.append((now - t_open, usage(gw_pid).rss_bytes))
                for kind, (src, ports) in kinds.items():
                    still = established(port, src)
                    for p, t0 in ports.items():
                        if p not in still and p not in freed_at[kind]:
                            freed_at[kind][p] = now - t0
                say(f"readers: freed {sum(len(v) for v in freed_at.values())} of {sum(held.values())}")
                await asyncio.sleep(0.1)
            freed_after = {k: round(max(v.values()), 2) for k, v in freed_at.items() if len(v) == len(kinds[k][1])}
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
        "plan": {
            "healthy": plan.healthy,
            "stalled": plan.stalled,
            "slow": plan.slow,
            "half_open": plan.half_open,
            "ping_interval_s": interval,
            "ping_timeout_s": timeout,
            "bound_s": bound,
        },
        "held_at_start": held,
        "freed_after_s": freed_after,
        "all_freed": len(freed_after) == len(kinds),
        "freed_within_bound": all(freed_after.get(k, 1e9) <= bound for k in ("stalled", "half_open")),
        "healthy_latency_ms_before": base,
        "healthy_latency_ms_during": bad,
        "healthy_dropped": sum(r["drops"] for r in end),
        "healthy_open_at_end": sum(r["eligible"] for r in end),
        "rss_mb": {
            "start": round(rss_start / 2**20, 1),
            "peak": round(peak / 2**20, 1),
            "end": round(rss_end / 2**20, 1),
        },
    }
