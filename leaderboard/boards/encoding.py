"""A board's encodings (pure): a ``packed`` board's exact double (``pack``/``unpack``) and a
``lex`` board's members (``encode_member``/``decode_member``), which order the board as its
definition says (the package's docstring gives both; docs/data-model.md the exact limits).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..windows import WINDOWS
from .definition import Definition

KEY_HEX = 16  # hex digits per key in a lex member
TIME_HEX = 12  # hex digits of the reached-at time (ms since the epoch; 2^48 ms is year 10889)


def points(definition: Definition, values: Sequence[int]) -> int:
    """A ``packed`` definition's points of its key values, higher better (mixed radix): the
    first value signed by its direction times P, plus each later key's gain (v − min desc,
    max − v asc) times its place (``Definition.places``). One key: its value signed."""
    total = 0
    for i, (key, value, place) in enumerate(zip(definition.keys, values, definition.places, strict=True)):
        desc = key.direction == "desc"
        gain = (value if desc else -value) if i == 0 else (value - key.min if desc else key.max - value)
        total += gain * place
    return total


def pack(definition: Definition, window_name: str, values: Sequence[int], ts_ms: int, start_ms: int) -> int:
    """The packed score of a ``packed`` definition's values reached at ``ts_ms`` in a period
    starting at ``start_ms``: its points × 2^k + the tie part; the highest score is the best."""
    k = definition.shift(window_name)
    unit = WINDOWS["alltime"].unit_ms if window_name == "alltime" else 1000
    t = (ts_ms - start_ms) // unit
    tie = (1 << k) - 1 - t if definition.tie == "first" else t
    return (points(definition, values) << k) + tie


def unpack(definition: Definition, window_name: str, score: int) -> tuple[int, ...]:
    """The key values of a packed score: floor(points / P) the first signed, the remainder the
    rest, digit by digit."""
    rest = score >> definition.shift(window_name)  # floor: the tie part is never negative
    values = []
    for i, (key, place) in enumerate(zip(definition.keys, definition.places, strict=True)):
        gain, rest = divmod(rest, place)
        desc = key.direction == "desc"
        values.append((gain if desc else -gain) if i == 0 else (key.min + gain if desc else key.max - gain))
    return tuple(values)


# --- lex members ----------------------------------------------------------------------------

_FULL = (1 << 64) - 1


def key_prefix(definition: Definition, values: Sequence[int]) -> str:
    """The fixed-width, direction-adjusted part of a member: members sharing it are tied."""
    parts = []
    for key, value in zip(definition.keys, values, strict=True):
        u = (value & _FULL) ^ (1 << 63)  # two's complement with the sign bit flipped: unsigned order = signed
        parts.append(f"{(_FULL ^ u) if key.direction == 'desc' else u:016x}")
    return "".join(parts)


def player_part(player: str) -> str:
    """A lex member's player part: the id's UTF-8 bytes complemented, then 0xFF, so ascending
    member order reads the players of equal values and time by descending id, as a packed board
    does (lua/encoding.lua lex.player_part). Not UTF-8: held as text the way ``connect()``'s
    clients read it (surrogateescape)."""
    flipped = bytes(255 - b for b in player.encode()) + b"\xff"
    return flipped.decode("utf-8", "surrogateescape")


def player_of(part: str) -> str:
    """The player id of a member's player part (``player_part`` undone). A member written before
    the part was complemented holds the id as it is: UTF-8 never holds the byte 0xFF, so the
    last byte tells them apart."""
    raw = part.encode("utf-8", "surrogateescape")
    if not raw.endswith(b"\xff"):
        return part
    return bytes(255 - b for b in raw[:-1]).decode()


def encode_member(definition: Definition, values: Sequence[int], ts_ms: int, player: str) -> str:
    t = ts_ms if definition.tie == "first" else ((1 << 48) - 1) - ts_ms
    return f"{key_prefix(definition, values)}{t:012x}{player_part(player)}"


def decode_member(definition: Definition, member: str) -> tuple[tuple[int, ...], int, str]:
    """(values, reached-at ms, player) of a lex member."""
    values = []
    for i, key in enumerate(definition.keys):
        u = int(member[i * KEY_HEX : (i + 1) * KEY_HEX], 16)
        if key.direction == "desc":
            u ^= _FULL
        u ^= 1 << 63
        values.append(u - (1 << 64) if u >= 1 << 63 else u)
    at = len(definition.keys) * KEY_HEX
    t = int(member[at : at + TIME_HEX], 16)
    ts = t if definition.tie == "first" else ((1 << 48) - 1) - t
    return tuple(values), ts, player_of(member[at + TIME_HEX :])
