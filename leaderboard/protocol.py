"""Client messages to typed requests (pure: no I/O). docs/protocol.md is the contract; the
WebSocket gateway and the HTTP API check their requests here alike.

``parse()`` returns a request dataclass or raises ``ProtocolError`` with a stable code; nothing
here knows about sockets, roles or Redis::

    parse('{"type":"subscribe","board":"region:eu","id":3}', windows=["weekly"], default_window="weekly")
    # Subscribe(id=3, board="region:eu", window="weekly")
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import orjson

from leaderboard.boards import BOARD_WINDOWS, MAX_KEYS
from leaderboard.errors import INPUT_CODES, LeaderboardError
from leaderboard.keys import DEFINED, GLOBAL_SCOPE, SCOPE_KINDS, defined_of, parse_scope, scope_in
from leaderboard.profiles import is_player_id
from leaderboard.windows import check_tournament, tournament_of

MAX_ID_CHARS = 64
MAX_TOP = 100
MAX_AROUND = 25
MAX_FRIENDS = 100
MAX_JOIN = 1000
MAX_FINALS = 10
MAX_PERIOD_CHARS = 32

# What the parser knows of the game's defined boards: the windows a board id keeps, its first
# one a read's default, or None when no board of that id is defined (the registry a process
# holds, leaderboard/definitions.py; replies.parse asks Redis again before it says unknown_board).
# The windows a defined board keeps, by its name (board:<id>, board:<id>:region:<r>); None: no such board.
BoardWindows = Callable[[str], Sequence[str] | None]


class ProtocolError(LeaderboardError):
    def __init__(self, code: str, message: str, request_id: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.request_id = request_id


@dataclass(frozen=True, slots=True)
class Request:
    id: Any  # echoed in the reply; str or int, or None


@dataclass(frozen=True, slots=True)
class BoardRequest(Request):
    board: str
    window: str


@dataclass(frozen=True, slots=True)
class Hello(Request):
    token: str | None
    deltas: bool | None = None  # snapshot deltas asked for (True) or given up (False); None: as before


@dataclass(frozen=True, slots=True)
class Ping(Request):
    pass


@dataclass(frozen=True, slots=True)
class Boards(Request):
    """The game's boards and how to show them (a page's board picker): anyone may ask."""


@dataclass(frozen=True, slots=True)
class Subscribe(BoardRequest):
    pass


@dataclass(frozen=True, slots=True)
class Unsubscribe(BoardRequest):
    pass


@dataclass(frozen=True, slots=True)
class Resync(BoardRequest):
    """A delta that did not fit: the subscribed board's full snapshot, please."""


# Reads take a ``period``: None (the current one), "previous", or a label such as "2026-W48";
# whether it exists and is still readable is the library's to say (BadPeriod).


@dataclass(frozen=True, slots=True)
class Top(BoardRequest):
    n: int
    period: str | None = None


@dataclass(frozen=True, slots=True)
class Rank(BoardRequest):
    player: str | None  # None: the connection's own player
    period: str | None = None


@dataclass(frozen=True, slots=True)
class Around(BoardRequest):
    player: str | None
    k: int
    period: str | None = None


@dataclass(frozen=True, slots=True)
class Ranks(BoardRequest):
    players: tuple[str, ...]
    period: str | None = None


@dataclass(frozen=True, slots=True)
class Watch(Request):
    """Who may overtake the connection's player: ``friends`` (replaced whole; empty: none), and
    whether leaving a board's top N counts too (``top``), on every board it subscribes to."""

    friends: tuple[str, ...]
    top: bool


@dataclass(frozen=True, slots=True)
class Stats(BoardRequest):
    period: str | None = None


@dataclass(frozen=True, slots=True)
class Recent(BoardRequest):
    pass


@dataclass(frozen=True, slots=True)
class Finals(BoardRequest):
    n: int  # closed periods, newest first


@dataclass(frozen=True, slots=True)
class Join(Request):
    tournament: str
    players: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Submit(Request):
    fields: Mapping[str, Any]  # checked by Submission.parse (same codes as the scorer)


@dataclass(frozen=True, slots=True)
class Status(Request):
    submission: str  # a submission id: what became of it (applied, pending, refused, unknown)


@dataclass(frozen=True, slots=True)
class Ban(Request):
    player: str
    reason: str  # checked by leaderboard.moderation (same codes as the scorer's commands)


