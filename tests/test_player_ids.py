"""Player ids follow one rule (leaderboard/profiles.py ``is_player_id``), which the function
library applies too (``valid_player``): a table of hostile ids and a property hold the two equal,
and every door a player id comes through refuses them: a submission (queue and library), a
token's ``sub``, a ban, a tournament entry."""

from __future__ import annotations

import asyncio
import itertools
import time

import jwt
import pytest
import redis.asyncio as aioredis
from hypothesis import given
from hypothesis import strategies as st

from fleet.redis_server import RedisServer
from leaderboard import GameConfig, InvalidSubmission, Leaderboard, Submission, connect
from leaderboard.auth import AuthError, authenticate
from leaderboard.batch import decode_batch, encode_batch
from leaderboard.errors import InvalidInput
from leaderboard.moderation import Moderation
from leaderboard.profiles import is_player_id

from .conftest import NOW
from .gw_helpers import SECRETS, client, greet, request, running, token
from .properties import bounded

HOSTILE = [
    "",
    "p" * 65,
    "é" * 33,  # 66 bytes
    "nul\x00byte",
    "new\nline",
    "tab\there",
    "cr\rhere",
    "del\x7f",
    "c1\x85next-line",
    "c1\x9bcsi",
    "rlo\u202eevil",
    "lre\u202aevil",
    "pdf\u202c",
    "lri\u2066evil",
    "pdi\u2069",
    "line\u2028sep",
    "para\u2029sep",
    "zwsp\u200bx",
    "zwnj\u200cx",
    "zwj\u200dx",
    "lrm\u200ex",
    "rlm\u200fx",
    "alm\u061cx",
    "wj\u2060x",
    "invisible\u2064plus",
    "bom\ufeffx",
    "\ufeff",
    "lone\udcffsurrogate",
]
FINE = ["mia", "p" * 64, "é" * 32, "player 42", "Zoë", "名前", "👾-9", "a\u2065b", "ab\u2070", "~!@#$%^&*()"]


def _entries(players: list[str]) -> list[dict[str, str]]:
    return [{"id": f"s{i}", "player": p, "points": "10", "ts": str(NOW)} for i, p in enumerate(players)]


async def _library_verdicts(lb: Leaderboard, players: list[str]) -> list[bool]:
    """Whether lb_submit accepts each player id (the entries reach the library unchecked)."""
    plan = encode_batch(lb.config, _entries(players), NOW)
    replies = await lb.redis.fcall("lb_submit", len(plan.keys), *plan.keys, *plan.args)
    results = decode_batch(plan, replies)
    for result in results:
        assert result.status == "ok" or result.code == "invalid_player", result
    return [result.status == "ok" for result in results]


def test_the_python_rule_refuses_every_hostile_id_and_keeps_the_fine_ones() -> None:
    assert [p for p in HOSTILE if is_player_id(p)] == []
    assert [p for p in FINE if not is_player_id(p)] == []
    for player in HOSTILE:
        with pytest.raises(InvalidSubmission) as exc:
            Submission("s1", player, 10, NOW)
        assert exc.value.code == "invalid_player"


async def test_the_library_gives_each_id_the_verdict_python_gives(r: aioredis.Redis, config: GameConfig) -> None:
    lb = Leaderboard(r, config)
    # surrogates cannot be sent as UTF-8: the library gets the bytes a broken client would send
    sendable = [p for p in HOSTILE + FINE if "\udcff" not in p]
    assert await _library_verdicts(lb, sendable) == [is_player_id(p) for p in sendable]
    # nothing of a refused slip was written: only the fine ids are on the board
    board = await r.zrange(config.keys.board("alltime", "all", "global"), 0, -1)
    assert sorted(board) == sorted(FINE)
    with pytest.raises(aioredis.ResponseError, match=r"^invalid_player"):  # bytes as a broken caller sends them
        await r.fcall(
            "lb_ban",
            4,
            config.keys.banned,
            config.keys.versions,
            config.keys.activity,
            config.keys.journal,
            "2",
            "ban",
            b"bad\xe2\x80\x8bid",
            "ops",
            "cheat",
            NOW,
            100,
        )
    assert not await r.exists(config.keys.banned)


