"""The snapshot publisher: once per tick, the replica holding the lease publishes the top N of
every board whose top-N version changed, and of every board whose window rolled over.

Each snapshot is built once (``leaderboard.snapshot.build``), published on the board's period-less channel and
stored as the board's latest, together with the record of what was published, in one call of
``lb_publish`` that first checks the lease: a replica that stalled past its lease publishes
nothing, and one that takes the lease over continues from the record instead of republishing
every board.

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
from dataclasses import dataclass
from typing import cast

from leaderboard import (
    BoardEntries,
    GameConfig,
    Leaderboard,
    Period,
    Publication,
    RedisClient,
    boards,
    now_ms,
    snapshot,
)
from leaderboard.backoff import redis_backoff
from leaderboard.defined import Board
from leaderboard.definitions import Definitions
from leaderboard.keys import DEFINED, defined_of
from leaderboard.purge import PURGE_EVERY_S, Purger
from leaderboard.transport import execute_packed
from leaderboard.windows import tournament_of, window

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


def due_boards(
    periods: Mapping[str, str],
    versions: Mapping[str, str],
    published: Mapping[tuple[str, str], tuple[str, int]],
    defined: Mapping[tuple[str, str], str] | None = None,
    rest: Iterable[tuple[str, str]] | None = None,
) -> list[Due]:
    """Which boards to publish this tick (pure).

    ``periods``: window -> current period label. ``versions``: the versions hash
    (``<window>:<period>:<scope>`` -> version). ``published``: (window, scope) -> (period,
    version) last published. ``defined``: (window, ``board:<id>``) -> the current period of
    each defined board (its days may start elsewhere than UTC's); a defined board not in it
    (deleted) is not published. A board is due when its current (period, version) differs from
    what was last published: its top N changed, or its window rolled over (then, with no write
    in the new period yet, the new board is empty and its version is 0).

    ``rest``: the boards to look at besides those in ``versions`` (None: every published and
    defined board). The publisher passes those that may have changed (the game's own boards,
    the defined boards whose period changed since its last tick and those left over by
    ``PUBLISH_PER_TICK``): with 100,000 defined boards, looking at every one took seconds a tick.
    """
    defined = defined or {}

    def current(window: str, scope: str) -> str | None:
        return defined.get((window, scope)) if defined_of(scope) else periods.get(window)

    want: dict[tuple[str, str], tuple[str, int]] = {}
    for field, version in versions.items():
        window, period, scope = field.split(":", 2)  # scopes may hold a colon (region:eu)
        if current(window, scope) == period:
            want[window, scope] = (period, int(version))
    for window, scope in {*published, *defined} if rest is None else set(rest):
        label = current(window, scope)
        if label is not None and (window, scope) not in want:
            want[window, scope] = (label, 0)
    changed = sorted(item for item in want.items() if published.get(item[0]) != item[1])
    return [Due(window, scope, period, version) for (window, scope), (period, version) in changed]


class DefinedPeriods:
    """(window, ``board:<id>``) -> the current period label of every stored defined board's
    windows, kept current from the registry's changes and from each period's end (a heap), so a
    tick computes the periods of the definitions that changed and of the periods that ended,
    not of every definition (a time zone's period costs a calendar computation: with 100,000
    definitions, seconds per tick)."""

    def __init__(self) -> None:
        self.labels: dict[tuple[str, str], str] = {}
        self._ends: dict[tuple[str, str], int] = {}
        self._heap: list[tuple[int, str, str]] = []  # (end_ms, window, scope); stale ones skipped
        self._of: dict[str, tuple[str, ...]] = {}  # board id -> its windows, as held here
        self._mark = (-1, 0)
        self._now = 0
        self.dirty: set[tuple[str, str]] = set()  # keys placed or dropped since the last take_dirty()
        self.placed = 0  # periods computed since made: the definitions changed and the periods ended

    def update(self, registry: Definitions, now: int) -> None:
        self._mark, changed = registry.changes_since(self._mark)
        if changed is None or now < self._now:  # a full read, or a clock set back: derive anew
            self.labels, self._ends, self._heap, self._of = {}, {}, [], {}
            changed = list(registry.stored)
        self._now = now
        for board in changed:
            for w in self._of.pop(board, ()):
                self.labels.pop((w, f"{DEFINED}:{board}"), None)
                self._ends.pop((w, f"{DEFINED}:{board}"), None)
                self.dirty.add((w, f"{DEFINED}:{board}"))
            d = registry.stored.get(board)
            if d is not None and d.id != boards.DEFAULT_ID:  # the default is the game's own boards
                self._of[board] = d.windows
                for w in d.windows:
                    self._place(d, w, now)
        while self._heap and self._heap[0][0] <= now:
            end, w, scope = heapq.heappop(self._heap)
            d = registry.stored.get(defined_of(scope) or "")
            if self._ends.get((w, scope)) == end and d is not None:
                self._place(d, w, now)

    def take_dirty(self) -> set[tuple[str, str]]:
        dirty, self.dirty = self.dirty, set()
        return dirty

    def _place(self, d: boards.Definition, w: str, now: int) -> None:
        p = boards.period(d, w, now)
        self.placed += 1
        key = (w, f"{DEFINED}:{d.id}")
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
        self.published: dict[tuple[str, str], tuple[str, int]] | None = None
        self._holding = False  # counted in stats.publisher
        self._refreshed = 0.0  # monotonic time of the last refresh of the latest snapshots' TTLs
        self.defined = DefinedPeriods()
        # What due_boards looks at besides the versions hash (its ``rest``): the game's own
        # published boards, and PUBLISH_PER_TICK at most of the backlog: the defined boards whose
        # period changed (new, deleted, rolled over), those the cap left over, and every defined
        # board once the lease is (re)taken. A tick's work follows the boards that may be due,
        # not the boards defined.
        self._game_keys: set[tuple[str, str]] = set()
        self._backlog: collections.deque[tuple[str, str]] = collections.deque()
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
            self.published = await self._load_published()
            self._game_keys = {key for key in self.published if not defined_of(key[1])}
            self._backlog = collections.deque(
                {**dict.fromkeys(k for k in self.published if defined_of(k[1])), **dict.fromkeys(self.defined.labels)}
            )
            self._counted(True)
            log.info("publish lease taken (%s)", self.owner)

        now = self.now()
        periods = {w.name: w.period(now).label for w in self.config.window_specs}
        delay_ms = self.settings.close_delay_s * 1000
        expired = []
        for t in await self.lb.tournaments.all():
            period = t.period(now)
            if now < period.end_ms + delay_ms:
                periods[t.name] = period.label
            elif period.expire_at_s * 1000 <= now:
                expired.append(period.label)  # its boards and entry list are gone: so goes its definition
        if expired:
            await self.redis.hdel(self.keys.tournaments, *expired)
        self.defined.update(self.lb.boards, now)
        defined = dict(self.defined.labels)  # a copy: a tournament's are added below
        self._backlog.extend(self.defined.take_dirty())
        batch = min(len(self._backlog), PUBLISH_PER_TICK)
        rest = {*self._game_keys, *(self._backlog.popleft() for _ in range(batch))}
        versions = cast(dict[str, str], await self.redis.hgetall(self.keys.versions))
        for field in versions:  # a tournament on a defined board: published once written to, while it runs
            win, label, scope = field.split(":", 2)
            if defined_of(scope) and tournament_of(win) and periods.get(win) == label:
                defined[win, scope] = label
        due = due_boards(periods, versions, self.published, defined, rest)
        if len(due) > PUBLISH_PER_TICK:  # sorted() is stable: the written ones first, in their order
            due = sorted(due, key=lambda d: d.version == 0)
            # the written ones left stay due (the versions hash holds them); the others wait
            self._backlog.extend((d.window, d.scope) for d in due[PUBLISH_PER_TICK:] if d.version == 0)
            due = sorted(due[:PUBLISH_PER_TICK], key=lambda d: (d.window, d.scope))
        if due:
            await self._publish(due, now)
            if not self.leader:
                return []  # the lease was lost while publishing: the new holder closes periods too
        await self._close(versions, periods, now, defined)
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
            self.published = {key: was for key, was in self.published.items() if defined_of(key[1])}
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

    async def _publish(self, due: list[Due], now: int) -> None:
        assert self.published is not None
        tops = await self._read_tops(due, now)
        publications = [
            Publication(
                d.window, d.scope, d.period, d.version, snapshot.build(d.scope, top, version=d.version, ts_ms=now)
            )
            for d, top in zip(due, tops, strict=True)
        ]
        # Fenced by the lease inside Redis: if this replica stalled past its lease and another took
        # over, nothing is published and this one steps down.
        if not await self.lb.publish(self.owner, self.settings.snapshot_ttl_s, publications):
            log.info("publish lease lost before publishing; nothing published")
            self.published = None
            self._counted(False)
            return
        for d in due:
            self.published[d.window, d.scope] = (d.period, d.version)
            if not defined_of(d.scope):
                self._game_keys.add((d.window, d.scope))
        self.stats.published += len(due)

    async def _read_tops(self, due: list[Due], now: int) -> list[BoardEntries]:
        tops: list[BoardEntries] = []
        for i in range(0, len(due), READS_PER_CALL):
            boards = [(d.window, d.scope) for d in due[i : i + READS_PER_CALL]]
            tops += await self.lb.tops(boards, n=self.config.top_n, at=now)
        return tops

    async def _load_published(self) -> dict[tuple[str, str], tuple[str, int]]:
        raw = cast(dict[str, str], await self.redis.hgetall(self.keys.published))
        out = {}
        for field, value in raw.items():
            window, _, scope = field.partition(":")
            period, _, version = value.rpartition(":")
            known = window in self.config.windows or tournament_of(window) or defined_of(scope)
            if known and version.isdigit():
                out[window, scope] = (period, int(version))
        return out

    async def _close(
        self, versions: Mapping[str, str], periods: Mapping[str, str], now: int, defined: Mapping[tuple[str, str], str]
    ) -> None:
        """Close every past period still in the versions hash once its end is ``close_delay_s``
        behind: the game's boards one call per window period, a defined board's one call per
        board period (its periods are its own: its time zone's days, its season's length).
        Fields this code cannot place (a window no longer kept, a board deleted) are just
        removed."""
        stale: dict[tuple[str, str], list[str]] = {}
        orphans: list[str] = []
        ended: list[Board] = []
        for field in versions:
            win, label, scope = field.split(":", 2)
            if defined_of(scope):
                if defined.get((win, scope)) != label:
                    board = await self._defined_period(win, label, scope)
                    if board is None:
                        orphans.append(field)
                    else:
                        ended.append(board)
            elif periods.get(win) != label:
                stale.setdefault((win, label), []).append(scope)
        s = self.settings
        for board in ended:
            if now < board.period.end_ms + s.close_delay_s * 1000:
                continue  # not over yet, or within the grace for slips still on their way
            event = await self.lb.close(
                board.period, [board.scope], top_n=s.closed_top_n, keep=s.closed_keep, maxlen=s.closed_maxlen,
                definition=board.definition,
            )  # fmt: skip
            if event is not None:
                self.stats.closed += 1
                p = board.period
                log.info("closed %s %s of %s (event %s)", p.window.name, p.label, board.scope, event)
            if board.period.window.tournament is not None:
                await self._forget_window(board.period.window.name, board.scope)
        for (win, label), scopes in sorted(stale.items()):
            period = await self._period(win, label)
            if period is None:
                orphans += [f"{win}:{label}:{scope}" for scope in scopes]
                continue
            if now < period.end_ms + s.close_delay_s * 1000:
                continue  # not over yet, or within the grace for slips still on their way
            event = await self.lb.close(
                period, sorted(scopes), top_n=s.closed_top_n, keep=s.closed_keep, maxlen=s.closed_maxlen
            )
            if event is not None:
                self.stats.closed += 1
                log.info("closed %s %s (event %s)", win, label, event)
            if period.window.tournament is not None:
                await self._forget_window(win)
        if orphans:
            await self.redis.hdel(self.keys.versions, *orphans)

    async def _period(self, win: str, label: str) -> Period | None:
        tournament = tournament_of(win)
        if tournament is not None:
            spec = await self.lb.tournaments.get(tournament)
            return None if spec is None else spec.period(0)
        if win not in self.config.windows:
            return None
        try:
            return window(win).named(label)
        except ValueError:
            return None

    async def _defined_period(self, win: str, label: str, scope: str) -> Board | None:
        """The defined board period a versions field names (one of its own, or a tournament's),
        or None when its definition or tournament is gone, or the label is not one of its periods."""
        definition = self.lb.boards.stored.get(defined_of(scope) or "")
        if definition is None:
            return None
        if tournament_of(win) is not None:
            period = await self._period(win, label)
            return None if period is None or period.label != label else Board(self.keys, definition, period, scope)
        try:
            return Board(self.keys, definition, boards.named(definition, win, label), scope)
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
