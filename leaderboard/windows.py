"""Time windows and the packed score encoding (pure: no I/O).

A board keeps one sorted set per window *period* (today, this ISO week, ...). Its score packs the
points and the time they were reached into one exact double::

    score = points * 2**shift + (2**shift - 1 - t)

where ``t`` is the time since the period's start in the window's tie unit. An earlier arrival at
the same points leaves a larger remainder, so it ranks higher. ``t`` must stay below
``2**shift`` and the whole value below 2**53, which fixes the largest accepted points per window:

=========  ========  =====================  =========  ===========================
window     tie unit  longest period         shift (k)  largest points (2^(53-k)-1)
=========  ========  =====================  =========  ===========================
daily      1 s       86,400 s               17         68,719,476,735
weekly     1 s       604,800 s              20         8,589,934,591
monthly    1 s       2,678,400 s (31 days)  22         2,147,483,647
alltime    1 min     2**26 min (to 2151)    26         134,217,727
=========  ========  =====================  =========  ===========================

The all-time board counts whole minutes from 2024-01-01 UTC: seconds would cost five more bits of
points. Two players reaching the same all-time score within the same minute are ordered by id.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

_UTC = dt.UTC
ALLTIME_EPOCH_MS = int(dt.datetime(2024, 1, 1, tzinfo=_UTC).timestamp() * 1000)
_DAY_S = 86_400


@dataclass(frozen=True, slots=True)
class Period:
    """One concrete period of a window: its label (part of the key) and its bounds in ms."""

    window: Window
    label: str
    start_ms: int
    end_ms: int

    @property
    def expire_at_s(self) -> int:
        """When the period's keys expire (epoch seconds); 0 means never."""
        if self.window.retention_s is None:
            return 0
        return self.end_ms // 1000 + self.window.retention_s

    def pack(self, points: int, ts_ms: int) -> int:
        """The packed score for ``points`` first reached at ``ts_ms`` (inside this period)."""
        w = self.window
        if not 0 <= points <= w.max_points:
            raise ValueError(f"points must be 0..{w.max_points} on the {w.name} board")
        if not self.start_ms <= ts_ms < self.end_ms:
            raise ValueError(f"{ts_ms} is outside {w.name} {self.label}")
        t = (ts_ms - self.start_ms) // w.unit_ms
        return (points << w.shift) + ((1 << w.shift) - 1 - t)

    def reached_at_ms(self, score: float | int | str) -> int:
        """The start of the tie unit in which the packed score's points were reached."""
        w = self.window
        t = (1 << w.shift) - 1 - (int(float(score)) & ((1 << w.shift) - 1))
        return self.start_ms + t * w.unit_ms


@dataclass(frozen=True, slots=True)
class Window:
    """A kind of period (daily, weekly, ...) with its encoding parameters."""

    name: str
    shift: int
    unit_ms: int
    retention_s: int | None  # how long keys outlive the period's end; None keeps them forever

    @property
    def max_points(self) -> int:
        return (1 << (53 - self.shift)) - 1

    def unpack(self, score: float | int | str) -> int:
        """The points in a packed score (as Redis returns it: a string or a float)."""
        return int(float(score)) >> self.shift

    def period(self, ts_ms: int) -> Period:
        """The period of this window that contains ``ts_ms``."""
        when = dt.datetime.fromtimestamp(ts_ms / 1000, tz=_UTC)
        day = dt.datetime(when.year, when.month, when.day, tzinfo=_UTC)
        if self.name == "daily":
            start, label = day, day.strftime("%Y-%m-%d")
            end = start + dt.timedelta(days=1)
        elif self.name == "weekly":
            start = day - dt.timedelta(days=day.weekday())
            iso = start.isocalendar()
            label = f"{iso.year}-W{iso.week:02d}"
            end = start + dt.timedelta(days=7)
        elif self.name == "monthly":
            start, label = day.replace(day=1), day.strftime("%Y-%m")
            end = (start + dt.timedelta(days=32)).replace(day=1)
        else:
            return Period(self, "all", ALLTIME_EPOCH_MS, ALLTIME_EPOCH_MS + (self.unit_ms << self.shift))
        return Period(self, label, _ms(start), _ms(end))


def _ms(when: dt.datetime) -> int:
    return int(when.timestamp()) * 1000


WINDOWS: dict[str, Window] = {
    w.name: w
    for w in (
        Window("daily", shift=17, unit_ms=1000, retention_s=7 * _DAY_S),
        Window("weekly", shift=20, unit_ms=1000, retention_s=35 * _DAY_S),
        Window("monthly", shift=22, unit_ms=1000, retention_s=400 * _DAY_S),
        Window("alltime", shift=26, unit_ms=60_000, retention_s=None),
    )
}


def window(name: str) -> Window:
    try:
        return WINDOWS[name]
    except KeyError:
        raise ValueError(f"unknown window {name!r}; expected one of {', '.join(WINDOWS)}") from None
