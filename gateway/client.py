"""One connection's state, kept small: at 10k sockets every slot counts (``__slots__``).

No per-connection task or queue lives here: the connection handler (websockets' own task) reads,
outbound.py does every write, the sweep task pings. ``BoardKey`` is ``(window, scope)``.
"""

from __future__ import annotations

import asyncio

from websockets.asyncio.server import ServerConnection

from .auth import SPECTATOR, Identity
from .fanout import socket_fd

BoardKey = tuple[str, str]  # (window, scope)

ABUSE_WINDOW_S = 10.0


class Client:
    __slots__ = (
        "boards",
        "closed",
        "fd",
        "game",
        "identity",
        "last_ping",
        "over_since",
        "ping_sent",
        "ping_waiter",
        "ranks",
        "refill_at",
        "skips",
        "strikes",
        "strikes_since",
        "tokens",
        "transport",
        "ws",
    )

    def __init__(self, ws: ServerConnection, now: float, burst: int, identity: Identity = SPECTATOR) -> None:
        self.ws = ws
        self.transport: asyncio.WriteTransport = ws.transport
        self.fd = socket_fd(ws.transport)  # for the fan-out's direct writes; -1: transport only
        self.identity = identity
        self.game = ""  # the game it connected to (gateway/games.py), set once at connect
        self.boards: set[BoardKey] = set()
        self.closed = False
        # flow control: consecutive skipped messages, and since when the buffer is over the bound
        self.skips = 0
        self.over_since = 0.0
        # heartbeats (the sweep task): the pending ping's pong future, when it was sent
        self.ping_waiter: asyncio.Future[float] | None = None
        self.ping_sent = 0.0
        self.last_ping = now
        # own rank: the last (rank, score) pushed per board, to push only on change
        self.ranks: dict[BoardKey, tuple[int | None, int | None]] = {}
        # rate limit: a token bucket, and refused messages within the abuse window
        self.tokens = float(burst)
        self.refill_at = now
        self.strikes = 0
        self.strikes_since = now

    def allow(self, now: float, rate: float, burst: int) -> bool:
        """Take a token for one client message; False when the bucket is empty."""
        self.tokens = min(float(burst), self.tokens + (now - self.refill_at) * rate)
        self.refill_at = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False

    def strike(self, now: float) -> int:
        """Count a refused message; returns how many fell within the abuse window."""
        if now - self.strikes_since > ABUSE_WINDOW_S:
            self.strikes, self.strikes_since = 0, now
        self.strikes += 1
        return self.strikes
