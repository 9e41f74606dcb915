"""Handshakes in flight: TCP connections accepted whose WebSocket upgrade has not finished.

The connection caps (``LB_GW_MAX_CONNECTIONS``, ``LB_GW_CONNECT_RATE``) are applied to a complete
request; a peer that opens TCP connections and sends half a request line would otherwise hold a
descriptor, a transport and a handler task each for the whole open timeout, without limit. Two
bounds close that door:

- their number: at most ``LB_GW_MAX_HANDSHAKES``. When a new connection finds them all taken, the
  one that has waited longest is reset (the kernel's RST: nothing more is read or written for
  it). Refusing the newcomer instead would let a slow peer keep the cap full and every client
  out; a real client's handshake takes milliseconds, so the longest waiting is the slow peer's;
- their time: ``LB_GW_HANDSHAKE_TIMEOUT`` (websockets' ``open_timeout``) from accept to upgrade.

::

    handshakes = Handshakes(cap=1000)
    serve(..., create_connection=handshakes.connection_class(), open_timeout=3.0)
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from .client import LeanConnection


class Handshakes:
    def __init__(self, cap: int, on_refused: Callable[[], None] = lambda: None) -> None:
        self.cap = cap  # 0: no cap
        # The connections themselves, oldest first: each leaves exactly once, however its
        # handshake ends (upgraded, refused, timed out, reset, or the peer gone), and only those
        # in flight are held, so nothing stays per open socket.
        self.in_flight: OrderedDict[LeanConnection, None] = OrderedDict()
        self._on_refused = on_refused

    def _arrived(self, connection: LeanConnection) -> None:
        if self.cap and len(self.in_flight) >= self.cap:
            oldest, _ = self.in_flight.popitem(last=False)
            self._on_refused()
            oldest.transport.abort()
        self.in_flight[connection] = None

    def _left(self, connection: LeanConnection) -> None:
        self.in_flight.pop(connection, None)

    def connection_class(self) -> type[LeanConnection]:
        """The ``create_connection`` class for ``serve()``: websockets' connection, counted."""
        handshakes = self

        class CountedConnection(LeanConnection):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                super().connection_made(transport)  # websockets starts the handshake task here
                handshakes._arrived(self)

            async def handshake(self, *args: Any, **kwargs: Any) -> None:
                try:
                    await super().handshake(*args, **kwargs)
                finally:  # upgraded, refused, timed out (cancelled) or the peer left
                    handshakes._left(self)

            def connection_lost(self, exc: Exception | None) -> None:
                handshakes._left(self)  # also when the handshake never started
                super().connection_lost(exc)

        return CountedConnection
