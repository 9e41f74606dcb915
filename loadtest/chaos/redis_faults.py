"""Fault 2: Redis stopped under a running fleet: SIGTERM (it writes its AOF and exits), SIGKILL
(AOF ``everysec``: up to about a second of confirmed writes can be gone) and a long outage
(stopped, restarted after ``down_s``). Spectators hold their sockets throughout; requests sent
in the outage must be answered ``unavailable``, submissions refused to the sender, and every
socket must show the current top within 2 s of Redis answering again."""

from __future__ import annotations

import asyncio
import contextlib
import random
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from redis.exceptions import RedisError

from leaderboard import GameConfig, connect
from leaderboard.auth import issue

from .model import MAX_SLOT, Model, check
from .rig import REGIONS, Sender, Socket, chaos_fleet, read_boards, wait_drained

KILL_LOSS_WINDOW_S = 2.0  # appendfsync everysec: a SIGKILL loses at most ~1 s (2 s: fsync may lag)
SNAPSHOT_TARGET_S = 2.0
PROBE_TIMEOUT_S = 5.0  # longer than the gateway's own Redis bound (LB_GW_REDIS_TIMEOUT, 2 s)


@dataclass(frozen=True, slots=True)
class Plan:
    sockets: int = 200
    gateways: int = 2
    restart_outage_s: float = 3.0  # how long Redis stays down after SIGTERM / SIGKILL
    down_s: float = 30.0  # the long outage
    frozen_s: float = 5.0  # SIGSTOPped: its connections open, no answers
    feed_every_s: float = 0.05  # one queue submission this often, outages included
    probe_every_s: float = 0.5  # one request and one socket submission this often in an outage
    wait_snapshot_s: float = 15.0
    phases: tuple[str, ...] = ("sigterm", "sigkill", "down", "frozen")


async def run(tmp: Path, plan: Plan, rng: random.Random, say: Any) -> dict[str, Any]:
    model = Model()
    phases: list[dict[str, Any]] = []
    async with chaos_fleet(tmp, "redis-faults", gateways=plan.gateways, env={}) as target:
        fleet = target.fleet
        assert fleet is not None and fleet.redis_server is not None
        server = fleet.redis_server
        config = GameConfig(game=target.game)
        redis = connect(target.redis_url, socket_timeout=2, socket_connect_timeout=1)
        sender = Sender(redis, config, model, timeout=2.0)
        sockets = [Socket(target.ws_url) for _ in range(plan.sockets)]
        token = issue("chaos-server", "server", target.jwt_secret, exp=time.time() + 3600)
        game_server = Socket(target.ws_url, token)
        stop = asyncio.Event()
        players = iter(range(10**9))

        async def feed() -> None:
            while not stop.is_set():
                i = next(players) % 500
                await sender.send([model.new(f"r{i}", region=REGIONS[i % 2])]) if model.slots.get(
                    f"r{i}", 0
                ) <= 9 else None
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), plan.feed_every_s)

        feeder: asyncio.Task[None] | None = None
        try:
            for batch in range(0, len(sockets), 50):
                await asyncio.gather(*(s.open() for s in sockets[batch : batch + 50]))
            await game_server.open()
            feeder = asyncio.create_task(feed())
            await asyncio.sleep(1.0)
            for phase in plan.phases:
                say(f"redis faults: {phase}")
                phases.append(await _phase(phase, plan, server, sender, model, sockets, game_server, rng))
            stop.set()
            await feeder
            drain_s = await wait_drained(redis, config, 60)
            verdict = check(model, await read_boards(redis, config, model))
        finally:
            stop.set()
            if feeder is not None:
                await asyncio.gather(feeder, return_exceptions=True)
            await asyncio.gather(*(s.close() for s in [*sockets, game_server]))
            await redis.aclose()
    kills = [p["t_fault"] for p in phases if p["phase"] == "sigkill"]
    in_window = [
        sid for sid in verdict.lost_ids if any(t - KILL_LOSS_WINDOW_S <= model.slips[sid].acked_at <= t for t in kills)
    ]
    for p in phases:
        p.pop("t_fault")
    return {
        "plan": {
            "sockets": plan.sockets,
            "gateways": plan.gateways,
            "restart_outage_s": plan.restart_outage_s,
            "down_s": plan.down_s,
        },
        "phases": phases,
        "drain_s": round(drain_s, 2),
        "refusals": sender.refusals,
        "lost_in_kill_window": len(in_window),
        "lost_elsewhere": verdict.lost - len(in_window),
        "verdict": verdict,
    }


