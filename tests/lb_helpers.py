"""Shortcuts of the tests around the library, which the product never takes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from leaderboard import Leaderboard


async def store_profile(lb: Leaderboard, player: str, profile: Mapping[str, Any]) -> None:
    """Store a profile as given: no checks, no version bump. Operators and players go through
    ``Moderation.set_profile`` (lb_profile), which validates it and republishes the boards."""
    await lb.redis.hset(lb.keys.profiles, player, orjson.dumps(dict(profile)).decode())
