"""Defined boards' own periods (a time zone's days, a season's length) end as the game's do: slips
queued and applied by the real scorer, the period closed by the real publisher once (its close
event and finals with every key value, the rank in the board's mode and the metadata, equal to the
pure model's), later slips of it refused, the finals read over a real socket, and the marker and
finals restored by a rebuild from the durable log. Past periods are read by their labels."""

from __future__ import annotations

import asyncio
import io
from typing import Any, cast

import orjson
import pytest
import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from leaderboard import GameConfig, Leaderboard, Submission, boards, now_ms
from leaderboard.errors import BadPeriod
from leaderboard.moderation import Moderation
from scorer import Consumer, Publisher, ScorerSettings, Stats
from scorer.durable import Store
from scorer.durable.recorder import Recorder
from scorer.journal import JournalWorker
from scorer.rebuild import rebuild

from .conftest import MS, NOW
from .gw_helpers import client, greet, recv_type, request, running

pytest_plugins = ("tests.durable_fixtures",)  # fixtures: store_url, store (one per backend)

MIN = 60_000
I64_MIN, I64_MAX = -(2**63), 2**63 - 1
SEASON = {"start_ms": NOW - 90 * MIN, "length_s": 3600}  # s0 ended 30 minutes before NOW
DEFINITIONS: dict[str, dict[str, Any]] = {
    # the higher floor, then the faster time; days start in Kathmandu (+05:45); ties share a rank
    "tower": {
        "id": "tower",
        "keys": [
            {"name": "floor", "min": 0, "max": 1000},
            {"name": "time", "direction": "asc", "display": "duration_ms"},
        ],
        "windows": ["daily"],
        "time_zone": "Asia/Kathmandu",
        "rank_mode": "competition",
        "metadata_bytes": 16,
    },
    # a running balance over the whole int64 range, by hour-long seasons, dense ranks
    "ledger": {
        "id": "ledger",
        "keys": [{"name": "balance", "display": "money"}],
        "operator": "incr",
        "windows": ["season"],
        "season": SEASON,
        "rank_mode": "dense",
    },
    # the fastest run first: packed (one bounded key), with its replay id
    "speedrun": {
        "id": "speedrun",
        "keys": [{"name": "ms", "direction": "asc", "display": "duration_ms", "min": 0, "max": 3_600_000}],
        "windows": ["season"],
        "season": SEASON,
        "metadata_bytes": 16,
    },
    # the higher level, then the faster time, both keys in one double (packed); ties to the last
    "race": {
        "id": "race",
        "keys": [
            {"name": "level", "min": 0, "max": 99},
            {"name": "ms", "direction": "asc", "display": "duration_ms", "min": 0, "max": 1_000_000},
        ],
        "windows": ["season"],
        "season": SEASON,
        "tie": "last",
        "metadata_bytes": 16,
    },
}
WINDOW = {"tower": "daily", "ledger": "season", "speedrun": "season", "race": "season"}
SLIPS: dict[str, list[tuple[str, tuple[int, ...], str | None]]] = {
    "tower": [
        ("ana", (12, 81_250), "r-a"),
        ("ben", (12, 79_900), None),
        ("cy", (11, 50_000), "r-c"),
        ("dee", (12, 79_900), None),  # ben's values, reached later: tied in competition ranks
    ],
    "ledger": [
        ("ana", (I64_MIN,), None),
        ("ben", (I64_MAX,), None),
        ("cy", (-5,), None),
        ("cy", (-7,), None),
        ("dee", (0,), None),
        ("eve", (0,), None),
    ],
    "speedrun": [("ana", (61_500,), "replay-a"), ("ben", (59_990,), "replay-b"), ("cy", (60_000,), None)],
    "race": [("ana", (99, 1_000_000), "r-a"), ("ben", (7, 500), None), ("cy", (99, 0), "r-c"), ("dee", (7, 500), None)],
}
# where each board's slips are reached: tower in its day at NOW, the seasons in s0
FIRST_TS = {"tower": NOW - 20 * MIN, "ledger": NOW - 80 * MIN, "speedrun": NOW - 70 * MIN, "race": NOW - 60 * MIN}


def settings(redis_url: str, config: GameConfig, name: str = "s1", **kw: Any) -> ScorerSettings:
    return ScorerSettings(redis_url=redis_url, game=config, name=name, batch=50, block_ms=20, metrics_port=0, **kw)


