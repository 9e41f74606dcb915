"""The request body validator (api/bodies.py) against the document's own schemas: it applies
every rule they state (a schema with a keyword it does not check cannot load), it agrees with a
full JSON Schema validator on them, and each code it answers is one the document lists."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from api.problems import ALL_CODES
from api.routes import openapi
from api.schemas import FIELD_CODES, SCHEMAS
from leaderboard import bodies

CASES: list[tuple[str, Any]] = [
    ("Score", {"player_id": "mia", "score": 1, "match_id": "m"}),
    ("Score", {"player_id": "mia", "score": "1200", "match_id": "m"}),
    ("Score", {"player_id": "mia", "values": "78000", "match_id": "m"}),
    ("Score", {"player_id": "mia", "values": [1, "-5"], "match_id": "m"}),
    ("Score", {"player_id": "mia", "values": [1, "5x"], "match_id": "m"}),
    ("Score", {"playerId": "mia", "score": 1}),
    ("Score", {"player_id": "", "score": 1}),
    ("Score", {"player_id": "mia", "score": -1}),
    ("Score", {"player_id": "mia", "score": True}),
    ("Profile", {}),
    ("Profile", {"name": "Mia"}),
    ("TournamentSpan", {"start_ms": 1, "end_ms": 2**53}),
    ("BoardDefinition", {"keys": [{"name": "floor", "direction": "up"}]}),
    ("BoardDefinition", {"keys": [{"name": "floor", "dir": "asc"}]}),
    ("BoardDefinition", {"keys": [{"name": "floor"}], "season": {"start_ms": 0, "length_s": 3600}}),
    ("Correction", {"reason": "x", "values": [1, 2, 3, 4, 5, 6]}),
]


@pytest.mark.parametrize(("name", "body"), CASES)
def test_the_validator_agrees_with_json_schema(name: str, body: Any) -> None:
    document = openapi()
    schema = {"$ref": f"#/components/schemas/{name}", "components": document["components"]}
    valid = jsonschema.Draft202012Validator(schema).is_valid(body)
    violation = bodies.check(SCHEMAS, name, body, FIELD_CODES.get(name, {}))
    assert (violation is None) == valid, violation
    if violation is not None:
        assert violation.code in ALL_CODES


def test_a_keyword_the_validator_does_not_apply_cannot_load() -> None:
    with pytest.raises(ValueError, match="oneOf"):
        bodies.checked({"X": {"type": "object", "properties": {"a": {"oneOf": []}}}})
    with pytest.raises(ValueError):
        bodies.checked({"X": {"type": "object", "additionalProperties": {"type": "string"}}})


def test_every_field_code_is_listed_by_the_document() -> None:
    assert {code for codes in FIELD_CODES.values() for code in codes.values()} <= set(ALL_CODES)
    assert {"unknown_field", "missing_field", "idempotency_conflict"} <= set(ALL_CODES)
