"""The clients' reconnect backoff: leaderboard.backoff, the project's one backoff."""

from leaderboard.backoff import DRAINING, OVERLOADED, Backoff

__all__ = ["DRAINING", "OVERLOADED", "Backoff"]