async def apply(r: aioredis.Redis, redis_url: str, config: GameConfig, subs: list[Submission], clock: int) -> Stats:
    """Queued (lb_enqueue) and applied by a burst scorer whose clock reads ``clock``."""
    await Leaderboard(r, config).enqueue([s.fields() for s in subs], backlog_max=1000)
    stats = Stats()
    await asyncio.wait_for(
        Consumer(r, settings(redis_url, config), stats, now=lambda: clock).run(burst=True), 30_000 * MS
    )
    return stats


def model_of(definition: boards.Definition, first_ts: int | None = None) -> tuple[boards.Board, dict[str, str]]:
    """The pure model of a board fed its SLIPS a second apart from ``first_ts``, and its metadata."""
    model = boards.Board(definition, unit_ms=1 if definition.encoding == boards.LEX else 1000)
    meta: dict[str, str] = {}
    for n, (player, values, m) in enumerate(SLIPS[definition.id]):
        model.submit(player, values, (FIRST_TS[definition.id] if first_ts is None else first_ts) + n * 1000)
        if m is not None:
            meta[player] = m
    return model, meta


def model_order(definition: boards.Definition, first_ts: int) -> list[tuple[str, tuple[int, ...]]]:
    return model_of(definition, first_ts)[0].top(100)


def model_finals(definition: boards.Definition, first_ts: int | None = None) -> list[dict[str, Any]]:
    """The final top of a board as the pure model orders and ranks it (leaderboard/boards/model.py)."""
    model, meta = model_of(definition, first_ts)
    out = []
    for player, values in model.top(100):
        row: dict[str, Any] = {"rank": model.rank(player), "player": player, "keys": [str(v) for v in values]}
        if player in meta:
            row["meta"] = meta[player]
        out.append(row)
    return out


async def closed_events(r: aioredis.Redis, config: GameConfig) -> list[dict[str, Any]]:
    entries: Any = await r.xrange(config.keys.closed)
    return [fields for _, fields in entries]


