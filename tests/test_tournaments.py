"""Live tournaments: a window of their own (t-<id>) with a start, an end and an entry list,
against a real redis-server, a real publisher and a real gateway."""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

import orjson
import pytest
import redis.asyncio as aioredis

from leaderboard import BadRequest, GameConfig, InvalidSubmission, Leaderboard, Submission, now_ms
from leaderboard.errors import TournamentError
from leaderboard.queue import Queue
from scorer import Publisher, ScorerSettings, Stats

from .conftest import NOW
from .gw_helpers import T, client, greet, recv_type, request, running, token

MIN = 60_000
START, END = NOW, NOW + 60 * MIN


def slip(sid: str, player: str, points: int, ts: int, tournament: str | None = "cup") -> dict[str, str]:
    fields = {"id": sid, "player": player, "points": str(points), "ts": str(ts)}
    return {**fields, "tournament": tournament} if tournament else fields


async def test_only_entrants_count_and_others_get_their_own_error(lb: Leaderboard) -> None:
    spec = await lb.create_tournament("cup", START, END)
    assert spec.name == "t-cup"
    assert await lb.join("cup", ["ana", "ben"]) == 2
    assert await lb.join("cup", ["ana"]) == 0  # entering twice changes nothing
    results = await lb.submit_batch(
        [
            slip("1", "ana", 50, START + MIN),
            slip("2", "eve", 90, START + MIN),
            slip("3", "ben", 70, START + 2 * MIN),
            slip("4", "ben", 80, START - 1),
            slip("5", "ana", 60, START + MIN, tournament="nope"),
        ],
        now=START + 3 * MIN,
    )
    assert [(r.status, r.code) for r in results] == [
        ("ok", None),
        ("error", "not_entered"),
        ("ok", None),
        ("error", "timestamp_outside_window"),
        ("error", "unknown_tournament"),
    ]
    top = await lb.top("t-cup", at=START + 3 * MIN)
    assert top.period.label == "cup" and [(e.player, e.score) for e in top.entries] == [("ben", 70), ("ana", 50)]
    # a tournament slip counts on the tournament only, not on the game's windows
    assert (await lb.top("weekly", at=START + 3 * MIN)).entries == []
    assert (await lb.rank("ana", "t-cup", at=START + 3 * MIN)).rank == 2
    # the activity feed's rank is the game's first board's (badges read it): not a tournament's
    assert [(e["player"], e["rank"]) for e in await lb.feed()] == [("ben", "0"), ("ana", "0")]


async def test_tournament_bad_input_is_refused_with_stable_codes(lb: Leaderboard) -> None:
    await lb.create_tournament("cup", START, END)
    await lb.create_tournament("cup", START, END)  # a retried create is a no-op
    cases: list[tuple[Any, str]] = [
        (lb.create_tournament("cup", START, END + 1), "tournament_exists"),
        (lb.create_tournament("old", 1000, 2000), "tournament_ended"),
        (lb.join("nope", ["ana"]), "unknown_tournament"),
        (lb.top("t-nope"), "unknown_tournament"),
    ]
    for call, code in cases:
        with pytest.raises(TournamentError) as caught:
            await call
        assert caught.value.code == code
    for bad in (lb.create_tournament("bad id", START, END), lb.create_tournament("x", END, START), lb.join("cup", [])):
        with pytest.raises(BadRequest):
            await bad
    with pytest.raises(InvalidSubmission) as invalid:
        Submission("1", "ana", 5, START, tournament="no spaces")
    assert invalid.value.code == "invalid_tournament"


async def test_the_queue_refuses_non_entrants_at_once(r: aioredis.Redis, lb: Leaderboard, config: GameConfig) -> None:
    now = now_ms()
    await lb.create_tournament("live", now - MIN, now + MIN)
    await lb.join("live", ["ana"])
    queue = Queue(r, config)
    await queue.submit(Submission("1", "ana", 5, now, tournament="live"))
    for player, tournament, code in (("eve", "live", "not_entered"), ("ana", "gone", "unknown_tournament")):
        with pytest.raises(InvalidSubmission) as caught:
            await queue.submit(Submission("2", player, 5, now, tournament=tournament))
        assert caught.value.code == code
    assert await r.xlen(config.keys.submissions) == 1


async def test_a_tournament_is_published_live_then_closed_once(
    r: aioredis.Redis, lb: Leaderboard, config: GameConfig
) -> None:
    await lb.create_tournament("cup", START, END)
    await lb.join("cup", ["ana", "ben"])
    clock = [START + MIN]
    settings = ScorerSettings(
        redis_url="redis://unused", game=config, name="p", tick_ms=50, lease_ttl_ms=300, metrics_port=0
    )
    pub = Publisher(r, settings, Stats(), now=lambda: clock[0])
    pubsub = r.pubsub()
    await pubsub.ssubscribe(config.keys.snapshot_channel("t-cup", "global"))
    try:
        await lb.submit_batch([slip("1", "ana", 50, START + MIN)], now=clock[0])
        assert [(d.window, d.period) for d in await pub.tick()] == [("t-cup", "cup")]
        msg = await pubsub.get_message(ignore_subscribe_messages=True, timeout=2.0)
        while msg is None:
            msg = await pubsub.get_message(ignore_subscribe_messages=True, timeout=2.0)
        snap = orjson.loads(msg["data"])
        assert (snap["window"], snap["period"], snap["entries"][0]["player"]) == ("t-cup", "cup", "ana")
    finally:
        await pubsub.aclose()
    clock[0] = END + 61_000  # past the end and the close delay
    await pub.tick()
    await pub.tick()
    events: Any = await r.xrange(config.keys.closed)
    assert [(e["id"], orjson.loads(e["top"])["global"][0]["player"]) for _, e in events] == [("t-cup:cup", "ana")]
    assert [f["id"] for f in await lb.finals("t-cup")] == ["t-cup:cup"]
    assert not await r.hexists(config.keys.published, "t-cup:global")  # no longer kept alive
    clock[0] = END + 35 * 86_400_000  # its boards have expired: its definition goes too
    await pub.tick()
    assert not await r.hexists(config.keys.tournaments, "cup")


