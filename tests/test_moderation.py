"""Moderation (ban, unban, correct) and profiles, against a real redis-server."""

from __future__ import annotations

from typing import Any, cast

import orjson
import pytest
import redis.asyncio as aioredis

from leaderboard import WINDOWS, Leaderboard
from leaderboard.errors import Banned, InvalidInput
from leaderboard.moderation import BanResult, Moderation
from leaderboard.profiles import Profile
from leaderboard.results import BoardRef

from .conftest import NOW
from .test_library import slip, submit

ACTOR = "ops:alice"


async def top(lb: Leaderboard, window: str = "weekly", scope: str = "global") -> list[tuple[str, int]]:
    return [(e.player, e.score) for e in (await lb.top(window, scope, 100, at=NOW)).entries]


async def versions(r: aioredis.Redis, lb: Leaderboard) -> dict[str, str]:
    return cast(dict[str, str], await r.hgetall(lb.keys.versions))


async def activity(r: aioredis.Redis, lb: Leaderboard) -> list[dict[str, Any]]:
    return [cast(dict[str, Any], fields) for _, fields in await r.xrange(lb.keys.activity) or ()]


async def test_ban_removes_the_player_from_every_window_period_and_scope(lb: Leaderboard, r: aioredis.Redis) -> None:
    last_week = NOW - 7 * 86_400_000
    await submit(lb, slip("1", "cheat", 900, region="eu", mode="duo"), slip("2", "ana", 500, region="eu"))
    # last week's board, still readable until it expires (older than any submission accepted now)
    last = lb.keys.board("weekly", WINDOWS["weekly"].period(last_week).label, "global")
    await r.zadd(last, {"cheat": 800 << 20})
    before = await versions(r, lb)
    result = await Moderation(lb).ban("cheat", actor=ACTOR, reason="speed hack")
    # 3 windows x 3 scopes this period, and last week's board
    assert result.boards == 3 * 3 + 1 and result.top_changed == result.boards
    for window in ("daily", "weekly", "alltime"):
        for scope in ("global", "region:eu", "mode:duo"):
            assert "cheat" not in dict(await top(lb, window, scope))
    assert await r.zscore(last, "cheat") is None
    after = await versions(r, lb)
    assert all(int(after[f]) > int(before.get(f, 0)) for f in after if f.endswith(("global", "region:eu")))
    assert await top(lb) == [("ana", 500)]  # the others keep their place
    [entry] = [a for a in await activity(r, lb) if a.get("action")]
    assert entry == {"action": "ban", "player": "cheat", "by": ACTOR, "reason": "speed hack", "boards": "10"}
    record = await Moderation(lb).banned("cheat")
    assert record is not None and record["by"] == ACTOR and record["reason"] == "speed hack"


async def test_a_banned_players_submissions_are_refused_per_entry_and_replays_too(lb: Leaderboard) -> None:
    [ok] = await submit(lb, slip("1", "cheat", 900))
    await Moderation(lb).ban("cheat", actor=ACTOR, reason="bot")
    replay, later, other = await submit(lb, slip("1", "cheat", 900), slip("2", "cheat", 5), slip("3", "ana", 7))
    assert ok.status == "ok" and other.status == "ok"
    assert (replay.status, replay.code, later.status, later.code) == ("error", "banned", "error", "banned")
    assert await top(lb) == [("ana", 7)]
    # unban: the player may submit again, from nothing (removed scores are not restored); the
    # refused slips left no trace, so even the replayed id is applied now
    assert await Moderation(lb).unban("cheat", actor=ACTOR, reason="appeal granted")
    assert not await Moderation(lb).unban("cheat", actor=ACTOR)
    [again] = await submit(lb, slip("2", "cheat", 5))
    assert again.status == "ok" and await top(lb) == [("ana", 7), ("cheat", 5)]


@pytest.mark.parametrize("more_banned", [0, 3], ids=["tombstones-fewer-than-players", "tombstones-as-many"])
async def test_a_batch_finds_its_banned_players_however_many_tombstones_the_game_holds(
    lb: Leaderboard, more_banned: int
) -> None:
    # lb_submit reads a tombstone hash with fewer fields than the batch has players whole, and
    # asks about each player otherwise: the verdicts are the same either way
    for player in ["cheat", *(f"bot{i}" for i in range(more_banned))]:
        await Moderation(lb).ban(player, actor=ACTOR, reason="bot")
    results = await submit(lb, slip("1", "ana", 7), slip("2", "cheat", 900), slip("3", "ben", 5))
    assert [(r.status, r.code) for r in results] == [("ok", None), ("error", "banned"), ("ok", None)]
    assert await top(lb) == [("ana", 7), ("ben", 5)]