async def test_defined_boards_close_their_own_periods_once(
    r: aioredis.Redis, redis_url: str, config: GameConfig
) -> None:
    lb = Leaderboard(r, config)
    definitions = {b: await lb.create_board(boards.parse(raw)) for b, raw in DEFINITIONS.items()}
    assert definitions["race"].encoding == boards.PACKED
    subs = [
        Submission(f"{board}-{n}", player, 0, FIRST_TS[board] + n * 1000, board=board, values=values, meta=meta)
        for board, slips in SLIPS.items()
        for n, (player, values, meta) in enumerate(slips)
    ]
    assert (await apply(r, redis_url, config, subs, NOW)).applied == len(subs)
    tower_day = boards.period(definitions["tower"], "daily", NOW)
    assert (tower_day.label, tower_day.end_ms) == ("2030-11-26", NOW + 8 * 60 * MIN + 15 * MIN)  # 18:15 UTC

    # At NOW the seasons' s0 ended 30 minutes ago: closed; tower's day runs until 18:15 UTC.
    clock = [NOW]
    a, b = (Publisher(r, settings(redis_url, config, name), Stats(), now=lambda: clock[0]) for name in "ab")
    await a.tick()
    first = await closed_events(r, config)
    assert sorted(e["id"] for e in first) == [
        "season:s0:board:ledger",
        "season:s0:board:race",
        "season:s0:board:speedrun",
    ]
    # past the close delay after tower's local midnight: its day closes, on its own
    clock[0] = tower_day.end_ms + 65_000
    await a.tick()
    await b.tick()  # another replica asking again adds nothing
    board = await _board(lb, "tower", tower_day.start_ms)
    again = await lb.close(board.period, [board.scope], top_n=10, keep=10, maxlen=100, definition=board.definition)
    assert again is None
    events = await closed_events(r, config)
    assert [e["id"] for e in events[3:]] == ["daily:2030-11-26:board:tower"]
    for event in events:
        board = event["board"].removeprefix("board:")
        d = definitions[board]
        period = boards.named(d, WINDOW[board], event["period"])
        assert (event["window"], int(event["start_ms"]), int(event["end_ms"])) == (
            WINDOW[board],
            period.start_ms,
            period.end_ms,
        )
        assert orjson.loads(event["top"]) == {event["board"]: model_finals(d)}, board
        columns = [{"name": k.name, "direction": k.direction, "display": k.display} for k in d.keys]
        assert orjson.loads(event["columns"]) == columns
    # the finals hold the same, per board and window; the game's own windows hold none of it
    for board, d in definitions.items():
        [final] = await lb.finals(WINDOW[board], 5, f"board:{board}")
        assert final["top"] == {f"board:{board}": model_finals(d)} and final["board"] == f"board:{board}"
    assert await lb.finals("daily", 5) == []
    ledger = model_finals(definitions["ledger"])
    assert [(e["player"], e["rank"], e["keys"]) for e in ledger] == [
        ("ben", 1, [str(I64_MAX)]),
        ("dee", 2, ["0"]),
        ("eve", 2, ["0"]),
        ("cy", 3, ["-12"]),
        ("ana", 4, [str(I64_MIN)]),
    ]
    # both keys of a packed board decoded, their extremes too; exact ties to the last to reach them
    race = [(e["player"], e["keys"], e.get("meta")) for e in model_finals(definitions["race"])]
    assert race == [
        ("cy", ["99", "0"], "r-c"),
        ("ana", ["99", "1000000"], "r-a"),
        ("dee", ["7", "500"], None),
        ("ben", ["7", "500"], None),
    ]
    assert [(e["player"], e["rank"]) for e in model_finals(definitions["tower"])] == [
        ("ben", 1),
        ("dee", 1),
        ("ana", 3),
        ("cy", 4),
    ]
    # journaled with the board, so a rebuild restores the board's own marker and finals
    journal: Any = await r.xrange(config.keys.journal)
    closes = [orjson.loads(f["args"]) for _, f in journal if f["fn"] == "close"]
    assert sorted(c[-1] for c in closes) == ["board:ledger", "board:race", "board:speedrun", "board:tower"]
    versions = cast(dict[str, str], await r.hgetall(config.keys.versions))
    assert not [f for f in versions if f.startswith(("season:s0:", "daily:2030-11-26:board:"))]

    # A late slip of tower's closed day is refused whole and dead-lettered; the game's own day
    # (UTC, still open) and the next season take theirs.
    late = [
        Submission("late", "fay", 0, tower_day.end_ms - 1000, board="tower", values=(99, 1)),
        Submission("open", "fay", 5, tower_day.end_ms - 1000),
        Submission("next", "fay", 0, NOW - 10 * MIN, board="ledger", values=(1,)),
    ]
    stats = await apply(r, redis_url, config, late, clock[0])
    assert (stats.applied, stats.dead_letters) == (2, 1)
    letters: Any = await r.xrange(config.keys.dead_letters)
    assert [(f["id"], f["dead.code"]) for _, f in letters] == [("late", "period_closed")]
    top = await lb.top("daily", "board:tower", n=10, at=tower_day.start_ms)
    assert "fay" not in {e.player for e in top.entries}

    # The finals over a real socket: every key as text, the metadata, the board's columns.
    async with running(redis_url) as gw, client(gw) as ws:
        await greet(ws)
        for board, d in definitions.items():
            msg = {"type": "finals", "board": f"board:{board}", "window": WINDOW[board], "n": 3}
            reply = await request(ws, msg, "finals")
            [period] = reply["periods"]
            model = model_finals(d)
            assert [(e["rank"], e["player"], e["keys"], e.get("meta")) for e in period["entries"]] == [
                (e["rank"], e["player"], e["keys"], e.get("meta")) for e in model
            ]
            assert [e["score"] for e in period["entries"]] == [int(e["keys"][0]) for e in model]
            assert [c["name"] for c in period["columns"]] == [k.name for k in d.keys]


async def _board(lb: Leaderboard, board: str, at: int) -> Any:
    found = await lb.defined_board(WINDOW[board], f"board:{board}", at)
    assert found is not None
    return found


