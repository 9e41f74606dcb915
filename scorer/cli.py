"""What every ``python -m scorer`` subcommand is made of: its parser (``Command.build``), its run
returning what to print (``Answer``), a refusal of how it was asked (``UsageError``), and the
options and formats the commands share."""

from __future__ import annotations

import argparse
import datetime as dt
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, NamedTuple

from leaderboard import BadRequest
from leaderboard.settings import HelpFormatter

from .settings import ScorerSettings

REDIS_URL_HELP = "Redis to use (default: LB_REDIS_URL, else redis://127.0.0.1:6379/0)"


class Answer(NamedTuple):
    """What a command prints on success, and its exit status."""

    text: str
    status: int = 0


class UsageError(Exception):
    """The command cannot run as asked (its message says why): exit status 2."""


Subparsers = Any  # argparse's _SubParsersAction, private
Run = Callable[[ScorerSettings, argparse.Namespace], Coroutine[Any, Any, str | Answer]]


@dataclass(frozen=True, slots=True)
class Command:
    """A subcommand: ``build(subparsers, epilog)`` adds its parser; ``run`` does it and returns
    what to print (exit status 0, unless an ``Answer`` says otherwise). Its failures are told by
    ``failure``."""

    name: str
    build: Callable[[Subparsers, str], None]
    run: Run


def parser(sub: Subparsers, name: str, text: str, description: str, epilog: str) -> argparse.ArgumentParser:
    """A subcommand's parser; its epilog is the settings' table (it loads the same settings as a
    replica)."""
    parser: argparse.ArgumentParser = sub.add_parser(
        name, help=text, description=description, formatter_class=HelpFormatter, epilog=epilog
    )
    return parser


def redis_option(*parsers: argparse.ArgumentParser) -> None:
    for parser in parsers:
        parser.add_argument("--redis-url", default=argparse.SUPPRESS, help=REDIS_URL_HELP)


def iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).isoformat()


def parse_time(text: str) -> int:
    """ms since the epoch, given as such or as an ISO 8601 time (UTC unless it says otherwise);
    anything else is refused (``BadRequest``)."""
    if text.isdigit():
        return int(text)
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise BadRequest(f"not a time: {text!r} (ms since the epoch, or ISO 8601)") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return int(when.timestamp() * 1000)
