"""Wire messages (JSON text frames, see docs/protocol.md), encoded once with orjson (pure).

The scorer encodes each snapshot once; gateways forward those bytes unchanged to every socket.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal, cast

import orjson

from . import messages as m
from .boards import DEFAULT_ID, Definition, home_of, on_offer
from .keys import DEFINED, GLOBAL_SCOPE, SCOPE_KINDS, scope_label
from .profiles import display
from .results import Entry, Standing

# The socket protocol's version, in every ``welcome``: it grows only with a change an older client
# would misread (a field's meaning, a message it must handle). Additions (a new optional field, a
# message a client may ignore) keep it. A client that meets a greater one tells its application
# instead of guessing (docs/clients.md).
PROTOCOL = 1


def encode(message: Mapping[str, Any]) -> bytes:
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
    msg: m.Snapshot = {
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
        msg["columns"] = _columns(columns)
    return encode(msg)


def error(code: str, message: str, request_id: Any = None) -> bytes:
    msg: m.Error = {"type": "error", "code": code, "message": message}
    return _with_id(msg, request_id)


# ---------------------------------------------------------------- gateway messages
# Replies and pushes of the gateways (docs/protocol.md). Built once per message; the hot path
# (snapshots) never goes through here: gateways forward the scorer's bytes unchanged.


def _columns(columns: Sequence[Mapping[str, str]]) -> list[m.Column]:
    return [{"name": c["name"], "direction": c["direction"], "display": c["display"]} for c in columns]


def _rows(entries: Iterable[Entry]) -> list[m.Entry]:
    rows = []
    for e in entries:
        row: m.Entry = {"rank": e.rank, "player": e.player, "score": e.score}
        display(e.profile, row)
        if e.top_percent is not None:
            row["top_percent"] = e.top_percent
        if e.keys is not None:  # a defined board's: as text, exact beyond 2^53 in any client
            row["keys"] = [str(v) for v in e.keys]
            if e.metadata is not None:
                row["meta"] = e.metadata
        rows.append(row)
    return rows


def _with_id(msg: m.WithId, request_id: Any) -> bytes:
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
    msg: m.Welcome = {
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
    }
    return _with_id(msg, request_id)


def closing(code: int, reason: str) -> bytes:
    """Sent just before a close frame the gateway initiates: a WebSocket stack that cannot read
    the close frame's code (mono's and Unity's ``ClientWebSocket`` refuse 1012 and 1013) learns
    it here. A client that reads close codes may ignore it."""
    msg: m.Closing = {"type": "closing", "code": code, "reason": reason}
    return encode(msg)


def pong(ts_ms: int, request_id: Any = None) -> bytes:
    msg: m.Pong = {"type": "pong", "ts": ts_ms}
    return _with_id(msg, request_id)


def subscribed(
    board: str, window: str, request_id: Any = None, *, type_: Literal["subscribed", "unsubscribed"] = "subscribed"
) -> bytes:
    """``subscribed`` or (``type_="unsubscribed"``) its counterpart."""
    msg: m.Subscribed | m.Unsubscribed = (
        {"type": "subscribed", "board": board, "window": window}
        if type_ == "subscribed"
        else {"type": "unsubscribed", "board": board, "window": window}
    )
    return _with_id(msg, request_id)


def top(
    *, board: str, window: str, period: str, entries: Iterable[Entry], mode: str = "ordinal", request_id: Any = None
) -> bytes:
    msg: m.Top = {
        "type": "top",
        "board": board,
        "window": window,
        "period": period,
        "mode": mode,
        "entries": _rows(entries),
    }
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
    msg: m.Rank = {
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
    msg: m.Around = {
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
    players: list[m.Standing] = []
    for s in standings:
        one: m.Standing = {
            "player": s.player,
            "rank": s.rank,
            "score": s.score,
            "top_percent": s.top_percent,
            "approx": s.approx,
        }
        display(s.profile, one)
        if s.keys is not None:  # a defined board's key values, as text (like a snapshot's): exact beyond 2^53
            one["keys"] = [str(v) for v in s.keys]
        players.append(one)
    msg: m.Ranks = {
        "type": "ranks",
        "board": board,
        "window": window,
        "period": period,
        "mode": mode,
        "size": size,
        "players": players,
    }
    return _with_id(msg, request_id)


def watching(friends: Iterable[str], top: bool, request_id: Any = None) -> bytes:
    """The reply to ``watch``: the friends list and top-N choice now in force."""
    msg: m.Watching = {"type": "watching", "friends": list(friends), "top": top}
    return _with_id(msg, request_id)


def overtaken(
    *,
    board: str,
    window: str,
    period: str,
    player: str,
    rank: int | None,
    reason: m.PassedBy,
    by: Mapping[str, Any],
) -> bytes:
    """``player`` was passed on a board: by a friend (``reason="friend"``) or out of its top N
    (``"top"``); ``rank`` is their rank after it, ``by`` who passed them (``player``, ``rank``,
    ``score``, ``name``? and a defined board's ``keys``? as text, as a snapshot's rows)."""
    passer: m.Passer = {"player": by["player"], "rank": by.get("rank"), "score": by.get("score")}
    if by.get("name") is not None:
        passer["name"] = by["name"]
    if by.get("keys") is not None:
        passer["keys"] = [str(v) for v in by["keys"]]
    msg: m.Overtaken = {
        "type": "overtaken",
        "board": board,
        "window": window,
        "period": period,
        "player": player,
        "rank": rank,
        "reason": reason,
        "by": passer,
    }
    return encode(msg)


def stats(*, board: str, window: str, period: str, size: int, players: int, request_id: Any = None) -> bytes:
    """Board size (exact) and distinct players of the window period (HyperLogLog, ~0.8%)."""
    msg: m.Stats = {
        "type": "stats",
        "board": board,
        "window": window,
        "period": period,
        "size": size,
        "players": players,
    }
    return _with_id(msg, request_id)


def recent(*, board: str, window: str, entries: Iterable[m.Heard], request_id: Any = None) -> bytes:
    """The board's last announcements the gateway heard, newest first (each with ``ts``, ms)."""
    msg: m.Recent = {"type": "recent", "board": board, "window": window, "entries": list(entries)}
    return _with_id(msg, request_id)