async def test_a_rebuild_restores_a_defined_boards_close(
    r: aioredis.Redis, redis_url: str, store: Store, config: GameConfig
) -> None:
    lb = Leaderboard(r, config)
    tower = boards.parse(DEFINITIONS["tower"])
    await lb.create_board(tower)
    day = boards.period(tower, "daily", NOW)
    slips = [
        {"id": f"t{n}", "player": p, "board": "tower", "values": f"{f},{t}", "ts": str(day.start_ms + n)}
        for n, (p, (f, t), _) in enumerate(SLIPS["tower"])
    ]
    await lb.submit_batch(slips, now=NOW)
    board = await _board(lb, "tower", NOW)
    assert await lb.close(board.period, [board.scope], top_n=10, keep=10, maxlen=100, definition=board.definition)
    before = await lb.finals("daily", 5, "board:tower")
    marker = config.keys.closed_marker("daily", day.label, "board:tower")
    assert before and await r.exists(marker)
    recorder = Recorder(store, config, retention_days=30, compact_every_s=0)
    worker = JournalWorker(r, settings(redis_url, config, durable_url="sqlite:///x"), recorder)
    await asyncio.wait_for(worker.run(burst=True), 30_000 * MS)

    await r.flushall()
    await rebuild(r, store, config, now=NOW + 60_000, progress_to=io.StringIO())
    assert await Leaderboard(r, config).finals("daily", 5, "board:tower") == before
    assert await r.exists(marker)
    [late] = await Leaderboard(r, config).submit_batch([{**slips[0], "id": "late", "player": "fay"}], now=NOW)
    assert late.code == "period_closed"


# ---------------------------------------------------------------- past periods


def test_past_periods_of_a_time_zone_and_a_season_are_named_by_their_labels() -> None:
    tower = boards.parse(DEFINITIONS["tower"] | {"windows": ["daily", "weekly", "monthly"]})
    hour = boards.parse(DEFINITIONS["ledger"])
    week = boards.parse(DEFINITIONS["ledger"] | {"season": {"start_ms": SEASON["start_ms"], "length_s": 7 * 86_400}})
    later = NOW + 20 * 86_400_000  # 2030-12-16 10:00 UTC, 15:45 in Kathmandu
    for d, w, label in (
        (tower, "daily", "2030-12-15"),
        (tower, "daily", "2030-12-10"),  # the oldest day still kept (7 days after it ends)
        (tower, "weekly", "2030-W49"),
        (tower, "monthly", "2030-11"),
        (week, "season", "s1"),
        (week, "season", "s2"),
    ):
        found = boards.resolve(d, w, label, later)
        # the period a label names is the one its own timestamps fall in, days in Kathmandu
        assert found.label == label and boards.period(d, w, found.start_ms) == found
        assert boards.period(d, w, found.end_ms - 1) == found and boards.period(d, w, found.end_ms) != found
    kathmandu_day = boards.resolve(tower, "daily", "2030-12-15", later)  # from 2030-12-14 18:15 UTC
    assert kathmandu_day.start_ms == NOW + 18 * 86_400_000 + 8 * 3_600_000 + 15 * 60_000
    assert boards.resolve(week, "season", "previous", later).label == "s1"
    assert boards.resolve(hour, "season", "previous", NOW).label == "s0"
    refused = [
        (tower, "daily", "2030-12-17", "has not started yet"),
        (tower, "daily", "2030-12-08", "has expired"),
        (tower, "weekly", "2030-W60", "not a weekly period label"),
        (tower, "daily", "yesterday", "not a daily period label"),
        (week, "season", "s0", "has expired"),  # a season is kept one season length after its end
        (week, "season", "s3", "has not started yet"),
        (week, "season", "s01", "not a season label"),
        (week, "season", "s-1", "not a season label"),
        (hour, "season", "all", "not a season label"),
    ]
    for d, w, label, message in refused:
        with pytest.raises(ValueError, match=message):
            boards.resolve(d, w, label, later)
    with pytest.raises(ValueError, match="no previous period"):
        boards.resolve(week, "season", "previous", SEASON["start_ms"] + 1000)


