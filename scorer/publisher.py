"""The snapshot publisher: once per tick, the replica holding the lease publishes the top N of
every board whose top-N version changed, and of every board whose window rolled over.

Each snapshot is built once (``leaderboard.snapshot.build``), published on the board's period-less channel and
stored as the board's latest, together with the record of what was published, in one call of
``lb_publish`` that first checks the lease: a replica that stalled past its lease publishes
nothing, and one that takes the lease over continues from the record instead of republishing
every board.

A snapshot's ``version`` is the board's publish count, not its top-N version: one more than the
snapshot published before it, however many batches changed the top N in between (the versions
hash counts those, and says when a board is due), so a gateway's delta from the snapshot before
applies (docs/protocol.md, "Snapshot deltas"). Versions never go down and never repeat, even
across a Redis that lost data: a holder numbers a board's first snapshot after it took the lease
with the clock (ms), or one above the published record's number if that is higher (a clock set
back), then counts up by one. The clock's part holds because a board is published at most once a
tick (a tick is at least 1 ms): a board's versions stay below the clock, so a number taken from
it is above every version published before, even after the record that held them was lost
(FLUSHALL, a failover that dropped the last writes). The record alone could not: a gateway can
hold a snapshot a rolled-back record no longer counts, and a different snapshot under its
version would be a delta's base (and an ETag, and the snapshot an older client keeps as the
newer). So each lease taken costs one full snapshot per board; within a lease, deltas.

Only the current period of each window is published: a late submission for yesterday bumps
yesterday's version, but the channel carries today's board. A tournament is a window of its own
(``t-<id>``) whose one period is current from its creation until its close.

Closing: a period whose end lies ``LB_CLOSE_DELAY_S`` in the past while its boards still have
fields in the versions hash gets its close event (``lb_close``, a defined board's in its own
periods: once, whoever asks, so a replica that took the lease over, or one started after the
scorer was down at the close moment, adds exactly the events still missing).
The same call removes those fields: the hash only ever holds current periods and periods not
closed yet.
"""

from __future__ import annotations

import asyncio
import collections
import heapq
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import cast

from leaderboard import (
    BoardEntries,
    GameConfig,
    Leaderboard,
    Publication,
    RedisClient,
    boards,
    now_ms,
    snapshot,
)
from leaderboard.backoff import redis_backoff
from leaderboard.boards import DEFAULT_ID, BoardPeriod, LiveBoard, definition_of, home_of, home_scope
from leaderboard.definitions import Definitions
from leaderboard.keys import GLOBAL_SCOPE
from leaderboard.purge import PURGE_EVERY_S, Purger
from leaderboard.transport import execute_packed
from leaderboard.windows import tournament_of

from .settings import ScorerSettings
from .stats import Stats
from .stream import REDIS_DOWN, sleep_unless

log = logging.getLogger("scorer.publisher")

# Due boards read per call (one pipelined round trip, one connection): a tick reads its due
# boards a bounded batch at a time, however many are due (a rollover, a batch of new scopes can
# make every board due at once), never the whole pool's worth of calls at once. Pipelined
# batches cost the scorer about a quarter of the CPU of one call per board (bench.publish_reads,
# docs/operations.md).
READS_PER_CALL = 100
# Boards published per tick at most, those written to first: the rest are due at the next tick.
# Thousands of defined boards become due at once (a scorer's start, a rollover: each gets its new
# period's empty board), and one tick reading and publishing them all outlived its lease, so it
# published nothing, again and again (about 20,000 boards took 24 s on a 2-core machine).
PUBLISH_PER_TICK = 2000
EXPIRES_PER_CALL = 5000  # the latest snapshots' TTLs refreshed per round trip


@dataclass(frozen=True, slots=True)
class Due:
    """A board to publish: its current period and top-N version (0: no write yet)."""

    window: str
    scope: str
    period: str
    version: int


@dataclass(frozen=True, slots=True)
class Current:
    """The current period of every board (pure): of each definition's windows, keyed by the
    board in its home scope, ``(window, boards.home_scope(id))`` -> label (the game's
    ``default`` has one per window, ``(window, "global")``, shared by all its scopes), and of
    each running tournament, ``t-<id>`` -> label (a tournament's one period is the same on
    every board it runs on)."""

    windows: Mapping[LiveBoard, str]
    tournaments: Mapping[str, str] = field(default_factory=dict)

    def label(self, window: str, scope: str) -> str | None:
        if tournament_of(window) is not None:
            return self.tournaments.get(window)
        return self.windows.get((window, home_of(scope)))


