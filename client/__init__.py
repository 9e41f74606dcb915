"""Python client of the gateway protocol: reconnecting, heartbeat-watched, latest state kept."""

from .backoff import Backoff
from .connection import LeaderboardClient, Refused, RequestError, Untrusted

__all__ = ["Backoff", "LeaderboardClient", "Refused", "RequestError", "Untrusted"]
