"""A game's board definitions as Redis holds them: the boards hash (board id -> definition JSON,
written by ``lb_board_put`` / ``lb_board_delete`` only) and its version counter, read here by
plain commands, over the defaults the game's configuration implies.

Every process holds one registry per game and calls ``refresh()`` once per tick: one round trip
that reads the version counter and the change log after the version the registry holds (a
sorted set of the ids changed, by the counter's value at their change), then the definitions of
just those ids. A change costs each process the definitions it changed, not all of them, so a
definition created or changed anywhere is seen everywhere within a tick with 100,000 stored,
without a restart. A registry reads and parses them all only at its first refresh, or when it
holds a version older than the log's floor (a deleted definition forgotten since: lb_board_purge;
a rebuilt Redis), or the log's epoch changed (a flushed Redis counting again); that read goes a
chunk at a time (HSCAN), yielding to the event loop between chunks::

    registry = Definitions(redis, config)
    await registry.refresh()                  # True when something changed
    tower = registry.get("tower")             # a boards.Definition, or None
    registry.get("default")                   # today's configuration, unless an operator stored one
    registry.config                           # the game's configuration with a stored default applied

A stored ``default`` is the game's own boards' definition (``global``, ``region:…``, ``mode:…``):
its operator, rank mode, top N, windows (a season's and a calendar window the environment does
not keep too: ``applied``) and display hint replace
those of the environment (``LB_OPERATOR``, ``LB_RANK_MODE``, ``LB_TOP_N``, ``LB_WINDOWS``) in
``registry.config``, which every wrapper of the game (``Leaderboard.config``) reads, so every
process follows a stored change within a tick and deleting it brings the environment's back.
``LB_WINDOW_OPERATORS`` and ``LB_WINDOW_RANK_MODES`` still override it per window, as they
override the environment's.
``admit()`` refuses a default the game's boards cannot carry (``boards.check_default``) or the
game's configuration cannot hold (``default_config``). A stored default not of the environment's
shape (``boards.configured_shape``: more keys, ``asc``, tie ``last``, metadata, a window the
environment does not keep...) is ``registry.general``: the game's slips are then laid out as its slips
over the game's scopes (``encode_batch``'s ``default``), and its readers follow it.

Creating, updating and deleting go through the function library (``Leaderboard.create_board``,
``update_board``, ``delete_board``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import cast

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from .boards import DEFAULT_ID, SEASON, Definition, check_default, configured_shape, default_definition, parse
from .boards import period as board_period
from .boards import resolve as board_resolve
from .boards import window_of as board_window
from .config import GameConfig
from .errors import InvalidBoard
from .settings import SettingsError
from .transport import RedisClient, execute_packed
from .windows import Period, window

log = logging.getLogger(__name__)

REFRESH_S = 1.0  # how often a process that has no tick of its own (a gateway) checks the counter
CHANGES_PER_READ = 1000  # changed ids read per round trip (a burst of creates is read in steps)
LOAD_CHUNK = 1000  # definitions per HSCAN step of a full read (parsed between two yields)
CHANGED_KEPT = 100_000  # ids of changes remembered for changes_since (more: a new generation)
FLOOR = ""  # the change log's floor member: never a board id (lb_board_purge, a rebuild)


def configured(config: GameConfig) -> Definition:
    """The game's default board as its environment configuration describes it (not stored)."""
    return default_definition(config.operator, config.rank_mode, config.windows, config.top_n)


