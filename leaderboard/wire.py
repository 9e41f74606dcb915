"""Wire messages (JSON text frames, see docs/protocol.md), encoded once with orjson (pure).

The scorer encodes each snapshot once; gateways forward those bytes unchanged to every socket.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import orjson

from .boards import DEFAULT_ID, Definition
from .keys import DEFINED, scope_label
from .profiles import display
from .results import Entry, Standing

# The socket protocol's version, in every ``welcome``: it grows only with a change an older client
# would misread (a field's meaning, a message it must handle). Additions (a new optional field, a
# message a client may ignore) keep it. A client that meets a greater one tells its application
# instead of guessing (docs/clients.md).
PROTOCOL = 1


def encode(message: dict[str, Any]) -> bytes:
    return orjson.dumps(message)


def snapshot(
    *,
    board: str,
    window: str,
    period: str,
    version: int,
    ts_ms: int,
    entries: Iterable[Entry],
    mode: str = "ordinal",
    columns: Sequence[Mapping[str, str]] = (),
) -> bytes:
    """The ``snapshot`` message of one board's top N; ``mode`` is how its ranks treat ties;
    ``columns`` a defined board's keys (name, direction, display), whose values each entry's
    ``keys`` carries."""
    msg: dict[str, Any] = {
        "type": "snapshot",
        "board": board,
        "window": window,
        "period": period,
        "version": version,
        "ts": ts_ms,
        "mode": mode,
        "entries": _rows(entries),
    }
    if columns:
        msg["columns"] = [dict(c) for c in columns]
    return encode(msg)


def error(code: str, message: str, request_id: Any = None) -> bytes:
    return _with_id({"type": "error", "code": code, "message": message}, request_id)


# ---------------------------------------------------------------- gateway messages
# Replies and pushes of the gateways (docs/protocol.md). Built once per message; the hot path
# (snapshots) never goes through here: gateways forward the scorer's bytes unchanged.


def _rows(entries: Iterable[Entry]) -> list[dict[str, Any]]:
    rows = []
    for e in entries:
        row: dict[str, Any] = {"rank": e.rank, "player": e.player, "score": e.score, **display(e.profile)}
        if e.top_percent is not None:
            row["top_percent"] = e.top_percent
        if e.keys is not None:  # a defined board's: as text, exact beyond 2^53 in any client
            row["keys"] = [str(v) for v in e.keys]
            if e.metadata is not None:
                row["meta"] = e.metadata
        rows.append(row)
    return rows


def _with_id(msg: dict[str, Any], request_id: Any) -> bytes:
    if request_id is not None:
        msg["id"] = request_id
    return encode(msg)


def welcome(
    *,
    gateway: str,
    player: str | None,
    role: str,
    heartbeat_interval: float,
    heartbeat_timeout: float,
    windows: Iterable[str],
    window: str,
    top: int,
    game: str,
    deltas: bool = False,
    request_id: Any = None,
) -> bytes:
    """``deltas``: whether this connection's snapshots come as deltas (docs/protocol.md)."""
    return _with_id(
        {
            "type": "welcome",
            "protocol": PROTOCOL,
            "gateway": gateway,
            "game": game,
            "player": player,
            "role": role,
            "heartbeat": {"interval": heartbeat_interval, "timeout": heartbeat_timeout},
            "windows": list(windows),
            "window": window,
            "top": top,
            "deltas": deltas,
        },
        request_id,
    )


def closing(code: int, reason: str) -> bytes:
    """Sent just before a close frame the gateway initiates: a WebSocket stack that cannot read
    the close frame's code (mono's and Unity's ``ClientWebSocket`` refuse 1012 and 1013) learns
    it here. A client that reads close codes may ignore it."""
    return encode({"type": "closing", "code": code, "reason": reason})


def pong(ts_ms: int, request_id: Any = None) -> bytes:
    return _with_id({"type": "pong", "ts": ts_ms}, request_id)


def subscribed(board: str, window: str, request_id: Any = None, *, type_: str = "subscribed") -> bytes:
    """``subscribed`` or (``type_="unsubscribed"``) its counterpart."""
    return _with_id({"type": type_, "board": board, "window": window}, request_id)


def top(
    *, board: str, window: str, period: str, entries: Iterable[Entry], mode: str = "ordinal", request_id: Any = None
) -> bytes:
    msg = {"type": "top", "board": board, "window": window, "period": period, "mode": mode, "entries": _rows(entries)}
    return _with_id(msg, request_id)


def rank(
    *,
    board: str,
    window: str,
    period: str,
    player: str,
    rank: int | None,
    score: int | None,
    size: int,
    top_percent: float | None = None,
    approx: bool = False,
    mode: str = "ordinal",
    request_id: Any = None,
    keys: Sequence[int] | None = None,
) -> bytes:
    """A player's standing: ``rank`` in ``mode``; ``approx`` when it is a rounded estimate;
    ``keys`` a defined board's key values (sent as text, like a snapshot's)."""
    msg: dict[str, Any] = {
        "type": "rank",
        "board": board,
        "window": window,
        "period": period,
        "mode": mode,
        "player": player,
        "rank": rank,
        "score": score,
        "size": size,
        "top_percent": top_percent,
        "approx": approx,
    }
    if keys is not None:
        msg["keys"] = [str(v) for v in keys]
    return _with_id(msg, request_id)


