"""Bad input gets a clear, stable error code from both validation layers and writes nothing."""

from __future__ import annotations

import math

import pytest
import redis.asyncio as aioredis

from leaderboard import CODES, WINDOWS, GameConfig, InvalidSubmission, Leaderboard, Submission, boards
from leaderboard.batch import SETTINGS_FIELDS, decode_batch, encode_batch
from leaderboard.submission import parse_uint

from .conftest import NOW

HOUR = 3_600_000
LIMIT = WINDOWS["alltime"].max_points  # the smallest limit among the default windows

CASES = [
    ({"points": "-5"}, "invalid_points"),
    ({"points": "1.5"}, "invalid_points"),
    ({"points": "abc"}, "invalid_points"),
    ({"points": ""}, "invalid_points"),
    ({"points": "nan"}, "invalid_points"),
    ({"points": "NaN"}, "invalid_points"),
    ({"points": "inf"}, "invalid_points"),
    ({"points": "-inf"}, "invalid_points"),
    ({"points": "1e3"}, "invalid_points"),
    ({"points": " 12"}, "invalid_points"),
    ({"points": "0x10"}, "invalid_points"),
    ({"points": "٣"}, "invalid_points"),  # a digit, but not an ASCII one
    ({"points": "9" * 17}, "invalid_points"),
    ({"points": str(LIMIT + 1)}, "points_out_of_range"),
    ({"points": str(2**53)}, "points_out_of_range"),
    ({"player": ""}, "invalid_player"),
    ({"player": "x" * 65}, "invalid_player"),
    ({"player": "é" * 33}, "invalid_player"),  # 66 bytes
    ({"player": "ok\udcff"}, "invalid_player"),  # the byte 0xff: not UTF-8
    ({"player": "\udced\udca0\udc80"}, "invalid_player"),  # an encoded UTF-16 surrogate
    ({"id": ""}, "missing_id"),
    ({"id": "i" * 65}, "invalid_id"),
    ({"id": "\udcc0\udcaf"}, "invalid_id"),  # an overlong encoding of '/'
    ({"id": "two\nlines"}, "invalid_id"),  # the activity entry joins ids with newlines
    ({"id": "nul\x00"}, "invalid_id"),
    ({"id": "del\x7f"}, "invalid_id"),
    ({"op": "max"}, "invalid_operator"),
    ({"op": "BEST"}, "invalid_operator"),
    ({"ts": "abc"}, "invalid_timestamp"),
    ({"ts": "-1"}, "invalid_timestamp"),
    ({"ts": str(NOW + 60_000)}, "timestamp_in_future"),
    ({"ts": "9" * 15}, "timestamp_in_future"),  # past the year 9999
    ({"ts": str(NOW - 49 * HOUR)}, "timestamp_too_old"),
    ({"name": "n" * 65}, "invalid_name"),
    ({"name": "\udcfe"}, "invalid_name"),
    ({"name": "evil\u202egnp.exe"}, "invalid_name"),  # a bidi override would reorder the page's text
    ({"name": "two\nlines"}, "invalid_name"),
    ({"region": "e u"}, "invalid_scope"),
    ({"mode": "m" * 33}, "invalid_scope"),
    ({"region": "eu:west"}, "invalid_scope"),
    ({"tournament": "spring cup"}, "invalid_tournament"),
    ({"tournament": "t" * 33}, "invalid_tournament"),
]


def fields(**override: str) -> dict[str, str]:
    base = {"id": "sub-1", "player": "ana", "points": "10", "ts": str(NOW)}
    return {**base, **override}


@pytest.mark.parametrize(("override", "code"), CASES, ids=[f"{c}-{i}" for i, (_, c) in enumerate(CASES)])
def test_python_validation_refuses(override: dict[str, str], code: str, config: GameConfig) -> None:
    with pytest.raises(InvalidSubmission) as caught:
        Submission.parse(fields(**override), now_ms=NOW, rules=config.rules())
    assert caught.value.code == code and code in CODES


