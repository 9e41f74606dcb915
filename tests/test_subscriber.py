"""The reconnecting sharded pub/sub subscriber (leaderboard/subscriber.py) on its own, against a
private redis-server that is restarted under it: the channels its owner wants are subscribed
again on the new connection, the owner is told the connection was lost and is back, and the
outage is logged once when it starts and once when it ends. (Through the gateway's hub, the
same on a cluster: test_cluster.py's failover and resharding.)"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from fleet.redis_server import RedisServer
from leaderboard import connect
from leaderboard.subscriber import Subscriber

from .conftest import MS, until

log = logging.getLogger("tests.subscriber")


class Recorder:
    """A listener that keeps what it was told."""

    def __init__(self, *channels: str) -> None:
        self.channels = list(channels)
        self.messages: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
        self.confirmed: list[str] = []
        self.ups: list[float | None] = []
        self.losses: list[bool] = []

    def wanted(self) -> list[str]:
        return self.channels

    def on_message(self, channel: str, data: str) -> None:
        self.messages.put_nowait((channel, data))

    async def on_confirmed(self, channel: str) -> None:
        self.confirmed.append(channel)

    def on_up(self, outage: float | None) -> None:
        self.ups.append(outage)

    def on_lost(self, failed: bool) -> None:
        self.losses.append(failed)


async def test_a_restarted_redis_is_subscribed_again_and_the_outage_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=log.name)
    server = RedisServer(tmp_path).start()
    redis = connect(server.url)
    listener = Recorder("{g}:a")
    sub = Subscriber(redis, "{g}:anchor", listener, log=log, label="g")
    try:
        sub.start()
        await asyncio.wait_for(sub.connected.wait(), 5000 * MS)
        await until(lambda: len(listener.confirmed) == 2, 5000 * MS)
        assert listener.ups == [None] and set(listener.confirmed) == sub.live == {"{g}:anchor", "{g}:a"}
        # a channel the owner subscribes later, and one it gives up (asked: no reconnect)
        async with sub.lock:
            await sub.ssubscribe("{g}:b")
        await until(lambda: "{g}:b" in sub.live, 5000 * MS)
        listener.channels.append("{g}:b")
        async with sub.lock:
            await sub.sunsubscribe("{g}:a")
        listener.channels.remove("{g}:a")
        await redis.spublish("{g}:b", "one")
        assert await asyncio.wait_for(listener.messages.get(), 5000 * MS) == ("{g}:b", "one")
        assert listener.losses == [] and sub.live == {"{g}:anchor", "{g}:b"}

        assert server.process is not None
        server.process.terminate()
        server.process.wait(10)
        await until(lambda: sub.failed_attempts >= 3, 5000 * MS)  # it keeps trying, with backoff
        assert not sub.connected.is_set() and sub.live == set()
        server.start()  # the same port
        await asyncio.wait_for(sub.connected.wait(), 5000 * MS)
        await until(lambda: "{g}:b" in sub.live, 5000 * MS)
        assert sub.live == {"{g}:anchor", "{g}:b"}  # what the owner wants now, not what it once did
        assert listener.losses[0] is True and all(listener.losses) and len(listener.ups) == 2
        outage = listener.ups[1]
        assert outage is not None and outage > 0 and sub.failed_attempts == 0
        publisher = connect(server.url)  # the pooled connections went with the old process
        await publisher.spublish("{g}:b", "two")
        await publisher.aclose()
        assert await asyncio.wait_for(listener.messages.get(), 5000 * MS) == ("{g}:b", "two")

        lines = [r for r in caplog.records if r.name == log.name]
        assert [r.levelno for r in lines] == [logging.WARNING, logging.INFO]
        assert isinstance(lines[1].args, tuple)
        label, seconds, failed = lines[1].args
        assert label == "g" and seconds == outage and isinstance(failed, int) and failed >= 3
    finally:
        await sub.close()
        await redis.aclose()
        server.stop()
    assert listener.losses[-1] is False  # closed, not failed
