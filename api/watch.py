"""Boards the HTTP API is asked about, kept current by sharded pub/sub as the gateway's hub keeps
its boards: a board's snapshot channel is SSUBSCRIBEd at its first ``GET top`` that finds a
published snapshot (a board nothing was published for is not watched), its stored latest read
again once the subscription is confirmed, then every snapshot the scorer publishes replaces it — a
request for a watched board reads nothing from Redis.

Until a board is live (subscribing, or the pub/sub connection down), requests are answered by
``Held`` (held.py: one read per key at a time, held for a TTL, stale-if-error). A board nobody
asked about for ``idle`` seconds is unsubscribed and forgotten, and at most ``size`` boards are
watched (the others are answered by ``Held``), so requests for ever new boards cannot grow the
process or its subscriptions. The connection, its reconnects and its log lines are the
subscriber's (leaderboard/subscriber.py), the gateway hub's too::

    watch = Watch(redis, lb.keys, held, idle=60.0, size=1000)
    watch.start()
    snapshot, age = await watch.get("weekly", "global")
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

from redis.exceptions import RedisError

from leaderboard import RedisClient
from leaderboard.keys import Keys
from leaderboard.lifecycle import stop
from leaderboard.subscriber import Subscriber

from .held import Held

log = logging.getLogger("api.watch")


@dataclass(slots=True)
class _Board:
    latest_key: str
    used: float = field(default_factory=time.monotonic)
    value: str | None = None
    live: bool = False  # subscribed, and value is the latest stored or published since


class Watch:
    def __init__(self, redis: RedisClient, keys: Keys, held: Held[str | None], *, idle: float, size: int) -> None:
        self._redis = redis
        self._keys = keys
        self._held = held
        self.live_hits = 0  # answers from the value pub/sub pushed (the API's metrics)
        self.idle, self.size = idle, size
        self._boards: dict[str, _Board] = {}  # snapshot channel -> board
        # the announce channel is the anchor: always subscribed, SSUBSCRIBE needs a channel
        self.subscriber = Subscriber(redis, keys.announce_channel, self, log=log, label=keys.game)
        self._forget: asyncio.Task[None] | None = None

    @property
    def failed_attempts(self) -> int:
        """Attempts to reconnect that failed in the outage under way."""
        return self.subscriber.failed_attempts

    @property
    def live(self) -> int:
        """Boards answered from pub/sub now."""
        return sum(b.live for b in self._boards.values())

    def start(self) -> None:
        if self._forget is None:
            self.subscriber.start()
            self._forget = asyncio.create_task(self._forget_idle(), name="api-watch-idle")

    async def close(self) -> None:
        task, self._forget = self._forget, None
        await stop(task)
        await self.subscriber.close()

    async def get(self, window: str, scope: str) -> tuple[str | None, float]:
        """The board's latest snapshot (JSON text, None if none is stored) and its age in seconds."""
        channel = self._keys.snapshot_channel(window, scope)
        board = self._boards.get(channel)
        if board is None:
            latest = self._keys.latest(window, scope)
            found = await self._held.get(latest)
            # watched only once a snapshot is published: any well-formed board name may be asked
            # for, and a name nobody plays on must not hold a subscription for ``idle`` seconds
            if found[0] is not None and channel not in self._boards and len(self._boards) < self.size and self._forget:
                self._boards[channel] = _Board(latest)
                await self._subscribe(channel)
            return found
        board.used = time.monotonic()
        if board.live:
            self.live_hits += 1
            return board.value, 0.0
        return await self._held.get(board.latest_key)

    # ------------------------------------------------------------ subscriptions

    async def _subscribe(self, channel: str) -> None:
        async with self.subscriber.lock:
            await self.subscriber.ssubscribe(channel)

    async def _forget_idle(self) -> None:
        while True:
            await asyncio.sleep(self.idle / 4)
            cutoff = time.monotonic() - self.idle
            for channel in [c for c, b in self._boards.items() if b.used < cutoff]:
                del self._boards[channel]
                async with self.subscriber.lock:
                    await self.subscriber.sunsubscribe(channel)

    # ------------------------------------------------------------ the subscriber's listener

    def wanted(self) -> list[str]:
        return list(self._boards)

    def on_up(self, outage: float | None) -> None:
        pass  # each board goes live at its own confirmation

    def on_lost(self, failed: bool) -> None:
        # what pub/sub held goes to the hold: served while fresh, then stale-if-error
        for board in self._boards.values():
            if board.live:
                self._held.put(board.latest_key, board.value)
            board.live = False

    async def on_confirmed(self, channel: str) -> None:
        """Subscribed: what is stored now is at least as old as anything published from here on.
        Read by the reader itself, before the messages that follow the confirmation: a snapshot
        published meanwhile waits in the socket and replaces what was read, and once a published
        snapshot has been answered, no read of this confirmation is still to come."""
        board = self._boards.get(_text(channel))
        if board is None or board.live:
            return
        try:
            value = await self._redis.get(board.latest_key)
        except (RedisError, OSError):
            return  # Held answers meanwhile; the next published snapshot makes it live
        if self._boards.get(_text(channel)) is board:
            board.value, board.live = (None if value is None else str(value)), True

    def on_message(self, channel: str, data: str) -> None:
        board = self._boards.get(_text(channel))
        if board is not None:
            board.value, board.live = _text(data), True


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value
