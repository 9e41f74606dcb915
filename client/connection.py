"""An asyncio client of the gateway protocol (docs/protocol.md) for game clients, bots and tests.

It keeps one connection alive: reconnects after any drop with full-jitter backoff (honouring the
gateway's 1012 / 1013 / HTTP 503 hints), re-sends ``hello`` and every subscription, watches the
line with app-level pings, and keeps the latest snapshot and rank of each board so a UI never
blanks during a reconnect. It asks for snapshot deltas (``deltas=False``: full snapshots only) and
applies each to the snapshot it holds: listeners see whole snapshots either way; a delta that
does not fit the version held is dropped and the full snapshot asked for (``resync``). A 1008
close (a refused token, an unknown game) is final: the client stops, and ``wait_for`` /
``request`` raise ``Refused`` with the close code and the reason::

    async with LeaderboardClient("ws://127.0.0.1:8000/ws", token=tok) as client:
        client.subscribe("global", "weekly")
        snap = await client.wait_for(lambda m: m["type"] == "snapshot", timeout=5)

A ``wss://`` URL is verified against the system's CAs, or only those of ``ca_file`` (a private CA);
a certificate that does not verify is final too (``Untrusted``, a ``Refused`` with close code 1015,
the code RFC 6455 keeps for a failed TLS handshake): retrying cannot make it trusted.

A server message the client cannot read is reported to the listeners as an ``error`` with the
code ``malformed_message`` and skipped; the loop goes on. A server whose ``welcome`` carries a
greater ``protocol`` than this client speaks is reported (``protocol_version``) and the client
stops (``Incompatible``): it does not guess at messages it may misread.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import ssl
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

import orjson
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus, WebSocketException

from leaderboard import delta

from . import messages
from .backoff import Backoff

log = logging.getLogger("leaderboard.client")

Message = dict[str, Any]
Listener = Callable[[Message], None]
Subscription = tuple[str, str]  # (board, window)


class LeaderboardClient:
    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        backoff: Backoff | None = None,
        open_timeout: float = 5.0,
        deltas: bool = True,
        ca_file: str | None = None,
    ) -> None:
        self.url = url
        self.ssl = tls_context(ca_file) if url.startswith("wss://") else None
        self.token = token
        self.deltas = deltas
        self.backoff = backoff or Backoff()
        self.open_timeout = open_timeout
        self.status = "idle"  # idle, connecting, live, reconnecting, refused, closed
        self.retry_in: float | None = None  # seconds until the next attempt while reconnecting
        self.reason: str | None = None  # why the last connection ended: its close reason, a refusal's code
        self.welcome: Message | None = None
        self.snapshots: dict[Subscription, Message] = {}
        self.ranks: dict[Subscription, Message] = {}
        self.connects = 0
        self.refused: Refused | None = None  # set when the gateway closed with 1008: no retry
        self._last_error: Message | None = None
        self._close_reason = ""
        self._subscriptions: dict[Subscription, None] = {}  # ordered set
        self._watch: Message | None = None  # the last ``watch`` asked for, sent again on reconnect
        self._resyncing: set[Subscription] = set()  # boards whose full snapshot was asked for
        self.resyncs = 0  # full snapshots asked for because a delta did not fit
        self._listeners: list[Listener] = []
        self._pending: dict[str, asyncio.Future[Message]] = {}
        self._ids = itertools.count(1)
        self._ws: ClientConnection | None = None
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._last_seen = 0.0

    # --- lifecycle

    async def __aenter__(self) -> LeaderboardClient:
        self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    def start(self) -> None:
        """Start the connection loop; calling it again while it runs does nothing (one loop only)."""
        if self._task is None or self._task.done():
            self._closing = False
            self.refused = None  # e.g. started again with a new token
            self._task = asyncio.create_task(self._run(), name="leaderboard-client")

    async def close(self) -> None:
        """Close the connection and stop reconnecting (idempotent)."""
        self._closing = True
        if self._ws is not None:
            await self._ws.close()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._set_status("closed")

    # --- API

    def on(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener`` with every message (and ``{"type": "status", ...}`` changes)."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    def subscribe(self, board: str = "global", window: str | None = None) -> None:
        key = (board, window or "")
        self._subscriptions[key] = None
        if self.status == "live":
            self._send_nowait(self._subscribe_message(key))

    def unsubscribe(self, board: str = "global", window: str | None = None) -> None:
        key = (board, window or "")
        self._subscriptions.pop(key, None)
        if self.status == "live":
            self._send_nowait({"type": "unsubscribe", "board": board, **({"window": window} if window else {})})

    def watch(self, friends: list[str], *, top: bool = False) -> None:
        """Be told when one of ``friends`` passes this player, or (``top``) when they leave a
        board's top N: ``overtaken`` messages (``on_overtaken``) on every subscribed board.
        Replaces the previous list; kept across reconnects. A player token only."""
        self._watch = {"type": "watch", "friends": list(friends), "top": top}
        if self.status == "live":
            self._send_nowait(self._watch)

    def on_overtaken(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener`` with every ``overtaken`` message: who passed the player (``by``), on
        which board, and their new ``rank`` (docs/protocol.md)."""
        return self.on(lambda msg: listener(msg) if msg.get("type") == "overtaken" else None)

    async def request(self, message: Message, timeout: float = 5.0) -> Message:
        """Send a request and wait for the reply carrying its id (an ``error`` reply raises)."""
        if self.refused is not None:
            raise self.refused
        if self._ws is None or self.status != "live":
            raise ConnectionError("not connected")
        req_id = f"r{next(self._ids)}"
        future: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        self._pending[req_id] = future
        try:
            with contextlib.suppress(ConnectionClosed):  # then the loop fails the future, saying why
                await self._ws.send(orjson.dumps({**message, "id": req_id}).decode())
            reply = await asyncio.wait_for(future, timeout)
        finally:
            self._pending.pop(req_id, None)
        if reply.get("type") == "error":
            raise RequestError(reply.get("code", "error"), reply.get("message", ""))
        return reply

    def send(self, message: Message) -> None:
        """Send a message that has no reply (a friends list); raises ``ConnectionError`` while the
        line is down instead of dropping it unseen (``subscribe`` is the one kept and re-sent)."""
        if self.refused is not None:
            raise self.refused
        if self._ws is None or self.status != "live":
            raise ConnectionError("not connected")
        self._send_nowait(message)

    async def wait_for(self, predicate: Callable[[Message], bool], timeout: float) -> Message:
        """The next message (or status event) for which ``predicate`` is true; raises ``Refused``
        at once if the gateway refused this client (no such message will come)."""
        if self.refused is not None:
            raise self.refused
        future: asyncio.Future[Message] = asyncio.get_running_loop().create_future()

        def listener(msg: Message) -> None:
            if future.done():
                return
            if predicate(msg):
                future.set_result(msg)
            elif msg.get("status") == "refused" and self.refused is not None:
                future.set_exception(self.refused)

        remove = self.on(listener)
        try:
            return await asyncio.wait_for(future, timeout)
        finally:
            remove()

    # --- the connection loop

    async def _run(self) -> None:
        while not self._stopping():
            self._set_status("connecting" if self.connects == 0 else "reconnecting")
            close_code: int | None = None
            retry_after: float | None = None
            started = time.monotonic()
            self._close_reason = ""  # a connection that fails to open has none
            try:
                # offers permessage-deflate (shared compressed frames, when the gateway has them)
                async with connect(self.url, open_timeout=self.open_timeout, ssl=self.ssl) as ws:
                    self._ws = ws
                    started = time.monotonic()
                    close_code = await self._session(ws)
                if close_code == POLICY:  # a bad token (or game, origin): retrying with it cannot help
                    self.refused = Refused(close_code, self._close_reason, self._last_error)
            except InvalidStatus as exc:  # e.g. 503 at the connection cap
                retry_after = _retry_after(exc)
            except ssl.SSLCertVerificationError as exc:  # the same certificate again next time
                self.refused = Untrusted(exc.verify_message or "certificate verify failed")
            except (OSError, TimeoutError, WebSocketException) as exc:
                log.debug("connection failed: %r", exc)
            finally:
                self._ws = None
                self._fail_pending()
            if self._stopping():
                return
            if self.refused is not None:
                log.info("%s", self.refused)
                self.reason = self.refused.code
                self._set_status("refused")
                return
            self.backoff.connected_for(time.monotonic() - started if close_code is not None else 0)
            delay = self.backoff.next_delay(close_code=close_code, retry_after=retry_after)
            self.retry_in = delay
            self.reason = self._close_reason or None
            self._set_status("reconnecting", force=True)  # each wait told, with its length
            await asyncio.sleep(delay)
            self.retry_in = None

    async def _session(self, ws: ClientConnection) -> int | None:
        """Run one connection until it drops; return the close code (None if none was given)."""
        self._last_error = None
        self._resyncing.clear()
        watchdog: asyncio.Task[None] | None = None
        try:
            if self.token or self.deltas:
                hello: Message = {"type": "hello", "token": self.token}
                if self.deltas:
                    hello["deltas"] = True
                # inside: a gateway that refuses the socket (1013) closes it at once, and its
                # close code is what the backoff needs
                await ws.send(orjson.dumps(hello).decode())
            async for frame in ws:
                self._last_seen = time.monotonic()  # even a frame it cannot read proves the line
                try:
                    msg = messages.parse(frame)
                except ValueError as exc:
                    self._report(messages.MALFORMED, f"a server message this client cannot read: {exc}")
                    continue
                if msg["type"] == "welcome":
                    newer = messages.newer_protocol(msg)
                    if newer is not None:
                        self.refused = Incompatible(newer)
                        self._report(messages.PROTOCOL_VERSION, newer)
                        await ws.close(PROTOCOL_ERROR, messages.PROTOCOL_VERSION)
                        break
                    self.welcome = msg  # the handshake's, then again as the answer to hello
                    if watchdog is None:
                        self._on_live(ws)
                        watchdog = asyncio.create_task(self._heartbeat(ws, msg))
                self._dispatch(msg)
        except ConnectionClosed:
            pass
        finally:
            if watchdog is not None:
                watchdog.cancel()
        self._close_reason = ws.close_reason or ""
        return ws.close_code

    def _on_live(self, ws: ClientConnection) -> None:
        self.connects += 1
        self._set_status("live")
        for key in self._subscriptions:
            self._send_nowait(self._subscribe_message(key), ws)
        if self._watch is not None:
            self._send_nowait(self._watch, ws)

    async def _heartbeat(self, ws: ClientConnection, welcome: Message) -> None:
        """App-level ping; a line that has been silent for ``timeout`` is dead (a tablet in a tunnel)."""
        beat = welcome.get("heartbeat") or {}
        interval = float(beat.get("interval", 15))
        timeout = float(beat.get("timeout", 2 * interval))
        self._last_seen = time.monotonic()
        while True:
            await asyncio.sleep(min(interval, timeout / 2))
            if time.monotonic() - self._last_seen > timeout:
                log.info("no message for %.0f s: reconnecting", timeout)
                ws.transport.abort()  # don't wait for a closing handshake on a dead line
                return
            await ws.send('{"type":"ping"}')

    def _dispatch(self, msg: Message) -> None:
        kind = msg.get("type")
        if kind == "error" and "id" not in msg:
            self._last_error = msg  # what a 1008 close is about (the reason is only its code)
        if kind == "delta":
            snapshot = self._applied(msg)
            if snapshot is None:
                return
            msg, kind = snapshot, "snapshot"
        if kind == "snapshot":
            self.snapshots[(msg["board"], msg["window"])] = msg
            self._resyncing.discard((msg["board"], msg["window"]))
        elif kind == "rank" and "id" not in msg:
            self.ranks[(msg["board"], msg["window"])] = msg
        req_id = msg.get("id")
        if isinstance(req_id, str) and req_id in self._pending:
            future = self._pending.pop(req_id)
            if not future.done():
                future.set_result(msg)
        self._tell(msg)

    def _applied(self, msg: Message) -> Message | None:
        """The snapshot a delta makes of the one held, or None: an older one (its version held
        already), or one that does not fit (the full snapshot is asked for, once)."""
        key = (str(msg.get("board")), str(msg.get("window")))
        try:
            return delta.follow(self.snapshots.get(key), msg)
        except delta.Mismatch:
            if key not in self._resyncing:
                self._resyncing.add(key)
                self.resyncs += 1
                self._send_nowait({"type": "resync", "board": key[0], "window": key[1]})
            return None

    # --- helpers

    def _stopping(self) -> bool:
        return self._closing

    @staticmethod
    def _subscribe_message(key: Subscription) -> Message:
        board, window = key
        return {"type": "subscribe", "board": board, **({"window": window} if window else {})}

    def _send_nowait(self, msg: Message, ws: ClientConnection | None = None) -> None:
        target = ws or self._ws
        if target is not None:
            asyncio.get_running_loop().create_task(target.send(orjson.dumps(msg).decode()))

    def _set_status(self, status: str, *, force: bool = False) -> None:
        if status != self.status or force:
            self.status = status
            reason = self.reason if status in ("reconnecting", "refused") else None
            event: Message = {"type": "status", "status": status, "retry_in": self.retry_in, "reason": reason}
            self._tell(event)

    def _report(self, code: str, message: str) -> None:
        """An error of the client's own (not the server's) for the application: an event, never a
        dead loop; logged too, since a listener may not look."""
        log.warning("%s: %s", code, message)
        self._tell(messages.error_event(code, message))

    def _tell(self, event: Message) -> None:
        for listener in list(self._listeners):
            listener(event)

    def _fail_pending(self) -> None:
        for future in self._pending.values():
            if not future.done():
                future.set_exception(self.refused or ConnectionError("connection lost"))
        self._pending.clear()


