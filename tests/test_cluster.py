"""The fleet on a private Redis Cluster (3 masters, 1 replica each, fleet/cluster.py): three games
whose hash tags land on three different masters, one scorer replica and two gateways serving all
three; then a master is SIGKILLed, its replica is promoted, and scorer and gateways recover by
themselves. Submissions acknowledged with WAIT 1 (LB_WAIT_REPLICAS=1) survive the failover."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import subprocess
import sys
import time
import traceback
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import RedisError
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from fleet.cluster import Cluster, keyslot_names
from gateway.server import Gateway
from leaderboard import GameConfig, Leaderboard, RedisClient, Submission, connect, now_ms
from leaderboard.errors import NotReplicated
from leaderboard.queue import Queue
from leaderboard.subscriber import Subscriber
from scorer import Scorer, ScorerSettings

from .conftest import until
from .gw_helpers import T, client, greet, recv_type, request, running, token
from .test_subscriber import Recorder

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]  # slow: the module starts a cluster


@contextlib.asynccontextmanager
async def fleet(cluster: Cluster, config: GameConfig) -> AsyncIterator[tuple[Scorer, list[Gateway]]]:
    settings = ScorerSettings(
        redis_url=cluster.url,
        game=config,
        name="cluster",
        tick_ms=100,
        claim_idle_ms=2000,
        stats_interval_s=0,
        metrics_port=0,
    )
    async with (
        Scorer(settings) as scorer,
        running(cluster.url, game=config) as a,
        running(cluster.url, game=config) as b,
    ):
        for gw in (a, b):
            await asyncio.wait_for(asyncio.gather(*(g.hub.connected.wait() for g in gw.games.values())), 10 * T)
        yield scorer, [a, b]


async def until_player(ws: ClientConnection, player: str, within: float) -> dict[str, Any]:
    async with asyncio.timeout(within):
        while True:
            snap = await recv_type(ws, "snapshot", within)
            if any(e["player"] == player for e in snap["entries"]):
                return snap


async def submit(queue: Queue, sid: str, player: str, points: int) -> None:
    await queue.submit(Submission(sid, player, points, now_ms()))


async def submit_retrying(queue: Queue, sid: str, player: str, points: int, within: float) -> None:
    """As a game server does: retry (same id) until acknowledged."""
    async with asyncio.timeout(within):
        while True:
            try:
                return await submit(queue, sid, player, points)
            except (RedisError, OSError, NotReplicated):
                await asyncio.sleep(0.1)  # the game server's pause between retries, by design


def crossslot_errors(cluster: Cluster) -> int:
    total = 0
    for node in cluster.live():
        with node.client() as c:
            total += int(c.info("errorstats").get("errorstat_CROSSSLOT", {"count": 0})["count"])
    return total


async def test_three_games_on_three_masters_then_a_failover(cluster: Cluster) -> None:
    games = keyslot_names(cluster.masters(), "game", 3)
    owners = {cluster.owner(f"{{{g}}}") for g in games}
    assert len(owners) == 3, "each game on its own master"
    config = GameConfig(games=tuple(games))
    redis = connect(cluster.url)
    queues = {c.game: Queue(redis, c, wait_replicas=1, wait_timeout_ms=1000) for c in config.served}
    try:
        async with fleet(cluster, config) as (scorer, gateways), contextlib.AsyncExitStack() as stack:
            # --- every game works, through either gateway: fan-out, submissions, ranks
            # max_queue=None: these sockets are read only between the failover's steps, and a
            # client that leaves 16 frames unread stops reading its socket, so the gateway's pings
            # go unanswered and it rightly drops the socket as dead; an app reads all the time.
            sockets = [
                await stack.enter_async_context(
                    client(gateways[i % 2], f"?game={g}&token={token(f'p-{g}')}", max_queue=None)
                )
                for i, g in enumerate(games)
            ]
            for ws in sockets:
                await greet(ws)
            for g in games:
                await submit(queues[g], f"{g}-1", f"p-{g}", 100)
            for g, ws in zip(games, sockets, strict=True):
                snap = await until_player(ws, f"p-{g}", 5 * T)
                assert [e["player"] for e in snap["entries"]] == [f"p-{g}"]  # its own game only
                rank = await request(ws, {"type": "rank", "id": 1}, "rank")
                assert (rank["rank"], rank["score"]) == (1, 100)
            assert crossslot_errors(cluster) == 0

            # --- kill the master of the first game while submissions keep coming
            victim_game, other_game = games[0], games[1]
            key = f"{{{victim_game}}}"
            victim = cluster.owner(key)
            acked: list[str] = []
            refused = 0
            tries = 0
            stop = asyncio.Event()

            async def keep_submitting() -> None:
                # paced (sleeps by design): a game server's steady traffic, not a flood
                nonlocal refused, tries
                while not stop.is_set():
                    tries += 1
                    player = f"f-{tries}"
                    try:
                        await submit(queues[victim_game], f"f-{tries}", player, 10 + tries)
                        acked.append(player)
                    except (RedisError, OSError, NotReplicated):
                        refused += 1  # not acknowledged: the game server would retry it
                        await asyncio.sleep(0.05)
                    await asyncio.sleep(0.005)

            async def keep_the_other_game_moving() -> None:
                # the healthy game's board changes every few ticks throughout the failover
                i = 0
                while not stop.is_set():
                    i += 1
                    with contextlib.suppress(RedisError, OSError, NotReplicated):
                        await submit(queues[other_game], f"o-{i}", f"o-{i}", 10 + i)
                    await asyncio.sleep(0.03)  # pacing, by design: a change every few ticks

            # the healthy game's socket: what it was sent up to now is read, what follows is its ticks
            while True:
                try:
                    await asyncio.wait_for(sockets[1].recv(), 0.2 * T)
                except TimeoutError:
                    break
            submitter = asyncio.create_task(keep_submitting())
            other = asyncio.create_task(keep_the_other_game_moving())
            await until(lambda: len(acked) >= 5, 10 * T)  # the traffic is under way
            killed_at = time.monotonic()
            cluster.kill(victim)
            # The cluster helper's waits poll with blocking calls: in a thread, so that the scorer,
            # the gateways and the sockets (all on this loop) keep running through the failover as
            # they would in production. Blocking the loop for the seconds a promotion takes on a
            # busy machine made the gateways' keepalive give up on sockets that were fine.
            promoted = await asyncio.to_thread(cluster.wait_owner_changes, victim, key, timeout=30 * T)
            promoted_s = time.monotonic() - killed_at
            with promoted.client() as c:
                assert any(
                    lib["library_name"] == "leaderboard" for lib in _libraries(c.execute_command("FUNCTION", "LIST"))
                )
            promoted_at = tries
            await until(lambda: tries >= promoted_at + 5, 10 * T)  # the traffic met the promoted master
            stop.set()
            await submitter
            await other
            # One game's master down costs the other games nothing: the healthy game's snapshots
            # (built every tick it changed, 100 ms here) kept coming through the whole failover.
            stamps = []
            while True:
                try:
                    frame = orjson.loads(await asyncio.wait_for(sockets[1].recv(), 0.5 * T))
                except TimeoutError:
                    break
                if frame.get("type") == "snapshot":
                    stamps.append(frame["ts"])
            gaps = [b - a for a, b in itertools.pairwise(stamps)]
            assert len(stamps) > 10 and max(gaps) < 1000 * T, f"the healthy game's snapshots stalled: gaps {gaps}"

            # --- the dead node comes back and rejoins as the new master's replica: with one replica
            # per master, WAIT 1 (the promise) cannot be kept for this game until then
            await asyncio.to_thread(victim.start)
            await asyncio.to_thread(cluster.wait_replicas_online, promoted, timeout=30 * T)
            rejoined_s = time.monotonic() - killed_at

            # --- scorer and gateways recovered by themselves: a new submission reaches the sockets
            await submit_retrying(queues[victim_game], "after-1", "after", 10_000, 10 * T)
            try:
                await until_player(sockets[0], "after", 20 * T)
            except (TimeoutError, ConnectionClosed) as exc:
                keys = config.for_game(victim_game).keys
                raise AssertionError(
                    f"no snapshot with the new player ({exc!r}; promoted after {promoted_s:.1f} s, replica "
                    f"online after {rejoined_s:.1f} s): stream {await redis.xlen(keys.submissions)} entries, "
                    f"latest {await redis.get(keys.latest('weekly', 'global'))!r}, "
                    f"hubs connected {[g.hub.connected.is_set() for gw in gateways for g in gw.games.values()]}, "
                    f"scorer tasks ended {_ended(scorer)}"
                ) from None
            await submit_retrying(queues[other_game], "after-2", "after2", 10_000, 10 * T)
            await until_player(sockets[1], "after2", 5 * T)
            recovered_s = time.monotonic() - killed_at

            # --- what the failover lost: acknowledged (WAIT 1) but not on the board
            lb = Leaderboard(redis, config.for_game(victim_game))
            lost = await _missing(lb, acked, within=15 * T)
            print(
                f"\nfailover: promoted after {promoted_s:.1f} s, replica online after {rejoined_s:.1f} s, "
                f"recovered after {recovered_s:.1f} s; "
                f"{len(acked)} acknowledged, {refused} refused during the failover, {len(lost)} lost"
            )
            assert acked and not lost
    finally:
        await redis.aclose()


async def test_a_resharded_game_follows_its_slot(cluster: Cluster) -> None:
    """The game's slot moves to another master while scorer and gateway run: the packed calls
    follow MOVED, the hub's subscription follows the unasked sunsubscribe to the new owner."""
    [game] = keyslot_names(cluster.masters(), "moving", 1)
    key = f"{{{game}}}"
    config = GameConfig(games=(game,))
    redis = connect(cluster.url)
    queue = Queue(redis, config.served[0])
    try:
        async with fleet(cluster, config) as (_, gateways), client(gateways[0], f"?game={game}") as ws:
            await greet(ws)
            await submit(queue, "m-1", "before", 100)
            await until_player(ws, "before", 5 * T)
            old = cluster.owner(key)
            new = next(m for m in cluster.masters() if m is not old)
            await asyncio.to_thread(cluster.move_slot, key, new)  # the loop keeps serving meanwhile
            assert cluster.owner(key) is new
            await submit_retrying(queue, "m-2", "after", 200, 10 * T)
            snap = await until_player(ws, "after", 10 * T)
            assert [e["player"] for e in snap["entries"]] == ["after", "before"]  # data moved with the slot
            assert crossslot_errors(cluster) == 0
    finally:
        await redis.aclose()


