"""A board's definition: its keys and their directions, write operator, tie rule, windows and
time zone, rank mode, top N, metadata limit and display hints, parsed from its JSON with every
field checked (a stable code, errors.BOARD_CODES, for the first rule broken), the rules a
revision, a re-creation and the game's stored ``default`` keep, and a submission's key values
and metadata checked against it. Pure: no I/O.

Room to grow: ``extensions`` is a mapping of named fields, each validated by the function
registered for its name in ``EXTENSIONS`` (integrity rules, shards, groups come as entries
there); an unknown name is refused, so a definition never carries a field nobody checks.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import orjson

from ..errors import InvalidBoard, InvalidSubmission
from ..keys import SCOPE_KINDS, check_name
from ..ranking import DENSE, ORDINAL, RANK_MODES
from ..submission import OPERATORS
from ..submission import parse_values as parse_ints
from ..windows import TOURNAMENT_SHIFT, WINDOWS, tournament_of

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
MAX_KEYS = 5
MAX_METADATA_BYTES = 1024  # the largest per-entry metadata a definition may allow
MAX_TOP_N = 100
MAX_DEFINITION_BYTES = 4096
DIRECTIONS = ("desc", "asc")
DISPLAYS = ("number", "duration_ms", "money")
TIES = ("first", "last")
SEASON = "season"  # a window of a custom period length
BOARD_WINDOWS = (*WINDOWS, SEASON)
MIN_SEASON_S, MAX_SEASON_S = 3_600, 366 * 86_400
PACKED, LEX = "packed", "lex"
DEFAULT_ID = "default"

_KEY_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}")
OFFSET = re.compile(r"([+-])(\d{2}):(\d{2})")
_FIELDS = {
    "id",
    "keys",
    "operator",
    "tie",
    "rank_mode",
    "windows",
    "time_zone",
    "season",
    "top_n",
    "metadata_bytes",
    "version",
    "extensions",
    "scopes",
    "encoding",
}
_KEY_FIELDS = {"name", "direction", "display", "operator", "min", "max"}
_SEASON_FIELDS = {"start_ms", "length_s"}

# Named extension fields and their validators (value in, canonical value out; ValueError to refuse).
EXTENSIONS: dict[str, Callable[[Any], Any]] = {}


@dataclass(frozen=True, slots=True)
class BoardKey:
    """One key of a board: a signed 64-bit integer ranked in ``direction``, optionally bounded
    (``min``/``max``: submissions outside are refused; they also decide the encoding)."""

    name: str
    direction: str = "desc"
    display: str = "number"
    operator: str | None = None  # None: the board's operator
    min: int = INT64_MIN
    max: int = INT64_MAX

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "direction": self.direction, "display": self.display}
        if self.operator is not None:
            out["operator"] = self.operator
        if self.min != INT64_MIN:
            out["min"] = self.min
        if self.max != INT64_MAX:
            out["max"] = self.max
        return out


@dataclass(frozen=True, slots=True)
class Season:
    """A custom window: consecutive periods of ``length_s`` from ``start_ms`` (labelled ``s<n>``)."""

    start_ms: int
    length_s: int


@dataclass(frozen=True, slots=True)
class Definition:
    id: str
    keys: tuple[BoardKey, ...]
    operator: str = "best"
    tie: str = "first"
    rank_mode: str = ORDINAL
    windows: tuple[str, ...] = ("daily", "weekly", "alltime")
    time_zone: str = "UTC"  # IANA name or a fixed offset "+05:30": where a day (week, month) starts
    season: Season | None = None
    top_n: int = 10
    metadata_bytes: int = 0  # 0: entries carry no metadata
    version: int = 1  # the definition's own revision, bumped by every accepted update
    extensions: Mapping[str, Any] = field(default_factory=dict)
    # Kept per region and/or mode (SCOPE_KINDS' order): a slip naming a value writes the home
    # board and that value's board, board:<id>:region:<r> (keys.defined_scope). The game's
    # ``default`` names none: its region and mode boards are the game's (global, region:, mode:).
    scopes: tuple[str, ...] = ()
    # The encoding its board was created with (``created``), or asked for; None: a record stored
    # before the field was kept, read by that release's rule (``first_rule``). Stored as the JSON
    # field ``encoding`` only where the two differ, so those records read as they were written.
    fixed_encoding: str | None = None

    @property
    def encoding(self) -> str:
        """``packed`` (one exact double a member) or ``lex`` (docs/data-model.md "Encodings")."""
        return self.fixed_encoding or self.first_rule

    @property
    def first_rule(self) -> str:
        """The encoding a record without ``encoding`` has: packed for one key that fits alone."""
        one = len(self.keys) == 1 and self.keys[0].operator in (None, self.operator)
        return PACKED if one and self.fits() else LEX

    @property
    def natural(self) -> str:
        """The encoding a new board of this definition gets: packed wherever its keys fit."""
        return PACKED if self.fits() else LEX

    @property
    def places(self) -> tuple[int, ...]:
        """Each key's place in a packed score's points: the product of the ranges (max − min + 1)
        of the keys after it, the first key's being P (encoding.pack)."""
        places = [1]
        for key in reversed(self.keys[1:]):
            places.insert(0, places[0] * (key.max - key.min + 1))
        return tuple(places)

    def fits(self, shift: int | None = None) -> bool:
        """Whether one exact double holds every key tuple on every window (or a window of tie
        part ``shift``): the first key's min ≥ 0, every bound within ±(2^53 − 1) (a value is one
        exact double in the library) and (max₁ + 1) × P ≤ 2^(53 − k), so |points| × 2^k + 2^k
        ≤ 2^53."""
        first, limit = self.keys[0], 1 << 53
        if first.min < 0 or any(not -limit < b < limit for k in self.keys for b in (k.min, k.max)):
            return False
        shifts = [shift] if shift is not None else [self.shift(w) for w in self.windows]
        return (first.max + 1) * self.places[0] <= min(1 << (53 - k) for k in shifts)

    def shift(self, window_name: str) -> int:
        """Bits of a packed score's tie part on a window: today's (windows.py), for a season
        enough for its length in seconds, and a tournament's (``t-<id>``) as windows.py packs it."""
        if window_name == SEASON:
            assert self.season is not None
            return self.season.length_s.bit_length()
        if tournament_of(window_name) is not None:
            return TOURNAMENT_SHIFT
        return WINDOWS[window_name].shift

    def check_tournament(self) -> None:
        """A tournament on this board keeps the board's encoding: a packed board's keys must fit
        a tournament's packing too (k = 22: points below 2^31, ``fits``), or its slips would not
        be exact; InvalidBoard(key_out_of_range) otherwise. A lex board takes any."""
        if self.encoding == PACKED and not self.fits(TOURNAMENT_SHIFT):
            raise _fail(
                "key_out_of_range",
                f"board {self.id} is packed with keys up to {', '.join(str(k.max) for k in self.keys)}: a "
                f"tournament packs points below {1 << (53 - TOURNAMENT_SHIFT)} (give the keys narrower bounds, "
                "or use another board)",
            )

    @property
    def order(self) -> tuple[Any, ...]:
        """What fixes the order of a live board's members, and what its writes keep beside them
        (the distinct values dense ranks count, kept in dense mode only): a change is refused."""
        return (
            tuple((k.name, k.direction, k.min, k.max) for k in self.keys),
            self.tie,
            self.encoding,
            self.windows,
            self.time_zone,
            self.season,
            self.rank_mode == DENSE,
            self.scopes,
        )

    def operator_of(self, i: int) -> str:
        return self.keys[i].operator or self.operator

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "keys": [k.as_dict() for k in self.keys],
            "operator": self.operator,
            "tie": self.tie,
            "rank_mode": self.rank_mode,
            "windows": list(self.windows),
            "time_zone": self.time_zone,
            "top_n": self.top_n,
            "metadata_bytes": self.metadata_bytes,
            "version": self.version,
        }
        if self.season is not None:
            out["season"] = {"start_ms": self.season.start_ms, "length_s": self.season.length_s}
        if self.extensions:
            out["extensions"] = dict(self.extensions)
        if self.scopes:  # absent when none: a definition stored before scopes reads the same
            out["scopes"] = list(self.scopes)
        if self.fixed_encoding is not None:
            out["encoding"] = self.fixed_encoding
        return out

    def shown(self) -> dict[str, Any]:
        """The definition as replies show it (HTTP, the socket, the CLI's ``board show``): its stored
        fields, and always the encoding its board has, which the stored record keeps only where it
        differs from the first rule. Sent back in an update, it asks for the encoding the board has."""
        return {**self.as_dict(), "encoding": self.encoding}

    def to_json(self) -> str:
        """The canonical JSON Redis stores (sorted keys: equal definitions are equal strings)."""
        return orjson.dumps(self.as_dict(), option=orjson.OPT_SORT_KEYS).decode()


