"""The badge worker: thresholds from configuration, awards idempotent under redelivery."""

from __future__ import annotations

import asyncio
from typing import Any

import redis.asyncio as aioredis

from leaderboard import GameConfig, Leaderboard, Submission, activity, boards
from scorer import BadgeWorker, ScorerSettings, Stats, awards
from scorer.badges import GROUP

from .conftest import MS, NOW

THRESHOLDS = (("bronze", 100), ("silver", 1000))


def test_awards_follow_thresholds_and_top_n() -> None:
    assert awards({"points": "99", "rank": "11"}, THRESHOLDS, 10) == []
    assert awards({"points": "100", "rank": "10"}, THRESHOLDS, 10) == ["bronze", "top10"]
    assert awards({"points": "5000", "rank": "1"}, THRESHOLDS, None) == ["bronze", "silver"]
    assert awards({"points": "x", "rank": ""}, THRESHOLDS, 10) == []
    # a defined board's top place names its board; its slip has no points to reach a threshold
    assert awards({"points": "", "rank": "3", "board": "board:tower"}, THRESHOLDS, 10) == ["tower:top10"]
    assert awards({"points": "", "rank": "11", "board": "board:tower"}, THRESHOLDS, 10) == []


def slip(sid: str, player: str, points: int) -> dict[str, str]:
    return {"id": sid, "player": player, "points": str(points), "ts": str(NOW)}


async def test_a_redelivered_entry_awards_nothing_twice(r: aioredis.Redis, lb: Leaderboard, config: GameConfig) -> None:
    settings = ScorerSettings(
        redis_url="redis://unused",
        game=config,
        name="w1",
        block_ms=20,
        claim_idle_ms=150,
        badge_thresholds=THRESHOLDS,
    )
    # 15 players so that five of them end outside the top 10
    for start in (0, 5, 10):  # an activity entry per call: three of five submissions
        await lb.submit_batch([slip(f"s{i}", f"p{i}", 100 * i) for i in range(start, start + 5)], now=NOW + 1000)
    await BadgeWorker(r, settings).ensure_group()
    # A consumer that reads everything and never acknowledges; it even awarded the first two
    # entries' badges before it died (the crash between award and ack).
    reply: Any = await r.xreadgroup(GROUP, "ghost", {config.keys.activity: ">"}, count=100)
    [[_, ghost]] = reply
    assert [len(activity.submissions(fields)) for _, fields in ghost] == [5, 5, 5]
    awarded_once = 0
    for _, fields in ghost[:2]:
        for event in activity.submissions(fields):
            for badge in awards(event, THRESHOLDS, 10):
                awarded_once += await r.sadd(config.keys.badges(event["player"]), badge)
    # The live worker claims all three once idle: the first two award nothing new.
    stats = Stats()
    worker = BadgeWorker(r, settings, stats)
    await asyncio.wait_for(worker.run(burst=True), 5000 * MS)
    assert (await r.xpending(config.keys.activity, GROUP))["pending"] == 0
    expected = {f"p{i}": {"bronze"} | ({"silver"} if i >= 10 else set()) for i in range(1, 15)}
    for i in range(15):  # top 10 of the first board at the time of the write
        expected.setdefault(f"p{i}", set())
    got = {p: await r.smembers(config.keys.badges(p)) for p in expected}
    assert all("top10" in got[p] for p in expected)  # each one entered the top 10 on arrival
    assert {p: b - {"top10"} for p, b in got.items()} == expected
    total = sum(len(b) for b in got.values())
    assert awarded_once + stats.badges_awarded == total  # counted once each, however delivered


async def test_a_defined_boards_top_places_earn_its_badge(
    r: aioredis.Redis, lb: Leaderboard, config: GameConfig
) -> None:
    # two keys, the lower first: a lex board of a lower-is-better shape
    board = boards.parse(
        {"id": "race", "keys": [{"name": "ms", "direction": "asc"}, {"name": "laps"}], "windows": ["daily"]}
    )
    await lb.create_board(board)
    subs = [Submission(f"r{i}", f"p{i}", 0, NOW, board="race", values=(60_000 + i, 3)) for i in range(12)]
    await lb.submit_batch([s.fields() for s in subs] + [slip("g", "p11", 150)], now=NOW + 1000, rows=False)
    settings = ScorerSettings(
        redis_url="redis://unused", game=config, name="w1", block_ms=20, badge_thresholds=THRESHOLDS
    )
    await asyncio.wait_for(BadgeWorker(r, settings).run(burst=True), 5000 * MS)
    got = {f"p{i}": await r.smembers(config.keys.badges(f"p{i}")) for i in range(12)}
    # the ten fastest hold the board's badge; p11 is 12th there, and first on the game's board
    assert got == {**{f"p{i}": {"race:top10"} for i in range(10)}, "p10": set(), "p11": {"bronze", "top10"}}
