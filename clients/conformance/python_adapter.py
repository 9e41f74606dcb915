"""The conformance adapter of the Python client (``client.LeaderboardClient``): commands on stdin,
the client's events on stdout, one JSON object a line (docs/clients.md, "Conformance").

It adds nothing to the client's behaviour: the client's own backoff, heartbeat and reconnects
run as an application would see them; the adapter only translates. The client's statuses
``refused`` and ``closed`` are the contract's ``stopped``.
"""

from __future__ import annotations

import asyncio
import sys
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import orjson

from client import LeaderboardClient, RequestError
from leaderboard.wire import PROTOCOL

Message = dict[str, Any]

STATUS = {
    "connecting": "connecting",
    "live": "live",
    "reconnecting": "reconnecting",
    "refused": "stopped",
    "closed": "stopped",
}
PUSHES = ("welcome", "snapshot", "rank", "announce", "overtaken")


def emit(event: Message) -> None:
    sys.stdout.buffer.write(orjson.dumps(event) + b"\n")
    sys.stdout.buffer.flush()


class PythonAdapter:
    """One client, driven by the commands, its messages forwarded as events."""

    def __init__(self) -> None:
        self.client: LeaderboardClient | None = None
        self._requests: set[asyncio.Task[None]] = set()

    def forward(self, msg: Message) -> None:
        """A message or status change of the client, as the contract's event (replies go to ``request``)."""
        kind = msg.get("type")
        if kind == "status":
            status = STATUS.get(msg["status"])
            if status is not None:
                retry_in, reason = msg.get("retry_in"), msg.get("reason")
                emit({"event": "status", "status": status, "retry_in": retry_in, "reason": reason})
        elif "id" in msg:
            return
        elif kind in PUSHES:
            emit({"event": kind, "message": msg})
        elif kind == "error":
            emit({"event": "error", "code": msg.get("code"), "message": msg.get("message", "")})

    def command(self, cmd: Message) -> None:
        kind = cmd.get("cmd")
        if kind == "start":
            self.client = LeaderboardClient(cmd["url"], token=cmd.get("token"), deltas=bool(cmd.get("deltas", True)))
            self.client.on(self.forward)
            self.client.start()
            return
        client = self.client
        if client is None:
            emit({"event": "error", "code": "not_started", "message": f"{kind} before start"})
        elif kind == "subscribe":
            client.subscribe(cmd["board"], cmd.get("window"))
        elif kind == "unsubscribe":
            client.unsubscribe(cmd["board"], cmd.get("window"))
        elif kind == "request":
            task = asyncio.create_task(self.request(client, cmd.get("ref"), cmd["message"]))
            self._requests.add(task)
            task.add_done_callback(self._requests.discard)
        elif kind == "send":
            try:
                client.send(cmd["message"])
            except ConnectionError:
                emit({"event": "error", "code": "not_connected", "message": "send while the line is down"})

    @staticmethod
    async def request(client: LeaderboardClient, ref: Any, message: Message) -> None:
        try:
            reply = await client.request(message)
        except RequestError as exc:
            emit({"event": "reply_error", "ref": ref, "code": exc.code})
        except TimeoutError:
            emit({"event": "reply_error", "ref": ref, "code": "timeout"})
        except ConnectionError:
            emit({"event": "reply_error", "ref": ref, "code": "not_connected"})
        else:
            emit({"event": "reply", "ref": ref, "message": reply})

    async def serve(self) -> None:
        """Commands from stdin until ``stop`` or EOF; then the client closes and ``stopped`` is said."""
        loop = asyncio.get_running_loop()
        stdin = asyncio.StreamReader(limit=16 * 1024 * 1024)
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin)
        try:
            client_version = version("leaderboard-fleet")
        except PackageNotFoundError:
            client_version = "unknown"
        emit({"event": "ready", "client": "python", "version": client_version, "protocol": PROTOCOL})
        while line := await stdin.readline():
            cmd = orjson.loads(line)
            if cmd.get("cmd") == "stop":
                break
            self.command(cmd)
        if self.client is not None:
            await self.client.close()
        emit({"event": "stopped"})


if __name__ == "__main__":
    asyncio.run(PythonAdapter().serve())
