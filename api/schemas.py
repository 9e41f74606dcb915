"""The HTTP API's OpenAPI schemas: the parameters and bodies the route table (routes.py) names,
and the codes a body's broken field gets (``FIELD_CODES``). ``bodies.py`` checks request bodies
against these same dicts, so the document and the checks cannot drift apart; the answers that are
the socket's replies (``ANSWERS``) are generated from leaderboard/messages.py, as the socket's
published schema is, so the two transports are described by one definition."""

from __future__ import annotations

from typing import Any

from leaderboard import bodies
from leaderboard import messages as m
from leaderboard import protocol as p
from leaderboard.boardschema import FIELD_CODES as BOARD_CODES
from leaderboard.boardschema import definition_schema
from leaderboard.keys import SCOPE_KINDS
from leaderboard.protocolschema import components

from .problems import ALL_CODES


def param(name: str, where: str, schema: dict[str, Any], doc: str, required: bool = False) -> dict[str, Any]:
    return {"name": name, "in": where, "required": required, "description": doc, "schema": schema}


# Every board by one parameter: the game's own scopes, and a defined board as board:<id> or its
# bare id, or one of its scopes as board:<id>:region:<name> (docs/data-model.md "Board
# definitions"); a bare "global" is the game's own board
_KINDS, _NAME = "|".join(SCOPE_KINDS), "[A-Za-z0-9_-]{1,32}"
BOARD = param(
    "board",
    "path",
    {"type": "string", "pattern": f"^((({_KINDS}|board):)?{_NAME}|board:{_NAME}:({_KINDS}):{_NAME})$"},
    "the board: global, region:<name>, mode:<name>, or a defined board as board:<id> or <id>, or one of "
    "its scopes as board:<id>:region:<name>, board:<id>:mode:<name>",
    True,
)
PLAYER = param("player", "path", {"type": "string", "minLength": 1}, "a player id", True)
WINDOW = param("window", "query", {"type": "string"}, "the board's window (default: the socket's default window)")
PERIOD = param("period", "query", {"type": "string"}, "previous, or a period label such as 2026-W48")
GAME = param("game", "query", {"type": "string"}, "the game (default: the first game served)")
READS = [BOARD, WINDOW, PERIOD, GAME]

