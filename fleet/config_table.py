"""``python -m fleet.config_table``: README's configuration table, printed from the settings'
declarations (every process's variables, their defaults and meaning), so the two cannot drift;
tests/test_settings.py checks that README holds exactly this table."""

from __future__ import annotations

from gateway.settings import GatewaySettings
from leaderboard import GameConfig
from leaderboard.settings import markdown_table
from scorer.settings import ScorerSettings

from .__main__ import FleetOptions


def table() -> str:
    return markdown_table(FleetOptions, GameConfig, ScorerSettings, GatewaySettings)


if __name__ == "__main__":
    print(table())
