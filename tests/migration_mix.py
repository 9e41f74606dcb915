"""A realistic mix of writes and every read of it, written against the wrappers' API that this
release and commit 7e58782 share, so that the same code drives either: test_migration.py runs it
in a process of its own on that commit's tree (``python tests/migration_mix.py URL STORE`` with
that tree first on the path: its packages, its function library, its call layouts) and imports
it here for this release's.

Every call is made at a pinned clock (``pinned``), so two Redis servers written by the same
phases hold the same entries, timestamps and expiry times, and every read is compared as
``plain`` data (dataclasses as dicts; what Redis stamps by its own clock, stream ids, left out).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import json
import sys
from collections.abc import Iterator
from typing import Any, cast

from leaderboard import GameConfig, Leaderboard, RedisClient, Submission, boards, connect, transport
from leaderboard.moderation import Moderation
from leaderboard.profiles import Profile
from scorer import Consumer, ScorerSettings
from scorer.durable import Store, open_store
from scorer.durable.recorder import Recorder
from scorer.journal import JournalWorker

HOUR = 3_600_000
DAY = 24 * HOUR
NOW = int(dt.datetime(2030, 11, 26, 10, 0, tzinfo=dt.UTC).timestamp() * 1000)  # tests/conftest.py's
I64_MIN, I64_MAX = -(2**63), 2**63 - 1
CONFIG = GameConfig(
    game="mig",
    windows=("daily", "weekly", "alltime"),
    window_operators={"alltime": "incr"},
    window_rank_modes={"weekly": "competition", "alltime": "dense"},
)
SCOPES = ("global", "region:eu", "region:na", "mode:duo")
PLAYERS = [f"p{i}" for i in range(10)]
CUP = "cup"
# Defined boards of each encoding: packed one-key (asc, metadata), lex two-key (asc second key,
# metadata; bounded, so this release would pack it new: it stays lex, as 7e58782 created it),
# packed with tie last, lex over the whole int64 range (incr).
DEFINITIONS: list[dict[str, Any]] = [
    {
        "id": "speedrun",
        "keys": [{"name": "ms", "direction": "asc", "min": 0, "max": 3_600_000, "display": "duration_ms"}],
        "metadata_bytes": 16,
        "windows": ["daily", "alltime"],
        "rank_mode": "competition",
    },
    {
        "id": "tower",
        "keys": [
            {"name": "floor", "min": 0, "max": 1000},
            {"name": "time", "direction": "asc", "min": 0, "max": 100_000},
        ],
        "windows": ["daily", "alltime"],
        "metadata_bytes": 16,
    },
    {"id": "lap", "keys": [{"name": "laps", "min": 0, "max": 100}], "tie": "last", "windows": ["daily"]},
    {"id": "ledger", "keys": [{"name": "balance"}], "operator": "incr", "windows": ["alltime"]},
]


@contextlib.contextmanager
def pinned(ms: int) -> Iterator[None]:
    """Every ``now_ms`` the wrappers and the scorer call, at ``ms``: a close's time, a ban's,
    the queue's and the scorer's clocks (each module imported its own name of it)."""
    real = transport.now_ms
    found = [
        (module, name)
        for module_name, module in list(sys.modules.items())
        if module_name.split(".")[0] in ("leaderboard", "scorer")
        for name in ("now_ms",)
        if getattr(module, name, None) is real
    ]
    for module, name in found:
        setattr(module, name, lambda: ms)
    try:
        yield
    finally:
        for module, name in found:
            setattr(module, name, real)


def _settings(redis_url: str) -> ScorerSettings:
    return ScorerSettings(
        redis_url=redis_url,
        game=CONFIG,
        name="m1",
        batch=16,
        block_ms=20,
        concurrency=1,
        metrics_port=0,
        durable_url="sqlite:///x",
    )


def _recorder(store: Store) -> Recorder:
    return Recorder(store, CONFIG, retention_days=30, compact_every_s=0)


async def _apply(r: RedisClient, redis_url: str, store: Store, subs: list[Submission], clock: int) -> None:
    """Queued, then applied by the real scorer with the durable log on, its clock at ``clock``."""
    with pinned(clock):
        await Leaderboard(r, CONFIG).enqueue([sub.fields() for sub in subs], backlog_max=10_000)
        consumer = Consumer(r, _settings(redis_url), now=lambda: clock, recorder=_recorder(store))
        await asyncio.wait_for(consumer.run(burst=True), 30)


async def _journal(r: RedisClient, redis_url: str, store: Store) -> None:
    """The actions journaled so far recorded in the durable log, before the slips that follow."""
    worker = JournalWorker(r, _settings(redis_url), _recorder(store))
    await asyncio.wait_for(worker.run(burst=True), 30)


def _slips(prefix: str, start: int, hours: int, count: int, seed: int) -> list[Submission]:
    """``count`` slips over ``hours`` from ``start``: the game's boards in every scope, each
    defined board, the tournament; few players and values, so that entries meet and tie."""
    out: list[Submission] = []
    for i in range(count):
        x = (i * 7919 + seed * 104_729) % 1_000_003  # deterministic, the same in either release
        ts, player = start + i * hours * HOUR // count, PLAYERS[x % len(PLAYERS)]
        kind = x % 9
        sid = f"{prefix}{i}"
        name = f"Name {player}" if x % 5 == 0 else None
        if kind <= 2:
            region, mode = (("eu", "na", None)[x % 3], ("duo", None)[x % 2])
            out.append(Submission(sid, player, 10 + x % 40, ts, name=name, region=region, mode=mode))
        elif kind == 3:
            out.append(Submission(sid, player, 5 + x % 30, ts, tournament=CUP))
        elif kind == 4:
            meta = f"car-{x % 4}" if x % 2 else None
            out.append(Submission(sid, player, 0, ts, board="speedrun", values=(59_000 + 500 * (x % 4),), meta=meta))
        elif kind == 5:
            values = (5 + x % 3, (60_000, 61_000, 75_500)[x % 3])
            meta = f"run-{x % 3}" if x % 2 else None
            out.append(Submission(sid, player, 0, ts, board="tower", values=values, meta=meta))
        elif kind == 6:
            out.append(Submission(sid, player, 0, ts, board="lap", values=(x % 4,)))
        elif kind == 7:
            balance = (I64_MIN // 4, I64_MAX // 4, -3, 7, 0)[x % 5]
            out.append(Submission(sid, player, 0, ts, board="ledger", values=(balance,)))
        else:
            out.append(Submission(sid, player, 20 + x % 20, ts, op="set" if x % 2 else None, region="eu"))
    return out


def _as_created_by_release(raw: dict[str, Any]) -> dict[str, Any]:
    """A definition as 7e58782 created it: that release packed one key only, so this release (which
    packs a new board wherever its keys fit, and keeps a stored board's encoding) asks for lex where
    7e58782 gave it; 7e58782 knows no ``encoding`` field."""
    if hasattr(boards, "created") and len(raw["keys"]) > 1:
        return {**raw, "encoding": "lex"}
    return raw


async def _close_defined(lb: Leaderboard, board: Any) -> str | None:
    """A defined board's period closed: the one wrapper the two releases spell apart (7e58782's
    ``close_board``; this release's ``close`` of the board's scope with its definition)."""
    old = getattr(lb, "close_board", None)
    if old is not None:
        return cast(str | None, await old(board, top_n=5, keep=4, maxlen=100))
    return await lb.close(board.period, [board.scope], top_n=5, keep=4, maxlen=100, definition=board.definition)


async def write(r: RedisClient, redis_url: str, store: Store) -> dict[str, Any]:
    """The data a release in service holds: two days of slips on every board, the tournament's
    entries, a closed day (the game's boards and a defined board's), a ban, corrections of the
    game's and a defined board, profiles. What the calls answered, for comparison."""
    lb, mod = Leaderboard(r, CONFIG), Moderation(Leaderboard(r, CONFIG))
    answers: dict[str, Any] = {}
    with pinned(NOW - 2 * DAY):
        for raw in DEFINITIONS:
            await lb.create_board(boards.parse(_as_created_by_release(raw)))
        await lb.create_tournament(CUP, NOW - 2 * DAY, NOW + 2 * DAY)
        answers["joined"] = await lb.join(CUP, PLAYERS[:7])
    await _journal(r, redis_url, store)
    await _apply(r, redis_url, store, _slips("a", NOW - 26 * HOUR, 10, 90, 1), NOW - 16 * HOUR)
    with pinned(NOW - 9 * HOUR):
        # yesterday closed: the game's boards in each scope, a defined board's own period
        period = CONFIG.window_specs[0].period(NOW - DAY)
        answers["closed"] = await lb.close(period, list(SCOPES), top_n=5, keep=4, maxlen=100) is not None
        board = await lb.defined_board("daily", "board:tower", NOW - DAY)
        assert board is not None
        answers["closed_board"] = await _close_defined(lb, board) is not None
    await _journal(r, redis_url, store)  # the close
    await _apply(r, redis_url, store, _slips("b", NOW - 8 * HOUR, 7, 90, 2), NOW - 60_000)
    with pinned(NOW - 30_000):
        answers["ban"] = plain(await mod.ban(PLAYERS[9], actor="ops", reason="cheating"))
        answers["correct"] = plain(await mod.correct(PLAYERS[1], 7, actor="ops", reason="appeal", window_name="daily"))
        answers["correct_defined"] = plain(
            await mod.correct(PLAYERS[2], actor="ops", reason="video", scopes=["board:tower"], values=[9, 58_000])
        )
        answers["profile"] = await mod.set_profile(
            PLAYERS[3], Profile.parse({"avatar": "https://example.com/fox.png", "country": "FR"})
        )
    await _journal(r, redis_url, store)
    return answers


