"""Reads by plain commands rather than the function library: a board's size, a window's distinct
players, the activity feed and a window's kept finals. Each reads one or two keys the library's
functions write, and all are allowed on replicas. ``PlainReads`` is a part of ``Leaderboard``
(leaderboard/library/), which resolves a window and period to the board's key::

    stats = await lb.stats("weekly")            # size and distinct players of one period
    recent = await lb.feed(20)                  # the newest applied submissions
    last = await lb.finals("weekly", 1)         # the newest close event kept

(PFCOUNT is the reason these are not functions: Redis refuses it inside a no-writes function,
since it may cache the count in the key.)
"""

from __future__ import annotations

from typing import Any, cast

import orjson

from . import activity
from .keys import Keys
from .results import BoardStats
from .transport import RedisClient
from .windows import Period, tournament_of


class PlainReads:
    redis: RedisClient
    keys: Keys

    async def _board(
        self, window_name: str, scope: str, at: int | None, period_name: str | None = None
    ) -> tuple[str, Period]:
        raise NotImplementedError  # Leaderboard's: the board's key and period

    async def size(self, window_name: str, scope: str = "global", *, at: int | None = None) -> int:
        key, _ = await self._board(window_name, scope, at)
        return int(await self.redis.zcard(key))

    async def distinct_players(self, window_name: str, *, at: int | None = None) -> int:
        """Approximate distinct players of a window period (HyperLogLog, ~0.8% error)."""
        return (await self.stats(window_name, at=at)).players

    async def stats(
        self, window_name: str, scope: str = "global", *, at: int | None = None, period: str | None = None
    ) -> BoardStats:
        """Board size and distinct players of the window period, both of one period."""
        key, found = await self._board(window_name, scope, at, period)
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.zcard(key)
            pipe.pfcount(self.keys.players(window_name, found.label))
            size, players = await pipe.execute()
        return BoardStats(found, int(size), int(players))

    async def feed(self, n: int = 20) -> list[dict[str, str]]:
        """The newest applied submissions and moderation actions, newest first (one mapping
        each: leaderboard/activity.py). Each stream entry holds at least one, so ``n`` entries
        hold enough."""
        rows = await self.redis.xrevrange(self.keys.activity, count=n)
        return activity.newest(cast(list[tuple[str, dict[str, str]]], rows or []), n)

    async def finals(self, window_name: str, n: int = 10, scope: str | None = None) -> list[dict[str, Any]]:
        """The newest close events kept for a window, newest first: ``{"id", "window", "period",
        "start_ms", "end_ms", "closed_ms", "event", "top": {scope: [{"rank", "player",
        "points"}, ...]}}``. All tournaments share one list (LB_CLOSED_KEEP long), read whole.
        A defined board's (``scope`` ``board:<id>``) are its own, each with ``board`` and
        ``columns`` (its keys), its entries with ``keys`` (every value, as text) and ``meta``
        instead of ``points``."""
        shared = tournament_of(window_name) is not None
        raw = await self.redis.lrange(self.keys.finals(window_name, scope), 0, -1 if shared else n - 1)
        found = [orjson.loads(item) for item in raw]
        return [f for f in found if f.get("window") == window_name][:n]
