"""The socket protocol's published description (docs/protocol/, docs/asyncapi.json, the JS
client's messages.d.ts) is what the code generates, is valid JSON Schema and AsyncAPI 3, and is
true: every message a real fleet's gateway sends validates against it (a fleet driven through
every server message type), every client message's schema names exactly the fields its parser
reads, every error code the code raises and every close the gateway makes is listed, and a
field added to an encoder without its type is refused by mypy."""

from __future__ import annotations

import ast
import asyncio
import json
import re
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, get_args, get_type_hints

import jsonschema
import orjson
import pytest
import websockets
from websockets.asyncio.client import ClientConnection

from fleet.redis_server import RedisServer
from fleet.supervisor import Fleet, FleetSettings
from leaderboard import GameConfig, Leaderboard, closes, connect, messages, protocol, protocolschema
from leaderboard.auth import issue
from leaderboard.errors import all_codes

ROOT = Path(__file__).resolve().parent.parent
ASYNCAPI_SCHEMA = ROOT / "clients/js/node_modules/@asyncapi/specs/schemas/3.0.0.json"
GAME = "schemas"
DEFS = protocolschema.server_schema()["$defs"]
# each server message type and the definition that describes it
SERVER_TYPES = {get_args(get_type_hints(k)["type"])[0]: k.__name__ for k in messages.SERVER}


def test_the_committed_documents_are_the_generated_ones() -> None:
    for path, text in protocolschema.documents(ROOT).items():
        assert (ROOT / path).read_text() == text, f"{path}: regenerate with python -m leaderboard.protocolschema"


def test_the_json_schemas_are_valid_and_every_asyncapi_reference_resolves() -> None:
    docs = {name: json.loads((ROOT / "docs/protocol" / name).read_text()) for name in ("server.schema.json",
            "client.schema.json", "close.schema.json")}  # fmt: skip
    for doc in docs.values():
        jsonschema.Draft202012Validator.check_schema(doc)
    api = json.loads((ROOT / "docs/asyncapi.json").read_text())
    for name, message in api["components"]["messages"].items():
        file, _, pointer = message["payload"]["$ref"].partition("#/$defs/")
        assert pointer == name and pointer in docs[file.removeprefix("protocol/")]["$defs"], name


def test_the_asyncapi_document_is_valid_asyncapi_3() -> None:
    if not ASYNCAPI_SCHEMA.is_file():
        pytest.skip("clients/js/node_modules is missing (./dev install runs npm ci): the AsyncAPI schema comes from it")
    schema = json.loads(ASYNCAPI_SCHEMA.read_text())
    validator = jsonschema.validators.validator_for(schema)(schema)
    api = json.loads((ROOT / "docs/asyncapi.json").read_text())
    assert [e.message for e in validator.iter_errors(api)] == []
    broken = {**api, "operations": {"x": {"action": "publish", "channel": {"$ref": "#/channels/socket"}}}}
    assert list(validator.iter_errors(broken)), "the validator refuses an AsyncAPI 2 action"


class Reading(dict[str, Any]):
    """A client message that records which of its fields the parser reads."""

    def __init__(self, fields: dict[str, Any]) -> None:
        super().__init__(fields)
        self.read: set[str] = set()

    def get(self, key: str, default: Any = None) -> Any:
        self.read.add(key)
        return super().get(key, default)

    def __getitem__(self, key: str) -> Any:
        self.read.add(key)
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        self.read.add(str(key))
        return super().__contains__(key)


