"""The Python side of the function library's contract: the error tree and its one mapper, the
typed wrappers of the queue, lease, publish and forget functions, reads that carry their period,
the snapshot builder, and submissions valid by construction."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
import redis.asyncio as aioredis

from leaderboard import (
    WINDOWS,
    BacklogFull,
    BadRequest,
    BoardEntries,
    Entry,
    GameConfig,
    InvalidSubmission,
    Leaderboard,
    LeaderboardError,
    Publication,
    Submission,
    snapshot,
)
from leaderboard.auth import AuthError
from leaderboard.errors import from_reply
from leaderboard.protocol import ProtocolError

from .conftest import NOW


def test_every_error_has_one_root_and_a_stable_code() -> None:
    for error in (
        InvalidSubmission("invalid_points", "points must be a non-negative integer"),
        BadRequest("n must be 1..1000"),
        BacklogFull("full"),
        ProtocolError("bad_json", "the frame is not valid JSON"),
        AuthError("invalid_token", "bad signature"),
    ):
        assert isinstance(error, LeaderboardError) and error.code and error.message
    assert str(InvalidSubmission("invalid_points", "no")) == "invalid_points: no"


def test_library_error_replies_map_to_the_tree() -> None:
    bad = from_reply("bad_request n must be 1..1000")
    assert isinstance(bad, BadRequest) and bad.message == "n must be 1..1000"
    full = from_reply("backlog_full the submissions backlog holds 3 of 3 entries")
    assert isinstance(full, BacklogFull) and full.code == "backlog_full" and "retry later" in full.message
    assert from_reply("WRONGTYPE Operation against a key holding the wrong kind of value") is None


async def test_wrappers_raise_the_tree_for_library_errors(lb: Leaderboard) -> None:
    with pytest.raises(BadRequest, match="lease needs"):
        await lb.lease("me", 0)
    with pytest.raises(BacklogFull):
        await lb.enqueue([{"id": "a"}], backlog_max=0)


async def test_lease_publish_and_forget_wrappers(lb: Leaderboard, r: aioredis.Redis) -> None:
    keys = lb.keys
    pub = Publication("weekly", "global", "2030-W48", 3, 1_900_000_000_000, b'{"type":"snapshot"}')
    assert not await lb.publish("a", 60, [pub])  # no lease: nothing written
    assert await r.exists(keys.latest("weekly", "global")) == 0
    assert await lb.lease("a", 5000) and not await lb.lease("b", 5000)
    assert await lb.publish("a", 60, [pub])
    assert await r.get(keys.latest("weekly", "global")) == '{"type":"snapshot"}'
    assert await r.hgetall(keys.published) == {"weekly:global": "2030-W48:3:1900000000000"}
    assert not await lb.lease("a", 5000, release=True) and await lb.lease("b", 5000)
    await r.xgroup_create(keys.submissions, "g", mkstream=True)
    for name in ("gone", "me"):
        await r.xgroup_createconsumer(keys.submissions, "g", name)
    assert await lb.forget(keys.submissions, "g", idle_ms=0, keep="me") == ["gone"]


async def test_reads_return_the_period_they_read(lb: Leaderboard) -> None:
    last_ms_of_day = WINDOWS["daily"].period(NOW).end_ms - 1
    await lb.submit_batch([Submission("1", "ana", 5, last_ms_of_day).fields()], now=last_ms_of_day)
    top = await lb.top("daily", at=last_ms_of_day)
    assert top.period == WINDOWS["daily"].period(last_ms_of_day)
    assert (await lb.ranks(["ana"], "daily", at=last_ms_of_day)).period == top.period
    assert (await lb.around("ana", "daily", at=last_ms_of_day)).period == top.period
    stats = await lb.stats("daily", at=last_ms_of_day)
    assert (stats.period, stats.size, stats.players) == (top.period, 1, 1)
    # a moment later the clock names the next day; the read still names the board it read
    assert (await lb.top("daily", at=last_ms_of_day + 1)).period != top.period


def test_the_snapshot_is_labelled_with_the_period_of_its_read() -> None:
    period = WINDOWS["weekly"].period(NOW)
    top = BoardEntries(period, [Entry(1, "mia", 50, {"name": "Mia"}), Entry(2, "bo", 40)])
    message: Any = orjson.loads(snapshot.build("region:eu", top, version=4, ts_ms=NOW))
    assert message == {
        "type": "snapshot",
        "board": "region:eu",
        "window": "weekly",
        "period": period.label,
        "version": 4,
        "ts": NOW,
        "mode": "ordinal",
        "entries": [{"rank": 1, "player": "mia", "score": 50, "name": "Mia"}, {"rank": 2, "player": "bo", "score": 40}],
    }


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"id": ""}, "missing_id"),
        ({"player": ""}, "invalid_player"),
        ({"points": -1}, "invalid_points"),
        ({"op": "max"}, "invalid_operator"),
        ({"ts_ms": -5}, "invalid_timestamp"),
        ({"region": "e u"}, "invalid_scope"),
        ({"name": "n" * 65}, "invalid_name"),
    ],
)
def test_a_submission_is_valid_by_construction(kwargs: dict[str, Any], code: str) -> None:
    base: dict[str, Any] = {"id": "s", "player": "ana", "points": 1, "ts_ms": NOW, **kwargs}
    with pytest.raises(InvalidSubmission) as caught:
        Submission(**base)
    assert caught.value.code == code


def test_parse_refuses_fields_that_are_not_text(config: GameConfig) -> None:
    with pytest.raises(InvalidSubmission) as caught:
        Submission.parse({"id": "s", "player": 7, "points": "1", "ts": str(NOW)})
    assert caught.value.code == "invalid_player"
    # without a clock, parse checks the submission alone; with one, the limits too
    old = {"id": "s", "player": "ana", "points": "1", "ts": "1000"}
    assert Submission.parse(old).ts_ms == 1000
    with pytest.raises(InvalidSubmission, match="timestamp_too_old"):
        Submission.parse(old, now_ms=NOW, rules=config.rules())