def due_boards(
    current: Current,
    versions: Mapping[str, str],
    published: Mapping[LiveBoard, tuple[str, int]],
    rest: Iterable[LiveBoard] | None = None,
) -> list[Due]:
    """Which boards to publish this tick (pure).

    ``current``: the current period of every board; a board whose definition is not in it
    (deleted, a window no longer kept) is not published. ``versions``: the versions hash
    (``<window>:<period>:<scope>`` -> version). ``published``: (window, scope) -> (period,
    version) last published. A board is due when its current (period, version) differs from
    what was last published: its top N changed, or its window rolled over (then, with no write
    in the new period yet, the new board is empty and its version is 0).

    ``rest``: the boards to look at besides those in ``versions`` (None: every published board,
    and every defined board in its home scope: boards.home_scope; the game's scopes are
    published once written to). The publisher passes those that may have changed (the game's
    own boards, the defined boards whose period changed since its last tick and those left
    over by ``PUBLISH_PER_TICK``): with 100,000 defined boards, looking at every one took
    seconds a tick.
    """
    want: dict[LiveBoard, tuple[str, int]] = {}
    for key, version in versions.items():
        window, period, scope = key.split(":", 2)  # scopes may hold a colon (region:eu)
        if current.label(window, scope) == period:
            want[window, scope] = (period, int(version))
    if rest is None:
        rest = {*published, *(key for key in current.windows if not _of_default(key))}
    for window, scope in set(rest):
        label = current.label(window, scope)
        if label is not None and (window, scope) not in want:
            want[window, scope] = (label, 0)
    changed = sorted(item for item in want.items() if published.get(item[0]) != item[1])
    return [Due(window, scope, period, version) for (window, scope), (period, version) in changed]


class DefinitionPeriods:
    """(window, home scope) -> the current period label of every stored definition's windows
    (boards.home_scope: ``board:<id>``; the game's ``default`` aside: the game's configuration
    names its windows, ``Current``),
    kept current from the registry's changes and from each period's end (a heap), so a tick
    computes the periods of the definitions that changed and of the periods that ended, not of
    every definition (a time zone's period costs a calendar computation: with 100,000
    definitions, seconds per tick)."""

    def __init__(self) -> None:
        self.labels: dict[tuple[str, str], str] = {}
        self._ends: dict[tuple[str, str], int] = {}
        self._heap: list[tuple[int, str, str]] = []  # (end_ms, window, scope); stale ones skipped
        self._of: dict[str, tuple[str, ...]] = {}  # definition id -> its windows, as held here
        self._mark = (-1, 0)
        self._now = 0
        self.dirty: set[LiveBoard] = set()  # keys placed or dropped since the last take_dirty()
        self.placed = 0  # periods computed since made: the definitions changed and the periods ended

    def update(self, registry: Definitions, now: int) -> None:
        self._mark, changed = registry.changes_since(self._mark)
        if changed is None or now < self._now:  # a full read, or a clock set back: derive anew
            self.labels, self._ends, self._heap, self._of = {}, {}, [], {}
            changed = list(registry.stored)
        self._now = now
        for board in changed:
            scope = home_scope(board)
            for w in self._of.pop(board, ()):
                self.labels.pop((w, scope), None)
                self._ends.pop((w, scope), None)
                self.dirty.add((w, scope))
            d = registry.stored.get(board)
            if d is not None and d.id != DEFAULT_ID:
                self._of[board] = d.windows
                for w in d.windows:
                    self._place(d, w, now)
        while self._heap and self._heap[0][0] <= now:
            end, w, scope = heapq.heappop(self._heap)
            d = registry.stored.get(definition_of(scope))
            if self._ends.get((w, scope)) == end and d is not None:
                self._place(d, w, now)

    def take_dirty(self) -> set[LiveBoard]:
        dirty, self.dirty = self.dirty, set()
        return dirty

    def _place(self, d: boards.Definition, w: str, now: int) -> None:
        p = boards.period(d, w, now)
        self.placed += 1
        key = (w, home_scope(d.id))
        self.labels[key], self._ends[key] = p.label, p.end_ms
        self.dirty.add(key)
        heapq.heappush(self._heap, (p.end_ms, *key))


