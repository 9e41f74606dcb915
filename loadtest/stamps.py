"""Sockets read with the kernel's receive timestamp (``SO_TIMESTAMPNS``): the I/O under
``loadtest.wsclient``'s readers.

On loopback the kernel stamps the bytes inside the sender's ``write()``, so a delivery's time is
when the gateway delivered it, however long the reading process (sharing the cores with the
gateways) took to read it; the read time is kept apart. One read has one timestamp, its last
segment's: bytes of two writes read together get the later one's.
"""

from __future__ import annotations

import socket
import struct
import time

SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux; absent from some Pythons' socket module
STAMP = struct.Struct("qq")  # struct timespec (CLOCK_REALTIME)
ANCILLARY_SIZE = socket.CMSG_SPACE(STAMP.size)
RECV_SIZE = 65536


def stamped_socket(source: str) -> socket.socket:
    """A non-blocking TCP socket bound to the local address ``source`` whose reads carry the
    kernel's receive timestamp; connect it with ``loop.sock_connect``."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setblocking(False)
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        sock.bind((source, 0))
    except OSError:
        sock.close()
        raise
    return sock


def recv_stamped(sock: socket.socket, size: int = RECV_SIZE) -> tuple[bytes, float, float] | None:
    """(data, arrived, read at) of one read, wall-clock seconds; ``arrived`` is the read time
    where the kernel gave no timestamp. None when there is nothing to read yet; data ``b""``
    when the connection is over (closed or broken)."""
    try:
        data, ancillary, _, _ = sock.recvmsg(size, ANCILLARY_SIZE)
    except BlockingIOError:
        return None
    except OSError:
        data, ancillary = b"", []
    read_at = arrived = time.time()
    for level, kind, raw in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
            sec, nsec = STAMP.unpack_from(raw)
            arrived = sec + nsec / 1e9
    return data, arrived, read_at
