"""TypeScript declarations of the socket protocol's messages, made from its JSON Schema documents
(leaderboard/protocolschema.py), for the JS client (clients/js/src/messages.d.ts) (pure).

Only the JSON Schema the generator writes is read here: objects of named properties, ``$ref``
to ``$defs``, ``const``, ``enum``, ``oneOf`` of constants, ``anyOf``, and ``type`` as a name or a
list of names. Anything else is refused rather than typed loosely.
"""

from __future__ import annotations

import json
from typing import Any

HEADER = """\
// The socket protocol's messages (docs/protocol.md), generated from docs/protocol/*.schema.json
// by `python -m leaderboard.protocolschema`: do not edit (tests/test_protocol_schema.py checks it).
"""

_PRIMITIVE = {"string": "string", "integer": "number", "number": "number", "boolean": "boolean", "null": "null"}


def _type(schema: dict[str, Any]) -> str:
    if "$ref" in schema:
        return str(schema["$ref"]).rpartition("/")[2]
    if "const" in schema:
        return json.dumps(schema["const"])
    if "enum" in schema:
        return " | ".join(json.dumps(v) for v in schema["enum"])
    if "oneOf" in schema:
        return " | ".join(_type(s) for s in schema["oneOf"])
    if "anyOf" in schema:
        return " | ".join(_type(s) for s in schema["anyOf"])
    kind = schema.get("type")
    if kind is None:
        return "unknown"
    if isinstance(kind, list):
        return " | ".join(_PRIMITIVE[k] for k in kind)
    if kind == "array":
        item = _type(schema["items"])
        return f"Array<{item}>"
    if kind == "object":
        return "Record<string, unknown>"
    if kind in _PRIMITIVE:
        return _PRIMITIVE[kind]
    raise ValueError(f"no TypeScript type for {schema!r}")


def _comment(text: str | None, indent: str = "") -> str:
    return f"{indent}/** {text} */\n" if text else ""


def _fields(schema: dict[str, Any]) -> dict[str, tuple[Any, bool]]:
    """An object's properties, each with whether it is required."""
    required = set(schema.get("required", ()))
    return {field: (prop, field in required) for field, prop in schema.get("properties", {}).items()}


def _base(name: str, schema: dict[str, Any], defs: dict[str, Any]) -> str | None:
    """The largest other interface of the same document whose every field this one has alike
    (Heard's Announce, a snapshot Entry's FinalEntry): declared as ``extends`` it, so its fields
    are written once. (A request and its reply may look alike; one never extends the other.)"""
    mine = _fields(schema)
    bases = [
        (len(theirs), other)
        for other, their_schema in defs.items()
        if other != name and len(theirs := _fields(their_schema)) >= 2
        and all(mine.get(field) == value for field, value in theirs.items())
    ]  # fmt: skip
    return max(bases)[1] if bases else None


def _declaration(name: str, schema: dict[str, Any], defs: dict[str, Any]) -> str:
    """``defs``: the definitions of the document ``name`` is from."""
    if schema.get("type") != "object" or "properties" not in schema:
        return f"{_comment(schema.get('description'))}export type {name} = {_type(schema)};\n"
    required = set(schema.get("required", ()))
    base = _base(name, schema, defs)
    inherited = set() if base is None else set(_fields(defs[base]))
    extends = "" if base is None else f" extends {base}"
    lines = [f"{_comment(schema.get('description'))}export interface {name}{extends} {{\n"]
    for field, prop in schema["properties"].items():
        if field in inherited:
            continue
        optional = "" if field in required else "?"
        lines.append(f"{_comment(prop.get('description'), '  ')}  {field}{optional}: {_type(prop)};\n")
    lines.append("}\n")
    return "".join(lines)


def declarations(server: dict[str, Any], client: dict[str, Any], asyncapi: dict[str, Any], protocol: int) -> str:
    """One module of interfaces: every ``$defs`` entry of both documents (a part both share, such
    as ``Shown``, once: the two must agree), ``ServerMessage`` and ``ClientMessage``, and
    ``Replies``: each request's reply, from the AsyncAPI document's operations."""
    defs: dict[str, Any] = {}
    home: dict[str, dict[str, Any]] = {}  # each definition's document's definitions
    for doc in (server, client):
        for name, schema in doc["$defs"].items():
            if defs.setdefault(name, schema) != schema:
                raise ValueError(f"{name} differs between the documents")
            home.setdefault(name, doc["$defs"])
    out = [
        HEADER,
        f"\n/** The protocol version these types describe (welcome.protocol). */\nexport type Protocol = {protocol};\n",
    ]
    for name, schema in sorted(defs.items()):
        out.append("\n" + _declaration(name, schema, home[name]))
    for union, doc, what in (("ServerMessage", server, "gateway sends"), ("ClientMessage", client, "client sends")):
        members = " | ".join(_type(ref) for ref in doc["oneOf"])
        out.append(f"\n/** Every message a {what}, told apart by `type`. */\nexport type {union} = {members};\n")
    out.append("\n/** Each request's reply (it carries the request's `id`), by the request's `type`. */\n")
    out.append("export interface Replies {\n")
    for op in asyncapi["operations"].values():
        if "reply" not in op:
            continue
        [request] = [_name(m) for m in op["messages"]]
        reply = _name(op["reply"]["messages"][0])
        out.append(f"  {defs[request]['properties']['type']['const']}: {reply};\n")
    out.append("}\n")
    return "".join(out)


def _name(ref: dict[str, str]) -> str:
    return ref["$ref"].rpartition("/")[2]
