"""Wire messages (JSON text frames, see docs/protocol.md), encoded once with orjson (pure).

The scorer encodes each snapshot once; gateways forward those bytes unchanged to every socket.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson

from .library import Entry


def encode(message: dict[str, Any]) -> bytes:
    return orjson.dumps(message)


def snapshot(*, board: str, window: str, period: str, version: int, ts_ms: int, entries: Iterable[Entry]) -> bytes:
    """The ``snapshot`` message of one board's top N."""
    rows = []
    for e in entries:
        row: dict[str, Any] = {"rank": e.rank, "player": e.player, "score": e.score}
        if e.name is not None:
            row["name"] = e.name
        rows.append(row)
    return encode(
        {
            "type": "snapshot",
            "board": board,
            "window": window,
            "period": period,
            "version": version,
            "ts": ts_ms,
            "entries": rows,
        }
    )


def error(code: str, message: str, request_id: Any = None) -> bytes:
    msg: dict[str, Any] = {"type": "error", "code": code, "message": message}
    if request_id is not None:
        msg["id"] = request_id
    return encode(msg)
