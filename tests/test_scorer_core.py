"""The scorer's pure parts: which boards are due, settings from the environment, the stats line."""

from __future__ import annotations

import pytest

from leaderboard.backoff import redis_backoff
from scorer import Due, ScorerSettings, Stats, due_boards, stats_line
from scorer.publisher import Current

PERIODS = Current({("daily", "global"): "2030-11-27", ("weekly", "global"): "2030-W48"})


def test_a_board_is_due_when_its_current_version_differs_from_the_published_one() -> None:
    versions = {
        "daily:2030-11-27:global": "3",
        "daily:2030-11-27:region:eu": "1",
        "weekly:2030-W48:global": "7",
        "daily:2030-11-26:global": "9",  # yesterday: never published again
    }
    published = {("daily", "global"): ("2030-11-27", 3), ("weekly", "global"): ("2030-W48", 6)}
    assert due_boards(PERIODS, versions, published) == [
        Due("daily", "region:eu", "2030-11-27", 1),
        Due("weekly", "global", "2030-W48", 7),
    ]


def test_rollover_makes_every_published_board_due_with_the_new_empty_period() -> None:
    published = {("daily", "region:eu"): ("2030-11-26", 4), ("weekly", "global"): ("2030-W48", 2)}
    versions = {"daily:2030-11-26:region:eu": "4", "weekly:2030-W48:global": "2"}
    assert due_boards(PERIODS, versions, published) == [Due("daily", "region:eu", "2030-11-27", 0)]
    # a window no longer configured is left alone
    assert due_boards(Current({("weekly", "global"): "2030-W48"}), versions, published) == []


def test_settings_from_env() -> None:
    s = ScorerSettings.from_env(
        {
            "LB_REDIS_URL": "redis://h:1/0",
            "LB_GAME": "g",
            "LB_SCORER_BATCH": "64",
            "LB_TICK_MS": "200",
            "LB_LEASE_TTL_MS": "900",
            "LB_BADGE_THRESHOLDS": "a=1, b=20",
            "LB_SCORER_METRICS_PORT": "0",
            "LB_SCORER_STATS_S": "2.5",
            "LB_BADGE_TOP_N": "no",
        }
    )
    assert (s.redis_url, s.game.game, s.batch, s.tick_ms, s.lease_ttl_ms) == (
        "redis://h:1/0",
        "g",
        64,
        200,
        900,
    )
    assert s.badge_thresholds == (("a", 1), ("b", 20)) and s.metrics_port == 0
    assert s.stats_interval_s == 2.5 and s.badge_top_n is False
    with pytest.raises(ValueError, match="LB_LEASE_TTL_MS"):
        ScorerSettings(tick_ms=1000, lease_ttl_ms=1000)
    with pytest.raises(ValueError, match="name=points"):
        ScorerSettings.from_env({"LB_BADGE_THRESHOLDS": "gold"})
    assert ScorerSettings.from_env({"LB_SCORER_FORGET_AFTER_S": "0"}).forget_after_s == 0
    with pytest.raises(ValueError, match="forget_after_s"):
        ScorerSettings.from_env({"LB_SCORER_FORGET_AFTER_S": "-1"})
    with pytest.raises(ValueError, match="LB_SCORER_FORGET_AFTER_S='soon'"):  # names the variable
        ScorerSettings.from_env({"LB_SCORER_FORGET_AFTER_S": "soon"})


def test_stats_line_reports_rates_and_lag() -> None:
    before = Stats(applied=100)
    now = Stats(applied=2100, duplicates=3, backlog=40, pending=20, oldest_age_s=0.25, published=4, publisher=True)
    line = stats_line(now, before, 2.0)
    assert line.startswith("applied 1000/s (total 2100), duplicates 3")
    assert "lag 40 entries (pending 20, oldest 0.2 s)" in line and "published 4 (publisher)" in line


def test_backoff_is_capped_and_jittered() -> None:
    b = redis_backoff()
    delays = [b.next_delay() for _ in range(2000)]  # far past the cap: 2.0**attempt must not overflow
    assert all(0 <= d <= 0.5 for d in delays) and len(set(delays)) > 1
    b.reset()
    assert b.next_delay() <= 0.05