@dataclass(frozen=True, slots=True)
class Unban(Request):
    player: str
    reason: str


@dataclass(frozen=True, slots=True)
class Correct(Request):
    player: str
    points: Any  # checked by leaderboard.moderation (invalid_points, as on the command line)
    reason: str
    window: str | None  # None: every window
    period: str | None  # None: the current one
    scopes: tuple[str, ...] | None  # None: global and every scope the player is on
    # a defined board's correction (scopes board:<id>): its key values, or remove; metadata
    # (None: kept) — checked by leaderboard.moderation, as points are
    values: tuple[Any, ...] | None = None
    metadata: str | None = None
    remove: bool = False


@dataclass(frozen=True, slots=True)
class SetProfile(Request):
    player: str | None  # None: the connection's own player
    fields: Mapping[str, str]  # checked by leaderboard.profiles.Profile


@dataclass(frozen=True, slots=True)
class DefineBoard(Request):
    action: str  # create, update, delete, show, list
    board: str | None  # delete, show
    definition: Mapping[str, Any] | None  # create, update (checked by leaderboard/boards/definition.py)


BOARD_ACTIONS = ("create", "update", "delete", "show", "list")


def parse(
    raw: str | bytes, *, windows: Sequence[str], default_window: str, boards: BoardWindows | None = None
) -> Request:
    """A text frame's request. ``bytes`` is a binary frame: the protocol is JSON text only (a
    binary frame would skip the UTF-8 check websockets makes of text), so it is refused."""
    if isinstance(raw, bytes):
        raise ProtocolError("binary_frame", "messages are JSON text frames; binary frames are refused")
    try:
        msg = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise ProtocolError("bad_json", "the frame is not valid JSON") from None
    if not isinstance(msg, dict):
        raise ProtocolError("bad_json", "the frame is not a JSON object")
    return parse_message(msg, windows=windows, default_window=default_window, boards=boards)


def parse_message(
    msg: dict[str, Any], *, windows: Sequence[str], default_window: str, boards: BoardWindows | None = None
) -> Request:
    """A decoded message's request (the HTTP API builds one from a route and its query).
    ``windows`` and ``default_window`` are the game's own boards'; ``boards`` the defined boards'
    (without it a defined board is not checked here: the library refuses it)."""
    rid = msg.get("id")
    if rid is not None and not _valid_id(rid):
        raise ProtocolError("bad_message", "id must be a string or number of at most 64 characters")
    kind = msg.get("type")
    parser = _PARSERS.get(kind) if isinstance(kind, str) else None
    if parser is None:
        raise ProtocolError("unknown_type", f"unknown message type {kind!r}"[:120], rid)
    try:
        return parser(msg, rid, _Boards(windows, default_window, boards))
    except ProtocolError as exc:
        exc.request_id = rid
        raise


def _valid_id(rid: object) -> bool:
    if isinstance(rid, bool):
        return False
    if isinstance(rid, str):
        return len(rid) <= MAX_ID_CHARS
    if isinstance(rid, int):
        return len(str(rid)) <= MAX_ID_CHARS
    return False


def _bad(message: str) -> ProtocolError:
    return ProtocolError("bad_message", message)


def board_name(board: str) -> str:
    """A board as a client names it, in the one form replies carry: ``global``, ``region:<name>``,
    ``mode:<name>``, ``board:<id>``; a defined board's bare id (``speedrun``, as the command line
    names it) is ``board:speedrun``. ``global`` is always the game's own board (a defined board
    of that id is ``board:global``). ValueError for anything else."""
    if board != GLOBAL_SCOPE and ":" not in board:
        board = f"{DEFINED}:{board}"
    return parse_scope(board)


def named_fields(board: str) -> list[tuple[str, str]]:
    """The submission fields a board's name sets: ``board:tower:region:eu`` board ``tower`` and
    region ``eu``; ``region:eu`` region ``eu``; ``global`` none. ValueError for a name no board has."""
    label = board_name(board)
    board_id = defined_of(label)
    if board_id is None:
        return [] if label == GLOBAL_SCOPE else [cast(tuple[str, str], tuple(label.split(":", 1)))]
    named = scope_in(label)
    return [(DEFINED, board_id), *([named] if named else [])]


