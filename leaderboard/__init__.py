"""Shared contract of the leaderboard fleet: key schema, windows and score encoding,
submissions and their validation, game configuration, the function library's wrappers and the
snapshot builder. The scorer, the gateways and the load test all import it from here."""

from .config import GameConfig
from .errors import (
    CODES,
    BacklogFull,
    BadRequest,
    Banned,
    InvalidBoard,
    InvalidInput,
    InvalidSubmission,
    LeaderboardError,
    LibraryMismatch,
)
from .keys import Keys
from .library import Leaderboard
from .moderation import BanResult, Moderation
from .profiles import Profile
from .results import (
    BoardEntries,
    BoardRef,
    BoardResult,
    BoardStats,
    Correction,
    Entry,
    Publication,
    Ranks,
    Refiled,
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
    "BanResult",
    "Banned",
    "BoardEntries",
    "BoardRef",
    "BoardResult",
    "BoardStats",
    "Correction",
    "Entry",
    "GameConfig",
    "InvalidBoard",
    "InvalidInput",
    "InvalidSubmission",
    "Keys",
    "Leaderboard",
    "LeaderboardError",
    "LibraryMismatch",
    "Moderation",
    "Period",
    "Profile",
    "Publication",
    "Ranks",
    "RedisClient",
    "Refiled",
    "Rules",
    "Standing",
    "Submission",
    "SubmitResult",
    "Window",
    "connect",
    "now_ms",
    "window",
]
