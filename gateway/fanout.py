"""Writing one pre-framed message to many sockets.

At 10,000 sockets a snapshot is 10,000 ``write()`` system calls, and the kernel's TCP send path
is most of the fan-out's cost (docs/benchmarks.md). Two things make it cheaper and shorter:

* a socket whose transport has nothing queued gets the frame with ``os.write`` on its file
  descriptor directly, skipping the event loop's per-write bookkeeping; whatever the kernel does
  not take (a full socket buffer, an error) goes to ``transport.write`` afterwards, so bytes stay
  in order and the transport sees errors and closes the connection as usual;
* ``os.write`` releases the GIL, so with ``threads > 1`` large fan-outs are split across writer
  threads and the system calls run on several cores at once.

Safe because the event loop's thread waits for the writers: no callback runs meanwhile, so no
transport writes, closes, or hands a closed descriptor's number to a new connection while the
writers hold it. Only transports that are open and expose a plain (non-TLS) socket are written
to directly.

**One write per socket per tick** (``plan``). A socket watching three boards that all change in
one tick would otherwise cost three ``write()`` calls, and the kernel's per-call work is most of a
delivery's cost. The gateway gathers one tick's messages for a short bounded window
(``LB_GW_COALESCE``; 0 writes each message at once) and writes each socket's frames joined in one
buffer: still separate WebSocket messages, in the order they arrived. Sockets watching the same
boards get the same bytes, so a buffer is joined once per distinct set of boards and written to
all of them, as a single message is (encode once, send many). Announcements and own-rank
pushes, which come between ticks, are held for the next one (``LB_GW_PUSH_HOLD``, 1 s) and join
its buffers: a socket then gets one write per tick, not one per event. Gathering in the gateway rather than having the
scorer publish one message per tick per game keeps every board on its own channel: a gateway
receives only the boards its sockets watch (the channel is the filter, and Redis Cluster's
sharded pub/sub stays per board), the wire protocol and the stored latest snapshots do not
change, and the scorer already publishes a tick's boards in one function call, so they reach
the gateway back to back: a few milliseconds of window catch them all.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Collection, Hashable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from itertools import repeat
from typing import Protocol, TypeVar

MIN_PER_THREAD = 512  # below this many sockets per thread, a thread hand-off costs more than it saves


def socket_fd(transport: asyncio.BaseTransport) -> int:
    """The descriptor to write to directly, or -1 when the transport must do all writes."""
    sock = transport.get_extra_info("socket")
    if sock is None or transport.get_extra_info("sslcontext") is not None:
        return -1
    return int(sock.fileno())


class Target(Protocol):
    """What the writer needs of a connection (gateway.client.Client provides it)."""

    fd: int
    transport: asyncio.WriteTransport
    clean: bool

    def wrote(self) -> None:
        """Bytes went through the transport (clears ``clean``)."""


Leftover = tuple[Target, bytes]

T = TypeVar("T", bound=Hashable)


def plan(
    messages: Sequence[tuple[Collection[T], bytes]], extras: Mapping[T, Sequence[bytes]] | None = None
) -> list[tuple[bytes, int, list[T]]]:
    """One tick's writes: ``messages`` are (subscribers, frame) in arrival order, ``extras`` a
    socket's own frames (rank pushes) to add after them.

    Returns (buffer, messages in it, targets): each target appears once, with the frames of every
    message it subscribes to, in message order, then its extras, joined; "messages" counts the
    tick's messages, not the extras. Targets with the same frames, extras included, share one
    buffer (joined once)."""
    extras = extras or {}
    if len(messages) == 1:
        # the common tick (one board changed): every subscriber gets the one frame, so the
        # per-socket bookkeeping below, two Python loops over every socket, buys nothing
        subscribers, frame = messages[0]
        shared = [target for target in subscribers if target not in extras] if extras else list(subscribers)
        writes = [(frame, 1, shared)] if shared else []

        def mask_of(target: T) -> int:
            return int(target in subscribers)

        def frames_of(mask: int) -> list[bytes]:
            return [frame] if mask else []

    else:
        # Which messages each target gets, as a bit mask: small ints are shared objects, so at
        # 10k sockets this allocates nothing per socket (a list per socket fed the garbage
        # collector).
        mine: dict[T, int] = {}
        get = mine.get
        for i, (targets, _) in enumerate(messages):
            bit = 1 << i
            for target in targets:
                mine[target] = get(target, 0) | bit
        groups: dict[int, list[T]] = {}
        for target, mask in mine.items():
            if target not in extras:
                group = groups.get(mask)
                if group is None:
                    groups[mask] = [target]
                else:
                    group.append(target)

        def mask_of(target: T) -> int:
            return get(target, 0)

        def frames_of(mask: int) -> list[bytes]:
            return [frame for i, (_, frame) in enumerate(messages) if mask >> i & 1]

        writes = [(b"".join(frames_of(mask)), mask.bit_count(), targets) for mask, targets in groups.items()]
    # Targets whose own frames are equal too share a buffer: the heartbeat's pings of one sweep
    # are the same bytes, so its pinged sockets are one more group, not a write setup each.
    with_own: dict[tuple[int, tuple[bytes, ...]], list[T]] = {}
    for target, own in extras.items():
        key = (mask_of(target), tuple(own))
        group = with_own.get(key)
        if group is None:
            with_own[key] = [target]
        else:
            group.append(target)
    writes.extend(
        (b"".join([*frames_of(mask), *own]), mask.bit_count(), targets) for (mask, own), targets in with_own.items()
    )
    return writes


def write_fds(fds: Iterable[int], frame: bytes) -> list[int]:
    """``write(2)`` the same ``frame`` to each descriptor; returns the bytes each took, 0 where
    the call failed (EAGAIN: its buffer is full; a dead peer).

    The loop runs in C (``map`` over ``os.write``): at 10,000 sockets a Python loop around the
    call costs more than the call's own user-space work. A failing call ends the ``map``; the
    results so far stay in the list, and the next ``map`` goes on from the next descriptor."""
    written: list[int] = []
    pending = iter(fds)
    while True:
        try:
            written.extend(map(os.write, pending, repeat(frame)))
            return written
        except OSError:
            written.append(0)


def write_direct(targets: Sequence[Target], frame: bytes, fds: Iterable[int]) -> list[Leftover]:
    """Write ``frame`` to each target's descriptor (``fds``: those descriptors, in order);
    returns what the transports must still write. Each target as ``Writer.write`` requires."""
    written = write_fds(fds, frame)
    size = len(frame)
    if written.count(size) == len(written):
        return []
    return [(target, frame[n:] if n else frame) for target, n in zip(targets, written, strict=True) if n < size]


class Writer:
    def __init__(self, threads: int = 1) -> None:
        self.threads = threads
        self._pool = ThreadPoolExecutor(threads - 1, thread_name_prefix="fanout") if threads > 1 else None

    def write(
        self, targets: Sequence[Target], frame: bytes, queued: Sequence[Target] = (), fds: Sequence[int] | None = None
    ) -> None:
        """Write ``frame`` to every target, ``targets`` through their descriptors, ``queued``
        through their transports; returns once each has it written or queued. A target written
        directly must have a plain socket (``fd`` >= 0), a connection not yet lost (the loop
        closes the descriptor, whose number a new socket may then take, only after the protocol's
        ``connection_lost``) and nothing in its transport (those bytes go first).
        ``fds``: the targets' descriptors, in order, when the caller read them already (at
        10,000 sockets a second pass over the objects costs ~0.1 µs a socket, mostly cache misses).

        Call on the event loop's thread only."""
        parts = min(self.threads, len(targets) // MIN_PER_THREAD)
        if fds is None:
            fds = [target.fd for target in targets]
        if self._pool is None or parts < 2:
            leftover = write_direct(targets, frame, fds)
        else:
            step = -(-len(targets) // parts)
            others = [
                self._pool.submit(write_direct, targets[i : i + step], frame, fds[i : i + step])
                for i in range(step, len(targets), step)
            ]
            leftover = write_direct(targets[:step], frame, fds[:step])  # this thread takes the first part
            for future in others:
                leftover.extend(future.result())
        for target, tail in leftover:
            target.transport.write(tail)
            target.wrote()
        for target in queued:
            target.transport.write(frame)
            target.wrote()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False)