# The answers that are the socket's replies, from the same definitions (leaderboard/messages.py):
# the document describes exactly what the socket's encoders build.
ANSWERS = {
    "Top": m.Top,
    "Rank": m.Rank,
    "Around": m.Around,
    "Ranks": m.Ranks,
    "Stats": m.Stats,
    "Finals": m.Finals,
    "Status": m.Status,
    "Banned": m.Banned,
    "Unbanned": m.Unbanned,
    "Corrected": m.Corrected,
    "ProfileSet": m.Profile,
    "Joined": m.Joined,
}
ANSWER_SCHEMAS = components(ANSWERS, "#/components/schemas/")  # with the types they nest
MS_SINCE_EPOCH = {"type": "integer", "minimum": 0, "maximum": 2**53 - 1}
SCHEMAS: dict[str, Any] = {
    **ANSWER_SCHEMAS,
    "Players": {
        "type": "object",
        "properties": {
            "players": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": p.MAX_FRIENDS}
        },
        "required": ["players"],
        "additionalProperties": False,
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
                "description": "a defined board's (board:<id>) key values, int64 (text beyond 2^53), not a score; "
                "the game's boards' when the game's stored default keeps key values",
            },
            "meta": {
                "type": "string",
                "maxLength": 1024,
                "description": "the entry's metadata (a defined board's, or the game's stored default's)",
            },
        },
        "required": ["player_id"],
        "additionalProperties": False,
        "description": "one of score and delta, or a board's values; match_id or the Idempotency-Key "
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
    "BoardDefinition": definition_schema(),  # from the parser's rules (leaderboard/boardschema.py)
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
    # the operators' routes (console.py): each answer as leaderboard/lookup.py, audit.py,
    # deadletters.py and fleetview.py make it
    "PlayerLookup": {
        "type": "object",
        "properties": {
            "player": {"type": "string"},
            "banned": {"type": ["object", "null"], "description": "the ban record: by, reason, at"},
            "profile": {"type": ["object", "null"]},
            "badges": {"type": "array", "items": {"type": "string"}},
            "entries": {
                "type": "array",
                "description": "every board the player is on: board, window, period, rank, points or values",
                "items": {"type": "object", "required": ["board", "window", "period", "rank"]},
            },
        },
        "required": ["player", "banned", "profile", "badges", "entries"],
    },
    "AuditLog": {
        "type": "object",
        "properties": {
            "entries": {
                "type": "array",
                "description": "newest first",
                "items": {
                    "type": "object",
                    "properties": {
                        "id": {"type": "string"},
                        "at": {"type": "integer"},
                        "actor": {"type": "string"},
                        "action": {"enum": ["ban", "unban", "correct", "remove", "requeue", "drop"]},
                        "player": {"type": "string"},
                        "reason": {"type": "string"},
                        "before": {},
                        "after": {},
                    },
                    "required": ["id", "at", "actor", "action", "player", "reason", "before", "after"],
                },
            }
        },
        "required": ["entries"],
    },
    "DeadLetters": {
        "type": "object",
        "properties": {
            "count": {"type": "integer"},
            "letters": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "id": {"type": "string"},
                        "fields": {"type": "object", "description": "the refused slip's own fields"},
                        "code": {"type": "string"},
                        "message": {"type": "string"},
                        "at": {"type": "integer"},
                        "by": {"type": "string"},
                    },
                    "required": ["id", "fields", "code", "message", "at", "by"],
                },
            },
        },
        "required": ["count", "letters"],
    },
    "LetterAction": {
        "type": "object",
        "properties": {
            "letter": {"type": "string"},
            "action": {"enum": ["requeue", "drop"]},
            "queued": {"type": "string", "description": "requeue: the slip's new queue entry"},
        },
        "required": ["letter", "action"],
    },
    "Fleet": {
        "type": "object",
        "properties": {
            "gateways": {"type": "array", "items": {"type": "object", "required": ["id", "connections", "at"]}},
            "connections": {"type": "integer"},
            "scorers": {"type": "array", "items": {"type": "object", "required": ["name", "pending", "idle_ms"]}},
            "lease": {"type": ["string", "null"], "description": "the publisher lease's holder"},
            "backlog": {
                "type": "object",
                "properties": {
                    "queued": {"type": "integer"},
                    "undelivered": {"type": "integer"},
                    "pending": {"type": "integer"},
                },
                "required": ["queued", "undelivered", "pending"],
            },
            "dead_letters": {"type": "integer"},
            "at": {"type": "integer"},
        },
        "required": ["gateways", "connections", "scorers", "lease", "backlog", "dead_letters", "at"],
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

# every rule the document states of a request body is one the validator applies
bodies.checked({name: schema for name, schema in SCHEMAS.items() if name not in ANSWER_SCHEMAS})

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
    "BoardDefinition": BOARD_CODES,
}

N_TOP = param("n", "query", {"type": "integer", "minimum": 1, "maximum": p.MAX_TOP}, "entries (default 10)")
K = param("k", "query", {"type": "integer", "minimum": 0, "maximum": p.MAX_AROUND}, "each side (default 5)")
N_PAGE = param("n", "query", {"type": "integer", "minimum": 1, "maximum": 200}, "entries (default 50)")
N_FINALS = param("n", "query", {"type": "integer", "minimum": 1, "maximum": p.MAX_FINALS}, "periods (default 1)")
TOURNAMENT = param("tournament", "path", {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,32}$"}, "its id", True)
DEFINITION = param("definition", "path", {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,32}$"}, "a board id", True)
LETTER = param("letter", "path", {"type": "string", "pattern": "^[0-9]{1,20}-[0-9]{1,20}$"}, "a dead letter's id", True)
SUBMISSION = param("submission", "path", {"type": "string", "minLength": 1}, "a submission (match) id", True)