POLICY = 1008


class Refused(ConnectionError):
    """The gateway closed the connection with 1008 (a bad or expired token, an unknown game, a
    forbidden origin): the client stops reconnecting, and waiting for a message raises this."""

    def __init__(self, close_code: int, reason: str, error: Message | None) -> None:
        self.close_code, self.reason = close_code, reason
        self.code = str((error or {}).get("code") or reason or "refused")
        detail = (error or {}).get("message")
        super().__init__(
            f"the gateway refused this connection (close {close_code} {reason or 'policy'}"
            + (f": {detail}" if detail else "")
            + ")"
        )


TLS_HANDSHAKE_FAILED = 1015


class Untrusted(Refused):
    """The server's certificate did not verify (an unknown CA, another host's name, expired)."""

    def __init__(self, detail: str) -> None:
        error = {"code": "untrusted_certificate", "message": detail}
        super().__init__(TLS_HANDSHAKE_FAILED, "untrusted certificate", error)


PROTOCOL_ERROR = 1002  # RFC 6455: an endpoint ends the connection over a protocol it cannot follow


class Incompatible(Refused):
    """The server speaks a newer protocol than this client (``welcome.protocol``): the client
    stops instead of guessing at messages it may misread; a newer client is the remedy."""

    def __init__(self, detail: str) -> None:
        error = {"code": messages.PROTOCOL_VERSION, "message": detail}
        super().__init__(PROTOCOL_ERROR, messages.PROTOCOL_VERSION, error)


def tls_context(ca_file: str | None = None) -> ssl.SSLContext:
    """A verifying client context: the system's CAs, or only ``ca_file``'s (PEM)."""
    return ssl.create_default_context(cafile=ca_file)


class RequestError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


def _retry_after(exc: InvalidStatus) -> float | None:
    value = exc.response.headers.get("Retry-After")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None