async def test_a_past_period_of_a_time_zone_board_reads_like_the_current_one(
    r: aioredis.Redis, redis_url: str, config: GameConfig
) -> None:
    lb = Leaderboard(r, config)
    tower = boards.parse(DEFINITIONS["tower"])
    await lb.create_board(tower)
    now = now_ms()  # the gateway reads at its own clock
    today = boards.period(tower, "daily", now)
    days = [boards.period(tower, "daily", today.start_ms - k * 86_400_000) for k in (3, 1, 0)]
    for k, day in enumerate(days):  # each day's slips applied that day
        subs = [
            Submission(f"d{k}-{p}", p, 0, day.start_ms + 60_000, board="tower", values=(floor + k, 1000))
            for p, floor in (("ana", 5), ("ben", 7))
        ]
        assert (await apply(r, redis_url, config, subs, min(now, day.start_ms + 120_000))).applied == len(subs)
    async with running(redis_url) as gw, client(gw) as ws:
        await greet(ws)
        for k, day in enumerate(days):
            msg = {"type": "top", "board": "board:tower", "window": "daily", "period": day.label, "n": 5}
            reply = await request(ws, msg, "top")
            assert reply["period"] == day.label
            assert [(e["player"], e["keys"]) for e in reply["entries"]] == [
                ("ben", [str(7 + k), "1000"]),
                ("ana", [str(5 + k), "1000"]),
            ]
        gone = boards.period(tower, "daily", today.start_ms - 9 * 86_400_000).label  # kept 7 days after its end
        msg = {"type": "top", "board": "board:tower", "window": "daily", "period": gone}
        assert (await request(ws, msg, "error"))["code"] == "bad_period"
    with pytest.raises(BadPeriod, match="has expired"):
        await lb.top("daily", "board:tower", period=gone, at=now)


# ---------------------------------------------------------------- tournaments


async def test_a_tournament_on_defined_boards_runs_publishes_and_closes(
    r: aioredis.Redis, redis_url: str, config: GameConfig
) -> None:
    lb, now = Leaderboard(r, config), now_ms()
    tower = boards.parse(DEFINITIONS["tower"])
    speedrun = boards.parse(DEFINITIONS["speedrun"] | {"windows": ["daily"], "season": None})
    wide = boards.parse({"id": "wide", "keys": [{"name": "v", "min": 0, "max": 2**36 - 1}], "windows": ["daily"]})
    # two keys in one double: 100 × 1,000,001 fits a tournament's 2^31 too
    race = await lb.create_board(boards.parse(DEFINITIONS["race"] | {"windows": ["daily"], "season": None}))
    assert wide.encoding == speedrun.encoding == race.encoding == boards.PACKED
    for d in (tower, speedrun, wide):
        await lb.create_board(d)
    cup = await lb.create_tournament("cup", now - 10 * MIN, now + 50 * MIN)
    await lb.join("cup", ["ana", "ben", "cy", "dee"])
    start = now - 5 * MIN
    subs = [
        Submission(f"{board}-{n}", player, 0, start + n * 1000, board=board, values=values, meta=meta, tournament="cup")
        for board in ("tower", "speedrun", "race")
        for n, (player, values, meta) in enumerate(SLIPS[board])
    ]
    refused = [
        Submission("out", "fay", 0, start, board="tower", values=(99, 1), tournament="cup"),  # not entered
        Submission("big", "ana", 0, start, board="wide", values=(5,), tournament="cup"),  # wider than k = 22
    ]
    stats = await apply(r, redis_url, config, [*subs, *refused], now)
    assert (stats.applied, stats.dead_letters) == (len(subs), 2)
    letters: Any = await r.xrange(config.keys.dead_letters)
    assert {f["id"]: f["dead.code"] for _, f in letters} == {"out": "not_entered", "big": "key_out_of_range"}
    for d in (tower, speedrun, race):
        expected = [(e["player"], e["keys"], e.get("meta")) for e in model_finals(d, first_ts=start)]
        top = await lb.top("t-cup", f"board:{d.id}", n=10)
        assert [(e.player, [str(v) for v in e.keys or ()], e.metadata) for e in top.entries] == expected
        assert top.period.label == "cup"
        assert (await lb.top("daily", f"board:{d.id}", n=10)).entries == []  # its own windows untouched
    # published while it runs, read over a real socket
    clock = [now]
    pub = Publisher(r, settings(redis_url, config), Stats(), now=lambda: clock[0])
    due = await pub.tick()
    assert {(d.window, d.scope) for d in due} >= {("t-cup", "board:tower"), ("t-cup", "board:speedrun")}
    async with running(redis_url) as gw, client(gw) as ws:
        await greet(ws)
        await request(ws, {"type": "subscribe", "board": "board:tower", "window": "t-cup"}, "subscribed")
        snap = await recv_type(ws, "snapshot")
        assert [e["player"] for e in snap["entries"]] == [p for p, *_ in model_order(tower, start)]
    # a ban takes the player off the tournament's boards too
    await Moderation(lb).ban("cy", actor="ops", reason="test")
    assert "cy" not in {e.player for e in (await lb.top("t-cup", "board:tower", n=10)).entries}
    # closed once its end is past the close delay: the board's own event and finals
    clock[0] = cup.period(0).end_ms + 65_000
    await pub.tick()
    await pub.tick()
    events = {e["id"]: e for e in await closed_events(r, config)}
    assert set(events) == {"t-cup:cup:board:tower", "t-cup:cup:board:speedrun", "t-cup:cup:board:race"}
    raced = orjson.loads(events["t-cup:cup:board:race"]["top"])["board:race"]  # both keys, cy banned
    expected = [(e["player"], e["keys"], e.get("meta")) for e in model_finals(race, first_ts=start)]
    assert [(e["player"], e["keys"], e.get("meta")) for e in raced] == [x for x in expected if x[0] != "cy"]
    assert [e["rank"] for e in raced] == [1, 2, 3]
    top = orjson.loads(events["t-cup:cup:board:tower"]["top"])["board:tower"]
    assert [e["player"] for e in top] == [p for p, *_ in model_order(tower, start) if p != "cy"]
    [final] = await lb.finals("t-cup", 5, "board:tower")
    assert final["top"]["board:tower"] == top
    assert ("t-cup", "board:tower") not in (pub.published or {})  # never published again
    late = Submission("late", "ana", 0, cup.period(0).end_ms - 1000, board="tower", values=(500, 1), tournament="cup")
    stats = await apply(r, redis_url, config, [late], clock[0])
    assert stats.dead_letters == 1
    letters = await r.xrange(config.keys.dead_letters)
    assert letters[-1][1]["dead.code"] == "period_closed"


