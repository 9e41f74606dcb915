"""One reconnecting sharded pub/sub connection: what the gateway's hub (gateway/hub.py) and the HTTP
API's watch (api/watch.py) each keep per game, to hear the snapshots and announcements that the
function library SPUBLISHes.

The connection is opened where the game's channels live (``shard_pubsub``: on a cluster, the
master owning the game's slot; on a single server, the server, which delivers SPUBLISH to
SSUBSCRIBE too, so there is one code path). On connecting, the anchor channel (always wanted:
SSUBSCRIBE needs a channel, and its slot is the game's) and every channel the owner wants are
SSUBSCRIBEd at once. When the connection drops, or a subscribed channel is ended by an unasked
``sunsubscribe`` (its slot moved: a resharding; on a failover the connection drops), the
subscriber reconnects with backoff, to whichever node owns the slot by then, and subscribes
again. An outage is logged when it starts and when it ends, not at each attempt (several a second
with the backoff: hundreds of lines per outage).

The owner (a ``Listener``) names the channels it wants and is told what happens; the subscriber
does no reads of its own::

    sub = Subscriber(redis, keys.announce_channel, listener, log=log, label=keys.game)
    sub.start()
    async with sub.lock:                 # SSUBSCRIBE/SUNSUBSCRIBE reach Redis in the order decided
        await sub.ssubscribe(channel)    # on a failure, the reconnect subscribes every wanted one
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable
from typing import Any, Generic, Protocol, TypeVar

from redis.asyncio.client import PubSub
from redis.exceptions import RedisError

from .backoff import redis_backoff
from .lifecycle import stop
from .transport import RedisClient, shard_pubsub

Ch = TypeVar("Ch", str, bytes)  # channel names as the client replies them (decoded or raw)


class Listener(Protocol[Ch]):
    """What a subscriber tells its owner. Called from the subscriber's reader task, in the order
    of the connection's messages: nothing published after a confirmation is handed over before
    ``on_confirmed`` returns."""

    def wanted(self) -> Iterable[Ch]:
        """The channels to subscribe besides the anchor, on each (re)connect."""
        ...

    def on_message(self, channel: Ch, data: Ch) -> None:
        """A message published on a subscribed channel."""
        ...

    async def on_confirmed(self, channel: Ch) -> None:
        """Redis confirmed ``channel``'s subscription: what is stored now is at least as old as
        anything published on it from here on."""
        ...

    def on_up(self, outage: float | None) -> None:
        """The first confirmation on a new connection (every channel subscribed at connect is
        live); ``outage``: how long the connection was down before it, None if it was not."""
        ...

    def on_lost(self, failed: bool) -> None:
        """The connection ended: ``failed`` (Redis unavailable, the slot moved), or closed."""
        ...


class Subscriber(Generic[Ch]):
    def __init__(
        self, redis: RedisClient, anchor: Ch, listener: Listener[Ch], *, log: logging.Logger, label: str
    ) -> None:
        """``label`` starts each log line (the game, and whatever else tells the connection)."""
        self._redis = redis
        self.anchor: Ch = anchor
        self._listener: Listener[Ch] = listener
        self._log, self._label = log, label
        # Serialises SSUBSCRIBE/SUNSUBSCRIBE (the owner's, and the reader's on connecting) so they
        # reach Redis in the order they were decided.
        self.lock = asyncio.Lock()
        self.live: set[Ch] = set()  # channels Redis confirmed on the current connection
        self.connected = asyncio.Event()  # set once subscribed, cleared when the connection fails
        self.failed_attempts = 0  # of the outage under way
        self._down_since: float | None = None
        self._pubsub: PubSub | None = None
        self._reader: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._reader is None:
            self._reader = asyncio.create_task(self._read_forever(), name=f"pubsub-{self._label}")

    async def close(self) -> None:
        task, self._reader = self._reader, None
        await stop(task)
        await self._close_pubsub()

    async def ssubscribe(self, *channels: Ch) -> None:
        """Subscribe ``channels`` on the current connection, if there is one (with ``lock``
        held). On a failure, the reader reconnects and subscribes every wanted channel."""
        if self._pubsub is not None:
            with contextlib.suppress(RedisError, OSError):
                await self._pubsub.ssubscribe(*channels)

    async def sunsubscribe(self, channel: Ch) -> None:
        """Unsubscribe ``channel`` (with ``lock`` held; the owner no longer wants it): its
        ``sunsubscribe`` reply is then asked for, not a slot that moved."""
        self.live.discard(channel)
        if self._pubsub is not None:
            with contextlib.suppress(RedisError, OSError):
                await self._pubsub.sunsubscribe(channel)

    async def _read_forever(self) -> None:
        backoff = redis_backoff()
        while True:
            failed = False
            try:
                pubsub = self._pubsub = await shard_pubsub(self._redis, _text(self.anchor))
                async with self.lock:
                    await pubsub.ssubscribe(self.anchor, *self._listener.wanted())
                first = True
                while True:
                    msg = await pubsub.get_message(timeout=None)
                    if msg is None:
                        continue
                    kind, channel = msg["type"], msg["channel"]
                    if kind == "smessage":
                        self._listener.on_message(channel, msg["data"])
                    elif kind == "sunsubscribe" and channel in self.live:
                        # Not asked for: the slot moved to another node (resharding, failover).
                        raise ConnectionError("slot moved; subscribing on its new owner")
                    elif kind == "ssubscribe":
                        self.live.add(channel)
                        if first:
                            # SSUBSCRIBE of many channels is applied at once: the first confirmation
                            # means all of them are live.
                            first = False
                            backoff.reset()
                            self.connected.set()
                            self._listener.on_up(self._back())
                        await self._listener.on_confirmed(channel)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # RedisError, OSError, and whatever a dying socket raises
                failed = True
                self.connected.clear()  # (left set by close: how far the connection got)
                self._failed(exc)
            finally:
                self.live.clear()
                self._listener.on_lost(failed)
                await self._close_pubsub()
            await asyncio.sleep(backoff.next_delay())

    def _failed(self, exc: BaseException) -> None:
        self.failed_attempts += 1
        if self._down_since is None:
            self._down_since = time.monotonic()
            self._log.warning(
                "%s: pub/sub unavailable (%s); reconnecting with backoff", self._label, exc or type(exc).__name__
            )

    def _back(self) -> float | None:
        """Subscribed again: the outage under way, if any, ends (logged once, with its length)."""
        if self._down_since is None:
            return None
        outage = time.monotonic() - self._down_since
        self._log.info(
            "%s: pub/sub back after %.1f s (%d failed attempts to reconnect)", self._label, outage, self.failed_attempts
        )
        self._down_since, self.failed_attempts = None, 0
        return outage

    async def _close_pubsub(self) -> None:
        pubsub, self._pubsub = self._pubsub, None
        if pubsub is not None:
            with contextlib.suppress(Exception):
                await pubsub.aclose()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
