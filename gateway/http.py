"""Plain HTTP on the WebSocket port, through websockets' ``process_request`` hook.

``/ws`` goes on to the WebSocket handshake (unless admission refuses it with 503); ``/healthz``,
``/readyz`` and the static files are answered here. Every other path is a 404 — ``/metrics``
too: it is served on an address of its own (``LB_GW_METRICS_HOST``/``_PORT``), away from players.
"""

from __future__ import annotations

import email.utils
import mimetypes
from collections.abc import Callable
from pathlib import Path

from websockets.asyncio.server import ServerConnection
from websockets.datastructures import Headers
from websockets.http11 import Request, Response

WS_PATH = "/ws"
_STATIC = {
    "/": "index.html",
    "/app.js": "app.js",
    "/style.css": "style.css",
    "/favicon.ico": "favicon.ico",
}


def response(status: int, reason: str, body: bytes, content_type: str, **extra: str) -> Response:
    headers = Headers(
        [
            ("Date", email.utils.formatdate(usegmt=True)),
            ("Content-Length", str(len(body))),
            ("Content-Type", content_type),
            ("Cache-Control", "no-store"),
            *((k.replace("_", "-"), v) for k, v in extra.items()),
        ]
    )
    return Response(status, reason, headers, body)


def text(status: int, reason: str, body: str, **extra: str) -> Response:
    return response(status, reason, body.encode(), "text/plain; charset=utf-8", **extra)


class Routes:
    def __init__(
        self,
        *,
        static_dir: Path,
        js_client: Path,
        admit: Callable[[ServerConnection, Request], str | None],
        not_ready: Callable[[], str | None],
        demo_token: Callable[[], bytes | None] = lambda: None,
    ) -> None:
        self._static = static_dir
        self._js_client = js_client  # the npm package's module (clients/js/), not a copy of it
        self._admit = admit  # None: go on with the handshake; else the reason for a 503
        self._not_ready = not_ready  # None: ready; else why not
        self._demo_token = demo_token  # None: no demo tokens here (production)

    def process_request(self, connection: ServerConnection, request: Request) -> Response | None:
        path = request.path.partition("?")[0]
        if path == WS_PATH:
            refused = self._admit(connection, request)
            if refused is None:
                return None
            # Clients back off after a 503 as after a 1013 close (docs/protocol.md).
            return text(503, "Service Unavailable", f"{refused}; retry later\n", Retry_After="1")
        if path == "/healthz":
            return text(200, "OK", "ok\n")
        if path == "/readyz":
            why = self._not_ready()
            return text(200, "OK", "ready\n") if why is None else text(503, "Service Unavailable", f"{why}\n")
        if path == "/demo-token":
            body = self._demo_token()
            if body is not None:
                return response(200, "OK", body, "application/json")
        name = _STATIC.get(path)
        if name is not None or path == "/client.js":
            file = self._static / name if name is not None else self._js_client
            if file.is_file():  # the page and client are written separately; serve what exists
                kind = mimetypes.guess_type(file.name)[0] or "application/octet-stream"
                if kind.startswith("text/") or kind.endswith("javascript"):
                    kind += "; charset=utf-8"
                return response(200, "OK", file.read_bytes(), kind)
        return text(404, "Not Found", "not found\n")