def applied(config: GameConfig, default: Definition) -> GameConfig:
    """``config`` with a stored default's operator, rank mode, top N and windows (admitted by
    ``boards.check_default`` against ``configured(config)``); per-window overrides of windows it
    no longer keeps are dropped with them. The windows the environment keeps come in its order,
    then the definition's others, its ``season`` last, its window spec in ``GameConfig.season``
    (its periods the definition's: ``boards.window_of``): every process that reads the game's
    windows here (publisher, closer, gateways, API, reads, moderation) takes them."""

    def kept(pairs: Mapping[str, str]) -> dict[str, str]:
        return {w: v for w, v in pairs.items() if w in default.windows}

    windows = tuple(w for w in config.windows if w in default.windows)  # the environment's order
    windows += tuple(w for w in default.windows if w not in config.windows and w != SEASON)
    season = board_window(default, SEASON) if SEASON in default.windows else None
    return replace(
        config,
        operator=default.operator,
        rank_mode=default.rank_mode,
        top_n=default.top_n,
        windows=windows if season is None else (*windows, SEASON),
        window_operators=kept(config.window_operators),
        window_rank_modes=kept(config.window_rank_modes),
        season=season,
    )


def default_window(config: GameConfig, named: str) -> str:
    """The window of a request that names none (and of a gateway connection's first board):
    ``named`` (LB_GW_WINDOW, LB_API_WINDOW) while ``config`` keeps it, else the game's own choice:
    a stored default board may keep fewer windows than the environment named one from."""
    return config.default_window(named if named in config.windows else "")