async def test_a_malformed_close_of_a_defined_board_is_refused_and_writes_nothing(
    r: aioredis.Redis, config: GameConfig
) -> None:
    lb = Leaderboard(r, config)
    tower = boards.parse(DEFINITIONS["tower"])
    await lb.create_board(tower)
    board = await _board(lb, "tower", NOW)
    command = lb.close_command(board.period, [board.scope], top_n=10, keep=10, maxlen=100, definition=board.definition)
    name, count = str(command[1]), int(command[2])
    keys, args = [str(k) for k in command[3 : 3 + count]], command[3 + count :]
    # ARGV: layout, window, period, start, end, encoding, n, expire_at, kept, maxlen, now, mode, columns,
    # key spec, scope
    for bad, code in (
        ({13: "x,,0,1"}, "bad_request"),  # a direction other than d or a
        ({13: ";".join(["d,,0,1"] * 6)}, "bad_request"),  # six keys
        ({11: "olympic"}, "bad_request"),  # no such rank mode
        ({5: "17"}, "bad_request"),  # a packed shift, with keys no exact double holds
        ({5: "lex:9"}, "bad_request"),  # no such encoding
        ({12: ""}, "bad_request"),  # no columns: the game's boards' entries are points, one packed value
        ({6: "0"}, "bad_request"),  # an empty top
        ({0: "1"}, "library_mismatch"),  # another release's call
    ):
        changed = [bad.get(i, a) for i, a in enumerate(args)]
        with pytest.raises(ResponseError, match=code):
            await r.fcall(name, len(keys), *keys, *changed)
    with pytest.raises(ResponseError, match="bad_request"):
        await r.fcall(name, len(keys), *keys, *args[:-1])
    # a defined board closes alone, with its own scopes' boards only (several of the game's scopes
    # are the game's, under a stored default), its home first
    with pytest.raises(ResponseError, match="bad_request"):
        await r.fcall(name, len(keys) + 2, *keys, *keys[-2:], *args, "region:eu")
    with pytest.raises(ResponseError, match="bad_request"):
        await r.fcall(name, len(keys) + 2, *keys, *keys[-2:], *args[:-1], "board:tower:region:eu", board.scope)
    assert not await r.exists(keys[0], config.keys.closed, keys[2])
