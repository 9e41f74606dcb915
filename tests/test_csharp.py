"""The C# client (clients/csharp/), built with Debian's mono and run against real gateways: its
conformance adapter over stdin/stdout against a fleet (connect, subscribe, snapshot after a
submission, rank push, requests, a drained gateway, a refused token) and against a scripted
server (malformed frames, deltas and resync, stale snapshots, a silent line, a newer protocol);
the docs' example program against the fleet; the library's .NET Standard 2.0 surface."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import shutil
import signal
import subprocess
import textwrap
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from websockets.asyncio.server import ServerConnection, serve

from fleet.redis_server import RedisServer
from fleet.supervisor import Fleet, FleetSettings
from leaderboard import GameConfig, Submission, connect, delta, now_ms, wire
from leaderboard.auth import issue
from leaderboard.queue import Queue

from .conftest import MS, until

ROOT = Path(__file__).resolve().parent.parent
CSHARP = ROOT / "clients" / "csharp"
SECRET = "csharp-client-secret-of-32-bytes-or-more"
GAME = "csharp"
T = 1000 * MS  # one second, scaled by LB_TEST_TIME_SCALE
NETSTANDARD = Path("/usr/lib/mono/4.5/Facades/netstandard.dll")

Event = dict[str, Any]


@pytest.fixture(scope="session")
def build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The library, the adapter and the example, built once per run (./dev csharp does the same into var/)."""
    missing = [tool for tool in ("mcs", "mono", "monodis") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} missing: ./dev install installs Debian's mono-complete")
    out = tmp_path_factory.mktemp("csharp")
    subprocess.run([str(CSHARP / "build.sh"), str(out)], check=True, timeout=120)
    checks = ["mcs", "-langversion:7.2", "-warnaserror+", "-nologo", f"-r:{out / 'Leaderboard.Client.dll'}"]
    checks += [f"-out:{out / 'Checks.exe'}", str(ROOT / "tests" / "csharp" / "Checks.cs")]
    subprocess.run(checks, check=True, timeout=120)
    return out


@pytest.fixture(scope="module")
async def fleet(redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Fleet]:
    """Two gateway processes on one port and a scorer, for this module (the game of its own)."""
    settings = FleetSettings(
        redis_url=redis_server.url,
        data_dir=tmp_path_factory.mktemp("csharp-fleet"),
        port=0,
        gateways=2,
        jwt_secret=SECRET,
        demo_tokens=False,
        log_level="WARNING",
        env=(("LB_GAME", GAME), ("LB_GW_RANK_INTERVAL", "1"), ("LB_DURABLE_URL", "")),
    )
    async with Fleet(settings) as f:
        yield f


def token(player: str, secret: str = SECRET) -> str:
    return issue(player, "player", secret, exp=time.time() + 300)


async def submit(fleet: Fleet, player: str, points: int) -> None:
    redis = connect(fleet.redis_url)
    try:
        now = now_ms()
        await Queue(redis, GameConfig(game=GAME)).submit(Submission(f"{player}-{points}-{now}", player, points, now))
    finally:
        await redis.aclose()


