"""Fault 3: one gateway SIGKILLed while thousands of sockets are spread over several; its
clients come back (full-jitter backoff) to the others or to its replacement. Measured: time
until all are back, reconnects per second, and snapshots missed — by the survivors (must be 0),
by the victims while away (the price of the kill), and the current one at the end (must be every
socket's)."""

from __future__ import annotations

import asyncio
import bisect
import math
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from leaderboard import GameConfig, connect
from leaderboard.keys import GLOBAL_SCOPE

from ..flood import Flood, Source
from ..stats import per_second, summary
from ..swarm import Swarm
from ..target import SnapshotMonitor
from .rig import chaos_fleet


@dataclass(frozen=True, slots=True)
class Plan:
    sockets: int = 3_000
    gateways: int = 3
    connect_rate: float = 1_000.0
    replace_after_s: float = 1.0  # the killed gateway's replacement starts this long after the kill
    feed_rate: float = 50.0  # submissions per second that keep the top moving (a snapshot a tick)
    max_wait_s: float = 60.0


async def run(tmp: Path, plan: Plan, say: Any) -> dict[str, Any]:
    env = {"LB_GW_WINDOW": "weekly"}
    async with chaos_fleet(tmp, "gateway-kill", gateways=plan.gateways, env=env) as target:
        fleet = target.fleet
        assert fleet is not None
        config = GameConfig(game=target.game)
        redis = connect(target.redis_url)
        flood = Flood(redis, config, Source(players=2_000, op="incr", seed=3), rate=plan.feed_rate)
        swarm = Swarm(target.ws_url, sockets=plan.sockets, rate=plan.connect_rate, reconnect=True, first_source=40)
        channel = config.keys.snapshot_channel("weekly", GLOBAL_SCOPE)
        try:
            async with SnapshotMonitor(target.redis_url, channel) as monitor:
                flood.start()
                await swarm.start()
                if not await swarm.wait_open(plan.sockets / plan.connect_rate + 30, want=plan.sockets):
                    raise RuntimeError(f"only {swarm.totals()['open']} of {plan.sockets} sockets opened")
                await asyncio.sleep(2.0)
                before = await swarm.report([], since=time.time())
                spread = _merge(r["gateways"] for r in before)
                victim = fleet.gateways[0]
                say(f"gateway kill: SIGKILL pid {victim.pid} holding {spread.get('gw-1', 0)} sockets")
                t_kill = time.time()
                os.kill(victim.pid, signal.SIGKILL)
                await victim.wait()
                await asyncio.sleep(plan.replace_after_s)
                fleet.gateways[0] = await fleet.start_gateway(0)
                deadline = time.monotonic() + plan.max_wait_s
                while time.monotonic() < deadline:
                    if time.time() - t_kill > 2 and swarm.totals()["open"] >= plan.sockets:
                        break
                    say(f"gateway kill: {swarm.totals()['open']:,}/{plan.sockets:,} open")
                    await asyncio.sleep(0.2)
                await asyncio.sleep(2.5)  # at least one tick after the last socket came back
                t_end = time.time()
                published = [(k, seen) for k, ts, seen in monitor.seen if t_kill <= ts / 1000 <= t_end - 1.5]
                latest = [k for k, ts, _ in monitor.seen if ts / 1000 <= t_end - 1.2]
                survivors = await swarm.report([k for k, _ in published], since=t_kill)
                current = await swarm.report(latest[-1:], since=t_end)
        finally:
            await swarm.close()
            await flood.stop()
            await redis.aclose()
    publish_times = sorted(seen for _, seen in published)
    back: list[float] = []
    never = 0
    away_missed = 0
    for rep in survivors:
        opens: dict[int, list[float]] = {}
        for t, idx in rep["open_events"]:
            opens.setdefault(idx, []).append(t)
        for t, idx, _gw in rep["drop_events"]:
            if t < t_kill:
                continue
            later = [x for x in opens.get(idx, []) if x > t]
            if later:
                back.append(min(later) - t_kill)
                away_missed += bisect.bisect_left(publish_times, min(later)) - bisect.bisect_left(publish_times, t)
            else:
                never += 1
    back.sort()
    victims = len(back) + never
    per_s = per_second([t_kill + x for x in back], t_kill)
    return {
        "plan": {
            "sockets": plan.sockets,
            "gateways": plan.gateways,
            "replace_after_s": plan.replace_after_s,
            "feed_rate": plan.feed_rate,
        },
        "spread_before": spread,
        "victims": victims,
        "back": len(back),
        "never_back": never,
        "all_back_s": round(back[-1], 2) if back and not never else math.nan,
        "time_to_reconnect_s": summary(back),
        "reconnects_per_s_peak": max(per_s, default=0),
        # over whole seconds, as the per-second peak is counted (a 0.7 s return is 1 s of reconnects)
        "reconnects_per_s_avg": round(len(back) / max(1, math.ceil(back[-1])), 1) if back else 0.0,
        "snapshots_published": len(published),
        "survivors": sum(r["eligible"] for r in survivors),
        "survivor_snapshots_missed": sum(r["missing"] for r in survivors),
        "victim_snapshots_missed_while_away": away_missed,
        "sockets_open_at_end": sum(r["eligible"] for r in current),
        "current_snapshot_missing": sum(r["missing"] for r in current),
    }


def _merge(dicts: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for d in dicts:
        for k, v in d.items():
            out[k] = out.get(k, 0) + v
    return dict(sorted(out.items()))