async def test_a_subscriber_listens_on_its_channels_shard_and_follows_the_slot(cluster: Cluster) -> None:
    """The subscriber (leaderboard/subscriber.py) alone: its connection is on the master owning
    its channels' slot (SPUBLISH there reaches it), and when the slot moves it takes the unasked
    sunsubscribe as a lost connection and subscribes again on the new owner."""
    [game] = keyslot_names(cluster.masters(), "listening", 1)
    key = f"{{{game}}}"
    redis = connect(cluster.url)
    listener = Recorder(f"{key}:board")
    sub = Subscriber(redis, f"{key}:anchor", listener, log=logging.getLogger("tests.cluster"), label=game)

    def spublish(message: str) -> int:
        """Published on the slot's owner: how many subscribers heard it there."""
        with cluster.owner(key).client() as owner:
            return int(owner.spublish(f"{key}:board", message))

    try:
        sub.start()
        await until(lambda: len(listener.confirmed) == 2, 10 * T)
        assert await asyncio.to_thread(spublish, "one") == 1
        assert await asyncio.wait_for(listener.messages.get(), 5 * T) == (f"{key}:board", "one")
        old = cluster.owner(key)
        await asyncio.to_thread(cluster.move_slot, key, next(m for m in cluster.masters() if m is not old))
        await until(lambda: len(listener.ups) == 2 and len(sub.live) == 2, 10 * T)
        assert listener.losses == [True]  # the slot moved: a lost connection, then back
        assert await asyncio.to_thread(spublish, "two") == 1
        assert await asyncio.wait_for(listener.messages.get(), 5 * T) == (f"{key}:board", "two")
    finally:
        await sub.close()
        await redis.aclose()


