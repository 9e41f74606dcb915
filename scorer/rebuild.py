"""``python -m scorer rebuild``: restore a game's boards from the durable score log into a Redis
that lost them (a failover that dropped writes, a wiped volume, a FLUSHALL).

What comes back: every board of every window period that has not expired, each member with its
exact packed score; the distinct-player counts (the same HyperLogLog registers: they depend only
on the set of players added); display names in the profiles; the idempotency memory (every id
whose seen-bucket would still be alive); the activity feed of the replayed part; the top-N
versions, so the publisher publishes every restored board. From the journaled actions
(``durable/actions.py``): the ban tombstones, what bans and corrections did to the boards,
profiles (name, avatar, country), tournaments with their entrants and boards, the close markers
and finals of closed periods, and badges. Not the close events' stream (``lb:{g}:closed``): its
consumers (rewards) already took them, and the restored markers keep the publisher from closing
those periods again.

How, in the order the submissions were applied (the log's ``applied, idx, seq``):

1. all but the newest part — the folded board rows, then the raw rows — is folded in Python
   (``durable/fold.py``, the function's rules) and written as final states: one ZADD per member
   instead of one call per submission, so a rebuild is not bounded by Redis's speed at running
   ``lb_submit``; the ids still inside the idempotency horizon are added to their seen buckets;
   then each board's rank companions (histogram, distinct points) are computed from its members.
   The fold is per player, so the players are cut into parts (``durable/base.py``: ``part_of``,
   which each backend also computes in SQL) and each part is read and folded by a worker process
   of its own (``workers``, two by default: reading and folding are Python, one core each), the
   journaled actions shared between them (``actions.shares``); their states add up;
2. the newest ``replay`` submissions (default: as many as the activity feed keeps) go through
   ``lb_submit`` itself, in batches, with their original timestamps, on top of that state: the
   same rules, and the activity feed comes back as it was; their announcements go to a channel
   nobody listens to (history is not news). Any of them timestamped outside the horizon (which
   ``lb_submit`` would refuse as too old) is folded instead;
3. the journaled actions are folded with step 1, in the same order (an ``ActionFolder``): the
   actions cannot be replayed through their functions (that would journal them again), so every
   submission applied before the newest ban, unban, correction or name change is folded, and
   step 2 replays only later ones. What the actions left beyond boards and names (and the
   actions whose order does not matter to the boards: tournaments, entrants, closes, badges,
   avatars, countries) is written as final state with the folded state.

A rebuild refuses a Redis that already holds data of the game unless ``force`` (then it writes
over it: folded states replace members, replayed ids already seen are duplicates). Run it with the
scorers stopped: a submission applied meanwhile could be overwritten by an older folded state.
"""

from __future__ import annotations

import asyncio
import contextlib
import pickle
import struct
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TextIO

from leaderboard import GameConfig, Leaderboard, now_ms
from leaderboard.keys import GLOBAL_SCOPE
from leaderboard.ranking import companions
from leaderboard.transport import Command, RedisClient, execute_packed
from leaderboard.windows import tournament_of, tournament_window
from leaderboard.windows import window as window_spec

from .durable import Record, Store, StoreError, open_store
from .durable import actions as journal
from .durable.actions import Action, ActionFolder
from .durable.base import PARTS, Part, Position

_HOUR_MS = 3_600_000
_CHUNK = 1_000  # members per ZADD / SADD / PFADD


class RebuildRefused(Exception):
    """The target Redis already holds data of the game (and ``force`` was not given)."""


