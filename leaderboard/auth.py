"""Tokens to identities (pure: no I/O).

A token is a JWT signed with HS256 by the game backend: ``sub`` = player id, ``exp`` = expiry,
``role`` = ``player`` | ``server``. Several secrets verify at once, so a key can be rotated
without logging anybody out: add the new secret in front, re-sign, drop the old one later::

    identity = authenticate(token, ("new-secret", "old-secret"))
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import jwt

from leaderboard.errors import INPUT_CODES, LeaderboardError
from leaderboard.profiles import is_player_id

ROLES = ("player", "server")
_MAX_TOKEN = 4096
MIN_SECRET_BYTES = 32  # HS256 keys shorter than this can be brute-forced offline from any token


@dataclass(frozen=True, slots=True)
class Identity:
    """Who is on a connection; ``player`` is None for spectators."""

    role: str  # "spectator" | "player" | "server"
    player: str | None = None


SPECTATOR = Identity("spectator")


class AuthError(LeaderboardError):
    """``code`` is ``invalid_token`` or ``token_expired`` (docs/protocol.md)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


_NUMERIC = ("exp", "nbf", "iat")


def authenticate(token: object, secrets: Sequence[str], *, leeway: float = 0.0) -> Identity:
    """The identity a token proves, or ``AuthError`` with one of our own stable messages (the JWT
    library's wording changes between versions and says more than a client needs)."""
    return _proved(token, secrets, leeway)[0]


class Tokens:
    """``authenticate`` for a process that sees the same tokens again and again (a game server
    signs one and sends it with every request): a token that verified is held, at most ``size``
    of them, and only its time claims are checked again when it comes back. The same string is
    the same signed claims, so the answer is the one ``authenticate`` would give, for a fraction
    of its CPU (docs/benchmarks.md, the HTTP API's writes). A refused token is not held::

        tokens = Tokens(settings.jwt_secrets)
        identity = tokens.authenticate(token)
    """

    def __init__(self, secrets: Sequence[str], *, size: int = 4096) -> None:
        self.secrets = tuple(secrets)
        self.size = size
        self._held: dict[str, tuple[Identity, float, float | None]] = {}

    def authenticate(self, token: object, *, leeway: float = 0.0) -> Identity:
        held = self._held.get(token) if isinstance(token, str) else None
        if held is None:
            held = _proved(token, self.secrets, leeway)
            if len(self._held) >= self.size:  # the oldest out: a dict keeps insertion order
                del self._held[next(iter(self._held))]
            self._held[str(token)] = held
            return held[0]
        identity, exp, nbf = held
        _in_time(exp, nbf, leeway)
        return identity


def _proved(token: object, secrets: Sequence[str], leeway: float) -> tuple[Identity, float, float | None]:
    """``authenticate``'s identity, and the token's exp and nbf (None: none)."""
    if not isinstance(token, str) or not token or len(token) > _MAX_TOKEN:
        raise AuthError("invalid_token", "token must be a non-empty string")
    if not secrets:
        raise AuthError("invalid_token", "this gateway accepts no tokens")
    try:
        header = jwt.get_unverified_header(token)
    except jwt.InvalidTokenError:
        raise AuthError("invalid_token", "the token is not a well-formed HS256 JWT") from None
    if header.get("alg") != "HS256":
        raise AuthError("invalid_token", "the token is not signed with HS256")
    claims: dict[str, object] | None = None
    for secret in secrets:
        try:
            claims = jwt.decode(
                token,
                secret,
                algorithms=["HS256"],  # never "none", never an algorithm the token picks
                # time claims are checked below, once their types are: PyJWT would take "123"
                options={
                    "require": ["exp", "sub", "role"],
                    "verify_exp": False,
                    "verify_nbf": False,
                    "verify_iat": False,
                },
            )
            break
        except jwt.InvalidSignatureError:
            continue  # perhaps signed with the other secret of a rotation
        except jwt.MissingRequiredClaimError as exc:
            raise AuthError("invalid_token", f"the token has no {exc.claim} claim") from None
        except jwt.InvalidTokenError:
            raise AuthError("invalid_token", "the token is not a well-formed HS256 JWT") from None
    if claims is None:
        raise AuthError("invalid_token", "the signature does not verify")
    for name in _NUMERIC:
        value = claims.get(name)
        if name in claims and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise AuthError("invalid_token", f"{name} must be a number")
        # JSON parsers read 1e400 as infinity and accept NaN: an exp that compares as never past
        # (or as neither past nor future) would make a token that never expires
        if isinstance(value, float) and not math.isfinite(value):
            raise AuthError("invalid_token", f"{name} must be a finite number")
    exp = float(claims["exp"])  # type: ignore[arg-type]
    nbf = float(claims["nbf"]) if "nbf" in claims else None  # type: ignore[arg-type]
    _in_time(exp, nbf, leeway)
    sub, role = claims.get("sub"), claims.get("role")
    if not is_player_id(sub):  # the rule of every player id (leaderboard/profiles.py)
        raise AuthError("invalid_token", "sub must be a player id: " + INPUT_CODES["invalid_player"])
    if role not in ROLES:
        raise AuthError("invalid_token", "role must be player or server")
    return Identity(str(role), str(sub)), exp, nbf


def _in_time(exp: float, nbf: float | None, leeway: float) -> None:
    now = time.time()
    if exp <= now - leeway:
        raise AuthError("token_expired", "the token has expired")
    if nbf is not None and nbf > now + leeway:
        raise AuthError("invalid_token", "the token is not valid yet")


def issue(player: str, role: str, secret: str, *, exp: float) -> str:
    """Sign a token (what the game backend does); for tests, tools and the load test."""
    return jwt.encode({"sub": player, "role": role, "exp": int(exp)}, secret, algorithm="HS256")


def strong_secrets(secrets: tuple[str, ...]) -> str | None:
    """The settings' check of LB_JWT_SECRETS."""
    if any(len(secret.encode()) < MIN_SECRET_BYTES for secret in secrets):
        return f"must each be at least {MIN_SECRET_BYTES} bytes (a short HS256 key is guessed from any token)"
    return None