class Adapter:
    """One adapter process: commands in, events out (one JSON object per line), as the runner drives it."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.seen: list[Event] = []
        self.counts: dict[str, int] = {}  # what the adapter logs at its stop: deltas applied, resyncs

    async def send(self, cmd: str, **fields: Any) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(orjson.dumps({"cmd": cmd, **fields}) + b"\n")
        await self.proc.stdin.drain()

    async def next(self, within: float) -> Event:
        assert self.proc.stdout is not None
        line = await asyncio.wait_for(self.proc.stdout.readline(), within)
        assert line.endswith(b"\n"), f"the adapter ended: {self.seen[-5:]}"
        event = orjson.loads(line)
        assert isinstance(event, dict) and isinstance(event.get("event"), str), line
        self.seen.append(event)
        return event

    async def wait_for(self, predicate: Callable[[Event], bool], within: float = 10 * T) -> Event:
        async with asyncio.timeout(within):
            while True:
                event = await self.next(within)
                if predicate(event):
                    return event

    async def find(self, predicate: Callable[[Event], bool], within: float = 10 * T) -> Event:
        """The first event so far, or from now on, for which ``predicate`` holds (a push that may have
        arrived while the test waited for another)."""
        for event in self.seen:
            if predicate(event):
                return event
        return await self.wait_for(predicate, within)

    async def stop(self) -> list[Event]:
        """``stop``: the events until ``stopped``, and the process exits 0."""
        await self.send("stop")
        start = len(self.seen)
        await self.wait_for(lambda e: e["event"] == "stopped", 10 * T)
        assert await asyncio.wait_for(self.proc.wait(), 10 * T) == 0
        assert self.proc.stderr is not None
        log = (await self.proc.stderr.read()).decode()
        self.counts = orjson.loads(log.rpartition("adapter: ")[2]) if "adapter: " in log else {}
        return self.seen[start:]


@pytest.fixture
async def adapter(build: Path) -> AsyncIterator[Adapter]:
    proc = await asyncio.create_subprocess_exec(
        "mono",
        str(build / "LeaderboardAdapter.exe"),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,  # a line at its stop (it logs nothing else unless a command is wrong)
    )
    a = Adapter(proc)
    try:
        ready = await a.next(20 * T)
        assert ready == {"event": "ready", "client": "csharp", "version": ready["version"], "protocol": wire.PROTOCOL}
        yield a
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


def status(name: str) -> Callable[[Event], bool]:
    return lambda e: e["event"] == "status" and e["status"] == name


def snapshot_with(player: str, window: str = "weekly") -> Callable[[Event], bool]:
    return lambda e: (
        e["event"] == "snapshot"
        and e["message"]["window"] == window
        and any(entry["player"] == player for entry in e["message"]["entries"])
    )


async def test_subscribes_gets_snapshots_a_rank_push_and_replies(fleet: Fleet, adapter: Adapter) -> None:
    await adapter.send("start", url=fleet.ws_url, token=token("cs-mia"), deltas=True)
    await adapter.send("subscribe", board="global", window="daily")
    await adapter.wait_for(status("live"))
    welcome = await adapter.wait_for(lambda e: e["event"] == "welcome" and e["message"]["role"] == "player")
    assert welcome["message"]["player"] == "cs-mia"
    await submit(fleet, "cs-mia", 1200)
    snap = await adapter.wait_for(snapshot_with("cs-mia", "daily"))
    assert snap["message"]["board"] == "global" and snap["message"]["entries"][0]["score"] >= 1200
    # the next version comes as a delta to this one: applied, it is whole, as the scorer built it
    await submit(fleet, "cs-zed", 900)
    snap = await adapter.wait_for(snapshot_with("cs-zed", "daily"))
    redis = connect(fleet.redis_url)
    try:
        latest = await redis.get(GameConfig(game=GAME).keys.latest("daily", "global"))
    finally:
        await redis.aclose()
    assert latest is not None and snap["message"] == orjson.loads(latest)
    rank = await adapter.find(lambda e: e["event"] == "rank" and e["message"]["rank"] is not None)
    assert (rank["message"]["player"], rank["message"]["score"]) == ("cs-mia", 1200)

    await adapter.send("request", ref="a1", message={"type": "around", "window": "weekly", "k": 2})
    reply = await adapter.wait_for(lambda e: e.get("ref") == "a1")
    assert reply["event"] == "reply" and reply["message"]["type"] == "around"
    assert "cs-mia" in [entry["player"] for entry in reply["message"]["entries"]]
    await adapter.send("request", ref="a2", message={"type": "top", "n": 0})
    refused = await adapter.wait_for(lambda e: e.get("ref") == "a2")
    assert refused == {"event": "reply_error", "ref": "a2", "code": "bad_message"}
    await adapter.send("send", message={"type": "ping"})  # fire and forget: the loop goes on
    await adapter.send("request", ref="a3", message={"type": "rank", "window": "daily"})
    mine = await adapter.wait_for(lambda e: e.get("ref") == "a3")
    assert mine["message"]["rank"] == 1

    last = await adapter.stop()
    assert [e["status"] for e in last if e["event"] == "status"] == ["stopped"]
    assert adapter.counts["deltas_applied"] >= 1 and adapter.counts["resyncs"] == 0
    versions = [
        e["message"]["version"] for e in adapter.seen if e["event"] == "snapshot" and e["message"]["window"] == "daily"
    ]
    assert versions == sorted(versions)


async def test_a_drained_gateway_is_left_within_a_second_and_subscriptions_come_back(
    fleet: Fleet, adapter: Adapter
) -> None:
    await submit(fleet, "cs-leo", 700)
    await adapter.send("start", url=fleet.ws_url, token=None, deltas=False)
    await adapter.send("subscribe", board="global", window="daily")
    welcome = await adapter.wait_for(lambda e: e["event"] == "welcome")
    await adapter.wait_for(snapshot_with("cs-leo", "daily"))
    # the gateway this socket landed on drains (SIGTERM: close 1012); the fleet restarts it
    index = int(welcome["message"]["gateway"].removeprefix("gw-")) - 1
    fleet.gateways[index].send_signal(signal.SIGTERM)
    away = await adapter.wait_for(lambda e: status("reconnecting")(e) and e["retry_in"] is not None)
    assert 0 <= away["retry_in"] <= 1.0  # 1012: back within [0, 1 s], whatever the cap
    await adapter.wait_for(status("live"))
    # resubscribed without being asked again: the daily board's snapshot arrives on the new line
    await adapter.wait_for(snapshot_with("cs-leo", "daily"))
    await adapter.stop()


async def test_a_refused_token_stops_without_a_retry(fleet: Fleet, adapter: Adapter) -> None:
    await adapter.send("start", url=fleet.ws_url, token=token("cs-eve", secret="x" * 40), deltas=True)
    error = await adapter.wait_for(lambda e: e["event"] == "error")
    assert error["code"] == "invalid_token"
    stopped = await adapter.wait_for(lambda e: e["event"] == "status" and e["status"] != "live")
    assert (stopped["status"], stopped["reason"]) == ("stopped", "invalid_token")
    await adapter.send("request", ref="r", message={"type": "top"})
    assert await adapter.wait_for(lambda e: e.get("ref") == "r") == {
        "event": "reply_error",
        "ref": "r",
        "code": "not_connected",
    }
    last = await adapter.stop()
    assert not [e for e in last if e["event"] == "status"], last  # no attempt after the stop


# Frames the client must report (malformed_message) and read on after: not JSON as RFC 8259 has it,
# not an object, no type, a snapshot missing its fields, binary.
MALFORMED: tuple[str | bytes, ...] = (
    "not json {",
    '{"type":"pong",}',
    '{"type":"pong","n":01}',
    '{"type":"pong","n":1.}',
    '{"type":"pong","s":"\\ud800"}',
    '{"type":"pong","s":"tab\tinside"}',
    '{"type":"pong","s":"\\x41"}',
    '{"type":"pong"} trailing',
    '{"type":"pong","n":NaN}',
    '{"type":"pong","deep":' + "[" * 100 + "]" * 100 + "}",
    "[1, 2]",
    '{"type": 7}',
    '{"type":"snapshot","board":"global"}',
    '{"type":"closing","code":"1012","reason":"draining; reconnect"}',  # a close code is a number
    '{"type":"closing","code":99,"reason":""}',  # and one a close frame can carry
    b"\x00binary",
)
# a message of a type this client has no name for, with every kind of JSON value: forwarded as read
NOVEL = (
    '{"type":"novel","s":"\\ud83d\\ude00 \u00e9 \\"q\\" \\\\ \\/ \\n","n":-1.5e3,"z":-0,'
    '"nested":{"a":[true,false,null,[],{}]},"big":9007199254740993}'
)


def scripted_snapshot(version: int, players: list[tuple[str, int]], period: str = "2030-W48") -> dict[str, Any]:
    entries = [{"rank": i + 1, "player": p, "score": s} for i, (p, s) in enumerate(players)]
    return {"type": "snapshot", "board": "global", "window": "weekly", "period": period, "version": version,
            "ts": 1_000_000 + version, "mode": "ordinal", "entries": entries}  # fmt: skip


async def test_against_a_scripted_server_bad_frames_deltas_a_silent_line_and_a_newer_protocol(
    adapter: Adapter,
) -> None:
    v1 = scripted_snapshot(1, [("ana", 500), ("bo", 400), ("cy", 300)])
    v2 = scripted_snapshot(2, [("bo", 600), ("ana", 500), ("dee", 350)])
    step = delta.diff(v1, v2)
    assert step is not None
    received: list[dict[str, Any]] = []
    connections = 0
    resync = asyncio.Event()

    async def script(ws: ServerConnection) -> None:
        nonlocal connections
        connections += 1
        if connections > 1:  # the client came back after the silent line: a newer protocol now
            await ws.send(json.dumps({"type": "welcome", "protocol": wire.PROTOCOL + 1, "heartbeat": {}}))
            await ws.wait_closed()
            return
        reader = asyncio.create_task(record(ws))
        beat = {"interval": 0.2 * T, "timeout": 0.6 * T}
        greeting = {"type": "welcome", "protocol": wire.PROTOCOL, "role": "spectator", "heartbeat": beat}
        await ws.send(json.dumps(greeting))
        for bad in MALFORMED:
            await ws.send(bad)
        await ws.send(json.dumps(v1))
        await ws.send(json.dumps(step))  # applied: v2, whole
        await ws.send(json.dumps(step))  # a duplicate (base 1 < 2 held): ignored
        await ws.send(json.dumps({**step, "base": 5}))  # does not fit: resync asked, once
        await ws.send(json.dumps({**step, "base": 6}))
        await asyncio.wait_for(resync.wait(), 5 * T)
        await ws.send(json.dumps(scripted_snapshot(7, [("ed", 900)])))  # the resync's full snapshot
        await ws.send(json.dumps(scripted_snapshot(3, [("old", 1)])))  # older than held: dropped
        await ws.send(json.dumps({"type": "overtaken", "by": "ed"}))  # a push this client has no name for
        await ws.send(NOVEL)
        await ws.send(json.dumps(scripted_snapshot(8, [("ed", 901)])))
        await reader  # then silence: the client's heartbeat gives up on the line and reconnects

    async def record(ws: ServerConnection) -> None:
        with contextlib.suppress(Exception):
            async for frame in ws:
                message = json.loads(frame)
                received.append(message)
                if message.get("type") == "resync":
                    resync.set()

    async with serve(script, "127.0.0.1", 0, ping_interval=None) as server:
        port = server.sockets[0].getsockname()[1]
        await adapter.send("start", url=f"ws://127.0.0.1:{port}/ws", token=None, deltas=True)
        snapshots: list[Event] = []
        errors: list[Event] = []
        while len(snapshots) < 4:
            event = await adapter.wait_for(lambda e: e["event"] in ("snapshot", "error"))
            (snapshots if event["event"] == "snapshot" else errors).append(event)
        assert [e["code"] for e in errors] == ["malformed_message"] * len(MALFORMED)
        assert [s["message"] for s in snapshots[:2]] == [v1, {**v2, "ts": v1["ts"] + step["dt"]}]
        assert [s["message"]["version"] for s in snapshots] == [1, 2, 7, 8]
        assert any(e["event"] == "overtaken" and e["message"]["by"] == "ed" for e in adapter.seen)
        assert [e["message"] for e in adapter.seen if e["event"] == "novel"] == [json.loads(NOVEL)]
        # the silent line: dropped after its timeout, and the next server speaks a newer protocol
        await adapter.wait_for(lambda e: status("reconnecting")(e) and e["retry_in"] is not None, 5 * T)
        newer = await adapter.wait_for(lambda e: e["event"] == "error", 5 * T)
        assert newer["code"] == "protocol_version"
        stopped = await adapter.wait_for(lambda e: e["event"] == "status", 5 * T)
        assert (stopped["status"], stopped["reason"]) == ("stopped", "protocol_version")
        await adapter.stop()
    assert adapter.counts == {"deltas_applied": 1, "resyncs": 1}
    assert received[0] == {"type": "hello", "token": None, "deltas": True}
    assert [m for m in received if m["type"] == "resync"] == [{"type": "resync", "board": "global", "window": "weekly"}]
    assert {"type": "ping"} in received and connections == 2


async def test_the_docs_example_runs_as_written(fleet: Fleet, build: Path) -> None:
    await submit(fleet, "cs-ava", 5000)
    redis = connect(fleet.redis_url)
    try:  # the scorer applied and published it: the example prints the board's latest snapshot
        latest = GameConfig(game=GAME).keys.latest("weekly", "global")
        await until(async_leads(redis, latest, "cs-ava"), 20 * T)
    finally:
        await redis.aclose()
    proc = await asyncio.create_subprocess_exec(
        "mono", str(build / "Watch.exe"), fleet.ws_url, token("cs-ava"), stdout=asyncio.subprocess.PIPE
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 30 * T)
    assert proc.returncode == 0, out
    assert re.fullmatch(r"v\d+: leader cs-ava, I am #1 with 5000\n", out.decode()), out
    source = (CSHARP / "Samples~" / "Bot" / "Watch.cs").read_text()
    body = textwrap.dedent(source[source.index("        var client = ") : source.index("        return 1;\n    }\n}")])
    assert body in (ROOT / "docs" / "clients.md").read_text(), "docs/clients.md must quote Samples~/Bot/Watch.cs"


def test_backoff_full_jitter_and_the_close_codes_hints(build: Path) -> None:
    listing = subprocess.run(["mono", str(build / "Checks.exe"), "backoff"], check=True, capture_output=True, text=True)
    cases = {case["case"]: case["values"] for case in map(json.loads, listing.stdout.splitlines())}
    for name, cap in (("first", 0.5), ("1012", 1.0), ("1013", 5.0)):
        delays = cases[name]
        assert all(0 <= d <= cap for d in delays), name
        # full jitter: a thousand first returns spread evenly over [0, cap], not bunched at one instant
        bins = [0] * 10
        for d in delays:
            bins[min(int(d / cap * 10), 9)] += 1
        assert all(70 <= b <= 130 for b in bins), (name, bins)
    assert cases["caps"] == [0.5, 1, 2, 4, 8, 16, 20, 20, 20, 0.5]


async def test_a_refused_token_is_renewed_once_by_the_callback(fleet: Fleet, build: Path) -> None:
    bad, good = token("cs-ren", secret="y" * 40), token("cs-ren")
    proc = await asyncio.create_subprocess_exec(
        "mono", str(build / "Checks.exe"), "renew", fleet.ws_url, bad, good, stdout=asyncio.subprocess.PIPE
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 30 * T)
    assert proc.returncode == 0, out
    lines = [json.loads(line) for line in out.decode().splitlines()]
    refused = lines.index(next(e for e in lines if e["kind"] == "error"))
    assert lines[refused]["code"] == "invalid_token"
    after = [(e["status"], e["reason"]) for e in lines[refused:] if e.get("kind") == "status"]
    assert after[0] == ("reconnecting", "invalid_token") and ("stopped", "invalid_token") not in after
    assert [e.get("role") for e in lines if e.get("kind") == "welcome"][-1] == "player"
    assert lines[-1] == {"asked": 1}


def async_leads(redis: Any, key: str, player: str) -> Callable[[], Any]:
    async def leads() -> bool:
        payload = await redis.get(key)
        return payload is not None and orjson.loads(payload)["entries"][0]["player"] == player

    return leads


def exported_types(assembly: Path, table: str) -> Iterator[str]:
    listing = subprocess.run(["monodis", table, str(assembly)], check=True, capture_output=True, text=True).stdout
    for line in listing.splitlines()[1:]:
        if ": " not in line:
            continue
        name = line.split(": ", 1)[1]
        yield name.split(" is in ")[0] if table == "--exported" else re.sub(r"^\[[^]]*\]", "", name).split("/")[0]


def test_the_library_uses_only_types_of_net_standard_2_0(build: Path) -> None:
    """Types only: a member a later framework added to a standard type is not caught here."""
    if not NETSTANDARD.exists():
        pytest.skip(f"{NETSTANDARD} missing (Debian's mono-complete ships it)")
    standard = set(exported_types(NETSTANDARD, "--exported"))
    used = set(exported_types(build / "Leaderboard.Client.dll", "--typeref"))
    assert "System.Net.WebSockets.ClientWebSocket" in used
    assert used - standard == set()


def test_the_unity_package_and_the_docs_matrix_name_the_clients_version_and_every_asset_has_its_meta() -> None:
    package = json.loads((CSHARP / "package.json").read_text())
    source = (CSHARP / "Runtime" / "LeaderboardClient.cs").read_text()
    assert f'public const string Version = "{package["version"]}";' in source
    # the compatibility matrix's row says what the code says
    assert f"public const int Protocol = {wire.PROTOCOL};" in source
    client = "C#, Unity, Godot .NET and bots (`clients/csharp/`)"
    row = f"| {wire.PROTOCOL} | {client} | `{package['name']}` (Unity package) | {package['version']} |"
    assert row in (ROOT / "docs" / "clients.md").read_text()
    # a folder whose name ends in ~ (the samples) is one Unity does not import
    assets = [
        p
        for p in CSHARP.rglob("*")
        if not p.name.endswith(".meta") and not any(part.endswith("~") for part in p.relative_to(CSHARP).parts)
    ]
    guids = []
    for asset in assets:
        meta = asset.with_name(asset.name + ".meta")
        assert meta.exists(), f"{asset.relative_to(ROOT)} has no .meta: Unity ignores it in a package"
        guids.append(re.search(r"^guid: ([0-9a-f]{32})$", meta.read_text(), re.M).group(1))  # type: ignore[union-attr]
    assert len(set(guids)) == len(guids)
