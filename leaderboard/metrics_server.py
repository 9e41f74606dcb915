"""``GET /metrics`` for a process's Prometheus registry, on an address of its own.

Served by asyncio in the process's own loop rather than prometheus_client's thread server, so it
starts and stops with the process like everything else it owns; and on its own address
(loopback by default), never on the port players reach. A process may add operator actions
there (``POST <path>``, e.g. the gateway's ``/admin/shed``): the address is an operator's.
A process with no listener of its own (the scorer) answers its readiness check here too
(``GET /readyz``, from ``ready``: 200 or 503), for an orchestrator's probe.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

from prometheus_client import CollectorRegistry, generate_latest

# POST path -> handler(query string) -> (status line, JSON body)
Action = Callable[[str], tuple[bytes, bytes]]


class MetricsServer:
    """``GET /metrics`` over plain HTTP/1.1 (one request per connection), and ``POST`` to each
    path of ``actions``."""

    def __init__(
        self,
        registry: CollectorRegistry,
        host: str,
        port: int,
        *,
        actions: Mapping[str, Action] | None = None,
        ready: Callable[[], bool] | None = None,
    ) -> None:
        self.registry = registry
        self.host = host
        self.port = port
        self.actions = dict(actions or {})
        self.ready = ready
        self._server: asyncio.Server | None = None

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._serve, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]  # the real one when 0 was asked for
        return self.port

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5.0)
            parts = head.split(b" ", 2)
            method, target = (parts[0], parts[1].decode("latin-1")) if len(parts) >= 2 else (b"", "")
            path, _, query = target.partition("?")
            kind = b"text/plain; version=0.0.4; charset=utf-8"
            if method == b"GET" and path == "/metrics":
                body, status = generate_latest(self.registry), b"200 OK"
            elif method == b"GET" and path == "/readyz" and self.ready is not None:
                body, status = (b"ready\n", b"200 OK") if self.ready() else (b"not ready\n", b"503 Service Unavailable")
            elif method == b"POST" and path in self.actions:
                status, body = self.actions[path](query)
                kind = b"application/json"
            else:
                body, status = b"not found\n", b"404 Not Found"
            writer.write(
                b"HTTP/1.1 " + status + b"\r\nContent-Type: " + kind + b"\r\n"
                b"Content-Length: " + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body
            )
            await writer.drain()
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            pass
        finally:
            writer.close()
