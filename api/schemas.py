"""The HTTP API's OpenAPI schemas: the parameters and bodies the route table (routes.py) names,
and the codes a body's broken field gets (``FIELD_CODES``). ``bodies.py`` checks request bodies
against these same dicts, so the document and the checks cannot drift apart."""

from __future__ import annotations

from typing import Any

from leaderboard import protocol as p
from leaderboard.keys import SCOPE_KINDS

from . import bodies
from .problems import ALL_CODES


def param(name: str, where: str, schema: dict[str, Any], doc: str, required: bool = False) -> dict[str, Any]:
    return {"name": name, "in": where, "required": required, "description": doc, "schema": schema}


# Every board by one parameter: the game's own scopes, and a defined board as board:<id> or its
# bare id (docs/data-model.md "Board definitions"); a bare "global" is the game's own board
BOARD = param(
    "board",
    "path",
    {"type": "string", "pattern": f"^(({'|'.join((*SCOPE_KINDS, 'board'))}):)?[A-Za-z0-9_-]{{1,32}}$"},
    "the board: global, region:<name>, mode:<name>, or a defined board as board:<id> or <id>",
    True,
)
PLAYER = param("player", "path", {"type": "string", "minLength": 1}, "a player id", True)
WINDOW = param("window", "query", {"type": "string"}, "the board's window (default: the socket's default window)")
PERIOD = param("period", "query", {"type": "string"}, "previous, or a period label such as 2026-W48")
GAME = param("game", "query", {"type": "string"}, "the game (default: the first game served)")
READS = [BOARD, WINDOW, PERIOD, GAME]

