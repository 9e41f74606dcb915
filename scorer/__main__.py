"""``python -m scorer``: run a scorer replica (consumer, publisher, badge worker, metrics).
``python -m scorer submit --player mia --points 120``: file one submission into the queue.

Configuration comes from ``LB_`` environment variables (README's table). SIGTERM or Ctrl-C: stop
reading, finish and acknowledge the batch in flight, exit 0; a second signal exits at once.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
import uuid

from redis.exceptions import AuthenticationError, ConnectionError, ResponseError, TimeoutError

from leaderboard import BacklogFull, InvalidSubmission, Submission, connect, now_ms
from leaderboard.queue import Queue
from leaderboard.settings import HelpFormatter, argument_parser, load_or_exit, redacted, unreachable

from .service import Scorer
from .settings import ScorerSettings

log = logging.getLogger("scorer")


REDIS_URL_HELP = "Redis to use (default: LB_REDIS_URL, else redis://127.0.0.1:6379/0)"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argument_parser("python -m scorer", __doc__ or "", ScorerSettings)
    p.add_argument("--burst", action="store_true", help="exit once the queue is drained")
    p.add_argument("--redis-url", default=argparse.SUPPRESS, help=REDIS_URL_HELP)
    sub = p.add_subparsers(dest="command", metavar="{submit}")
    s = sub.add_parser(
        "submit", help="file one submission into the queue", description="File one submission into the queue.",
        formatter_class=HelpFormatter, epilog=p.epilog,  # it loads the same settings as a replica
    )  # fmt: skip
    s.add_argument("--player", required=True, help="player id")
    s.add_argument("--points", required=True, help="points (a whole number)")
    s.add_argument("--id", help="submission id (default: a random one)")
    s.add_argument("--ts", help="timestamp, ms since the epoch (default: now)")
    s.add_argument("--op", choices=("best", "incr", "set"), help="write operator (default: the game's)")
    s.add_argument("--name", help="display name")
    s.add_argument("--region", help="region scope, e.g. eu")
    s.add_argument("--mode", help="mode scope, e.g. ranked")
    s.add_argument("--redis-url", default=argparse.SUPPRESS, help=REDIS_URL_HELP)
    return p.parse_args(argv)


async def run(settings: ScorerSettings, burst: bool) -> None:
    loop = asyncio.get_running_loop()
    scorer = Scorer(settings, burst=burst)
    signals = 0

    def on_signal() -> None:
        nonlocal signals
        signals += 1
        if signals == 1:
            log.info("stopping: finishing the batch in flight")
            scorer.stop()
        else:  # a second signal: the operator does not want to wait
            log.warning("second signal: exiting now")
            os._exit(1)

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal)
    try:
        await scorer.start()
        await scorer.wait()
    finally:
        await scorer.close()


async def submit(settings: ScorerSettings, args: argparse.Namespace) -> tuple[Submission, str]:
    fields = {
        "id": args.id or uuid.uuid4().hex,
        "player": args.player,
        "points": args.points,
        "ts": args.ts or str(now_ms()),
    }
    for key in ("op", "name", "region", "mode"):
        if getattr(args, key):
            fields[key] = getattr(args, key)
    config = settings.game
    sub = Submission.parse(fields)  # the queue checks the clock and the game's limits
    redis = connect(settings.redis_url)
    try:
        return sub, await Queue(redis, config, backlog_max=settings.backlog_max).submit(sub)
    finally:
        await redis.aclose()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    overrides = {"redis_url": args.redis_url} if "redis_url" in args else {}
    settings = load_or_exit(ScorerSettings, **overrides)
    logging.basicConfig(level=settings.log_level, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if args.command == "submit":
        try:
            sub, stream_id = asyncio.run(submit(settings, args))
        except InvalidSubmission as exc:
            print(f"refused: {exc}", file=sys.stderr)
            return 2
        except BacklogFull as exc:
            print(f"backlog full: {exc}", file=sys.stderr)
            return 3
        except (ConnectionError, TimeoutError, AuthenticationError) as exc:
            print(unreachable(settings.redis_url, exc), file=sys.stderr)
            return 1
        except ResponseError as exc:
            if "function" not in str(exc).lower():
                raise
            print(f"Redis at {redacted(settings.redis_url)} has no leaderboard library loaded: start a scorer "
                  f"(python -m scorer) against it first ({exc})", file=sys.stderr)  # fmt: skip
            return 1
        print(f"queued {sub.id}: player {sub.player}, {sub.points} points (stream entry {stream_id})")
        return 0
    asyncio.run(run(settings, args.burst))
    return 0


if __name__ == "__main__":
    sys.exit(main())