def around(
    *,
    board: str,
    window: str,
    period: str,
    player: str,
    entries: Iterable[Entry],
    mode: str = "ordinal",
    size: int | None = None,
    request_id: Any = None,
) -> bytes:
    """The entries around a player, each with its ``top_percent``; ``size``: the board's."""
    msg = {
        "type": "around",
        "board": board,
        "window": window,
        "period": period,
        "mode": mode,
        "player": player,
        "size": size,
        "entries": _rows(entries),
    }
    return _with_id(msg, request_id)


def ranks(
    *,
    board: str,
    window: str,
    period: str,
    size: int,
    standings: Iterable[Standing],
    mode: str = "ordinal",
    request_id: Any = None,
) -> bytes:
    players = [
        {
            "player": s.player,
            "rank": s.rank,
            "score": s.score,
            "top_percent": s.top_percent,
            "approx": s.approx,
            **display(s.profile),
            # a defined board's key values, as text (like a snapshot's): exact beyond 2^53
            **({} if s.keys is None else {"keys": [str(v) for v in s.keys]}),
        }
        for s in standings
    ]
    msg = {
        "type": "ranks",
        "board": board,
        "window": window,
        "period": period,
        "mode": mode,
        "size": size,
        "players": players,
    }
    return _with_id(msg, request_id)


def stats(*, board: str, window: str, period: str, size: int, players: int, request_id: Any = None) -> bytes:
    """Board size (exact) and distinct players of the window period (HyperLogLog, ~0.8%)."""
    msg = {"type": "stats", "board": board, "window": window, "period": period, "size": size, "players": players}
    return _with_id(msg, request_id)


def recent(*, board: str, window: str, entries: Iterable[dict[str, Any]], request_id: Any = None) -> bytes:
    """The board's last announcements the gateway heard, newest first (each with ``ts``, ms)."""
    return _with_id({"type": "recent", "board": board, "window": window, "entries": list(entries)}, request_id)


def boards(
    definitions: Iterable[Definition],
    *,
    scopes: Sequence[str],
    windows: Sequence[str],
    window: str,
    columns: Sequence[Mapping[str, str]] = (),
    request_id: Any = None,
) -> bytes:
    """The ``boards`` reply: every board of the game a page may offer, each with what it needs to
    read and show it: the game's own ``scopes`` (``global`` first, then the gateway's configured
    ones) in ``windows``, defaulting to ``window``, and each defined board in its own windows,
    defaulting to its first. ``columns`` the game's boards' display hint, when one is stored.
    Only what a viewer needs: a definition's limits and rules stay with the game servers."""
    own = [dict(c) for c in columns]
    listed: list[dict[str, Any]] = [
        {"board": s, "windows": list(windows), "window": window, **({"columns": own} if own else {})} for s in scopes
    ]
    for d in definitions:
        if d.id == DEFAULT_ID:  # the game's own boards, listed above by scope
            continue
        listed.append(
            {
                "board": scope_label(DEFINED, d.id),
                "windows": list(d.windows),
                "window": d.windows[0],
                "columns": [{"name": k.name, "direction": k.direction, "display": k.display} for k in d.keys],
                "metadata": d.metadata_bytes > 0,
            }
        )
    return _with_id({"type": "boards", "boards": listed}, request_id)


def finals(*, board: str, window: str, periods: Iterable[dict[str, Any]], request_id: Any = None) -> bytes:
    """The kept final top N of a window's closed periods (rows as in a snapshot: a defined
    board's with ``keys`` and ``meta``, and its ``columns`` per period)."""
    out = []
    for f in periods:
        kept: dict[str, Any] = {k: f[k] for k in ("period", "start_ms", "end_ms", "closed_ms")}
        kept["entries"] = [_final_row(e) for e in f["top"].get(board, ())]
        if "columns" in f:
            kept["columns"] = f["columns"]
        out.append(kept)
    return _with_id({"type": "finals", "board": board, "window": window, "periods": out}, request_id)


def _final_row(e: dict[str, Any]) -> dict[str, Any]:
    if "keys" not in e:
        return {"rank": e["rank"], "player": e["player"], "score": e["points"]}
    row = {"rank": e["rank"], "player": e["player"], "score": int(e["keys"][0]), "keys": e["keys"]}
    if e.get("meta") is not None:
        row["meta"] = e["meta"]
    return row


def joined(tournament: str, players: Iterable[str], added: int, request_id: Any = None) -> bytes:
    msg = {"type": "joined", "tournament": tournament, "players": list(players), "added": added}
    return _with_id(msg, request_id)


def submitted(submission: str, stream_id: str, request_id: Any = None) -> bytes:
    return _with_id({"type": "submitted", "submission": submission, "stream_id": stream_id}, request_id)


def reply(message: dict[str, Any], request_id: Any = None) -> bytes:
    """A reply to an operator request (``banned``, ``unbanned``, ``corrected``, ``profile``)."""
    return _with_id(message, request_id)
