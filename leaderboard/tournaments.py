"""A game's tournaments as Redis holds them: the registry ``lb_tournament`` writes (one field of
the tournaments hash per tournament, its bounds as JSON) and the entrants ``lb_join`` adds, read
here by plain commands. A tournament's definition never changes once created, so a window read
once is kept for the life of the registry::

    registry = Tournaments(redis, config.keys)
    spec = await registry.get("spring")         # its window, t-spring; None if there is none
    running = await registry.all()              # every tournament, by start
    [mia] = await registry.entered("spring", ["mia"])

``Leaderboard.tournaments`` is one; creating and joining go through the function library
(``Leaderboard.create_tournament``, ``Leaderboard.join``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import orjson

from .keys import Keys
from .transport import RedisClient
from .windows import TOURNAMENT_PREFIX, Window, check_tournament, tournament_window


class Tournaments:
    """The tournaments of one game, with a cache of their windows."""

    def __init__(self, redis: RedisClient, keys: Keys) -> None:
        self.redis = redis
        self.keys = keys
        self._windows: dict[str, Window] = {}  # by tournament id

    async def get(self, tournament: str) -> Window | None:
        """The window of a tournament, or None if there is no such tournament."""
        spec = self._windows.get(tournament)
        if spec is not None:
            return spec
        try:
            check_tournament(tournament)
        except ValueError:
            return None
        raw = await self.redis.hget(self.keys.tournaments, tournament)
        if raw is None:
            return None
        spec = _window_of(tournament, str(raw))
        if spec is not None:
            self._windows[tournament] = spec
        return spec

    def remember(self, tournament: str, spec: Window) -> None:
        """Keep the window of a tournament just created (its definition is now fixed)."""
        self._windows[tournament] = spec

    async def all(self) -> list[Window]:
        """Every tournament defined (running, upcoming or finished), by start."""
        raw = cast(dict[str, str], await self.redis.hgetall(self.keys.tournaments))
        found = [w for t, d in raw.items() if (w := _window_of(t, d)) is not None]
        for w in found:
            self._windows.setdefault(w.name.removeprefix(TOURNAMENT_PREFIX), w)
        return sorted(found, key=lambda w: (w.period(0).start_ms, w.name))

    async def entered(self, tournament: str, players: Sequence[str]) -> list[bool]:
        """Whether each player is entered in the tournament."""
        found = await self.redis.smismember(self.keys.entrants(tournament), list(players))
        return [bool(x) for x in found]


def _window_of(tournament: str, raw: str) -> Window | None:
    try:
        d = orjson.loads(raw)
        return tournament_window(tournament, int(d["start_ms"]), int(d["end_ms"]))
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return None  # written by something else: not a tournament this code can read
