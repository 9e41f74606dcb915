"""Fan-out: welcome + immediate snapshot, many sockets, announcements, slow readers, Redis restart."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Sequence

import orjson
import pytest
import redis.asyncio as aioredis
from websockets.asyncio.client import connect

from fleet.redis_server import RedisServer
from gateway import fanout
from gateway.client import Client
from gateway.outbound import Outbound
from gateway.server import Gateway
from leaderboard import Leaderboard, Submission, now_ms
from leaderboard.library import library_code
from leaderboard.wire import PROTOCOL

from .conftest import until
from .gw_helpers import (
    T,
    announced_close,
    client,
    greet,
    publish,
    raw_ws,
    recv,
    recv_type,
    request,
    running,
    snapshot,
    token,
    url,
)


async def test_welcome_then_the_stored_snapshot_at_once(redis_url: str, r: aioredis.Redis) -> None:
    async with running(redis_url) as gw:
        stored = snapshot(7)
        await r.set(gw.settings.game.keys.latest("weekly", "global"), stored)
        async with client(gw) as ws:
            welcome, _ = await greet(ws)  # the snapshot came from the stored latest
        assert welcome == {
            "type": "welcome", "protocol": PROTOCOL, "gateway": "gw-test", "game": "test", "player": None,
            "role": "spectator", "heartbeat": {"interval": 15.0, "timeout": 30.0},
            "windows": ["daily", "weekly", "alltime"], "window": "weekly", "top": 10, "deltas": False,
        }  # fmt: skip
        async with client(gw) as ws:
            await recv(ws)
            assert await ws.recv(decode=False) == stored  # byte for byte


async def test_a_board_without_a_stored_snapshot_is_built_at_version_0(redis_url: str, lb: Leaderboard) -> None:
    await lb.submit_batch([Submission("s1", "ana", 300, now_ms()).fields()])
    async with running(redis_url) as gw, client(gw) as ws:
        _, snap = await greet(ws)
    assert snap["version"] == 0 and snap["board"] == "global" and snap["window"] == "weekly"
    assert [(e["player"], e["score"]) for e in snap["entries"]] == [("ana", 300)]


def writer_threads(monkeypatch: pytest.MonkeyPatch, per_thread: int) -> set[int]:
    """Let small fan-outs use the writer threads, and note which threads wrote."""
    seen: set[int] = set()
    real = fanout.write_direct

    def spy(targets: Sequence[fanout.Target], frame: bytes, fds: Sequence[int]) -> list[fanout.Leftover]:
        seen.add(threading.get_ident())
        return real(targets, frame, fds)

    monkeypatch.setattr(fanout, "MIN_PER_THREAD", per_thread)
    monkeypatch.setattr(fanout, "write_direct", spy)
    return seen


@pytest.mark.parametrize("coalesce", [0.0, 0.05])
async def test_a_snapshot_is_timed_from_its_ts_to_its_write_to_every_socket(
    redis_url: str, r: aioredis.Redis, coalesce: float
) -> None:
    async with running(redis_url, coalesce=coalesce * T) as gw, client(gw) as a, client(gw) as b:
        await greet(a)
        await greet(b)
        written = "lb_gw_written_lag_seconds"
        before = gw.metrics.registry.get_sample_value(written + "_count") or 0.0
        payload = snapshot(7)
        ts = orjson.loads(payload)["ts"] / 1000
        await publish(r, gw, payload)
        for ws in (a, b):
            assert (await recv_type(ws, "snapshot"))["version"] == 7
        late = time.time() - ts
        # one observation per snapshot (not per socket), after the gathering window when coalescing
        assert gw.metrics.registry.get_sample_value(written + "_count") == before + 1
        lag = gw.metrics.registry.get_sample_value(written + "_sum")
        assert lag is not None and coalesce * T <= lag <= late + 0.01


@pytest.mark.parametrize("threads", [1, 3])
async def test_every_socket_gets_every_snapshot_byte_for_byte(
    redis_url: str, r: aioredis.Redis, monkeypatch: pytest.MonkeyPatch, threads: int
) -> None:
    seen = writer_threads(monkeypatch, per_thread=4)
    async with running(redis_url, fanout_threads=threads) as gw:
        await publish(r, gw, snapshot(1))
        sockets = [await connect(url(gw), open_timeout=5 * T) for _ in range(40)]
        try:
            for ws in sockets:
                await greet(ws)
            for version in (2, 3):
                payload = snapshot(version)
                await publish(r, gw, payload)
                got = await asyncio.gather(*(asyncio.wait_for(w.recv(decode=False), 2 * T) for w in sockets))
                assert set(got) == {payload}
            # 40 sockets, 4 per thread at least: the pool took part. Which of its idle threads takes
            # each part is the executor's choice, so one pool thread may take both.
            assert len(seen) == 1 if threads == 1 else len(seen) >= 2
        finally:
            await asyncio.gather(*(ws.close() for ws in sockets))


async def test_subscribe_other_boards_and_announcements(redis_url: str, r: aioredis.Redis) -> None:
    async with running(redis_url, boards=("region:eu",)) as gw, client(gw) as ws:
        await greet(ws)
        reply = await request(ws, {"type": "subscribe", "board": "region:eu", "window": "daily", "id": 1})
        assert reply == {"type": "subscribed", "board": "region:eu", "window": "daily", "id": 1}
        built = await recv(ws)  # nothing stored: built at once, version 0
        assert (built["type"], built["board"], built["window"], built["version"]) == (
            "snapshot", "region:eu", "daily", 0,
        )  # fmt: skip
        await publish(r, gw, snapshot(5, board="region:eu", window="daily"), board="region:eu", window="daily")
        assert (await recv(ws))["version"] == 5
        announce = {"type": "announce", "board": "region:eu", "window": "daily", "period": "2030-11-26",
                    "player": "leo", "rank": 3, "score": 10}  # fmt: skip
        await r.spublish(gw.settings.game.keys.announce_channel, orjson.dumps(announce))
        assert await recv(ws) == announce
        reply = await request(ws, {"type": "unsubscribe", "board": "region:eu", "window": "daily"})
        assert reply == {"type": "unsubscribed", "board": "region:eu", "window": "daily"}
        await r.spublish(gw.settings.game.keys.announce_channel, orjson.dumps(announce))
        await publish(r, gw, snapshot(6, board="region:eu", window="daily"), board="region:eu", window="daily")
        assert (await request(ws, {"type": "ping"}))["type"] == "pong"  # nothing came in between


@pytest.mark.parametrize("threads", [1, 2])
async def test_a_slow_reader_is_skipped_then_dropped_while_a_fast_one_stays_on_time(
    redis_url: str, r: aioredis.Redis, monkeypatch: pytest.MonkeyPatch, threads: int
) -> None:
    # Frames of 48 KB into a 4 KB receive buffer: the direct writes come back short, and the rest
    # goes through the transport (on the writer thread too, when threads=2).
    writer_threads(monkeypatch, per_thread=1)
    async with (
        running(redis_url, write_buffer=64 * 1024, max_skips=3, fanout_threads=threads) as gw,
        client(gw, max_size=None) as fast,
    ):
        await greet(fast)
        slow = await raw_ws(gw, rcvbuf=4096)
        try:
            worst = 0.0
            for version in range(1, 200):
                payload = snapshot(version, pad=48_000)
                sent = time.monotonic()
                await publish(r, gw, payload)
                msg = await recv(fast, 2 * T)
                worst = max(worst, time.monotonic() - sent)
                assert msg["version"] == version
                if gw.metrics.dropped.labels("slow")._value.get() == 1:
                    break
                await asyncio.sleep(5 * 0.001)
            assert gw.metrics.dropped.labels("slow")._value.get() == 1, "the slow reader was never dropped"
            assert gw.metrics.skipped._value.get() >= 3
            assert worst < 0.5 * T
            assert len(gw.clients) == 1  # the slot is freed
        finally:
            slow.close()


async def test_a_close_is_announced_to_a_socket_within_the_buffer_bound_and_never_waits_on_one_over_it(
    redis_url: str, r: aioredis.Redis
) -> None:
    bound = 16 * 1024
    async with (
        running(redis_url, write_buffer=bound, max_skips=10_000, stall_timeout=60.0) as gw,
        client(gw, max_size=None) as fast,
    ):
        await greet(fast)
        sock = await raw_ws(gw, rcvbuf=4096)
        try:
            port = sock.getsockname()[1]
            [slow] = [c for c in gw.clients if c.ws.remote_address[1] == port]
            for version in range(1, 200):  # until the kernel's buffers are full and the transport holds the rest
                await publish(r, gw, snapshot(version, pad=200_000))
                await recv_type(fast, "snapshot", 2 * T)
                if slow.transport.get_write_buffer_size() > bound:
                    break
            held = slow.transport.get_write_buffer_size()
            assert held > bound
            gw.out.announce(slow, 1012, "rebalance")
            assert slow.transport.get_write_buffer_size() == held  # nothing queued behind what it has not read
            assert gw.shed(2, 0.0) == 2
            started = time.monotonic()
            assert await announced_close(fast, 2 * T) == (1012, "rebalance")
            assert time.monotonic() - started < 0.5 * T  # the slow socket's closing handshake held nothing up
        finally:
            sock.close()


async def test_a_redis_restart_keeps_sockets_open_and_snapshots_resume(tmp_path: object) -> None:
    server = RedisServer(str(tmp_path))
    server.start()
    try:
        admin = aioredis.Redis.from_url(server.url)
        await admin.function_load(library_code(), replace=True)
        async with running(server.url, close_timeout=0.5) as gw, client(gw) as ws:
            await publish(admin, gw, snapshot(1))
            await greet(ws)
            await admin.aclose()
            server.stop()
            server.start()  # same port, empty data: the scorer would publish again
            admin = aioredis.Redis.from_url(server.url)
            await admin.function_load(library_code(), replace=True)
            await asyncio.wait_for(gw.hub.connected.wait(), 10 * T)
            await publish(admin, gw, snapshot(2))
            # Either the resync after resubscribing or the live publish delivers version 2. Version
            # 1 may come first: it was published while the socket was being greeted, so it can
            # arrive live after greet() read the connect-time snapshot.
            snap = await recv_type(ws, "snapshot", 5 * T)
            if snap["version"] == 1:
                snap = await recv_type(ws, "snapshot", 5 * T)
            assert snap["version"] == 2
            assert gw.metrics.redis_errors._value.get() >= 1
            await admin.aclose()
    finally:
        server.stop()


@pytest.mark.parametrize("mode", ["frame", "broadcast"])
async def test_both_fanout_paths_deliver_the_same_bytes(redis_url: str, r: aioredis.Redis, mode: str) -> None:
    async with running(redis_url, fanout=mode) as gw, client(gw) as ws:
        await greet(ws)
        payload = snapshot(9)
        await publish(r, gw, payload)
        assert await asyncio.wait_for(ws.recv(decode=False), 2 * T) == payload


# ---------------------------------------------------------------- one write per socket per tick


def test_plan_gives_each_socket_its_frames_in_order_and_shares_equal_buffers() -> None:
    a, b, c = "a", "b", "c"  # sockets
    messages = [({a, b, c}, b"G1"), ({a, b}, b"E1"), ({a, c}, b"D1"), ({a}, b"X")]
    writes = {(buffer, count, tuple(sorted(targets))) for buffer, count, targets in fanout.plan(messages)}
    assert writes == {(b"G1E1D1X", 4, (a,)), (b"G1E1", 2, (b,)), (b"G1D1", 2, (c,))}
    same = fanout.plan([({a, b, c}, b"G1"), ({a, b, c}, b"E1")])
    assert same == [(b"G1E1", 2, [a, b, c])] or sorted(same[0][2]) == [a, b, c]
    # own frames (rank pushes) go after the tick's, and count apart from its messages
    with_ranks = fanout.plan([({a, b}, b"G1")], {b: [b"R1", b"R2"], c: [b"R3"]})
    assert sorted(with_ranks, key=lambda w: w[2]) == [(b"G1", 1, [a]), (b"G1R1R2", 1, [b]), (b"R3", 0, [c])]
    # equal own frames (one sweep's pings) are one more shared buffer, one tick message or more
    d = "d"
    for messages in ([({a, b, c}, b"G1")], [({a, b, c}, b"G1"), ({a}, b"E1")]):
        pinged = fanout.plan(messages, {b: [b"P"], c: [b"P"], d: [b"P"]})
        assert {(buffer, count, tuple(sorted(targets))) for buffer, count, targets in pinged} == {
            *([(b"G1", 1, (a,))] if len(messages) == 1 else [(b"G1E1", 2, (a,))]),
            (b"G1P", 1, (b, c)),
            (b"P", 0, (d,)),
        }


def written(gw: Gateway) -> tuple[float, float]:
    """(socket writes, messages delivered) by fan-out so far."""
    return gw.metrics.writes._value.get(), gw.metrics.deliveries._value.get()


@pytest.mark.parametrize("coalesce", [0.1, 0.0])
async def test_a_ticks_boards_reach_a_socket_in_one_write(redis_url: str, r: aioredis.Redis, coalesce: float) -> None:
    boards = ("region:eu", "mode:duo")
    async with running(redis_url, boards=boards, coalesce=coalesce * T) as gw, client(gw) as ws:
        await greet(ws)
        for board in boards:
            await request(ws, {"type": "subscribe", "board": board}, "subscribed")
            assert (await recv(ws))["board"] == board  # its snapshot at once, never gathered
        before = written(gw)
        keys = gw.settings.game.keys
        async with r.pipeline(transaction=False) as pipe:  # one tick, as the scorer publishes it
            for version, board in enumerate(("global", *boards)):
                pipe.spublish(keys.snapshot_channel("weekly", board), snapshot(10 + version, board=board))
            await pipe.execute()
        got = [await recv(ws) for _ in range(3)]
        assert [(m["board"], m["version"]) for m in got] == [("global", 10), ("region:eu", 11), ("mode:duo", 12)]
        writes, delivered = (now - then for now, then in zip(written(gw), before, strict=True))
        assert (writes, delivered) == ((1, 3) if coalesce else (3, 3))


async def test_a_held_rank_push_shares_the_ticks_write(redis_url: str, r: aioredis.Redis, lb: Leaderboard) -> None:
    await lb.submit_batch([Submission("s1", "mia", 300, now_ms()).fields()])
    async with (
        running(redis_url, coalesce=0.05 * T, rank_interval=0.1 * T, push_hold=10 * T) as gw,
        client(gw, f"?token={token('mia')}") as ws,
    ):
        await greet(ws)
        async with asyncio.timeout(2 * T):  # the first round's push is held for the next tick
            while not gw.metrics.rank_pushes._value.get():  # noqa: ASYNC110 (a counter: no event to await)
                await asyncio.sleep(0.01)
        before = written(gw)
        await publish(r, gw, snapshot(20))
        snap, rank = await recv(ws), await recv(ws)
        assert (snap["type"], snap["version"], rank["type"], rank["rank"]) == ("snapshot", 20, "rank", 1)
        assert written(gw)[0] - before[0] == 1


async def test_an_announcement_waits_for_the_tick_and_shares_its_write(redis_url: str, r: aioredis.Redis) -> None:
    async with running(redis_url, coalesce=0.05 * T, push_hold=10 * T) as gw, client(gw) as ws:
        await greet(ws)
        before = written(gw)
        announce = {"type": "announce", "board": "global", "window": "weekly", "period": "2030-W48",
                    "player": "leo", "rank": 3, "score": 10}  # fmt: skip
        await r.spublish(gw.settings.game.keys.announce_channel, orjson.dumps(announce))
        await publish(r, gw, snapshot(30))  # the tick: written within the coalescing window
        assert await recv(ws) == announce  # held, then first: messages keep their order
        assert (await recv(ws))["version"] == 30
        assert tuple(now - then for now, then in zip(written(gw), before, strict=True)) == (1, 2)


async def test_a_socket_whose_closing_handshake_began_gets_nothing_after_its_close_frame(
    redis_url: str, r: aioredis.Redis
) -> None:
    """The tick's fan-out skips a socket from the moment its closing handshake begins (here the
    server's, which this silent peer never answers, so its TCP connection stays open)."""
    async with running(redis_url, close_timeout=10 * T) as gw, client(gw) as live:
        await greet(live)
        sock = await raw_ws(gw)
        port = sock.getsockname()[1]
        await until(lambda: len(gw.clients) == 2, 2 * T)
        [silent] = [c for c in gw.clients if c.ws.remote_address[1] == port]
        closing = asyncio.create_task(gw.out.close(silent, 1012, "bye"))  # waits for a close frame in vain
        try:
            await until(lambda: silent.closed, 2 * T)
            assert not silent.transport.is_closing()  # still connected: only the flag keeps it out
            await publish(r, gw, snapshot(8))
            assert (await recv_type(live, "snapshot"))["version"] == 8  # the tick was written
            data = sock.recv(1 << 20)  # everything the gateway wrote to it, sitting in its buffer
            assert data.endswith(b"\x88\x05\x03\xf4bye")  # its last frame: the close, 1012 "bye"
            assert b'"version":8' not in data
        finally:
            closing.cancel()
            sock.close()