@dataclass(slots=True)
class Restored:
    folded: int = 0  # submissions restored through the fold
    board_rows: int = 0  # folded board rows read from the store (older than the raw log)
    replayed: int = 0  # submissions sent through lb_submit
    applied: int = 0
    duplicates: int = 0
    refused: dict[str, int] = field(default_factory=dict)  # code -> count (lb_submit or the fold)
    boards: int = 0
    entries: int = 0  # board members written by the fold
    seen_ids: int = 0  # ids written to the idempotency memory by the fold
    names: int = 0
    tournament_slips: int = 0  # not restored: slips of a tournament whose definition is not in the log
    actions: int = 0  # journaled actions folded (bans, corrections, profiles, tournaments, closes)
    journal: dict[str, int] = field(default_factory=dict)  # what they restored beyond boards, by kind
    seconds: float = 0.0

    def lines(self) -> list[str]:
        total = self.folded + self.replayed
        rate = total / self.seconds if self.seconds else 0.0
        refused = ", ".join(f"{code} {n}" for code, n in sorted(self.refused.items())) or "none"
        return [
            f"restored {total:,} submissions in {self.seconds:.1f} s ({rate:,.0f}/s)",
            f"  folded: {self.folded:,} submissions and {self.board_rows:,} board rows into {self.boards:,} boards, "
            f"{self.entries:,} members, {self.names:,} names, {self.seen_ids:,} ids remembered",
            f"  through lb_submit: {self.replayed:,} ({self.applied:,} applied, {self.duplicates:,} duplicates)",
            f"  journal: {self.actions:,} actions folded; restored "
            + ", ".join(f"{n:,} {kind}" for kind, n in self.journal.items()),
            f"  refused: {refused}",
            *([f"  not restored: {self.tournament_slips:,} tournament submissions (their tournament's definition "
               "is not in the log: create it and its entrants again)"] if self.tournament_slips else []),
        ]  # fmt: skip


class Progress:
    """A progress bar on a terminal, a plain line per tenth elsewhere (logs, CI)."""

    def __init__(self, total: int, out: TextIO | None = None, *, what: str = "submissions") -> None:
        self.total = max(total, 1)
        self.out = out if out is not None else sys.stderr
        self.tty = self.out.isatty()
        self.what = what
        self.done = 0
        self.started = time.monotonic()
        self._next_tenth = 1

    def advance(self, n: int) -> None:
        self.done += n
        share = min(self.done / self.total, 1.0)
        rate = self.done / max(time.monotonic() - self.started, 1e-9)
        text = f"{share:4.0%} {self.done:,}/{self.total:,} {self.what}, {rate:,.0f}/s"
        if self.tty:
            bar = "#" * int(share * 30)
            self.out.write(f"\rrebuild [{bar:<30}] {text}")
            self.out.flush()
        elif share * 10 >= self._next_tenth:
            self._next_tenth = int(share * 10) + 1
            print(f"rebuild: {text}", file=self.out, flush=True)

    def finish(self) -> None:
        if self.tty:
            self.out.write("\n")
            self.out.flush()


# Keys a game keeps that are not state a rebuild restores: their presence does not make a Redis
# "non-empty" (a scorer started on the empty Redis creates the queue and its group at once).
def _operational(config: GameConfig) -> tuple[set[str], tuple[str, ...]]:
    k = config.keys
    exact = {k.submissions, k.queued, k.dead_letters, k.publish_lease, k.published, k.journal}
    return exact, (f"{k.prefix}:latest:", k.refused(0).removesuffix("0"))


async def existing_keys(redis: RedisClient, config: GameConfig, *, limit: int = 5) -> list[str]:
    """Up to ``limit`` keys of the game that a rebuild would write over."""
    exact, prefixes = _operational(config)
    found: list[str] = []
    async for key in redis.scan_iter(match=f"{config.keys.prefix}:*", count=1000):
        if key in exact or key.startswith(prefixes):
            continue
        found.append(key)
        if len(found) >= limit:
            break
    return found


