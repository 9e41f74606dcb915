"""The moderators' audit log against a real redis-server: every ban, unban, correction and
removal through ``AuditedModeration`` (what the socket, the HTTP API and the scorer's commands
use) lands in ``lb:{g}:audit`` with who, what, when, the reason and the player's standing before
and after; a refused action changes nothing and logs nothing. The scorer's audit worker records
it in the durable log (both backends), once per entry however often it is delivered, and a
rebuild after FLUSHALL writes back the same audit log, ids and all."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis

from leaderboard import GameConfig, InvalidInput, InvalidSubmission, Leaderboard, boards, fleetview, now_ms
from leaderboard.audit import AuditedModeration, read
from leaderboard.deadletters import DeadLetters
from leaderboard.queue import Queue
from leaderboard.submission import entry_fields
from scorer import ScorerSettings
from scorer.auditlog import AuditWorker
from scorer.durable import Store
from scorer.durable.audit import AuditStore
from scorer.durable.recorder import Recorder
from scorer.rebuild import rebuild

from .conftest import MS
from .test_scorer_process import operator

pytest_plugins = ("tests.durable_fixtures",)  # fixtures: store_url, store (one per backend)

ACTOR = "ops:alice"


async def moderate(lb: Leaderboard) -> AuditedModeration:
    """Three players on the game's boards and a defined one, then one action of each kind."""
    ts = now_ms() - 1000
    tower = {"id": "tower", "keys": [{"name": "floor"}, {"name": "ms", "direction": "asc"}]}
    await lb.create_board(boards.parse(tower))
    slips = [{"id": f"s{i}", "player": p, "points": str(pts), "ts": str(ts)} for i, (p, pts) in enumerate(
        [("ana", 300), ("ben", 200), ("cy", 100)])]  # fmt: skip
    slips.append({"id": "t1", "player": "ben", "board": "tower", "values": "12,81250", "ts": str(ts)})
    assert {r.status for r in await lb.submit_batch(slips)} == {"ok"}
    mods = AuditedModeration(lb)
    with pytest.raises(InvalidInput) as refused:
        await mods.ban("cy", actor=ACTOR, reason="")  # a ban needs a reason: nothing changes, nothing logged
    assert refused.value.code == "invalid_reason"
    await mods.ban("ana", actor=ACTOR, reason="speed hack, ticket 991")
    await mods.correct("cy", 150, actor=ACTOR, reason="double-counted match", window_name="alltime")
    await mods.correct("ben", actor=ACTOR, reason="glitched run", scopes=["board:tower"], remove=True)
    await mods.unban("ana", actor="ops:bob", reason="appeal granted")
    return mods


async def test_every_moderator_action_is_logged_with_before_and_after(r: aioredis.Redis, config: GameConfig) -> None:
    lb = Leaderboard(r, config)
    started = now_ms()
    await moderate(lb)
    log = await read(r, config.keys, count=10)
    assert [(e.action, e.player, e.actor) for e in log] == [
        ("unban", "ana", "ops:bob"),
        ("remove", "ben", ACTOR),
        ("correct", "cy", ACTOR),
        ("ban", "ana", ACTOR),
    ]
    unban, remove, correct, ban = log
    assert all(started <= e.at <= now_ms() for e in log)
    assert ban.reason == "speed hack, ticket 991"
    assert {(row["board"], row["window"], row["rank"], row["points"]) for row in ban.before["entries"]} == {
        ("global", w, 1, 300) for w in config.windows
    }
    assert ban.before["banned"] is None and ban.after["entries"] == []
    assert ban.after["banned"]["by"] == ACTOR
    assert [(b["window"], b["points"]) for b in correct.before] == [("alltime", 100)]
    assert [(a["window"], a["points"], a["rank"]) for a in correct.after] == [("alltime", 150, 2)]  # ben's above
    assert {b["board"] for b in remove.before} == {"board:tower"}
    assert all(b["values"] == ["12", "81250"] for b in remove.before)
    assert all(a["values"] is None and a["rank"] is None for a in remove.after)
    assert unban.before["banned"]["reason"] == "speed hack, ticket 991" and unban.after == {"banned": None}
    assert [e.id for e in await read(r, config.keys, player="ana")] == [unban.id, ban.id]
    assert [e.id for e in await read(r, config.keys, count=2, before=unban.id)] == [remove.id, correct.id]


