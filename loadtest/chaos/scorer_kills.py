"""Fault 1: scorer replicas SIGKILLed at random every few seconds while submissions with
replayed ids flow; afterwards every board is compared, member by member, with the model."""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from leaderboard import GameConfig, connect

from .model import Model, Slip, check
from .rig import REGIONS, Replicas, Sender, chaos_fleet, dead_letters, read_boards, replay_pick, wait_drained


@dataclass(frozen=True, slots=True)
class Plan:
    submissions: int = 50_000  # sends, replays included
    replay_share: float = 0.10
    players: int = 5_000
    rate: float = 800.0  # sends per second
    chunk: int = 100  # sends per queue call
    kill_every: tuple[float, float] = (2.0, 4.0)  # seconds between kills, uniform
    replicas: int = 2
    drain_timeout: float = 120.0


async def run(tmp: Path, plan: Plan, rng: random.Random, say: Any) -> dict[str, Any]:
    env = {
        # a killed replica's entries are claimed by a live one after this idle time (default 10 s)
        "LB_SCORER_CLAIM_IDLE_MS": "1500",
        "LB_SCORER_STATS_S": "0",
    }
    model = Model()
    async with chaos_fleet(tmp, "scorer-kills", gateways=1, env=env) as target:
        assert target.fleet is not None
        config = GameConfig(game=target.game)
        redis = connect(target.redis_url)
        replicas = Replicas(target.fleet)
        try:
            for _ in range(plan.replicas - 1):
                await replicas.add()
            sender = Sender(redis, config, model)
            stop = asyncio.Event()

            async def killer() -> None:
                while not stop.is_set():
                    try:
                        await asyncio.wait_for(stop.wait(), rng.uniform(*plan.kill_every))
                    except TimeoutError:
                        await replicas.kill_one(rng)

            kills = asyncio.create_task(killer())
            t0 = time.monotonic()
            sent, pool = 0, list[Slip]()
            try:
                while sent < plan.submissions:
                    batch: list[Slip] = []
                    while len(batch) < min(plan.chunk, plan.submissions - sent):
                        replay = replay_pick(model, rng, pool) if pool and rng.random() < plan.replay_share else None
                        if replay is not None and replay not in batch:
                            batch.append(replay)
                            continue
                        i = rng.randrange(plan.players)
                        player = f"k{i}"
                        if model.slots.get(player, 0) > 9:
                            continue
                        slip = model.new(player, region=REGIONS[i % len(REGIONS)])
                        batch.append(slip)
                        pool.append(slip)
                    await sender.send(batch)
                    sent += len(batch)
                    due = t0 + sent / plan.rate
                    await asyncio.sleep(max(0.0, due - time.monotonic()))
                    say(f"scorer kills: {sent:,}/{plan.submissions:,} sent, {replicas.kills} kills")
            finally:
                stop.set()
                await kills
            send_s = time.monotonic() - t0
            drain_s = await wait_drained(redis, config, plan.drain_timeout)
            verdict = check(model, await read_boards(redis, config, model))
            dead = await dead_letters(redis, config)
        finally:
            await replicas.close()
            await redis.aclose()
    return {
        "plan": {
            "submissions": plan.submissions,
            "replay_share": plan.replay_share,
            "players": plan.players,
            "rate": plan.rate,
            "kill_every_s": list(plan.kill_every),
            "replicas": plan.replicas,
        },
        "kills": replicas.kills,
        "send_s": round(send_s, 2),
        "drain_s": round(drain_s, 2),
        "dead_letters": dead,
        "refusals": sender.refusals,
        "verdict": verdict,
    }