async def test_tournaments_over_the_socket(redis_url: str, r: aioredis.Redis, config: GameConfig) -> None:
    lb = Leaderboard(r, config)
    now = now_ms()
    await lb.create_tournament("cup", now - MIN, now + 60 * MIN)
    server_token, mia_token = token("gs", "server"), token("mia")
    async with (
        running(redis_url) as gw,
        client(gw, f"?token={server_token}") as server,
        client(gw, f"?token={mia_token}") as mia,
    ):
        await greet(server)
        await greet(mia)
        join = {"type": "join", "tournament": "cup", "players": ["mia"], "id": 1}
        refused = await request(mia, join, "error")
        assert refused["code"] == "forbidden"  # players do not enter themselves
        joined = await request(server, join, "joined")
        assert (joined["added"], joined["id"]) == (1, 1)
        unknown = await request(server, {**join, "tournament": "nope"}, "error")
        assert unknown["code"] == "unknown_tournament"
        await lb.submit_batch([slip("1", "mia", 40, now, "cup")], now=now)
        sub = await request(mia, {"type": "subscribe", "window": "t-cup", "id": 2}, "subscribed")
        assert sub["window"] == "t-cup"
        snap = await recv_type(mia, "snapshot")
        assert (snap["window"], snap["entries"][0]["player"]) == ("t-cup", "mia")
        rank = await request(mia, {"type": "rank", "window": "t-cup", "id": 3}, "rank")
        assert (rank["rank"], rank["period"]) == (1, "cup")
        gone = await request(mia, {"type": "subscribe", "window": "t-nope", "id": 4}, "error")
        assert gone["code"] == "unknown_tournament"
        assert gw.hub.channel(("t-nope", "global")) not in gw.hub.subscriber.live  # nothing held for it


async def test_the_scorer_command_creates_and_enters(redis_url: str, lb: Leaderboard) -> None:
    env = {**os.environ, "LB_REDIS_URL": redis_url, "LB_GAME": "test"}

    async def scorer(*args: str) -> tuple[int, str]:
        command = args if args[0] == "submit" else ("tournament", *args)
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "scorer",
            *command,
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        out, _ = await asyncio.wait_for(proc.communicate(), 30 * T)
        return proc.returncode or 0, out.decode()

    code, out = await scorer("create", "spring", "--start", "2030-11-26T10:00:00", "--end", "2030-11-27T10:00:00")
    assert code == 0 and "t-spring" in out, out
    code, out = await scorer("join", "spring", "ana", "ben")
    assert code == 0 and "2 of 2" in out, out
    code, out = await scorer("join", "autumn", "ana")
    assert code == 2 and "no tournament" in out, out
    assert await lb.tournaments.entered("spring", ["ana", "eve"]) == [True, False]
    now = now_ms()
    code, out = await scorer("create", "live", "--start", str(now - MIN), "--end", str(now + 60 * MIN))
    assert code == 0, out
    await lb.join("live", ["ana"])
    code, out = await scorer("submit", "--player", "eve", "--points", "5", "--tournament", "live")
    assert code == 2 and "not_entered" in out, out
    code, out = await scorer("submit", "--player", "ana", "--points", "5", "--tournament", "live")
    assert code == 0 and "queued" in out, out
    code, out = await scorer("list")
    assert code == 0 and "spring\tt-spring\t2030-11-26T10:00:00+00:00" in out, out


async def test_a_tick_that_loses_the_lease_while_publishing_closes_nothing(
    r: aioredis.Redis, lb: Leaderboard, config: GameConfig
) -> None:
    await lb.create_tournament("cup", START, END)
    await lb.join("cup", ["ana"])
    await lb.submit_batch([slip("1", "ana", 50, START + MIN)], now=START + MIN)
    clock = [END + 61_000]  # the tournament is due to close, and the weekly board to publish
    settings = ScorerSettings(
        redis_url="redis://unused", game=config, name="p", tick_ms=50, lease_ttl_ms=300, metrics_port=0
    )
    pub = Publisher(r, settings, Stats(), now=lambda: clock[0])
    await lb.submit_batch([slip("2", "ben", 9, clock[0] - 1000, tournament=None)], now=clock[0])
    publish = pub.lb.publish

    async def stalled(*args: Any, **kwargs: Any) -> bool:
        await r.set(config.keys.publish_lease, "other", px=3000)  # another replica took over meanwhile
        return await publish(*args, **kwargs)

    pub.lb.publish = stalled  # type: ignore[method-assign]
    assert await pub.tick() == []
    assert not pub.leader and await r.xlen(config.keys.closed) == 0
