"""The socket protocol's messages, declared once as types (docs/protocol.md).

Every server→client message is a ``TypedDict`` that its encoder builds (leaderboard/wire.py,
leaderboard/replies.py, leaderboard/delta.py), so mypy refuses a field an encoder adds without
its type here; every client→server message is a ``TypedDict`` of the fields its parser
(leaderboard/protocol.py) reads, which tests/test_protocol_schema.py holds equal. The published
JSON Schema and AsyncAPI documents, and the JS client's TypeScript types, are generated from
these (leaderboard/protocolschema.py), so none of them is written twice.

``Annotated[str, Enum(values)]`` narrows a field to known values in the schema without changing
what the code may hold; ``Doc("…")`` describes a field or a message in the documents.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal, NotRequired, TypedDict

from .errors import all_codes
from .ranking import RANK_MODES


@dataclass(frozen=True, slots=True)
class Enum:
    """The values a text field takes (in the schema; the code's type stays ``str``). With a
    ``name``, the schema defines it once under that name, each value with its meaning."""

    values: tuple[str, ...]
    name: str | None = None
    meanings: Mapping[str, str] | None = None


@dataclass(frozen=True, slots=True)
class Doc:
    text: str


RequestId = Annotated[str | int, Doc("echoed in the reply; a string or number of at most 64 characters")]
Mode = Annotated[str, Enum(RANK_MODES), Doc("how the board ranks ties (docs/protocol.md, Rank modes)")]
ErrorCode = Annotated[
    str, Enum(tuple(sorted(all_codes())), "ErrorCode", all_codes()), Doc("a stable error code (docs/protocol.md)")
]
KeyValues = Annotated[list[str], Doc("a defined board's key values as decimal strings (exact over int64)")]


class WithId(TypedDict, total=False):
    id: RequestId


# ---------------------------------------------------------------- parts of messages


class Shown(TypedDict, total=False):
    """A player's display fields, present when the profile has them."""

    name: str
    avatar: Annotated[str, Doc("an https:// URL")]
    country: Annotated[str, Doc("ISO 3166-1 alpha-2, in capitals")]


class Entry(Shown):
    rank: int
    player: str
    score: int
    top_percent: NotRequired[float]
    keys: NotRequired[KeyValues]
    meta: NotRequired[str]


class Column(TypedDict):
    name: str
    direction: str
    display: str


class Heartbeat(TypedDict):
    interval: Annotated[float, Doc("send a ping at least this often (s)")]
    timeout: Annotated[float, Doc("a line silent this long is dead (s)")]


class Standing(Shown):
    player: str
    rank: int | None
    score: int | None
    top_percent: float | None
    approx: bool
    keys: NotRequired[KeyValues]


class BoardInfo(TypedDict):
    board: str
    windows: list[str]
    window: str
    columns: NotRequired[list[Column]]
    metadata: NotRequired[bool]
    # a defined board kept per region or mode: its kinds, each value's board board:<id>:<kind>:<value>
    scopes: NotRequired[list[str]]


class FinalEntry(TypedDict):
    rank: int
    player: str
    score: int
    keys: NotRequired[KeyValues]
    meta: NotRequired[str]


class FinalPeriod(TypedDict):
    period: str
    start_ms: int
    end_ms: int
    closed_ms: int
    entries: list[FinalEntry]
    columns: NotRequired[list[Column]]


class CorrectedBoard(TypedDict):
    window: str
    period: str
    board: str
    previous: int | None
    rank: int | None
    previous_keys: NotRequired[KeyValues | None]


# ---------------------------------------------------------------- server → client


class Welcome(WithId):
    """Right after the handshake, and the reply to ``hello``."""

    type: Literal["welcome"]
    protocol: Annotated[int, Doc("the protocol's version (docs/clients.md, Compatibility)")]
    gateway: str
    game: str
    player: str | None
    role: Annotated[str, Enum(("spectator", "player", "server"))]
    heartbeat: Heartbeat
    windows: list[str]
    window: str
    top: int
    deltas: bool


class Snapshot(TypedDict):
    """A board's top N: on connect, on subscribe, then whenever it changed."""

    type: Literal["snapshot"]
    board: str
    window: str
    period: str
    version: Annotated[
        int, Doc("the board's snapshot count: the one before's + 1; it never repeats nor goes down (docs/protocol.md)")
    ]
    ts: Annotated[int, Doc("when the scorer built it (ms since the epoch)")]
    mode: Mode
    entries: list[Entry]
    columns: NotRequired[list[Column]]


DeltaItem = Annotated[
    int | list[int] | dict[str, Any],
    Doc("k (base entry k), [k, score], {'@': k, …changed fields, '-': [removed]} or a new entry"),
]


class Delta(TypedDict):
    """The next snapshot of a board as a change to the one before (docs/protocol.md, Snapshot deltas)."""

    type: Literal["delta"]
    board: str
    window: str
    base: int
    dt: int
    entries: list[DeltaItem]


class Rank(WithId):
    """The player's own standing: pushed on change, and the reply to ``rank``."""

    type: Literal["rank"]
    board: str
    window: str
    period: str
    mode: Mode
    player: str
    rank: int | None
    score: int | None
    size: int
    top_percent: float | None
    approx: bool
    keys: NotRequired[KeyValues]


class Announce(Shown):
    """Someone entered the top N of a subscribed board (built by the function library)."""

    type: Literal["announce"]
    board: str
    window: str
    period: str
    player: str
    rank: int
    score: int
    keys: NotRequired[KeyValues]
    meta: NotRequired[str]


class Heard(Announce):
    ts: Annotated[int, Doc("when the gateway heard it (ms)")]


class Error(WithId):
    type: Literal["error"]
    code: ErrorCode
    message: str


class Watching(WithId):
    """The reply to ``watch``: the friends list and top-N choice now in force."""

    type: Literal["watching"]
    friends: list[str]
    top: bool


class Passer(Shown):
    """Who passed the player: their standing after it (a defined board's ``keys`` as text)."""

    player: str
    rank: int | None
    score: int | None
    keys: NotRequired[KeyValues]


PassedBy = Literal["friend", "top"]


class Overtaken(TypedDict):
    """Pushed when the connection's player was passed on a subscribed board: by a friend of its
    ``watch`` (``reason`` friend) or out of the board's top N (``top``); ``rank`` is theirs after it."""

    type: Literal["overtaken"]
    board: str
    window: str
    period: str
    player: str
    rank: int | None
    reason: PassedBy
    by: Passer


class Pong(WithId):
    type: Literal["pong"]
    ts: int


class Closing(TypedDict):
    """The last message before a close frame the gateway sends itself, with that frame's code and
    reason: a client whose WebSocket stack cannot read the code (mono, Unity) learns it here."""

    type: Literal["closing"]
    code: Annotated[int, Doc("the close frame's code (docs/protocol.md, Close codes)")]
    reason: Annotated[str, Doc("the close frame's reason")]


class Subscribed(WithId):
    type: Literal["subscribed"]
    board: str
    window: str


class Unsubscribed(WithId):
    type: Literal["unsubscribed"]
    board: str
    window: str


class Top(WithId):
    type: Literal["top"]
    board: str
    window: str
    period: str
    mode: Mode
    entries: list[Entry]


class Around(WithId):
    type: Literal["around"]
    board: str
    window: str
    period: str
    mode: Mode
    player: str
    size: int | None
    entries: list[Entry]


class Ranks(WithId):
    type: Literal["ranks"]
    board: str
    window: str
    period: str
    mode: Mode
    size: int
    players: list[Standing]


class Stats(WithId):
    type: Literal["stats"]
    board: str
    window: str
    period: str
    size: int
    players: Annotated[int, Doc("distinct players of the window period (HyperLogLog, ~0.8%)")]


class Recent(WithId):
    type: Literal["recent"]
    board: str
    window: str
    entries: list[Heard]


class Boards(WithId):
    type: Literal["boards"]
    boards: list[BoardInfo]


class Finals(WithId):
    type: Literal["finals"]
    board: str
    window: str
    periods: list[FinalPeriod]


class Joined(WithId):
    type: Literal["joined"]
    tournament: str
    players: list[str]
    added: int


class Submitted(WithId):
    type: Literal["submitted"]
    submission: str
    stream_id: str


class Status(WithId):
    type: Literal["status"]
    submission: str
    status: Annotated[str, Enum(("applied", "pending", "refused", "unknown"))]
    code: NotRequired[ErrorCode]
    message: NotRequired[str]


class Banned(WithId):
    type: Literal["banned"]
    player: str
    boards: Annotated[int, Doc("boards the player was removed from")]


class Unbanned(WithId):
    type: Literal["unbanned"]
    player: str
    was_banned: bool


class Corrected(WithId):
    type: Literal["corrected"]
    player: str
    points: NotRequired[int]
    values: NotRequired[KeyValues | None]
    boards: list[CorrectedBoard]


class Profile(WithId):
    type: Literal["profile"]
    player: str
    profile: Shown


class Board(WithId):
    """A definition stored or read, every definition, or the id deleted."""

    type: Literal["board"]
    action: Annotated[str, Enum(("create", "update", "delete", "show", "list"))]
    definition: NotRequired[dict[str, Any]]
    boards: NotRequired[list[dict[str, Any]]]
    board: NotRequired[str | None]


# A reply to an operator request, built by leaderboard/replies.py.
OperatorReply = Status | Banned | Unbanned | Corrected | Profile | Board

SERVER: tuple[type, ...] = (
    Welcome, Snapshot, Delta, Rank, Announce, Error, Pong, Closing, Subscribed, Unsubscribed, Top, Around, Ranks,
    Stats, Recent, Boards, Finals, Joined, Submitted, Status, Banned, Unbanned, Corrected, Profile, Board, Watching,
    Overtaken,
)  # fmt: skip


# ---------------------------------------------------------------- client → server
# Each the fields its parser in leaderboard/protocol.py reads (``type`` and ``id`` aside).

BoardName = Annotated[str, Doc("global, region:<name>, mode:<name> or board:<id>; default global")]
WindowName = Annotated[str, Doc("a window the board keeps, or t-<tournament>; default the board's first")]
Period = Annotated[str, Doc("previous, or a period label such as 2026-W48; default the current one")]


class _BoardMessage(WithId, total=False):
    board: BoardName
    window: WindowName


class _Read(_BoardMessage, total=False):
    """A read of a board, in its current period or a past one."""

    period: Period | None


class HelloRequest(WithId):
    type: Literal["hello"]
    token: NotRequired[str | None]
    deltas: NotRequired[bool | None]


class PingRequest(WithId):
    type: Literal["ping"]


class BoardsRequest(WithId):
    type: Literal["boards"]


class SubscribeRequest(_BoardMessage):
    type: Literal["subscribe"]
    period: NotRequired[None]


class UnsubscribeRequest(_BoardMessage):
    type: Literal["unsubscribe"]


class ResyncRequest(_BoardMessage):
    type: Literal["resync"]


class TopRequest(_Read):
    type: Literal["top"]
    n: NotRequired[int]


class RankRequest(_Read):
    type: Literal["rank"]
    player: NotRequired[str | None]


class AroundRequest(_Read):
    type: Literal["around"]
    player: NotRequired[str | None]
    k: NotRequired[int]


class WatchRequest(WithId):
    """Be told (``overtaken``) when one of ``friends`` passes the player, or with ``top`` when they
    leave a board's top N; replaces the last list (empty: none). A player token only."""

    type: Literal["watch"]
    friends: NotRequired[Annotated[list[str], Doc("player ids, at most 100")]]
    top: NotRequired[bool]


class RanksRequest(_Read):
    type: Literal["ranks"]
    players: list[str]


class StatsRequest(_Read):
    type: Literal["stats"]


class RecentRequest(_BoardMessage):
    type: Literal["recent"]


class FinalsRequest(_BoardMessage):
    type: Literal["finals"]
    n: NotRequired[int]


class JoinRequest(WithId):
    type: Literal["join"]
    tournament: str
    players: list[str]


class SubmitRequest(WithId):
    type: Literal["submit"]
    submission: Annotated[dict[str, Any], Doc("a submission (docs/data-model.md): id, player, points, …")]


class StatusRequest(WithId):
    type: Literal["status"]
    submission: str


class BanRequest(WithId):
    type: Literal["ban"]
    player: str
    reason: str


class UnbanRequest(WithId):
    type: Literal["unban"]
    player: str
    reason: NotRequired[str]


class CorrectRequest(WithId):
    type: Literal["correct"]
    player: str
    points: NotRequired[int]
    reason: str
    window: NotRequired[str | None]
    period: NotRequired[str | None]
    scopes: NotRequired[list[str] | None]
    values: NotRequired[list[int | str] | None]
    metadata: NotRequired[str | None]
    remove: NotRequired[bool]


class ProfileRequest(WithId):
    type: Literal["profile"]
    player: NotRequired[str | None]
    profile: Shown


class BoardRequest(WithId):
    type: Literal["board"]
    action: Annotated[str, Enum(("create", "update", "delete", "show", "list"))]
    board: NotRequired[str]
    definition: NotRequired[dict[str, Any]]


CLIENT: tuple[type, ...] = (
    HelloRequest, PingRequest, BoardsRequest, SubscribeRequest, UnsubscribeRequest, ResyncRequest, TopRequest,
    RankRequest, AroundRequest, RanksRequest, StatsRequest, RecentRequest, FinalsRequest, JoinRequest,
    SubmitRequest, StatusRequest, BanRequest, UnbanRequest, CorrectRequest, ProfileRequest, BoardRequest,
    WatchRequest,
)  # fmt: skip

# The reply (carrying the request's ``id``) to each request that has one; an ``error`` with the id
# instead when it is refused. ``resync`` is answered by a pushed ``snapshot``.
REPLIES: dict[type, type] = {
    HelloRequest: Welcome, PingRequest: Pong, BoardsRequest: Boards, SubscribeRequest: Subscribed,
    UnsubscribeRequest: Unsubscribed, TopRequest: Top, RankRequest: Rank, AroundRequest: Around, RanksRequest: Ranks,
    StatsRequest: Stats, RecentRequest: Recent, FinalsRequest: Finals, JoinRequest: Joined, SubmitRequest: Submitted,
    StatusRequest: Status, BanRequest: Banned, UnbanRequest: Unbanned, CorrectRequest: Corrected,
    ProfileRequest: Profile, BoardRequest: Board, WatchRequest: Watching,
}  # fmt: skip
