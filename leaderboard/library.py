"""Typed Python wrappers of the function library (leaderboard/lua/leaderboard.lua), one per function.

The wrappers turn replies into dataclasses and ``ERR <code>`` replies into the exception tree of
errors.py. They take a ``redis.asyncio.Redis`` created with ``decode_responses=True`` (and,
so that a non-UTF-8 byte never poisons a whole batch, ``encoding_errors="surrogateescape"``;
see ``connect()``)::

    lb = Leaderboard(await connect(url), GameConfig(game="arena"))
    await lb.load()
    [result] = await lb.submit_batch([Submission("m-1", "mia", 120, now_ms).fields()])
    top = await lb.top("weekly")
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib.resources import files
from typing import Any, cast

import hiredis
import orjson
import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from .config import GameConfig
from .errors import CODES, BadRequest, InvalidSubmission
from .keys import parse_scope
from .submission import parse_uint, scopes_of
from .windows import Period, window

_HOUR_MS = 3_600_000


def library_code() -> str:
    """The function library's source: package data, so an installed wheel has it too."""
    return files("leaderboard").joinpath("lua", "leaderboard.lua").read_text(encoding="utf-8")


def connect(url: str, **kwargs: Any) -> aioredis.Redis:
    """A client as the wrappers expect it: str replies, undecodable bytes kept, not raised."""
    return aioredis.Redis.from_url(url, decode_responses=True, encoding_errors="surrogateescape", **kwargs)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


Command = Sequence[str | int]


async def execute_packed(redis: aioredis.Redis, *commands: Command) -> list[Any]:
    """Send ``commands`` packed by hiredis in C, pipelined on one pooled connection; one reply
    each, and the first error reply raised once every reply has been read.

    For the hot paths that send thousands of arguments per call (a batch FCALL carries about
    twenty per submission, an enqueue eight, an acknowledgement one per entry): redis-py's
    asyncio client packs each argument in Python, which was the largest cost of those calls."""
    packed = b"".join(_pack(command) for command in commands)
    pool = redis.connection_pool
    conn = await pool.get_connection()  # type: ignore[no-untyped-call]
    try:
        await conn.send_packed_command(packed, check_health=False)
        replies: list[Any] = []
        error: ResponseError | None = None
        for _ in commands:
            try:
                replies.append(await conn.read_response())
            except ResponseError as exc:  # read on: the connection must end in step with Redis
                error = error or exc
                replies.append(exc)
        if error is not None:
            raise error
        return replies
    except BaseException as exc:
        if not isinstance(exc, ResponseError):
            # A reply may still be in flight on this connection: never reuse it.
            await conn.disconnect()
        raise
    finally:
        await pool.release(conn)


def _pack(command: Command) -> bytes:
    try:
        return cast(bytes, hiredis.pack_command(tuple(command)))  # type: ignore[arg-type]  # stub: 1-tuple
    except UnicodeEncodeError:
        # Undecodable bytes kept as surrogates (see connect()): send back the original bytes.
        raw = tuple(a.encode("utf-8", "surrogateescape") if isinstance(a, str) else a for a in command)
        return cast(bytes, hiredis.pack_command(raw))  # type: ignore[arg-type]


# ---------------------------------------------------------------- replies as dataclasses


@dataclass(frozen=True, slots=True)
class BoardRef:
    """One board of one period, e.g. weekly 2026-W48 region:eu."""

    window: str
    period: str
    scope: str


@dataclass(frozen=True, slots=True)
class BoardResult:
    board: BoardRef
    improved: bool
    rank: int  # 1-based, after this submission
    previous_rank: int | None  # None: the player was not on this board before
    best: int  # the player's points on this board after this submission


@dataclass(frozen=True, slots=True)
class SubmitResult:
    """``status`` is ``ok``, ``duplicate`` or ``error`` (then ``code`` and ``message`` are set)."""

    id: str
    status: str
    boards: tuple[BoardResult, ...] = ()
    code: str | None = None
    message: str | None = None

    @property
    def improved(self) -> bool:
        return any(b.improved for b in self.boards)