def _fail(code: str, message: str) -> InvalidBoard:
    return InvalidBoard(code, message)


def _int(value: Any, what: str, lo: int, hi: int, code: str) -> int:
    if type(value) is not int or not lo <= value <= hi:
        raise _fail(code, f"{what} must be an integer in {lo}..{hi}, got {value!r}")
    return value


def _choice(value: Any, choices: Sequence[str], what: str, code: str) -> str:
    if value not in choices:
        raise _fail(code, f"{what} must be one of {', '.join(choices)}, got {value!r}")
    return str(value)


def check_id(board: Any) -> str:
    """A board id follows the rule of scope values (keys.check_name)."""
    try:
        return check_name("board id", board)
    except ValueError as exc:
        raise _fail("invalid_board_id", str(exc)) from None


def check_time_zone(zone: Any) -> str:
    """``UTC``, a fixed offset ``+HH:MM`` (at most 14 hours), or an IANA zone name."""
    if not isinstance(zone, str) or not zone or len(zone) > 64:
        raise _fail("invalid_time_zone", f"time_zone must be UTC, +HH:MM or an IANA zone name, got {zone!r}")
    if OFFSET.fullmatch(zone):
        _, hh, mm = OFFSET.fullmatch(zone).groups()  # type: ignore[union-attr]
        if int(hh) > 14 or int(mm) >= 60:
            raise _fail("invalid_time_zone", f"offset must be within ±14:00, got {zone!r}")
        return zone
    try:
        ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError):
        raise _fail("invalid_time_zone", f"unknown time zone {zone!r}") from None
    return zone


