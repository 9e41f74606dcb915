"""Subscriptions and fan-out: board -> local sockets, one pub/sub connection per game served.

Snapshots and announcements travel over sharded pub/sub (SPUBLISH in the function library): the
hub's subscriber (leaderboard/subscriber.py) opens its connection to the node that owns the game's
slot (on a single server, the server itself) and SSUBSCRIBEs there to the channels of boards that
have at least one local subscriber (plus the game's announce channel); the hub hands each message
to outbound.py, framed once (a WebSocket text frame is the same bytes for every server-side socket
when compression is off), to be written to every subscriber under its flow-control rules (skip,
stall, drop).

When Redis drops, the subscriber reconnects with backoff (on a cluster, to whichever node owns the
slot by then: a promoted replica after a failover, the new owner after a resharding, which also
ends the old node's subscriptions with an unasked ``sunsubscribe``), subscribes again, and the hub
re-sends each board's latest snapshot to its subscribers when it differs from the last one they
got.

Announcements are only published, never stored in Redis; the hub keeps the last few it heard
per board (``recent``), so a page that just opened can show who entered the top N lately.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Collection
from functools import partial

import orjson
from redis.exceptions import RedisError

from leaderboard import BadRequest, Leaderboard, RedisClient, boards, now_ms, snapshot
from leaderboard import messages as m
from leaderboard.boards import LiveBoard
from leaderboard.lifecycle import stop
from leaderboard.settings import redacted
from leaderboard.subscriber import Subscriber

from .client import Client
from .frames import DELTAS, RESYNC, build, group, text_frame
from .metrics import Metrics
from .outbound import Outbound
from .overtaken import Overtaken
from .settings import GatewaySettings

log = logging.getLogger("gateway.hub")

_CONFIRM_TIMEOUT = 2.0  # how long a subscribe waits for Redis to confirm the channel
_RESEND_TRIES = 4  # reads of a stored latest after a reconnect, before waiting for the next publish
_BUILT_TTL = 1.0  # a snapshot built from the board (no latest stored yet) is reused this long
RECENT = 8  # announcements kept per board for the ``recent`` request (a page's feed on load)


class Hub:
    def __init__(
        self, settings: GatewaySettings, raw: RedisClient, lb: Leaderboard, metrics: Metrics, out: Outbound
    ) -> None:
        """One game's hub: ``lb``'s game (``lb.config``)."""
        self.settings = settings
        self.metrics = metrics
        self._out = out
        self._raw = raw  # bytes replies: snapshots are forwarded unchanged
        self._lb = lb
        self._keys = lb.keys
        self._subs: dict[LiveBoard, set[Client]] = {}
        # board -> its subscribers by the frame they take next (frames.py): each set is one
        # audience of the fan-out, as a board's one set was before deltas
        self._groups: dict[LiveBoard, dict[int, set[Client]]] = {}
        # board -> (payload, frame, built_at); built_at > 0 for snapshots built here (version 0)
        self._latest: dict[LiveBoard, tuple[bytes, bytes, float]] = {}
        self._channel_board: dict[bytes, LiveBoard] = {}
        self._pending: dict[bytes, asyncio.Future[None]] = {}
        self._announce = self._keys.announce_channel.encode()
        # board -> its last announcements heard (ms heard, message), oldest first
        self._recent: dict[LiveBoard, deque[tuple[int, m.Announce]]] = {}
        self._resync: asyncio.Task[None] | None = None
        self.overtaken = Overtaken(lb, settings.overtaken_per_minute, settings.friends_per_read, metrics)
        label = f"{self._keys.game} (redis at {redacted(settings.redis_url)})"
        self.subscriber = Subscriber(raw, self._announce, self, log=log, label=label)
        self.connected = self.subscriber.connected  # set while the pub/sub connection is subscribed

    # ------------------------------------------------------------ lifecycle

    def start(self) -> None:
        self.subscriber.start()

    async def close(self) -> None:
        await self.subscriber.close()
        task, self._resync = self._resync, None
        await stop(task)

    # ------------------------------------------------------------ subscriptions

    def channel(self, key: LiveBoard) -> bytes:
        return self._keys.snapshot_channel(*key).encode()

    async def subscribe(self, client: Client, key: LiveBoard) -> None:
        """Add a subscriber and send it the board's latest snapshot at once."""
        if key not in client.boards:
            client.add_board(key)
            self.overtaken.joined(client, key)
        self._subs.setdefault(key, set()).add(client)
        # out of any group it is in already (a subscribe of a board it watches): in two, it
        # would get each version twice
        self._move(client, key, group(client.wire, fresh=False))
        channel = self.channel(key)
        self._channel_board[channel] = key
        await self._ensure_channel(channel)
        # Only now read the latest: the channel is live, so nothing published after this read
        # can be missed (at worst the client sees one snapshot twice; versions tell).
        await self.resend(client, key)

    async def resend(self, client: Client, key: LiveBoard) -> None:
        """Send a subscriber the board's latest snapshot whole (on subscribe, and when a delta
        client asks: ``resync``); from then on it takes deltas, if it asked for them."""
        latest = await self._load_latest(key)
        if latest is None or key not in client.boards or not self._out.push(client, latest, time.monotonic()):
            return
        held = self._latest.get(key)
        # Only a published snapshot is a delta's base: one built here (version 0) is not the
        # one the next delta starts from.
        if client.wire & DELTAS and held is not None and held[1] is latest and not held[2]:
            self._move(client, key, group(client.wire, fresh=True))

    def _join(self, client: Client, key: LiveBoard, to: int) -> None:
        self._groups.setdefault(key, {}).setdefault(to, set()).add(client)
        Client.changed()

    def _leave(self, client: Client, key: LiveBoard) -> None:
        groups = self._groups.get(key)
        if groups is not None:
            for g in [g for g, members in groups.items() if client in members]:
                groups[g].discard(client)
                if not groups[g]:
                    del groups[g]
            if not groups:
                del self._groups[key]
        Client.changed()

    def _move(self, client: Client, key: LiveBoard, to: int) -> None:
        self._leave(client, key)
        self._join(client, key, to)

    def stale(self, client: Client) -> None:
        """A delta client skipped a push: until it holds a board's last version again it gets
        that board's full snapshots."""
        for key in client.boards:
            if key in self._subs:
                self._move(client, key, group(client.wire, fresh=False))

    def rewire(self, client: Client, wire: int) -> None:
        """The client asked for deltas, or for full snapshots again (``hello``). It holds a
        board's last version unless it is skipping now: one that got full snapshots got every
        version it did not skip, and one that took deltas is in its RESYNC group otherwise."""
        if wire == client.wire:
            return
        old = client.wire
        for key in client.boards:
            if key in self._subs:
                fresh = not client.skips and client in self._groups.get(key, {}).get(old, ())
                self._move(client, key, group(wire, fresh=fresh))
        client.wire = wire

    async def exists(self, key: LiveBoard) -> bool:
        """Whether a client may subscribe to ``key``: a board exists once its definition does, in
        the windows it keeps (a tournament's must exist too: its name comes from the client), in
        its home scope (``global``, ``board:<id>``: boards.home_scope) and the scopes configured
        here (``LB_GW_BOARDS``; ``region:eu`` there offers ``board:<id>:region:eu`` of a board kept
        per region); any other scope (``region:<r>``, ``board:<id>:region:<r>``) once somebody here
        watches it, slips named it (the scopes set, which the page offers) or it has data in
        Redis. Anyone can send a subscribe; only boards that exist may make this process SUBSCRIBE
        to a channel and hold an entry in its maps, so those stay bounded by what trusted game
        servers wrote."""
        win, scope = key
        if key in self._subs:
            return True
        try:
            board = await self._lb.board_period(win, scope)
        except BadRequest:
            return False
        if scope == boards.home_scope(board.definition.id) or boards.listed(scope, self.settings.boards):
            return True
        if await self._raw.sismember(self._keys.scopes, scope):
            return True
        return bool(await self._raw.exists(self._keys.latest(win, scope), board.board))

    def unsubscribe(self, client: Client, key: LiveBoard) -> None:
        if key in client.boards:
            self.overtaken.left(client, key)
        client.discard_board(key)
        client.ranks.pop(key, None)
        subs = self._subs.get(key)
        if subs is None:
            return
        subs.discard(client)
        self._leave(client, key)
        if not subs:
            del self._subs[key]
            asyncio.get_running_loop().create_task(self._release(key))

    def remove(self, client: Client) -> None:
        self.overtaken.forget(client)
        for key in list(client.boards):
            self.unsubscribe(client, key)

    async def _ensure_channel(self, channel: bytes) -> None:
        async with self.subscriber.lock:
            if channel in self.subscriber.live:
                return
            waiter = self._pending.get(channel)
            if waiter is None:
                waiter = self._pending[channel] = asyncio.get_running_loop().create_future()
                await self.subscriber.ssubscribe(channel)
        # Without Redis the client still gets the cached snapshot; live ones follow the reconnect.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(_CONFIRM_TIMEOUT):  # not wait_for: on Python 3.11 it can lose a cancellation
                await asyncio.shield(waiter)

    async def _release(self, key: LiveBoard) -> None:
        channel = self.channel(key)
        async with self.subscriber.lock:
            if key in self._subs:  # someone subscribed again meanwhile
                return
            # Every per-board entry goes with the board's last subscriber: nothing here may grow
            # with the number of boards ever watched.
            self._latest.pop(key, None)
            self.overtaken.released(key)
            self._channel_board.pop(channel, None)
            waiter = self._pending.pop(channel, None)
            if waiter is not None and not waiter.done():
                waiter.set_result(None)
            await self.subscriber.sunsubscribe(channel)

    # ------------------------------------------------------------ latest snapshots

    async def _load_latest(self, key: LiveBoard) -> bytes | None:
        """The frame of the board's latest snapshot: cached, stored by the scorer, or built."""
        cached = self._latest.get(key)
        if cached is not None and (not cached[2] or time.monotonic() - cached[2] < _BUILT_TTL):
            return cached[1]
        try:
            stored = await self._bytes(self._keys.latest(*key))
            built = 0.0
            if stored is None:
                stored, built = await self._build(key), time.monotonic()
        except (RedisError, OSError):
            self.metrics.redis_errors.inc()
            return cached[1] if cached is not None else None
        except BadRequest:  # a window the game's stored default board stopped keeping a moment ago
            return None
        arrived = self._latest.get(key)
        if arrived is not None and arrived is not cached and not arrived[2]:
            # A snapshot was published while we read: it is at least as new as what we read (the
            # channel was live before the read), and a version 0 built from the board must not
            # replace it — new subscribers would get the older one for _BUILT_TTL.
            return arrived[1]
        frame = text_frame(stored)
        if key in self._subs:  # its last subscriber may have left while Redis answered
            self._latest[key] = (stored, frame, built)
        return frame

    async def _bytes(self, key: str) -> bytes | None:
        value = await self._raw.get(key)
        return value.encode() if isinstance(value, str) else value

    async def _build(self, key: LiveBoard) -> bytes:
        """No snapshot stored yet (new period, scorer not running yet): the top N the publisher
        would publish (a board's own top N: its definition's), version 0."""
        now = int(time.time() * 1000)
        [top] = await self._lb.tops([key], at=now)
        return snapshot.build(key[1], top, version=0, ts_ms=now)

    async def _resend_latest(self) -> None:
        """After a reconnect: boards whose stored latest differs from what we last sent get it."""
        for key in list(self._subs):
            for attempt in range(_RESEND_TRIES):
                try:
                    payload = await self._bytes(self._keys.latest(*key))
                    break
                except (RedisError, OSError):
                    # The first read after a restart may take a pooled connection to the old
                    # server (or, on a cluster, to the failed master); it is dropped, so retry.
                    self.metrics.redis_errors.inc()
                    if attempt == _RESEND_TRIES - 1:
                        return
                    await asyncio.sleep(0.05 * (attempt + 1))
            cached = self._latest.get(key)
            if payload is not None and (cached is None or cached[0] != payload):
                self._deliver(key, payload, snapshot=True)

    # ------------------------------------------------------------ the subscriber's listener

    def wanted(self) -> list[bytes]:
        return [self.channel(key) for key in self._subs]

    def on_up(self, outage: float | None) -> None:
        self.metrics.redis_up.set(1)
        if outage is not None:
            # every channel is live again: stored latests can be compared with what was sent
            self._resync = asyncio.create_task(self._resend_latest())

    def on_lost(self, failed: bool) -> None:
        if failed:
            self.metrics.redis_errors.inc()
            self.metrics.redis_up.set(0)

    async def on_confirmed(self, channel: bytes) -> None:
        waiter = self._pending.pop(channel, None)
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def on_message(self, channel: bytes, data: bytes) -> None:
        if channel == self._announce:
            try:
                msg = orjson.loads(data)
                key = (str(msg["window"]), str(msg["board"]))
            except (orjson.JSONDecodeError, KeyError, TypeError):
                return
            self._recent.setdefault(key, deque(maxlen=RECENT)).append((now_ms(), msg))
            self._deliver(key, data, snapshot=False)
            return
        board = self._channel_board.get(channel)
        if board is not None:
            self._deliver(board, data, snapshot=True)

    # ------------------------------------------------------------ fan-out

    def recent(self, key: LiveBoard) -> list[m.Heard]:
        """The board's last announcements this process heard, newest first, each with ``ts``:
        when it was heard (ms)."""
        return [{**msg, "ts": ts} for ts, msg in reversed(self._recent.get(key, ()))]  # the function library's shape

    def _deliver(self, key: LiveBoard, payload: bytes, *, snapshot: bool) -> None:
        frame = text_frame(payload)
        if not snapshot:
            subs = self._subs.get(key)
            if subs:
                self._out.publish(subs, payload, frame, held=True)  # announcements wait for the tick
            return
        before = self._latest.get(key)
        self._latest[key] = (payload, frame, 0.0)
        try:
            msg = orjson.loads(payload)
        except orjson.JSONDecodeError:
            msg = None
        if isinstance(msg, dict):
            self.overtaken.on_snapshot(key, msg)
        ts = self._observe_lag(msg)
        groups = self._groups.get(key)
        if not groups:
            return
        s = self.settings
        base = before[0] if before is not None and not before[2] else None  # a built one is no base
        frames = build(groups, base, payload, frame, s.delta_full_every, s.deflate_level)
        for g, members in list(groups.items()):
            body, shared = frames[g]
            if g & RESYNC:
                # They get this version whole, then deltas from the next one: moved once it is
                # written (a socket moved before would get this version's delta too, in the
                # same write), those that skipped it left where they are.
                audience = frozenset(members)
                self._out.publish(audience, body, shared, ts=ts, after=partial(self._caught_up, key, g, audience))
            else:
                self._out.publish(members, body, shared, ts=ts)
            ts = None  # the written lag is observed once per snapshot

    def _caught_up(self, key: LiveBoard, g: int, written: Collection[Client]) -> None:
        """``written`` were sent the board's full snapshot from group ``g``: those that took it
        (not skipped, still there and still in ``g``) get deltas from now on."""
        members = self._groups.get(key, {}).get(g)
        if members:
            for client in written:
                if client in members and not client.skips and not client.closed:
                    self._move(client, key, g & ~RESYNC)

    def _observe_lag(self, msg: object) -> float | None:
        """The snapshot's ts (wall clock, s), observed as its lag to the fan-out's start."""
        ts = msg.get("ts") if isinstance(msg, dict) else None
        if not isinstance(ts, int):
            return None
        self.metrics.pubsub_lag_seconds.observe(max(0.0, time.time() - ts / 1000))
        return ts / 1000