async def rebuild(
    redis: RedisClient,
    store: Store,
    config: GameConfig,
    *,
    force: bool = False,
    batch: int = 1_000,
    replay: int | None = None,
    progress_to: TextIO | None = None,
    now: int | None = None,
    workers: int = 2,
) -> Restored:
    """``workers``: processes folding the log, each a part of the players (one of base.PARTS;
    1: folded in this one)."""
    if workers not in PARTS:
        raise ValueError(f"workers must be one of {', '.join(map(str, PARTS))}, got {workers}")
    started = time.monotonic()
    present = await existing_keys(redis, config)
    if present and not force:
        raise RebuildRefused(
            f"Redis already holds data of game {config.game!r} (e.g. {', '.join(present)}); "
            "rebuild into an empty one, or pass --force to write over it"
        )
    lb = Leaderboard(redis, config)
    await lb.load()
    now = now_ms() if now is None else now
    game = config.game
    idem_ms = config.idempotency_s * 1000
    # Folded: a prefix of the log in applied order, up to the last submission lb_submit would
    # refuse as too old, and at least all but the newest ``replay``.
    cut = await store.last_before(game, now - idem_ms)
    total = await store.count(game)
    fold_first = total - (config.activity_maxlen if replay is None else replay)
    restored = Restored()
    progress = Progress(total, progress_to)
    # The journaled actions fold with the submissions, in the order Redis applied both. Replaying
    # an action through its function would journal it again, so every submission applied before
    # the newest action whose place matters (actions.ordered) is folded; only later ones replay.
    actions = await store.actions(game)
    through = await _fold_through(store, game, cut, fold_first, journal.newest_ordered(actions))
    # The fold is per player: each part of the players is read and folded apart, in a process of
    # its own (the fold is Python, bound by one core), and the parts' states add up.
    task = _FoldTask(config, through, now, _alive_from(now, idem_ms), max(batch, 5_000))
    folder, seen = ActionFolder(config), dict[int, list[str]]()  # hour -> folded ids whose bucket is alive
    if workers == 1:
        parts = [await task.fold(store, None, actions, progress.advance)]
    else:
        shares = journal.shares(actions, workers)
        running = [
            asyncio.ensure_future(task.fold_apart(store.url, (i, workers), shares[i], progress.advance))
            for i in range(workers)
        ]
        try:
            await asyncio.gather(*running)
        finally:
            for worker in running:
                worker.cancel()
        parts = [worker.result() for worker in running]
    for part in parts:
        folder.merge(part.folder)
        for hour, ids in part.seen.items():
            seen.setdefault(hour, []).extend(ids)
        restored.folded += part.folded
        restored.board_rows += part.board_rows
    folder.actions = len(actions)  # the tournaments' definitions were folded in every part
    # before the first replayed one: it builds on the folded state
    await _write_folded(lb, folder, seen, await store.names(game), restored, now)
    pending: list[dict[str, str]] = []
    async for records in store.scan(game, after=through, batch=batch):
        for record in records:
            if record.tournament and record.tournament not in folder.state.tournaments:
                restored.tournament_slips += 1  # its definition is not in the log: lb_submit would refuse it
                continue
            pending.append(_fields(record))
            if len(pending) >= batch:
                await _replay(lb, pending, now, restored)
                pending = []
        progress.advance(len(records))
    if pending:
        await _replay(lb, pending, now, restored)
    progress.finish()
    if folder.refused:
        restored.refused["points_out_of_range (fold)"] = folder.refused
    restored.tournament_slips += folder.tournament_slips
    restored.seconds = time.monotonic() - started
    return restored


@dataclass(slots=True)
class _Part:
    """What one part of the players' fold left (pickled back from its worker process)."""

    folder: ActionFolder
    seen: dict[int, list[str]]  # hour -> folded ids whose bucket is still alive
    folded: int
    board_rows: int