def _encoding(raw: Any) -> str | None:
    """The encoding a definition asks for (None: the board's rule, ``created``)."""
    return None if raw is None else _choice(raw, (PACKED, LEX), "encoding", "invalid_board")


def _scopes(raw: Any) -> tuple[str, ...]:
    """The scope kinds a board is kept per: distinct ``region``, ``mode``, in that order."""
    if not isinstance(raw, list) or len(set(map(str, raw))) != len(raw) or not set(raw) <= set(SCOPE_KINDS):
        raise _fail("invalid_board_scopes", f"scopes must be a list of distinct {', '.join(SCOPE_KINDS)}, got {raw!r}")
    return tuple(k for k in SCOPE_KINDS if k in raw)


def _key(raw: Any, board_operator: str) -> BoardKey:
    if not isinstance(raw, Mapping):
        raise _fail("invalid_board_key", f"a key must be an object, got {raw!r}")
    unknown = set(raw) - _KEY_FIELDS
    if unknown:
        raise _fail("invalid_board_key", f"unknown key field(s): {', '.join(sorted(map(str, unknown)))}")
    name = raw.get("name")
    if not isinstance(name, str) or not _KEY_NAME.fullmatch(name):
        raise _fail("invalid_board_key", f"key name must be 1-32 of a-z 0-9 _ (a letter first), got {name!r}")
    op = raw.get("operator")
    if op is not None:
        _choice(op, OPERATORS, "operator", "invalid_operator")
    lo = _int(raw.get("min", INT64_MIN), "min", INT64_MIN, INT64_MAX, "invalid_key_bounds")
    hi = _int(raw.get("max", INT64_MAX), "max", INT64_MIN, INT64_MAX, "invalid_key_bounds")
    if lo > hi:
        raise _fail("invalid_key_bounds", f"key {name}: min {lo} is above max {hi}")
    return BoardKey(
        name=name,
        direction=_choice(raw.get("direction", "desc"), DIRECTIONS, "direction", "invalid_direction"),
        display=_choice(raw.get("display", "number"), DISPLAYS, "display", "invalid_display"),
        operator=None if op == board_operator else op,
        min=lo,
        max=hi,
    )