async def _phase(
    phase: str,
    plan: Plan,
    server: Any,
    sender: Sender,
    model: Model,
    sockets: list[Socket],
    game_server: Socket,
    rng: random.Random,
) -> dict[str, Any]:
    open_before = sum(s.open_now for s in sockets)
    refused_before = sum(s.refused + s.unknown for s in model.slips.values())
    t_fault = time.time()
    proc = server.process
    if phase == "frozen":
        proc.send_signal(signal.SIGSTOP)  # connections stay open, nothing answers
    else:
        proc.send_signal(signal.SIGKILL if phase == "sigkill" else signal.SIGTERM)
        await asyncio.to_thread(proc.wait, 30)
    outage = {"down": plan.down_s, "frozen": plan.frozen_s}.get(phase, plan.restart_outage_s)
    replies: dict[str, int] = {}
    submits: dict[str, int] = {}
    n = 0
    while time.time() - t_fault < outage:
        n += 1
        reply = await rng.choice(sockets).request({"type": "top", "board": "global"}, timeout=PROBE_TIMEOUT_S)
        kind = "none" if reply is None else reply.get("code", reply["type"])
        replies[kind] = replies.get(kind, 0) + 1
        slip = model.new(f"g{phase}{n // 10}", region="eu")
        model.sent(slip)
        fields = {"id": slip.id, "player": slip.player, "points": slip.points, "op": "incr", "region": "eu"}
        reply = await game_server.request({"type": "submit", "submission": fields}, timeout=PROBE_TIMEOUT_S)
        kind = "none" if reply is None else reply.get("code", reply["type"])
        submits[kind] = submits.get(kind, 0) + 1
        if kind == "submitted":
            model.acked(slip, time.time())
        else:  # `unavailable` may follow a timeout inside the gateway: the outcome is unknown
            model.unknown(slip)
        await asyncio.sleep(max(0.0, plan.probe_every_s - 0.0))
    if phase == "frozen":
        proc.send_signal(signal.SIGCONT)
    else:
        await asyncio.to_thread(server.start)  # same port, password and AOF; returns once Redis answers PING
    t_back = time.time()
    marker = model.new(f"mark-{phase}", slot=MAX_SLOT)
    while not await sender.send([marker]):  # the first send may meet a connection from before
        marker.ts_ms = 0
        if marker.sends >= 3:
            break
    stored = await _stored_after(sender, marker.player, t_back)
    deadline = time.monotonic() + plan.wait_snapshot_s
    # hundreds of sockets: polled, not an event each
    while time.monotonic() < deadline and not all(s.has(marker.player) for s in sockets if s.open_now):  # noqa: ASYNC110
        await asyncio.sleep(0.05)
    got = [t for s in sockets if s.open_now and (t := s.has(marker.player)) is not None]
    open_now = [s for s in sockets if s.open_now]
    closed = sum(1 for s in sockets if s.closed_at and s.closed_at >= t_fault)
    worst = max(got) - t_back if got else float("nan")
    by_gateway: dict[str, float] = {}
    for s in open_now:
        t = s.has(marker.player)
        late = round(t - t_back, 2) if t is not None else float("inf")
        by_gateway[s.gateway] = max(by_gateway.get(s.gateway, 0.0), late)
    return {
        "phase": phase,
        "t_fault": t_fault,
        "outage_s": round(t_back - t_fault, 2),
        "sockets_before": open_before,
        "sockets_closed": closed,
        "requests": replies,
        "socket_submits": submits,
        "refused_or_unknown": sum(s.refused + s.unknown for s in model.slips.values()) - refused_before,
        "current_snapshot_sockets": len(got),
        "current_snapshot_missing": len(open_now) - len(got),
        "current_snapshot_s": round(worst, 3),
        "stored_snapshot_s": stored,
        "current_snapshot_s_by_gateway": dict(sorted(by_gateway.items())),
        "current_snapshot_ok": len(got) == len(open_now) and worst <= SNAPSHOT_TARGET_S,
    }


async def _stored_after(sender: Sender, player: str, t_back: float, within: float = 10.0) -> float:
    """Seconds from Redis answering until the board's stored latest snapshot shows ``player``: the
    scorer's part of the delay (the rest is the gateways')."""
    key = sender.config.keys.latest("weekly", "global")
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        with contextlib.suppress(RedisError, OSError):
            if player in (await sender.redis.get(key) or ""):
                return round(time.time() - t_back, 3)
        await asyncio.sleep(0.02)
    return float("nan")
