"""A player as operators look them up (the admin console, ``GET /v1/players/{player}``): every
board they are on now with rank and score, their profile, badges and ban::

    found = await lookup(Moderation(lb), "mia")
    found["entries"]  # [{"board": "global", "window": "daily", "period": "2026-12-06", "rank": 3, ...}]

Finding the boards is ``Moderation``'s scan of the game's board keys (its cost follows the key
count): a lookup is an operator's rare read, never a player's.
"""

from __future__ import annotations

from typing import Any

from .errors import BadRequest, TournamentError
from .moderation import Moderation, check_player
from .profiles import stored


async def entries(mods: Moderation, player: str) -> list[dict[str, Any]]:
    """Every board ``player`` is on now (every window, period and scope, defined boards too),
    with their rank and score (a defined board's key values as text, exact beyond 2^53)."""
    lb = mods.lb
    check_player(player)
    game_boards = sorted(await mods.boards(), key=lambda b: (b.window, b.period, b.scope))
    await lb.boards.refresh()  # the game's encoding: its stored default's
    on = await mods.on(player, game_boards, lex=mods.game_lex())
    on += sorted(await mods.defined_boards(), key=lambda b: (b.scope, b.window, b.period))
    out = []
    for b in on:
        try:
            standing = await lb.rank(player, b.window, b.scope, period=b.period)
        except (BadRequest, TournamentError):  # a period no longer readable: its keys only wait to expire
            continue
        if standing.rank is None:
            continue
        row: dict[str, Any] = {"board": b.scope, "window": b.window, "period": b.period, "rank": standing.rank}
        if standing.keys is not None:
            row["values"] = [str(v) for v in standing.keys]
        else:
            row["points"] = standing.score
        out.append(row)
    return out


async def lookup(mods: Moderation, player: str) -> dict[str, Any]:
    """``player``'s entries on every board, profile (None: none), badges and ban (None: none)."""
    check_player(player)
    keys, redis = mods.keys, mods.lb.redis
    profile = await redis.hget(keys.profiles, player)
    return {
        "player": player,
        "banned": await mods.banned(player),
        "profile": stored(None if profile is None else str(profile)),
        "badges": sorted(map(str, await redis.smembers(keys.badges(player)))),
        "entries": await entries(mods, player),
    }