def boards(
    definitions: Iterable[Definition],
    *,
    listing: Sequence[str],
    named: Iterable[str] = (),
    windows: Sequence[str],
    window: str,
    columns: Sequence[Mapping[str, str]] = (),
    request_id: Any = None,
) -> bytes:
    """The ``boards`` reply: every board of the game a page may offer, each with what it needs to
    read and show it: the game's own, ``global`` first, in ``windows``, defaulting to ``window``,
    and each defined board in its own windows, defaulting to its first, with the scope kinds it is
    kept per (``scopes``). Each home is followed by its scopes' boards on offer, the same for the
    game's and a defined board's (boards.on_offer): the values the gateway lists (``listing``,
    LB_GW_BOARDS), then those slips named (``named``, the scopes set). ``columns`` the game's
    boards' display hint, when one is stored. Only what a viewer needs: a definition's limits and
    rules stay with the game servers."""
    own = _columns(columns)
    by_home: dict[str, list[str]] = {}
    for s in named:
        by_home.setdefault(home_of(s), []).append(s)
    definitions = list(definitions)
    # the game's stored default may keep metadata, as a defined board does
    game: m.BoardInfo = {"board": GLOBAL_SCOPE, "windows": list(windows), "window": window}
    if own:
        game["columns"] = own
    if any(d.metadata_bytes > 0 for d in definitions if d.id == DEFAULT_ID):
        game["metadata"] = True
    listed = _with_scopes(game, on_offer(DEFAULT_ID, SCOPE_KINDS, listing, by_home.get(GLOBAL_SCOPE, ())))
    for d in definitions:
        if d.id == DEFAULT_ID:  # the game's own boards, listed above
            continue
        info: m.BoardInfo = {
            "board": scope_label(DEFINED, d.id),
            "windows": list(d.windows),
            "window": d.windows[0],
            "columns": [{"name": k.name, "direction": k.direction, "display": k.display} for k in d.keys],
            "metadata": d.metadata_bytes > 0,
        }
        if not d.scopes:
            listed.append(info)
            continue
        info["scopes"] = list(d.scopes)  # a page opens a region's board as board:<id>:region:<name>
        listed += _with_scopes(info, on_offer(d.id, d.scopes, listing, by_home.get(info["board"], ())))
    msg: m.Boards = {"type": "boards", "boards": listed}
    return _with_id(msg, request_id)


def _with_scopes(home: m.BoardInfo, scopes: Iterable[str]) -> list[m.BoardInfo]:
    """A home board, then each of its scopes' boards, read and shown as it is."""
    shown = {k: v for k, v in home.items() if k != "scopes"}
    return [home, *(cast(m.BoardInfo, {**shown, "board": s}) for s in scopes)]


def finals(*, board: str, window: str, periods: Iterable[dict[str, Any]], request_id: Any = None) -> bytes:
    """The kept final top N of a window's closed periods (rows as in a snapshot: a defined
    board's with ``keys`` and ``meta``, and its ``columns`` per period)."""
    out: list[m.FinalPeriod] = []
    for f in periods:
        kept: m.FinalPeriod = {
            "period": f["period"],
            "start_ms": f["start_ms"],
            "end_ms": f["end_ms"],
            "closed_ms": f["closed_ms"],
            "entries": [_final_row(e) for e in f["top"].get(board, ())],
        }
        if "columns" in f:
            kept["columns"] = f["columns"]
        out.append(kept)
    msg: m.Finals = {"type": "finals", "board": board, "window": window, "periods": out}
    return _with_id(msg, request_id)


def _final_row(e: dict[str, Any]) -> m.FinalEntry:
    if "keys" not in e:
        return {"rank": e["rank"], "player": e["player"], "score": e["points"]}
    row: m.FinalEntry = {"rank": e["rank"], "player": e["player"], "score": int(e["keys"][0]), "keys": e["keys"]}
    if e.get("meta") is not None:
        row["meta"] = e["meta"]
    return row


def joined(tournament: str, players: Iterable[str], added: int, request_id: Any = None) -> bytes:
    msg: m.Joined = {"type": "joined", "tournament": tournament, "players": list(players), "added": added}
    return _with_id(msg, request_id)


def submitted(submission: str, stream_id: str, request_id: Any = None) -> bytes:
    msg: m.Submitted = {"type": "submitted", "submission": submission, "stream_id": stream_id}
    return _with_id(msg, request_id)


def reply(message: m.OperatorReply, request_id: Any = None) -> bytes:
    """A reply to an operator request (``banned``, ``unbanned``, ``corrected``, ``profile``)."""
    return _with_id(message, request_id)
