"""The JSON Schema of a board definition, made from the rules ``boards.parse`` applies (its
constants: fields, names, directions, bounds), so the schema the HTTP API's document states
(api/schemas.py) and the one published for board files (docs/board-definition.schema.json,
``file_schema``) cannot drift from the parser (pure: no I/O)::

    violation = bodies.check({"BoardFile": file_schema()}, "BoardFile", raw, FIELD_CODES)

``FIELD_CODES`` gives a broken field the code ``boards.parse`` gives the same rule, so a file
and an API request are refused alike. The schema states the shape; the rules it cannot state
(a season window and its season together, distinct key names, an IANA zone) are the parser's,
with their own codes.
"""

from __future__ import annotations

from typing import Any

from .boards import definition as boards
from .keys import _NAME as _ID
from .keys import SCOPE_KINDS
from .ranking import RANK_MODES
from .submission import OPERATORS

SCHEMA_ID = "https://leaderboard.invalid/schemas/board-definition.schema.json"
DIALECT = "https://json-schema.org/draft/2020-12/schema"


def _pattern(regex: str) -> str:
    return f"^{regex}$"


def definition_schema() -> dict[str, Any]:
    """A definition as the HTTP API takes it (``PUT /v1/definitions/{id}``: the id may come from
    the path, so only ``keys`` is required)."""
    key_properties: dict[str, Any] = {
        "name": {"type": "string", "pattern": _pattern(boards._KEY_NAME.pattern)},
        "direction": {"enum": list(boards.DIRECTIONS)},
        "display": {"enum": list(boards.DISPLAYS)},
        "operator": {"enum": list(OPERATORS)},
        "min": {"type": "integer"},
        "max": {"type": "integer"},
    }
    key = {"type": "object", "properties": key_properties, "required": ["name"], "additionalProperties": False}
    properties: dict[str, Any] = {
        "id": {"type": "string", "pattern": _pattern(_ID.pattern)},
        "keys": {"type": "array", "minItems": 1, "maxItems": boards.MAX_KEYS, "items": key},
        "operator": {"enum": list(OPERATORS)},
        "tie": {"enum": list(boards.TIES)},
        "rank_mode": {"enum": list(RANK_MODES)},
        "windows": {"type": "array", "items": {"enum": list(boards.BOARD_WINDOWS)}},
        "time_zone": {"type": "string"},
        "season": {
            "type": "object",
            "properties": {"start_ms": {"type": "integer"}, "length_s": {"type": "integer"}},
            "required": ["start_ms", "length_s"],
            "additionalProperties": False,
        },
        "top_n": {"type": "integer", "minimum": 1, "maximum": boards.MAX_TOP_N},
        "metadata_bytes": {"type": "integer", "minimum": 0, "maximum": boards.MAX_METADATA_BYTES},
        "version": {"type": "integer"},
        "extensions": {"type": "object"},
        "scopes": {"type": "array", "items": {"enum": list(SCOPE_KINDS)}},
        "encoding": {"enum": [boards.PACKED, boards.LEX]},
    }
    # the parser's own list of fields: a field it takes that the schema did not state (or one
    # stated that it refuses) fails here, at import, not in a client's CI
    if set(properties) != boards._FIELDS or set(key_properties) != boards._KEY_FIELDS:
        raise AssertionError("the board definition schema and boards.parse name different fields")
    return {
        "type": "object",
        "description": "docs/data-model.md, Board definitions (every field but keys has a default)",
        "properties": properties,
        "required": ["keys"],
        "additionalProperties": False,
    }


def file_schema() -> dict[str, Any]:
    """A board file (``python -m scorer board apply``): one definition, its ``id`` required (no
    path names it); published as docs/board-definition.schema.json."""
    schema = definition_schema()
    return {
        "$schema": DIALECT,
        "$id": SCHEMA_ID,
        "title": "Board definition",
        **schema,
        "description": "A board definition kept as a file; docs/data-model.md, Board definitions",
        "required": ["id", *schema["required"]],
    }


# boards.py and keys.py keep their patterns and field lists private; they are read here, not
# copied, so that the schema follows them.

# A broken field's code: the one boards.parse gives the same rule (leaderboard/bodies.py reads
# "<field>.<keyword>" for one keyword's own, "*" for the definition's default).
FIELD_CODES: dict[str, str] = {
    "*": "invalid_board",
    "id": "invalid_board_id",
    "keys": "invalid_board_key",
    "keys.type": "board_no_keys",
    "keys.minItems": "board_no_keys",
    "keys.maxItems": "board_too_many_keys",
    "direction": "invalid_direction",
    "display": "invalid_display",
    "operator": "invalid_operator",
    "min": "invalid_key_bounds",
    "max": "invalid_key_bounds",
    "tie": "invalid_tie",
    "rank_mode": "invalid_rank_mode",
    "windows": "invalid_board_window",
    "time_zone": "invalid_time_zone",
    "season": "invalid_season",
    "top_n": "invalid_top_n",
    "metadata_bytes": "invalid_metadata_limit",
    "extensions": "unknown_extension",
    "scopes": "invalid_board_scopes",
    "encoding": "invalid_board",
}
