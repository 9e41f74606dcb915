"""One connection's state, kept small: at 10k sockets every slot counts (``__slots__``).

No per-connection task or queue lives here: the connection handler (websockets' own task) reads,
outbound.py does every write, the sweep task pings. A board a client watches is a
``boards.LiveBoard``, ``(window, scope)``.

``LeanConnection`` is websockets' server connection minus what an idle subscribed socket does not
use (docs/benchmarks.md has the per-connection breakdown this follows): two empty deques of
760 bytes each (an empty deque holds a whole 64-slot block) become lists, the per-connection
``LoggerAdapter`` (with a weak proxy and a dict) becomes the server's one logger, the future
the handshake waited on goes once it is done, and so does the connection's random UUID (~100
bytes with its 128-bit int), which websockets only offers for its users' logs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any, ClassVar, TypeVar

from websockets.asyncio.server import ServerConnection
from websockets.protocol import Protocol, State
from websockets.streams import StreamReader

from leaderboard.auth import SPECTATOR, Identity
from leaderboard.boards import LiveBoard

from .fanout import socket_fd
from .watch import Watch

try:  # websockets' C unmasking, as its own frame parser picks it
    from websockets.speedups import apply_mask
except ImportError:  # pragma: no cover  (websockets built without its C extension)
    from websockets.utils import apply_mask


_PARSE, _AT_EOF = Protocol.parse.__code__, StreamReader.at_eof.__code__
_PONG = 0x8A  # first byte of a pong frame: FIN, no reserved bits, opcode 0xA


def between_frames(parser: object) -> bool:
    """Whether websockets' frame parser (a chain of generators) waits for the first byte of a
    frame: its frame loop (``Protocol.parse``, not the closed connection's ``discard``) suspended
    in the reader's ``at_eof``, not inside a frame it has begun to read."""
    outer, inner = None, parser
    while (deeper := getattr(inner, "gi_yieldfrom", None)) is not None:
        outer, inner = inner, deeper
    return getattr(inner, "gi_code", None) is _AT_EOF and getattr(outer, "gi_code", None) is _PARSE


T = TypeVar("T")


class _SmallQueue(list[T]):
    """The deque operations websockets' frame queue uses, on a list: it holds at most
    ``max_queue`` frames, so popping from the front costs nothing measurable, and an empty list
    is 56 bytes where an empty deque is 760."""

    __slots__ = ()

    def popleft(self) -> T:
        return self.pop(0)

    def extendleft(self, items: Iterable[T]) -> None:
        for item in items:
            self.insert(0, item)


class LeanConnection(ServerConnection):
    """websockets' ``ServerConnection`` (``serve(create_connection=...)``), lighter per socket."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # websockets wraps the logger per connection to name it in debug lines, which this
        # server never enables (its logging policy: lifecycle only): one shared logger will do.
        adapter = self.protocol.logger
        shared = getattr(adapter, "logger", adapter)
        self.protocol.logger = self.logger = shared
        # websockets never reads it; this server logs no connection by id
        self.protocol.id = self.id = None  # type: ignore[assignment]
        self.client: Client | None = None  # the gateway's record of it, once admitted (``attach``)

    def attach(self, client: Client) -> None:
        """From now on ``client.closed`` follows this connection out of OPEN (``send_data``,
        ``connection_lost``)."""
        self.client = client
        if self.protocol.state is not State.OPEN:
            client.shut()

    def send_data(self) -> None:
        writes = bool(self.protocol.writes)  # what super() is about to write through the transport
        super().send_data()
        # websockets calls this after every step that takes the connection out of OPEN (a close
        # frame sent or received, a failure, the end of the peer's stream), so the fan-out
        # reads one flag of the client per socket per tick instead of the connection's state
        # through two objects and two properties.
        client = self.client
        if client is not None:
            if writes:
                client.wrote()
            if self.protocol.state is not State.OPEN and not client.closed:
                client.shut()

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)  # the protocol is CLOSED now, without a send_data
        if self.client is not None:
            self.client.shut()  # before the loop closes the descriptor, whose number may be reused

    def data_received(self, data: bytes) -> None:
        # The sweep's pings come back as one small pong per socket (heartbeat.py): 500 a second
        # at 10,000 sockets and a 20-s interval. websockets' parser spends ~10 µs on each (a
        # generator chain, a Frame, its event); the one case that carries no information but
        # "alive" (a single whole pong answering the pending ping, arriving between frames) is
        # recognised here in ~1 µs. Anything else, including a pong with other bytes around it,
        # goes to websockets, whose rules stay the only ones.
        client = self.client
        if client is not None and client.ping_data is not None and 6 <= len(data) <= 131 and data[0] == _PONG:
            protocol = self.protocol
            if (
                data[1] == 0x80 | (len(data) - 6)  # masked, as a client's frames must be; 7-bit length
                and not client.closed  # OPEN: no closing handshake under way
                and not protocol.reader.buffer
                and between_frames(protocol.parser)
                and apply_mask(data[6:], data[2:6]) == client.ping_data
            ):
                client.ping_data = None
                return
        super().data_received(data)

    def acknowledge_pings(self, data: bytes) -> None:
        # the pong of the sweep's ping, when it came through websockets' parser after all
        client = self.client
        if client is not None and data == client.ping_data:
            client.ping_data = None
        else:
            super().acknowledge_pings(data)

    async def handshake(self, *args: Any, **kwargs: Any) -> None:
        await super().handshake(*args, **kwargs)
        # Only the handshake waits on this future (set when the request arrived): not kept.
        self.request_rcvd = None  # type: ignore[assignment]

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        # Same operations (append, iterate, remove), a list instead of an empty 760-byte deque.
        self.drain_waiters = []  # type: ignore[assignment]
        self.recv_messages.frames.queue = _SmallQueue()  # type: ignore[assignment]

    def frame_waiter(self) -> asyncio.Future[None] | None:
        """A future done once a frame waits for ``recv()`` or the stream of frames has ended
        (then with EOFError); None when that is so already. Pass it to ``frame_waited`` after.

        An idle socket's handler spends its life waiting for the next message. Inside
        ``recv()`` that wait is three coroutines deep (``recv``, the assembler's ``get``, its
        frame queue's ``get``: ~700 bytes per connection); on this future, which is the one the
        frame queue itself would wait on (its ``get_waiter``, set by ``put`` and ``abort``), it is
        none. ``recv()`` then finds the frame and returns without waiting."""
        frames = self.recv_messages.frames
        if frames.queue or self.recv_messages.closed or frames.get_waiter is not None:
            return None
        waiter = frames.get_waiter = self.loop.create_future()
        return waiter

    def frame_waited(self, waiter: asyncio.Future[None]) -> None:
        """The wait is over (a frame, the end, or the handler cancelled): the queue's own
        ``get`` may wait again."""
        waiter.cancel()
        frames = self.recv_messages.frames
        if frames.get_waiter is waiter:
            frames.get_waiter = None


ABUSE_WINDOW_S = 10.0


class Client:
    # Bumped by every change after which a board's sockets may no longer all take a frame
    # straight to their descriptors: bytes through a transport (``wrote``), a close (``shut``),
    # a subscription taken or dropped (``changed``). While it stands, outbound.py writes a board
    # from the descriptors it saved at the last tick, without visiting each socket's objects.
    # One count per process: a change anywhere costs every board one visit, never a wrong write.
    changes: ClassVar[int] = 0

    __slots__ = (
        "address",
        "boards",
        "clean",
        "closed",
        "fd",
        "game",
        "identity",
        "last_ping",
        "over_since",
        "ping_data",
        "ping_sent",
        "ranks",
        "refill_at",
        "skips",
        "strikes",
        "strikes_since",
        "tokens",
        "transport",
        "watch",
        "wire",
        "ws",
    )

    def __init__(self, ws: ServerConnection, now: float, burst: float, identity: Identity = SPECTATOR) -> None:
        self.ws = ws
        self.transport: asyncio.WriteTransport = ws.transport
        self.fd = socket_fd(ws.transport)  # for the fan-out's direct writes; -1: transport only
        self.identity = identity
        self.game = ""  # the game it connected to (gateway/games.py), set once at connect
        # which snapshot frames it takes (gateway/frames.py): DELTAS once its hello asked for them,
        # DEFLATE when its handshake negotiated permessage-deflate as the shared frames need it
        self.wire = 0
        self.address = ""  # the client's address (leaderboard/proxies.py): a spectator's read budget
        # a tuple (48 bytes for one board) rather than a set (216): a socket watches a handful
        self.boards: tuple[LiveBoard, ...] = ()
        # no more writes: dropped, its handler ended, or its closing handshake began (the last
        # set by LeanConnection.send_data)
        self.closed = False
        # Nothing went through the transport since the fan-out last found its buffer empty, so
        # the next frame may go to the descriptor without asking the transport again (an
        # attribute here instead of a call reaching into the event loop's handle, per socket
        # per tick). Every write through the transport clears it (outbound.py, fanout.py,
        # LeanConnection.send_data); only the fan-out sets it.
        self.clean = False
        # flow control: consecutive skipped messages, and since when the buffer is over the bound
        self.skips = 0
        self.over_since = 0.0
        # heartbeats (the sweep task): the pending ping's payload (None: no ping waits for its
        # pong; cleared by LeanConnection when the pong comes), when it was sent
        self.ping_data: bytes | None = None
        self.ping_sent = 0.0
        self.last_ping = now
        # own rank: the last (rank, score) pushed per board, to push only on change
        self.ranks: dict[LiveBoard, tuple[int | None, int | None]] = {}
        # who may overtake it (gateway/overtaken.py): None, as for most sockets, until it asks
        self.watch: Watch | None = None
        # rate limit: a token bucket, and refused messages within the abuse window
        self.tokens = burst  # the caller's one float, not a new one per connection
        self.refill_at = now
        self.strikes = 0
        self.strikes_since = now

    @staticmethod
    def changed() -> None:
        Client.changes += 1

    def wrote(self) -> None:
        """Bytes went through the transport: the fan-out asks it about its buffer again."""
        self.clean = False
        Client.changes += 1

    def shut(self) -> None:
        """No more writes (``closed``)."""
        self.closed = True
        Client.changes += 1

    def add_board(self, key: LiveBoard) -> None:
        if key not in self.boards:
            self.boards = (*self.boards, key)

    def discard_board(self, key: LiveBoard) -> None:
        if key in self.boards:
            self.boards = tuple(k for k in self.boards if k != key)

    def allow(self, now: float, rate: float, burst: int) -> bool:
        """Take a token for one client message; False when the bucket is empty."""
        self.tokens = min(float(burst), self.tokens + (now - self.refill_at) * rate)
        self.refill_at = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False

    def strike(self, now: float) -> int:
        """Count a refused message; returns how many fell within the abuse window."""
        if now - self.strikes_since > ABUSE_WINDOW_S:
            self.strikes, self.strikes_since = 0, now
        self.strikes += 1
        return self.strikes
