"""Retry delays: exponential backoff with full jitter (pure: no I/O, no clock). The one backoff of
the project: the clients' reconnects, the scorer's and the gateway's returns to Redis.

Each failed attempt doubles the cap (by default 0.5 s, 1 s, 2 s, … up to 20 s) and the caller
waits a random time in ``[0, cap]``. Without the randomness every client of a crashed gateway
(every replica that lost Redis) would come back at the same instant and knock over the next one;
with it their returns spread evenly over the cap. A connection that stayed up for
``stable_after`` seconds resets the cap, as does ``reset()`` after a success::

    backoff = Backoff(base=0.05, ceiling=0.5)     # a server process waiting for Redis
    await asyncio.sleep(backoff.next_delay())

Why it lives here and not in ``client``: imports run one way, leaderboard ← scorer, gateway ←
fleet, loadtest, so the scorer and the gateway can share only what sits in ``leaderboard``. The
app-facing ``client`` package re-exports it (``client.backoff``) instead of owning it: a server
process must never import the package apps embed, and an app's clients reconnecting with the same
code the fleet was tested with keeps one definition of "full jitter".
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

# Close codes with a meaning for the client (docs/protocol.md).
DRAINING = 1012  # the gateway restarts: another one answers at once
OVERLOADED = 1013  # the gateway is full: stay away for a while


@dataclass(slots=True)
class Backoff:
    base: float = 0.5
    ceiling: float = 20.0
    stable_after: float = 10.0
    overload_floor: float = 5.0  # the cap after a 1013 / HTTP 503, at least
    drain_cap: float = 1.0  # the cap after a 1012: come back soon, but not all at once
    rng: random.Random = field(default_factory=random.Random)
    attempt: int = 0

    @property
    def cap(self) -> float:
        return float(min(self.ceiling, self.base * 2.0**self.attempt))

    def next_delay(self, *, close_code: int | None = None, retry_after: float | None = None) -> float:
        """The wait before the next attempt, after a failure or a close with ``close_code``."""
        if close_code == DRAINING:
            return self.rng.uniform(0, self.drain_cap)
        cap = self.cap
        if close_code == OVERLOADED or retry_after is not None:
            cap = max(cap, self.overload_floor)
        self.attempt = min(self.attempt + 1, 64)  # the cap is long reached; 2.0**attempt stays finite
        delay = self.rng.uniform(0, cap)
        if retry_after is not None:
            delay = max(delay, retry_after)
        return delay

    def reset(self) -> None:
        """After a success: the next failure starts from ``base`` again."""
        self.attempt = 0

    def connected_for(self, seconds: float) -> None:
        """Tell the backoff how long the last connection lasted; a stable one resets the cap."""
        if seconds >= self.stable_after:
            self.attempt = 0


def redis_backoff() -> Backoff:
    """How a server process (scorer worker, gateway pub/sub) waits for Redis: full jitter,
    capped at 0.5 s.

    The cap is short on purpose: a few processes probing a Redis that is down cost it nothing (a
    refused connect, or a LOADING reply), while every second of the cap is a second after Redis
    is back during which scores wait and sockets show a stale top 10."""
    return Backoff(base=0.05, ceiling=0.5)
