"""Score submissions: the slip a game server files, and its validation (pure: no I/O).

A submission is validated once per hop. In the submitting process, a ``Submission`` is valid by
construction (``parse()`` turns raw fields into one) and the queue checks only what depends on
the clock and the game (``check()``); it travels as stream fields, and the function library checks
every rule again inside its atomic call, so a slip that bypassed the queue is refused there, not
applied. Both layers use the same stable codes (errors.CODES).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .errors import CODES, InvalidSubmission
from .keys import GLOBAL_SCOPE, SCOPE_KINDS, check_name, scope_label
from .profiles import has_forbidden, is_player_id
from .windows import TOURNAMENT_SHIFT, check_tournament

_INT = re.compile(r"-?\d+")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

OPERATORS = ("best", "incr", "set")
MAX_ID_BYTES = 64
MAX_NAME_BYTES = 64
# A submission's fields by name (Submission.parse, the protocol's ``submit``, dead letters).
FIELDS = ("id", "player", "points", "op", "ts", "name", "region", "mode", "tournament", "board", "values", "meta")
# Its stream entry: the slip, these five joined by tabs (none of them can hold a tab) in one field,
# then only the optional fields it sets. The slip is the very text lb_submit takes for a common
# submission (leaderboard/batch.py), so a scorer passes it on as it came: one field where five
# cost the queue, the scorer's reader and the encoder each a string and a dict slot. An entry of
# fields by name (an earlier release's) is read as well (``entry_fields``, ``slip_parts``).
SLIP = "slip"
SLIP_PARTS = ("id", "player", "points", "ts", "name")
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
MAX_META_BYTES = 1024  # the most any board allows (leaderboard/boards/); each board says its own


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
    # A tournament submission goes to that tournament's boards only (not the game's windows),
    # and counts only if the player is entered.
    tournament: str | None = None
    # A submission to a defined board (leaderboard/boards/) goes to that board only, one per
    # window it keeps, with its key values (``points`` is then 0 and unused) and metadata. A
    # slip of the game's own boards may carry them too, when the game's stored ``default``
    # keeps them (docs/data-model.md, "The game's default board"); its points are then unused.
    board: str | None = None
    values: tuple[int, ...] = ()
    meta: str | None = None
    # Keep what lb_submit decided per board (improved, rank, previous rank, points) for
    # ``Leaderboard.status`` to answer with (the HTTP API's ?wait=applied); costs nothing otherwise.
    outcome: bool = False

    def __post_init__(self) -> None:
        """Every rule that depends on the submission alone: a Submission is valid by construction,
        so whoever receives one (the queue) checks only the clock and the game's limits."""
        if self.id == "":
            raise _invalid("missing_id")
        _check_text(self.id, "invalid_id", MAX_ID_BYTES)
        if _CONTROL.search(self.id):  # the activity entry joins ids with newlines
            raise _invalid("invalid_id")
        if not is_player_id(self.player):
            raise _invalid("invalid_player")
        if self.name is not None:
            _check_text(self.name, "invalid_name", MAX_NAME_BYTES)
            if has_forbidden(self.name):  # shown on every page as a profile name
                raise _invalid("invalid_name")
        parse_uint(self.points, "invalid_points", 16)
        if self.op is not None and self.op not in OPERATORS:
            raise _invalid("invalid_operator")
        parse_uint(self.ts_ms, "invalid_timestamp", 15)
        if self.region is not None or self.mode is not None:
            scopes_of(self.region, self.mode)
        if self.tournament is not None:
            try:
                check_tournament(self.tournament)
            except ValueError:
                raise _invalid("invalid_tournament") from None
        if self.board is not None:
            try:
                check_name("board", self.board)  # the rule of scope values
            except ValueError:
                raise _invalid("invalid_board_id") from None
        if self.board is not None or self.values:
            if not 1 <= len(self.values) <= 5:
                raise _invalid("wrong_key_count")
            for value in self.values:
                if type(value) is not int:
                    raise _invalid("invalid_key_value")
                if not INT64_MIN <= value <= INT64_MAX:
                    raise _invalid("key_out_of_range")
        if self.meta is not None:
            _check_text(self.meta, "metadata_too_large", MAX_META_BYTES)

    def fields(self) -> dict[str, str]:
        """The stream entry for this submission: its slip (SLIP_PARTS; a defined board's has no
        points) and the optional fields it sets."""
        points = str(self.points) if self.board is None and not self.values else ""
        out = {SLIP: f"{self.id}\t{self.player}\t{points}\t{self.ts_ms}\t{self.name or ''}"}
        for key in ("op", "region", "mode", "tournament", "board", "meta"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        if self.board is not None or self.values:
            out["values"] = ",".join(map(str, self.values))
        if self.outcome:
            out["outcome"] = "1"
        return out

    @classmethod
    def parse(cls, fields: Mapping[str, Any], *, now_ms: int | None = None, rules: Rules | None = None) -> Submission:
        """A Submission from raw fields (a wire message, command-line arguments); raises
        InvalidSubmission. With ``now_ms`` and ``rules``, the clock and limits are checked too
        (``check()``); the queue checks those itself, so its callers need not."""
        board = _text(fields.get("board"), "invalid_board_id") or None
        keyed = board is not None or fields.get("values") not in (None, "", [])  # points unused
        sub = cls(
            _text(fields.get("id"), "invalid_id"),
            _text(fields.get("player"), "invalid_player"),
            0 if keyed else parse_uint(fields.get("points"), "invalid_points", 16),
            parse_uint(fields.get("ts"), "invalid_timestamp", 15),
            _text(fields.get("op"), "invalid_operator") or None,
            _text(fields.get("name"), "invalid_name") or None,
            _text(fields.get("region"), "invalid_scope") or None,
            _text(fields.get("mode"), "invalid_scope") or None,
            _text(fields.get("tournament"), "invalid_tournament") or None,
            board,
            parse_values(fields.get("values")) if keyed else (),
            _text(fields.get("meta"), "metadata_too_large") or None,
        )
        if now_ms is not None and rules is not None:
            sub.check(now_ms=now_ms, rules=rules)
        return sub

    def check(self, *, now_ms: int, rules: Rules) -> None:
        """The rules that depend on configuration and the clock."""
        max_points = (1 << (53 - TOURNAMENT_SHIFT)) - 1 if self.tournament else rules.max_points
        if self.board is None and not self.values and self.points > max_points:
            raise InvalidSubmission("points_out_of_range", f"points must stay below {max_points + 1}")
        if self.ts_ms > now_ms + rules.clock_skew_ms:
            raise _invalid("timestamp_in_future")
        if self.ts_ms < now_ms - rules.max_age_ms:
            raise _invalid("timestamp_too_old")


def slip_parts(slip: str) -> list[str]:
    """A slip's SLIP_PARTS, also of one not written by ``Submission.fields``: missing parts are
    empty, and a tab past the fourth stays in the name (which the library then refuses)."""
    parts = slip.split("\t", 4)
    return parts if len(parts) == 5 else [*parts, *[""] * (5 - len(parts))]


def entry_fields(entry: Mapping[str, str]) -> dict[str, str]:
    """A stream entry's fields by name (FIELDS) whichever form it came in, empty parts of its slip
    left out: what dead letters, the durable log and tools read."""
    slip = entry.get(SLIP)
    if slip is None:
        return dict(entry)
    out = {k: v for k, v in zip(SLIP_PARTS, slip_parts(slip), strict=False) if v}  # always five parts
    if len(entry) > 1:
        out.update((k, v) for k, v in entry.items() if k != SLIP)
    return out


def parse_values(value: object) -> tuple[int, ...]:
    """Key values as a list of ints or decimal strings, or one string of them joined by ','."""
    parts = value.split(",") if isinstance(value, str) else value
    if not isinstance(parts, list | tuple) or not 1 <= len(parts) <= 5:
        raise _invalid("wrong_key_count")
    out = []
    for part in parts:
        if isinstance(part, str) and _INT.fullmatch(part):
            if len(part.lstrip("-0")) > 19:  # beyond any int64 (and int()'s digit limit)
                raise _invalid("key_out_of_range")
            part = int(part)
        if type(part) is not int:
            raise _invalid("invalid_key_value")
        out.append(part)
    return tuple(out)


def _text(value: object, code: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise _invalid(code)
    return value


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
