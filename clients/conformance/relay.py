"""A TCP relay in front of the fleet's port that counts the connections a client opens through it.

The count is the runner's own, taken before any gateway sees the connection: a client that
retries a refused token is caught however it sends the token (in ``hello``, or in the URL, where
a gateway refuses it before it counts the socket as accepted). Bytes pass unchanged both ways, as
through a layer-4 balancer; when either side ends, the other is ended the same way (a reset
stays a reset: a killed gateway looks killed to the client).
"""

from __future__ import annotations

import asyncio
import contextlib


class Relay:
    """``async with Relay(host, port) as relay: relay.port, relay.connections``."""

    def __init__(self, host: str, port: int) -> None:
        self.upstream = (host, port)
        self.connections = 0
        self._server: asyncio.Server | None = None
        self._open: set[asyncio.StreamWriter] = set()

    async def __aenter__(self) -> Relay:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._open):
            writer.transport.abort()
        if self._server is not None:
            await self._server.wait_closed()

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.transport.abort()  # nothing listens: the client sees a refusal, as without the relay
            return
        self._open |= {writer, up_writer}
        try:
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        finally:
            self._open -= {writer, up_writer}


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy until the reading side ends; then end the writing side: closed after an end of file,
    reset after a reset."""
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except OSError:
        writer.transport.abort()
        return
    with contextlib.suppress(OSError):
        writer.close()
