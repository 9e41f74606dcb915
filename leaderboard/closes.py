"""The close codes and reasons a gateway ends a socket with (docs/protocol.md, Close codes).

The gateways close with these names, and the protocol's published schema lists them
(leaderboard/protocolschema.py): a client learns each code, each reason and what to do from one
table. A reason that carries a variable part (the game's name) is its prefix then ``: ``.
"""

from __future__ import annotations

from dataclasses import dataclass

from .backoff import DRAINING as DRAINING
from .backoff import OVERLOADED as OVERLOADED

NORMAL = 1000  # the client closed (the gateway answers its close frame)
BAD_TEXT = 1007  # a text frame that is not UTF-8 (websockets checks every one and closes)
POLICY = 1008  # bad token, origin or game, or abuse: retrying with the same token cannot help
TOO_BIG = 1009  # a frame over LB_GW_MAX_FRAME (websockets closes it)
INTERNAL = 1011  # the line is dead or the gateway failed: reconnect with backoff

ABUSE = "rate limit exceeded"
FORBIDDEN_ORIGIN = "forbidden origin"
UNKNOWN_GAME = "unknown_game"
KEEPALIVE = "keepalive ping timeout"
DRAIN = "draining; reconnect"
REBALANCE = "rebalance"
FULL = "overloaded; retry later"
ADDRESS_FULL = "too many connections from this address; retry later"
GAME_UNAVAILABLE = "game unavailable"  # then ": <game>", while the game's Redis is down


@dataclass(frozen=True, slots=True)
class Close:
    code: int
    reason: str | None  # as sent; a prefix when ``prefix``; None: websockets' own text
    when: str
    client: str  # what a client does
    prefix: bool = False


CLOSES = (
    Close(NORMAL, None, "a normal close, answering the client's own", "nothing: it closed"),
    Close(BAD_TEXT, None, "a text frame that is not valid UTF-8", "stop: fix the client"),
    Close(POLICY, "invalid_token", "a forged, malformed or incomplete token", "stop (or renew the token once)"),
    Close(POLICY, "token_expired", "the token's exp has passed", "stop (or renew the token once)"),
    Close(POLICY, FORBIDDEN_ORIGIN, "an Origin the gateway does not allow", "stop"),
    Close(POLICY, UNKNOWN_GAME, "?game= names a game the gateway does not serve", "stop"),
    Close(POLICY, ABUSE, "sustained abuse: too many refused messages", "stop"),
    Close(TOO_BIG, None, "a frame over the size limit", "stop: fix the client"),
    Close(INTERNAL, KEEPALIVE, "no pong within the heartbeat timeout: a dead line", "reconnect with backoff"),
    Close(DRAINING, DRAIN, "the gateway restarts or drains", "reconnect soon (another gateway answers)"),
    Close(DRAINING, REBALANCE, "the socket is moved to an emptier gateway", "reconnect soon"),
    Close(OVERLOADED, FULL, "the connection cap or rate cap", "reconnect with backoff, at least 5 s"),
    Close(OVERLOADED, ADDRESS_FULL, "too many connections from one address", "reconnect with backoff, at least 5 s"),
    Close(OVERLOADED, GAME_UNAVAILABLE, "the game's Redis is down", "reconnect with backoff, at least 5 s", True),
)