@pytest.mark.parametrize(("override", "code"), CASES, ids=[f"{c}-{i}" for i, (_, c) in enumerate(CASES)])
async def test_library_refuses_and_writes_nothing(
    override: dict[str, str], code: str, lb: Leaderboard, r: aioredis.Redis
) -> None:
    [result] = await lb.submit_batch([fields(**override)], now=NOW)
    assert (result.status, result.code) == ("error", code)
    assert result.message
    assert await r.dbsize() == 0


async def test_missing_fields_are_refused(lb: Leaderboard, r: aioredis.Redis) -> None:
    results = await lb.submit_batch(
        [
            {"player": "ana", "points": "1", "ts": str(NOW)},
            {"id": "x", "points": "1", "ts": str(NOW)},
            {"id": "y", "player": "ana", "ts": str(NOW)},
            {"id": "z", "player": "ana", "points": "1"},
        ],
        now=NOW,
    )
    assert [r.code for r in results] == [
        "missing_id",
        "invalid_player",
        "invalid_points",
        "invalid_timestamp",
    ]
    assert await r.dbsize() == 0


async def test_a_slip_of_key_values_with_a_points_field_besides_is_applied_and_spoils_nothing(lb: Leaderboard) -> None:
    # a queue entry written by another producer than Queue may carry both; its batch goes on
    await lb.create_board(
        boards.parse({"id": "tower", "keys": [{"name": "floor"}, {"name": "ms", "direction": "asc"}]})
    )
    results = await lb.submit_batch(
        [
            {"id": "k", "player": "kim", "board": "tower", "values": "3,9000", "points": "0", "ts": str(NOW)},
            {"id": "g", "player": "ana", "points": "500", "ts": str(NOW)},
        ],
        now=NOW,
    )
    assert [(r.status, r.code) for r in results] == [("ok", None), ("ok", None)]
    assert [e.player for e in (await lb.top("alltime", "board:tower", at=NOW)).entries] == ["kim"]
    assert [e.player for e in (await lb.top("weekly", "global", at=NOW)).entries] == ["ana"]


@pytest.mark.parametrize("value", [-1, 1.5, math.nan, math.inf, True, None, "1.0", 10**16])
def test_typed_points_are_refused(value: object) -> None:
    with pytest.raises(InvalidSubmission, match="invalid_points"):
        parse_uint(value, "invalid_points", 16)


def test_accepts_the_edges(config: GameConfig) -> None:
    rules = config.rules()
    for override in (
        {"points": "0"},
        {"points": str(LIMIT)},
        {"player": "é" * 32},
        {"id": "i" * 64},
        {"ts": str(NOW + 30_000)},
        {"ts": str(NOW - 47 * HOUR)},
        {"name": "Ünïcødé ✓"},
    ):
        Submission.parse(fields(**override), now_ms=NOW, rules=rules)


def test_bad_configuration_is_refused() -> None:
    for kwargs in (
        {"windows": ()},
        {"windows": ("yearly",)},
        {"operator": "max"},
        {"game": "a b"},
        {"window_operators": {"monthly": "incr"}},
        {"top_n": 0},
        {"idempotency_s": 8 * 86400},
    ):
        with pytest.raises(ValueError):
            GameConfig(**kwargs)


@pytest.mark.parametrize(
    ("ts", "code"), [(NOW + 60_000, "timestamp_in_future"), (NOW - 49 * HOUR, "timestamp_too_old")]
)
async def test_library_checks_time_against_its_own_clock_argument(
    ts: int, code: str, lb: Leaderboard, r: aioredis.Redis
) -> None:
    """The wrapper refuses these before the call; the function must refuse them on its own too."""
    plan = encode_batch(lb.config, [fields(ts=str(ts))], ts)  # a caller whose clock agrees with ts
    plan.args[SETTINGS_FIELDS.index("now_ms")] = NOW  # the function's clock argument
    [result] = decode_batch(plan, await r.fcall("lb_submit", len(plan.keys), *plan.keys, *plan.args))
    assert (result.status, result.code) == ("error", code)
    assert await r.dbsize() == 0