ENTRY = {
    "type": "object",
    "properties": {
        "rank": {"type": "integer"},
        "player": {"type": "string"},
        "score": {"type": "integer"},
        "keys": {
            "type": "array",
            "items": {"type": "string"},
            "description": "a defined board's: the entry's key values as text (exact beyond 2^53)",
        },
        "meta": {"type": "string", "description": "a defined board's: the entry's metadata"},
    },
    "required": ["rank", "player", "score"],
}
COLUMNS = {
    "type": "array",
    "description": "a defined board's keys, in order: what each entry's keys hold and how to show them",
    "items": {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "direction": {"enum": ["desc", "asc"]},
            "display": {"type": "string"},
        },
    },
}
BOARD_FIELDS = {
    "board": {"type": "string"},
    "window": {"type": "string"},
    "period": {"type": "string"},
    "mode": {"type": "string"},
}
MS_SINCE_EPOCH = {"type": "integer", "minimum": 0, "maximum": 2**53 - 1}
SCHEMAS: dict[str, Any] = {
    "Top": {
        "type": "object",
        "properties": {"type": {"const": "top"}, **BOARD_FIELDS, "entries": {"type": "array", "items": ENTRY}},
        "required": ["type", "board", "window", "period", "entries"],
    },
    "Rank": {
        "type": "object",
        "properties": {
            "type": {"const": "rank"},
            **BOARD_FIELDS,
            "player": {"type": "string"},
            "rank": {"type": ["integer", "null"]},
            "score": {"type": ["integer", "null"]},
            "size": {"type": "integer"},
            "top_percent": {"type": ["number", "null"]},
            "approx": {"type": "boolean"},
        },
        "required": ["type", "board", "window", "period", "player", "rank", "score", "size"],
    },
    "Around": {
        "type": "object",
        "properties": {
            "type": {"const": "around"},
            **BOARD_FIELDS,
            "player": {"type": "string"},
            "size": {"type": ["integer", "null"]},
            "entries": {"type": "array", "items": ENTRY},
        },
        "required": ["type", "board", "window", "period", "player", "entries"],
    },
    "Ranks": {
        "type": "object",
        "properties": {
            "type": {"const": "ranks"},
            **BOARD_FIELDS,
            "size": {"type": "integer"},
            "players": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "player": {"type": "string"},
                        "rank": {"type": ["integer", "null"]},
                        "score": {"type": ["integer", "null"]},
                        "keys": {
                            "type": "array",
                            "items": {"type": "string"},
                            "description": "a defined board's key values of a ranked player (score is the first)",
                        },
                    },
                    "required": ["player", "rank", "score"],
                },
            },
        },
        "required": ["type", "board", "window", "period", "size", "players"],
    },
    "Players": {
        "type": "object",
        "properties": {
            "players": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": p.MAX_FRIENDS}
        },
        "required": ["players"],
        "additionalProperties": False,
    },
    "Stats": {
        "type": "object",
        "properties": {
            "type": {"const": "stats"},
            **BOARD_FIELDS,
            "size": {"type": "integer", "description": "players on this board (exact)"},
            "players": {"type": "integer", "description": "distinct players of the period, all scopes (~0.8%)"},
        },
        "required": ["type", "board", "window", "period", "size", "players"],
    },
    "Score": {
        "type": "object",
        "properties": {
            "player_id": {"type": "string", "minLength": 1, "maxLength": 64},
            "score": {"type": "integer", "minimum": 0, "description": "through each board's operator"},
            "delta": {"type": "integer", "minimum": 0, "description": "added to the player's points"},
            "match_id": {
                "type": "string",
                "minLength": 1,
                "maxLength": 64,
                "description": "the submission id, applied once: match_id or the Idempotency-Key header is required",
            },
            "ts": {"type": "integer", "minimum": 0, "description": "ms since the epoch (default: now)"},
            "name": {"type": "string"},
            "region": {"type": "string"},
            "mode": {"type": "string"},
            "tournament": {"type": "string"},
            "values": {
                "type": "array",
                "items": {"type": ["integer", "string"], "pattern": "^-?[0-9]+$"},
                "minItems": 1,
                "maxItems": 5,
                "description": "a defined board's (board:<id>) key values, int64 (text beyond 2^53), not a score",
            },
            "meta": {"type": "string", "maxLength": 1024, "description": "a defined board's entry metadata"},
        },
        "required": ["player_id"],
        "additionalProperties": False,
        "description": "one of score and delta, or a defined board's values; match_id or the Idempotency-Key "
        "header names the submission",
    },
    "ScoreBatch": {
        "type": "object",
        "properties": {
            "slips": {
                "type": "array",
                "items": {"$ref": "#/components/schemas/Score"},
                "minItems": 1,
                "description": "at most LB_API_BATCH_MAX (default 100; more: too_many_slips), each with its "
                "match_id; one bad slip refuses the batch (invalid_slips, each bad slip's code in errors)",
            }
        },
        "required": ["slips"],
        "additionalProperties": False,
    },
    "BatchAnswer": {
        "type": "object",
        "properties": {
            "slips": {
                "type": "array",
                "items": {"$ref": "#/components/schemas/SlipAnswer"},
                "description": "each slip's answer in the batch's order: queued (pending), or with ?wait=applied "
                "its outcome",
            }
        },
        "required": ["slips"],
    },
    "Queued": {
        "type": "object",
        "properties": {
            "submission": {"type": "string"},
            "stream_id": {"type": "string"},
            "status": {"const": "pending"},
        },
        "required": ["submission", "stream_id", "status"],
    },
    "Outcome": {
        "type": "object",
        "properties": {
            "submission": {"type": "string"},
            "stream_id": {"type": "string"},
            "status": {"enum": ["applied", "refused", "unknown"]},
            "code": {"type": "string"},
            "message": {"type": "string"},
            "boards": {
                "type": "array",
                "description": "applied: what the submission did on each board (a retry gets the same)",
                "items": {
                    "type": "object",
                    "properties": {
                        "board": {"type": "string"},
                        "window": {"type": "string"},
                        "period": {"type": "string"},
                        "improved": {"type": "boolean"},
                        "rank": {"type": "integer"},
                        "previous_rank": {"type": ["integer", "null"]},
                        "points": {"type": "integer"},
                        "keys": {
                            "type": "array",
                            "items": {"type": "string"},
                            "description": "a defined board's: the player's key values there (points is the first)",
                        },
                    },
                    "required": ["board", "window", "period", "improved", "rank", "previous_rank", "points"],
                },
            },
        },
        "required": ["submission", "stream_id", "status"],
    },
    "Finals": {
        "type": "object",
        "properties": {
            "type": {"const": "finals"},
            "board": {"type": "string"},
            "window": {"type": "string"},
            "periods": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "period": {"type": "string"},
                        "start_ms": {"type": "integer"},
                        "end_ms": {"type": "integer"},
                        "closed_ms": {"type": "integer"},
                        "entries": {"type": "array", "items": ENTRY},
                        "columns": COLUMNS,
                    },
                    "required": ["period", "entries"],
                },
            },
        },
        "required": ["type", "board", "window", "periods"],
    },
    "Status": {
        "type": "object",
        "properties": {
            "type": {"const": "status"},
            "submission": {"type": "string"},
            "status": {"enum": ["applied", "refused", "pending", "unknown"]},
            "code": {"type": "string"},
            "message": {"type": "string"},
        },
        "required": ["type", "submission", "status"],
    },
    "Reason": {
        "type": "object",
        "properties": {"reason": {"type": "string", "description": "journaled with the action"}},
        "additionalProperties": False,
    },
    "Correction": {
        "type": "object",
        "properties": {
            "points": {"type": "integer", "minimum": 0, "description": "the player's points from now on"},
            "reason": {"type": "string"},
            "window": {"type": "string", "description": "one window (default: every window kept)"},
            "period": {"type": "string", "description": "a period label (default: the current one)"},
            "scopes": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 10},
            "values": {
                "type": "array",
                "items": {"type": ["integer", "string"]},
                "minItems": 1,
                "maxItems": 5,
                "description": "a defined board's key values from now on (scopes board:<id>; instead of points)",
            },
            "metadata": {
                "type": "string",
                "description": "a defined board's entry metadata ('' clears; default: kept)",
            },
            "remove": {"type": "boolean", "description": "take the player off the defined boards named"},
        },
        "required": ["reason"],
        "additionalProperties": False,
    },
    "Profile": {
        "type": "object",
        "properties": {"name": {"type": "string"}, "avatar": {"type": "string"}, "country": {"type": "string"}},
        "minProperties": 1,
        "additionalProperties": False,
    },
    "TournamentSpan": {
        "type": "object",
        "properties": {"start_ms": MS_SINCE_EPOCH, "end_ms": MS_SINCE_EPOCH},
        "required": ["start_ms", "end_ms"],
        "additionalProperties": False,
    },
    "Entrants": {
        "type": "object",
        "properties": {
            "players": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": p.MAX_JOIN}
        },
        "required": ["players"],
        "additionalProperties": False,
    },
    "Banned": {
        "type": "object",
        "properties": {"type": {"const": "banned"}, "player": {"type": "string"}, "boards": {"type": "integer"}},
        "required": ["type", "player", "boards"],
    },
    "Unbanned": {
        "type": "object",
        "properties": {"type": {"const": "unbanned"}, "player": {"type": "string"}, "was_banned": {"type": "boolean"}},
        "required": ["type", "player", "was_banned"],
    },
    "Corrected": {
        "type": "object",
        "properties": {
            "type": {"const": "corrected"},
            "player": {"type": "string"},
            "points": {"type": "integer"},
            "values": {"type": ["array", "null"], "items": {"type": "string"}},
            "boards": {"type": "array", "items": {"type": "object"}},
        },
        "required": ["type", "player", "boards"],
    },
    "ProfileSet": {
        "type": "object",
        "properties": {"type": {"const": "profile"}, "player": {"type": "string"}, "profile": {"type": "object"}},
        "required": ["type", "player", "profile"],
    },
    "Tournament": {
        "type": "object",
        "properties": {
            "type": {"const": "tournament"},
            "tournament": {"type": "string"},
            "window": {"type": "string"},
            "start_ms": {"type": "integer"},
            "end_ms": {"type": "integer"},
        },
        "required": ["type", "tournament", "window", "start_ms", "end_ms"],
    },
    "Joined": {
        "type": "object",
        "properties": {
            "type": {"const": "joined"},
            "tournament": {"type": "string"},
            "players": {"type": "array", "items": {"type": "string"}},
            "added": {"type": "integer"},
        },
        "required": ["type", "tournament", "players", "added"],
    },
    "BoardDefinition": {
        "type": "object",
        "description": "docs/data-model.md, Board definitions (every field but keys has a default)",
        "properties": {
            "id": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,32}$"},
            "keys": {
                "type": "array",
                "minItems": 1,
                "maxItems": 5,
                "items": {
                    "type": "object",
                    "properties": {
                        "name": {"type": "string", "pattern": "^[a-z][a-z0-9_]{0,31}$"},
                        "direction": {"enum": ["desc", "asc"]},
                        "display": {"enum": ["number", "duration_ms", "money"]},
                        "operator": {"enum": ["best", "incr", "set"]},
                        "min": {"type": "integer"},
                        "max": {"type": "integer"},
                    },
                    "required": ["name"],
                    "additionalProperties": False,
                },
            },
            "operator": {"enum": ["best", "incr", "set"]},
            "tie": {"enum": ["first", "last"]},
            "rank_mode": {"enum": ["ordinal", "dense", "competition"]},
            "windows": {"type": "array", "items": {"enum": ["daily", "weekly", "monthly", "alltime", "season"]}},
            "time_zone": {"type": "string"},
            "season": {
                "type": "object",
                "properties": {"start_ms": {"type": "integer"}, "length_s": {"type": "integer"}},
                "required": ["start_ms", "length_s"],
                "additionalProperties": False,
            },
            "top_n": {"type": "integer", "minimum": 1, "maximum": 100},
            "metadata_bytes": {"type": "integer", "minimum": 0, "maximum": 1024},
            "version": {"type": "integer"},
            "extensions": {"type": "object"},
        },
        "required": ["keys"],
        "additionalProperties": False,
    },
    "Definition": {
        "type": "object",
        "properties": {
            "type": {"const": "board"},
            "action": {"enum": ["create", "update", "show"]},
            "definition": {"$ref": "#/components/schemas/BoardDefinition"},
        },
        "required": ["type", "action", "definition"],
    },
    "Definitions": {
        "type": "object",
        "properties": {
            "type": {"const": "board"},
            "action": {"const": "list"},
            "boards": {"type": "array", "items": {"$ref": "#/components/schemas/BoardDefinition"}},
        },
        "required": ["type", "action", "boards"],
    },
    "DefinitionDeleted": {
        "type": "object",
        "properties": {"type": {"const": "board"}, "action": {"const": "delete"}, "board": {"type": "string"}},
        "required": ["type", "action", "board"],
    },
    "Problem": {
        "type": "object",
        "properties": {
            "type": {"type": "string"},
            "title": {"type": "string"},
            "status": {"type": "integer"},
            "detail": {"type": "string"},
            "code": {"enum": ALL_CODES},
            "errors": {
                "type": "array",
                "description": "invalid_slips: each refused slip of the batch, by its index",
                "items": {
                    "type": "object",
                    "properties": {
                        "index": {"type": "integer"},
                        "code": {"enum": ALL_CODES},
                        "detail": {"type": "string"},
                    },
                    "required": ["index", "code", "detail"],
                },
            },
        },
        "required": ["type", "title", "status", "detail", "code"],
    },
}