async def test_every_door_refuses_a_hostile_id(r: aioredis.Redis, config: GameConfig) -> None:
    lb = Leaderboard(r, config)
    for player in ("rlo\u202eevil", "zwsp\u200bx", "nul\x00"):
        with pytest.raises(InvalidInput) as exc:
            await Moderation(lb).ban(player, actor="ops", reason="cheat")
        assert exc.value.code == "invalid_player"
        # the library's own check, for a caller that bypasses the Python one
        with pytest.raises(aioredis.ResponseError, match=r"^invalid_player"):
            await r.fcall(
                "lb_unban", 3, config.keys.banned, config.keys.activity, config.keys.journal, player, "ops", "", 100
            )
        await lb.create_tournament("cup", NOW - 1000, NOW + 3_600_000)
        with pytest.raises(InvalidInput):
            await lb.join("cup", ["fine", player])
        window = await lb.tournaments.get("cup")
        assert window is not None
        entrants = config.keys.entrants("cup")
        with pytest.raises(aioredis.ResponseError, match=r"^invalid_player"):
            await r.fcall(
                "lb_join",
                3,
                config.keys.tournaments,
                entrants,
                config.keys.journal,
                "cup",
                NOW,
                NOW // 1000 + 60,
                "fine",
                player,
            )
        assert await r.scard(entrants) == 0  # a refused call enters nobody
        token = jwt.encode({"sub": player, "role": "player", "exp": time.time() + 60}, SECRETS[0], algorithm="HS256")
        with pytest.raises(AuthError) as auth:
            authenticate(token, SECRETS)
        assert auth.value.code == "invalid_token"
        assert auth.value.message.startswith("sub must be a player id")


# Text around the refused code points: each of them, their neighbours, and anything at all.
_EDGES = [
    0x1F,
    0x20,
    0x7E,
    0x7F,
    0x9F,
    0xA0,
    0x61B,
    0x61C,
    0x61D,
    *range(0x200A, 0x2011),
    *range(0x2027, 0x2030),
    *range(0x205F, 0x2070),
    0xFEFE,
    0xFEFF,
    0xFF00,
]
_GAMES = itertools.count()
_ids = st.lists(
    st.sampled_from([chr(c) for c in _EDGES]) | st.characters(exclude_categories=["Cs"]), min_size=0, max_size=24
).map("".join)


@bounded(25)
@given(st.lists(_ids, min_size=1, max_size=40, unique=True))
def test_property_python_and_library_agree_on_any_id(redis_server: RedisServer, players: list[str]) -> None:
    async def run() -> None:
        client = connect(redis_server.url)
        try:
            lb = Leaderboard(client, GameConfig(game=f"ids{next(_GAMES)}"))  # a fresh game: no id seen before
            assert await _library_verdicts(lb, players) == [is_player_id(p) for p in players]
        finally:
            await client.aclose()

    asyncio.run(run())


async def test_the_server_socket_refuses_a_slip_with_a_hostile_player_id(redis_url: str, r: aioredis.Redis) -> None:
    async with running(redis_url) as gw, client(gw, f"?token={token('backend-1', 'server')}") as ws:
        await greet(ws)
        for player in ("rlo\u202eevil", "zwsp\u200bx", "two\nlines"):
            slip = {"id": "s-1", "player": player, "points": 5}
            reply = await request(ws, {"type": "submit", "submission": slip})
            assert (reply["type"], reply["code"]) == ("error", "invalid_player")
            rank = await request(ws, {"type": "rank", "player": player})
            assert (rank["type"], rank["code"]) == ("error", "bad_message")
    assert await r.xlen(GameConfig(game="test").keys.submissions) == 0  # nothing queued