class Definitions:
    """The board definitions of one game, as of the last ``refresh()``."""

    def __init__(self, redis: RedisClient, config: GameConfig) -> None:
        self.redis = redis
        self.keys = config.keys
        self.base = config  # the environment's
        self.config = config  # the environment's with a stored default applied (module docstring)
        self.defaults = {DEFAULT_ID: configured(config)}
        self.columns: tuple[dict[str, str], ...] = ()  # the game's boards' display hint, when stored
        # The stored default when it is not of the environment's shape (boards.configured_shape):
        # the game's slips are then laid out as its slips over the game's scopes (encode_batch).
        self.general: Definition | None = None
        self._refreshed_at = -REFRESH_S
        self.version: int | None = None  # the counter last read; None: never read
        # The change log's epoch read with ``version`` (keys.board_epoch; None: a log older than
        # epochs, or none yet): a Redis that lost its data counts again from 1, and may come back
        # to this very version with a change of the very id held there; its new epoch tells this
        # registry that its version no longer means anything.
        self._epoch: str | None = None
        self.stored: dict[str, Definition] = {}
        self.unreadable = 0  # stored definitions this code cannot parse (written by a newer one)
        self._unreadable: set[str] = set()
        self.parsed = 0  # definitions parsed since the registry was made (a refresh parses the changed ones)
        self.loads = 0  # full reads of every definition (the first refresh, or fallen behind the log's floor)
        # What changed, for a holder of derived state (the publisher's periods): the ids applied
        # since the last full read, in order; a full read (or a long list) starts a new generation.
        self.generation = 0
        self._changed: list[str] = []

    async def refresh(self) -> bool:
        """Bring the registry to the version counter; whether a definition changed."""
        # The project's transport, not redis-py's cluster client: on a cluster the latter learns
        # a failed node's successor inline, holding every game's commands up meanwhile, and this
        # read runs every tick for every game.
        self._refreshed_at = time.monotonic()
        k = self.keys
        moved = False
        while True:
            since = -1 if self.version is None else self.version
            # The floor is read after the log: a purge between the two raises it, so a change
            # whose member the purge took is either in the range read or below the floor.
            raw, changed, floor, epoch = await execute_packed(
                self.redis,
                ("GET", k.boards_version),
                ("ZRANGE", k.board_changes, f"({since}", "+inf", "BYSCORE", "LIMIT", 0, CHANGES_PER_READ, "WITHSCORES"),
                ("ZSCORE", k.board_changes, FLOOR),
                ("GET", k.board_epoch),
            )
            version = int(raw) if raw is not None else 0
            # Another log than the one this registry read: Redis lost its data and counted again
            # (to this very version, maybe: keys.board_epoch), or was rebuilt. At version 0 it
            # read no log: the one begun since holds every change after it.
            recounted = bool(self.version) and epoch != self._epoch
            if not changed and version == since and not recounted:
                if moved:  # read in steps, the last one full: the default may be among them
                    self._apply_default(self.stored.get(DEFAULT_ID))
                return moved
            # Held none yet, or behind the floor, or ahead of the counter (a flushed or rebuilt
            # Redis), or counted back to it, or the counter moved with nothing in the log (a bump
            # by hand): the log cannot say what changed.
            if self.version is None or since < int(float(floor or 0)) or since > version or recounted or not changed:
                await self._load_all(version, epoch)
                return True
            pairs = changed if isinstance(changed[0], list) else list(zip(changed[0::2], changed[1::2], strict=True))
            ids = [str(board) for board, _ in pairs]  # RESP3 answers pairs, RESP2 a flat list
            self._epoch = epoch  # the one held, or the log begun after version 0
            texts = await self.redis.hmget(k.boards, ids)
            self._apply(dict(zip(ids, cast(list[str | None], texts), strict=True)))
            reached = int(float(pairs[-1][1]))
            moved = True
            if len(ids) < CHANGES_PER_READ:
                # every change after ``since`` was read, including any newer than the counter
                # read first: their definitions are the current ones
                self.version = max(version, reached)
                self._apply_default(self.stored.get(DEFAULT_ID))
                return True
            self.version = reached  # more in the log than one read returns: read on from there

    def changes_since(self, mark: tuple[int, int]) -> tuple[tuple[int, int], list[str] | None]:
        """The ids whose definitions changed since ``mark`` (a mark this returned before, or
        ``(-1, 0)``), and the mark to ask from next; None instead of ids: derive from ``stored``
        anew (a full read since, or the first ask)."""
        now = (self.generation, len(self._changed))
        if mark[0] != self.generation:
            return now, None
        return now, self._changed[mark[1] :]

    def _apply(self, texts: Mapping[str, str | None]) -> None:
        """Replace the definitions of the ids given (None: deleted)."""
        if len(self._changed) + len(texts) > CHANGED_KEPT:
            self.generation, self._changed = self.generation + 1, []
        self._changed += texts
        for board, text in texts.items():
            self._unreadable.discard(board)
            if text is None:
                self.stored.pop(board, None)
            else:
                definition = self._parse(board, text)
                if definition is None:
                    self.stored.pop(board, None)
                else:
                    self.stored[board] = definition
        self.unreadable = len(self._unreadable)

    def _parse(self, board: str, text: str) -> Definition | None:
        self.parsed += 1
        try:
            return parse(text)
        except InvalidBoard as exc:
            self._unreadable.add(board)
            log.error("board %s: stored definition not readable: %s", board, exc)
            return None

    async def _load_all(self, version: int, epoch: str | None) -> None:
        """Read and parse every stored definition, a chunk at a time (a change made meanwhile is
        newer than ``version`` and read by the next refresh; a flush meanwhile changes ``epoch``)."""
        found: dict[str, Definition] = {}
        self._unreadable = set()
        cursor = 0
        while True:
            cursor, chunk = await self.redis.hscan(self.keys.boards, cursor, count=LOAD_CHUNK)
            for board, text in cast(dict[str, str], chunk).items():
                definition = self._parse(board, text)
                if definition is not None:
                    found[board] = definition
            if not int(cursor):
                break
            await asyncio.sleep(0)  # parsing 100,000 takes seconds: let the loop serve meanwhile
        self.stored, self.unreadable, self.version, self._epoch = found, len(self._unreadable), version, epoch
        self.loads += 1
        self.generation, self._changed = self.generation + 1, []
        self._apply_default(found.get(DEFAULT_ID))

    async def refresh_due(self, every: float = REFRESH_S) -> None:
        """``refresh()`` when the last one is ``every`` seconds old: for a path that runs more
        often than a tick (a scorer's batches, a queue's submissions), one GET a second at most."""
        if time.monotonic() - self._refreshed_at >= every:
            await self.refresh()

    def _apply_default(self, stored: Definition | None) -> None:
        config = self.base
        columns: tuple[dict[str, str], ...] = ()
        general = None
        if stored is not None:
            try:
                config = self.default_config(stored)
                columns = tuple({"name": k.name, "direction": k.direction, "display": k.display} for k in stored.keys)
                general = None if configured_shape(stored, self.defaults[DEFAULT_ID]) else stored
            except InvalidBoard as exc:  # stored before the environment changed (LB_IDEMPOTENCY_S...)
                log.error("board default of %s not applied, the environment's is: %s", self.keys.game, exc.message)
        if config != self.config or general != self.general:
            log.info("boards of %s: the default board is %s", self.keys.game, "stored" if columns else "configured")
        self.config, self.columns, self.general = config, columns, general

    def admit(self, definition: Definition) -> Definition:
        """``definition`` if it may be stored: InvalidBoard when it is the game's default and the
        game's own boards cannot carry it (boards.check_default), or the game's configuration
        with it applied would not hold (``default_config``)."""
        if definition.id == DEFAULT_ID:
            self.default_config(definition)
        return definition

    def default_config(self, stored: Definition) -> GameConfig:
        """The environment's configuration with ``stored`` as the game's default (``applied``);
        InvalidBoard invalid_default_board when it would not hold: a window it adds whose keys
        expire sooner than LB_IDEMPOTENCY_S lets a slip be (a daily board kept 7 days, in a game
        that takes slips 30 days old)."""
        try:
            return applied(self.base, check_default(stored, self.defaults[DEFAULT_ID]))
        except SettingsError as exc:
            raise InvalidBoard(
                "invalid_default_board", f"the game's default board does not fit the game: {exc}"
            ) from None

    def period(self, window_name: str, ts_ms: int) -> Period:
        """The game's boards' period of ``window_name`` (one the game keeps) holding ``ts_ms``:
        its days start in the stored default's time zone (``general``'s; UTC otherwise)."""
        general = self.general
        return window(window_name).period(ts_ms) if general is None else board_period(general, window_name, ts_ms)

    def resolve(self, window_name: str, name: str | None, now_ms: int) -> Period:
        """The game's boards' period a read names (``windows.Window.resolve``'s rules, in the
        stored default's time zone); ValueError for one not kept or not readable."""
        general = self.general
        return (
            window(window_name).resolve(name, now_ms)
            if general is None
            else board_resolve(general, window_name, name, now_ms)
        )

    def get(self, board: str) -> Definition | None:
        return self.stored.get(board) or self.defaults.get(board)

    def all(self) -> list[Definition]:
        """Every board of the game, by id: the stored ones and the defaults none overrides."""
        merged = {**self.defaults, **self.stored}
        return [merged[b] for b in sorted(merged)]

    async def stored_json(self, board: str) -> str | None:
        """The definition JSON Redis holds for ``board`` now (an update's compare-and-set base)."""
        raw = await self.redis.hget(self.keys.boards, board)
        return None if raw is None else str(raw)

    async def deleted_json(self, board: str) -> str | None:
        """The definition JSON ``board`` had when deleted, if it was and is not created again (a
        create's compare-and-set base: its keys may still hold the old board's entries)."""
        raw = await self.redis.hget(self.keys.deleted_boards, board)
        return None if raw is None else str(raw)


async def watch(registry: Definitions, every: float = REFRESH_S) -> None:
    """Refresh ``registry`` every ``every`` seconds until cancelled (a gateway's background
    task; a scorer refreshes in its publisher's tick). Redis away: the definitions held stay in
    use, and the next refresh that reaches it catches up."""
    while True:
        try:
            if await registry.refresh():
                game, stored = registry.keys.game, len(registry.stored)
                log.info("boards of %s: version %s, %d defined", game, registry.version, stored)
        except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
            # the process's own Redis watch (a gateway's hub) says so, once, with the address
            log.debug("boards of %s: not refreshed (%s)", registry.keys.game, type(exc).__name__)
        await asyncio.sleep(every)