# A batch's slip: queued (Queued's fields, status pending) or decided (Outcome)
SCHEMAS["SlipAnswer"] = {
    **SCHEMAS["Outcome"],
    "properties": {
        **SCHEMAS["Outcome"]["properties"],
        "status": {"enum": ["pending", "applied", "refused", "unknown"]},
    },
}

bodies.checked(SCHEMAS)  # every rule the document states is one the validator applies

# A request body's field that breaks its schema gets the code the library gives the same rule
# (bodies.py: "<field>.<keyword>" for one keyword's own, "*" for the body's default; else
# bad_message); unknown_field and missing_field whatever the body.
FIELD_CODES: dict[str, dict[str, str]] = {
    "Score": {
        "player_id": "invalid_player",
        "match_id": "invalid_id",
        "score": "invalid_points",
        "delta": "invalid_points",
        "ts": "invalid_timestamp",
        "name": "invalid_name",
        "region": "invalid_scope",
        "mode": "invalid_scope",
        "tournament": "invalid_tournament",
        "values": "invalid_key_value",
        "values.type": "wrong_key_count",
        "values.minItems": "wrong_key_count",
        "values.maxItems": "wrong_key_count",
        "meta": "metadata_too_large",
    },
    "Reason": {"reason": "invalid_reason"},
    "Correction": {
        "points": "invalid_points",
        "reason": "invalid_reason",
        "window": "invalid_window",
        "period": "invalid_period",
        "scopes": "invalid_scope",
        "values": "invalid_key_value",
        "values.type": "wrong_key_count",
        "values.minItems": "wrong_key_count",
        "values.maxItems": "wrong_key_count",
        "metadata": "metadata_too_large",
    },
    "Profile": {
        "*": "invalid_profile",
        "name": "invalid_name",
        "avatar": "invalid_avatar",
        "country": "invalid_country",
    },
    "BoardDefinition": {
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
    },
}

N_TOP = param("n", "query", {"type": "integer", "minimum": 1, "maximum": p.MAX_TOP}, "entries (default 10)")
K = param("k", "query", {"type": "integer", "minimum": 0, "maximum": p.MAX_AROUND}, "each side (default 5)")
N_FINALS = param("n", "query", {"type": "integer", "minimum": 1, "maximum": p.MAX_FINALS}, "periods (default 1)")
TOURNAMENT = param("tournament", "path", {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,32}$"}, "its id", True)
DEFINITION = param("definition", "path", {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,32}$"}, "a board id", True)
SUBMISSION = param("submission", "path", {"type": "string", "minLength": 1}, "a submission (match) id", True)
