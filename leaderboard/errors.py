"""The exception tree of the leaderboard fleet: every error raised on purpose, by the library
wrappers, the queue and the gateways, has one root and a stable ``code``.

::

    LeaderboardError                 code, message
    ├── InvalidSubmission            a submission broke a rule (code from CODES)
    ├── BadRequest                   bad_request: impossible read arguments, or a malformed call
    │   └── BadPeriod                bad_period: a period that is not readable (unknown, future, expired)
    ├── TournamentError              unknown_tournament, tournament_exists, tournament_ended
    ├── BacklogFull                  backlog_full: the submissions queue is at its cap; retry later
    ├── NotReplicated                not_replicated: queued on the master, no replica confirmed it in
    │                                time (LB_WAIT_REPLICAS); retry with the same id
    ├── InvalidInput                 a moderation or profile call broke a rule (code from INPUT_CODES)
    ├── InvalidBoard                 a board definition, or a change of one, broke a rule (BOARD_CODES)
    ├── Banned                       banned: the player is banned (a correction waits for an unban)
    ├── LibraryMismatch              library_mismatch: the function library in Redis is another
    │                                release's (it reads another layout of lb_submit's call)
    ├── Unavailable                  unavailable: no pooled Redis connection came free within
    │                                LB_REDIS_POOL_WAIT; also a redis ConnectionError, so every
    │                                caller that retries a lost connection retries this too
    ├── ClusterDown                  unavailable: the Redis Cluster cannot serve the call now
    │                                (CLUSTERDOWN, no node answers, …); a redis ConnectionError too
    ├── leaderboard.protocol.ProtocolError   a client message was refused (docs/protocol.md codes)
    └── leaderboard.auth.AuthError           invalid_token, token_expired

``ERR <code> <message>`` replies of the function library become these exceptions in one place,
``from_reply()``. Redis' own connection errors are not wrapped: callers retry those (see scorer/).
"""

from __future__ import annotations

import re

from redis.exceptions import ConnectionError as RedisConnectionError

# Stable error codes of submissions; the function library returns the same ones.
CODES = {
    "missing_id": "submission id is required",
    "invalid_id": "submission id must be valid UTF-8 of at most 64 bytes, without control characters",
    "invalid_player": "player must be 1-64 bytes of UTF-8 without control, bidirectional or invisible characters",
    "invalid_name": "name must be valid UTF-8 of at most 64 bytes, without control characters",
    "invalid_points": "points must be a non-negative integer",
    "points_out_of_range": "points exceed the largest value a board's encoding holds",
    "invalid_operator": "operator must be best, incr or set",
    "invalid_timestamp": "timestamp must be integer milliseconds since the epoch",
    "timestamp_in_future": "timestamp is ahead of the server clock",
    "timestamp_too_old": "timestamp is older than the idempotency window",
    "timestamp_outside_window": "timestamp is outside the board's window period",
    "invalid_scope": "region and mode must be 1-32 characters of A-Z a-z 0-9 _ -",
    "invalid_tournament": "tournament must be 1-32 characters of A-Z a-z 0-9 _ -",
    "unknown_tournament": "no such tournament",
    "not_entered": "player is not entered in the tournament",
    "banned": "player is banned from this game",
    "period_closed": "a window period the slip belongs to is closed: its close event and finals are published",
    "too_many_scopes": "the game has as many region and mode values as LB_MAX_SCOPES allows",
    # the HTTP API's Idempotency-Key rule (lb_enqueue): an id is filed with one request body
    "idempotency_conflict": "the submission id was filed with another body",
    # a slip naming a defined board (board, values, meta): BOARD_CODES says the same
    "invalid_board_id": "board must be 1-32 characters of A-Z a-z 0-9 _ -",
    "unknown_board": "no board of that id",
    "wrong_key_count": "the submission carries another number of key values than the board has keys",
    "invalid_key_value": "a key value must be a decimal integer",
    "key_out_of_range": "a key value is outside int64 or the key's min..max",
    "metadata_too_large": "metadata exceeds the board's metadata_bytes, or is not UTF-8",
    "scope_not_kept": "the board is not kept per the region or mode the slip names (its definition's scopes)",
}