async def test_correct_sets_points_up_or_down_keeping_the_tie_time(lb: Leaderboard, r: aioredis.Redis) -> None:
    await submit(lb, slip("1", "ana", 900, region="eu"), slip("2", "ben", 500, NOW + 1000))
    mod = Moderation(lb)
    before = await versions(r, lb)
    rows = await mod.correct("ana", 500, actor=ACTOR, reason="double-counted match", at=NOW)
    # every window's current period: global and the scope board ana is on
    assert {(c.board.window, c.board.scope) for c in rows} == {
        (w, s) for w in ("daily", "weekly", "alltime") for s in ("global", "region:eu")
    }
    assert all(c.previous == 900 for c in rows)
    assert await top(lb) == [("ana", 500), ("ben", 500)]  # ana reached 500 first: ties keep that
    assert await top(lb, "weekly", "region:eu") == [("ana", 500)]
    assert all(int(v) > int(before[f]) for f, v in (await versions(r, lb)).items() if "global" in f)
    [c] = await mod.correct("cy", 42, actor=ACTOR, reason="lost submission", window_name="weekly", at=NOW)
    assert (c.board, c.previous, c.rank) == (BoardRef("weekly", "2030-W48", "global"), None, 3)
    *_, entry = await activity(r, lb)
    assert entry == {
        "action": "correct",
        "player": "cy",
        "by": ACTOR,
        "reason": "lost submission",
        "value": "42",
        "boards": "1",
    }


async def test_correct_names_another_period_and_refuses_a_banned_player(lb: Leaderboard) -> None:
    mod = Moderation(lb)
    last_week = WINDOWS["weekly"].period(NOW - 7 * 86_400_000)
    [c] = await mod.correct("ana", 3, actor=ACTOR, reason="r", window_name="weekly", period=last_week.label, at=NOW)
    assert c.board.period == last_week.label
    rows = await mod.correct("ana", 4, actor=ACTOR, reason="r", scopes=["region:eu", "global", "region:eu"], at=NOW)
    assert sorted((c.board.window, c.board.scope) for c in rows) == [
        (w, s) for w in ("alltime", "daily", "weekly") for s in ("global", "region:eu")
    ]
    assert await top(lb, "daily", "region:eu") == [("ana", 4)]  # named: created where it was not
    await submit(lb, slip("1", "cheat", 1))
    await mod.ban("cheat", actor=ACTOR, reason="bot")
    with pytest.raises(Banned):
        await mod.correct("cheat", 5, actor=ACTOR, reason="r", at=NOW)


@pytest.mark.parametrize(
    ("call", "code"),
    [
        ({"player": ""}, "invalid_player"),
        ({"actor": ""}, "invalid_actor"),
        ({"reason": ""}, "invalid_reason"),
        ({"reason": "x" * 257}, "invalid_reason"),
        ({"reason": "line\nbreak"}, "invalid_reason"),
        ({"points": -1}, "invalid_points"),
        ({"points": "1e3"}, "invalid_points"),
        ({"points": 2**27}, "points_out_of_range"),  # alltime holds 2^27 - 1
        ({"window_name": "yearly"}, "invalid_window"),
        ({"window_name": "weekly", "period": "2030-W99"}, "invalid_period"),
        ({"period": "2030-W48"}, "invalid_period"),
        ({"scopes": ["region:"]}, "invalid_scope"),
    ],
)
async def test_bad_corrections_are_refused_and_change_nothing(
    lb: Leaderboard, r: aioredis.Redis, call: dict[str, Any], code: str
) -> None:
    await submit(lb, slip("1", "ana", 10))
    before = {k: await r.dump(k) for k in await r.keys("*")}
    args = {"player": "ana", "points": 5, "actor": ACTOR, "reason": "r", "at": NOW, **call}
    with pytest.raises(InvalidInput) as caught:
        await Moderation(lb).correct(args.pop("player"), args.pop("points"), **args)
    assert caught.value.code == code
    assert {k: await r.dump(k) for k in await r.keys("*")} == before


BOARD = ("z", "h", "pt", "m", "md")  # a board's keys in a ban: board, histogram, points, members, metadata


