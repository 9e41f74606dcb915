"""Boards the HTTP API is asked about, kept current by sharded pub/sub as the gateway's hub keeps
its boards: a board's snapshot channel is SSUBSCRIBEd at its first ``GET top`` that finds a
published snapshot (a board nothing was published for is not watched), its stored latest read
again once the subscription is confirmed, then every snapshot the scorer publishes replaces it — a
request for a watched board reads nothing from Redis.

Until a board is live (subscribing, or the pub/sub connection down), requests are answered by
``Held`` (held.py: one read per key at a time, held for a TTL, stale-if-error). A board nobody
asked about for ``idle`` seconds is unsubscribed and forgotten, and at most ``size`` boards are
watched (the others are answered by ``Held``), so requests for ever new boards cannot grow the
process or its subscriptions::

    watch = Watch(redis, lb.keys, held, idle=60.0, size=1000)
    watch.start()
    snapshot, age = await watch.get("weekly", "global")
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field

from redis.asyncio.client import PubSub
from redis.exceptions import RedisError

from leaderboard import RedisClient
from leaderboard.backoff import redis_backoff
from leaderboard.keys import Keys
from leaderboard.transport import shard_pubsub

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
        self._anchor = keys.announce_channel  # always subscribed: SSUBSCRIBE needs a channel
        self._pubsub: PubSub | None = None
        self._lock = asyncio.Lock()  # SSUBSCRIBE/SUNSUBSCRIBE reach Redis in the order decided
        self._tasks: list[asyncio.Task[None]] = []
        # An outage is logged when it starts and when it ends, not at each attempt of the
        # reconnect loop (several a second with its backoff: hundreds of lines per outage).
        self._down_since: float | None = None
        self.failed_attempts = 0  # of the outage under way

    @property
    def live(self) -> int:
        """Boards answered from pub/sub now."""
        return sum(b.live for b in self._boards.values())

    def start(self) -> None:
        if not self._tasks:
            self._tasks = [
                asyncio.create_task(self._read_forever(), name="api-watch"),
                asyncio.create_task(self._forget_idle(), name="api-watch-idle"),
            ]

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        await self._close_pubsub()

    async def get(self, window: str, scope: str) -> tuple[str | None, float]:
        """The board's latest snapshot (JSON text, None if none is stored) and its age in seconds."""
        channel = self._keys.snapshot_channel(window, scope)
        board = self._boards.get(channel)
        if board is None:
            latest = self._keys.latest(window, scope)
            found = await self._held.get(latest)
            # watched only once a snapshot is published: any well-formed board name may be asked
            # for, and a name nobody plays on must not hold a subscription for ``idle`` seconds
            if found[0] is not None and channel not in self._boards and len(self._boards) < self.size and self._tasks:
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
        async with self._lock:
            if self._pubsub is not None:
                # on failure the reader reconnects and subscribes every board again
                with contextlib.suppress(RedisError, OSError):
                    await self._pubsub.ssubscribe(channel)

    async def _forget_idle(self) -> None:
        while True:
            await asyncio.sleep(self.idle / 4)
            cutoff = time.monotonic() - self.idle
            for channel in [c for c, b in self._boards.items() if b.used < cutoff]:
                del self._boards[channel]
                async with self._lock:
                    if self._pubsub is not None:
                        with contextlib.suppress(RedisError, OSError):
                            await self._pubsub.sunsubscribe(channel)

    async def _confirmed(self, channel: str) -> None:
        """Subscribed: what is stored now is at least as old as anything published from here on.
        Read by the reader itself, before the messages that follow the confirmation: a snapshot
        published meanwhile waits in the socket and replaces what was read, and once a published
        snapshot has been answered, no read of this confirmation is still to come."""
        board = self._boards.get(channel)
        if board is None or board.live:
            return
        try:
            value = await self._redis.get(board.latest_key)
        except (RedisError, OSError):
            return  # Held answers meanwhile; the next published snapshot makes it live
        if self._boards.get(channel) is board:
            board.value, board.live = (None if value is None else str(value)), True

    def _on_message(self, channel: str, data: str) -> None:
        board = self._boards.get(channel)
        if board is not None:
            board.value, board.live = data, True

    # ------------------------------------------------------------ the reader

    async def _read_forever(self) -> None:
        backoff = redis_backoff()
        while True:
            try:
                pubsub = self._pubsub = await shard_pubsub(self._redis, self._anchor)
                async with self._lock:
                    await pubsub.ssubscribe(self._anchor, *self._boards)
                while True:
                    msg = await pubsub.get_message(timeout=None)
                    if msg is None:
                        continue
                    kind, channel = msg["type"], _text(msg["channel"])
                    if kind == "smessage":
                        self._on_message(channel, _text(msg["data"]))
                    elif kind == "ssubscribe":
                        backoff.reset()
                        self._back()
                        await self._confirmed(channel)
                    elif kind == "sunsubscribe" and channel in self._boards:
                        raise ConnectionError("slot moved; subscribing on its new owner")
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # RedisError, OSError, and whatever a dying socket raises
                self.failed_attempts += 1
                if self._down_since is None:
                    self._down_since = time.monotonic()
                    log.warning(
                        "%s: pub/sub unavailable (%s): top N read through the hold until it is back",
                        self._keys.game,
                        exc or type(exc).__name__,
                    )
            finally:
                # what pub/sub held goes to the hold: served while fresh, then stale-if-error
                for board in self._boards.values():
                    if board.live:
                        self._held.put(board.latest_key, board.value)
                    board.live = False
                await self._close_pubsub()
            await asyncio.sleep(backoff.next_delay())

    def _back(self) -> None:
        """Subscribed again: the outage under way, if any, ends (logged once, with its length)."""
        if self._down_since is None:
            return
        log.info(
            "%s: pub/sub back after %.1f s (%d failed attempts to reconnect)",
            self._keys.game,
            time.monotonic() - self._down_since,
            self.failed_attempts,
        )
        self._down_since, self.failed_attempts = None, 0

    async def _close_pubsub(self) -> None:
        pubsub, self._pubsub = self._pubsub, None
        if pubsub is not None:
            with contextlib.suppress(Exception):
                await pubsub.aclose()


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value
