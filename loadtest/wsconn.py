"""One socket of a load-test client process (``loadtest.wsworker``): a non-blocking TCP socket
the worker's epoll watches, its handshake (after TLS's, with wss://), and what each frame it reads
tells the worker."""

from __future__ import annotations

import contextlib
import socket
import ssl
from typing import Protocol

from client.backoff import Backoff

from .messages import message_type, welcome_gateway
from .stamps import recv_stamped
from .tlspipe import TlsPipe
from .wsclient import ClientReader, Closed, Message, Opened, Ping, Refused


class _Target(Protocol):
    @property
    def host(self) -> str: ...


class Owner(Protocol):
    """What a socket tells the process that holds it (``loadtest.wsworker.Worker``): the
    counters it bumps and the events it reports."""

    @property
    def s(self) -> _Target: ...

    tls: ssl.SSLContext | None
    frames: int
    announces: int
    ranks: int
    welcomes: int

    def path_for(self, index: int) -> str: ...
    def watch(self, conn: Conn) -> None: ...
    def unwatch(self, sock: socket.socket) -> None: ...
    def lost(self, conn: Conn) -> None: ...
    def handshake_done(self, conn: Conn, now: float) -> None: ...
    def handshake_failed(self, conn: Conn, retry_after: float | None) -> None: ...
    def on_snapshot(self, conn: Conn, buf: bytes, head: int, end: int, now: float, read_at: float) -> int: ...
    def stamped_late(self, sids: list[int]) -> None: ...


class Conn:
    """One socket: a non-blocking TCP socket the worker's epoll watches (no asyncio transport),
    read with the kernel's receive timestamp (``loadtest.stamps``) through a ``ClientReader``.

    A delivery's time is its arrival, when the gateway delivered it, however long this process,
    sharing the cores with the gateways, took to read it (kept apart as the read time). One read
    has one timestamp, its last segment's: when this process reads a socket a tick late, the
    earlier tick's snapshot gets the later one's arrival, an upper bound; such deliveries are
    counted (``Worker.stamped_late``)."""

    __slots__ = (
        "backoff",
        "code",
        "gateway",
        "index",
        "opened_at",
        "reader",
        "retry_after",
        "sock",
        "state",
        "tls",
        "w",
        "why",
    )

    def __init__(self, worker: Owner, index: int) -> None:
        self.w = worker
        self.index = index
        self.reader = ClientReader(worker.s.host, worker.path_for(index))
        self.state = 0  # 0 connecting, 1 open, 2 closed
        self.opened_at = 0.0  # wall time of the 101
        self.gateway = ""
        self.code: int | None = None  # close code the server sent
        self.retry_after: float | None = None  # a refused handshake's Retry-After (HTTP 503)
        self.sock: socket.socket | None = None
        self.backoff: Backoff | None = None
        self.why = "closed"  # why a handshake failed: closed by the server unless found otherwise
        self.tls: TlsPipe | None = None

    def attach(self, sock: socket.socket) -> None:
        """The TCP connection is up: watch it, send the handshake (after TLS's, with wss://)."""
        self.sock = sock
        self.w.watch(self)
        if self.w.tls is not None:
            self.tls = TlsPipe(self.w.tls, self.w.s.host)
            self._send(self.tls.start())
        self.write(self.reader.request())

    def write(self, data: bytes) -> None:
        self._send(self.tls.send(data) if self.tls is not None else data)

    def _send(self, data: bytes) -> None:
        # Only the handshake and small control frames (pongs, a close) are written: they fit in
        # an empty send buffer, and a socket that cannot take one is as good as dead.
        if self.sock is not None and data:
            with contextlib.suppress(OSError):
                self.sock.send(data)

    def abort(self) -> None:
        """Close now (what is queued still goes out before the FIN); ``lost`` follows at once."""
        sock = self.sock
        if sock is None:
            return
        self.sock = None
        self.w.unwatch(sock)
        sock.close()
        self.w.lost(self)

    def readable(self) -> None:
        if self.sock is None:
            return
        read = recv_stamped(self.sock)
        if read is None:
            return
        data, arrived, read_at = read
        if not data:
            self.abort()
            return
        if self.tls is not None:
            try:
                data, reply = self.tls.received(data)
            except ssl.SSLError:  # an untrusted certificate, a broken record: never retried as is
                self.why = "tls"
                self.abort()
                return
            self._send(reply)
            if not data:
                return
        self.data_received(data, arrived, read_at)

    def data_received(self, data: bytes, now: float, read_at: float) -> None:
        """``now``: when the bytes arrived (kernel timestamp); ``read_at``: when read here."""
        # The common messages are told apart by their first bytes: these processes share the
        # cores with the gateways, so every microsecond per message here is taken from them.
        w = self.w
        sids: list[int] = []  # snapshots recorded from this read
        for event in self.reader.feed(data, now):
            if type(event) is Message:
                w.frames += 1
                buf, head, end = event.buf, event.start, event.end
                if buf.startswith(b'{"type":"snapshot"', head):
                    sids.append(w.on_snapshot(self, buf, head, end, now, read_at))
                elif buf.startswith(b'{"type":"announce"', head):
                    w.announces += 1
                elif buf.startswith(b'{"type":"rank"', head):
                    w.ranks += 1
                else:
                    payload = event.payload
                    kind = message_type(payload)
                    if kind == b"snapshot":
                        sids.append(w.on_snapshot(self, payload, 0, len(payload), now, read_at))
                    elif kind == b"rank":
                        w.ranks += 1
                    elif kind == b"announce":
                        w.announces += 1
                    elif kind == b"welcome":
                        self.gateway = welcome_gateway(payload)
                        w.welcomes += 1
            elif type(event) is Ping:
                w.frames += 1
                self.write(event.reply)
            elif type(event) is Opened:
                self.state = 1
                self.opened_at = now
                w.handshake_done(self, now)
            elif type(event) is Refused:
                w.handshake_failed(self, event.retry_after)
            elif type(event) is Closed:
                if not event.error:  # the server's close frame
                    w.frames += 1
                self.code = event.code
                self.write(event.reply)
                self.abort()
        if len(sids) > 1:
            w.stamped_late(sids)
