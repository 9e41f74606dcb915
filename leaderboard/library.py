"""Typed Python wrappers of the function library (leaderboard/lua/leaderboard.lua): one method per
registered function, replies as the dataclasses of results.py, ``ERR <code>`` replies as the
exception tree of errors.py (``errors.from_reply``). They take a ``redis.asyncio.Redis`` made
by ``connect()`` (str replies; undecodable bytes kept so one never poisons a whole batch)::

    lb = Leaderboard(await connect(url), GameConfig(game="arena"))
    await lb.load()
    [result] = await lb.submit_batch([Submission("m-1", "mia", 120, now_ms).fields()])
    top = await lb.top("weekly")          # top.period, top.entries

=============  ==================================  ==============================
function       wrapper                             used by
=============  ==================================  ==============================
lb_submit      ``submit_batch``                    scorer consumer
lb_enqueue     ``enqueue``                         queue.Queue (submit API)
lb_lease       ``lease``                           scorer publisher
lb_publish     ``publish``                         scorer publisher
lb_forget      ``forget``                          scorer stream workers
lb_top         ``top``                             publisher, gateways
lb_around      ``around``                          gateways
lb_ranks       ``ranks``, ``rank``                 gateways (requests, own rank)
=============  ==================================  ==============================

The transport (``connect``, ``execute_packed``) is in transport.py and the batch layout of
``lb_submit`` in batch.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from importlib.resources import files
from typing import Any, cast

import orjson
import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from .batch import decode_batch, encode_batch
from .config import GameConfig
from .errors import BadRequest, from_reply
from .keys import parse_scope
from .results import BoardEntries, BoardStats, Entry, Publication, Ranks, Standing, SubmitResult
from .transport import Command, execute_packed, now_ms
from .windows import Period, window


def library_code() -> str:
    """The function library's source: package data, so an installed wheel has it too."""
    return files("leaderboard").joinpath("lua", "leaderboard.lua").read_text(encoding="utf-8")


async def _execute(redis: aioredis.Redis, command: Command) -> Any:
    """One packed call, its library error reply raised as the exception tree's."""
    try:
        [reply] = await execute_packed(redis, command)
    except ResponseError as exc:
        mapped = from_reply(str(exc))
        if mapped is None:
            raise
        raise mapped from None
    return reply


