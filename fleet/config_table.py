"""``python -m fleet.config_table``: docs/configuration.md, written from the settings' declarations
(every process's variables, their defaults and meaning), so the document and the code cannot drift;
tests/test_settings.py checks that the document is exactly what this module writes.

``python -m fleet.config_table`` rewrites the document in a checkout; ``--check`` only says whether
it is current (exit status 1 when stale); ``--table`` prints the table alone.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from api.settings import ApiSettings
from gateway.settings import GatewaySettings
from leaderboard import GameConfig
from leaderboard.settings import markdown_table
from scorer.settings import ScorerSettings

from .__main__ import FleetOptions

DOCUMENT = Path(__file__).resolve().parent.parent / "docs" / "configuration.md"

# The prose above the table: the loader's rules, which hold for every row.
INTRO = """\
# Configuration

<!-- Written by `python -m fleet.config_table` from the settings' declarations: edit those, not
this file (tests/test_settings.py fails when the two differ). -->

Every process reads environment variables prefixed `LB_` through one loader
(`leaderboard/settings.py`):

- booleans are `1/0`, `true/false`, `yes/no` or `on/off`; lists are comma-separated;
- a value that does not parse (a malformed `LB_REDIS_URL` included) stops the process with one line
  naming the variable (exit status 2); a URL's password is never printed;
- a limit of `0` means "no cap" (or "off") where the table says so; the limits that keep one client
  from hurting the others (frame size, subscriptions, message rate, write buffer, backlog) have no
  "off" and refuse `0`;
- each process's `--help` lists the variables it reads, without starting anything.

The rows come in the order of the processes that read them: the local fleet (`./dev run`, `python
-m fleet`), the game's rules (every process), the scorer (`python -m scorer`), the gateway
(`python -m gateway`). How to choose the values: [operations](operations.md).

"""


def table() -> str:
    return markdown_table(FleetOptions, GameConfig, ScorerSettings, GatewaySettings, ApiSettings)


def document() -> str:
    """The whole of docs/configuration.md."""
    return INTRO + table() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m fleet.config_table", description="Write docs/configuration.md from the settings' declarations."
    )
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--check", action="store_true", help="exit 1 when docs/configuration.md is stale")
    what.add_argument("--table", action="store_true", help="print the table alone")
    args = parser.parse_args(argv)
    if args.table:
        print(table())
        return 0
    current = DOCUMENT.read_text() if DOCUMENT.exists() else ""
    if args.check:
        if current != document():
            print(f"{DOCUMENT} is stale: python -m fleet.config_table", file=sys.stderr)
            return 1
        return 0
    if current != document():
        DOCUMENT.write_text(document())
        print(f"wrote {DOCUMENT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
