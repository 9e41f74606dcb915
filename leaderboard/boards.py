"""Board definitions and their ordering (pure: no I/O).

A board is *defined*, not configured: its keys and their directions, write operator, tie rule,
windows and where their days start, rank mode, top N, metadata limit and display hints live in
one definition, created at run time (leaderboard/definitions.py stores it in Redis)::

    tower = parse({"id": "tower", "keys": [{"name": "floor"},
                                           {"name": "time", "direction": "asc", "display": "duration_ms"}]})
    tower.encoding                          # "lex": two keys do not fit one exact double
    m = encode_member(tower, (12, 81_250), ts_ms=1_764_000_000_000, player="mia")
    decode_member(tower, m)                 # ((12, 81250), 1764000000000, "mia")

Encodings (docs/data-model.md gives the exact limits):

* ``packed`` — today's exact double, ``score = v * 2^k + tie`` (windows.py), for a definition
  of one non-negative key whose declared ``max`` fits every window's points bound; an ``asc``
  key packs its negation, so the highest score is still the best.
* ``lex`` — every other definition: all members score 0 and the member itself orders the board
  (Redis sorts equal scores by memcmp of the member): per key 16 hex digits of the value with
  its sign bit flipped (so unsigned order is signed order), complemented for ``desc``; then 12
  hex digits of the time it was reached (complemented for tie ``last``); then the player id's
  bytes complemented and 0xFF (``player_part``). Ascending member order is best first, so top N
  is ``ZRANGE 0 N-1`` and a rank is ``ZRANK``.

Ties: entries with equal values reached at the same time (in the window's tie unit) read by
descending player id (bytewise) on both encodings, the order Redis gives a packed board read
highest score first.

The model (``Board``) is the ordering's specification in plain Python: the property tests hold
every read of the function library to it.

Room to grow: ``extensions`` is a mapping of named fields, each validated by the function
registered for its name in ``EXTENSIONS`` (integrity rules, shards, groups come as entries
there); an unknown name is refused, so a definition never carries a field nobody checks.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import orjson

from .errors import InvalidBoard, InvalidSubmission
from .keys import check_name
from .ranking import COMPETITION, DENSE, ORDINAL, RANK_MODES
from .submission import OPERATORS
from .submission import parse_values as parse_ints
from .windows import TOURNAMENT_SHIFT, WINDOWS, Period, Window, label_day, readable, tournament_of

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
KEY_HEX = 16  # hex digits per key in a lex member
TIME_HEX = 12  # hex digits of the reached-at time (ms since the epoch; 2^48 ms is year 10889)
PACKED, LEX = "packed", "lex"
DEFAULT_ID = "default"

_KEY_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}")
_OFFSET = re.compile(r"([+-])(\d{2}):(\d{2})")
_SEASON_LABEL = re.compile(r"s(0|[1-9]\d{0,8})")
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

    @property
    def encoding(self) -> str:
        """``packed`` when one exact double holds every value on every window, else ``lex``."""
        if len(self.keys) != 1 or self.keys[0].operator not in (None, self.operator):
            return LEX
        key = self.keys[0]
        bound = min((1 << (53 - self.shift(w))) - 1 for w in self.windows)
        return PACKED if key.min >= 0 and key.max <= bound else LEX

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
        """A tournament on this board keeps the board's encoding: a packed board's one key must
        fit a tournament's packing too (k = 22: values up to 2,147,483,647), or its slips would
        not be exact; InvalidBoard(key_out_of_range) otherwise. A lex board takes any."""
        bound = (1 << (53 - TOURNAMENT_SHIFT)) - 1
        if self.encoding == PACKED and self.keys[0].max > bound:
            raise _fail(
                "key_out_of_range",
                f"board {self.id} is packed with {self.keys[0].name} up to {self.keys[0].max}: a tournament "
                f"packs values up to {bound} (give the key a lower max, or use another board)",
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
        return out

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
    if _OFFSET.fullmatch(zone):
        _, hh, mm = _OFFSET.fullmatch(zone).groups()  # type: ignore[union-attr]
        if int(hh) > 14 or int(mm) >= 60:
            raise _fail("invalid_time_zone", f"offset must be within ±14:00, got {zone!r}")
        return zone
    try:
        ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError):
        raise _fail("invalid_time_zone", f"unknown time zone {zone!r}") from None
    return zone


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
    return Definition(
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
    )


def check_update(old: Definition, new: Definition) -> Definition:
    """``new`` as the next revision of ``old``; InvalidBoard(board_reorder) when it would reorder
    the live board's members (keys, directions, bounds, tie, encoding, windows, time zone) or
    switch dense ranks on or off (their distinct values are kept by the writes of dense boards)."""
    if old.order != new.order:
        raise _fail(
            "board_reorder",
            f"board {old.id}: keys, directions, bounds, tie, windows, time zone and dense ranks are fixed once "
            "a board exists; create a new board instead",
        )
    return Definition(**{**{f: getattr(new, f) for f in new.__dataclass_fields__}, "version": old.version + 1})


def check_recreate(deleted: Definition, new: Definition) -> Definition:
    """``new`` as the definition of an id whose board was deleted as ``deleted``: its keys stay in
    Redis until they expire (an all-time board's never do) and the new board goes on from them,
    so it must read them as the old one wrote them: check_update's rule, InvalidBoard(board_reorder)
    otherwise."""
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


def check_default(definition: Definition, configured: Definition) -> Definition:
    """``definition`` as a stored ``default``: the game's own boards (``global``, ``region:``,
    ``mode:``) take its operator, rank mode, top N, windows and display hint, so it may ask for
    nothing else than they hold: one key as ``configured`` names it, highest first, from 0 to
    the ceiling of its windows (windows.py), ties to the first, UTC days, windows the game keeps
    (``configured``'s), no metadata, no per-key operator, no extensions; dense ranks on exactly
    when the configuration has them (its writes keep the distinct points then). InvalidBoard
    (invalid_default_board, or board_reorder for dense) otherwise."""
    key, wanted = definition.keys[0], configured.keys[0]
    kept = set(configured.windows)

    def refuse(what: str) -> InvalidBoard:
        return _fail("invalid_default_board", f"the game's default board {what}")

    if len(definition.keys) != 1:
        raise refuse(f"has one key, {wanted.name}")
    if not set(definition.windows) <= kept:
        raise refuse(f"keeps only windows the game keeps: {', '.join(configured.windows)}")
    ceiling = min(WINDOWS[w].max_points for w in definition.windows)
    if (key.name, key.direction, key.operator, key.min, key.max) != (wanted.name, "desc", None, 0, ceiling):
        shape = f"{{name: {wanted.name}, direction: desc, min: 0, max: {ceiling}}}"
        raise refuse(f"has the key {shape} (its display may change)")
    if definition.tie != "first" or definition.time_zone != "UTC" or definition.season is not None:
        raise refuse("ranks ties by who reached them first, on UTC days")
    if definition.metadata_bytes or definition.extensions:
        raise refuse("carries no metadata and no extensions")
    if (definition.rank_mode == DENSE) != (configured.rank_mode == DENSE):
        raise _fail("board_reorder", "the game's default board switches dense ranks on or off by LB_RANK_MODE only")
    return definition


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


def combine(definition: Definition, old: tuple[int, ...] | None, new: tuple[int, ...]) -> tuple[int, ...]:
    """The stored values after a submission of ``new`` over ``old`` (None: no entry yet).

    Without per-key operators the board's operator acts on the whole tuple: ``best`` keeps the
    better tuple in board order, ``set`` overwrites, ``incr`` adds key by key. With per-key
    operators each key follows its own: ``best`` keeps the better value in that key's direction.
    InvalidBoard(key_out_of_range) when an ``incr`` leaves the key's bounds.

    When the time moves (``Board.submit``, as the encodings write it): ``best`` and ``set``
    compare the values *and* the time they were reached, as the board orders them, so a slip
    reaching the same values earlier (tie ``first``) takes the earlier time under ``best``, and
    ``set`` writes the slip's time; ``incr`` and per-key operators move the time when the values
    change (adding zero keeps it)."""
    if old is None:
        return new
    per_key = any(k.operator is not None for k in definition.keys)
    if not per_key and definition.operator == "best":
        return new if _order_key(definition, new) < _order_key(definition, old) else old
    out = []
    for i, key in enumerate(definition.keys):
        op = definition.operator_of(i)
        if op == "set":
            value = new[i]
        elif op == "incr":
            value = old[i] + new[i]
            if not key.min <= value <= key.max:
                raise _fail("key_out_of_range", f"key {key.name} would be {value}, outside {key.min}..{key.max}")
        else:
            better = new[i] > old[i] if key.direction == "desc" else new[i] < old[i]
            value = new[i] if better else old[i]
        out.append(value)
    return tuple(out)


def _order_key(definition: Definition, values: Sequence[int]) -> tuple[int, ...]:
    """Smaller is better."""
    return tuple(-v if k.direction == "desc" else v for k, v in zip(definition.keys, values, strict=True))


# --- packed scores -------------------------------------------------------------------------


def pack(definition: Definition, window_name: str, value: int, ts_ms: int, start_ms: int) -> int:
    """The packed score of a ``packed`` definition's one value reached at ``ts_ms`` in a period
    starting at ``start_ms``: the highest score is the best (an ``asc`` value packs negated)."""
    k = definition.shift(window_name)
    unit = WINDOWS["alltime"].unit_ms if window_name == "alltime" else 1000
    t = (ts_ms - start_ms) // unit
    tie = (1 << k) - 1 - t if definition.tie == "first" else t
    signed = value if definition.keys[0].direction == "desc" else -value
    return (signed << k) + tie


def unpack(definition: Definition, window_name: str, score: int) -> int:
    signed = score >> definition.shift(window_name)  # floor: the tie part is never negative
    return signed if definition.keys[0].direction == "desc" else -signed


# --- lex members ----------------------------------------------------------------------------

_FULL = (1 << 64) - 1


def key_prefix(definition: Definition, values: Sequence[int]) -> str:
    """The fixed-width, direction-adjusted part of a member: members sharing it are tied."""
    parts = []
    for key, value in zip(definition.keys, values, strict=True):
        u = (value & _FULL) ^ (1 << 63)  # two's complement with the sign bit flipped: unsigned order = signed
        parts.append(f"{(_FULL ^ u) if key.direction == 'desc' else u:016x}")
    return "".join(parts)


def player_part(player: str) -> str:
    """A lex member's player part: the id's UTF-8 bytes complemented, then 0xFF, so ascending
    member order reads the players of equal values and time by descending id, as a packed board
    does (lua/encoding.lua lex.player_part). Not UTF-8: held as text the way ``connect()``'s
    clients read it (surrogateescape)."""
    flipped = bytes(255 - b for b in player.encode()) + b"\xff"
    return flipped.decode("utf-8", "surrogateescape")


def player_of(part: str) -> str:
    """The player id of a member's player part (``player_part`` undone). A member written before
    the part was complemented holds the id as it is: UTF-8 never holds the byte 0xFF, so the
    last byte tells them apart."""
    raw = part.encode("utf-8", "surrogateescape")
    if not raw.endswith(b"\xff"):
        return part
    return bytes(255 - b for b in raw[:-1]).decode()


def encode_member(definition: Definition, values: Sequence[int], ts_ms: int, player: str) -> str:
    t = ts_ms if definition.tie == "first" else ((1 << 48) - 1) - ts_ms
    return f"{key_prefix(definition, values)}{t:012x}{player_part(player)}"


def decode_member(definition: Definition, member: str) -> tuple[tuple[int, ...], int, str]:
    """(values, reached-at ms, player) of a lex member."""
    values = []
    for i, key in enumerate(definition.keys):
        u = int(member[i * KEY_HEX : (i + 1) * KEY_HEX], 16)
        if key.direction == "desc":
            u ^= _FULL
        u ^= 1 << 63
        values.append(u - (1 << 64) if u >= 1 << 63 else u)
    at = len(definition.keys) * KEY_HEX
    t = int(member[at : at + TIME_HEX], 16)
    ts = t if definition.tie == "first" else ((1 << 48) - 1) - t
    return tuple(values), ts, player_of(member[at + TIME_HEX :])


# --- periods --------------------------------------------------------------------------------


def _zone(definition: Definition) -> dt.tzinfo:
    m = _OFFSET.fullmatch(definition.time_zone)
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


# --- the model of a board -------------------------------------------------------------------


@dataclass(slots=True)
class Board:
    """One board period in plain Python: the specification every encoding is tested against.
    Equal values rank by the time they were reached, then by player id, descending (bytewise)
    on either encoding: Redis orders equal scores by member and a packed board is read highest
    first, and a lex member's player part is written to read the same way. A packed board's
    time counts in its window's tie unit (``unit_ms``)."""

    definition: Definition
    entries: dict[str, tuple[tuple[int, ...], int]] = field(default_factory=dict)  # player -> (values, reached)
    unit_ms: int = 1

    def submit(self, player: str, values: tuple[int, ...], ts_ms: int) -> None:
        """A slip of ``values`` reached at ``ts_ms``. The reached time moves as docs/data-model.md
        states: ``best`` takes the slip when its values and time rank higher together (equal
        values reached earlier under tie ``first``, later under ``last``), ``set`` when either
        differs, ``incr`` and per-key operators only when the stored values change."""
        old = self.entries.get(player)
        if old is None:
            self.entries[player] = (values, ts_ms)
            return
        d = self.definition
        if not any(k.operator is not None for k in d.keys) and d.operator != "incr":
            mine, theirs = self._place(values, ts_ms), self._place(*old)
            if (d.operator == "best" and mine < theirs) or (d.operator == "set" and mine != theirs):
                self.entries[player] = (values, ts_ms)
            return
        stored = combine(d, old[0], values)
        if stored != old[0]:
            self.entries[player] = (stored, ts_ms)

    def _place(self, values: tuple[int, ...], ts_ms: int) -> tuple[Any, ...]:
        t = ts_ms // self.unit_ms
        return (_order_key(self.definition, values), t if self.definition.tie == "first" else -t)

    def sort_key(self, player: str) -> tuple[Any, ...]:
        name = (*(255 - b for b in player.encode()), 256)  # descending bytes, on every encoding
        return (*self._place(*self.entries[player]), name)

    def ordered(self) -> list[str]:
        return sorted(self.entries, key=self.sort_key)

    def top(self, n: int) -> list[tuple[str, tuple[int, ...]]]:
        return [(p, self.entries[p][0]) for p in self.ordered()[:n]]

    def rank(self, player: str, mode: str | None = None) -> int | None:
        if player not in self.entries:
            return None
        mode = mode or self.definition.rank_mode
        mine = _order_key(self.definition, self.entries[player][0])
        if mode == ORDINAL:
            return self.ordered().index(player) + 1
        above = [_order_key(self.definition, v) for v, _ in self.entries.values()]
        if mode == COMPETITION:
            return 1 + sum(1 for k in above if k < mine)
        assert mode == DENSE
        return 1 + len({k for k in above if k < mine})