class Leaderboard:
    """One game's boards, reached through the function library."""

    def __init__(self, redis: aioredis.Redis, config: GameConfig) -> None:
        self.redis = redis
        self.config = config
        self.keys = config.keys

    async def load(self) -> None:
        """Load (or replace) the function library; idempotent."""
        await self.redis.function_load(library_code(), replace=True)

    # --- writes

    async def submit_batch(
        self, entries: Sequence[Mapping[str, str]], *, now: int | None = None, rows: bool = True
    ) -> list[SubmitResult]:
        """lb_submit: apply submissions (stream-entry fields) in one atomic call; one result per
        entry (with per-board results unless ``rows=False``)."""
        if not entries:
            return []
        plan = encode_batch(self.config, entries, now_ms() if now is None else now, rows=rows)
        if plan.count == 0:  # every entry was refused before the call
            return decode_batch(plan, [])
        command = ("FCALL", "lb_submit", len(plan.keys), *plan.keys, *plan.args)
        try:
            replies = await _execute(self.redis, command)
        except ResponseError as exc:
            if "function not found" not in str(exc).lower():
                raise
            # Redis restarted without the library (no persistence): load it and go on.
            await self.load()
            replies = await _execute(self.redis, command)
        return decode_batch(plan, replies, rows=rows)

    async def enqueue(self, entries: Sequence[Mapping[str, str]], *, backlog_max: int) -> list[str]:
        """lb_enqueue: append stream entries to the submissions queue, all or none; their ids.
        Raises BacklogFull when that would take the queue past ``backlog_max``."""
        args: list[str | int] = [backlog_max, len(entries)]
        for fields in entries:
            args.append(len(fields))
            for item in fields.items():
                args += item
        ids = await _execute(self.redis, ("FCALL", "lb_enqueue", 1, self.keys.submissions, *args))
        return [str(i) for i in ids]

    async def lease(self, owner: str, ttl_ms: int, *, release: bool = False) -> bool:
        """lb_lease on the publish lease: take or renew it for ``ttl_ms`` (or give it up);
        whether ``owner`` holds it afterwards."""
        action = "release" if release else "hold"
        reply = await _execute(self.redis, ("FCALL", "lb_lease", 1, self.keys.publish_lease, owner, ttl_ms, action))
        return bool(reply)

    async def publish(self, owner: str, ttl_s: int, publications: Sequence[Publication]) -> bool:
        """lb_publish: publish each snapshot, store it as its board's latest (for ``ttl_s``) and
        record it as published, only if ``owner`` holds the publish lease; whether it did."""
        keys = [self.keys.publish_lease, self.keys.published]
        args: list[str | int | bytes] = [owner, ttl_s]
        for pub in publications:
            keys.append(self.keys.latest(pub.window, pub.scope))
            args += [self.keys.snapshot_channel(pub.window, pub.scope), f"{pub.window}:{pub.scope}",
                     f"{pub.period}:{pub.version}", pub.payload]  # fmt: skip
        command: Any = ("FCALL", "lb_publish", len(keys), *keys, *args)
        return bool(await _execute(self.redis, command))

    async def forget(self, stream: str, group: str, *, idle_ms: int, keep: str) -> list[str]:
        """lb_forget: remove the consumer names of ``group`` idle ``idle_ms`` with nothing
        pending, except ``keep`` (the caller); the names removed."""
        removed = await _execute(self.redis, ("FCALL", "lb_forget", 1, stream, group, idle_ms, keep))
        return [str(name) for name in removed]

    # --- reads (read-only: safe on replicas through FCALL_RO)

    def _board(self, window_name: str, scope: str, at: int | None) -> tuple[str, Period]:
        try:
            spec = window(window_name)
            parse_scope(scope)
        except ValueError as exc:
            raise BadRequest(str(exc)) from None
        if window_name not in self.config.windows:
            raise BadRequest(f"window {window_name!r} is not kept for game {self.config.game!r}")
        period = spec.period(now_ms() if at is None else at)
        return self.keys.board(spec.name, period.label, scope), period

    async def _fcall_ro(self, name: str, keys: list[str], *args: str | int) -> Any:
        try:
            return await self.redis.fcall_ro(name, len(keys), *keys, *args)
        except ResponseError as exc:
            mapped = from_reply(str(exc))
            if mapped is None:
                raise
            raise mapped from None

    async def top(self, window_name: str, scope: str = "global", n: int = 10, *, at: int | None = None) -> BoardEntries:
        """lb_top: the first ``n`` entries of the board's current period (or the one at ``at``)."""
        key, period = self._board(window_name, scope, at)
        flat = await self._fcall_ro("lb_top", [key, self.keys.profiles], n)
        return BoardEntries(period, _entries(period, 1, flat))

    async def around(
        self, player: str, window_name: str, scope: str = "global", k: int = 5, *, at: int | None = None
    ) -> BoardEntries:
        """lb_around: the entries ``k`` above and below ``player`` (none when unranked)."""
        key, period = self._board(window_name, scope, at)
        flat = await self._fcall_ro("lb_around", [key, self.keys.profiles], player, k)
        return BoardEntries(period, _entries(period, int(flat[0]), flat[1:]) if flat else [])

    async def ranks(
        self, players: Sequence[str], window_name: str, scope: str = "global", *, at: int | None = None
    ) -> Ranks:
        """lb_ranks: board size and each player's standing, in the order given."""
        key, period = self._board(window_name, scope, at)
        flat = await self._fcall_ro("lb_ranks", [key], *players)
        unpack = period.window.unpack
        standings = [
            Standing(p, None if r is None else int(r), None if s is None else unpack(s))
            for p, r, s in zip(players, flat[1::2], flat[2::2], strict=True)
        ]
        return Ranks(period, int(flat[0]), standings)

    async def rank(self, player: str, window_name: str, scope: str = "global", *, at: int | None = None) -> Standing:
        [standing] = (await self.ranks([player], window_name, scope, at=at)).standings
        return standing

    async def size(self, window_name: str, scope: str = "global", *, at: int | None = None) -> int:
        key, _ = self._board(window_name, scope, at)
        return int(await self.redis.zcard(key))

    async def distinct_players(self, window_name: str, *, at: int | None = None) -> int:
        """Approximate distinct players of a window period (HyperLogLog, ~0.8% error)."""
        return (await self.stats(window_name, at=at)).players

    async def stats(self, window_name: str, scope: str = "global", *, at: int | None = None) -> BoardStats:
        """Board size and distinct players of the window period, both of one period.

        The count is a plain PFCOUNT: Redis refuses it inside no-writes functions because it may
        cache the count, but it is allowed on replicas."""
        key, period = self._board(window_name, scope, at)
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.zcard(key)
            pipe.pfcount(self.keys.players(window_name, period.label))
            size, players = await pipe.execute()
        return BoardStats(period, int(size), int(players))

    async def feed(self, n: int = 20) -> list[dict[str, str]]:
        """The newest applied submissions, newest first."""
        rows = await self.redis.xrevrange(self.keys.activity, count=n)
        return [cast(dict[str, str], fields) for _, fields in rows or ()]

    async def set_profile(self, player: str, profile: Mapping[str, Any]) -> None:
        await self.redis.hset(self.keys.profiles, player, orjson.dumps(dict(profile)).decode())


def _entries(period: Period, first_rank: int, flat: Sequence[Any]) -> list[Entry]:
    unpack = period.window.unpack
    return [
        Entry(first_rank + i, flat[j], unpack(flat[j + 1]), _profile(flat[j + 2]))
        for i, j in enumerate(range(0, len(flat), 3))
    ]


def _profile(raw: str | None) -> Mapping[str, Any] | None:
    if raw is None:
        return None
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None
