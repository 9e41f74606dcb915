"""The frames of one board's snapshot, each built once and written to every socket that takes it.

A socket takes one of four frames (its ``Client.wire``): the snapshot or its delta from the
version before (``DELTAS``: its ``hello`` asked for them, leaderboard/delta.py), each as a plain
text frame or compressed (``DEFLATE``: its handshake negotiated permessage-deflate without the
server's context takeover and with the full 15-bit window, so a message compressed on its own
is valid for every such socket: one ``zlib`` pass per board and version, not one per socket).
A socket that asked for deltas but does not hold the version before (it just subscribed, or it
skipped a tick) is in the ``RESYNC`` group of its wire: it gets the full snapshot, then deltas.

Sockets are grouped per board by the frame they take next (``group``): each group is one
subscriber set and one frame, written as the one frame of a board was before (encode once,
send many).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable

from websockets.extensions.permessage_deflate import PerMessageDeflate
from websockets.frames import Frame, Opcode

from leaderboard import delta

DELTAS, DEFLATE, RESYNC = 1, 2, 4

Frames = dict[int, tuple[bytes, bytes]]  # group -> (payload, frame)


def text_frame(payload: bytes) -> bytes:
    """A server-side (unmasked, uncompressed) text frame: identical bytes for every socket."""
    return Frame(Opcode.TEXT, payload).serialize(mask=False)


def deflated_frame(payload: bytes, level: int) -> bytes:
    """A text frame compressed as permessage-deflate sends a message without context takeover
    (RFC 7692 7.2.1: a raw deflate stream, sync-flushed, its 4-byte tail removed)."""
    encoder = zlib.compressobj(level, zlib.DEFLATED, -15)
    data = (encoder.compress(payload) + encoder.flush(zlib.Z_SYNC_FLUSH))[:-4]
    # websockets' Frame refuses RSV1 without its extension objects at hand: the header is
    # RFC 6455's, FIN + RSV1 + text, then the length, unmasked
    n = len(data)
    if n < 126:
        head = bytes((0xC1, n))
    elif n < 1 << 16:
        head = bytes((0xC1, 126)) + n.to_bytes(2, "big")
    else:
        head = bytes((0xC1, 127)) + n.to_bytes(8, "big")
    return head + data


def negotiated(extensions: Iterable[object]) -> int:
    """``DEFLATE`` when a connection's extensions let it take the shared compressed frames."""
    for ext in extensions:
        if isinstance(ext, PerMessageDeflate) and ext.local_no_context_takeover and ext.local_max_window_bits == 15:
            return DEFLATE
    return 0


def group(wire: int, *, fresh: bool) -> int:
    """The group of a socket of ``wire``: ``fresh`` when it holds the board's last version."""
    return wire if fresh or not wire & DELTAS else wire | RESYNC


def build(
    groups: Iterable[int], base: bytes | None, payload: bytes, frame: bytes, full_every: int, level: int
) -> Frames:
    """The frame each of ``groups`` takes for ``payload`` (its plain ``frame`` built already),
    ``base`` the board's snapshot before it (None: none every socket holds): a delta only when
    a group takes one and it is smaller, a compressed frame only when a group takes one."""
    wanted = set(groups)
    delta_payload = None
    if base is not None and any(g & DELTAS and not g & RESYNC for g in wanted):
        delta_payload = delta.encode(base, payload, full_every)
    out: Frames = {}
    deflated: dict[bytes, bytes] = {}
    for g in wanted:
        body = delta_payload if delta_payload is not None and g & DELTAS and not g & RESYNC else payload
        if g & DEFLATE:
            if body not in deflated:
                deflated[body] = deflated_frame(body, level)
            out[g] = (body, deflated[body])
        else:
            out[g] = (body, frame if body is payload else text_frame(body))
    return out
