"""An announcement carries its entry in the shape the board's snapshot entries have: a page
reads both with the same code. A defined board's carries ``keys`` (its values as text, exact
over the whole int64 range), ``score`` (the first as a number) and ``meta``; a game's board's
carries its points alone, as it always has."""

from __future__ import annotations

from typing import Any

import orjson
import redis.asyncio as aioredis

from leaderboard import Leaderboard, Submission, boards, snapshot

from .conftest import MS, NOW

LATER = NOW + 60_000  # the server clock: every submission is in the past
# A message's own fields, around the entry it carries.
HEAD = {"type", "board", "window", "period"}


async def announced(ps: Any) -> dict[str, Any]:
    msg = await ps.get_message(ignore_subscribe_messages=True, timeout=2000 * MS)
    assert msg is not None, "no announcement"
    data: dict[str, Any] = orjson.loads(msg["data"])
    return data


async def snapshot_entry(lb: Leaderboard, board: str, player: str) -> dict[str, Any]:
    """The player's entry in the board's snapshot, as the publisher builds it."""
    payload = snapshot.build(board, await lb.top("daily", board, 10, at=NOW), version=1, ts_ms=NOW)
    [entry] = [e for e in orjson.loads(payload)["entries"] if e["player"] == player]
    assert isinstance(entry, dict)
    return entry


def shape(entry: dict[str, Any]) -> dict[str, Any]:
    """Each field's value and type (a number 12 and a text "12" differ; an array's items too)."""
    return {k: (v, type(v), [type(i) for i in v] if isinstance(v, list) else None) for k, v in entry.items()}


async def test_a_defined_boards_announcement_carries_its_snapshot_entry(lb: Leaderboard, r: aioredis.Redis) -> None:
    shapes = {
        "tower": [{"name": "floor", "min": 0, "max": 1000}, {"name": "time", "direction": "asc"}],
        # one key over the whole int64 range: beyond 2^53, where a double would round the score
        "ledger": [{"name": "balance"}],
        # one bounded key: the packed encoding, as a game's board
        "speedrun": [{"name": "ms", "direction": "asc", "min": 0, "max": 3_600_000}],
        # two bounded keys in one double: packed, both decoded from the score
        "race": [{"name": "level", "min": 0, "max": 99}, {"name": "ms", "direction": "asc", "min": 0, "max": 999_999}],
    }
    encodings = []
    for board, keys in shapes.items():
        definition = boards.parse({"id": board, "keys": keys, "windows": ["daily"], "metadata_bytes": 64})
        encodings.append((await lb.create_board(definition)).encoding)
    assert encodings == [boards.LEX, boards.LEX, boards.PACKED, boards.PACKED]
    ps = r.pubsub()
    await ps.ssubscribe(lb.keys.announce_channel)  # sharded pub/sub, as the library publishes it
    await ps.get_message(timeout=1000 * MS)  # the subscribe confirmation
    cases = [
        ("tower", (14, 99_000), "replay-7f3"),
        ("tower", (14, 98_000), None),  # no metadata: none announced, as in the snapshot
        ("ledger", (2**62 + 1,), "a"),
        ("speedrun", (81_250,), "car-9"),
        ("race", (99, 999_999), "car-2"),
    ]
    for i, (board, values, meta) in enumerate(cases):
        player = f"p{i}"
        sub = Submission(f"s{i}", player, 0, NOW + i, name="Mia", board=board, values=values, meta=meta)
        await lb.submit_batch([sub.fields()], now=LATER)
        got = await announced(ps)
        entry = await snapshot_entry(lb, f"board:{board}", player)
        assert entry["keys"] == [str(v) for v in values]  # what the snapshot carries, for the comparison below
        assert {k: got[k] for k in HEAD} == {
            "type": "announce",
            "board": f"board:{board}",
            "window": "daily",
            "period": "2030-11-26",
        }
        # the snapshot entry's fields, with the slip's name (a snapshot's comes from the profile)
        assert shape({k: v for k, v in got.items() if k not in HEAD}) == shape(entry | {"name": "Mia"}), board
    await ps.aclose()


async def test_a_game_boards_announcement_is_its_points_alone(lb: Leaderboard, r: aioredis.Redis) -> None:
    ps = r.pubsub()
    await ps.ssubscribe(lb.keys.announce_channel)
    await ps.get_message(timeout=1000 * MS)
    await lb.submit_batch([Submission("s1", "mia", 500, NOW, name="Mia").fields()], now=LATER)
    windows = set()
    for _ in range(3):  # one per window of the game
        got = await announced(ps)
        windows.add(got.pop("window"))
        assert shape(got) == shape(
            {
                "type": "announce",
                "board": "global",
                "period": got["period"],
                "player": "mia",
                "name": "Mia",
                "rank": 1,
                "score": 500,
            }
        )
    assert windows == {"daily", "weekly", "alltime"}
    await ps.aclose()