@pytest.mark.parametrize(
    ("fcall", "code"),
    [
        (("lb_ban", 4, "b", "v", "a", "j", "2", "ban", "", ACTOR, "r", NOW, 10), "invalid_player"),
        (("lb_ban", 4, "b", "v", "a", "j", "2", "ban", "p", "", "r", NOW, 10), "invalid_actor"),
        (("lb_ban", 4, "b", "v", "a", "j", "2", "ban", "p", ACTOR, "", NOW, 10), "invalid_reason"),
        (("lb_ban", 4, "b", "v", "a", "j", "2", "ban", "p", ACTOR, "\u202eevil", NOW, 10), "invalid_reason"),
        (("lb_ban", 5, "b", "v", "a", "j", "z", "2", "ban", "p", ACTOR, "r", NOW, 10), "bad_request"),
        (("lb_ban", 4, "b", "v", "a", "j", "2", "unban", "p", ACTOR, "r", NOW, 10), "bad_request"),
        # an earlier release's call (no layout: player first) is refused whole, as is another layout
        (("lb_ban", 4, "b", "v", "a", "j", "p", ACTOR, "r", NOW, 10, 10), "library_mismatch"),
        (("lb_ban", 4, "b", "v", "a", "j", "3", "ban", "p", ACTOR, "r", NOW, 10), "library_mismatch"),
        (
            ("lb_ban", 9, "b", "v", "a", "j", *BOARD, "2", "ban", "p", ACTOR, "r", NOW, 10, "f", 20, "odd", 20),
            "bad_request",
        ),
        (
            ("lb_ban", 9, "b", "v", "a", "j", *BOARD, "2", "ban", "p", ACTOR, "r", NOW, 10, "f", 20, "dense", "lex:6"),
            "bad_request",
        ),
        (
            ("lb_ban", 9, "b", "v", "a", "j", *BOARD, "2", "ban", "p", ACTOR, "r", NOW, 10, "f", "x", "dense", 20),
            "bad_request",
        ),
        (("lb_unban", 3, "b", "a", "j", "p", "\x00", "", 10), "invalid_actor"),
        (
            ("lb_correct", 5, "b", "v", "a", "j", "z", "p", "-5", ACTOR, "r", NOW, 10, 10, "f", 0, 1000, 20, 1000, 0),
            "invalid_points",
        ),
        (
            ("lb_correct", 5, "b", "v", "a", "j", "z", "p", "1", ACTOR, "r", NOW, 10, 10, "f", 0, 1000, 20, 1000),
            "bad_request",
        ),
        (("lb_profile", 3, "pr", "v", "j", "p", 10, 0, "name", "a\x07b"), "invalid_name"),
        (("lb_profile", 3, "pr", "v", "j", "p", 10, 0, "name", "\xff"), "invalid_name"),
        (("lb_profile", 3, "pr", "v", "j", "p", 10, 0, "avatar", "http://x.example/a.png"), "invalid_avatar"),
        (("lb_profile", 3, "pr", "v", "j", "p", 10, 0, "avatar", "https://x.example/a b.png"), "invalid_avatar"),
        (("lb_profile", 3, "pr", "v", "j", "p", 10, 0, "avatar", "javascript:alert(1)"), "invalid_avatar"),
        (("lb_profile", 3, "pr", "v", "j", "p", 10, 0, "country", "fr"), "invalid_country"),
        (("lb_profile", 3, "pr", "v", "j", "p", 10, 0, "email", "x"), "bad_request"),
        (("lb_profile", 3, "pr", "v", "j", "p", 10, 0, "name"), "bad_request"),
    ],
)
async def test_the_library_refuses_malformed_calls_itself(r: aioredis.Redis, fcall: tuple[Any, ...], code: str) -> None:
    """What bypasses the Python checks is refused inside the function, before any write."""
    args: list[Any] = (
        list(fcall[:2]) + [f"lb:{{test}}:{k}" for k in fcall[2 : 2 + fcall[1]]] + list(fcall[2 + fcall[1] :])
    )
    if "\xff" in fcall:
        args[args.index("\xff")] = b"\xff"
    with pytest.raises(aioredis.ResponseError) as caught:
        await r.execute_command("FCALL", *args)
    assert str(caught.value).split(" ", 1)[0] == code
    assert await r.keys("*") == []


async def test_profiles_are_validated_normalised_and_join_snapshots_and_friends(
    lb: Leaderboard, r: aioredis.Redis
) -> None:
    await submit(lb, slip("1", "zoe", 50), slip("2", "ana", 40))
    mod = Moderation(lb)
    before = await versions(r, lb)
    stored = await mod.set_profile(
        "zoe", Profile(name="Zoe\u0308", avatar="https://cdn.example/z.png", country="FR"), at=NOW
    )
    assert stored == {"name": "Zo\u00eb", "avatar": "https://cdn.example/z.png", "country": "FR"}  # NFC
    # only the boards zoe is on the top N of, and only the current periods, move
    assert {f for f, v in (await versions(r, lb)).items() if before.get(f) != v} == {
        f"{w}:{WINDOWS[w].period(NOW).label}:global" for w in ("daily", "weekly", "alltime")
    }
    [first, _] = (await lb.top("weekly", at=NOW)).entries
    assert first.profile == stored
    ranks = await lb.ranks(["zoe", "ana"], "weekly", at=NOW, profiles=True)
    assert [s.profile for s in ranks.standings] == [stored, None]
    # a field not named is kept; "" clears one
    assert await mod.set_profile("zoe", Profile(country=""), at=NOW) == {
        "name": "Zo\u00eb",
        "avatar": "https://cdn.example/z.png",
    }


