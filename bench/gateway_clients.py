"""``bench.gateway``'s client processes: each opens its share of the sockets (raw non-blocking
sockets, each process on its own 127.0.0.x source address), reads them with recvmsg and records
when each snapshot arrived (the kernel's timestamp) and when it was read."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import select
import socket
from multiprocessing.connection import Connection
from typing import Any

from loadtest.stamps import recv_stamped, stamped_socket
from loadtest.wsclient import OP_TEXT, ClientReader, Closed, Message, Opened, Ping, Refused, client_frame

EXTRA_BOARDS = ("region:eu", "mode:duo")  # --boards 3: what every socket also watches


class _Socket:
    """One benchmark socket: handshake, then note when each snapshot arrived (the kernel's
    receive timestamp, ``loadtest.stamps``) and when it was read; pings are answered so the
    gateways' heartbeats see a live peer."""

    __slots__ = ("arrived", "read", "reader", "ready", "received", "sock", "subscribe", "unconfirmed")

    def __init__(
        self,
        sock: socket.socket,
        sinks: Sinks,
        ready: asyncio.Future[None],
        subscribe: bytes,
        confirms: int,
        received: list[int],
        deflate: bool = False,
    ) -> None:
        self.sock = sock
        self.read, self.arrived = sinks
        self.received = received  # bytes read by this process's sockets, one counter for all
        self.reader = ClientReader("127.0.0.1", "/ws", deflate=deflate)
        self.ready = ready
        self.subscribe = subscribe  # client frames sent once the handshake is done
        self.unconfirmed = confirms  # "subscribed" replies still to come before the socket is ready

    def handshake(self) -> None:
        self.sock.send(self.reader.request())

    def readable(self) -> bool:
        """Read what is there; False once the socket is closed."""
        read = recv_stamped(self.sock)
        if read is None:
            return True
        data, arrived, now = read
        self.received[0] += len(data)
        if not data:
            if not self.ready.done():
                self.ready.set_exception(ConnectionError("closed during handshake"))
            return False
        self.feed(data, now, arrived)
        return True

    def feed(self, data: bytes, now: float, arrived: float) -> None:
        # The clients share the 2 cores with the gateway: every microsecond spent here delays the
        # gateway's fan-out, so a snapshot's version is found, not parsed.
        for event in self.reader.feed(data, arrived):
            if type(event) is Message:
                version = snapshot_version(event)
                if version is not None:
                    self.read.setdefault(version, []).append(now)
                    self.arrived.setdefault(version, []).append(arrived)
                elif event.buf.startswith(b'{"type":"subscribed"', event.start):
                    self.unconfirmed -= 1
                    if not self.unconfirmed and not self.ready.done():
                        self.ready.set_result(None)
            elif type(event) is Ping or type(event) is Closed:  # the end of the stream follows a close
                with contextlib.suppress(OSError):
                    self.sock.send(event.reply)
            elif type(event) is Opened:
                if self.subscribe:
                    with contextlib.suppress(OSError):
                        self.sock.send(self.subscribe)
                if not self.unconfirmed and not self.ready.done():
                    self.ready.set_result(None)
            elif type(event) is Refused and not self.ready.done():
                self.ready.set_exception(ConnectionError(event.reason))


def snapshot_version(event: Message) -> int | None:
    """The version a snapshot or a delta brings (a delta's: the one after its base), found
    rather than parsed; None for any other message."""
    buf, head, end = event.buf, event.start, event.end
    if buf.startswith(b'{"type":"snapshot"', head):
        i = buf.find(b'"version":', head, end) + 10
        return int(buf[i : buf.find(b",", i, end)])
    if buf.startswith(b'{"type":"delta"', head):
        i = buf.find(b'"base":', head, end) + 7
        return int(buf[i : buf.find(b",", i, end)]) + 1
    return None


Sink = dict[int, list[float]]  # snapshot version -> one time per socket that got it
Sinks = tuple[Sink, Sink]  # (read by the client, arrived: kernel timestamp)


async def _client_main(
    conn: Connection,
    port: int,
    count: int,
    source: str,
    read_every: float,
    boards: int = 1,
    confirmed: bool = False,
    wire: str = "",
) -> None:
    """Open ``count`` sockets, then read them every ``read_every`` seconds. ``confirmed``: a
    socket counts as connected once the gateway confirmed each extra board's subscription (the
    RSS per connection is read then); the baselines do not confirm.

    Reading on a cadence rather than the moment bytes arrive: the arrival times come from the
    kernel's timestamps either way, and the client processes, which share the 2 cores with the
    gateway here (on a real network they are other machines), do not compete with the gateway's
    fan-out while it is under way."""
    loop = asyncio.get_running_loop()
    sinks: Sinks = ({}, {})
    peers: dict[int, _Socket] = {}
    ready_fds = select.epoll()
    failed = 0
    sem = asyncio.Semaphore(100)  # handshakes in flight per process
    interval = [0.002]  # while connecting: read at once
    subscribe = b"".join(
        client_frame(OP_TEXT, b'{"type":"subscribe","board":"%s"}' % board.encode())
        for board in EXTRA_BOARDS[: boards - 1]
    )
    if "deltas" in wire:
        subscribe = client_frame(OP_TEXT, b'{"type":"hello","deltas":true}') + subscribe
    received = [0]

    async def reader() -> None:
        while True:
            await asyncio.sleep(interval[0])
            for fd, _ in ready_fds.poll(0, len(peers) + 1):  # not the default cap of 1,023 events
                peer = peers.get(fd)
                if peer is not None and not peer.readable():
                    ready_fds.unregister(fd)
                    del peers[fd]

    async def one() -> None:
        nonlocal failed
        async with sem:
            ready: asyncio.Future[None] = loop.create_future()
            try:
                sock = stamped_socket(source)
                await loop.sock_connect(sock, ("127.0.0.1", port))
                confirms = boards - 1 if confirmed else 0
                peers[sock.fileno()] = peer = _Socket(
                    sock, sinks, ready, subscribe, confirms, received, deflate="deflate" in wire
                )
                ready_fds.register(sock.fileno(), select.EPOLLIN)
                peer.handshake()
                await asyncio.wait_for(ready, 30)
            except (OSError, ConnectionError, TimeoutError):
                failed += 1

    task = loop.create_task(reader())
    await asyncio.gather(*(one() for _ in range(count)))
    interval[0] = read_every
    conn.send(("connected", count - failed))
    while await loop.run_in_executor(None, conn.recv) != "report":  # "start": the publishing begins
        received[0] = 0
    task.cancel()
    conn.send(("report", sinks, received[0]))
    for peer in peers.values():
        peer.sock.close()
    ready_fds.close()


def _client_process(conn: Connection, *args: Any) -> None:
    """A client process: ``_client_main(conn, *args)`` on uvloop."""

    import uvloop

    # The measuring instrument must not pause: its few cycles (the transports) live until the end.
    gc.disable()

    uvloop.run(_client_main(conn, *args))
