"""Handshakes in flight: TCP connections accepted whose WebSocket upgrade has not finished.

The connection caps (``LB_GW_MAX_CONNECTIONS``, ``LB_GW_CONNECT_RATE``) are applied to a complete
request; a peer that opens TCP connections and sends half a request line would otherwise hold a
descriptor, a transport and a handler task each for the whole open timeout, without limit. Two
bounds close that door:

- their number: beyond ``LB_GW_MAX_HANDSHAKES`` a new TCP connection is reset as soon as it is
  accepted, before anything is read or allocated for it (the kernel's RST is the cheapest answer,
  and clients retry it with backoff as any failed connect);
- their time: ``LB_GW_HANDSHAKE_TIMEOUT`` (websockets' ``open_timeout``) from accept to upgrade.

::

    handshakes = Handshakes(cap=1000)
    serve(..., create_connection=handshakes.connection_class(), open_timeout=3.0)
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from .client import LeanConnection


class Handshakes:
    def __init__(self, cap: int, on_refused: Callable[[], None] = lambda: None) -> None:
        self.cap = cap  # 0: no cap
        # The connections themselves, not a count: a connection leaves exactly once, however its
        # handshake ends (upgraded, refused, timed out, or the peer gone), and only in-flight
        # ones are held, so nothing stays per open socket.
        self.in_flight: set[LeanConnection] = set()
        self._on_refused = on_refused

    def connection_class(self) -> type[LeanConnection]:
        """The ``create_connection`` class for ``serve()``: websockets' connection, counted."""
        handshakes = self

        class CountedConnection(LeanConnection):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                # websockets starts the handshake task here; it ends at once on the reset below.
                super().connection_made(transport)
                if handshakes.cap and len(handshakes.in_flight) >= handshakes.cap:
                    handshakes._on_refused()
                    transport.abort()  # type: ignore[attr-defined]
                    return
                handshakes.in_flight.add(self)

            async def handshake(self, *args: Any, **kwargs: Any) -> None:
                try:
                    await super().handshake(*args, **kwargs)
                finally:  # upgraded, refused, timed out (cancelled) or the peer left
                    handshakes.in_flight.discard(self)

            def connection_lost(self, exc: Exception | None) -> None:
                handshakes.in_flight.discard(self)  # also when the handshake never started
                super().connection_lost(exc)

        return CountedConnection
