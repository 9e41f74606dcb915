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

A live tournament is a window of its own, named ``t-<id>``, with exactly one period (labelled
``<id>``) whose bounds are the tournament's start and end (``tournament_window``). It packs like
a monthly board (1 s ties, k = 22), so a tournament lasts at most 2**22 s (48.5 days) and
accepts points up to 2,147,483,647. Everything keyed by window (boards, channels, stored
snapshots, rank pushes) therefore treats a tournament like any other window.

Past periods are named by their label (``Window.named``, e.g. ``2026-W48``) or relative to the
current one (``Window.resolve``: ``current``, ``previous``), as long as retention keeps their keys
(``readable``).
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

_UTC = dt.UTC
ALLTIME_EPOCH_MS = int(dt.datetime(2024, 1, 1, tzinfo=_UTC).timestamp() * 1000)
_DAY_S = 86_400
TOURNAMENT_PREFIX = "t-"
TOURNAMENT_SHIFT = 22
TOURNAMENT_MAX_MS = (1 << TOURNAMENT_SHIFT) * 1000
TOURNAMENT_RETENTION_S = 35 * _DAY_S  # a finished tournament's boards stay readable this long
_TOURNAMENT_ID = re.compile(r"[A-Za-z0-9_-]{1,32}")
_LABELS = {
    "daily": re.compile(r"\d{4}-\d{2}-\d{2}"),
    "weekly": re.compile(r"\d{4}-W\d{2}"),
    "monthly": re.compile(r"\d{4}-\d{2}"),
    "alltime": re.compile(r"all"),
}


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
    span: tuple[int, int] | None = None  # a tournament's one period (start_ms, end_ms)

    @property
    def tournament(self) -> str | None:
        """The tournament id when this window is a tournament, else None."""
        return self.name[len(TOURNAMENT_PREFIX) :] if self.span is not None else None

    @property
    def max_points(self) -> int:
        return (1 << (53 - self.shift)) - 1

    def unpack(self, score: float | int | str) -> int:
        """The points in a packed score (as Redis returns it: a string or a float)."""
        return int(float(score)) >> self.shift

    def period(self, ts_ms: int) -> Period:
        """The period of this window that contains ``ts_ms``."""
        if self.span is not None:
            return Period(self, self.name[len(TOURNAMENT_PREFIX) :], *self.span)
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

    def named(self, label: str) -> Period:
        """The period with this label (``2026-W48``, ``2026-11-30``, ``2026-11``, ``all``, or a
        tournament's id); ValueError for a label this window never produces."""
        if self.span is not None:
            if label != self.name[len(TOURNAMENT_PREFIX) :]:
                raise ValueError(f"tournament {self.name} has one period, {self.name[len(TOURNAMENT_PREFIX) :]!r}")
            return self.period(self.span[0])
        first = label_day(self.name, label)
        if first is None:
            return self.period(ALLTIME_EPOCH_MS)
        return self.period(_ms(dt.datetime(first.year, first.month, first.day, tzinfo=_UTC)))

    def resolve(self, name: str | None, now_ms: int) -> Period:
        """The period a read names: None or ``current`` (the one at ``now_ms``), ``previous``
        (the one before it), or a label. A period that has not started yet, or whose keys have
        expired, is refused (ValueError): there is nothing to read there."""
        current = self.period(now_ms)
        if name is None or name == "current":
            return current
        if name == "previous":
            if self.span is not None or self.retention_s is None:
                raise ValueError(f"the {self.name} window has no previous period")
            found = self.period(current.start_ms - 1)
        else:
            found = self.named(name)
        return readable(found, now_ms)


def readable(found: Period, now_ms: int) -> Period:
    """``found`` if a read may name it at ``now_ms``: started, and its keys not expired yet
    (what retention keeps); ValueError otherwise, there is nothing to read there."""
    if found.start_ms > now_ms:
        raise ValueError(f"{found.window.name} period {found.label} has not started yet")
    if found.expire_at_s and found.expire_at_s * 1000 <= now_ms:
        raise ValueError(f"{found.window.name} period {found.label} has expired (kept until its retention ends)")
    return found


def label_day(window_name: str, label: str) -> dt.date | None:
    """The first day of the period a calendar label names (``2026-11-30``, ``2026-W48`` from its
    Monday, ``2026-11`` from the 1st), as a date wherever that day starts; None for the all-time
    label ``all``. ValueError for a label the window never produces."""
    pattern = _LABELS.get(window_name)
    if pattern is None or not isinstance(label, str) or not pattern.fullmatch(label):
        raise ValueError(f"{label!r} is not a {window_name} period label")
    try:
        if window_name == "daily":
            return dt.date.fromisoformat(label)
        if window_name == "weekly":
            return dt.date.fromisocalendar(int(label[:4]), int(label[6:]), 1)
        if window_name == "monthly":
            return dt.date(int(label[:4]), int(label[5:]), 1)
    except ValueError:
        raise ValueError(f"{label!r} is not a {window_name} period label") from None
    return None


def tournament_window(tournament: str, start_ms: int, end_ms: int) -> Window:
    """The window of a tournament: one period, [start_ms, end_ms)."""
    check_tournament(tournament)
    if not 0 <= start_ms < end_ms or end_ms - start_ms > TOURNAMENT_MAX_MS:
        raise ValueError(f"a tournament must end after it starts and last at most {TOURNAMENT_MAX_MS // 1000} s")
    return Window(
        TOURNAMENT_PREFIX + tournament, TOURNAMENT_SHIFT, 1000, TOURNAMENT_RETENTION_S, span=(start_ms, end_ms)
    )


def check_tournament(tournament: str) -> str:
    if not isinstance(tournament, str) or not _TOURNAMENT_ID.fullmatch(tournament):
        raise ValueError(f"tournament id must be 1-32 characters of A-Z a-z 0-9 _ -, got {tournament!r}")
    return tournament


def tournament_of(window_name: str) -> str | None:
    """``t-spring`` -> ``spring``: the tournament a window name designates, or None."""
    if not window_name.startswith(TOURNAMENT_PREFIX):
        return None
    tournament = window_name[len(TOURNAMENT_PREFIX) :]
    return tournament if _TOURNAMENT_ID.fullmatch(tournament) else None


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