@pytest.mark.parametrize(
    ("fields", "code"),
    [
        ({"name": "a\u202eb"}, "invalid_name"),
        ({"name": "tab\there"}, "invalid_name"),
        ({"name": "x" * 65}, "invalid_name"),
        ({"name": "\ud800"}, "invalid_name"),
        ({"name": 5}, "invalid_name"),
        ({"avatar": "http://cdn.example/a.png"}, "invalid_avatar"),
        ({"avatar": "https://"}, "invalid_avatar"),
        ({"avatar": "https://cdn.example/" + "a" * 240}, "invalid_avatar"),
        ({"avatar": 'https://cdn.example/"onerror=alert(1)'}, "invalid_avatar"),
        ({"country": "fr"}, "invalid_country"),
        ({"country": "XX"}, "invalid_country"),
        ({"colour": "red"}, "invalid_profile"),
    ],
)
def test_bad_profiles_are_refused_before_the_call(fields: dict[str, Any], code: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        Profile.parse(fields)
    assert caught.value.code == code


async def test_profile_refusals_in_python_and_lua_agree(lb: Leaderboard) -> None:
    for field, value in (("name", "a\u2066b"), ("avatar", "http://x.example/a"), ("country", "fr")):
        with pytest.raises(InvalidInput) as in_python:
            Profile.parse({field: value})
        with pytest.raises(InvalidInput) as in_lua:
            await lb.profile("p", {field: value}, [])
        assert in_python.value.code == in_lua.value.code == f"invalid_{field}"


async def test_correct_takes_periods_as_reads_do(lb: Leaderboard) -> None:
    mod = Moderation(lb)
    [c] = await mod.correct("ana", 3, actor=ACTOR, reason="r", window_name="weekly", period="previous", at=NOW)
    assert c.board.period == WINDOWS["weekly"].period(NOW - 7 * 86_400_000).label
    with pytest.raises(InvalidInput) as caught:  # a period that has not started: nothing to correct
        await mod.correct("ana", 3, actor=ACTOR, reason="r", window_name="weekly", period="2031-W02", at=NOW)
    assert caught.value.code == "invalid_period"
    with pytest.raises(InvalidInput) as caught:
        await mod.correct("ana", 3, actor=ACTOR, reason="r", window_name="t-nope", at=NOW)
    assert caught.value.code == "invalid_window"


async def test_the_ban_record_is_json(lb: Leaderboard, r: aioredis.Redis) -> None:
    await Moderation(lb).ban("p", actor=ACTOR, reason="r")
    assert orjson.loads(cast(str, await r.hget(lb.keys.banned, "p")))["reason"] == "r"


async def test_banning_a_player_on_no_board_records_one_action(lb: Leaderboard, r: aioredis.Redis) -> None:
    assert await Moderation(lb).ban("nobody", actor=ACTOR, reason="pre-emptive") == BanResult(0, 0)
    assert [a["action"] for a in await activity(r, lb)] == ["ban"]
    [slip_result] = await submit(lb, slip("1", "nobody", 5))
    assert slip_result.code == "banned"


async def test_tournaments_are_moderated_like_windows(lb: Leaderboard, r: aioredis.Redis) -> None:
    await lb.create_tournament("cup", NOW, NOW + 3_600_000)
    await lb.join("cup", ["cheat", "ana"])
    later = NOW + 60_000
    cup = [{**slip(f"t{i}", p, n, later), "tournament": "cup"} for i, (p, n) in enumerate([("cheat", 90), ("ana", 50)])]
    assert [x.status for x in await submit(lb, *cup, now=later)] == ["ok", "ok"]
    mod = Moderation(lb)
    before = await versions(r, lb)
    await mod.set_profile("ana", Profile(country="NO"), at=later)
    assert int((await versions(r, lb))["t-cup:cup:global"]) > int(before["t-cup:cup:global"])  # republished
    assert (await mod.ban("cheat", actor=ACTOR, reason="bot")).boards == 1
    assert [(e.player, e.score) for e in (await lb.top("t-cup", at=later)).entries] == [("ana", 50)]
    [c] = await mod.correct("ana", 55, actor=ACTOR, reason="r", window_name="t-cup", at=later)
    assert (c.board, c.previous, c.rank) == (BoardRef("t-cup", "cup", "global"), 50, 1)
