"""``python -m gateway``: one gateway process (several may share the port: SO_REUSEPORT).

Signals live here only. SIGTERM (or the first SIGINT) drains: readiness fails, the listener
closes, sockets are closed in staggered batches with 1012, then the process exits 0. A second
SIGTERM/SIGINT exits at once (status 1).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import sys
import time
from typing import Any

import uvloop

from leaderboard.gctune import fewer_collections
from leaderboard.settings import argument_parser, load_or_exit

from .metrics import Metrics
from .server import Gateway
from .settings import GatewaySettings

log = logging.getLogger("gateway")


def tune_gc(threshold: int, metrics: Metrics) -> None:
    """Fewer, cheaper collections, and each one timed (the loop stands still while it runs).

    Everything alive at start-up lives as long as the process: frozen, it is never scanned."""
    fewer_collections(threshold)
    started = 0.0

    def timed(phase: str, info: dict[str, Any]) -> None:
        nonlocal started
        if phase == "start":
            started = time.perf_counter()
        else:
            metrics.gc_pause_seconds.labels(str(info["generation"])).observe(time.perf_counter() - started)

    gc.callbacks.append(timed)


async def run(settings: GatewaySettings) -> int:
    loop = asyncio.get_running_loop()
    async with Gateway(settings) as gw:
        tune_gc(settings.gc_threshold, gw.metrics)
        drain: asyncio.Task[None] | None = None

        def on_signal(signum: int) -> None:
            nonlocal drain
            if drain is None:
                log.info("%s: draining (send again to exit at once)", signal.Signals(signum).name)
                drain = asyncio.create_task(gw.drain())
            else:
                log.warning("second signal: exiting now")
                os._exit(1)  # the operator asked twice: skip every cleanup

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, on_signal, sig)
        await gw.serve_forever()
    return 0


def main(argv: list[str] | None = None) -> int:
    argument_parser("python -m gateway", __doc__ or "", GatewaySettings).parse_args(argv)
    settings = load_or_exit(GatewaySettings)
    logging.basicConfig(level=settings.log_level, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    return uvloop.run(run(settings))


if __name__ == "__main__":
    sys.exit(main())
