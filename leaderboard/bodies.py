"""Request bodies checked against the OpenAPI document's own schemas (api/schemas.py), and board
files against the published board definition schema (boardschema.py): the
document a client reads is the rule the API applies (pure: no I/O)::

    violation = check(SCHEMAS, "Score", body, FIELD_CODES["Score"])
    if violation is not None:
        raise Problem(violation.code, violation.message)

A small, strict validator of the JSON Schema subset the document uses (``KEYWORDS``); ``checked``
refuses a schema with any other keyword, so the document cannot promise a rule the API does not
apply. An ``integer`` is a JSON number written without a fraction or exponent (``1.0`` is not
one), and ``true`` is no number.

The first violation found is the answer: ``unknown_field`` for a field the schema does not
declare, ``missing_field`` for a required one absent, else the code of the field's own rule
(``codes``: the code the library gives the same rule, such as ``invalid_points``; ``"<field>.<keyword>"``
when one keyword of the field has its own, ``"*"`` for the body's default) or ``bad_message``.
Its message names the field by its path (``keys[0].name``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

KEYWORDS = frozenset(
    {
        "$ref",
        "type",
        "const",
        "enum",
        "properties",
        "required",
        "additionalProperties",
        "minProperties",
        "minimum",
        "maximum",
        "minLength",
        "maxLength",
        "pattern",
        "items",
        "minItems",
        "maxItems",
        "description",  # an annotation: checks nothing
    }
)
REF = "#/components/schemas/"


@dataclass(frozen=True, slots=True)
class Violation:
    code: str
    field: str  # its path in the body: "" (the body), "player_id", "keys[0].name"
    message: str


def checked(schemas: Mapping[str, Any]) -> Mapping[str, Any]:
    """``schemas`` once every keyword of every schema is one this validator applies; ValueError
    naming the first that is not (a request schema with an unchecked rule must not load)."""
    for name, schema in schemas.items():
        _keywords(schema, name)
    return schemas


def check(schemas: Mapping[str, Any], name: str, value: Any, codes: Mapping[str, str]) -> Violation | None:
    """The first way ``value`` breaks the schema ``name`` of ``schemas``, or None."""
    found = _walk(schemas, schemas[name], value, ())
    if found is None:
        return None
    keyword, path, message = found
    field = _path_text(path)
    if keyword == "additionalProperties":
        return Violation("unknown_field", field, f"unknown field {field}; this body's fields are {message}")
    if keyword == "required":
        return Violation("missing_field", field, f"{field} is required")
    return Violation(_code(codes, keyword, path), field, f"{field or 'the body'} {message}")


def _code(codes: Mapping[str, str], keyword: str, path: tuple[str | int, ...]) -> str:
    """The code of the innermost named field on ``path`` that has one (the field's keyword's
    first, when the violation is that field's own), else the body's, else bad_message."""
    for i in range(len(path) - 1, -1, -1):
        part = path[i]
        if isinstance(part, str):
            if i == len(path) - 1 and f"{part}.{keyword}" in codes:
                return codes[f"{part}.{keyword}"]
            if part in codes:
                return codes[part]
    return codes.get("*", "bad_message")


Found = tuple[str, tuple[str | int, ...], str]  # keyword, path, what it asks


def _walk(
    schemas: Mapping[str, Any], schema: Mapping[str, Any], value: Any, path: tuple[str | int, ...]
) -> Found | None:
    if "$ref" in schema:
        return _walk(schemas, schemas[schema["$ref"].removeprefix(REF)], value, path)
    if "type" in schema:
        kinds = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(_is(kind, value) for kind in kinds):
            return "type", path, f"must be {' or '.join(kinds)}"
    if "const" in schema and not _same(value, schema["const"]):
        return "const", path, f"must be {schema['const']!r}"
    if "enum" in schema and not any(_same(value, option) for option in schema["enum"]):
        return "enum", path, f"must be one of {', '.join(map(str, schema['enum']))}"
    if isinstance(value, str):
        return _text(schema, value, path)
    if _is("number", value):
        if "minimum" in schema and value < schema["minimum"]:
            return "minimum", path, f"must be at least {schema['minimum']}"
        if "maximum" in schema and value > schema["maximum"]:
            return "maximum", path, f"must be at most {schema['maximum']}"
    if isinstance(value, list):
        return _array(schemas, schema, value, path)
    if isinstance(value, dict):
        return _object(schemas, schema, value, path)
    return None


def _text(schema: Mapping[str, Any], value: str, path: tuple[str | int, ...]) -> Found | None:
    if "minLength" in schema and len(value) < schema["minLength"]:
        return "minLength", path, f"must be at least {schema['minLength']} characters"
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        return "maxLength", path, f"must be at most {schema['maxLength']} characters"
    if "pattern" in schema and not re.search(schema["pattern"], value):
        return "pattern", path, f"must match {schema['pattern']}"
    return None


def _array(
    schemas: Mapping[str, Any], schema: Mapping[str, Any], value: list[Any], path: tuple[str | int, ...]
) -> Found | None:
    if "minItems" in schema and len(value) < schema["minItems"]:
        return "minItems", path, f"must hold at least {schema['minItems']} items"
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        return "maxItems", path, f"must hold at most {schema['maxItems']} items"
    if "items" in schema:
        for i, item in enumerate(value):
            found = _walk(schemas, schema["items"], item, (*path, i))
            if found is not None:
                return found
    return None


def _object(
    schemas: Mapping[str, Any], schema: Mapping[str, Any], value: dict[str, Any], path: tuple[str | int, ...]
) -> Found | None:
    declared = schema.get("properties", {})
    if schema.get("additionalProperties", True) is False:
        for name in value:
            if name not in declared:
                return "additionalProperties", (*path, name), ", ".join(declared)
    for name in schema.get("required", ()):
        if name not in value:
            return "required", (*path, name), ""
    if "minProperties" in schema and len(value) < schema["minProperties"]:
        return "minProperties", path, f"must hold at least {schema['minProperties']} of {', '.join(declared)}"
    for name, sub in declared.items():
        if name in value:
            found = _walk(schemas, sub, value[name], (*path, name))
            if found is not None:
                return found
    return None


def _is(kind: str, value: Any) -> bool:
    if kind == "integer":
        return type(value) is int
    if kind == "number":
        return type(value) in (int, float)
    return isinstance(value, _TYPES[kind])


_TYPES: dict[str, type | tuple[type, ...]] = {
    "string": str,
    "boolean": bool,
    "array": list,
    "object": dict,
    "null": type(None),
}


def _same(value: Any, expected: Any) -> bool:
    """JSON equality: ``true`` is not ``1``."""
    return type(value) is type(expected) and bool(value == expected)


def _path_text(path: tuple[str | int, ...]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else f".{part}" if out else part
    return out


def _keywords(schema: Any, where: str) -> None:
    if not isinstance(schema, Mapping):
        raise ValueError(f"{where}: a schema must be an object")
    unknown = set(schema) - KEYWORDS
    if unknown:
        raise ValueError(f"{where}: keyword(s) {', '.join(sorted(unknown))} not checked by api/bodies.py")
    if schema.get("additionalProperties", False) is not False:
        raise ValueError(f"{where}: additionalProperties may only be false")
    for name, sub in schema.get("properties", {}).items():
        _keywords(sub, f"{where}.{name}")
    if "items" in schema:
        _keywords(schema["items"], f"{where}[]")
