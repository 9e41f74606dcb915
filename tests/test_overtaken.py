"""``overtaken``: passed by a friend, or out of a board's top N, told with the own-rank push — against
a real gateway, redis-server and (for snapshots) the scorer's publisher."""

from __future__ import annotations

from typing import Any

import pytest
import redis.asyncio as aioredis
from websockets.asyncio.client import ClientConnection

from client import LeaderboardClient
from gateway.server import Gateway
from leaderboard import GameConfig, Leaderboard, Submission, now_ms
from leaderboard.protocol import MAX_FRIENDS, ProtocolError, Watch, parse
from scorer.publisher import Publisher
from scorer.settings import ScorerSettings

from .gw_helpers import T, client, greet, recv, recv_type, request, running, token, url

_seq = iter(range(1_000_000))


async def scores(lb: Leaderboard, *points: tuple[str, int]) -> None:
    await lb.submit_batch([Submission(f"s{next(_seq)}", p, n, now_ms()).fields() for p, n in points])


async def until_pong(ws: ClientConnection) -> list[dict[str, Any]]:
    """Everything the socket was sent before the reply to a ping sent now."""
    await ws.send('{"type":"ping","id":"fence"}')
    seen = []
    while (msg := await recv(ws))["type"] != "pong" or msg.get("id") != "fence":
        seen.append(msg)
    return seen


def events(msgs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m for m in msgs if m["type"] == "overtaken"]


async def watching(ws: ClientConnection, friends: list[str], top: bool = False) -> dict[str, Any]:
    return await request(ws, {"type": "watch", "friends": friends, "top": top, "id": "w"}, "watching")


def test_a_watch_is_parsed_and_bad_lists_get_stable_codes() -> None:
    def watch(body: str) -> Any:
        return parse('{"type":"watch",' + body + "}", windows=["weekly"], default_window="weekly")

    assert watch('"friends":["ana","bo","ana"],"top":true') == Watch(None, ("ana", "bo"), True)
    assert watch('"friends":[]') == Watch(None, (), False)
    too_long = ",".join(f'"p{i}"' for i in range(MAX_FRIENDS + 1))
    for body, code in [
        ('"friends":"ana"', "bad_message"),
        ('"friends":{"ana":1}', "bad_message"),
        (f'"friends":[{too_long}]', "too_many_friends"),
        ('"friends":["ana", 7]', "bad_message"),
        ('"friends":[""]', "bad_message"),
        ('"friends":["a\\u0007b"]', "bad_message"),
        ('"friends":[],"top":"yes"', "bad_message"),
    ]:
        with pytest.raises(ProtocolError) as exc:
            watch(body)
        assert exc.value.code == code, body


async def test_a_friend_passing_me_is_one_event_and_nobody_else_is(redis_url: str, lb: Leaderboard) -> None:
    await scores(lb, ("mia", 500), ("ana", 300), ("bo", 100), ("cy", 50))
    async with (
        running(redis_url, push_hold=0.0) as gw,
        client(gw, f"?token={token('mia')}") as ws,
        client(gw) as spectator,
    ):
        await greet(ws)
        await greet(spectator)
        refused = await request(spectator, {"type": "watch", "friends": ["mia"], "id": 1})
        assert (refused["type"], refused["code"]) == ("error", "auth_required")
        assert (await watching(ws, ["ana", "cy"])) == {
            "type": "watching", "friends": ["ana", "cy"], "top": False, "id": "w",
        }  # fmt: skip
        pusher = gw.default_game.ranks
        await pusher.round()  # the first look: nobody passed anybody yet
        assert events(await until_pong(ws)) == []

        await scores(lb, ("ana", 900))  # a friend goes past
        await pusher.round()
        got = await until_pong(ws)
        [event] = events(got)
        assert event == {
            "type": "overtaken", "board": "global", "window": event["window"], "period": event["period"],
            "player": "mia", "rank": 2, "reason": "friend", "by": {"player": "ana", "rank": 1, "score": 900},
        }  # fmt: skip
        assert [m["rank"] for m in got if m["type"] == "rank"] == [2]  # in the same write as the new rank

        # a non-friend passing inside the board, a friend moving up behind me: nothing
        await scores(lb, ("bo", 2000), ("cy", 400))
        await pusher.round()
        assert events(await until_pong(ws)) == []
        # bad input changes nothing: the list stays ana and cy
        for friends, code in [("ana", "bad_message"), ([f"p{i}" for i in range(MAX_FRIENDS + 1)], "too_many_friends")]:
            refused = await request(ws, {"type": "watch", "friends": friends, "id": 2})
            assert (refused["type"], refused["code"]) == ("error", code)
        await scores(lb, ("cy", 1000))
        await pusher.round()
        [event] = events(await until_pong(ws))
        assert (event["by"]["player"], event["rank"]) == ("cy", 4)
        assert events(await until_pong(spectator)) == []
        assert gw.metrics.overtaken._value.get() == 2


async def test_events_are_bounded_per_connection_per_minute(redis_url: str, lb: Leaderboard) -> None:
    await scores(lb, ("mia", 500), ("ana", 300), ("bo", 200))
    async with (
        running(redis_url, push_hold=0.0, overtaken_per_minute=1) as gw,
        client(gw, f"?token={token('mia')}") as ws,
    ):
        await greet(ws)
        await watching(ws, ["ana", "bo"])
        pusher = gw.default_game.ranks
        await pusher.round()
        await scores(lb, ("ana", 600))
        await pusher.round()
        assert len(events(await until_pong(ws))) == 1
        await scores(lb, ("bo", 700))
        await pusher.round()
        msgs = await until_pong(ws)
        assert events(msgs) == [] and [m["rank"] for m in msgs if m["type"] == "rank"] == [3]
        assert gw.metrics.overtaken_limited._value.get() == 1


