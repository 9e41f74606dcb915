"""The Python client against real gateways: state kept, reconnects, heartbeat watchdog, hints."""

from __future__ import annotations

import random

import orjson
import pytest
from websockets.asyncio.server import ServerConnection, serve

from client import Backoff, LeaderboardClient, RequestError, messages
from leaderboard import Leaderboard, Submission, now_ms
from leaderboard.wire import PROTOCOL

from .gw_helpers import T, publish, running, snapshot, token, url


def quick_backoff(seed: int = 1) -> Backoff:
    return Backoff(base=0.05, ceiling=0.2, drain_cap=0.1, overload_floor=0.3, rng=random.Random(seed))


async def test_subscribes_keeps_snapshots_and_answers_requests(redis_url: str, r, lb: Leaderboard) -> None:
    await lb.submit_batch([Submission("s1", "mia", 300, now_ms()).fields()])
    async with running(redis_url) as gw, LeaderboardClient(url(gw), token=token("mia")) as c:
        c.subscribe("global", "daily")
        snap = await c.wait_for(lambda m: m["type"] == "snapshot" and m["window"] == "daily", 5 * T)
        assert snap["entries"][0]["player"] == "mia"
        assert c.snapshots[("global", "daily")] == snap and c.status == "live"
        rank = await c.request({"type": "rank", "window": "daily"})
        assert (rank["rank"], rank["score"]) == (1, 300)
        with pytest.raises(RequestError) as caught:
            await c.request({"type": "top", "n": 0})
        assert caught.value.code == "bad_message"
        await publish(r, gw, snapshot(7))
        await c.wait_for(lambda m: m["type"] == "snapshot" and m["version"] == 7, 5 * T)
        c.start()  # a second start while running is a no-op: never two connection loops
        assert c.connects == 1


async def test_reconnects_after_a_drain_and_resubscribes(redis_url: str, r) -> None:
    async with running(redis_url) as gw:
        port = gw.port
        c = LeaderboardClient(url(gw), backoff=quick_backoff())
        c.subscribe("global", "weekly")
        c.start()
        await c.wait_for(lambda m: m["type"] == "snapshot", 5 * T)
        await publish(r, gw, snapshot(3))
        await c.wait_for(lambda m: m.get("version") == 3, 5 * T)
        await gw.drain()  # closes with 1012
    if c.status != "reconnecting":  # it may already have noticed during the drain
        await c.wait_for(lambda m: m["type"] == "status" and m["status"] == "reconnecting", 5 * T)
    assert c.snapshots[("global", "weekly")]["version"] == 3  # kept while away
    async with running(redis_url, port=port) as gw2:
        await publish(r, gw2, snapshot(4))
        await c.wait_for(lambda m: m["type"] == "snapshot" and m["version"] == 4, 10 * T)
        assert c.connects == 2 and c.status == "live"
    await c.close()
    assert c.status == "closed"


async def test_a_silent_line_is_noticed_by_the_heartbeat_watchdog() -> None:
    """A server that goes quiet without closing (a tablet in a tunnel): the client reconnects."""
    accepted = 0

    async def silent(ws: ServerConnection) -> None:
        nonlocal accepted
        accepted += 1
        welcome = {
            "type": "welcome",
            "player": None,
            "role": "spectator",
            "heartbeat": {"interval": 0.1, "timeout": 0.3},
        }
        await ws.send(orjson.dumps(welcome).decode())
        await ws.wait_closed()  # never answers a ping; ends when the client gives up on the line

    async with serve(silent, "127.0.0.1", 0, ping_interval=None) as server:
        port = server.sockets[0].getsockname()[1]
        async with LeaderboardClient(f"ws://127.0.0.1:{port}/ws", backoff=quick_backoff()) as c:
            await c.wait_for(lambda m: m["type"] == "status" and m["status"] == "reconnecting", 3 * T)
            await c.wait_for(lambda m: m["type"] == "welcome", 3 * T)
            assert accepted >= 2


async def test_overloaded_gateway_503_is_honoured(redis_url: str) -> None:
    async with running(redis_url, max_connections=1) as gw, LeaderboardClient(url(gw)) as first:
        await first.wait_for(lambda m: m["type"] == "welcome", 5 * T)
        second = LeaderboardClient(url(gw), backoff=quick_backoff())
        second.start()
        event = await second.wait_for(lambda m: m["type"] == "status" and m.get("retry_in") is not None, 5 * T)
        assert event["retry_in"] >= 1.0  # the gateway's Retry-After, not the tiny backoff cap
        await second.close()


def test_what_the_client_reads_from_a_server() -> None:
    """messages.parse: a frame it cannot read raises ValueError (the client reports it as an error
    event malformed_message); a type it does not know, or a reply without a board, is no fault."""
    snapshot = {"type": "snapshot", "board": "global", "window": "weekly", "version": 3, "entries": []}
    assert messages.parse(orjson.dumps(snapshot)) == snapshot
    assert messages.parse('{"type":"overtaken","by":"leo"}')["type"] == "overtaken"
    assert messages.parse('{"type":"rank","id":"r1","rank":null}')["id"] == "r1"
    for frame in (
        "<html>502</html>",
        "[1,2]",
        '{"no":"type"}',
        '{"type":"snapshot","board":"global"}',
        '{"type":"snapshot","board":"global","window":"weekly","version":true,"entries":[]}',
        '{"type":"delta","board":"global","window":"weekly","base":"2","entries":[]}',
        '{"type":"rank","rank":1}',
        '{"type":"error"}',
        '{"type":"welcome","protocol":"1"}',
    ):
        with pytest.raises(ValueError):
            messages.parse(frame)
    assert messages.newer_protocol({"type": "welcome"}) is None  # a server from before the version
    assert messages.newer_protocol({"type": "welcome", "protocol": PROTOCOL}) is None
    assert messages.newer_protocol({"type": "welcome", "protocol": PROTOCOL + 1}) is not None