# One full message of each client type: every field the schema names, valid for the parser.
CLIENT_EXAMPLES: dict[str, dict[str, Any]] = {
    "hello": {"token": "t", "deltas": True},
    "ping": {},
    "boards": {},
    "subscribe": {"board": "global", "window": "weekly", "period": None},
    "unsubscribe": {"board": "global", "window": "weekly"},
    "resync": {"board": "global", "window": "weekly"},
    "top": {"board": "global", "window": "weekly", "n": 3, "period": "previous"},
    "rank": {"board": "global", "window": "weekly", "player": "mia", "period": "previous"},
    "around": {"board": "global", "window": "weekly", "player": "mia", "k": 2, "period": "previous"},
    "ranks": {"board": "global", "window": "weekly", "players": ["mia"], "period": "previous"},
    "stats": {"board": "global", "window": "weekly", "period": "previous"},
    "recent": {"board": "global", "window": "weekly"},
    "finals": {"board": "global", "window": "weekly", "n": 2},
    "join": {"tournament": "spring", "players": ["mia"]},
    "submit": {"submission": {"id": "m-1", "player": "mia", "points": 5}},
    "status": {"submission": "m-1"},
    "ban": {"player": "mia", "reason": "cheat"},
    "unban": {"player": "mia", "reason": "appeal"},
    "correct": {
        "player": "mia",
        "points": 5,
        "reason": "r",
        "window": "weekly",
        "period": "previous",
        "scopes": ["board:tower"],
        "values": [1],
        "metadata": "m",
        "remove": False,
    },
    "profile": {"player": "mia", "profile": {"name": "Mia"}},
    "board": {"action": "create", "board": "tower", "definition": {"id": "tower", "keys": [{"name": "floor"}]}},
    "watch": {"friends": ["leo"], "top": True},
}


@pytest.mark.parametrize("kind", messages.CLIENT, ids=lambda k: k.__name__)
def test_each_client_message_schema_names_the_fields_its_parser_reads(kind: type) -> None:
    """A field the parser reads but the schema lacks (or the reverse) fails here: the client
    messages' types and protocol.py's parsers cannot drift apart."""
    hints = get_type_hints(kind)
    kind_name = get_args(hints["type"])[0]
    declared = set(hints) - {"type", "id"}
    example = CLIENT_EXAMPLES[kind_name]
    assert set(example) == declared, "the example carries every declared field"
    msg = Reading({"type": kind_name, "id": 1, **example})
    windows = ["weekly", "daily"]
    parsed = protocol.parse_message(msg, windows=windows, default_window="weekly", boards=lambda _: ("weekly",))
    assert parsed.id == 1
    assert msg.read - {"type", "id"} == declared


# the calls that take a stable code first: the errors of errors.py, protocol.py and auth.py, and
# wire.error (an error message)
CODED = {
    "ProtocolError",
    "AuthError",
    "InvalidBoard",
    "InvalidInput",
    "InvalidSubmission",
    "TournamentError",
    "wire.error",
}


def test_every_error_code_raised_is_published() -> None:
    """A code literal the code raises or answers with (``ProtocolError("x", …)``,
    ``wire.error("x", …)``, ``ERR x`` from the function library) is in errors.py's tables, which
    the schema's ErrorCode lists."""
    published = set(all_codes())
    assert {c["const"] for c in DEFS["ErrorCode"]["oneOf"]} == published
    raised: set[str] = set()
    for folder in ("leaderboard", "gateway", "api", "scorer"):
        for file in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(file.read_text())):
                if not isinstance(node, ast.Call) or not node.args:
                    continue
                name = ast.unparse(node.func).rpartition("p.")[2]  # protocol's errors as p.ProtocolError too
                first = node.args[0]
                if name in CODED and isinstance(first, ast.Constant) and isinstance(first.value, str):
                    raised.add(first.value)
    for file in (ROOT / "lua").glob("*.lua"):
        raised |= set(re.findall(r"'ERR ([a-z_]+)", file.read_text()))
    assert raised, "the scan found the codes"
    assert raised - published == set()


def test_the_error_tables_of_the_docs_name_only_published_codes_and_every_code_is_documented() -> None:
    """docs/protocol.md's table of error codes names codes errors.py publishes (a renamed code
    fails here), and every published code is explained somewhere a user reads."""
    published = set(all_codes())
    text = (ROOT / "docs/protocol.md").read_text()
    table = text.split("\n## Error codes\n", 1)[1].split("\n## ", 1)[0]
    first_cells = [line.split("|")[1] for line in table.splitlines() if line.startswith("| `")]
    named = {code for cell in first_cells for code in re.findall(r"`([a-z_]+)`", cell)}
    assert len(named) > 40, "the table was found"
    assert named - published == set()
    read = ("protocol.md", "http-api.md", "data-model.md", "operations.md")
    docs = "".join((ROOT / "docs" / f).read_text() for f in read)
    assert {c for c in published if f"`{c}`" not in docs} == set()


