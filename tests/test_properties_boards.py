"""Board definitions (leaderboard/boards/definition.py): parsing with stable codes, the encoding choice, and
properties of the orderings — a lex member's string order and a packed score's numeric order
are the model's order, and both decode to what was encoded, over the whole int64 range."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from leaderboard import boards
from leaderboard.boards import INT64_MAX, INT64_MIN, LEX, PACKED, Board, parse
from leaderboard.errors import BOARD_CODES, InvalidBoard

from .properties import bounded, bounded_keys

TOWER = {"id": "tower", "keys": [{"name": "floor"}, {"name": "time", "direction": "asc", "display": "duration_ms"}]}


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        ("[1]", "invalid_board"),
        ("{", "invalid_board"),
        ({"id": "x", "keys": [{"name": "a"}], "colour": 1}, "invalid_board"),
        ({"id": "a b", "keys": [{"name": "a"}]}, "invalid_board_id"),
        ({"id": "x" * 33, "keys": [{"name": "a"}]}, "invalid_board_id"),
        ({"id": "x", "keys": []}, "board_no_keys"),
        ({"id": "x"}, "board_no_keys"),
        ({"id": "x", "keys": [{"name": f"k{i}"} for i in range(6)]}, "board_too_many_keys"),
        ({"id": "x", "keys": [{"name": "a"}, {"name": "a"}]}, "invalid_board_key"),
        ({"id": "x", "keys": [{"name": "A"}]}, "invalid_board_key"),
        ({"id": "x", "keys": [{"name": "a", "weight": 2}]}, "invalid_board_key"),
        ({"id": "x", "keys": [{"name": "a", "direction": "up"}]}, "invalid_direction"),
        ({"id": "x", "keys": [{"name": "a", "operator": "max"}]}, "invalid_operator"),
        ({"id": "x", "keys": [{"name": "a"}], "operator": "sum"}, "invalid_operator"),
        ({"id": "x", "keys": [{"name": "a", "display": "euro"}]}, "invalid_display"),
        ({"id": "x", "keys": [{"name": "a"}], "tie": "random"}, "invalid_tie"),
        ({"id": "x", "keys": [{"name": "a"}], "rank_mode": "olympic"}, "invalid_rank_mode"),
        ({"id": "x", "keys": [{"name": "a", "min": 5, "max": 4}]}, "invalid_key_bounds"),
        ({"id": "x", "keys": [{"name": "a", "max": 2**63}]}, "invalid_key_bounds"),
        ({"id": "x", "keys": [{"name": "a", "min": 1.5}]}, "invalid_key_bounds"),
        ({"id": "x", "keys": [{"name": "a"}], "windows": ["hourly"]}, "invalid_board_window"),
        ({"id": "x", "keys": [{"name": "a"}], "windows": ["daily", "daily"]}, "invalid_board_window"),
        ({"id": "x", "keys": [{"name": "a"}], "windows": []}, "invalid_board_window"),
        ({"id": "x", "keys": [{"name": "a"}], "time_zone": "Mars/Olympus"}, "invalid_time_zone"),
        ({"id": "x", "keys": [{"name": "a"}], "time_zone": "+15:00"}, "invalid_time_zone"),
        ({"id": "x", "keys": [{"name": "a"}], "windows": ["season"]}, "invalid_season"),
        ({"id": "x", "keys": [{"name": "a"}], "season": {"start_ms": 0, "length_s": 86400}}, "invalid_season"),
        (
            {"id": "x", "keys": [{"name": "a"}], "windows": ["season"], "season": {"start_ms": 0, "length_s": 60}},
            "invalid_season",
        ),
        ({"id": "x", "keys": [{"name": "a"}], "top_n": 0}, "invalid_top_n"),
        ({"id": "x", "keys": [{"name": "a"}], "top_n": 101}, "invalid_top_n"),
        ({"id": "x", "keys": [{"name": "a"}], "metadata_bytes": 1025}, "invalid_metadata_limit"),
        ({"id": "x", "keys": [{"name": "a"}], "extensions": {"shards": 4}}, "unknown_extension"),
    ],
)
def test_a_bad_definition_is_refused_with_its_code(raw: Any, code: str) -> None:
    with pytest.raises(InvalidBoard) as caught:
        parse(raw)
    assert caught.value.code == code and code in BOARD_CODES


def test_a_definition_round_trips_through_its_canonical_json() -> None:
    raw = {
        **TOWER,
        "windows": ["daily", "season"],
        "season": {"start_ms": 1_764_547_200_000, "length_s": 28 * 86400},
        "time_zone": "Europe/Paris",
        "tie": "last",
        "rank_mode": "dense",
        "top_n": 25,
        "metadata_bytes": 64,
    }
    tower = parse(raw)
    assert parse(tower.to_json()) == tower
    assert tower.to_json() == parse(orjson_dumps(raw)).to_json()


def orjson_dumps(raw: Any) -> str:
    import orjson

    return orjson.dumps(raw).decode()


def test_the_encoding_is_packed_only_where_one_exact_double_holds_every_value() -> None:
    one = {"id": "x", "keys": [{"name": "a", "min": 0, "max": 134_217_727}]}
    assert parse(one).encoding == PACKED
    assert parse({**one, "keys": [{"name": "a", "min": 0, "max": 134_217_727, "direction": "asc"}]}).encoding == PACKED
    assert parse({**one, "keys": [{"name": "a", "min": 0, "max": 134_217_728}]}).encoding == LEX
    assert parse({**one, "windows": ["daily"], "keys": [{"name": "a", "min": 0, "max": 2**36 - 1}]}).encoding == PACKED
    assert parse({**one, "keys": [{"name": "a", "min": -1, "max": 10}]}).encoding == LEX
    assert parse({"id": "x", "keys": [{"name": "a"}]}).encoding == LEX  # the whole int64 range
    assert parse(TOWER).encoding == LEX
    default = boards.default_definition("best", "ordinal", ("daily", "weekly", "alltime"), 10)
    assert default.encoding == PACKED and default.keys[0].max == 134_217_727


def test_a_new_board_of_bounded_keys_is_packed_where_their_ranges_fit_one_double() -> None:
    level, ms = {"name": "level", "min": 0, "max": 99}, {"name": "ms", "direction": "asc", "min": 0, "max": 1_000_000}
    race: dict[str, Any] = {"id": "r", "keys": [level, ms]}
    # a record without the field reads by the first rule (packed: one key only), a new board packed
    assert (parse(race).encoding, boards.created(parse(race)).encoding) == (LEX, PACKED)
    made = boards.created(parse(race))
    assert parse(made.to_json()) == made and orjson.loads(made.to_json())["encoding"] == PACKED
    # (99 + 1) × 1,000,001 ≤ 2^27: alltime's tie part of 26 bits leaves room for it, 27 would not
    assert made.fits(26) and not made.fits(27)
    wide = {**race, "keys": [level, {"name": "ms", "min": -(2**20), "max": 2**20}]}
    assert boards.created(parse(wide)).encoding == LEX  # 100 × (2^21 + 1) × 2^26 > 2^53
    assert boards.created(parse({**wide, "windows": ["daily"]})).encoding == PACKED  # a later key may be negative
    negative_first = {**race, "keys": [{"name": "a", "min": -1, "max": 9}, ms]}
    assert boards.created(parse(negative_first)).encoding == LEX
    far = {**race, "keys": [level, {"name": "b", "min": 2**53, "max": 2**53 + 5}]}
    assert boards.created(parse(far)).encoding == LEX  # a value beyond one exact double
    # asked for: lex kept (stored only where it differs from the first rule); packed only where it fits
    lex = boards.created(parse({**race, "encoding": "lex"}))
    assert lex.encoding == LEX and "encoding" not in orjson.loads(lex.to_json())
    one = {"id": "o", "keys": [{"name": "a", "min": 0, "max": 10}], "encoding": "lex"}
    assert orjson.loads(boards.created(parse(one)).to_json())["encoding"] == LEX
    for bad, code in ((far | {"encoding": "packed"}, "key_out_of_range"), (race | {"encoding": "x"}, "invalid_board")):
        with pytest.raises(InvalidBoard) as caught:
            parse(bad)
        assert caught.value.code == code
    # an update keeps the stored encoding unless it asks for another (board_reorder)
    assert boards.check_update(made, parse({**race, "top_n": 5})).encoding == PACKED
    assert boards.check_update(parse(race), parse({**race, "top_n": 5})).encoding == LEX
    with pytest.raises(InvalidBoard) as caught:
        boards.check_update(made, parse({**race, "encoding": "lex"}))
    assert caught.value.code == "board_reorder"
    # a tournament packs with k = 22: (max₁ + 1) × P must stay below 2^31
    made.check_tournament()
    with pytest.raises(InvalidBoard) as caught:
        wider = {**race, "windows": ["daily"], "keys": [{"name": "a", "min": 0, "max": 9999}, ms]}
        boards.created(parse(wider)).check_tournament()
    assert caught.value.code == "key_out_of_range"


def test_a_change_that_would_reorder_a_live_board_is_refused() -> None:
    tower = parse(TOWER)
    flipped = parse({**TOWER, "keys": [{"name": "floor"}, {"name": "time"}]})
    with pytest.raises(InvalidBoard) as caught:
        boards.check_update(tower, flipped)
    assert caught.value.code == "board_reorder"
    for change in ({"tie": "last"}, {"windows": ["daily"]}, {"time_zone": "Asia/Tokyo"}):
        with pytest.raises(InvalidBoard):
            boards.check_update(tower, parse({**TOWER, **change}))
    bigger = boards.check_update(tower, parse({**TOWER, "top_n": 50, "rank_mode": "competition"}))
    assert (bigger.top_n, bigger.rank_mode, bigger.version) == (50, "competition", 2)


def test_key_values_are_checked_against_the_definition() -> None:
    tower = parse({**TOWER, "keys": [{"name": "floor", "min": 0, "max": 500}, TOWER["keys"][1]]})
    assert boards.parse_values(tower, ["12", "-9223372036854775808"]) == (12, INT64_MIN)
    for values, code in (
        (["1"], "wrong_key_count"),
        (["1", "2", "3"], "wrong_key_count"),
        (["1", "1e3"], "invalid_key_value"),
        (["1", "9223372036854775808"], "key_out_of_range"),
        (["501", "0"], "key_out_of_range"),
        (["1", 2.0], "invalid_key_value"),
    ):
        with pytest.raises(InvalidBoard) as caught:
            boards.parse_values(tower, values)
        assert caught.value.code == code, values


def test_periods_start_at_midnight_in_the_board_time_zone() -> None:
    ny = parse({"id": "x", "keys": [{"name": "a"}], "time_zone": "America/New_York", "windows": ["daily", "weekly"]})
    # 2026-03-08 is a 23-hour day in New York (the clocks go forward)
    label, start, end = boards.period_bounds(ny, "daily", 1_772_960_400_000)  # 2026-03-08T09:00Z
    assert (label, end - start) == ("2026-03-08", 23 * 3_600_000)
    fixed = parse({"id": "x", "keys": [{"name": "a"}], "time_zone": "+05:30", "windows": ["daily"]})
    label, start, _ = boards.period_bounds(fixed, "daily", 1_764_547_200_000)  # 2025-12-01T00:00Z
    assert (label, start) == ("2025-12-01", 1_764_547_200_000 - 5 * 3_600_000 - 30 * 60_000)
    season = parse(
        {"id": "x", "keys": [{"name": "a"}], "windows": ["season"], "season": {"start_ms": 1000, "length_s": 3600}}
    )
    assert boards.period_bounds(season, "season", 1000 + 2 * 3_600_000 + 5) == ("s2", 7_201_000, 10_801_000)


# --- properties ---------------------------------------------------------------------------

int64 = st.one_of(st.integers(INT64_MIN, INT64_MAX), st.sampled_from([INT64_MIN, INT64_MIN + 1, -1, 0, 1, INT64_MAX]))


@st.composite
def definitions(draw: st.DrawFn) -> boards.Definition:
    n = draw(st.integers(1, 5))
    keys = [
        {
            "name": f"k{i}",
            "direction": draw(st.sampled_from(["desc", "asc"])),
            **({"operator": draw(st.sampled_from(["best", "incr", "set"]))} if draw(st.booleans()) else {}),
        }
        for i in range(n)
    ]
    return parse({"id": "b", "keys": keys, "tie": draw(st.sampled_from(["first", "last"]))})


@given(st.data())
@bounded(300)
def test_lex_members_order_and_decode_as_the_model(data: st.DataObject) -> None:
    definition = data.draw(definitions())
    n = len(definition.keys)
    entries = data.draw(
        st.dictionaries(
            st.text("abcxyz", min_size=1, max_size=3),
            st.tuples(st.tuples(*[st.sampled_from([-2, 0, 5]) | int64 for _ in range(n)]), st.integers(0, 2**44)),
            min_size=1,
            max_size=12,
        )
    )
    model = Board(definition, dict(entries))
    members = {p: boards.encode_member(definition, v, ts, p) for p, (v, ts) in entries.items()}
    for player, member in members.items():
        assert boards.decode_member(definition, member) == (entries[player][0], entries[player][1], player)
    # the bytes Redis orders: a member's player part is not UTF-8 (boards.player_part)
    by_member = sorted(members, key=lambda p: members[p].encode("utf-8", "surrogateescape"))
    assert by_member == model.ordered()
    # competition rank = 1 + members before the key prefix (ZLEXCOUNT - "(prefix")
    for player in members:
        prefix = boards.key_prefix(definition, entries[player][0])
        before = sum(1 for m in members.values() if m < prefix)
        assert 1 + before == model.rank(player, "competition")


@st.composite
def packed_definitions(draw: st.DrawFn) -> boards.Definition:
    """1-5 bounded keys (asc or desc, the later ones from a negative min too) whose ranges'
    product fits alltime's 2^27: packed (boards.created), as are one key's 0..134,217,727."""
    n = draw(st.integers(1, 5))
    keys = bounded_keys(draw, n, draw(st.sampled_from([1, 9, 40])))
    if n == 1:
        keys = [{"name": "k0", "min": 0, "max": 134_217_727}]
    keys[0]["direction"] = draw(st.sampled_from(["desc", "asc"]))
    definition = boards.created(parse({"id": "p", "keys": keys, "tie": draw(st.sampled_from(["first", "last"]))}))
    assert definition.encoding == PACKED
    return definition


@given(packed_definitions(), st.data())
@bounded(300)
def test_packed_scores_order_and_decode_as_the_model(definition: boards.Definition, data: st.DataObject) -> None:
    tuples = st.tuples(*[st.sampled_from([k.min, k.max]) | st.integers(k.min, k.max) for k in definition.keys])
    a, b = data.draw(tuples), data.draw(tuples)
    start = 1_704_067_200_000
    ta, tb = (data.draw(st.integers(start, start + 2**26 * 60_000 - 1)) for _ in range(2))
    for window in ("daily", "alltime"):
        s0 = start if window == "alltime" else boards.period_bounds(definition, window, ta)[1]
        tb_ = tb if window == "alltime" else data.draw(st.integers(s0, s0 + 86_399_999))
        ta_ = ta if window == "alltime" else data.draw(st.integers(s0, s0 + 86_399_999))
        sa, sb = (boards.pack(definition, window, v, t, s0) for v, t in ((a, ta_), (b, tb_)))
        assert abs(sa) < 2**53 and abs(sb) < 2**53
        assert boards.unpack(definition, window, sa) == a and boards.unpack(definition, window, sb) == b
        # equal points hold equal keys, and points order as the board
        assert (boards.points(definition, a) == boards.points(definition, b)) == (a == b)
        model = Board(definition, {"a": (a, ta_), "b": (b, tb_)})
        unit = 60_000 if window == "alltime" else 1000
        if (a, (ta_ - s0) // unit) != (b, (tb_ - s0) // unit):  # same value in the same tie unit: by id
            assert (sa > sb) == (model.ordered()[0] == "a")


@given(st.data())
@bounded(200)
def test_the_model_combines_as_each_operator_says(data: st.DataObject) -> None:
    definition = data.draw(definitions())
    n = len(definition.keys)
    small = st.tuples(*[st.integers(-1000, 1000) for _ in range(n)])
    old, new = data.draw(small), data.draw(small)
    out = boards.combine(definition, old, new)
    if all(k.operator is None for k in definition.keys) and definition.operator == "best":
        assert out == min(old, new, key=lambda v: boards.order_key(definition, v))
    else:
        for i, key in enumerate(definition.keys):
            op = definition.operator_of(i)
            expect = {
                "set": new[i],
                "incr": old[i] + new[i],
                "best": (max if key.direction == "desc" else min)(old[i], new[i]),
            }[op]
            assert out[i] == expect


def test_incr_beyond_int64_is_refused() -> None:
    d = parse({"id": "x", "keys": [{"name": "a"}], "operator": "incr"})
    with pytest.raises(InvalidBoard) as caught:
        boards.combine(d, (INT64_MAX,), (1,))
    assert caught.value.code == "key_out_of_range"
    assert boards.combine(d, (INT64_MIN,), (INT64_MAX,)) == (-1,)
