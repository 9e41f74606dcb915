"""The operators' commands beside moderation (``python -m scorer deadletters``, ``audit``): the
dead letters listed, requeued or dropped, and the audit log read, through the library calls the
HTTP API's routes and the admin console make (leaderboard/deadletters.py, audit.py)::

    python -m scorer deadletters list
    python -m scorer deadletters requeue 1764950400000-0 --reason "definition fixed"
    python -m scorer deadletters drop 1764950400000-0 --reason "test slip"
    python -m scorer audit --player mia
"""

from __future__ import annotations

import argparse
import datetime as dt
import getpass
import socket
from typing import Any

import orjson

from leaderboard import Leaderboard, audit, connect
from leaderboard.deadletters import DeadLetters
from leaderboard.queue import Queue
from leaderboard.settings import HelpFormatter

from .cli import REDIS_URL_HELP
from .settings import ScorerSettings

ACTOR_HELP = "who does it, recorded in the audit log (default: user@host)"


def default_actor() -> str:
    return f"{getpass.getuser()}@{socket.gethostname()}"[:64]


def _when(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def _parser(sub: Any, name: str, text: str, epilog: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(
        name, help=text, description=text[0].upper() + text[1:] + ".", formatter_class=HelpFormatter, epilog=epilog
    )
    parser.add_argument("--redis-url", default=argparse.SUPPRESS, help=REDIS_URL_HELP)
    return parser


def deadletters_parser(sub: Any, epilog: str) -> None:
    d = _parser(sub, "deadletters", "list, requeue or drop the slips the scorer refused", epilog)
    dsub = d.add_subparsers(dest="action", metavar="{list,requeue,drop}", required=True)
    listing = dsub.add_parser("list", help="the newest first: id, player, code, message")
    listing.add_argument("-n", type=int, default=20, help="how many (at most 200)")
    for name, text in (("requeue", "file the slip again, same id (audited)"), ("drop", "delete it (audited)")):
        a = dsub.add_parser(name, help=text)
        a.add_argument("id", help="the dead letter's id (from list)")
        a.add_argument("--reason", required=True, help="why, recorded in the audit log")
        a.add_argument("--actor", help=ACTOR_HELP)


def audit_parser(sub: Any, epilog: str) -> None:
    a = _parser(sub, "audit", "the moderators' audit log, newest first", epilog)
    a.add_argument("--player", help="only this player's entries")
    a.add_argument("-n", type=int, default=20, help="how many (at most 500)")
    a.add_argument("--json", action="store_true", help="one JSON object per line, before and after whole")


async def deadletters(settings: ScorerSettings, args: argparse.Namespace) -> str:
    redis = connect(settings.redis_url, pool=settings.redis_pool)
    try:
        lb = Leaderboard(redis, settings.game)
        letters = DeadLetters(lb, Queue(redis, settings.game))
        if args.action == "list":
            found = await letters.list(count=args.n)
            lines = [f"{x.id}\t{x.fields.get('player', '')}\t{x.code}\t{_when(x.at)}\t{x.message}" for x in found]
            return "\n".join([*lines, f"{await letters.count()} dead letters"])
        actor = args.actor or default_actor()
        if args.action == "requeue":
            queued = await letters.requeue(args.id, actor=actor, reason=args.reason)
            return f"requeued {args.id} as {queued}"
        await letters.drop(args.id, actor=actor, reason=args.reason)
        return f"dropped {args.id}"
    finally:
        await redis.aclose()


async def audit_log(settings: ScorerSettings, args: argparse.Namespace) -> str:
    redis = connect(settings.redis_url, pool=settings.redis_pool)
    try:
        found = await audit.read(redis, settings.game.keys, count=args.n, player=args.player)
    finally:
        await redis.aclose()
    if args.json:
        return "\n".join(orjson.dumps(e.as_dict()).decode() for e in found)
    return "\n".join(f"{_when(e.at)}\t{e.actor}\t{e.action}\t{e.player}\t{e.reason}" for e in found)
