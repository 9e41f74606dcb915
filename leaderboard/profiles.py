"""Player profiles: display name, avatar and country, validated and normalised in one place
(pure: no I/O).

A ``Profile`` is valid by construction. Text is normalised once, here, to Unicode NFC (so "é"
typed as one code point or as "e" + a combining accent is the same name everywhere), then
checked; the function library (``lb_profile``) checks the same rules again and refuses anything
malformed that bypassed this module. Each field is optional: ``None`` leaves it as it is, ``""``
clears it::

    profile = Profile(name="Zoë", avatar="https://cdn.example/a/42.png", country="FR")
    await set_profile(lb, "p-42", profile)

The profile lives in the game's profiles hash (player -> JSON), the one home of display data:
lb_top and lb_around join it into snapshots and replies, friends lists (``ranks``) read it too.
A submission carrying a ``name`` also sets the name there (the game server's view of it wins
until the next profile write); its name is checked for the same refused code points
(``has_forbidden``) in both layers, but not normalised.

Player ids follow the one rule of ``check_player_id``: 1-64 bytes of UTF-8, none of the code
points refused in display text, and none of the invisible ones either (``_INVISIBLE``). The
function library applies the same rule (``valid.player`` in lua/text.lua) to
every player id it is given; tests/test_player_ids.py holds the two equal.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import orjson

from .errors import INPUT_CODES, InvalidInput
from .messages import Shown

MAX_NAME_BYTES = 64
MAX_AVATAR_BYTES = 256
FIELDS = ("name", "avatar", "country")

# Code points refused in any text a page shows: C0 and C1 controls, DEL, the line and paragraph
# separators, and the bidirectional embeddings, overrides and isolates (which would reorder the
# text around a name). The function library refuses the same set.
_FORBIDDEN = frozenset(
    [*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0), 0x2028, 0x2029, *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
)
# Code points that show nothing: zero-width space, non-joiner and joiner, the left-to-right and
# right-to-left marks, the Arabic letter mark, word joiner and invisible operators, the byte order
# mark. Display names keep them (Persian needs the non-joiner, emoji sequences the joiner), but a
# player id is an identifier shown on pages next to the name: two ids that look the same must be
# the same id. The function library refuses the same set in player ids.
_INVISIBLE = frozenset([0x061C, *range(0x200B, 0x2010), *range(0x2060, 0x2065), 0xFEFF])
_NOT_IN_IDS = _FORBIDDEN | _INVISIBLE
MAX_PLAYER_BYTES = 64

# RFC 3986 characters, the only ones an avatar URL may hold (percent-encode the rest).
_URL_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~:/?#[]@!$&'()*+,;=%")

# ISO 3166-1 alpha-2: the officially assigned codes.
_ASSIGNED = """
    AD AE AF AG AI AL AM AO AQ AR AS AT AU AW AX AZ BA BB BD BE BF BG BH BI BJ BL BM BN BO BQ BR BS
    BT BV BW BY BZ CA CC CD CF CG CH CI CK CL CM CN CO CR CU CV CW CX CY CZ DE DJ DK DM DO DZ EC EE
    EG EH ER ES ET FI FJ FK FM FO FR GA GB GD GE GF GG GH GI GL GM GN GP GQ GR GS GT GU GW GY HK HM
    HN HR HT HU ID IE IL IM IN IO IQ IR IS IT JE JM JO JP KE KG KH KI KM KN KP KR KW KY KZ LA LB LC
    LI LK LR LS LT LU LV LY MA MC MD ME MF MG MH MK ML MM MN MO MP MQ MR MS MT MU MV MW MX MY MZ NA
    NC NE NF NG NI NL NO NP NR NU NZ OM PA PE PF PG PH PK PL PM PN PR PS PT PW PY QA RE RO RS RU RW
    SA SB SC SD SE SG SH SI SJ SK SL SM SN SO SR SS ST SV SX SY SZ TC TD TF TG TH TJ TK TL TM TN TO
    TR TT TV TW TZ UA UG UM US UY UZ VA VC VE VG VI VN VU WF WS YE YT ZA ZM ZW
