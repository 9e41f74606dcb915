"""Own-rank pushes: every ``rank_interval``, each authenticated player's rank and score on each
board it subscribes to, pushed only when they changed.

Players are read in chunks of ``rank_chunk`` (one read-only ``lb_ranks`` call per board per chunk,
the boards of a chunk in flight together), and the chunks are spread evenly across the interval,
so Redis sees a steady trickle instead of a burst every five seconds. A player's pushes of one
round go out in one write, held up to ``push_hold`` to share the next snapshot tick's write
(outbound.py).

Players beyond ``deep_rank_from`` get an approximate rank from the board's histogram, rounded to
three significant digits (``approx``): the read costs O(1) per player instead of O(log N), and the
push goes out only when the shown number changes, not each time anyone far above moves.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Collection, Mapping

from redis.exceptions import RedisError

from leaderboard import Leaderboard, Standing, wire
from leaderboard.boards import LiveBoard

from .client import Client
from .frames import text_frame
from .metrics import Metrics
from .outbound import Outbound
from .overtaken import Overtaken
from .settings import GatewaySettings

log = logging.getLogger("gateway.ranks")


class RankPusher:
    def __init__(
        self,
        clients: Callable[[], Collection[Client]],
        out: Outbound,
        lb: Leaderboard,
        settings: GatewaySettings,
        metrics: Metrics,
        overtaken: Overtaken,
    ) -> None:
        self._clients = clients
        self._out = out
        self._lb = lb
        self._interval = settings.rank_interval
        self._chunk = settings.rank_chunk
        self._hold = settings.push_hold
        self._deep_from = settings.deep_rank_from
        self._metrics = metrics
        self._overtaken = overtaken

    async def run_forever(self) -> None:
        while True:
            await self.round(spread=True)

    async def round(self, *, spread: bool = False) -> int:
        """One round: every player's chunk read and pushed, spread across the interval (or at
        once); returns how many messages were sent."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        players = [c for c in self._clients() if c.identity.player is not None and c.boards and not c.closed]
        chunks = [players[i : i + self._chunk] for i in range(0, len(players), self._chunk)] or [[]]
        extras = self._overtaken.extras(chunks)
        step = self._interval / len(chunks)
        sent = 0
        for i, chunk in enumerate(chunks):
            if chunk:
                sent += await self.push(chunk, due=started + i * step, extra=extras[i])
            if spread:  # chunk i+1 starts at started + (i+1)·step, whatever this one cost
                await asyncio.sleep(max(0.0, started + (i + 1) * step - loop.time()))
        return sent

    async def push(
        self, clients: list[Client], due: float | None = None, extra: Mapping[LiveBoard, list[str]] | None = None
    ) -> int:
        """Read and push one chunk; returns how many messages were sent (ranks and overtaken
        events). ``due``: the loop time its round slot began (the lag metric counts from there;
        default now). ``extra``: per board, players read with the chunk's for overtaken events
        (overtaken.py), in the same call."""
        t0 = time.perf_counter()
        if due is None:
            due = asyncio.get_running_loop().time()
        by_board: dict[LiveBoard, list[Client]] = {}
        for client in clients:
            for key in client.boards:
                by_board.setdefault(key, []).append(client)
        keys = list(by_board)
        try:
            more = extra or {}
            results = await asyncio.gather(*(self._read(key, by_board[key], more.get(key, ())) for key in keys))
        except (RedisError, OSError) as exc:
            # the round is skipped and the next one retries (a lost connection, a failover)
            self._metrics.redis_errors.inc()
            log.debug("rank read failed: %s", exc)
            return 0
        now = time.monotonic()
        # a player's boards in one write: (board, what it saw, frame) per socket
        pushes: dict[Client, list[tuple[LiveBoard, tuple[int | None, int | None] | None, bytes]]] = {}
        for key, (period, size, mode, standings) in zip(keys, results, strict=True):
            self._overtaken.observe(key, period, standings.values())
            for client in by_board[key]:
                standing = standings.get(client.identity.player or "")
                if standing is None or client.closed:
                    continue
                if client.watch is not None:  # its events go out with this read's rank, in one write
                    for event in self._overtaken.take(client, key, standing, period):
                        pushes.setdefault(client, []).append((key, None, event))
                # an approximate rank is remembered negated: the same number read exactly later is
                # still a change to push (the marker goes away), at no extra memory per connection
                rank = standing.rank
                # a defined board's later keys move too: their hash stands for them, as an int
                moved = standing.score if standing.keys is None or len(standing.keys) < 2 else hash(standing.keys)
                seen = (-rank if standing.approx and rank is not None else rank, moved)
                if client.ranks.get(key) == seen:
                    continue
                msg = wire.rank(
                    board=key[1],
                    window=key[0],
                    period=period,
                    player=standing.player,
                    rank=standing.rank,
                    score=standing.score,
                    size=size,
                    top_percent=standing.top_percent,
                    approx=standing.approx,
                    mode=mode,
                    keys=standing.keys,
                )
                pushes.setdefault(client, []).append((key, seen, text_frame(msg)))
        sent = ranks = 0
        for client, mine in pushes.items():
            if self._out.push_held(client, [frame for _, _, frame in mine], now, self._hold, due):
                for key, shown, _ in mine:
                    if shown is not None:
                        client.ranks[key] = shown  # only what was really sent counts as seen
                        ranks += 1
                sent += len(mine)
        self._metrics.rank_pushes.inc(ranks)
        self._metrics.rank_push_seconds.observe(time.perf_counter() - t0)
        return sent

    async def _read(
        self, key: LiveBoard, clients: list[Client], extra: Collection[str]
    ) -> tuple[str, int, str, dict[str, Standing]]:
        players = list({c.identity.player for c in clients if c.identity.player is not None}.union(extra))
        ranks = await self._lb.ranks(players, key[0], key[1], deep_from=self._deep_from)
        return ranks.period.label, ranks.size, ranks.mode, {s.player: s for s in ranks.standings}