async def more(r: RedisClient, redis_url: str, store: Store) -> dict[str, Any]:
    """What happens after an upgrade: more slips (the banned player's refused), a ban of a player
    on every kind of board, a correction of each kind, an unban, a name change."""
    mod = Moderation(Leaderboard(r, CONFIG))
    answers: dict[str, Any] = {}
    await _apply(r, redis_url, store, _slips("c", NOW - 50 * 60_000, 1, 60, 3), NOW)
    with pinned(NOW + 1_000):
        answers["ban"] = plain(await mod.ban(PLAYERS[4], actor="ops", reason="bot"))
        answers["unban"] = await mod.unban(PLAYERS[9], actor="ops")
        answers["correct"] = plain(await mod.correct(PLAYERS[5], 3, actor="ops", reason="r", window_name="weekly"))
        answers["correct_defined"] = plain(
            await mod.correct(PLAYERS[6], actor="ops", reason="r", scopes=["board:speedrun"], values=[1_000])
        )
        answers["remove_defined"] = plain(
            await mod.correct(PLAYERS[7], actor="ops", reason="r", scopes=["board:ledger"], remove=True)
        )
        answers["profile"] = await mod.set_profile(PLAYERS[8], Profile.parse({"name": "Eighth"}))
    await _journal(r, redis_url, store)
    await _apply(r, redis_url, store, _slips("d", NOW + 2_000, 1, 30, 4), NOW + HOUR)
    return answers