"""
COUNTRIES = frozenset(_ASSIGNED.split())


def _invalid(code: str) -> InvalidInput:
    return InvalidInput(code, INPUT_CODES[code])


def has_forbidden(text: str) -> bool:
    """Whether ``text`` holds a code point no page should show (see _FORBIDDEN)."""
    return any(ord(c) in _FORBIDDEN for c in text)


def is_player_id(value: object) -> bool:
    """The player id rule, its one definition (submissions, tokens' ``sub``, moderation, tournament
    entries): 1-64 bytes of UTF-8 with no control, bidirectional or invisible code point. Not
    normalised: an id is compared byte for byte."""
    if not isinstance(value, str) or not value:
        return False
    if value.isascii():  # the common case: one byte per character, only C0 and DEL to refuse
        return len(value) <= MAX_PLAYER_BYTES and value.isprintable()
    try:
        size = len(value.encode("utf-8"))  # lone surrogates (undecodable input) are refused here
    except UnicodeEncodeError:
        return False
    return size <= MAX_PLAYER_BYTES and not any(ord(c) in _NOT_IN_IDS for c in value)


def check_player_id(value: object) -> str:
    """``value`` if it is a player id (``is_player_id``), else InvalidInput("invalid_player")."""
    if not is_player_id(value):
        raise _invalid("invalid_player")
    return str(value)


def normalise_text(value: object, code: str, max_bytes: int, *, required: bool = True) -> str:
    """The one normalisation of display text (NFC), then its checks: valid Unicode, 1..max_bytes
    of UTF-8 (0 allowed unless ``required``), no refused code point."""
    if not isinstance(value, str):
        raise _invalid(code)
    text = unicodedata.normalize("NFC", value)
    try:
        size = len(text.encode("utf-8"))  # lone surrogates (undecodable input) are refused here
    except UnicodeEncodeError:
        raise _invalid(code) from None
    if size > max_bytes or (required and size == 0) or has_forbidden(text):
        raise _invalid(code)
    return text


def check_avatar(value: object) -> str:
    """An avatar is an https URL (never http, data: or javascript:), at most 256 bytes of URL
    characters: the page puts it in an <img src>, fetched from the player's browser."""
    if not isinstance(value, str) or not 0 < len(value) <= MAX_AVATAR_BYTES or not set(value) <= _URL_CHARS:
        raise _invalid("invalid_avatar")
    try:
        parts = urlsplit(value)
    except ValueError:
        raise _invalid("invalid_avatar") from None
    if parts.scheme != "https" or not value.startswith("https://") or not parts.hostname:
        raise _invalid("invalid_avatar")
    return value


def check_country(value: object) -> str:
    if not isinstance(value, str) or value not in COUNTRIES:
        raise _invalid("invalid_country")
    return value


@dataclass(frozen=True, slots=True)
class Profile:
    """Fields to set: ``None`` keeps the stored value, ``""`` clears it."""

    name: str | None = None
    avatar: str | None = None
    country: str | None = None

    def __post_init__(self) -> None:
        if self.name:
            object.__setattr__(self, "name", normalise_text(self.name, "invalid_name", MAX_NAME_BYTES))
        elif self.name is not None and self.name != "":
            raise _invalid("invalid_name")
        if self.avatar:
            check_avatar(self.avatar)
        elif self.avatar is not None and self.avatar != "":
            raise _invalid("invalid_avatar")
        if self.country:
            check_country(self.country)
        elif self.country is not None and self.country != "":
            raise _invalid("invalid_country")

    def changes(self) -> dict[str, str]:
        """The fields this write names (``""``: clear), for lb_profile."""
        return {f: v for f in FIELDS if (v := getattr(self, f)) is not None}

    @classmethod
    def parse(cls, fields: dict[str, Any]) -> Profile:
        """A Profile from raw fields (a wire message, command-line arguments); InvalidInput for an
        unknown field or a value of the wrong type."""
        unknown = set(fields) - set(FIELDS)
        if unknown:
            field = sorted(unknown)[0]
            raise InvalidInput("invalid_profile", f"unknown profile field {field!r}; fields are name, avatar, country")
        for f in FIELDS:
            value = fields.get(f)
            if value is not None and not isinstance(value, str):
                raise _invalid(f"invalid_{f}")
        return cls(**{f: fields.get(f) for f in FIELDS})


def stored(raw: str | None) -> dict[str, Any] | None:
    """A profile as the profiles hash holds it (JSON); None when absent or not an object (the hash
    is plain data anyone with Redis access can write)."""
    if not raw:
        return None
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def display(profile: Mapping[str, Any] | None, out: Shown) -> None:
    """Sets the display fields of a stored profile on ``out`` (a row for the wire). lb_profile
    stores only valid fields, but the hash is plain data anyone with Redis access can write: an
    avatar that is not https or a country that is not a code never reaches a page."""
    if not profile:
        return
    name, avatar, country = profile.get("name"), profile.get("avatar"), profile.get("country")
    if isinstance(name, str) and name:
        out["name"] = name
    if isinstance(avatar, str) and avatar.startswith("https://"):
        out["avatar"] = avatar
    if isinstance(country, str) and country in COUNTRIES:
        out["country"] = country
