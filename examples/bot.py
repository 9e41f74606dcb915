"""A bot watching its own standing on its region's weekly board, live over the gateway.

source var/fleet.env    # written by ./dev run: LB_JWT_SECRETS, the gateways' token secret
python examples/bot.py ws://127.0.0.1:8000/ws mia --board region:eu --updates 3
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from client import LeaderboardClient, Refused, Untrusted
from leaderboard.auth import issue


def newer_snapshot(board: str, window: str, version: int) -> Callable[[dict[str, Any]], bool]:
    return lambda m: m["type"] == "snapshot" and (m["board"], m["window"]) == (board, window) and m["version"] > version


async def watch(url: str, player: str, board: str, updates: int, secret: str, ca_file: str | None = None) -> None:
    # What the game backend does at login: sign a player token (HS256, the gateways' secret).
    # A token the gateways refuse raises client.Refused, with the reason, instead of a timeout.
    token = issue(player, "player", secret, exp=time.time() + 3600)
    async with LeaderboardClient(url, token=token, ca_file=ca_file) as client:
        client.subscribe(board, "weekly")
        seen = -1
        for _ in range(updates):
            # the next snapshot of the board we subscribed to (the connection also gets the default
            # board's); a snapshot can arrive twice around a subscribe, so versions tell what is new
            snap = await client.wait_for(newer_snapshot(board, "weekly", seen), timeout=30)
            seen = snap["version"]
            leader = snap["entries"][0] if snap["entries"] else None
            me = await client.request({"type": "rank", "board": board, "window": "weekly"})
            print(
                f"{board} weekly v{snap['version']}: leader {leader and leader['player']}, "
                f"{player} is #{me['rank']} with {me['score']}",
                flush=True,
            )


if __name__ == "__main__":
    p = argparse.ArgumentParser(description="Watch a player's rank on a board, live.")
    p.add_argument("url", help="the gateway's WebSocket URL, e.g. ws://127.0.0.1:8000/ws")
    p.add_argument("player")
    p.add_argument("--board", default="global", help="global, region:<name> or mode:<name>")
    p.add_argument("--updates", type=int, default=3, help="snapshots to watch before exiting")
    p.add_argument("--ca-file", default=None, help="wss://: trust only this CA's certificates (PEM)")
    args = p.parse_args()
    secrets = os.environ.get("LB_JWT_SECRETS", "")
    if not secrets:
        sys.exit("LB_JWT_SECRETS is not set: `source var/fleet.env` (./dev run writes the gateways' secret there)")
    try:
        asyncio.run(watch(args.url, args.player, args.board, args.updates, secrets.split(",")[0], args.ca_file))
    except Untrusted as exc:  # a private CA: --ca-file
        sys.exit(f"{exc}; is the balancer's CA given with --ca-file?")
    except Refused as exc:  # e.g. a secret from another fleet: the gateways' is in their var/fleet.env
        sys.exit(f"{exc}; is LB_JWT_SECRETS the gateways' secret (`source var/fleet.env`)?")