def parse(raw: Mapping[str, Any] | str | bytes) -> Definition:
    """A definition from its JSON (or the decoded dict), every field checked; InvalidBoard with
    a stable code (errors.BOARD_CODES) for the first rule broken."""
    if isinstance(raw, str | bytes):
        if len(raw) > MAX_DEFINITION_BYTES:
            raise _fail("invalid_board", f"a definition is at most {MAX_DEFINITION_BYTES} bytes of JSON")
        try:
            raw = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise _fail("invalid_board", "a definition must be valid JSON") from None
    if not isinstance(raw, Mapping):
        raise _fail("invalid_board", "a definition must be a JSON object")
    unknown = set(raw) - _FIELDS
    if unknown:
        raise _fail("invalid_board", f"unknown field(s): {', '.join(sorted(map(str, unknown)))}")
    board = check_id(raw.get("id"))
    operator = _choice(raw.get("operator", "best"), OPERATORS, "operator", "invalid_operator")
    keys_raw = raw.get("keys")
    if not isinstance(keys_raw, list) or not keys_raw:
        raise _fail("board_no_keys", "a board needs 1 to 5 keys")
    if len(keys_raw) > MAX_KEYS:
        raise _fail("board_too_many_keys", f"a board has at most {MAX_KEYS} keys, got {len(keys_raw)}")
    keys = tuple(_key(k, operator) for k in keys_raw)
    if len({k.name for k in keys}) != len(keys):
        raise _fail("invalid_board_key", "key names must differ")
    windows_raw = raw.get("windows", ["daily", "weekly", "alltime"])
    if not isinstance(windows_raw, list) or not windows_raw or len(set(map(str, windows_raw))) != len(windows_raw):
        raise _fail("invalid_board_window", f"windows must be a non-empty list of distinct {', '.join(BOARD_WINDOWS)}")
    windows = tuple(_choice(w, BOARD_WINDOWS, "window", "invalid_board_window") for w in windows_raw)
    season_raw = raw.get("season")
    season = None
    if (season_raw is None) != (SEASON not in windows):
        raise _fail("invalid_season", "a season window and a season definition go together")
    if season_raw is not None:
        if not isinstance(season_raw, Mapping) or set(season_raw) != _SEASON_FIELDS:
            raise _fail("invalid_season", "season must be {start_ms, length_s}")
        season = Season(
            _int(season_raw["start_ms"], "season start_ms", 0, 1 << 47, "invalid_season"),
            _int(season_raw["length_s"], "season length_s", MIN_SEASON_S, MAX_SEASON_S, "invalid_season"),
        )
    extensions_raw = raw.get("extensions", {})
    if not isinstance(extensions_raw, Mapping):
        raise _fail("unknown_extension", "extensions must be an object")
    extensions: dict[str, Any] = {}
    for name, value in extensions_raw.items():
        check = EXTENSIONS.get(name)
        if check is None:
            raise _fail("unknown_extension", f"no extension named {name!r}")
        try:
            extensions[name] = check(value)
        except ValueError as exc:
            raise _fail("invalid_extension", f"extension {name}: {exc}") from None
    made = Definition(
        id=board,
        keys=keys,
        operator=operator,
        tie=_choice(raw.get("tie", "first"), TIES, "tie", "invalid_tie"),
        rank_mode=_choice(raw.get("rank_mode", ORDINAL), RANK_MODES, "rank_mode", "invalid_rank_mode"),
        windows=windows,
        time_zone=check_time_zone(raw.get("time_zone", "UTC")),
        season=season,
        top_n=_int(raw.get("top_n", 10), "top_n", 1, MAX_TOP_N, "invalid_top_n"),
        metadata_bytes=_int(
            raw.get("metadata_bytes", 0), "metadata_bytes", 0, MAX_METADATA_BYTES, "invalid_metadata_limit"
        ),
        version=_int(raw.get("version", 1), "version", 1, 1 << 31, "invalid_board"),
        extensions=extensions,
        scopes=_scopes(raw.get("scopes", [])),
        fixed_encoding=_encoding(raw.get("encoding")),
    )
    if made.fixed_encoding == PACKED and not made.fits():
        raise _fail(
            "key_out_of_range",
            f"board {board} cannot be packed: its keys' bounds do not fit one exact double on every window "
            "(docs/data-model.md, Encodings)",
        )
    return made


