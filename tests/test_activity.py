"""The activity stream's entries: one per lb_submit call, a column per field, read back by
leaderboard.activity as one event per submission, in the call's order; moderation actions stay
one entry each."""

from __future__ import annotations

from typing import Any

import pytest
import redis.asyncio as aioredis

from leaderboard import Leaderboard, Submission, activity, boards

from .conftest import NOW, activity_events

LATER = NOW + 600_000


def slip(sid: str, player: str, points: int, ts: int = NOW, **extra: str) -> dict[str, str]:
    return {"id": sid, "player": player, "points": str(points), "ts": str(ts), **extra}


def test_a_batch_entry_reads_back_as_its_submissions_in_order() -> None:
    fields = {
        "n": "2",
        "id": "a\nb",
        "player": "ana\nben",
        "points": "10\n20",
        "op": "\nincr",
        "ts": "1\n2",
        "improved": "1\n0",
        "rank": "3\n0",
        "board": "\nboard:tower",
    }
    assert activity.submissions(fields) == [
        {"id": "a", "player": "ana", "points": "10", "op": "", "ts": "1", "improved": "1", "rank": "3", "board": ""},
        {
            "id": "b",
            "player": "ben",
            "points": "20",
            "op": "incr",
            "ts": "2",
            "improved": "0",
            "rank": "0",
            "board": "board:tower",
        },
    ]


def test_a_moderation_entry_is_one_event_as_it_is() -> None:
    fields = {"action": "ban", "player": "cheat", "by": "ops", "reason": "aimbot"}
    assert activity.submissions(fields) == [fields]


def test_an_entry_whose_columns_disagree_with_its_count_is_refused() -> None:
    with pytest.raises(ValueError, match="2 submissions"):
        activity.submissions({"n": "2", "id": "a", "player": "ana\nben"})


def test_newest_takes_events_newest_first_across_entries() -> None:
    older = {"n": "2", **{name: "a\nb" if name == "id" else "\n" for name in activity.COLUMNS}}
    newer = {"action": "unban", "player": "q"}
    events = activity.newest([("2-0", newer), ("1-0", older)], 2)
    assert [e.get("id", e.get("action")) for e in events] == ["unban", "b"]


async def test_one_entry_per_call_holds_every_applied_submission_and_no_refused_one(
    lb: Leaderboard, r: aioredis.Redis
) -> None:
    # ids and players with spaces, commas, quotes and non-ASCII text survive the columns
    entries = [
        slip("id with space", "ana", 10),
        slip("x,y", "bén", 20),
        slip("dup", 'ci "q"', 5),
        slip("dup", 'ci "q"', 7),  # the same id again: a duplicate, not applied
        slip("bad", "\u202eevil", 1),  # refused: invalid_player
        slip("last", "ana", 30, op="incr"),
    ]
    results = await lb.submit_batch(entries, now=LATER)
    assert [res.status for res in results] == ["ok", "ok", "ok", "duplicate", "error", "ok"]
    assert await r.xlen(lb.keys.activity) == 1
    events = await activity_events(r, lb.keys.activity)
    assert [(e["id"], e["player"], e["points"], e["op"]) for e in events] == [
        ("id with space", "ana", "10", ""),
        ("x,y", "bén", "20", ""),
        ("dup", 'ci "q"', "5", ""),
        ("last", "ana", "30", "incr"),
    ]
    assert [e["improved"] for e in events] == ["1", "1", "1", "1"]
    # the game's boards alone: no board column (read as '' each)
    raw: Any = await r.xrange(lb.keys.activity)
    assert "board" not in raw[0][1] and {e["board"] for e in events} == {""}
    # a call that applies nothing writes no entry
    await lb.submit_batch([slip("dup", 'ci "q"', 9)], now=LATER)
    assert await r.xlen(lb.keys.activity) == 1


def test_an_entry_written_by_hand_is_skipped_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    good = {"n": "1", **{name: "x" for name in activity.COLUMNS}}
    bad = {"n": "3", "id": "a\nb"}
    with caplog.at_level("WARNING", logger="leaderboard.activity"):
        assert [e["id"] for e in activity.events([("1-0", good), ("2-0", bad), ("3-0", good)])] == ["x", "x"]
        assert activity.newest([("2-0", bad), ("1-0", good)], 5) == [dict.fromkeys(activity.COLUMNS, "x")]
    assert "activity entry 2-0 skipped" in caplog.text


def test_an_entry_without_the_board_column_reads_it_as_the_games() -> None:
    # a call of the game's boards alone writes none, nor did an older library
    older = {"n": "2", **{name: "a\nb" for name in activity.COLUMNS if name != "board"}}
    assert [e["board"] for e in activity.submissions(older)] == ["", ""]


# Tower's shape: two keys, the higher floor then the faster time (lex)
TOWER = boards.parse(
    {"id": "tower", "keys": [{"name": "floor"}, {"name": "time", "direction": "asc"}], "top_n": 2, "windows": ["daily"]}
)


async def test_every_board_gives_its_slips_their_rank_and_board_in_the_activity_entry(
    lb: Leaderboard, r: aioredis.Redis
) -> None:
    # the rank on the slip's first board when within that board's top N (2 here), the game's
    # own boards as before (top 10)
    tower = [
        Submission("t1", "ana", 0, NOW, board="tower", values=(5, 90_000)),
        Submission("t2", "ben", 0, NOW, board="tower", values=(5, 80_000)),  # faster: above ana
        Submission("t3", "cy", 0, NOW, board="tower", values=(1, 10_000)),  # third: outside the top 2
        Submission("t4", "ana", 0, NOW + 1, board="tower", values=(4, 10_000)),  # not better: still 2nd
    ]
    game = [slip("g1", "ana", 50), slip("g2", "ben", 70)]
    for rows in (True, False):  # the rank read for rows, and only for the activity entry
        await r.flushall()
        await lb.create_board(TOWER)
        await lb.submit_batch([s.fields() for s in tower] + game, now=LATER, rows=rows)
        events = await activity_events(r, lb.keys.activity)
        assert [(e["id"], e["rank"], e["board"], e["points"]) for e in events] == [
            ("t1", "1", "board:tower", ""),
            ("t2", "1", "board:tower", ""),
            ("t3", "0", "board:tower", ""),
            ("t4", "2", "board:tower", ""),
            ("g1", "1", "", "50"),
            ("g2", "1", "", "70"),
        ]
