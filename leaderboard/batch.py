"""Batch encoding of ``lb_submit`` (pure: no I/O): stream entries to the call's KEYS and ARGV,
and the call's replies back to one SubmitResult per entry.

The layout of the arguments is documented at ``lb_submit`` in lua/submit.lua, record by
record, with the field names of the ``*_FIELDS`` tuples below (tests/test_submit_layout.py holds
the two equal, and this encoder to its names)::

    plan = encode_batch(config, entries, now_ms())
    replies = ...FCALL lb_submit len(plan.keys) *plan.keys *plan.args...
    results = decode_batch(plan, replies)

and the rows ``lb_submit`` kept for a submission that asked (``outcome_rows``, read by lb_status).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from . import boards
from .config import GameConfig
from .errors import CODES, InvalidBoard, InvalidSubmission
from .keys import HOUR_MS
from .results import BoardRef, BoardResult, SubmitResult, applied
from .submission import SLIP, SLIP_PARTS, parse_uint, scopes_of, slip_parts
from .windows import Period, Window, check_tournament

# lb_submit's ARGV: the settings, then each list as its count and its records (a layout's boards
# follow it). The names are the library's (its header, and the locals it reads them into).
# The layout of the call these records make: the library refuses another (library_mismatch), so a
# scorer of one release never has its batches misread by the library of another. Raised with any
# change to the records below.
SUBMIT_LAYOUT = 4
SETTINGS_FIELDS = (
    "call_layout",
    "now_ms",
    "activity_maxlen",
    "clock_skew_ms",
    "idempotency_ms",
    "announce",
    "rows",
    "max_scopes",
)
PERIOD_FIELDS = (
    "window",
    "label",
    "start_ms",
    "end_ms",
    "shift",
    "unit_ms",
    "expire_at",
    "players_key",
    "entrants_key",
    "mode",
    "closed_key",
)
DEFINITION_FIELDS = ("encoding", "tie", "metadata_bytes", "operator", "key_spec", "top_n")
# lb_submit's definition records carry two more (lb_correct's do not): kept per scope (the game's
# own boards), and a slip without key values carrying its one key in points (the game's slips)
SUBMIT_DEFINITION_FIELDS = (*DEFINITION_FIELDS, "scoped", "points")
LAYOUT_FIELDS = ("seen_key", "outcomes_key", "seen_expire_at", "board_count")
BOARD_FIELDS = (
    "board_key",
    "period",
    "op",
    "scope",
    "hist_key",
    "points_key",
    "definition",
    "members_key",
    "meta_key",
)
# A submission is its layout and its slip: the text fields a slip of the layout's own boards has
# (nearly every one), joined by a tab, one argument where five cost the library five; a slip with
# op, outcome, values or meta, or a tab in a field, is '' and followed by its whole record.
# The slip is the queue entry's own (SLIP_PARTS, leaderboard/submission.py), passed on as it came.
SUBMISSION_FIELDS = ("layout", "slip")
FULL_FIELDS = ("id", "player", "points", "op", "ts", "name", "outcome", "values", "meta")

# A board: its record (BOARD_FIELDS) and its ref.
_Board = tuple[tuple[int, int, str, str, int, int, int, int, int], BoardRef]


# The key spec lb_correct is sent for the game's packed points (library/moderation.py): bounded by
# each window's exact scores in the library, not by the definition's smallest; what tells the
# durable log's fold a correction of the game's points from one it replays (scorer/durable/fold.py).
POINTS_SPEC = f"d,,0,{boards.INT64_MAX}"


def key_spec(definition: boards.Definition) -> str:
    """A definition's keys as the library reads them (definitions.shape): direction, operator
    (per-key operators only), bounds."""
    per_key = any(k.operator is not None for k in definition.keys)
    return ";".join(
        f"{k.direction[0]},{definition.operator_of(i) if per_key else ''},{k.min},{k.max}"
        for i, k in enumerate(definition.keys)
    )


def definition_record(definition: boards.Definition) -> list[str | int]:
    """A definition as lb_submit reads it (DEFINITION_FIELDS)."""
    per_key = any(k.operator is not None for k in definition.keys)
    return [
        definition.encoding,
        definition.tie,
        definition.metadata_bytes,
        "keys" if per_key else definition.operator,
        key_spec(definition),
        definition.top_n,
    ]


def submit_record(definition: boards.Definition) -> list[str | int]:
    """A definition as lb_submit reads it (SUBMIT_DEFINITION_FIELDS): the game's ``default`` is
    kept per scope, and its one key (if one) may come in a slip's points; a defined board with
    ``scopes`` is kept per scope too (its scopes' boards count against LB_MAX_SCOPES)."""
    game = definition.id == boards.DEFAULT_ID
    scoped = game or bool(definition.scopes)
    return [*definition_record(definition), int(scoped), int(game and len(definition.keys) == 1)]


def game_record(config: GameConfig) -> list[str | int]:
    """The game's boards as the environment shapes them, as lb_submit reads a definition: of
    encoding ``points`` (packed, a slip's points its one value, refused as points: invalid_points,
    points_out_of_range), highest first, ties to the first, no metadata, kept per scope. Each
    board's operator is its window's (LB_WINDOW_OPERATORS), sent with the board."""
    return ["points", "first", 0, config.operator, POINTS_SPEC, config.top_n, 1, 1]


@dataclass(slots=True)
class BatchPlan:
    keys: list[str]
    args: list[str | int]
    count: int  # submissions sent to the library
    # per entry: the boards sent to Lua, or a result decided before the call (a local refusal)
    entries: list[tuple[str, list[BoardRef]] | SubmitResult]


class _Layouts:
    """The keys, periods and layouts of one batch, each sent once however many submissions
    share it. A layout is what a submission's writes land on: its boards and its seen-id bucket;
    nearly every submission of a batch shares one."""

    def __init__(self, config: GameConfig, default: boards.Definition | None = None) -> None:
        self.config = config
        self.default = default  # the game's stored default when not the environment's shape
        self.names = config.keys
        self.keys = [
            self.names.versions,
            self.names.activity,
            self.names.profiles,
            self.names.banned,
            self.names.scopes,
        ]
        self._key_index: dict[str, int] = {}
        # by window, label and start: a defined board's day may start elsewhere than UTC's
        self.periods: dict[tuple[str, str, int, str], tuple[int, Period, boards.Definition | None]] = {}
        # by id ('' the game's boards as the environment shapes them): its index and its record
        self.definitions: dict[str, tuple[int, list[str | int]]] = {}
        self._specs = [(spec, config.operator_for(spec.name)) for spec in config.window_specs]
        self._boards: dict[tuple[str, str, str], _Board] = {}
        self._layouts: dict[tuple[tuple[int, ...], int], int] = {}
        self.args: list[str | int] = []  # the layouts' records, in index order
        self.idem_ms = config.idempotency_s * 1000

    def __len__(self) -> int:
        return len(self._layouts)

    def index(self, key: str) -> int:
        """The 1-based KEYS index of ``key``, added on first use."""
        found = self._key_index.get(key)
        if found is None:
            self.keys.append(key)
            found = self._key_index[key] = len(self.keys)
        return found

    def layout_for(
        self,
        ts: int,
        scopes: list[str],
        tournament: Window | None = None,
        definition: boards.Definition | None = None,
    ) -> tuple[int, list[BoardRef], int, int]:
        """The layout of a submission at ``ts`` on ``scopes`` (on a tournament's boards instead
        of the game's windows when ``tournament`` is given, on a defined board's, one per window,
        when ``definition`` is), its boards, and the time span [lo, hi) over which it stays the
        same (every period and the seen-id hour)."""
        hour = ts // HOUR_MS
        lo, hi = hour * HOUR_MS, (hour + 1) * HOUR_MS
        refs: list[_Board] = []
        if definition is None:
            definition = self.default  # the game's own boards, as the stored default lays them out
        if definition is not None:
            # a tournament on a defined board: the tournament's one period instead of its windows
            periods = (
                [tournament.period(ts)]
                if tournament
                else [boards.period(definition, w, ts) for w in definition.windows]
            )
            if definition is self.default:  # each window's operator (LB_WINDOW_OPERATORS) per scope
                targets = [(p, self.config.operator_for(p.window.name)) for p in periods]
            else:  # its home and the scopes the slip names (boards.board_scopes)
                targets = [(p, definition.operator) for p in periods]
        else:
            specs = self._specs if tournament is None else [(tournament, self.config.operator)]
            targets = [(spec.period(ts), op) for spec, op in specs]
        for period, op in targets:
            lo, hi = max(lo, period.start_ms), min(hi, period.end_ms)
            for scope in scopes:
                board = self._boards.get((period.window.name, period.label, scope))
                if board is None:
                    board = self._board(period.window.name, period, op, scope, definition)
                    self._boards[period.window.name, period.label, scope] = board
                refs.append(board)
        seen = self.index(self.names.seen(hour))
        shape = (tuple(record[0] for record, _ in refs), seen)
        layout = self._layouts.get(shape)
        if layout is None:
            layout = self._layouts[shape] = len(self._layouts) + 1
            outcomes = self.index(self.names.outcomes(hour))
            self.args.extend((seen, outcomes, ((hour + 1) * HOUR_MS + self.idem_ms) // 1000, len(refs)))
            for record, _ in refs:
                self.args.extend(record)
        return layout, [ref for _, ref in refs], lo, hi

    def _board(
        self, window: str, period: Period, op: str, scope: str, definition: boards.Definition | None = None
    ) -> _Board:
        # a defined board's periods are its own: its close marker, rank mode and tie bits (the
        # game's scopes share their periods, as the environment's boards do)
        own = definition is not None and definition is not self.default
        at = (window, period.label, period.start_ms, boards.home_of(scope) if own else "")
        slot = self.periods.get(at)
        if slot is None:
            slot = self.periods[at] = (len(self.periods) + 1, period, definition)
        names = self.names
        key = self.index(names.board(window, period.label, scope))
        hist = self.index(names.histogram(window, period.label, scope))
        points = self.index(names.points(window, period.label, scope))
        members = meta = 0
        named = definition.id if definition is not None else ""
        found = self.definitions.get(named)
        if found is None:
            fields = submit_record(definition) if definition is not None else game_record(self.config)
            found = self.definitions[named] = (len(self.definitions) + 1, fields)
        if definition is not None:
            members = self.index(names.members(window, period.label, scope))
            meta = self.index(names.metadata(window, period.label, scope))
        record = (key, slot[0], op, scope, hist, points, found[0], members, meta)
        return record, BoardRef(window, period.label, scope)

    def head(self, now: int, rows: bool, announce: str, replay: bool) -> list[str | int]:
        """ARGV up to the submission count: the call's settings, the periods, the layouts."""
        config, names = self.config, self.names
        head: list[str | int] = [
            SUBMIT_LAYOUT,
            now,
            config.activity_maxlen,
            config.clock_skew_ms,
            self.idem_ms,
            announce,
            int(rows),
            0 if replay else config.max_scopes,
            len(self.periods),
        ]
        for (*_, scope), (_, period, definition) in self.periods.items():
            w, game = period.window, definition is None or definition is self.default
            entrants = self.index(names.entrants(w.tournament)) if w.tournament is not None else 0
            # a replay of history was applied before any close: its closed periods take it again
            closed = 0 if replay else self.index(names.closed_marker(w.name, period.label, scope or None))
            head += [
                w.name,
                period.label,
                period.start_ms,
                period.end_ms,
                w.shift if definition is None else definition.shift(w.name),
                w.unit_ms,
                period.expire_at_s,
                self.index(names.players(w.name, period.label)),
                entrants,
                definition.rank_mode if definition is not None and not game else config.rank_mode_for(w.name),
                closed,
            ]
        head.append(len(self.definitions))
        for _, record in self.definitions.values():
            head += record
        return [*head, len(self._layouts), *self.args]


def valid_tournament(tournament: str) -> bool:
    try:
        check_tournament(tournament)
    except ValueError:
        return False
    return True


def encode_batch(
    config: GameConfig,
    entries: Sequence[Mapping[str, str]],
    now: int,
    *,
    rows: bool = True,
    tournaments: Mapping[str, Window] | None = None,
    announce: str | None = None,
    replay: bool = False,
    definitions: Mapping[str, boards.Definition] | None = None,
    default: boards.Definition | None = None,
) -> BatchPlan:
    """Lay out one lb_submit call. Only what naming the keys needs is checked here (timestamp,
    scopes, tournament); the library checks everything else inside its atomic call. ``rows=False``
    asks for each submission's status only, so the library neither builds per-board rows nor
    reads the rank of boards a submission did not change. ``tournaments`` holds the windows of
    the tournaments the entries name (a name missing from it is refused as unknown). ``announce``
    replaces the announcement channel (a rebuild replaying history must not announce it again).
    ``replay=True``: history applied before (a rebuild's replay), taken again whatever happened
    since: neither a closed period nor the scope cap refuses it. ``definitions`` holds the
    definitions of the defined boards the entries name (``board``; one missing is refused as
    unknown_board); such an entry carries ``values`` (its key values, decimal, joined by ',')
    and ``meta`` instead of ``points``. ``default``: the game's stored default when it is not of
    the environment's shape (``Definitions.general``): the game's slips are then its slips over
    the game's scopes (global, region, mode), with ``values`` and ``meta``, or their one key in
    ``points``; without it a game slip naming values or metadata is refused (wrong_key_count,
    metadata_too_large: the game's boards take points alone)."""
    layouts = _Layouts(config, default)
    idem_ms, latest_ok = layouts.idem_ms, now + config.clock_skew_ms
    body: list[str | int] = []
    plan: list[tuple[str, list[BoardRef]] | SubmitResult] = []
    # Batches arrive in time order: the previous entry's layout almost always fits the next
    # one, and then no period (calendar arithmetic) or key name is computed for it.
    last_scope: tuple[str | None, ...] = (None, None, None, None)
    refs: list[BoardRef] = []
    layout, lo, hi = 0, 0, 0
    too_old = now - idem_ms
    count = 0
    add, step = body.extend, plan.append
    plain = False  # the layout in hand is the game's own boards' (no scope, tournament or board)
    for fields in entries:
        get = fields.get
        slip = get(SLIP)
        if plain and slip is not None and len(fields) == 1:
            # Nearly every entry: a slip alone, in the span of the layout in hand. Passed on as it
            # came; anything else, or a time out of these bounds, takes the general path below.
            parts = slip.split("\t")
            if len(parts) == 5:
                raw_ts = parts[3]
                if 0 < len(raw_ts) <= 15 and raw_ts.isdigit() and raw_ts.isascii():
                    ts = int(raw_ts)
                    if lo <= ts < hi and too_old <= ts <= latest_ok:
                        add((layout, slip))
                        count += 1
                        step((parts[0], refs))
                        continue
        if slip is None:  # fields by name: an earlier release's entry, a caller's mapping
            sub_id, player, points, raw_ts, name = (get(k, "") for k in SLIP_PARTS)
            slip = f"{sub_id}\t{player}\t{points}\t{raw_ts}\t{name}"
        else:
            parts = slip.split("\t")
            sub_id, player, points, raw_ts, name = parts if len(parts) == 5 else slip_parts(slip)
        if len(fields) == 1 and SLIP in fields:  # a slip alone the fast path above did not take
            region = mode = tournament = board = None
            common = True
        else:
            region, mode, tournament = get("region") or None, get("mode") or None, get("tournament") or None
            board = get("board") or None
            common = not (get("op") or get("outcome") or get("values") or get("meta"))
        try:
            # the common case, a stream entry's digits, without parse_uint's checks of other types
            if type(raw_ts) is str and 0 < len(raw_ts) <= 15 and raw_ts.isdigit() and raw_ts.isascii():
                ts = int(raw_ts)
            else:
                ts = parse_uint(raw_ts, "invalid_timestamp", 15)
            # checked here too (the library checks again) so periods are only computed for sane times
            if ts > latest_ok:
                raise InvalidSubmission("timestamp_in_future", CODES["timestamp_in_future"])
            if ts < too_old:
                raise InvalidSubmission("timestamp_too_old", CODES["timestamp_too_old"])
            if board is None and default is None and not common:
                if get("values"):
                    raise InvalidSubmission("wrong_key_count", "the game's boards take points, not key values")
                if get("meta"):
                    raise InvalidSubmission("metadata_too_large", "the game's boards keep no metadata")
            if not lo <= ts < hi or (region, mode, tournament, board) != last_scope:
                spec, definition = None, None
                if board is not None:
                    definition = (definitions or {}).get(board)
                    if definition is None:
                        raise InvalidSubmission("unknown_board", f"no board {board!r}"[:120])
                if tournament is not None:
                    if not valid_tournament(tournament):  # the same code as Submission's
                        raise InvalidSubmission("invalid_tournament", CODES["invalid_tournament"])
                    spec = (tournaments or {}).get(tournament)
                    if spec is None:
                        raise InvalidSubmission("unknown_tournament", f"no tournament {tournament!r}"[:120])
                    held = definition or default  # the board the tournament runs on keeps its encoding
                    if held is not None:
                        try:
                            held.check_tournament()
                        except InvalidBoard as exc:
                            raise InvalidSubmission(exc.code, exc.message[:120]) from None
                scopes = (
                    boards.board_scopes(definition, region, mode) if definition is not None else scopes_of(region, mode)
                )
                layout, refs, lo, hi = layouts.layout_for(ts, scopes, spec, definition)
                last_scope = (region, mode, tournament, board)
                plain = last_scope == (None, None, None, None)
        except InvalidSubmission as exc:
            step(SubmitResult(sub_id, "error", code=exc.code, message=exc.message))
            continue
        if common and slip.count("\t") == 4:  # the slip as it came: SLIP_PARTS, no tab inside one
            add((layout, slip))
        else:  # FULL_FIELDS
            add((layout, "", sub_id, player, points, get("op", ""), ts, name))
            add((get("outcome", ""), get("values", ""), get("meta", "")))
        count += 1
        step((sub_id, refs))
    head = layouts.head(now, rows, announce or layouts.names.announce_channel, replay)
    return BatchPlan(layouts.keys, [*head, count, *body], count, plan)


def decode_batch(plan: BatchPlan, replies: Sequence[Any], *, rows: bool = True, stamp: int = 0) -> list[SubmitResult]:
    """One result per entry. ``rows=False`` leaves out the per-board results: the scorer never
    looks at them, and building a dataclass per board cost as much as the rest of the decoding.
    ``stamp``: the call's ``applied_us`` (0: not asked for)."""
    results: list[SubmitResult] = []
    it = iter(replies)
    for item in plan.entries:
        if isinstance(item, SubmitResult):
            results.append(item)
            continue
        sub_id, refs = item
        reply = next(it)
        if reply == "ok":  # the status alone, a plain string (no rows asked)
            results.append(applied(sub_id, stamp))
            continue
        status = reply if reply == "duplicate" else reply[0]
        if status == "ok":
            per_board = (
                tuple(
                    BoardResult(ref, bool(row[0]), int(row[1]), int(row[2]) or None, int(row[3]))
                    for ref, row in zip(refs, reply[1], strict=True)
                )
                if len(reply) > 1
                else ()
            )
            results.append(SubmitResult(sub_id, "ok", per_board, applied_us=stamp))
        elif status == "duplicate":
            results.append(SubmitResult(sub_id, "duplicate", applied_us=stamp))
        else:
            results.append(SubmitResult(sub_id, "error", code=reply[1], message=reply[2]))
    return results


def outcome_rows(raw: str) -> tuple[BoardResult, ...]:
    """The per-board rows lb_submit kept for a submission with ``outcome`` set (JSON, as lb_status
    answers them), in the order of its boards."""
    return tuple(
        BoardResult(
            BoardRef(row["window"], row["period"], row["board"]),
            bool(row["improved"]),
            int(row["rank"]),
            int(row["previous_rank"]) or None,
            int(row["points"]),
        )
        for row in orjson.loads(raw)
    )
