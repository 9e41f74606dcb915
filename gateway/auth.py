"""Tokens to identities (pure: no I/O).

A token is a JWT signed with HS256 by the game backend: ``sub`` = player id, ``exp`` = expiry,
``role`` = ``player`` | ``server``. Several secrets verify at once, so a key can be rotated
without logging anybody out: add the new secret in front, re-sign, drop the old one later::

    identity = authenticate(token, ("new-secret", "old-secret"))
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import jwt

ROLES = ("player", "server")
_MAX_TOKEN = 4096


@dataclass(frozen=True, slots=True)
class Identity:
    """Who is on a connection; ``player`` is None for spectators."""

    role: str  # "spectator" | "player" | "server"
    player: str | None = None

    @property
    def authenticated(self) -> bool:
        return self.player is not None


SPECTATOR = Identity("spectator")


class AuthError(Exception):
    """``code`` is ``invalid_token`` or ``token_expired`` (docs/protocol.md)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def authenticate(token: object, secrets: Sequence[str], *, leeway: float = 0.0) -> Identity:
    if not isinstance(token, str) or not token or len(token) > _MAX_TOKEN:
        raise AuthError("invalid_token", "token must be a non-empty string")
    if not secrets:
        raise AuthError("invalid_token", "this gateway accepts no tokens")
    claims: dict[str, object] | None = None
    for secret in secrets:
        try:
            claims = jwt.decode(
                token,
                secret,
                algorithms=["HS256"],  # never "none", never an algorithm the token picks
                options={"require": ["exp", "sub", "role"]},
                leeway=leeway,
            )
            break
        except jwt.InvalidSignatureError:
            continue  # perhaps signed with the other secret of a rotation
        except jwt.ExpiredSignatureError:
            # PyJWT checks the signature first: an expired token was genuine.
            raise AuthError("token_expired", "the token has expired") from None
        except jwt.InvalidTokenError as exc:
            raise AuthError("invalid_token", f"invalid token: {exc}") from None
    if claims is None:
        raise AuthError("invalid_token", "invalid token: signature does not verify")
    sub, role = claims.get("sub"), claims.get("role")
    if not isinstance(sub, str) or not 0 < len(sub.encode("utf-8", "replace")) <= 64:
        raise AuthError("invalid_token", "invalid token: sub must be a player id of 1-64 bytes")
    if role not in ROLES:
        raise AuthError("invalid_token", "invalid token: role must be player or server")
    return Identity(str(role), sub)


def issue(player: str, role: str, secret: str, *, exp: float) -> str:
    """Sign a token (what the game backend does); for tests, tools and the load test."""
    return jwt.encode({"sub": player, "role": role, "exp": int(exp)}, secret, algorithm="HS256")
