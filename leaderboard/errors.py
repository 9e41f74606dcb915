"""The exception tree of the leaderboard package.

::

    LeaderboardError
    ├── InvalidSubmission   a submission broke a rule; ``code`` is stable (see CODES)
    ├── BadRequest          a read was called with impossible arguments (n, k, board name)
    └── BacklogFull         the submissions queue is at its cap; retry later

Redis' own connection errors are not wrapped: callers retry those (see scorer/).
"""

from __future__ import annotations

# Stable error codes of submissions; the function library returns the same ones.
CODES = {
    "missing_id": "submission id is required",
    "invalid_id": "submission id must be valid UTF-8 of at most 64 bytes",
    "invalid_player": "player must be valid UTF-8 of 1-64 bytes",
    "invalid_name": "name must be valid UTF-8 of at most 64 bytes",
    "invalid_points": "points must be a non-negative integer",
    "points_out_of_range": "points exceed the largest value a board's encoding holds",
    "invalid_operator": "operator must be best, incr or set",
    "invalid_timestamp": "timestamp must be integer milliseconds since the epoch",
    "timestamp_in_future": "timestamp is ahead of the server clock",
    "timestamp_too_old": "timestamp is older than the idempotency window",
    "timestamp_outside_window": "timestamp is outside the board's window period",
    "invalid_scope": "region and mode must be 1-32 characters of A-Z a-z 0-9 _ -",
}


class LeaderboardError(Exception):
    """Base class of every error this package raises on purpose."""


class InvalidSubmission(LeaderboardError):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class BadRequest(LeaderboardError):
    pass


class BacklogFull(LeaderboardError):
    pass