def with_board(fields: Mapping[str, Any], board: str) -> dict[str, Any]:
    """A submission's ``fields`` to the defined board ``board`` as a client names it: its id as a
    submission carries it (``board_id``) and, for one scope's board ``board:<id>:region:<r>``,
    that region (ProtocolError invalid_scope when the fields name another)."""
    out = {**fields, "board": board_id(board)}
    scope = scope_in(board) if defined_of(board) else None
    if scope is not None:
        kind, value = scope
        if out.get(kind, value) != value:
            raise ProtocolError("invalid_scope", f"the submission's {kind} is not the board's")
        out[kind] = value
    return out


def board_id(board: str) -> str:
    """A defined board's id as a submission carries it: ``board:speedrun`` or ``speedrun`` is
    ``speedrun`` (anything else as given, for the id's own check to refuse)."""
    return defined_of(board) or board


@dataclass(frozen=True, slots=True)
class _Boards:
    """The boards a message may name: the game's own (``windows``, a read's ``default`` window)
    and the defined ones (``defined``)."""

    windows: Sequence[str]
    default: str
    defined: BoardWindows | None

    def kept(self, board: str, *, known: bool = True) -> tuple[Sequence[str], str]:
        """The windows ``board`` keeps and its default; unknown_board for a defined board nobody
        defined (or deleted), unless ``known`` is False (leaving a board needs no board)."""
        board_id = defined_of(board)
        if board_id is None:
            return self.windows, self.default
        found = None if self.defined is None else self.defined(board)
        if found is None:
            if self.defined is None or not known:  # not known here: the library's to refuse
                return BOARD_WINDOWS, self.default
            raise ProtocolError(
                "unknown_board",
                f"no board {board!r}: {board_id!r} is not defined, or not kept per that scope ({board} names a "
                f"defined board; the game's own are global, {', '.join(k + ':<name>' for k in SCOPE_KINDS)})",
            )
        return found, found[0]

    def check_window(self, board: str, win: str, kept: Sequence[str]) -> str:
        if win not in kept and tournament_of(win) is None:
            raise ProtocolError(
                "invalid_window", f"board {board} keeps the windows {', '.join(kept)} (and t-<tournament>), not {win!r}"
            )
        return win


def _named_board(board: object) -> str:
    if not isinstance(board, str):
        raise _bad("board must be a string")
    try:
        return board_name(board)
    except ValueError as exc:
        raise ProtocolError("bad_board", str(exc)) from None


def _board(msg: dict[str, Any], boards: _Boards, *, known: bool = True) -> tuple[str, str]:
    """The board a message names and its window: the one named, else the board's first (a
    defined board's own, not the game's default)."""
    board, win = _named_board(msg.get("board", GLOBAL_SCOPE)), msg.get("window")
    if win is not None and not isinstance(win, str):
        raise _bad("board and window must be strings")
    kept, default = boards.kept(board, known=known)
    return board, default if win is None else boards.check_window(board, win, kept)


def _period(msg: dict[str, Any]) -> str | None:
    period = msg.get("period")
    if period is None:
        return None
    if not isinstance(period, str) or not 0 < len(period) <= MAX_PERIOD_CHARS:
        raise ProtocolError("bad_period", f"period must be a label of 1-{MAX_PERIOD_CHARS} characters, e.g. previous")
    return period


def _live(msg: dict[str, Any]) -> None:
    if msg.get("period") is not None:
        raise ProtocolError("bad_period", "subscriptions follow the current period; read past ones with top or rank")


def _int(msg: dict[str, Any], name: str, default: int, lo: int, hi: int) -> int:
    value = msg.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise _bad(f"{name} must be an integer in {lo}..{hi}")
    return value


def _player(value: object, name: str = "player") -> str:
    if not is_player_id(value):  # the one rule of player ids (leaderboard/profiles.py)
        raise _bad(f"{name} must be a player id: {INPUT_CODES['invalid_player']}")
    return str(value)


def _optional_player(msg: dict[str, Any]) -> str | None:
    return None if msg.get("player") is None else _player(msg["player"])


def _hello(msg: dict[str, Any], rid: Any, boards: _Boards) -> Request:
    token = msg.get("token")
    if token is not None and not isinstance(token, str):
        raise _bad("token must be a string")
    deltas = msg.get("deltas")
    if deltas is not None and not isinstance(deltas, bool):
        raise _bad("deltas must be true or false")
    return Hello(rid, token or None, deltas)