def created(definition: Definition, base: Definition | None = None) -> Definition:
    """``definition`` as a new board stores it: the encoding asked for, else ``base``'s (a deleted
    board of that id whose entries it goes on from: check_recreate), else packed wherever its
    keys fit (``natural``). Fixed from then on: an update keeps it (check_update)."""
    if definition.fixed_encoding is not None:
        return _encoded(definition, definition.fixed_encoding)
    return _encoded(definition, base.encoding if base is not None else definition.natural)


def _encoded(definition: Definition, encoding: str) -> Definition:
    """``definition`` of ``encoding``, held as a stored record reads back: None where the first
    rule gives it."""
    return replace(definition, fixed_encoding=None if encoding == definition.first_rule else encoding)


def check_update(old: Definition, new: Definition) -> Definition:
    """``new`` as the next revision of ``old``; InvalidBoard(board_reorder) when it would reorder
    the live board's members (keys, directions, bounds, tie, encoding, windows, time zone),
    switch dense ranks on or off (their distinct values are kept by the writes of dense boards)
    or change its scopes (its entries are kept per scope). It keeps ``old``'s encoding unless it
    asks for another (then board_reorder)."""
    new = _kept(old, new)
    if old.order != new.order:
        raise _fail(
            "board_reorder",
            f"board {old.id}: keys, directions, bounds, tie, windows, time zone, dense ranks and scopes are fixed "
            "once a board exists; create a new board instead",
        )
    return Definition(**{**{f: getattr(new, f) for f in new.__dataclass_fields__}, "version": old.version + 1})


def _kept(old: Definition, new: Definition) -> Definition:
    """``new`` with ``old``'s encoding unless it asks for one."""
    return _encoded(new, old.encoding if new.fixed_encoding is None else new.fixed_encoding)


def check_recreate(deleted: Definition, new: Definition) -> Definition:
    """``new`` as the definition of an id whose board was deleted as ``deleted``: its keys stay in
    Redis until they expire (an all-time board's never do) and the new board goes on from them,
    so it must read them as the old one wrote them: check_update's rule, InvalidBoard(board_reorder)
    otherwise. It keeps ``deleted``'s encoding unless it asks for another."""
    new = _kept(deleted, new)
    if deleted.order != new.order:
        raise _fail(
            "board_reorder",
            f"board {new.id} was deleted but its entries are kept under that id: created again, it keeps its "
            "keys, directions, bounds, tie, windows, time zone and dense ranks; use a new id for other ones",
        )
    return new


def default_definition(operator: str, rank_mode: str, windows: Iterable[str], top_n: int) -> Definition:
    """Today's environment configuration as a definition (never stored unless an operator
    overrides it): one key, points, highest first, ties to the first to reach it."""
    return Definition(
        id=DEFAULT_ID,
        keys=(BoardKey("points", min=0, max=min(WINDOWS[w].max_points for w in windows)),),
        operator=operator,
        rank_mode=rank_mode,
        windows=tuple(windows),
        top_n=top_n,
    )


