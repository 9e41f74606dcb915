"""The HTTP API's pub/sub watch while Redis is unreachable: it keeps trying with backoff, and says
so once when the outage starts and once when it ends, not at each attempt (an outage of a minute
logged hundreds of lines)."""

from __future__ import annotations

import logging

import pytest

from api.held import Held
from api.watch import Watch
from leaderboard import GameConfig, connect

from .conftest import MS, until
from .test_scorer_consumer import Door


async def test_an_outage_is_logged_when_it_starts_and_when_it_ends(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="api.watch")
    async with Door(redis_url) as door:
        redis = connect(door.url)

        async def latest(key: str) -> str | None:
            return None

        watch = Watch(redis, GameConfig(game="w").keys, Held(latest, ttl=1.0, stale=1.0), idle=60.0, size=10)
        watch.start()
        try:
            await door.knocked(6)  # six attempts to reconnect, all refused
            lines = [r for r in caplog.records if r.name == "api.watch"]
            assert [r.levelno for r in lines] == [logging.WARNING], [r.getMessage() for r in lines]
            assert "pub/sub unavailable" in lines[0].getMessage()
            door.open = True
            await until(lambda: any("back after" in r.getMessage() for r in caplog.records), 5000 * MS)
            lines = [r for r in caplog.records if r.name == "api.watch"]
            assert [r.levelno for r in lines] == [logging.WARNING, logging.INFO]
            assert isinstance(lines[1].args, tuple)
            _, _, failed = lines[1].args  # (game, seconds, failed attempts)
            assert isinstance(failed, int) and failed >= 6 and watch.failed_attempts == 0
        finally:
            await watch.close()
            await redis.aclose()