def test_plan_of_one_message_is_the_general_plan() -> None:
    """The one-board tick's short cut gives what the general rule gives (a second message with
    an empty frame makes plan take the general path and leaves the buffers equal)."""
    a, b, c, d = "a", "b", "c", "d"
    for subscribers, extras in [
        ({a, b, c}, {}),
        ({a, b, c}, {b: [b"R1", b"P"], d: [b"R2"]}),
        (set(), {d: [b"P"]}),
        (set(), {}),
    ]:
        fast = fanout.plan([(subscribers, b"G1")], extras)
        general = fanout.plan([(subscribers, b"G1"), (subscribers, b"")], extras)
        assert {(buffer, tuple(sorted(targets))) for buffer, _, targets in fast} == {
            (buffer, tuple(sorted(targets))) for buffer, _, targets in general
        }, (subscribers, extras)
        assert all(count == (targets[0] in subscribers) for _, count, targets in fast)


async def test_a_socket_is_written_directly_only_while_nothing_went_through_its_transport(
    redis_url: str, r: aioredis.Redis
) -> None:
    """The fan-out skips asking a ``clean`` socket's transport for its buffer: every write that
    goes through the transport (websockets' reply here, the fan-out's own leftover below) must
    make the next tick ask again, or the tick's frame could overtake bytes still queued."""
    async with running(redis_url) as gw, client(gw) as ws:
        await greet(ws)
        [c] = gw.clients

        def clean() -> bool:  # read afresh each time (the flag changes under the test)
            return c.clean

        assert not clean()  # the welcome and the snapshot on connect went through the transport
        await publish(r, gw, snapshot(2))
        assert (await recv(ws))["version"] == 2
        assert clean()  # found empty, written to the descriptor
        assert (await request(ws, {"type": "ping"}))["type"] == "pong"  # websockets wrote it
        assert not clean()
        await publish(r, gw, snapshot(3))
        assert (await recv(ws))["version"] == 3
        assert clean()
    async with running(redis_url) as gw:
        await publish(r, gw, snapshot(1))
        slow = await raw_ws(gw, rcvbuf=4096)

        def has(version: int) -> bool:
            with contextlib.suppress(BlockingIOError):
                return f'"version":{version}'.encode() in slow.recv(1 << 16, socket.MSG_PEEK)
            return False

        try:
            await until(lambda: has(1), 2 * T)  # the snapshot on connect went through the transport
            [c] = gw.clients
            await publish(r, gw, snapshot(4))
            await until(lambda: c.clean, 2 * T)
            for version in range(5, 100):  # until the socket's buffers are full (it never reads)
                await publish(r, gw, snapshot(version, pad=48_000))
                written = gw.metrics.writes._value.get()
                await until(lambda: gw.metrics.writes._value.get() > written, 2 * T)  # noqa: B023
                if c.transport.get_write_buffer_size():
                    break
            assert c.transport.get_write_buffer_size() > 0
            assert not c.clean  # the rest went through the transport
        finally:
            slow.close()