# Stable error codes of moderation and profile calls (leaderboard/moderation.py, profiles.py);
# the function library refuses with the same ones (``ERR <code> <message>``).
INPUT_CODES = {
    "invalid_player": "player must be 1-64 bytes of UTF-8 without control, bidirectional or invisible characters",
    "invalid_actor": "actor must be 1-64 bytes of UTF-8 text",
    "invalid_reason": "reason must be 1-256 bytes of UTF-8 text",
    "invalid_points": "points must be a non-negative integer",
    "points_out_of_range": "points exceed the largest value a board's encoding holds",
    "invalid_window": "window must be one of the game's windows",
    "invalid_period": "period must name a period of the window",
    "invalid_scope": "scope must be global, region:<name> or mode:<name>",
    "invalid_name": "name must be 1-64 bytes of UTF-8 text without control characters",
    "invalid_avatar": "avatar must be an https:// URL of at most 256 bytes",
    "invalid_country": "country must be an ISO 3166-1 alpha-2 code in capitals",
    "invalid_profile": "profile fields are name, avatar and country",
    "unknown_dead_letter": "no dead letter of that id",
}

# Stable error codes of board definitions (leaderboard/boards/) and their calls
# (lb_board_put, lb_board_delete), and of the key values a submission to a defined board carries.
BOARD_CODES = {
    "invalid_board": "a definition must be a JSON object of known fields, at most 4096 bytes",
    "board_no_keys": "a board needs 1 to 5 keys",
    "board_too_many_keys": "a board has at most 5 keys",
    "invalid_board_key": "a key is {name, direction, display, operator, min, max} with a distinct name",
    "invalid_direction": "direction must be desc or asc",
    "invalid_display": "display must be number, duration_ms or money",
    "invalid_tie": "tie must be first or last",
    "invalid_rank_mode": "rank_mode must be ordinal, dense or competition",
    "invalid_key_bounds": "a key's min and max must be int64 with min <= max",
    "invalid_board_window": "windows must be distinct daily, weekly, monthly, alltime or season",
    "invalid_time_zone": "time_zone must be UTC, +HH:MM or an IANA zone name",
    "invalid_season": "a season window needs season {start_ms, length_s} (1 hour to 366 days)",
    "invalid_top_n": "top_n must be 1-100",
    "invalid_metadata_limit": "metadata_bytes must be 0-1024",
    "unknown_extension": "extensions must name known extensions",
    "invalid_extension": "an extension's value broke its rule",
    "invalid_board_scopes": "scopes must be a list of distinct region, mode",
    "board_exists": "a board of that id exists; update it instead",
    "board_reorder": "keys, directions, bounds, tie, windows, time zone, dense ranks and scopes of a board are fixed",
    "stale_board": "the board changed since the version the update was made from",
    "too_many_boards": "the game stores LB_MAX_BOARDS definitions, its most: delete one before creating another",
    "invalid_default_board": "the game's default board names no scopes (it is kept per region and mode already) "
    "and keeps no window whose keys expire before LB_IDEMPOTENCY_S",
    # shared with submissions: the same codes, the same words
    **{
        code: CODES[code]
        for code in (
            "invalid_board_id",
            "invalid_operator",
            "unknown_board",
            "wrong_key_count",
            "invalid_key_value",
            "key_out_of_range",
            "metadata_too_large",
            "scope_not_kept",
        )
    },
}


# Stable error codes of a request refused before anything was read or changed, by the socket's
# parser (leaderboard/protocol.py), its tokens (leaderboard/auth.py) and the gateways, and of the
# calls that fail whole (the exceptions below); every code an ``error`` message may carry is in
# one of these tables (``all_codes``, the protocol's published schema: docs/protocol/).
REQUEST_CODES = {
    "bad_json": "the frame is not a JSON object",
    "binary_frame": "a binary frame: every message is a JSON text frame",
    "bad_message": "a field is missing or of the wrong type or range",
    "unknown_type": "type is not a message of the protocol",
    "bad_board": "a board name in none of the forms global, region:<name>, mode:<name>, board:<id>",
    "bad_period": "a period that is malformed, not started, expired, or on a subscribe",
    "bad_request": "impossible read arguments, or a malformed call",
    "auth_required": "the request needs a player or server token",
    "forbidden": "the connection's role may not do this",
    "invalid_token": "a forged, malformed or incomplete token",
    "token_expired": "the token's exp has passed",
    "too_many_subscriptions": "more boards than a connection may watch",
    "too_many_friends": "a watch's friends list is longer than the protocol allows (100)",
    "not_subscribed": "a resync of a board the connection does not watch",
    "rate_limited": "too many messages, or the read budget is spent; retry later",
    "unknown_game": "the game named is not one this gateway serves",
    "unavailable": "Redis is unreachable or did not answer in time; retry later",
    "backlog_full": "the submissions queue is full; retry later",
    "not_replicated": "queued, but no replica confirmed it in time; retry with the same id",
    "tournament_exists": "a tournament of that id exists with other bounds",
    "tournament_ended": "the tournament has ended",
    "library_mismatch": "the function library in Redis is another release's",
}


