"""A WebSocket server that plays a scenario's script: what a real gateway never sends (a frame
that is not a message, a newer protocol, a welcome and then silence, a 1013 at once).

Each connection gets the script from the start; the script is data (the scenario's ``server``
list), each step one of::

    {"welcome": {...fields replacing the gateway's defaults...}}
    {"send": {...a message...}}        {"send_text": "raw frame"}
    {"close": 1013, "reason": "overloaded; retry later"}   announced first, as the gateway does

After its last step the connection stays open and silent: it reads and answers nothing (no
``pong``: a dead line, as far as the client's heartbeat can tell).
"""

from __future__ import annotations

import contextlib
from typing import Any

import orjson
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from leaderboard import wire

Step = dict[str, Any]


def welcome(fields: dict[str, Any]) -> bytes:
    """A gateway's spectator ``welcome`` (leaderboard.wire's), with ``fields`` replacing its own."""
    base = wire.welcome(
        gateway="scripted",
        player=None,
        role="spectator",
        heartbeat_interval=15.0,
        heartbeat_timeout=30.0,
        windows=("daily", "weekly", "alltime"),
        window="weekly",
        top=10,
        game="scripted",
    )
    return orjson.dumps({**orjson.loads(base), **fields})


class ScriptedServer:
    """``async with ScriptedServer() as s: s.play(steps); s.url`` — ``handshakes`` counts the
    connections opened since the last ``play``."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.host = host
        self.handshakes = 0
        self._script: list[Step] = []
        self._server: Server | None = None

    async def __aenter__(self) -> ScriptedServer:
        self._server = await serve(self._handle, self.host, 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.close()  # open connections get 1001: their adapters have stopped by now
            await self._server.wait_closed()

    @property
    def url(self) -> str:
        assert self._server is not None
        port = next(iter(self._server.sockets)).getsockname()[1]
        return f"ws://{self.host}:{port}/ws"

    def play(self, steps: list[Step]) -> None:
        self._script = list(steps)
        self.handshakes = 0

    async def _handle(self, ws: ServerConnection) -> None:
        self.handshakes += 1
        with contextlib.suppress(ConnectionClosed):
            for step in self._script:
                if "welcome" in step:
                    await ws.send(welcome(step["welcome"]).decode())
                elif "send" in step:
                    await ws.send(orjson.dumps(step["send"]).decode())
                elif "send_text" in step:
                    await ws.send(str(step["send_text"]))
                elif "close" in step:
                    code, reason = int(step["close"]), str(step.get("reason", ""))
                    await ws.send(wire.closing(code, reason).decode())  # the gateway's own announcement
                    await ws.close(code, reason)
                    return
                else:
                    raise ValueError(f"a scripted server step must be welcome, send, send_text or close: {step}")
            async for _ in ws:  # silent from here on
                pass
