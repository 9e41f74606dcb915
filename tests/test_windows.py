"""Periods, score packing and key names: the pure core."""

from __future__ import annotations

import datetime as dt

import pytest

from leaderboard import WINDOWS, GameConfig, Keys


def ms(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0) -> int:
    when = dt.datetime(year, month, day, hour, minute, second, tzinfo=dt.UTC)
    return int(when.timestamp() * 1000)


@pytest.mark.parametrize(
    ("name", "when", "label", "start", "end"),
    [
        ("daily", ms(2026, 11, 24, 23, 59, 59), "2026-11-24", ms(2026, 11, 24), ms(2026, 11, 25)),
        ("weekly", ms(2026, 11, 29, 23, 0), "2026-W48", ms(2026, 11, 23), ms(2026, 11, 30)),
        ("weekly", ms(2027, 1, 1), "2026-W53", ms(2026, 12, 28), ms(2027, 1, 4)),  # ISO year
        ("monthly", ms(2028, 2, 29, 12), "2028-02", ms(2028, 2, 1), ms(2028, 3, 1)),
        ("monthly", ms(2026, 12, 31), "2026-12", ms(2026, 12, 1), ms(2027, 1, 1)),
    ],
)
def test_periods(name: str, when: int, label: str, start: int, end: int) -> None:
    period = WINDOWS[name].period(when)
    assert (period.label, period.start_ms, period.end_ms) == (label, start, end)


@pytest.mark.parametrize("name", list(WINDOWS))
def test_longest_period_fits_the_tie_bits(name: str) -> None:
    w = WINDOWS[name]
    longest = {"daily": 86_400_000, "weekly": 7 * 86_400_000, "monthly": 31 * 86_400_000}
    span = longest.get(name, w.period(0).end_ms - w.period(0).start_ms)
    assert span // w.unit_ms <= 1 << w.shift
    assert w.max_points << w.shift | ((1 << w.shift) - 1) < 2**53


@pytest.mark.parametrize("name", list(WINDOWS))
def test_pack_orders_by_points_then_by_time(name: str) -> None:
    w = WINDOWS[name]
    p = w.period(ms(2026, 11, 24, 10))
    early, late = p.start_ms, p.end_ms - 1
    assert p.pack(5, early) > p.pack(5, late) > p.pack(4, early)
    top = p.pack(w.max_points, early)
    assert float(top) == top and w.unpack(float(top)) == w.max_points  # exact as a double
    assert w.unpack(str(p.pack(123, late))) == 123
    assert p.reached_at_ms(p.pack(7, early + 5 * w.unit_ms)) == early + 5 * w.unit_ms
    with pytest.raises(ValueError):
        p.pack(w.max_points + 1, early)
    with pytest.raises(ValueError):
        p.pack(1, p.end_ms)


def test_alltime_runs_until_2151() -> None:
    p = WINDOWS["alltime"].period(ms(2026, 1, 1))
    assert dt.datetime.fromtimestamp(p.end_ms / 1000, tz=dt.UTC).year == 2151
    assert p.expire_at_s == 0


def test_every_key_of_a_game_shares_its_hash_tag() -> None:
    k = Keys("arena")
    names = [
        k.board("weekly", "2026-W48", "region:eu"),
        k.players("daily", "2026-11-24"),
        k.seen(1),
        k.versions,
        k.activity,
        k.profiles,
        k.submissions,
        k.dead_letters,
        k.publish_lease,
        k.latest("weekly", "global"),
        k.badges("mia"),
    ]
    assert all(n.startswith("lb:{arena}:") for n in names)
    assert len(set(names)) == len(names)
    with pytest.raises(ValueError):
        Keys("bad}game")


def test_config_from_env() -> None:
    c = GameConfig.from_env(
        {
            "LB_GAME": "g1",
            "LB_WINDOWS": "daily, alltime",
            "LB_WINDOW_OPERATORS": "alltime=incr",
            "LB_TOP_N": "5",
        }
    )
    assert (c.game, c.windows, c.operator_for("alltime"), c.operator_for("daily"), c.top_n) == (
        "g1",
        ("daily", "alltime"),
        "incr",
        "best",
        5,
    )
    assert c.rules().max_points == WINDOWS["alltime"].max_points
