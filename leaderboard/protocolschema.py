"""The socket protocol's published description, generated from the code that defines it (pure
but for ``main``): JSON Schema documents of every message (leaderboard/messages.py), error code
(leaderboard/errors.py) and close code (leaderboard/closes.py), an AsyncAPI 3 document that
references them, and the JS client's TypeScript types of the messages (leaderboard/tstypes.py)::

    python -m leaderboard.protocolschema           # writes them (docs/protocol/, docs/asyncapi.json, clients/js/)
                                                   # and docs/protocol.md's table of close codes
    python -m leaderboard.protocolschema --check   # exit 1 when a committed one differs

tests/test_protocol_schema.py holds the committed files equal to what this writes.
"""

from __future__ import annotations

import argparse
import json
import sys
import types
from pathlib import Path
from typing import (
    Annotated,
    Any,
    Literal,
    NotRequired,
    Required,
    Union,
    get_args,
    get_origin,
    get_type_hints,
    is_typeddict,
)

from . import messages
from .closes import CLOSES, Close
from .wire import PROTOCOL

DIALECT = "https://json-schema.org/draft/2020-12/schema"
BASE = "https://leaderboard.invalid/schemas/protocol/"
SERVER_FILE = "server.schema.json"
CLIENT_FILE = "client.schema.json"
CLOSE_FILE = "close.schema.json"


def _annotated(tp: Any, into: dict[str, Any], defs: dict[str, Any], refs: str) -> Any:
    """``tp`` without its Annotated layer, whose Enum and Doc are set on ``into`` (a named Enum
    defined once in ``defs``, each value with its meaning)."""
    while get_origin(tp) in (Annotated, NotRequired, Required):
        tp, *extras = get_args(tp)
        for extra in extras:
            if isinstance(extra, messages.Enum) and extra.name:
                meanings = extra.meanings or {}
                defs[extra.name] = {
                    "type": "string",
                    "oneOf": [{"const": v, "description": meanings[v]} if v in meanings else {"const": v}
                              for v in extra.values],
                }  # fmt: skip
                into["$ref"] = f"{refs}{extra.name}"
            elif isinstance(extra, messages.Enum):
                into["enum"] = list(extra.values)
            elif isinstance(extra, messages.Doc):
                into.setdefault("description", extra.text)
    return tp


_SIMPLE: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean", type(None): "null"}