def _ping(msg: dict[str, Any], rid: Any, boards: _Boards) -> Request:
    return Ping(rid)


def _boards(msg: dict[str, Any], rid: Any, boards: _Boards) -> Request:
    return Boards(rid)


def _subscribe(msg: dict[str, Any], rid: Any, boards: _Boards) -> Request:
    _live(msg)
    return Subscribe(rid, *_board(msg, boards))


def _unsubscribe(msg: dict[str, Any], rid: Any, boards: _Boards) -> Request:
    return Unsubscribe(rid, *_board(msg, boards, known=False))  # a deleted board is left too


def _resync(msg: dict[str, Any], rid: Any, boards: _Boards) -> Request:
    return Resync(rid, *_board(msg, boards, known=False))


def _top(msg: dict[str, Any], rid: Any, boards: _Boards) -> Request:
    board, win = _board(msg, boards)
    return Top(rid, board, win, _int(msg, "n", 10, 1, MAX_TOP), _period(msg))


def _rank(msg: dict[str, Any], rid: Any, boards: _Boards) -> Request:
    board, win = _board(msg, boards)
    return Rank(rid, board, win, _optional_player(msg), _period(msg))


def _around(msg: dict[str, Any], rid: Any, boards: _Boards) -> Request:
    board, win = _board(msg, boards)
    return Around(rid, board, win, _optional_player(msg), _int(msg, "k", 5, 0, MAX_AROUND), _period(msg))


def _ranks(msg: dict[str, Any], rid: Any, boards: _Boards) -> Request:
    board, win = _board(msg, boards)
    players = msg.get("players")
    if not isinstance(players, list) or not 1 <= len(players) <= MAX_FRIENDS:
        raise _bad(f"players must be a list of 1-{MAX_FRIENDS} player ids")
    return Ranks(rid, board, win, tuple(_player(p, "players[]") for p in players), _period(msg))


def _watch(msg: dict[str, Any], rid: Any, boards: _Boards) -> Request:
    friends, top = msg.get("friends", []), msg.get("top", False)
    if not isinstance(friends, list):
        raise _bad("friends must be a list of player ids")
    if len(friends) > MAX_FRIENDS:
        raise ProtocolError("too_many_friends", f"friends holds at most {MAX_FRIENDS} player ids")
    if not isinstance(top, bool):
        raise _bad("top must be true or false")
    return Watch(rid, tuple(dict.fromkeys(_player(f, "friends[]") for f in friends)), top)


def _stats(msg: dict[str, Any], rid: Any, boards: _Boards) -> Request:
    return Stats(rid, *_board(msg, boards), _period(msg))


def _recent(msg: dict[str, Any], rid: Any, boards: _Boards) -> Request:
    return Recent(rid, *_board(msg, boards))


def _finals(msg: dict[str, Any], rid: Any, boards: _Boards) -> Request:
    board, win = _board(msg, boards)
    return Finals(rid, board, win, _int(msg, "n", 1, 1, MAX_FINALS))


def _join(msg: dict[str, Any], rid: Any, boards: _Boards) -> Request:
    tournament = msg.get("tournament")
    try:
        check_tournament(tournament)  # type: ignore[arg-type]
    except ValueError as exc:
        raise _bad(str(exc)[:120]) from None
    players = msg.get("players")
    if not isinstance(players, list) or not 1 <= len(players) <= MAX_JOIN:
        raise _bad(f"players must be a list of 1-{MAX_JOIN} player ids")
    return Join(rid, tournament, tuple(_player(p, "players[]") for p in players))  # type: ignore[arg-type]


def _submit(msg: dict[str, Any], rid: Any, boards: _Boards) -> Request:
    sub = msg.get("submission")
    if not isinstance(sub, dict):
        raise _bad("submission must be an object")
    if isinstance(sub.get("board"), str):  # board:<id> as reads name it, or the bare id
        sub = with_board(sub, sub["board"])
    for name in ("id", "player", "op", "name", "region", "mode"):
        if name in sub and not isinstance(sub[name], str):
            raise _bad(f"submission.{name} must be a string")
    return Submit(rid, sub)


