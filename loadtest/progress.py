"""What a run shows while it runs: one live progress line, and a once-a-second timeline of the
sockets open and the messages received (the report's charts)."""

from __future__ import annotations

import asyncio
import math
import sys
import time
from collections.abc import Callable

from .flood import Flood
from .swarm import Swarm


class Progress:
    """One live line on a terminal (rewritten in place); a line every 5 s otherwise."""

    def __init__(self, quiet: bool = False) -> None:
        self.quiet = quiet
        self.tty = sys.stderr.isatty()
        self._last_print = 0.0
        self._dirty = False

    def show(self, text: str) -> None:
        if self.quiet:
            return
        if self.tty:
            sys.stderr.write("\r\033[K" + text)
            sys.stderr.flush()
            self._dirty = True
        elif time.monotonic() - self._last_print >= 5:
            self._last_print = time.monotonic()
            print(text, file=sys.stderr, flush=True)

    def note(self, text: str) -> None:
        self.end()
        if not self.quiet:
            print(text, file=sys.stderr, flush=True)

    def end(self) -> None:
        if self._dirty:
            sys.stderr.write("\n")
            self._dirty = False


class Watch:
    """Once a second: sample the swarms (and the flood) into a timeline and the progress line."""

    def __init__(self, label: str, progress: Progress, swarms: list[Swarm], flood: Flood | None) -> None:
        self.label, self.progress, self.swarms, self.flood = label, progress, swarms, flood
        self.started = time.time()
        self.timeline: list[dict[str, float]] = []
        self._prev: tuple[float, int] | None = None

    async def run(self, seconds: float, until: Callable[[], bool] | None = None) -> None:
        deadline = time.monotonic() + seconds
        next_sample = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            await asyncio.sleep(max(0.0, min(0.1, deadline - time.monotonic())))
            if time.monotonic() >= next_sample or time.monotonic() >= deadline:
                next_sample += 1.0
                await self.sample()
            if until is not None and until():
                return

    async def sample(self) -> None:
        now = time.time()
        opened = sum(s.totals()["open"] for s in self.swarms)
        frames = sum(s.totals()["frames"] for s in self.swarms)
        lat = sorted(x for s in self.swarms for x in s.live_lat[-20000:])
        p99 = lat[min(len(lat) - 1, int(0.99 * len(lat)))] if lat else math.nan
        rate = 0.0
        if self._prev is not None:
            rate = (frames - self._prev[1]) / max(now - self._prev[0], 1e-6)
        self._prev = (now, frames)
        applied = 0.0
        if self.flood is not None:
            _, applied = await self.flood.sample()
        self.timeline.append({"t": now - self.started, "open": opened, "msgs_per_s": rate, "applied_per_s": applied})
        want = sum(s.sockets for s in self.swarms)
        text = f"[{self.label}] {now - self.started:5.0f} s  open {opened:,}/{want:,}  msgs {rate:,.0f}/s"
        if lat:
            text += f"  p99 {p99:,.0f} ms"
        if self.flood is not None:
            text += f"  applied {applied:,.0f}/s"
        self.progress.show(text)