class Publisher:
    def __init__(
        self,
        redis: RedisClient,
        settings: ScorerSettings,
        stats: Stats | None = None,
        *,
        now: Callable[[], int] = now_ms,
        owner: str | None = None,
    ) -> None:
        self.redis = redis
        self.settings = settings
        self.keys = settings.game.keys
        self.lb = Leaderboard(redis, settings.game)
        self.stats = stats or Stats()
        self.now = now
        self.owner = owner or settings.name
        # What was last published; loaded from Redis when the lease is won, None while not held.
        self.published: dict[LiveBoard, tuple[str, int]] | None = None
        # The version of each board's last snapshot published under this lease, and the
        # published record's numbers, read when it was taken (see the module's docstring).
        self.sequence: dict[LiveBoard, int] = {}
        self._recorded: dict[LiveBoard, int] = {}
        self._holding = False  # counted in stats.publisher
        self._refreshed = 0.0  # monotonic time of the last refresh of the latest snapshots' TTLs
        self.periods = DefinitionPeriods()
        # What due_boards looks at besides the versions hash (its ``rest``): the published boards
        # of the game's default (its windows roll over together, over every scope), and
        # PUBLISH_PER_TICK at most of the backlog: the defined boards whose period changed (new,
        # deleted, rolled over), those the cap left over, and every defined board once the lease
        # is (re)taken. A tick's work follows the boards that may be due, not the boards defined.
        self._game_keys: set[LiveBoard] = set()
        self._backlog: collections.deque[LiveBoard] = collections.deque()
        self.purger = Purger(self.lb)
        self._purged = time.monotonic()  # the first pass a PURGE_EVERY_S after the start

    @property
    def config(self) -> GameConfig:
        """The game's configuration, with a stored ``default`` definition applied (its top N,
        rank mode and windows: leaderboard/definitions.py)."""
        return self.lb.config

    @property
    def leader(self) -> bool:
        return self.published is not None

    def _counted(self, held: bool) -> None:
        """Keep the replica's count of held leases (one per game) in step with this game's."""
        if held != self._holding:
            self._holding = held
            self.stats.publisher += 1 if held else -1

    async def tick(self) -> list[Due]:
        """Take or renew the lease, then publish what is due; returns what was published."""
        # every replica, lease or not: a board defined anywhere is known here within a tick
        shown = self.config, self.lb.boards.columns
        if await self.lb.boards.refresh() and (self.config, self.lb.boards.columns) != shown:
            self._republish_game_boards()
        if not await self.lb.lease(self.owner, self.settings.lease_ttl_ms):
            if self.published is not None:
                log.info("publish lease lost to another replica")
            self.published = None
            self._counted(False)
            return []
        if self.published is None:
            self.published, self._recorded = await self._load_published()
            self.sequence = {}
            self._game_keys = {key for key in self.published if _of_default(key)}
            self._backlog = collections.deque(
                {**dict.fromkeys(k for k in self.published if not _of_default(k)), **dict.fromkeys(self.periods.labels)}
            )
            self._counted(True)
            log.info("publish lease taken (%s)", self.owner)

        now = self.now()
        delay_ms = self.settings.close_delay_s * 1000
        expired, tournaments = [], {}
        for t in await self.lb.tournaments.all():
            period = t.period(now)
            if now < period.end_ms + delay_ms:
                tournaments[t.name] = period.label
            elif period.expire_at_s * 1000 <= now:
                expired.append(period.label)  # its boards and entry list are gone: so goes its definition
        if expired:
            await self.redis.hdel(self.keys.tournaments, *expired)
        self.periods.update(self.lb.boards, now)
        # the game's boards' periods, in their stored default's time zone
        game = {(w, GLOBAL_SCOPE): self.lb.boards.period(w, now).label for w in self.config.windows}
        current = Current(collections.ChainMap(game, self.periods.labels), tournaments)
        self._backlog.extend(self.periods.take_dirty())
        batch = min(len(self._backlog), PUBLISH_PER_TICK)
        rest = {*self._game_keys, *(self._backlog.popleft() for _ in range(batch))}
        versions = cast(dict[str, str], await self.redis.hgetall(self.keys.versions))
        due = due_boards(current, versions, self.published, rest)
        if len(due) > PUBLISH_PER_TICK:  # sorted() is stable: the written ones first, in their order
            due = sorted(due, key=lambda d: d.version == 0)
            # the written ones left stay due (the versions hash holds them); the others wait
            self._backlog.extend((d.window, d.scope) for d in due[PUBLISH_PER_TICK:] if d.version == 0)
            due = sorted(due[:PUBLISH_PER_TICK], key=lambda d: (d.window, d.scope))
        if due:
            await self._publish(due, now)
            if not self.leader:
                return []  # the lease was lost while publishing: the new holder closes periods too
        await self._close(versions, current, now)
        if time.monotonic() - self._purged >= PURGE_EVERY_S:
            self._purged = time.monotonic()
            await self.purger.run(now)
        if time.monotonic() - self._refreshed > self.settings.snapshot_ttl_s / 2:
            await self._refresh_latest()
        return due

    def _republish_game_boards(self) -> None:
        """The game's default changed (top N, rank mode, display): its boards' snapshots are
        due again, at the versions they have, so subscribers see the change without a write."""
        if self.published is not None:
            self.published = {key: was for key, was in self.published.items() if not _of_default(key)}
            self._game_keys = set()

    async def release(self) -> None:
        """Give the lease up at once (on shutdown), so another replica need not wait it out."""
        await self.lb.lease(self.owner, self.settings.lease_ttl_ms, release=True)
        self.published = None
        self._counted(False)

    async def run(self, stop: asyncio.Event) -> None:
        interval = self.settings.tick_ms / 1000
        loop = asyncio.get_running_loop()
        next_tick = loop.time()
        backoff = redis_backoff()
        while not stop.is_set():
            try:
                await self.tick()
                backoff.reset()
            except REDIS_DOWN as exc:
                # Whoever holds the lease when Redis is back publishes; the record of what was
                # published lives in Redis, so nothing is lost by forgetting it here.
                self.stats.redis_errors += 1
                if backoff.attempt == 0:
                    log.warning("publisher: redis unavailable (%s); retrying", exc)
                self.published = None
                self._counted(False)
                if await sleep_unless(stop, backoff.next_delay()):
                    break
                next_tick = loop.time()
                continue
            # A fixed cadence, not "sleep a tick after the work": publish lag stays within one
            # tick however long a tick's work takes.
            next_tick += interval
            if next_tick < loop.time():
                next_tick = loop.time()
            if await sleep_unless(stop, next_tick - loop.time()):
                break

    def _next_version(self, board: LiveBoard, now: int) -> int:
        """The version of the board's next snapshot: the last one's + 1 under this lease, else
        the clock's, or the published record's + 1 when that is higher (module docstring)."""
        last = self.sequence.get(board)
        return last + 1 if last is not None else max(now, self._recorded.get(board, 0) + 1)

    async def _publish(self, due: list[Due], now: int) -> None:
        assert self.published is not None
        tops = await self._read_tops(due, now)
        numbers = [self._next_version((d.window, d.scope), now) for d in due]
        publications = [
            Publication(d.window, d.scope, d.period, d.version, n, snapshot.build(d.scope, top, version=n, ts_ms=now))
            for d, n, top in zip(due, numbers, tops, strict=True)
        ]
        # Fenced by the lease inside Redis: if this replica stalled past its lease and another took
        # over, nothing is published and this one steps down.
        if not await self.lb.publish(self.owner, self.settings.snapshot_ttl_s, publications):
            log.info("publish lease lost before publishing; nothing published")
            self.published = None
            self._counted(False)
            return
        for d, n in zip(due, numbers, strict=True):
            self.published[d.window, d.scope] = (d.period, d.version)
            self.sequence[d.window, d.scope] = n
            self._recorded.pop((d.window, d.scope), None)
            if _of_default((d.window, d.scope)):
                self._game_keys.add((d.window, d.scope))
        self.stats.published += len(due)

    async def _read_tops(self, due: list[Due], now: int) -> list[BoardEntries]:
        tops: list[BoardEntries] = []
        for i in range(0, len(due), READS_PER_CALL):
            boards = [(d.window, d.scope) for d in due[i : i + READS_PER_CALL]]
            tops += await self.lb.tops(boards, at=now)
        return tops

    async def _load_published(self) -> tuple[dict[LiveBoard, tuple[str, int]], dict[LiveBoard, int]]:
        """The published record: (period, top-N version) of each board, and the version of its
        last snapshot (keys.published; a record an earlier release wrote has none)."""
        raw = cast(dict[str, str], await self.redis.hgetall(self.keys.published))
        out, numbers = {}, {}
        for key, value in raw.items():
            window, _, scope = key.partition(":")
            period, *counts = value.split(":")  # a period label holds no colon
            # a defined board's record is kept whatever its windows: its definition is read later
            known = window in self.config.windows or tournament_of(window) or not _of_default((window, scope))
            if known and len(counts) in (1, 2) and all(n.isdigit() for n in counts):
                out[window, scope] = (period, int(counts[0]))
                if len(counts) == 2:
                    numbers[window, scope] = int(counts[1])
        return out, numbers

    async def _close(self, versions: Mapping[str, str], current: Current, now: int) -> None:
        """Close every past period still in the versions hash once its end is ``close_delay_s``
        behind: each board period of its definition's (a defined board's time zone's days, its
        season's length), the game's default's in one call per window period for all its scopes
        (lb_close), any other board's in one call each (lb_close with its definition). Fields this code cannot
        place (a window no longer kept, a board deleted) are just removed."""
        game: dict[tuple[str, str], list[BoardPeriod]] = {}  # (window, label) -> its scopes' board periods
        ended: dict[tuple[str, str, str], list[BoardPeriod]] = {}  # a defined board's period: its scopes' boards
        orphans: list[str] = []
        s = self.settings
        for key in versions:
            win, label, scope = key.split(":", 2)
            if current.label(win, scope) == label:
                continue
            board = await self._ended(win, label, scope)
            if board is None:
                orphans.append(key)
            elif now < board.period.end_ms + s.close_delay_s * 1000:
                continue  # not over yet, or within the grace for slips still on their way
            elif _of_default((win, scope)):
                game.setdefault((win, label), []).append(board)
            else:
                ended.setdefault((board.definition.id, win, label), []).append(board)
        for group in ended.values():
            board, home = group[0], home_scope(group[0].definition.id)
            # its home first (every slip of a scope's board wrote it), then its scopes', closed together
            names = [home, *sorted({b.scope for b in group} - {home})]
            event = await self.lb.close(
                board.period, names, top_n=s.closed_top_n, keep=s.closed_keep, maxlen=s.closed_maxlen,
                definition=board.definition,
            )  # fmt: skip
            p = board.period
            if event is not None:
                self.stats.closed += 1
                log.info("closed %s %s of %s (event %s)", p.window.name, p.label, home, event)
            if p.window.tournament is not None:
                for scope in names:
                    await self._forget_window(p.window.name, scope)
        for (win, label), scopes in sorted(game.items()):
            p = scopes[0].period
            event = await self.lb.close(
                p, sorted(b.scope for b in scopes), top_n=s.closed_top_n, keep=s.closed_keep, maxlen=s.closed_maxlen,
                definition=self.lb.boards.general,  # the game's stored default, when it keeps key values
            )  # fmt: skip
            if event is not None:
                self.stats.closed += 1
                log.info("closed %s %s (event %s)", win, label, event)
            if p.window.tournament is not None:
                await self._forget_window(win)
        if orphans:
            await self.redis.hdel(self.keys.versions, *orphans)

    async def _ended(self, win: str, label: str, scope: str) -> BoardPeriod | None:
        """The board period a versions field names (one of its definition's, or a tournament's),
        or None when its definition, window or tournament is gone, or the label is not one of
        its periods."""
        definition = self.lb.boards.get(definition_of(scope))
        if definition is None:
            return None
        mode = self.config.rank_mode_for(win) if _of_default((win, scope)) else None
        tournament = tournament_of(win)
        if tournament is not None:
            spec = await self.lb.tournaments.get(tournament)
            period = None if spec is None else spec.period(0)
            if period is None or period.label != label:
                return None
            return BoardPeriod(self.keys, definition, period, scope, mode=mode)
        if _of_default((win, scope)) and win not in self.config.windows:
            return None  # a window the game no longer keeps
        try:
            return BoardPeriod(self.keys, definition, boards.named(definition, win, label), scope, mode=mode)
        except ValueError:
            return None

    async def _forget_window(self, win: str, scope: str | None = None) -> None:
        """A closed tournament is never published again: drop its published records (of one
        defined board's, given its ``scope``), so its stored latest snapshots are no longer kept
        alive and simply expire."""
        assert self.published is not None
        gone = [key for key in self.published if key[0] == win and scope in (None, key[1])]
        if gone:
            await self.redis.hdel(self.keys.published, *(f"{w}:{scope}" for w, scope in gone))
            for key in gone:
                del self.published[key]
                self._game_keys.discard(key)
                self.sequence.pop(key, None)

    async def _refresh_latest(self) -> None:
        """Keep the stored latest snapshot of boards that simply did not change alive."""
        assert self.published is not None
        # packed by hiredis a few thousand at a time: with 100,000 defined boards there are
        # 200,000 or more, which redis-py's pipeline took seconds of the tick to pack
        latest = [self.keys.latest(window, scope) for window, scope in self.published]
        ttl = self.settings.snapshot_ttl_s
        for i in range(0, len(latest), EXPIRES_PER_CALL):
            await execute_packed(self.redis, *(("EXPIRE", key, ttl) for key in latest[i : i + EXPIRES_PER_CALL]))
        self._refreshed = time.monotonic()


def _of_default(board: LiveBoard) -> bool:
    """Whether a board is one of the game's own: the definition ``default``'s, kept per scope."""
    return definition_of(board[1]) == DEFAULT_ID