@dataclass(frozen=True, slots=True)
class _FoldTask:
    """The fold of the log's prefix through ``through``, one part of the players at a time."""

    config: GameConfig
    through: Position | None
    now: int
    alive_from: int  # the first timestamp whose idempotency bucket is still alive
    batch: int

    async def fold(
        self, store: Store, part: Part | None, actions: list[Action], folded: Callable[[int], None]
    ) -> _Part:
        """``folded(n)`` after each chunk of ``n`` submissions folded (the progress bar)."""
        game, now_s = self.config.game, self.now // 1000
        folder = ActionFolder(self.config, actions)
        out = _Part(folder, {}, 0, 0)
        async for rows in store.board_rows(game, now_s=now_s, part=part):
            folder.load(rows)
            out.board_rows += len(rows)
        if self.through is not None:
            seen, alive_from = out.seen, self.alive_from
            async for records in store.scan(game, through=self.through, part=part, batch=self.batch):
                folder.apply(records)
                for record in records:
                    if record.ts >= alive_from:
                        seen.setdefault(record.ts // _HOUR_MS, []).append(record.id)
                out.folded += len(records)
                folded(len(records))
        folder.finish()  # the actions after its last folded submission: all before the first replayed one
        return out

    async def fold_apart(self, url: str, part: Part, actions: list[Action], folded: Callable[[int], None]) -> _Part:
        """``fold`` in a worker process of its own, on a connection of its own: a new interpreter
        (not multiprocessing's, which would import the caller's main module again) that reads
        the task from its stdin and writes to its stdout a frame per chunk folded, then what it
        folded, pickled (``_fold_worker``)."""
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", "from scorer.rebuild import _fold_worker; _fold_worker()",
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert proc.stdin is not None and proc.stdout is not None
        result: _Part | None = None
        try:
            proc.stdin.write(pickle.dumps((self, url, part, actions), protocol=pickle.HIGHEST_PROTOCOL))
            proc.stdin.close()
            with contextlib.suppress(asyncio.IncompleteReadError):  # a worker that failed: below
                while result is None:
                    kind, n = _FRAME.unpack(await proc.stdout.readexactly(_FRAME.size))
                    if kind == b"f":
                        folded(n)
                    else:
                        result = pickle.loads(await proc.stdout.readexactly(n))
            await proc.wait()
        finally:
            if proc.returncode is None:  # cancelled: another part failed
                proc.kill()
                await proc.wait()
        if proc.returncode != 0 or result is None:  # what failed it is on the inherited stderr, above
            raise StoreError(f"the rebuild's worker for part {part[0]} of {part[1]} failed (exit {proc.returncode})")
        return result


# a fold worker's frames on its stdout: (b"f", submissions folded) per chunk, then (b"r", length)
# and the pickled _Part
_FRAME = struct.Struct("<cQ")


def _fold_worker() -> None:
    """A worker process of ``_FoldTask.fold_apart`` (its errors go to the inherited stderr)."""
    task: _FoldTask
    task, url, part, actions = pickle.load(sys.stdin.buffer)

    out = sys.stdout.buffer

    def folded(n: int) -> None:
        out.write(_FRAME.pack(b"f", n))
        out.flush()

    async def run() -> _Part:
        store = open_store(url)
        await store.open()
        try:
            return await task.fold(store, part, actions, folded)
        finally:
            await store.close()

    result = pickle.dumps(asyncio.run(run()), protocol=pickle.HIGHEST_PROTOCOL)
    out.write(_FRAME.pack(b"r", len(result)) + result)
    out.flush()


async def _fold_through(
    store: Store, game: str, cut: Position | None, fold_first: int, newest_action: int | None
) -> Position | None:
    """The last position folded (None: none). The folded part is a prefix of the log in applied
    order, the longest of: up to the last submission lb_submit would refuse as too old (``cut``),
    all but the newest ``replay`` (``fold_first`` rows), every one applied before the newest
    ordered action (Redis's clock, microseconds)."""
    ends = [cut]
    if fold_first > 0:
        ends.append(await store.position(game, fold_first - 1))
    if newest_action is not None:
        # after every row applied in the microsecond before it (an index and a seq above any real
        # one, within both backends' column types)
        ends.append((newest_action - 1, 2**31 - 1, 2**62))
    return max((end for end in ends if end is not None), default=None)


def _alive_from(now: int, idem_ms: int) -> int:
    """The first timestamp whose idempotency bucket (its hour's) is still alive at ``now``."""
    hour = (now - idem_ms) // _HOUR_MS - 1
    while ((hour + 1) * _HOUR_MS + idem_ms) // 1000 <= now // 1000:
        hour += 1
    return hour * _HOUR_MS


def _fields(record: Record) -> dict[str, str]:
    fields = {"id": record.id, "player": record.player, "points": str(record.points), "ts": str(record.ts)}
    for key in ("op", "name", "region", "mode", "tournament"):
        value = getattr(record, key)
        if value:
            fields[key] = value
    return fields


async def _replay(lb: Leaderboard, entries: list[dict[str, str]], now: int, restored: Restored) -> None:
    results = await lb.submit_batch(entries, now=now, rows=False, announce=lb.keys.replay_channel, replay=True)
    restored.replayed += len(entries)
    for result in results:
        if result.status == "ok":
            restored.applied += 1
        elif result.status == "duplicate":
            restored.duplicates += 1
        else:
            code = result.code or "error"
            restored.refused[code] = restored.refused.get(code, 0) + 1


def _companions(
    config: GameConfig, folder: ActionFolder, board: tuple[str, str, str], scores: Iterable[int]
) -> list[Command]:
    """The commands that write a board's rank companions from its members' packed scores."""
    window_name = board[0]
    tournament = tournament_of(window_name)
    if tournament:
        spec = tournament_window(tournament, *folder.state.tournaments[tournament])
    else:
        spec = window_spec(window_name)
    histogram, distinct = companions(scores, spec.shift)
    hist_key, points_key = config.keys.histogram(*board), config.keys.points(*board)
    out: list[Command] = [("DEL", hist_key, points_key)]
    flat = [x for bucket, members in histogram.items() for x in (bucket, members)]
    out += [("HSET", hist_key, *flat[i : i + 2 * _CHUNK]) for i in range(0, len(flat), 2 * _CHUNK)]
    if config.rank_mode_for(window_name) == "dense":
        values = [x for points in distinct for x in (points, points)]  # score and member: the points
        out += [("ZADD", points_key, *values[i : i + 2 * _CHUNK]) for i in range(0, len(values), 2 * _CHUNK)]
    return out


async def _write_folded(
    lb: Leaderboard,
    folder: ActionFolder,
    seen: Mapping[int, list[str]],
    stored_names: Mapping[str, str],
    restored: Restored,
    now: int,
) -> None:
    """The folded state as final values: members, distinct-player logs, versions, names, ids,
    and each board's rank companions (histogram; distinct points in dense mode), computed here
    from its members as ``lb_rank_rebuild`` would from the board (lb_submit keeps them as it
    writes; members written whole need them once, before the replayed part builds on them)."""
    redis, config = lb.redis, lb.config
    keys, now_s = config.keys, now // 1000
    folder.finish()  # the actions after the last folded submission: all before the first replayed one
    commands: list[Command] = []
    inflight: asyncio.Future[list[Any]] | None = None

    async def flush(force: bool = False) -> None:
        # One batch in flight while the next is built: Redis executes one while this process
        # builds and packs the next (else the write phase is Redis's time plus ours). Each is sent
        # once the one before has been answered, so they apply in order.
        nonlocal inflight
        if commands and (force or len(commands) >= 200):
            if inflight is not None:
                await inflight
            inflight = asyncio.ensure_future(execute_packed(redis, *commands))
            commands.clear()
            await asyncio.sleep(0)  # it packs and sends now
        if force and inflight is not None:
            await inflight
            inflight = None

    try:
        for (window, period, scope), members in folder.boards.items():
            expire_at = folder.expire_at[(window, period, scope)]
            if (expire_at and expire_at <= now_s) or not members:
                continue
            key = keys.board(window, period, scope)
            items = list(members.items())
            for i in range(0, len(items), _CHUNK):
                commands.append(("ZADD", key, *(x for player, score in items[i : i + _CHUNK] for x in (score, player))))
                await flush()
            if scope == GLOBAL_SCOPE:  # every applied submission lands on its window's global board
                hll = keys.players(window, period)
                for i in range(0, len(items), _CHUNK):
                    commands.append(("PFADD", hll, *(player for player, _ in items[i : i + _CHUNK])))
                if expire_at:
                    commands.append(("EXPIREAT", hll, expire_at, "NX"))
            commands += _companions(config, folder, (window, period, scope), members.values())
            for written_key in (key, keys.histogram(window, period, scope), keys.points(window, period, scope)):
                if expire_at:  # on a key not written (no points set outside dense mode): a no-op
                    commands.append(("EXPIREAT", written_key, expire_at, "NX"))
            # a version the publisher has not published: it publishes the restored board's top N
            commands.append(("HINCRBY", keys.versions, f"{window}:{period}:{scope}", 1))
            restored.boards += 1
            restored.entries += len(items)
            await flush()
        names = {**stored_names, **folder.names}  # '' when a profile call cleared the name
        for player, profile in journal.profiles(names, folder).items():
            commands.append(("HSET", keys.profiles, player, profile))
            await flush()
        restored.names = sum(1 for name in names.values() if name)
        # what the actions left beyond boards and names: tombstones, tournaments and their entrants,
        # closed periods' markers and finals, the distinct-player logs of banned players
        state, restored.journal = journal.commands(keys, folder, now_ms=now)
        restored.actions = folder.actions
        for command in state:
            commands.append(command)
            await flush()
        idem_ms = config.idempotency_s * 1000
        for hour, ids in seen.items():
            bucket = keys.seen(hour)
            for i in range(0, len(ids), _CHUNK):
                commands.append(("SADD", bucket, *ids[i : i + _CHUNK]))
            commands.append(("EXPIREAT", bucket, ((hour + 1) * _HOUR_MS + idem_ms) // 1000, "NX"))
            restored.seen_ids += len(ids)
            await flush()
        await flush(force=True)
    except BaseException:
        if inflight is not None:  # failed, or cancelled: nothing is left running
            inflight.cancel()
        raise
