"""The periods of a definition's windows (pure): where its days start (its time zone), a
season's own periods, the labels a read names and the period it resolves to.
"""

from __future__ import annotations

import datetime as dt
import re
from zoneinfo import ZoneInfo

from ..windows import WINDOWS, Period, Window, label_day, readable
from .definition import OFFSET, SEASON, Definition, _fail

_SEASON_LABEL = re.compile(r"s(0|[1-9]\d{0,8})")


def _zone(definition: Definition) -> dt.tzinfo:
    m = OFFSET.fullmatch(definition.time_zone)
    if m:
        sign, hh, mm = m.groups()
        delta = dt.timedelta(hours=int(hh), minutes=int(mm))
        return dt.timezone(-delta if sign == "-" else delta)
    return ZoneInfo(definition.time_zone)


def period_bounds(definition: Definition, window_name: str, ts_ms: int) -> tuple[str, int, int]:
    """(label, start_ms, end_ms) of the period of ``window_name`` holding ``ts_ms``, with days
    starting at midnight in the definition's time zone (a DST day is 23 or 25 hours long)."""
    if window_name == SEASON:
        season = definition.season
        assert season is not None
        n = (ts_ms - season.start_ms) // (season.length_s * 1000)
        start = season.start_ms + n * season.length_s * 1000
        return f"s{n}", start, start + season.length_s * 1000
    if window_name == "alltime":
        p = WINDOWS["alltime"].period(ts_ms)
        return p.label, p.start_ms, p.end_ms
    zone = _zone(definition)
    local = dt.datetime.fromtimestamp(ts_ms / 1000, tz=zone)
    day = local.date()
    if window_name == "daily":
        first, label = day, day.isoformat()
        after = first + dt.timedelta(days=1)
    elif window_name == "weekly":
        first = day - dt.timedelta(days=day.weekday())
        iso = first.isocalendar()
        label = f"{iso.year}-W{iso.week:02d}"
        after = first + dt.timedelta(days=7)
    elif window_name == "monthly":
        first, label = day.replace(day=1), day.strftime("%Y-%m")
        after = (first + dt.timedelta(days=32)).replace(day=1)
    else:
        raise _fail("invalid_board_window", f"unknown window {window_name!r}")

    def midnight(d: dt.date) -> int:
        return int(dt.datetime(d.year, d.month, d.day, tzinfo=zone).timestamp() * 1000)

    return label, midnight(first), midnight(after)


def window_of(definition: Definition, window_name: str) -> Window:
    """The window spec of one of the definition's windows (a season's is its own)."""
    if window_name not in definition.windows:
        raise ValueError(f"board {definition.id} keeps no {window_name!r} window")
    if window_name == SEASON:
        assert definition.season is not None
        return Window(SEASON, definition.shift(SEASON), 1000, definition.season.length_s)
    return WINDOWS[window_name]


def period(definition: Definition, window_name: str, ts_ms: int) -> Period:
    """The period of the definition's window holding ``ts_ms`` (its days start in its time zone)."""
    spec = window_of(definition, window_name)
    if definition.time_zone == "UTC" and spec.name != SEASON:
        return spec.period(ts_ms)
    label, start, end = period_bounds(definition, window_name, ts_ms)
    return Period(spec, label, start, end)


def named(definition: Definition, window_name: str, label: str) -> Period:
    """The period of the definition's window a label names: a calendar label (``2026-11-30``,
    ``2026-W48``, ``2026-11``) whose days start in the definition's time zone, ``all``, or a
    season's ``s<n>`` (n from 0); ValueError for a label the window never produces."""
    spec = window_of(definition, window_name)
    if spec.name == SEASON:
        assert definition.season is not None
        if not isinstance(label, str) or not _SEASON_LABEL.fullmatch(label):
            raise ValueError(f"{label!r} is not a season label (s0, s1, ...)")
        season = definition.season
        return period(definition, SEASON, season.start_ms + int(label[1:]) * season.length_s * 1000)
    first = label_day(spec.name, label)
    if first is None or definition.time_zone == "UTC":
        return spec.named(label)
    midnight = dt.datetime(first.year, first.month, first.day, tzinfo=_zone(definition))
    return period(definition, window_name, int(midnight.timestamp() * 1000))


def resolve(definition: Definition, window_name: str, name: str | None, now_ms: int) -> Period:
    """The period a read of a defined board names: None or ``current``, ``previous``, or a label
    (``named``), as long as retention keeps it (windows.readable); ValueError otherwise."""
    spec = window_of(definition, window_name)
    if definition.time_zone == "UTC" and spec.name != SEASON:
        return spec.resolve(name, now_ms)
    current = period(definition, window_name, now_ms)
    if name is None or name == "current":
        return current
    if name == "previous":
        if spec.name == "alltime" or current.label == "s0":
            raise ValueError(f"the {window_name} window of board {definition.id} has no previous period")
        return readable(period(definition, window_name, current.start_ms - 1), now_ms)
    return readable(named(definition, window_name, name), now_ms)
