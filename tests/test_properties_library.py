"""Property: random batches through lb_submit leave every board exactly as a plain model of the
rules says: personal bests, running totals and overwrites per window, ties to whoever got there
first, a replayed id changing nothing, a total past a window's limit refused as a whole; and
each submission's per-board rows (improved, rank, previous rank, points) and the top-N version
counters agree with it too.

Few players, points values and instants, so ties, duplicates and limits happen often. The model
takes the calendar (which period an instant falls in) from leaderboard.windows; every rule about
scores it writes out itself.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from itertools import pairwise
from typing import cast

import redis.asyncio as aioredis
from hypothesis import given
from hypothesis import strategies as st

from fleet.redis_server import RedisServer
from leaderboard import GameConfig, Leaderboard, connect
from leaderboard.windows import window

from .conftest import NOW, activity_events
from .properties import bounded

HOUR = 3_600_000
CLOCK = NOW + 3 * HOUR  # the server clock: every instant below is at most 38 h old
# Tuesday 10:00, the same second, the same minute, the next minute, later that day, Monday
# night (another day, same week) and Sunday night (another week, same month).
INSTANTS = [NOW, NOW + 1_000, NOW + 1_500, NOW + 59_000, NOW + 60_000, NOW + 2 * HOUR, NOW - 11 * HOUR, NOW - 35 * HOUR]
PLAYERS = ["ana", "ben", "cy", "dee"]
# The encoding per window, as docs/data-model.md gives it: bits for time, and the time unit.
SHIFT = {"daily": 17, "weekly": 20, "monthly": 22, "alltime": 26}
UNIT_MS = {"daily": 1000, "weekly": 1000, "monthly": 1000, "alltime": 60_000}
LIMIT = {name: 2 ** (53 - shift) - 1 for name, shift in SHIFT.items()}
# Small values tie often; the large ones sit at and past the all-time and monthly limits.
POINTS = [0, 1, 2, 5, LIMIT["alltime"], LIMIT["alltime"] + 1, LIMIT["monthly"] + 1]
OPERATORS = ["best", "incr", "set"]


@dataclass(frozen=True)
class Slip:
    id: str
    player: str
    points: int
    ts: int
    op: str | None
    region: str | None
    mode: str | None

    def fields(self) -> dict[str, str]:
        out = {"id": self.id, "player": self.player, "points": str(self.points), "ts": str(self.ts)}
        for key in ("op", "region", "mode"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        return out


slips = st.builds(
    Slip,
    id=st.sampled_from([f"s{i}" for i in range(12)]),  # few ids: the same id comes back with other content
    player=st.sampled_from(PLAYERS),
    points=st.sampled_from(POINTS),
    ts=st.sampled_from(INSTANTS),
    op=st.sampled_from([None, None, *OPERATORS]),
    region=st.sampled_from([None, "eu", "us"]),
    mode=st.sampled_from([None, "duel"]),
)


@st.composite
def histories(draw: st.DrawFn) -> list[Slip]:
    """Slips, some of them earlier ones sent again as they were (a retried delivery)."""
    out: list[Slip] = []
    for _ in range(draw(st.integers(1, 40))):
        if out and draw(st.integers(0, 4)) == 0:
            out.append(out[draw(st.integers(0, len(out) - 1))])
        else:
            out.append(draw(slips))
    return out


@st.composite
def configs(draw: st.DrawFn) -> GameConfig:
    windows = draw(st.lists(st.sampled_from(list(SHIFT)), min_size=1, max_size=4, unique=True))
    per_window = draw(st.dictionaries(st.sampled_from(windows), st.sampled_from(OPERATORS)))
    return GameConfig(
        game="prop",
        windows=tuple(windows),
        operator=draw(st.sampled_from(OPERATORS)),
        window_operators=per_window,
        top_n=draw(st.sampled_from([1, 2, 3, 10])),  # small tops: writes land in, out of and below them
    )


Board = tuple[str, str, str]  # window, period label, scope
Standing = tuple[int, int]  # points, time unit reached (since the period's start)


# One board's row of a submit result: improved, rank after, rank before (None: not on it), points.
Row = tuple[bool, int, int | None, int]


class Model:
    """The rules, applied one slip at a time."""

    def __init__(self, config: GameConfig) -> None:
        self.config = config
        self.boards: dict[Board, dict[str, Standing]] = {}
        self.seen: set[tuple[str, int]] = set()  # ids are remembered per hour of their timestamp
        self.versions: dict[str, int] = {}  # "<window>:<period>:<scope>" -> writes that moved the top N

    def submit(self, slip: Slip) -> tuple[str, list[Row]]:
        """The slip's status and its rows, one per board in the library's order."""
        if (slip.id, slip.ts // HOUR) in self.seen:
            return "duplicate", []
        scopes = ["global"] + [f"{kind}:{v}" for kind, v in (("region", slip.region), ("mode", slip.mode)) if v]
        writes: list[tuple[Board, Standing | None]] = []
        for name in self.config.windows:
            period = window(name).period(slip.ts)
            t = (slip.ts - period.start_ms) // UNIT_MS[name]
            op = slip.op or self.config.operator_for(name)
            for scope in scopes:
                board = (name, period.label, scope)
                old = self.boards.get(board, {}).get(slip.player)
                new = self._apply(op, old, slip.points, t)
                if new is not None and new[0] > LIMIT[name]:
                    return "points_out_of_range", []  # refused as a whole: nothing below happens
                writes.append((board, new))
        self.seen.add((slip.id, slip.ts // HOUR))
        return "ok", [self._write(board, slip.player, new) for board, new in writes]

    def _write(self, board: Board, player: str, new: Standing | None) -> Row:
        entries = self.boards.setdefault(board, {})
        old = entries.get(player)
        before = self.rank(board, player)
        if new is None:
            assert old is not None and before is not None
            return (False, before, before, old[0])
        entries[player] = new
        after = self.rank(board, player)
        assert after is not None
        top_n = self.config.top_n
        if (before is not None and before <= top_n) or after <= top_n:  # entered, moved in or left the top N
            label = ":".join(board)
            self.versions[label] = self.versions.get(label, 0) + 1
        improved = old is None or (new[0], -new[1]) > (old[0], -old[1])
        return (improved, after, before, new[0])

    def rank(self, board: Board, player: str) -> int | None:
        players = [row[0] for row in self.standings(board)]
        return players.index(player) + 1 if player in players else None

    @staticmethod
    def _apply(op: str, old: Standing | None, points: int, t: int) -> Standing | None:
        """The player's new standing, or None when it stays as it was."""
        if op == "best":
            # higher points win; equal points reached earlier win too (ties go to the first)
            return (points, t) if old is None or (points, -t) > (old[0], -old[1]) else None
        if op == "incr":
            if old is None:
                return (points, t)
            return None if points == 0 else (old[0] + points, t)  # +0 keeps when the total was reached
        return None if old == (points, t) else (points, t)  # set: the same score again is no write

    def standings(self, board: Board) -> list[tuple[str, int, int]]:
        """The board as ZRANGE REV lists it: points down, earlier first, then player id down."""
        rows = sorted(self.boards[board].items(), key=lambda item: item[0], reverse=True)
        rows.sort(key=lambda item: (-item[1][0], item[1][1]))
        return [(player, points, t) for player, (points, t) in rows]