async def test_recorded_in_the_durable_log_and_restored_by_a_rebuild(
    r: aioredis.Redis, redis_url: str, config: GameConfig, store: Store
) -> None:
    lb = Leaderboard(r, config)
    await moderate(lb)
    shown = await r.xrange(config.keys.audit)
    settings = ScorerSettings(redis_url=redis_url, game=config, name="c1", block_ms=20, metrics_port=0)
    recorder = Recorder(store, config, retention_days=30, compact_every_s=0)
    await asyncio.wait_for(AuditWorker(r, settings, recorder).run(burst=True), 30_000 * MS)
    kept = await AuditStore(store).entries(config.game)
    assert [(e.id, e.fields()) for e in kept] == shown
    assert await r.xpending(config.keys.audit, "durable") == {"pending": 0, "min": None, "max": None, "consumers": []}
    assert await recorder.audit.record(config.game, kept) == 0  # delivered again: kept once

    await r.flushall()
    await fleetview.beat(r, config.keys, "gw-a", {"connections": 0}, every_s=5)  # gateways still running
    restored = await rebuild(r, store, config, workers=1)
    assert await r.xrange(config.keys.audit) == shown and restored.audit == len(shown)

    # a Redis that took a new entry before the rebuild (--force): the recorded ones go in below it
    await r.flushall()
    mods = AuditedModeration(lb)
    await mods.unban("cy", actor=ACTOR, reason="late entry")
    [newer] = await r.xrange(config.keys.audit) or []
    restored = await rebuild(r, store, config, workers=1, force=True)
    assert await r.xrange(config.keys.audit) == [*shown, newer] and restored.audit == len(shown)


async def test_dead_letters_requeued_and_dropped_from_the_command_line(
    r: aioredis.Redis, redis_url: str, config: GameConfig
) -> None:
    ts = str(now_ms() - 1000)
    ids: list[str] = []
    for i, points in enumerate(["12", "nope"]):  # the second is still refused when filed again
        slip = {"id": f"d{i}", "player": "ben", "points": points, "ts": ts}
        dead = {"dead.id": f"1-{i}", "dead.code": "unprocessable", "dead.message": "x", "dead.at": ts, "dead.by": "c1"}
        ids.append(str(await r.xadd(config.keys.dead_letters, slip | dead)))  # type: ignore[arg-type]
    lb = Leaderboard(r, config)
    letters = DeadLetters(lb, Queue(r, config))
    assert [(x.id, x.fields["player"], x.code) for x in await letters.list()] == [
        (ids[1], "ben", "unprocessable"),
        (ids[0], "ben", "unprocessable"),
    ]
    with pytest.raises(InvalidSubmission) as still:  # refused again: nothing filed, the letter kept
        await letters.requeue(ids[1], actor="ops", reason="fixed")
    assert still.value.code == "invalid_points" and await letters.count() == 2
    rc, out, err = await operator(redis_url, "deadletters", "requeue", ids[0], "--reason", "fixed", "--actor", "ops")
    assert rc == 0 and out.startswith(f"requeued {ids[0]} as "), err
    [(_, filed)] = await r.xrange(config.keys.submissions) or []
    assert {
        k: v
        for k, v in entry_fields({str(k): str(v) for k, v in (filed or {}).items()}).items()
        if k in ("id", "points")
    } == {"id": "d0", "points": "12"}
    rc, _, err = await operator(redis_url, "deadletters", "drop", ids[1], "--reason", "junk", "--actor", "ops")
    assert rc == 0 and await r.xlen(config.keys.dead_letters) == 0
    for unknown in (ids[1], "not-an-id"):
        with pytest.raises(InvalidInput) as gone:
            await letters.drop(unknown, actor="ops", reason="again")
        assert gone.value.code == "unknown_dead_letter"
    rc, out, err = await operator(redis_url, "audit", "--player", "ben")
    assert rc == 0 and [line.split("\t")[1:] for line in out.splitlines()] == [
        ["ops", "drop", "ben", "junk"],
        ["ops", "requeue", "ben", "fixed"],
    ]