def test_the_gateway_closes_only_with_the_published_codes_and_reasons() -> None:
    """Every close the gateway makes names closes.py's constants (no literal code or reason),
    and the close schema lists each of closes.CLOSES."""
    for file in (ROOT / "gateway").glob("*.py"):
        for node in ast.walk(ast.parse(file.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("close", "fail")
            ):
                literals = [
                    a.value for a in [*node.args, *(k.value for k in node.keywords)] if isinstance(a, ast.Constant)
                ]
                assert not [v for v in literals if isinstance(v, int) and v >= 1000], (file.name, node.lineno)
    listed = protocolschema.close_schema()["oneOf"]
    assert [(c["properties"]["code"]["const"]) for c in listed] == [c.code for c in closes.CLOSES]
    check = jsonschema.Draft202012Validator(protocolschema.close_schema())
    assert check.is_valid({"code": closes.OVERLOADED, "reason": f"{closes.GAME_UNAVAILABLE}: kart"})
    assert check.is_valid({"code": closes.TOO_BIG, "reason": "frame exceeds limit"})
    assert not check.is_valid({"code": closes.POLICY, "reason": "just because"})
    assert not check.is_valid({"code": closes.DRAINING, "reason": closes.FULL})


@pytest.mark.slow  # a cold mypy cache: ~10 s
def test_a_field_sent_without_its_type_is_refused_by_mypy() -> None:
    """An encoder that adds a field its message type does not declare does not type-check (the
    same check ``./dev test`` runs on wire.py), so it never reaches the published schema unseen."""
    encoder = (
        "from leaderboard import messages as m\n\n\n"
        "def pong(ts: int) -> m.Pong:\n"
        '    return {"type": "pong", "ts": ts, "server_time": ts}\n'
    )
    # the project's settings (strict) and cache: warm after ./dev test's own mypy run
    strict = ["--config-file", "", "--strict", "--warn-unreachable", "--no-error-summary", "--follow-imports", "silent"]
    command = [sys.executable, "-m", "mypy", *strict, "-c", encoder]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    [error] = done.stdout.splitlines()
    assert error.startswith("<string>:5:") and error.endswith("[typeddict-unknown-key]"), error


# ---------------------------------------------------------------- a fleet's messages


class Recorder:
    """A socket whose every frame received is kept, decoded."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.seen: list[dict[str, Any]] = []

    async def until(self, check: Any, timeout: float = 15) -> dict[str, Any]:
        """The first frame from now that passes ``check``; TimeoutError naming the last ones seen."""
        try:
            async with asyncio.timeout(timeout):
                while True:
                    msg: dict[str, Any] = orjson.loads(await self.ws.recv())
                    self.seen.append(msg)
                    if check(msg):
                        return msg
        except TimeoutError:
            raise TimeoutError(f"none in {timeout} s; the last frames: {self.seen[-3:]}") from None

    async def ask(self, message: dict[str, Any], rid: str) -> dict[str, Any]:
        await self.ws.send(json.dumps({**message, "id": rid}))
        return await self.until(lambda m: m.get("id") == rid)


@pytest.fixture(scope="module")
async def fleet(redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Fleet]:
    settings = FleetSettings(
        redis_url=redis_server.url, data_dir=tmp_path_factory.mktemp("schemafleet"), port=0, gateways=1,
        demo_tokens=False, log_level="WARNING",
        env=(("LB_GAME", GAME), ("LB_TICK_MS", "100"), ("LB_GW_PUSH_HOLD", "0.05"), ("LB_GW_RANK_INTERVAL", "0.2")),
    )  # fmt: skip
    async with Fleet(settings) as running:
        running.secret = settings.jwt_secret  # type: ignore[attr-defined]
        yield running


async def test_every_message_a_fleets_gateway_sends_validates(fleet: Fleet) -> None:
    secret: str = fleet.secret  # type: ignore[attr-defined]

    def token(player: str, role: str = "player") -> str:
        return issue(player, role, secret, exp=time.time() + 600)

    redis = connect(fleet.redis_url)
    now = int(time.time() * 1000)
    await Leaderboard(redis, GameConfig(game=GAME)).create_tournament("cup", now - 1000, now + 3_600_000)
    await redis.aclose()
    async with (
        websockets.connect(fleet.ws_url) as server_ws,
        websockets.connect(fleet.ws_url) as player_ws,
        websockets.connect(fleet.ws_url + "?game=nope") as lost_ws,
    ):
        server, player, lost = Recorder(server_ws), Recorder(player_ws), Recorder(lost_ws)
        await lost.until(lambda m: m["type"] == "error")  # unknown_game, then 1008
        announced = await lost.until(lambda m: m["type"] == "closing")  # the 1008 announced, then closed
        await lost_ws.wait_closed()
        close = {"code": lost_ws.close_code, "reason": lost_ws.close_reason}
        assert announced == {"type": "closing", **close}
        assert jsonschema.Draft202012Validator(protocolschema.close_schema()).is_valid(close), close
        await server.ask({"type": "hello", "token": token("gs", "server")}, "h")

        async def submit(who: str, points: int) -> None:
            sid = f"{who}-{points}"
            sub = {"id": sid, "player": who, "points": points}
            assert (await server.ask({"type": "submit", "submission": sub}, sid))["type"] == "submitted"

        for who, points in (("ana", 300), ("bo", 200), ("cy", 100)):
            await submit(who, points)
        await player.ask({"type": "hello", "token": token("ana"), "deltas": True}, "h")
        await player.ask({"type": "subscribe", "board": "global", "window": "daily"}, "s")
        await player.until(lambda m: m["type"] == "snapshot" and m["window"] == "daily" and len(m["entries"]) == 3)
        # a change of one score: the next version as a delta (once the socket holds the version
        # before it: the first it got was built on subscribe)
        for points in range(250, 255):
            await submit("bo", points)
            try:
                await player.until(lambda m: m["type"] == "delta", 3)
                break
            except TimeoutError:
                continue
        await player.ask({"type": "watch", "friends": ["dee"], "top": True}, "w")
        await submit("dee", 400)  # enters the top: announced, and ana's own rank pushed (now 2nd)
        await player.until(lambda m: m["type"] == "announce")
        await player.until(lambda m: m["type"] == "rank" and "id" not in m and m["rank"] == 2)
        for i in range(10):  # ana out of the top 10 she watches
            await submit(f"top{i}", 1000 + i)
        await player.until(lambda m: m["type"] == "overtaken")
        player_requests: list[dict[str, Any]] = [
            {"type": "ping"},
            {"type": "boards"},
            {"type": "top", "window": "daily"},
            {"type": "rank", "window": "daily"},
            {"type": "around", "window": "daily"},
            {"type": "ranks", "window": "daily", "players": ["ana", "bo", "zed"]},
            {"type": "stats", "window": "daily"},
            {"type": "recent", "window": "daily"},
            {"type": "finals", "window": "daily"},
            {"type": "top", "board": "no:such:board"},
            {"type": "profile", "profile": {"name": "Ana", "country": "SE"}},
            {"type": "unsubscribe", "board": "global", "window": "daily"},
        ]
        for rid, request in enumerate(player_requests):
            await player.ask(request, f"p{rid}")
        server_requests: list[dict[str, Any]] = [
            {"type": "status", "submission": "ana-300"},
            {"type": "join", "tournament": "cup", "players": ["ana"]},
            {"type": "correct", "player": "cy", "points": 150, "reason": "a rule was misread"},
            {"type": "ban", "player": "cy", "reason": "cheat"},
            {"type": "unban", "player": "cy", "reason": "appeal"},
            {"type": "board", "action": "list"},
        ]
        for rid, request in enumerate(server_requests):
            await server.ask(request, f"g{rid}")

    seen = [*server.seen, *player.seen, *lost.seen]
    assert {m["type"] for m in seen} == set(SERVER_TYPES), "the fleet was driven through every message type"
    validators = {t: jsonschema.Draft202012Validator({"$ref": f"#/$defs/{name}", "$defs": DEFS})
                  for t, name in SERVER_TYPES.items()}  # fmt: skip
    whole = jsonschema.Draft202012Validator(protocolschema.server_schema())
    for msg in seen:
        errors = [f"{list(e.absolute_path)}: {e.message}" for e in validators[msg["type"]].iter_errors(msg)]
        assert errors == [], (msg, errors)
        assert whole.is_valid(msg)