async def test_a_boards_saved_descriptors_take_the_tick_until_anything_changes(
    redis_url: str, r: aioredis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tick finding every socket of its one board open and clean saves their descriptors; the
    next tick writes those without visiting a socket, until anything changes (here a reply
    through a transport, then a socket leaving), which sends a tick through the per-socket pass
    again. Every socket gets every snapshot either way, byte for byte."""
    visited: list[int] = []
    real = Outbound._sort

    def spy(self: Outbound, clients: Sequence[Client], now: float) -> tuple[list[Client], list[int], list[Client]]:
        visited.append(len(clients))
        return real(self, clients, now)

    monkeypatch.setattr(Outbound, "_sort", spy)
    async with running(redis_url) as gw:
        sockets = [await connect(url(gw), open_timeout=5 * T) for _ in range(3)]
        try:
            for ws in sockets:
                await greet(ws)

            async def tick(version: int) -> list[int]:
                visited.clear()
                payload = snapshot(version)
                await publish(r, gw, payload)
                got = await asyncio.gather(*(asyncio.wait_for(w.recv(decode=False), 2 * T) for w in sockets))
                assert got == [payload] * len(sockets)
                return visited[:]

            assert await tick(2) == [3]  # socket by socket: the welcome went through the transports
            assert await tick(3) == []  # the saved descriptors
            assert await tick(4) == []
            assert (await request(sockets[0], {"type": "ping"}))["type"] == "pong"
            assert await tick(5) == [3]  # a reply went through a transport
            assert await tick(6) == []
            await sockets.pop().close()
            await until(lambda: len(gw.clients) == 2, 2 * T)
            assert await tick(7) == [2]  # one left
            assert await tick(8) == []
        finally:
            await asyncio.gather(*(ws.close() for ws in sockets))