def configured_shape(definition: Definition, configured: Definition) -> bool:
    """Whether ``definition``, as the game's ``default``, is written as the environment's game
    is: one key as ``configured`` names it, highest first, from 0 to the ceiling of its windows
    (windows.py), one operator, ties to the first, UTC days, no season and no window the
    environment does not keep, no metadata. Such a default keeps the game's packed points, its
    slips and the library's fast path (common.lua); any other is laid out as a definition kept
    per scope (``Definitions.general``): its slips are kept whole in the durable log and replayed
    by a rebuild, where the environment's are folded over the environment's windows."""
    key, wanted = definition.keys[0], configured.keys[0]
    ceiling = min((WINDOWS[w].max_points for w in definition.windows if w in WINDOWS), default=-1)
    return (
        len(definition.keys) == 1
        and set(definition.windows) <= set(configured.windows)
        and (key.name, key.direction, key.operator, key.min, key.max) == (wanted.name, "desc", None, 0, ceiling)
        and (definition.tie, definition.time_zone, definition.season) == ("first", "UTC", None)
        and not definition.metadata_bytes
        and not definition.extensions
    )


def check_default(definition: Definition, configured: Definition) -> Definition:
    """``definition`` as a stored ``default``: the game's own boards (``global``, ``region:``,
    ``mode:``) are that definition kept per scope, so it may ask for any keys, directions, bounds,
    tie, time zone, metadata, per-key operators, windows and a ``season`` (a window the
    environment does not keep, calendar or season, then joins the game's: ``definitions.applied``).
    What it may not ask for: ``scopes`` (InvalidBoard invalid_default_board); dense ranks on
    exactly when the configuration has them (its writes keep the distinct points then:
    board_reorder otherwise)."""
    if definition.scopes:
        raise _fail(
            "invalid_default_board",
            "the game's default board is kept per region and mode already (global, region:<name>, "
            "mode:<name>): it names no scopes",
        )
    if (definition.rank_mode == DENSE) != (configured.rank_mode == DENSE):
        raise _fail("board_reorder", "the game's default board switches dense ranks on or off by LB_RANK_MODE only")
    return definition


def written_as(definition: Definition, configured: Definition) -> tuple[Any, ...] | None:
    """How the game's boards are written under ``definition`` as their default: None for the
    environment's shape (packed points, ``configured_shape``), else the definition's ``order``.
    A change of it would misread the entries already written (lb_board_put refuses it while the
    game has any: board_reorder)."""
    return None if configured_shape(definition, configured) else definition.order


# --- key values -----------------------------------------------------------------------------


def parse_values(definition: Definition, raw: Sequence[Any]) -> tuple[int, ...]:
    """A submission's key values (decimal int64 strings or ints) checked against the definition;
    InvalidBoard(wrong_key_count / invalid_key_value / key_out_of_range)."""
    if len(raw) != len(definition.keys):
        wanted = len(definition.keys)
        raise _fail("wrong_key_count", f"board {definition.id} takes {wanted} key value(s), got {len(raw)}")
    try:
        values = parse_ints(list(raw))
    except InvalidSubmission as exc:
        raise _fail(exc.code, exc.message) from None
    for key, value in zip(definition.keys, values, strict=True):
        if not key.min <= value <= key.max:
            raise _fail("key_out_of_range", f"key {key.name} must be within {key.min}..{key.max}, got {value}")
    return values


def check_metadata(definition: Definition, meta: str | None) -> None:
    """InvalidBoard(metadata_too_large) when ``meta`` is longer than the board keeps (None: none)."""
    if meta is not None and len(meta.encode()) > definition.metadata_bytes:
        limit = definition.metadata_bytes
        raise _fail("metadata_too_large", f"board {definition.id} keeps at most {limit} bytes of metadata")
