"""Python client of the gateway protocol: reconnecting, heartbeat-watched, latest state kept."""

from .backoff import Backoff
from .connection import Incompatible, LeaderboardClient, Refused, RequestError, Untrusted

__all__ = ["Backoff", "Incompatible", "LeaderboardClient", "Refused", "RequestError", "Untrusted"]