def _status(msg: dict[str, Any], rid: Any, boards: _Boards) -> Request:
    sid = msg.get("submission")
    if not isinstance(sid, str) or not 0 < len(sid.encode("utf-8", "replace")) <= 64:
        raise _bad("submission must be a submission id of 1-64 bytes")
    return Status(rid, sid)


def _text(msg: dict[str, Any], name: str, *, required: bool = True) -> str:
    value = msg.get(name)
    if value is None and not required:
        return ""
    if not isinstance(value, str):
        raise _bad(f"{name} must be a string")
    return value


def _ban(msg: dict[str, Any], rid: Any, boards: _Boards) -> Request:
    return Ban(rid, _player(msg.get("player")), _text(msg, "reason"))


def _unban(msg: dict[str, Any], rid: Any, boards: _Boards) -> Request:
    return Unban(rid, _player(msg.get("player")), _text(msg, "reason", required=False))


def _correct(msg: dict[str, Any], rid: Any, boards: _Boards) -> Request:
    window, period, scopes = msg.get("window"), msg.get("period"), msg.get("scopes")
    # a defined board keeps windows of its own (a season): moderation checks them against it
    if scopes is not None:
        if not isinstance(scopes, list) or not 1 <= len(scopes) <= 10:
            raise _bad("scopes must be a list of 1-10 boards")
        try:
            scopes = [board_name(scope) for scope in scopes]
        except (ValueError, TypeError, AttributeError):  # null or 3 is no board either
            raise ProtocolError("bad_board", f"no board among {str(scopes)[:60]}") from None
        for scope in scopes:
            boards.kept(scope)  # unknown_board for a defined board nobody defined
    defined = isinstance(scopes, list) and any(defined_of(s) for s in scopes)
    if window is not None and (
        not isinstance(window, str)
        or (
            window not in boards.windows and tournament_of(window) is None and not (defined and window in BOARD_WINDOWS)
        )
    ):
        raise ProtocolError("invalid_window", f"window must be one of {', '.join(boards.windows)} or t-<tournament>")
    if period is not None and not isinstance(period, str):
        raise _bad("period must be a string")
    values, metadata, remove = msg.get("values"), msg.get("metadata"), msg.get("remove", False)
    if values is not None and (not isinstance(values, list) or not 1 <= len(values) <= MAX_KEYS):
        raise _bad(f"values must be a list of 1-{MAX_KEYS} key values")
    if metadata is not None and not isinstance(metadata, str):
        raise _bad("metadata must be a string")
    if not isinstance(remove, bool):
        raise _bad("remove must be true or false")
    return Correct(
        rid,
        _player(msg.get("player")),
        msg.get("points"),
        _text(msg, "reason"),
        window,
        period,
        None if scopes is None else tuple(scopes),
        None if values is None else tuple(values),
        metadata,
        remove,
    )


def _profile(msg: dict[str, Any], rid: Any, boards: _Boards) -> Request:
    fields = msg.get("profile")
    if not isinstance(fields, dict) or not fields:
        raise _bad("profile must be an object with name, avatar and/or country")
    return SetProfile(rid, _optional_player(msg), fields)


def _define_board(msg: dict[str, Any], rid: Any, boards: _Boards) -> Request:
    action = msg.get("action")
    if action not in BOARD_ACTIONS:
        raise _bad(f"action must be one of {', '.join(BOARD_ACTIONS)}")
    board, definition = msg.get("board"), msg.get("definition")
    if action in ("create", "update") and not isinstance(definition, dict):
        raise _bad("definition must be an object (docs/data-model.md, Board definitions)")
    if action in ("delete", "show") and not isinstance(board, str):
        raise _bad("board must be a board id")
    return DefineBoard(rid, action, board if action in ("delete", "show") else None, definition)


_PARSERS = {
    "hello": _hello,
    "ping": _ping,
    "subscribe": _subscribe,
    "unsubscribe": _unsubscribe,
    "resync": _resync,
    "top": _top,
    "rank": _rank,
    "around": _around,
    "ranks": _ranks,
    "watch": _watch,
    "stats": _stats,
    "recent": _recent,
    "submit": _submit,
    "status": _status,
    "join": _join,
    "finals": _finals,
    "ban": _ban,
    "unban": _unban,
    "correct": _correct,
    "profile": _profile,
    "board": _define_board,
    "boards": _boards,
}