@dataclass(frozen=True, slots=True)
class Entry:
    rank: int
    player: str
    score: int
    profile: Mapping[str, Any] | None = None

    @property
    def name(self) -> str | None:
        name = self.profile.get("name") if self.profile else None
        return name if isinstance(name, str) else None


@dataclass(frozen=True, slots=True)
class Standing:
    """A player's place on a board; ``rank`` and ``score`` are None when unranked."""

    player: str
    rank: int | None
    score: int | None


# ---------------------------------------------------------------- batch encoding (pure)


@dataclass(slots=True)
class _BatchPlan:
    keys: list[str]
    args: list[str | int]
    count: int  # submissions sent to the library
    # per entry: the boards sent to Lua, or a result decided before the call (a local refusal)
    entries: list[tuple[str, list[BoardRef]] | SubmitResult]


def encode_batch(
    config: GameConfig, entries: Sequence[Mapping[str, str]], now: int, *, rows: bool = True
) -> _BatchPlan:
    """Lay out one lb_submit call. Only what naming the keys needs is checked here (timestamp,
    scopes); the library checks everything else inside its atomic call. ``rows=False`` asks for
    each submission's status only, so the library neither builds per-board rows nor reads the rank
    of boards a submission did not change."""
    names = config.keys
    keys = [names.versions, names.activity, names.profiles]
    key_index: dict[str, int] = {}

    def index(key: str) -> int:
        if key not in key_index:
            keys.append(key)
            key_index[key] = len(keys)
        return key_index[key]

    periods: dict[tuple[str, str], tuple[int, Period]] = {}
    specs = [(spec, config.operator_for(spec.name)) for spec in config.window_specs]
    seen_boards: dict[tuple[str, str, str], tuple[int, int, str, str, BoardRef]] = {}
    # A layout is what a submission's writes are laid out on: its boards and its seen-id bucket.
    # Nearly every submission of a batch shares one, so it is sent once, not once per submission.
    layouts: dict[tuple[tuple[int, ...], int], int] = {}
    layout_args: list[str | int] = []
    idem_ms = config.idempotency_s * 1000

    def layout_for(ts: int, scopes: list[str]) -> tuple[int, list[BoardRef], int, int]:
        """The layout of a submission at ``ts`` on ``scopes``, its boards, and the time span
        [lo, hi) over which it stays the same (every period and the seen-id hour)."""
        hour = ts // _HOUR_MS
        lo, hi = hour * _HOUR_MS, (hour + 1) * _HOUR_MS
        refs: list[tuple[int, int, str, str, BoardRef]] = []
        for spec, op in specs:
            period = spec.period(ts)
            lo, hi = max(lo, period.start_ms), min(hi, period.end_ms)
            for scope in scopes:
                board = seen_boards.get((spec.name, period.label, scope))
                if board is None:
                    slot = periods.get((spec.name, period.label))
                    if slot is None:
                        slot = periods[spec.name, period.label] = (len(periods) + 1, period)
                    key = names.board(spec.name, period.label, scope)
                    ref = BoardRef(spec.name, period.label, scope)
                    board = seen_boards[spec.name, period.label, scope] = (index(key), slot[0], op, scope, ref)
                refs.append(board)
        seen = index(names.seen(hour))
        shape = (tuple(board[0] for board in refs), seen)
        layout = layouts.get(shape)
        if layout is None:
            layout = layouts[shape] = len(layouts) + 1
            layout_args.extend((seen, ((hour + 1) * _HOUR_MS + idem_ms) // 1000, len(refs)))
            for board in refs:
                layout_args.extend(board[:4])
        return layout, [board[4] for board in refs], lo, hi

    body: list[str | int] = []
    count = 0
    plan: list[tuple[str, list[BoardRef]] | SubmitResult] = []
    # Batches arrive in time order: the previous entry's layout almost always fits the next
    # one, and then no period (calendar arithmetic) or key name is computed for it.
    last_scope: tuple[str | None, str | None] = (None, None)
    boards: list[BoardRef] = []
    layout, lo, hi = 0, 0, 0
    for fields in entries:
        sub_id = fields.get("id", "")
        region, mode = fields.get("region") or None, fields.get("mode") or None
        try:
            ts = parse_uint(fields.get("ts"), "invalid_timestamp", 15)
            # checked here too (the library checks again) so periods are only computed for sane times
            if ts > now + config.clock_skew_ms:
                raise InvalidSubmission("timestamp_in_future", CODES["timestamp_in_future"])
            if ts < now - idem_ms:
                raise InvalidSubmission("timestamp_too_old", CODES["timestamp_too_old"])
            if not lo <= ts < hi or (region, mode) != last_scope:
                layout, boards, lo, hi = layout_for(ts, scopes_of(region, mode))
                last_scope = (region, mode)
        except InvalidSubmission as exc:
            plan.append(SubmitResult(sub_id, "error", code=exc.code, message=exc.message))
            continue
        body += [sub_id, fields.get("player", ""), fields.get("points", ""), fields.get("op", ""),
                 ts, fields.get("name", ""), layout]  # fmt: skip
        count += 1
        plan.append((sub_id, boards))

    head: list[str | int] = [
        now, config.top_n, config.activity_maxlen, config.clock_skew_ms, idem_ms,
        names.announce_channel, int(rows), len(periods),
    ]  # fmt: skip
    for _, period in periods.values():
        w = period.window
        head += [w.name, period.label, period.start_ms, period.end_ms, w.shift, w.unit_ms,
                 period.expire_at_s, index(names.players(w.name, period.label))]  # fmt: skip
    head += [len(layouts), *layout_args]
    return _BatchPlan(keys, [*head, count, *body], count, plan)


def decode_batch(plan: _BatchPlan, replies: Sequence[Any], *, rows: bool = True) -> list[SubmitResult]:
    """One result per entry. ``rows=False`` leaves out the per-board results: the scorer never
    looks at them, and building a dataclass per board cost as much as the rest of the decoding."""
    results: list[SubmitResult] = []
    it = iter(replies)
    for item in plan.entries:
        if isinstance(item, SubmitResult):
            results.append(item)
            continue
        sub_id, boards = item
        reply = next(it)
        status = reply[0]
        if status == "ok":
            per_board = tuple(
                BoardResult(ref, bool(row[0]), int(row[1]), int(row[2]) or None, int(row[3]))
                for ref, row in zip(boards, reply[1], strict=True)
            ) if len(reply) > 1 else ()  # fmt: skip
            results.append(SubmitResult(sub_id, "ok", per_board))
        elif status == "duplicate":
            results.append(SubmitResult(sub_id, "duplicate"))
        else:
            results.append(SubmitResult(sub_id, "error", code=reply[1], message=reply[2]))
    return results


# ---------------------------------------------------------------- the wrappers


class Leaderboard:
    """One game's boards, reached through the function library."""

    def __init__(self, redis: aioredis.Redis, config: GameConfig) -> None:
        self.redis = redis
        self.config = config
        self.keys = config.keys

    async def load(self) -> None:
        """Load (or replace) the function library; idempotent."""
        await self.redis.function_load(library_code(), replace=True)

    # --- writes

    async def submit_batch(
        self, entries: Sequence[Mapping[str, str]], *, now: int | None = None, rows: bool = True
    ) -> list[SubmitResult]:
        """Apply submissions (stream-entry fields) in one atomic call; one result per entry
        (with per-board results unless ``rows=False``)."""
        if not entries:
            return []
        plan = encode_batch(self.config, entries, now_ms() if now is None else now, rows=rows)
        if plan.count == 0:  # every entry was refused before the call
            return decode_batch(plan, [])
        command = ("FCALL", "lb_submit", len(plan.keys), *plan.keys, *plan.args)
        try:
            [replies] = await execute_packed(self.redis, command)
        except ResponseError as exc:
            if "function not found" not in str(exc).lower():
                raise
            # Redis restarted without the library (no persistence): load it and go on.
            await self.load()
            [replies] = await execute_packed(self.redis, command)
        return decode_batch(plan, replies, rows=rows)

    # --- reads (read-only: safe on replicas through FCALL_RO)

    def _board(self, window_name: str, scope: str, at: int | None) -> tuple[str, Period]:
        try:
            spec = window(window_name)
            parse_scope(scope)
        except ValueError as exc:
            raise BadRequest(str(exc)) from None
        if window_name not in self.config.windows:
            raise BadRequest(f"window {window_name!r} is not kept for game {self.config.game!r}")
        period = spec.period(now_ms() if at is None else at)
        return self.keys.board(spec.name, period.label, scope), period

    async def _fcall_ro(self, name: str, keys: list[str], *args: str | int) -> Any:
        try:
            return await self.redis.fcall_ro(name, len(keys), *keys, *args)
        except ResponseError as exc:
            code, _, message = str(exc).partition(" ")
            if code == "bad_request":
                raise BadRequest(message) from None
            raise

    async def top(self, window_name: str, scope: str = "global", n: int = 10, *, at: int | None = None) -> list[Entry]:
        key, period = self._board(window_name, scope, at)
        flat = await self._fcall_ro("lb_top", [key, self.keys.profiles], n)
        return _entries(period, 1, flat)

    async def around(
        self, player: str, window_name: str, scope: str = "global", k: int = 5, *, at: int | None = None
    ) -> list[Entry]:
        key, period = self._board(window_name, scope, at)
        flat = await self._fcall_ro("lb_around", [key, self.keys.profiles], player, k)
        return _entries(period, int(flat[0]), flat[1:]) if flat else []

    async def ranks(
        self, players: Sequence[str], window_name: str, scope: str = "global", *, at: int | None = None
    ) -> tuple[int, list[Standing]]:
        """Board size and each player's standing, in the order given."""
        key, period = self._board(window_name, scope, at)
        flat = await self._fcall_ro("lb_ranks", [key], *players)
        unpack = period.window.unpack
        standings = [
            Standing(p, None if r is None else int(r), None if s is None else unpack(s))
            for p, r, s in zip(players, flat[1::2], flat[2::2], strict=True)
        ]
        return int(flat[0]), standings

    async def rank(self, player: str, window_name: str, scope: str = "global", *, at: int | None = None) -> Standing:
        _, [standing] = await self.ranks([player], window_name, scope, at=at)
        return standing

    async def size(self, window_name: str, scope: str = "global", *, at: int | None = None) -> int:
        key, _ = self._board(window_name, scope, at)
        return int(await self.redis.zcard(key))

    async def distinct_players(self, window_name: str, *, at: int | None = None) -> int:
        """Approximate distinct players of a window period (HyperLogLog, ~0.8% error).

        A plain PFCOUNT: Redis refuses it inside no-writes functions because it may cache the
        count, but it is allowed on replicas."""
        _, period = self._board(window_name, "global", at)
        return int(await self.redis.pfcount(self.keys.players(window_name, period.label)))

    async def feed(self, n: int = 20) -> list[dict[str, str]]:
        """The newest applied submissions, newest first."""
        rows = await self.redis.xrevrange(self.keys.activity, count=n)
        return [cast(dict[str, str], fields) for _, fields in rows or ()]

    async def set_profile(self, player: str, profile: Mapping[str, Any]) -> None:
        await self.redis.hset(self.keys.profiles, player, orjson.dumps(dict(profile)).decode())


def _entries(period: Period, first_rank: int, flat: Sequence[Any]) -> list[Entry]:
    unpack = period.window.unpack
    return [
        Entry(first_rank + i, flat[j], unpack(flat[j + 1]), _profile(flat[j + 2]))
        for i, j in enumerate(range(0, len(flat), 3))
    ]


def _profile(raw: str | None) -> Mapping[str, Any] | None:
    if raw is None:
        return None
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None
