"""Shared contract of the leaderboard fleet: key schema, windows and score encoding,
submissions and their validation, game configuration, the function library's wrappers and the
snapshot builder. The scorer, the gateways and the load test all import it from here."""

from .config import GameConfig
from .errors import CODES, BacklogFull, BadRequest, InvalidSubmission, LeaderboardError
from .keys import Keys
from .library import Leaderboard
from .results import (
    BoardEntries,
    BoardRef,
    BoardResult,
    BoardStats,
    Entry,
    Publication,
    Ranks,
    Standing,
    SubmitResult,
)
from .submission import Rules, Submission
from .transport import RedisClient, connect, now_ms
from .windows import WINDOWS, Period, Window, window

__all__ = [
    "CODES",
    "WINDOWS",
    "BacklogFull",
    "BadRequest",
    "BoardEntries",
    "BoardRef",
    "BoardResult",
    "BoardStats",
    "Entry",
    "GameConfig",
    "InvalidSubmission",
    "Keys",
    "Leaderboard",
    "LeaderboardError",
    "Period",
    "Publication",
    "Ranks",
    "RedisClient",
    "Rules",
    "Standing",
    "Submission",
    "SubmitResult",
    "Window",
    "connect",
    "now_ms",
    "window",
]