async def redis_standings(r: aioredis.Redis, key: str, name: str) -> list[tuple[str, int, int]]:
    shift = SHIFT[name]
    out = []
    flat = cast(list[tuple[str, float]], await r.zrange(key, 0, -1, desc=True, withscores=True))
    for player, score in flat:
        packed = int(score)
        assert packed == score, f"{key} {player}: score {score} is not an exact integer"
        out.append((player, packed >> shift, (1 << shift) - 1 - (packed & ((1 << shift) - 1))))
    return out


async def check_history(
    r: aioredis.Redis, config: GameConfig, history: list[Slip], cuts: list[int], rows: list[bool]
) -> None:
    await r.flushall()  # keys only: the function library stays loaded
    lb, model = Leaderboard(r, config), Model(config)
    expected = [model.submit(slip) for slip in history]
    got: list[tuple[str, list[Row]]] = []
    bounds = sorted({0, len(history), *(c % (len(history) + 1) for c in cuts)})
    for i, (lo, hi) in enumerate(pairwise(bounds)):
        with_rows = rows[i % len(rows)]
        results = await lb.submit_batch([slip.fields() for slip in history[lo:hi]], now=CLOCK, rows=with_rows)
        for res, (_, want) in zip(results, expected[lo:hi], strict=True):
            status = res.status if res.status != "error" else str(res.code)
            got.append(
                (status, [(b.improved, b.rank, b.previous_rank, b.best) for b in res.boards] if with_rows else want)
            )
    assert got == expected, [(s.fields(), g, e) for s, g, e in zip(history, got, expected, strict=True) if g != e]

    keys = config.keys
    actual_boards = {key async for key in r.scan_iter(match=keys.board("*", "*", "*"))}
    assert actual_boards == {keys.board(*board) for board in model.boards}
    for board in model.boards:
        got_rows, want_rows = await redis_standings(r, keys.board(*board), board[0]), model.standings(board)
        assert got_rows == want_rows, (board, got_rows, want_rows)
    assert len(await activity_events(r, keys.activity)) == sum(status == "ok" for status, _ in expected)
    assert {k: int(v) for k, v in (await r.hgetall(keys.versions)).items()} == model.versions


def test_batches_leave_every_board_as_the_model_says(redis_server: RedisServer) -> None:
    with asyncio.Runner() as runner:
        r = connect(redis_server.url)
        assert isinstance(r, aioredis.Redis)

        @bounded(120)
        @given(
            configs(),
            histories(),
            st.lists(st.integers(0, 40), max_size=5),
            st.lists(st.booleans(), min_size=1, max_size=3),
        )
        def check(config: GameConfig, history: list[Slip], cuts: list[int], rows: list[bool]) -> None:
            runner.run(check_history(r, config, history, cuts, rows))

        try:
            check()
        finally:
            runner.run(r.aclose())