def all_codes() -> dict[str, str]:
    """Every stable error code with its meaning (a code shared by two tables: the first's)."""
    return {**BOARD_CODES, **INPUT_CODES, **CODES, **REQUEST_CODES}


class LeaderboardError(Exception):
    """Base class of every error the fleet raises on purpose; ``code`` is stable."""

    code = "error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidSubmission(LeaderboardError):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class BadRequest(LeaderboardError):
    code = "bad_request"


class BacklogFull(LeaderboardError):
    code = "backlog_full"


class BadPeriod(BadRequest):
    code = "bad_period"


class TournamentError(LeaderboardError):
    """A tournament that does not exist, exists already with other bounds, or has ended."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class NotReplicated(LeaderboardError):
    """The submissions were queued on the master, but fewer replicas than asked confirmed them
    before the timeout: a failover now could lose them. Retrying with the same ids is safe (a
    submission id is applied once)."""

    code = "not_replicated"


class InvalidInput(LeaderboardError):
    """A moderation or profile call was refused before anything changed; ``code`` in INPUT_CODES."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class InvalidBoard(LeaderboardError):
    """A board definition or a call on one was refused before anything changed; ``code`` in BOARD_CODES."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class Banned(LeaderboardError):
    code = "banned"


class LibraryMismatch(LeaderboardError):
    """The function library in Redis reads another layout of ``lb_submit``'s call than this
    process writes: a process of another release loaded it (every scorer loads its own at start).
    Nothing was written; the call can be sent again once the library matches. ``layout``: the
    library's (0 if it did not say)."""

    code = "library_mismatch"

    @property
    def layout(self) -> int:
        found = re.search(r"reads layout (\d+)", self.message)
        return int(found.group(1)) if found else 0


class Unavailable(LeaderboardError, RedisConnectionError):
    """Every pooled connection to a Redis node stayed busy past the pool's wait: the process is
    asking more of that node than its pool allows (LB_REDIS_POOL_SIZE). Nothing was sent; the
    call may be retried. A ``ConnectionError`` too: for the callers it is Redis unavailable."""

    code = "unavailable"


class ClusterDown(LeaderboardError, RedisConnectionError):
    """A Redis Cluster that cannot serve the call right now, whatever redis-py raised for it:
    ``CLUSTERDOWN`` or ``MASTERDOWN`` (a shard with its master and replicas down; a node just
    restarted, refusing until it is in step with the others), ``TRYAGAIN`` or a redirect that
    kept moving (a slot being moved, a failover being agreed on), a slot no node serves, or no
    node answering at all. For every caller this is Redis being down: back off and call again
    (a submission sent again with its id is applied once). A ``ConnectionError``, so every caller
    that retries a lost connection retries this too (leaderboard/transport.py raises it)."""

    code = "unavailable"


# The codes a whole call of the function library can fail with (``ERR <code> <message>``).
_REPLY_ERRORS: dict[str, type[LeaderboardError]] = {
    "bad_request": BadRequest,
    "backlog_full": BacklogFull,
    "library_mismatch": LibraryMismatch,
    "unknown_tournament": TournamentError,
    "tournament_exists": TournamentError,
    "tournament_ended": TournamentError,
    "banned": Banned,
    "idempotency_conflict": InvalidSubmission,
    **dict.fromkeys(INPUT_CODES, InvalidInput),
    **dict.fromkeys(
        ("board_exists", "unknown_board", "board_reorder", "stale_board", "invalid_board", "too_many_boards"),
        InvalidBoard,
    ),
    # a defined board's correction (lb_correct): its key values and metadata
    **dict.fromkeys(("wrong_key_count", "invalid_key_value", "key_out_of_range", "metadata_too_large"), InvalidBoard),
}


def from_reply(reply: str) -> LeaderboardError | None:
    """The exception for an error reply of the function library (redis-py drops the ``ERR``
    prefix), or None when the reply is not one of the library's codes (a Redis error)."""
    code, _, message = reply.partition(" ")
    kind = _REPLY_ERRORS.get(code)
    if kind is None:
        return None
    if kind is BacklogFull:
        message = f"{message}; retry later"
    if kind is TournamentError:
        return TournamentError(code, message)
    if kind is InvalidInput:
        return InvalidInput(code, message)
    if kind is InvalidBoard:
        return InvalidBoard(code, message)
    if kind is InvalidSubmission:
        return InvalidSubmission(code, message)
    return kind(message)