class _Builder:
    """The schema of each type, nested TypedDicts gathered as ``$defs`` by name (referenced as
    ``refs`` + name: a JSON Schema document's own ``$defs``, or an OpenAPI document's components)."""

    def __init__(self, refs: str = "#/$defs/") -> None:
        self.defs: dict[str, Any] = {}
        self.refs = refs

    def schema(self, tp: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        tp = _annotated(tp, out, self.defs, self.refs)
        origin = get_origin(tp)
        if "$ref" in out or tp is Any:
            pass
        elif tp in _SIMPLE:
            out["type"] = _SIMPLE[tp]
        elif origin is Literal:
            values = list(get_args(tp))
            if len(values) == 1:
                out["const"] = values[0]
            else:
                out["enum"] = values
        elif origin in (Union, types.UnionType):
            parts = [self.schema(arg) for arg in get_args(tp)]
            if all(set(p) == {"type"} for p in parts):
                out["type"] = [p["type"] for p in parts]
            else:
                out["anyOf"] = parts
        elif origin is list:
            [item] = get_args(tp)
            out |= {"type": "array", "items": self.schema(item)}
        elif origin is dict:
            out["type"] = "object"
        elif is_typeddict(tp):
            self.define(tp)
            out["$ref"] = f"{self.refs}{tp.__name__}"
        else:
            raise TypeError(f"no schema for {tp!r}")
        return out

    def define(self, td: Any) -> None:
        name = td.__name__
        if name in self.defs:
            return
        self.defs[name] = {}  # a recursive reference finds it
        hints = get_type_hints(td, include_extras=True)
        body: dict[str, Any] = {"type": "object"}
        if td.__doc__ and not td.__doc__.startswith(f"{name}("):  # a TypedDict without one gets a signature
            body["description"] = " ".join(td.__doc__.split()).replace("``", "`")
        body["properties"] = {field: self.schema(tp) for field, tp in hints.items()}
        body["required"] = [f for f in hints if f in td.__required_keys__]
        # closed: a field the code sends must be described here (a client ignores fields it does
        # not know, docs/protocol.md: an addition keeps the protocol's version)
        body["additionalProperties"] = False
        self.defs[name] = body


def _document(file: str, title: str, kinds: tuple[type, ...]) -> dict[str, Any]:
    builder = _Builder()
    for kind in kinds:
        builder.define(kind)
    return {
        "$schema": DIALECT,
        "$id": BASE + file,
        "title": title,
        "description": f"Protocol version {PROTOCOL}; generated by python -m leaderboard.protocolschema.",
        "oneOf": [{"$ref": f"#/$defs/{k.__name__}"} for k in kinds],
        "discriminator": {"propertyName": "type"},
        "$defs": dict(sorted(builder.defs.items())),
    }


def components(named: dict[str, type], refs: str) -> dict[str, Any]:
    """The schemas of the messages ``named`` (each under the name given) and of the types they
    nest (each under its own name, referenced as ``refs`` + name): the HTTP API's answers are
    the socket's replies (api/schemas.py), so its OpenAPI document takes them from here too.
    ValueError when a nested type would take a given name, or a renamed message is nested."""
    builder = _Builder(refs)
    for kind in named.values():
        builder.define(kind)
    given = {kind.__name__: name for name, kind in named.items()}
    nested = {name: body for name, body in builder.defs.items() if name not in given}
    text = json.dumps(builder.defs)
    renamed_nested = [n for n, name in given.items() if n != name and f'"{refs}{n}"' in text]
    if set(nested) & set(named) or renamed_nested:
        raise ValueError(f"names given twice: {sorted(set(nested) & set(named))}, renamed yet nested: {renamed_nested}")
    return {**nested, **{name: builder.defs[kind.__name__] for name, kind in named.items()}}


def server_schema() -> dict[str, Any]:
    return _document(SERVER_FILE, "Leaderboard socket: server to client", messages.SERVER)


def client_schema() -> dict[str, Any]:
    return _document(CLIENT_FILE, "Leaderboard socket: client to server", messages.CLIENT)


def close_schema() -> dict[str, Any]:
    """The close frames a gateway sends: each code with its reasons, when and what a client does."""
    closes = [
        {
            "type": "object",
            "description": f"{c.when}; a client should {c.client}",
            "properties": {
                "code": {"const": c.code},
                "reason": _reason(c),
            },
            "required": ["code", "reason"],
        }
        for c in CLOSES
    ]
    return {
        "$schema": DIALECT,
        "$id": BASE + CLOSE_FILE,
        "title": "Leaderboard socket: close codes",
        "description": "A WebSocket close frame a gateway sends, as {code, reason}.",
        "oneOf": closes,
    }


def _reason(close: Close) -> dict[str, Any]:
    if close.reason is None:
        return {"type": "string"}
    if close.prefix:
        return {"type": "string", "pattern": f"^{_escape(close.reason)}: "}
    return {"const": close.reason}


# docs/protocol.md's table of close codes lies between these two lines, written by close_table().
TABLE_START = "<!-- generated from leaderboard/closes.py by python -m leaderboard.protocolschema -->"
TABLE_END = "<!-- end of the generated table -->"


def close_table() -> str:
    """The close codes as docs/protocol.md shows them: one row per code and reason."""
    rows = ["| code | reason | when | a client should |", "|---|---|---|---|"]
    for c in CLOSES:
        reason = "websockets' own" if c.reason is None else f"`{c.reason}{': <game>' if c.prefix else ''}`"
        rows.append(f"| {c.code} | {reason} | {c.when} | {c.client} |")
    return "\n".join(rows) + "\n"


def spliced(text: str, table: str) -> str:
    """``text`` (docs/protocol.md) with ``table`` between TABLE_START and TABLE_END."""
    head, start, rest = text.partition(TABLE_START + "\n")
    _, end, tail = rest.partition(TABLE_END)
    if not (start and end):
        raise ValueError(f"docs/protocol.md lost the lines {TABLE_START!r} and {TABLE_END!r}")
    return f"{head}{start}{table}{end}{tail}"


def _escape(text: str) -> str:
    return "".join("\\" + ch if ch in r".^$*+?()[]{}|\\" else ch for ch in text)


def asyncapi() -> dict[str, Any]:
    """The AsyncAPI 3 document of the gateway: one channel (the socket), what it sends and receives."""
    server_msgs = {k.__name__: f"protocol/{SERVER_FILE}#/$defs/{k.__name__}" for k in messages.SERVER}
    client_msgs = {k.__name__: f"protocol/{CLIENT_FILE}#/$defs/{k.__name__}" for k in messages.CLIENT}
    components = {
        name: {"name": name, "title": name, "contentType": "application/json", "payload": {"$ref": ref}}
        for name, ref in {**server_msgs, **client_msgs}.items()
    }
    for name, msg in components.items():
        schema = (server_schema() if name in server_msgs else client_schema())["$defs"][name]
        if "description" in schema:
            msg["summary"] = schema["description"]
    channel_msgs = {name: {"$ref": f"#/components/messages/{name}"} for name in components}
    return {
        "asyncapi": "3.0.0",
        "info": {
            "title": "Leaderboard gateway socket",
            "version": str(PROTOCOL),
            "description": "Live leaderboards over one WebSocket per player (docs/protocol.md). JSON text "
            "frames, one object each; the version is welcome.protocol. Close codes: protocol/close.schema.json.",
        },
        "defaultContentType": "application/json",
        "servers": {
            "gateway": {
                "host": "localhost:8000",
                "protocol": "ws",
                "pathname": "/ws",
                "description": "a gateway, or the balancer in front of them (wss:// with TLS)",
            }
        },
        "channels": {
            "socket": {
                "address": "/ws",
                "description": "?game=<name> picks the game; ?token=<JWT> or a hello message identifies the player",
                "messages": channel_msgs,
            }
        },
        "operations": {
            "push": {
                "action": "send",
                "channel": {"$ref": "#/channels/socket"},
                "summary": "what the gateway sends: pushes, and replies carrying the request's id",
                "messages": [{"$ref": f"#/channels/socket/messages/{n}"} for n in server_msgs],
            },
            **{_request_name(kind): _operation(kind, messages.REPLIES.get(kind)) for kind in messages.CLIENT},
        },
        "components": {"messages": components},
    }


def _request_name(kind: type) -> str:
    return kind.__name__.removesuffix("Request").lower()


def _operation(kind: type, reply: type | None) -> dict[str, Any]:
    """A client message the gateway receives, and its reply (with the request's ``id``), if any;
    a refused one is answered by an ``Error`` with the id instead."""
    out: dict[str, Any] = {
        "action": "receive",
        "channel": {"$ref": "#/channels/socket"},
        "messages": [{"$ref": f"#/channels/socket/messages/{kind.__name__}"}],
    }
    if reply is not None:
        out["reply"] = {
            "channel": {"$ref": "#/channels/socket"},
            "messages": [
                {"$ref": f"#/channels/socket/messages/{reply.__name__}"},
                {"$ref": "#/channels/socket/messages/Error"},
            ],
        }
    return out


def documents(root: Path) -> dict[str, str]:
    """Each generated file (its path from the repository ``root``) and its text."""
    from .tstypes import declarations  # the TypeScript view of the same schema

    def text(doc: dict[str, Any]) -> str:
        return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"

    return {
        f"docs/protocol/{SERVER_FILE}": text(server_schema()),
        f"docs/protocol/{CLIENT_FILE}": text(client_schema()),
        f"docs/protocol/{CLOSE_FILE}": text(close_schema()),
        "docs/asyncapi.json": text(asyncapi()),
        "clients/js/src/messages.d.ts": declarations(server_schema(), client_schema(), asyncapi(), PROTOCOL),
        "docs/protocol.md": spliced((root / "docs/protocol.md").read_text(), close_table()),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m leaderboard.protocolschema", description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=Path, default=Path("."), help="the repository's root (default: here)")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when a file differs")
    args = parser.parse_args(argv)
    stale = []
    for path, body in documents(args.root).items():
        file = args.root / path
        if file.is_file() and file.read_text() == body:
            continue
        stale.append(path)
        if not args.check:
            file.parent.mkdir(parents=True, exist_ok=True)
            file.write_text(body)
    for path in stale:
        print(("differs: " if args.check else "wrote: ") + path)
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