def _ended(scorer: Scorer) -> list[str]:
    """The scorer's workers that ended (a crash shows its traceback)."""
    tasks = [*scorer._consuming, *scorer._others]
    return [
        "".join(traceback.format_exception(t.exception())) if not t.cancelled() else "cancelled"
        for t in tasks
        if t.done()
    ]


def _libraries(reply: Any) -> list[dict[str, Any]]:
    """FUNCTION LIST's reply as dicts (RESP2 gives flat lists)."""
    out = []
    for lib in reply:
        if isinstance(lib, dict):
            out.append(lib)
        else:
            out.append(dict(zip(lib[::2], lib[1::2], strict=True)))
    return out


async def _missing(lb: Leaderboard, players: list[str], within: float) -> list[str]:
    """Players still not on the all-time board once the queue drained (bounded wait)."""
    deadline = time.monotonic() + within
    while True:
        ranks = await lb.ranks(players, "alltime")
        missing = [p for p, st in zip(players, ranks.standings, strict=True) if st.rank is None]
        if not missing or time.monotonic() > deadline:
            return missing
        await asyncio.sleep(0.2)


async def test_cluster_url_gives_a_cluster_client(cluster: Cluster) -> None:
    redis: RedisClient = connect(cluster.url)
    try:
        assert isinstance(redis, RedisCluster)
        assert await redis.ping()
    finally:
        await redis.aclose()


def test_python_m_fleet_cluster_help() -> None:
    out = subprocess.run([sys.executable, "-m", "fleet.cluster", "--help"], capture_output=True, text=True, check=True)
    assert "redis+cluster://" in out.stdout
