"""Score submissions: the slip a game server files, and its validation (pure: no I/O).

The function library checks every rule again inside its atomic call; validating here as well
lets the submit API refuse bad input at once instead of dead-lettering it later. Both layers
use the same stable codes (errors.CODES).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from .errors import CODES, InvalidSubmission
from .keys import GLOBAL_SCOPE, SCOPE_KINDS, check_name, scope_label

OPERATORS = ("best", "incr", "set")
MAX_ID_BYTES = 64
MAX_NAME_BYTES = 64
# Stream fields of a submission, in the order they are written.
FIELDS = ("id", "player", "points", "op", "ts", "name", "region", "mode")


@dataclass(frozen=True, slots=True)
class Rules:
    """The limits a submission is checked against (from GameConfig.rules())."""

    max_points: int
    clock_skew_ms: int
    max_age_ms: int


@dataclass(frozen=True, slots=True)
class Submission:
    """One score submission. ``op=None`` means each board's configured operator."""

    id: str
    player: str
    points: int
    ts_ms: int
    op: str | None = None
    name: str | None = None
    region: str | None = None
    mode: str | None = None

    def fields(self) -> dict[str, str]:
        """The stream entry for this submission (absent optionals are left out)."""
        out = {"id": self.id, "player": self.player, "points": str(self.points), "ts": str(self.ts_ms)}
        for key in ("op", "name", "region", "mode"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        return out

    def scopes(self) -> list[str]:
        """Boards this submission lands on within each window: global, then region, then mode."""
        return scopes_of(self.region, self.mode)

    @classmethod
    def parse(cls, fields: Mapping[str, str], *, now_ms: int, rules: Rules) -> Submission:
        """Validate raw string fields (a stream entry or a wire message); raise InvalidSubmission."""
        sub_id = fields.get("id", "")
        if sub_id == "":
            raise _invalid("missing_id")
        _check_text(sub_id, "invalid_id", MAX_ID_BYTES)
        player = fields.get("player", "")
        if player == "":
            raise _invalid("invalid_player")
        _check_text(player, "invalid_player", MAX_ID_BYTES)
        name = fields.get("name") or None
        if name is not None:
            _check_text(name, "invalid_name", MAX_NAME_BYTES)
        points = parse_uint(fields.get("points"), "invalid_points", 16)
        op = fields.get("op") or None
        if op is not None and op not in OPERATORS:
            raise _invalid("invalid_operator")
        ts_ms = parse_uint(fields.get("ts"), "invalid_timestamp", 15)
        region, mode = fields.get("region") or None, fields.get("mode") or None  # SCOPE_KINDS
        scopes_of(region, mode)
        sub = cls(sub_id, player, points, ts_ms, op, name, region, mode)
        sub.check(now_ms=now_ms, rules=rules)
        return sub

    def check(self, *, now_ms: int, rules: Rules) -> None:
        """The rules that depend on configuration and the clock."""
        if self.points > rules.max_points:
            raise InvalidSubmission("points_out_of_range", f"points must stay below {rules.max_points + 1}")
        if self.ts_ms > now_ms + rules.clock_skew_ms:
            raise _invalid("timestamp_in_future")
        if self.ts_ms < now_ms - rules.max_age_ms:
            raise _invalid("timestamp_too_old")


def scopes_of(region: str | None, mode: str | None) -> list[str]:
    if region is None and mode is None:
        return [GLOBAL_SCOPE]  # most submissions: no scope to check
    scopes = [GLOBAL_SCOPE]
    for kind, value in zip(SCOPE_KINDS, (region, mode), strict=True):
        if value is not None:
            try:
                check_name(kind, value)
            except ValueError as exc:
                raise InvalidSubmission("invalid_scope", str(exc)) from None
            scopes.append(scope_label(kind, value))
    return scopes


def parse_uint(value: object, code: str, max_digits: int) -> int:
    """A non-negative integer given as plain decimal digits, or an int (not a bool, not a float)."""
    if isinstance(value, bool) or (isinstance(value, float) and not math.isfinite(value)):
        raise _invalid(code)
    if isinstance(value, int):
        if value < 0 or len(str(value)) > max_digits:
            raise _invalid(code)
        return value
    if isinstance(value, str) and 0 < len(value) <= max_digits and value.isascii() and value.isdigit():
        return int(value)
    raise _invalid(code)


def _check_text(value: str, code: str, max_bytes: int) -> None:
    if value.isascii():  # the common case: one byte per character, nothing to encode
        if len(value) > max_bytes:
            raise _invalid(code)
        return
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:  # lone surrogates, e.g. from a non-UTF-8 byte string
        raise _invalid(code) from None
    if size > max_bytes:
        raise _invalid(code)


def _invalid(code: str) -> InvalidSubmission:
    return InvalidSubmission(code, CODES[code])
