"""Shared contract of the leaderboard fleet: key schema, windows and score encoding,
submissions and their validation, game configuration, and the function library's wrappers.
The scorer, the gateways and the load test all import it from here."""

from .config import GameConfig
from .errors import CODES, BacklogFull, BadRequest, InvalidSubmission, LeaderboardError
from .keys import Keys
from .library import (
    BoardRef,
    BoardResult,
    Entry,
    Leaderboard,
    Standing,
    SubmitResult,
    connect,
    now_ms,
)
from .submission import Rules, Submission
from .windows import WINDOWS, Period, Window, window

__all__ = [
    "CODES",
    "WINDOWS",
    "BacklogFull",
    "BadRequest",
    "BoardRef",
    "BoardResult",
    "Entry",
    "GameConfig",
    "InvalidSubmission",
    "Keys",
    "Leaderboard",
    "LeaderboardError",
    "Period",
    "Rules",
    "Standing",
    "Submission",
    "SubmitResult",
    "Window",
    "connect",
    "now_ms",
    "window",
]