async def reads(r: RedisClient) -> dict[str, Any]:
    """Every read of every board the mix wrote, an hour after NOW: top, around, ranks (with
    profiles and percentiles), a deep rank (estimated where the board estimates), stats, the
    previous periods, finals (less their close events' ids, stamped by Redis's clock), bans."""
    lb, mod = Leaderboard(r, CONFIG), Moderation(Leaderboard(r, CONFIG))
    at = NOW + HOUR
    boards_read: list[tuple[str, str, str | None]] = [(w, s, None) for w in CONFIG.windows for s in SCOPES]
    boards_read += [("daily", s, "previous") for s in SCOPES]
    boards_read += [(f"t-{CUP}", "global", None)]
    for raw in DEFINITIONS:
        boards_read += [(w, f"board:{raw['id']}", None) for w in raw["windows"]]
        boards_read += [("daily", f"board:{raw['id']}", "previous")] if "daily" in raw["windows"] else []
    out: dict[str, Any] = {}
    with pinned(at):
        for window, scope, period in boards_read:
            name = f"{window}/{scope}/{period or 'current'}"
            out[f"{name}/top"] = plain(await lb.top(window, scope, n=50, at=at, period=period))
            out[f"{name}/ranks"] = plain(await lb.ranks(PLAYERS, window, scope, at=at, period=period, profiles=True))
            out[f"{name}/around"] = plain(await lb.around(PLAYERS[0], window, scope, k=2, at=at, period=period))
            out[f"{name}/deep"] = plain(await lb.rank(PLAYERS[2], window, scope, at=at, period=period, deep_from=2))
            out[f"{name}/stats"] = plain(await lb.stats(window, scope, at=at, period=period))
        finals: list[tuple[str, str | None]] = [("daily", None)]
        finals += [(w, f"board:{d['id']}") for d in DEFINITIONS for w in d["windows"]]
        for window, kept in finals:
            out[f"finals/{window}/{kept}"] = [
                {k: v for k, v in final.items() if k not in ("id", "event")}
                for final in await lb.finals(window, 5, kept)
            ]
        out["banned"] = {p: await mod.banned(p) for p in PLAYERS}
    return out


def across_releases(answers: dict[str, Any]) -> dict[str, Any]:
    """The reads both releases answer alike: all but a defined board's deep rank, which 7e58782
    rounded from the exact rank and this release estimates from the board's histogram, as the
    game's boards always did (compared between this release's reads only)."""
    return {name: read for name, read in answers.items() if not ("/board:" in name and name.endswith("/deep"))}


def plain(value: Any) -> Any:
    """``value`` as JSON would carry it: dataclasses as dicts, tuples as lists."""
    return json.loads(json.dumps(_plain(value), default=repr))


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


async def _main(redis_url: str, store_url: str) -> None:
    """The mix written by this tree's code and library (loaded by the first call), its reads on
    stdout as JSON."""
    r = connect(redis_url)
    store = open_store(store_url)
    await store.open()
    try:
        await Leaderboard(r, CONFIG).load()
        answers = await write(r, redis_url, store)
        json.dump({"answers": answers, "reads": await reads(r)}, sys.stdout)
    finally:
        await store.close()
        await r.aclose()


if __name__ == "__main__":
    asyncio.run(_main(sys.argv[1], sys.argv[2]))