async def test_leaving_the_top_n_is_one_event(redis_url: str, r: aioredis.Redis) -> None:
    config = GameConfig(game="test", top_n=2)
    lb = Leaderboard(r, config)
    publisher = Publisher(r, ScorerSettings(redis_url=redis_url, game=config, name="s1", metrics_port=0))
    await scores(lb, ("mia", 500), ("ana", 300), ("cy", 10))
    async with (
        running(redis_url, push_hold=0.0, game=config) as gw,
        client(gw, f"?token={token('mia')}") as ws,
        client(gw, f"?token={token('cy')}") as other,
    ):
        await greet(ws)
        await greet(other)
        await watching(ws, [], top=True)
        await watching(other, [], top=True)  # never in the top N: nothing to leave
        await publisher.tick()
        await recv_type(ws, "snapshot")
        await scores(lb, ("bo", 1000), ("ana", 800))  # bo comes in, mia goes out
        await publisher.tick()
        snap = await recv_type(ws, "snapshot")
        assert [e["player"] for e in snap["entries"]] == ["bo", "ana"]
        pusher = gw.default_game.ranks
        await pusher.round()
        [event] = events(await until_pong(ws))
        assert (event["reason"], event["rank"], event["player"]) == ("top", 3, "mia")
        assert (event["by"]["player"], event["by"]["rank"], event["by"]["score"]) == ("bo", 1, 1000)
        await pusher.round()  # told once
        assert events(await until_pong(ws)) == []
        assert events(await until_pong(other)) == []


async def test_redis_calls_per_round_do_not_grow_with_friends(
    redis_url: str, lb: Leaderboard, r: aioredis.Redis
) -> None:
    players = [f"p{i}" for i in range(4)]
    friends = [f"f{i}" for i in range(MAX_FRIENDS)]
    await scores(lb, *((p, 1000 + i) for i, p in enumerate(players)), *((f, 1 + i) for i, f in enumerate(friends)))

    async def calls(gw: Gateway) -> tuple[int, int]:
        """FCALL_RO calls of one round, and messages it sent."""
        await r.config_resetstat()
        sent = await gw.default_game.ranks.round()
        stats = await r.info("commandstats")
        return stats.get("cmdstat_fcall_ro", {}).get("calls", 0), sent

    async with running(redis_url, push_hold=0.0, rank_chunk=2) as gw:
        sockets = [client(gw, f"?token={token(p)}") for p in players]
        conns = [await s.__aenter__() for s in sockets]
        try:
            for ws in conns:
                await greet(ws)
            before, _ = await calls(gw)
            assert before == 2  # two chunks of two players, one board
            for ws in conns:
                await watching(ws, friends)
            assert (await calls(gw))[0] == before  # every friend read, in the same two calls
            await scores(lb, *((f, 10_000 + i) for i, f in enumerate(friends)))  # all pass all
            after, sent = await calls(gw)
            assert sent >= len(conns)  # a new rank each, and events
            assert after == before
            seen = [events(await until_pong(ws)) for ws in conns]
            assert all(len(e) == 6 for e in seen)  # the default bound per minute
        finally:
            for s in sockets:
                await s.__aexit__(None, None, None)


async def test_the_python_client_watches_and_tells_its_listener(redis_url: str, lb: Leaderboard) -> None:
    await scores(lb, ("mia", 500), ("ana", 300))
    async with running(redis_url, push_hold=0.0) as gw:
        told: list[dict[str, Any]] = []
        async with LeaderboardClient(url(gw), token=token("mia")) as player:
            player.on_overtaken(told.append)
            player.subscribe("global")
            player.watch(["ana"])
            await player.wait_for(lambda m: m["type"] == "watching", timeout=5 * T)
            await gw.default_game.ranks.round()
            await player.wait_for(lambda m: m["type"] == "rank", timeout=5 * T)
            await scores(lb, ("ana", 900))
            await gw.default_game.ranks.round()
            event = await player.wait_for(lambda m: m["type"] == "overtaken", timeout=5 * T)
        assert (event["by"]["player"], event["rank"], event["reason"]) == ("ana", 2, "friend")
        assert told == [event]


async def test_friends_beyond_a_reads_room_are_read_in_turn(redis_url: str, lb: Leaderboard, r: aioredis.Redis) -> None:
    friends = [f"f{i}" for i in range(MAX_FRIENDS)]
    await scores(lb, ("mia", 5000), *((f, 1 + i) for i, f in enumerate(friends)))
    async with (
        running(redis_url, push_hold=0.0, friends_per_read=30) as gw,
        client(gw, f"?token={token('mia')}") as ws,
    ):
        await greet(ws)
        await watching(ws, friends)
        pusher, tracker = gw.default_game.ranks, gw.default_game.hub.overtaken
        for _ in range(4):  # 30 a round: every friend's first look within four rounds, one call each
            await r.config_resetstat()
            await pusher.round()
            assert (await r.info("commandstats"))["cmdstat_fcall_ro"]["calls"] == 1
        seen = tracker._seen[("weekly", "global")].players
        assert set(friends) <= set(seen)
        await scores(lb, ("f99", 9000))  # read in its turn, then told
        for _ in range(4):
            await pusher.round()
        [event] = events(await until_pong(ws))
        assert (event["by"]["player"], event["rank"]) == ("f99", 2)
