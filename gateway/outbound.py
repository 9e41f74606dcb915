"""Every byte this process writes to a WebSocket goes through here: one write path per socket.

Two kinds of message share one flow-control rule, a bound on the transport's write buffer
(``write_buffer``):

* **pushes** (snapshots, announcements, own-rank pushes) may be skipped, because the next one
  supersedes them. A socket over the bound skips; after ``max_skips`` consecutive skips, or
  ``stall_timeout`` over the bound, it is aborted. Fan-out pushes are framed once and written by
  fanout.py (``os.write`` when the transport has nothing queued, optional writer threads). A
  tick's messages are gathered for ``coalesce`` seconds and each socket gets them in one write
  (``publish``, fanout.py says why); announcements and own-rank pushes wait up to ``push_hold``
  to join that write (``publish(held=True)``, ``push_held``). A socket is admitted once per
  tick: one over the bound skips the whole tick, and a held rank push it skips is forgotten as
  seen, so the next round sends it again;
* **replies** (welcome, answers to requests, errors) are never skipped. They go through websockets'
  ``send``, which waits while the buffer is over the same bound (``write_limit``): a client that
  sends requests without reading stops being read, and TCP pushes back on it. The stall clock
  runs meanwhile (``check_stalled``), so such a socket is dropped like a slow reader.

Both write synchronously, in call order (``send`` writes before it waits), so a reply written
before a push reaches the client first: hub.py relies on it (``subscribed`` precedes the board's
first snapshot, which is pushed at once, never gathered). Nothing queues per socket beyond the
bounded transport buffer and, while a tick is gathered, the tick's shared frames (once per
process: snapshots and held announcements) and held rank pushes (one small frame per board a
player watches).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from array import array
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from operator import attrgetter
from typing import overload

from websockets.asyncio.connection import broadcast
from websockets.exceptions import ConnectionClosed
from websockets.protocol import State

from leaderboard import wire

from .client import Client
from .fanout import Writer, plan
from .frames import DELTAS, text_frame
from .metrics import Metrics
from .settings import GatewaySettings

_FD = attrgetter("fd")


@lru_cache(maxsize=64)
def closing_frame(code: int, reason: str) -> bytes:
    """The ``closing`` announcement's frame, built once per close code and reason (a drain
    announces the same one to every socket; the reasons are few: docs/protocol.md)."""
    return text_frame(wire.closing(code, reason))


@dataclass(slots=True)
class _Saved:
    """A board's sockets as the last tick found them, every one open and clean: their
    descriptors in one flat array (what a tick writes), the clients in the same order (only
    read for a short write). Valid while ``Client.changes`` is still ``changes``."""

    audience: Collection[Client]
    changes: int
    fds: array[int]
    clients: tuple[Client, ...]


class _Picked(Sequence[Client]):
    """``clients[i]`` for each i in ``keep``, read only when asked for (a short write)."""

    __slots__ = ("clients", "keep")

    def __init__(self, clients: Sequence[Client], keep: Sequence[int]) -> None:
        self.clients, self.keep = clients, keep

    def __len__(self) -> int:
        return len(self.keep)

    @overload
    def __getitem__(self, i: int) -> Client: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[Client]: ...
    def __getitem__(self, i: int | slice) -> Client | Sequence[Client]:
        if isinstance(i, slice):
            return _Picked(self.clients, self.keep[i])
        return self.clients[self.keep[i]]


class Outbound:
    def __init__(
        self,
        settings: GatewaySettings,
        metrics: Metrics,
        on_drop: Callable[[Client], None],
        on_skip: Callable[[Client], None] | None = None,
    ) -> None:
        self.settings = settings
        self.metrics = metrics
        self._on_drop = on_drop  # the hub forgets a dropped socket's subscriptions at once
        # a socket that skipped a push no longer holds its boards' last versions: the hub sends
        # it full snapshots until it does (deltas apply to the version before only)
        self._on_skip = on_skip
        self._bound = settings.write_buffer
        self._broadcast = settings.fanout == "broadcast"
        self._writer = Writer(settings.fanout_threads)
        self._coalesce = settings.coalesce
        self._hold = settings.push_hold
        self._tick: list[tuple[Collection[Client], bytes, bytes]] = []  # (subscribers, payload, frame)
        self._after: list[Callable[[], None]] = []  # what to call once the gathered tick is written
        self._held: dict[Client, list[bytes]] = {}  # own-rank frames waiting for the tick's write
        self._held_due: list[float] = []  # when each held push was due (loop time)
        self._tick_ts: list[float] = []  # the gathered snapshots' ts (wall clock, s)
        self._flush_at: asyncio.TimerHandle | None = None
        self._saved: dict[int, _Saved] = {}  # id(a board's subscriber set) -> its sockets, saved

    def stop(self) -> None:
        """Release the writer threads and the pending tick (the process is stopping)."""
        if self._flush_at is not None:
            self._flush_at.cancel()
            self._flush_at = None
        self._tick, self._held, self._held_due, self._tick_ts = [], {}, [], []
        self._after = []
        self._saved = {}
        self._writer.close()

    # ------------------------------------------------------------ replies: never skipped

    async def reply(self, client: Client, payload: bytes) -> None:
        """Send one message that must arrive (a reply); waits while the buffer is over the bound."""
        if client.closed:
            return
        # A socket closing under us ends its handler's read loop anyway: nothing to report.
        with contextlib.suppress(ConnectionClosed):
            await client.ws.send(payload, text=True)

    async def close(self, client: Client, code: int, reason: str) -> None:
        """The closing handshake (websockets' own; bounded by its ``close_timeout``), the close
        announced first (``announce``)."""
        if client.ws.state is State.OPEN:
            self.announce(client, code, reason)
            with contextlib.suppress(Exception):
                await client.ws.close(code, reason)

    def announce(self, client: Client, code: int, reason: str) -> None:
        """A ``closing`` message with the close frame's code and reason, written just before it
        (docs/protocol.md, close codes): a client whose WebSocket stack cannot read the code
        still learns it. Never waits: a socket over the buffer bound goes without it (it is
        slow; its close frame queues behind what it has not read anyway)."""
        if client.closed or client.ws.state is not State.OPEN:
            return
        if client.transport.get_write_buffer_size() <= self._bound:
            client.transport.write(closing_frame(code, reason))
            client.wrote()

    # ------------------------------------------------------------ pushes: skipped when slow

    def push(self, client: Client, frame: bytes, now: float) -> bool:
        """Write one pre-framed message that a newer one supersedes; False when skipped (or closed)."""
        if self._admit(client, now):
            client.transport.write(frame)
            client.wrote()
            return True
        return False

    def publish(
        self,
        clients: Collection[Client],
        payload: bytes,
        frame: bytes,
        *,
        held: bool = False,
        ts: float | None = None,
        after: Callable[[], None] | None = None,
    ) -> None:
        """A message for every socket in ``clients`` (a board's live subscriber set: who gets it
        is decided when it is written). With ``coalesce`` > 0 it is gathered with the rest of
        the tick and written by ``flush``, at most ``coalesce`` seconds later, or ``push_hold``
        for a ``held`` one (an announcement: it waits for the next tick); else written at once.
        ``ts``: a snapshot's publish time (``lb_gw_written_lag_seconds`` counts from it);
        ``after``: called once it is written."""
        if self._coalesce <= 0:
            self.fanout(clients, payload, frame)
            self._observe_written([ts] if ts is not None else [])
            if after is not None:
                after()
            return
        self._tick.append((clients, payload, frame))
        if after is not None:
            self._after.append(after)
        if ts is not None:
            self._tick_ts.append(ts)
        self._flush_in(self._hold if held and self._hold > 0 else self._coalesce)

    def push_held(self, client: Client, frames: list[bytes], now: float, hold: float, due: float) -> bool:
        """Own-rank pushes of one socket: admitted now, then written in one write, at once or
        (coalescing on, ``hold`` > 0) with the next tick's frames within ``hold`` seconds.
        ``due``: the loop time the push was due (``lb_gw_rank_push_lag_seconds`` counts from it)."""
        if not self._admit(client, now):
            return False
        if self._coalesce <= 0 or hold <= 0:
            client.transport.write(frames[0] if len(frames) == 1 else b"".join(frames))
            client.wrote()
            self.metrics.rank_push_lag_seconds.observe(asyncio.get_running_loop().time() - due)
            return True
        self._held_due.append(due)
        held = self._held.get(client)
        if held is None:
            self._held[client] = list(frames)
        else:
            held.extend(frames)
        self._flush_in(hold)
        return True

    def ping_held(self, client: Client, frame: bytes, hold: float) -> None:
        """A protocol ping (the heartbeat sweep's, pre-framed): written with the socket's next
        tick write within ``hold`` seconds, or at once when coalescing is off. Not subject to
        the skip rule here: a socket that skips the tick it waits for gets it again
        (``flush``)."""
        if self._coalesce <= 0 or hold <= 0:
            client.transport.write(frame)
            client.wrote()
            return
        held = self._held.get(client)
        if held is None:
            self._held[client] = [frame]
        else:
            held.append(frame)
        self._flush_in(hold)

    def _flush_in(self, delay: float) -> None:
        loop = asyncio.get_running_loop()
        at = loop.time() + delay
        pending = self._flush_at
        if pending is not None:
            if pending.when() <= at:
                return
            pending.cancel()
        self._flush_at = loop.call_at(at, self.flush)

    def flush(self) -> None:
        """Write the gathered tick: one write per socket (fanout.plan), same skip rules."""
        self._flush_at = None
        tick, self._tick = self._tick, []
        held, self._held = self._held, {}
        held_due, self._held_due = self._held_due, []
        tick_ts, self._tick_ts = self._tick_ts, []
        after, self._after = self._after, []
        try:
            self._flush(tick, held, held_due, tick_ts)
        finally:
            for then in after:
                then()

    def _flush(
        self,
        tick: list[tuple[Collection[Client], bytes, bytes]],
        held: dict[Client, list[bytes]],
        held_due: list[float],
        tick_ts: list[float],
    ) -> None:
        if self._broadcast:  # the comparison path writes each message as it always did
            for clients, payload, frame in tick:
                self.fanout(clients, payload, frame)
            for client, frames in held.items():
                if not client.closed:
                    client.transport.write(b"".join(frames))
                    client.wrote()
            self._observe_lag(held_due)
            self._observe_written(tick_ts)
            return
        started = time.perf_counter()
        now = time.monotonic()
        delivered = writes = 0
        messages = [(clients, frame) for clients, _, frame in tick]
        saved = self._saved_for(tick)
        if saved is not None:
            # Nothing changed since the last tick found this board's sockets all open and clean:
            # its frame goes to the saved descriptors, but for the sockets with frames of their
            # own this tick (held pushes, pings), which plan() joins into one buffer as ever.
            frame = messages[0][1]
            mine = {client for client in held if client in saved.audience}
            self._write_saved(saved, frame, {client.fd for client in mine})
            delivered = writes = len(saved.fds) - len(mine)
            messages = [(mine, frame)]
        # plan() reads the subscriber sets before any admission below can drop a socket (a drop
        # removes it from those sets)
        for buffer, count, targets in plan(messages, held):
            direct, fds, queued = self._sort(targets, now)
            admitted = len(direct) + len(queued)
            if admitted < len(targets) and held:
                ready = {*direct, *queued}
                for client in targets:
                    if client in held and client not in ready:
                        client.ranks.clear()  # its held rank push was skipped: send it next round
                        client.ping_data = None  # and its ping: the sweep pings it again
                        client.last_ping = 0.0
            if admitted:
                self._writer.write(direct, buffer, queued, fds)
            delivered += count * admitted
            writes += admitted
        if len(tick) == 1 and saved is None:
            self._save(tick[0][0])
        self.metrics.deliveries.inc(delivered)
        self.metrics.writes.inc(writes)
        if tick:
            self.metrics.broadcast_seconds.observe(time.perf_counter() - started)
        self._observe_lag(held_due)
        self._observe_written(tick_ts)

    def _saved_for(self, tick: list[tuple[Collection[Client], bytes, bytes]]) -> _Saved | None:
        """The one board of a one-board tick, saved and still valid; else None (and saved
        boards no longer valid are forgotten: they hold their clients)."""
        if self._saved and any(saved.changes != Client.changes for saved in self._saved.values()):
            self._saved = {k: saved for k, saved in self._saved.items() if saved.changes == Client.changes}
        if len(tick) != 1:
            return None
        saved = self._saved.get(id(tick[0][0]))
        return saved if saved is not None and saved.audience is tick[0][0] else None

    def _save(self, audience: Collection[Client]) -> None:
        """After a tick written socket by socket: save the board's sockets if every one is open
        and clean now (the ordinary state of a spectator between ticks)."""
        clients = tuple(sorted(audience, key=_FD))  # in descriptor order, as the sockets were accepted
        if clients and all(client.clean and not client.closed for client in clients):
            fds = array("i", [client.fd for client in clients])
            self._saved[id(audience)] = _Saved(audience, Client.changes, fds, clients)

    def _write_saved(self, saved: _Saved, frame: bytes, skip: set[int]) -> None:
        """Write ``frame`` to a saved board's descriptors, those in ``skip`` left out."""
        if not skip:
            self._writer.write(saved.clients, frame, fds=saved.fds)
            return
        keep = [i for i, fd in enumerate(saved.fds) if fd not in skip]
        self._writer.write(_Picked(saved.clients, keep), frame, fds=[saved.fds[i] for i in keep])

    def _observe_written(self, tick_ts: list[float]) -> None:
        # after the writes: the last socket of this process has the snapshot (or it waits in
        # its transport's buffer, as a slow reader's does), whenever the clients read it
        if tick_ts:
            now = time.time()
            for ts in tick_ts:
                self.metrics.written_lag_seconds.observe(max(0.0, now - ts))

    def _observe_lag(self, held_due: list[float]) -> None:
        if held_due:
            written_at = asyncio.get_running_loop().time()
            lag = self.metrics.rank_push_lag_seconds
            for due in held_due:
                lag.observe(written_at - due)

    def fanout(self, clients: Iterable[Client], payload: bytes, frame: bytes) -> int:
        """Write one pre-framed message to every client; returns how many got it."""
        started = time.perf_counter()
        now = time.monotonic()
        direct, fds, queued = self._sort(tuple(clients), now)  # a copy: a drop mutates the set
        admitted = len(direct) + len(queued)
        if self._broadcast:
            # The comparison path (LB_GW_FANOUT=broadcast): same skip rules, websockets frames.
            broadcast([c.ws for c in (*direct, *queued)], payload, text=True)
        else:
            self._writer.write(direct, frame, queued, fds)
        self.metrics.deliveries.inc(admitted)
        self.metrics.writes.inc(admitted)
        self.metrics.broadcast_seconds.observe(time.perf_counter() - started)
        return admitted

    def _sort(self, clients: Sequence[Client], now: float) -> tuple[list[Client], list[int], list[Client]]:
        """Admit each socket (the skip rule, ``_admit``'s) and sort the admitted: those whose
        descriptor may take the frame directly (``fanout.Writer.write`` says which) with their
        descriptors, those whose transport must.
        One pass with every check inlined: it runs once per socket per tick, and at 10,000
        sockets each attribute read and call in it is a measurable share of a delivery. A
        ``clean`` socket (nothing went through its transport since this found it empty: the
        common case, a spectator between ticks) is written directly without asking its
        transport for its buffer's size."""
        direct: list[Client] = []
        fds: list[int] = []
        queued: list[Client] = []
        bound = self._bound
        for client in clients:
            # closed: out of OPEN too (LeanConnection.send_data)
            if client.closed:
                continue
            if client.clean:
                direct.append(client)
                fds.append(client.fd)
                continue
            # A transport closing on its own (the peer reset it) drops writes anyway, and its
            # descriptor is not written to. (A clean socket's is, until its connection_lost
            # sets ``closed``: the descriptor stays open until then, so the write fails or
            # reaches the peer being reset, and the transport drops the rest.)
            transport = client.transport
            if transport.is_closing():
                continue
            held = transport.get_write_buffer_size()
            if held > bound:
                self._skip(client, now)
                continue
            if client.skips or client.over_since:
                client.skips = 0
                client.over_since = 0.0
            if held or client.fd < 0:
                queued.append(client)
            else:
                client.clean = True
                direct.append(client)
                fds.append(client.fd)
        return direct, fds, queued

    def _admit(self, client: Client, now: float) -> bool:
        """Whether one push goes to ``client`` now: open, its buffer within the bound (else it
        skips, and is dropped after too many skips or too long over the bound)."""
        if client.closed or client.ws.state is not State.OPEN:
            return False
        if client.transport.get_write_buffer_size() <= self._bound:
            client.skips = 0
            client.over_since = 0.0
            return True
        self._skip(client, now)
        return False

    def _skip(self, client: Client, now: float) -> None:
        client.skips += 1
        self.metrics.skipped.inc()
        if self._on_skip is not None and client.wire & DELTAS:
            self._on_skip(client)
        if not client.over_since:
            client.over_since = now
        if client.skips > self.settings.max_skips:
            self.drop(client, "slow")
        elif now - client.over_since >= self.settings.stall_timeout:
            self.drop(client, "stalled")

    # ------------------------------------------------------------ dropping

    def check_stalled(self, client: Client, now: float) -> None:
        """Called by the sweep: a buffer over the bound for ``stall_timeout`` drops the socket
        even when no push came to skip (a reply waiting for its buffer to drain, say)."""
        if client.transport.get_write_buffer_size() <= self._bound:
            client.over_since = 0.0
        elif not client.over_since:
            client.over_since = now
        elif now - client.over_since >= self.settings.stall_timeout:
            self.drop(client, "stalled")

    def drop(self, client: Client, reason: str) -> None:
        """Abort a socket now: its backlog is discarded with it, so memory is freed at once.
        The client sees an abnormal close and reconnects with backoff."""
        if client.closed and client.transport.is_closing():  # dropped already, or gone
            return
        client.shut()
        self.metrics.dropped.labels(reason).inc()
        self._on_drop(client)
        client.transport.abort()

    def fail(self, client: Client, code: int, reason: str, metric: str) -> None:
        """Send a close frame without waiting for the closing handshake, then abort.

        websockets has no public call for this (``close()`` waits for the peer, which a dead line
        never answers); its own keepalive does the same two steps, so they are used here, in this
        one place."""
        with contextlib.suppress(Exception):
            client.ws.protocol.fail(code, reason)
            client.ws.send_data()
        self.drop(client, metric)
