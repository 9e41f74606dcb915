"""Redis state read whole, so two states can be compared member by member; a game's reads
held equal across a FLUSHALL and a rebuild from the durable log."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import orjson
import redis.asyncio as aioredis

from leaderboard import GameConfig, Leaderboard, Submission, boards, now_ms
from leaderboard.moderation import Moderation
from leaderboard.queue import Queue
from scorer import Consumer, ScorerSettings
from scorer.durable import open_store
from scorer.durable.recorder import Recorder
from scorer.journal import JournalWorker
from scorer.rebuild import rebuild

from .conftest import MS


async def redis_state(r: aioredis.Redis, config: GameConfig) -> dict[str, Any]:
    """Every key the rebuild restores, read whole: boards (members and exact scores), distinct
    player counts, seen ids, the scopes slips named, profiles (decoded: JSON spelling may
    differ), and each board's rank companions (histogram; distinct points in dense mode)."""
    prefix = config.keys.prefix
    state: dict[str, Any] = {}
    async for key in r.scan_iter(match=f"{prefix}:*", count=1000):
        kind = key[len(prefix) + 1 :].split(":", 1)[0]
        if kind == "board":
            state[key] = await r.zrange(key, 0, -1, withscores=True)
        elif kind == "hist":
            state[key] = await r.hgetall(key)
        elif kind == "points":
            state[key] = await r.zrange(key, 0, -1, withscores=True)
        elif kind == "players":
            state[key] = await r.pfcount(key)
        elif kind in ("seen", "scopes"):
            state[key] = sorted(await r.smembers(key))
        elif kind == "profiles":
            state[key] = {p: orjson.loads(v) for p, v in (await r.hgetall(key)).items()}
    return state


async def rebuilt_reads(
    r: aioredis.Redis,
    settings: Callable[..., ScorerSettings],
    *,
    redis_url: str,
    config: GameConfig,
    store_url: str,
    definition: boards.Definition,
    slips: Sequence[Submission],
    moderate: Callable[[Moderation], Awaitable[object]],
    scopes: Sequence[str],
    players: Sequence[str],
    windows: Sequence[str] = (),
    direct: bool = False,
) -> list[Any]:
    """The reads of a game holding ``definition`` after ``slips`` (queued, applied and recorded
    in the durable log at ``store_url``) and ``moderate``'s actions (journaled), held equal
    across a FLUSHALL and a rebuild from the log: the scopes set, then each of the board's
    windows' top and ``players``' ranks in each of ``scopes``; returned for the caller's own
    checks; ``windows``: more than the board's own (a tournament's ``t-<id>``, created before).
    ``settings(redis_url, **extra)``: the scorer's settings of the game. ``direct``: the slips
    filed with ``Leaderboard.enqueue`` as their fields are, not through ``Queue``."""

    async def reads(lb: Leaderboard) -> list[Any]:
        out: list[Any] = [await r.smembers(lb.keys.scopes)]
        for window in (*definition.windows, *windows):
            for scope in scopes:
                out += [await lb.top(window, scope, n=10), await lb.ranks(list(players), window, scope)]
        return out

    store = open_store(store_url)
    await store.open()
    try:
        lb = Leaderboard(r, config)
        await lb.create_board(definition)
        await lb.boards.refresh()
        recorder = Recorder(store, config, retention_days=30, compact_every_s=0)
        if direct:
            await lb.enqueue([s.fields() for s in slips], backlog_max=1000)
        else:
            await Queue(r, config).submit_many(slips)
        consumer = Consumer(r, settings(redis_url, durable_url="sqlite:///x"), recorder=recorder)
        await asyncio.wait_for(consumer.run(burst=True), 30_000 * MS)
        await moderate(Moderation(lb))
        await asyncio.wait_for(JournalWorker(r, settings(redis_url), recorder).run(burst=True), 30_000 * MS)
        before = await reads(lb)
        await r.flushall()
        restored = await rebuild(r, store, config, now=now_ms(), progress_to=io.StringIO())
        assert restored.refused == {} and restored.slips == len(slips)
        lb = Leaderboard(r, config)
        await lb.boards.refresh()  # the definition came back with the boards
        assert await reads(lb) == before
        return before
    finally:
        await store.close()
