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

from leaderboard import BacklogFull, InvalidSubmission, Submission, connect, now_ms
from leaderboard.queue import Queue

from .service import Scorer
from .settings import ScorerSettings

log = logging.getLogger("scorer")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m scorer", description=__doc__.split("\n")[0])
    p.add_argument("--burst", action="store_true", help="exit once the queue is drained")
    p.add_argument("--log-level", default=os.environ.get("LB_LOG_LEVEL", "INFO"))
    sub = p.add_subparsers(dest="command")
    s = sub.add_parser("submit", help="file one submission into the queue")
    s.add_argument("--player", required=True)
    s.add_argument("--points", required=True)
    s.add_argument("--id", help="submission id (default: a random one)")
    s.add_argument("--ts", help="timestamp, ms since the epoch (default: now)")
    s.add_argument("--op", choices=("best", "incr", "set"))
    s.add_argument("--name", help="display name")
    s.add_argument("--region")
    s.add_argument("--mode")
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


async def submit(settings: ScorerSettings, args: argparse.Namespace) -> str:
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
    sub = Submission.parse(fields, now_ms=now_ms(), rules=config.rules())
    redis = connect(settings.redis_url)
    try:
        return await Queue(redis, config, backlog_max=settings.backlog_max).submit(sub)
    finally:
        await redis.aclose()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        settings = ScorerSettings.from_env()
    except ValueError as exc:
        print(f"configuration error: {exc}", file=sys.stderr)
        return 2
    if args.command == "submit":
        try:
            stream_id = asyncio.run(submit(settings, args))
        except InvalidSubmission as exc:
            print(f"refused: {exc}", file=sys.stderr)
            return 2
        except BacklogFull as exc:
            print(f"backlog full: {exc}", file=sys.stderr)
            return 3
        print(stream_id)
        return 0
    asyncio.run(run(settings, args.burst))
    return 0


if __name__ == "__main__":
    sys.exit(main())
