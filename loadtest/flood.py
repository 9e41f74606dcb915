"""Submission floods: realistic, long-tailed score slips over a large player population, filed
into the scorer's stream at a target rate (or flat out) the way game servers do
(``Queue.submit_many``), and the rate at which the scorer applies them.

Who plays is skewed (a few players play a lot: index = N·u³, so low indices are the most
active); points are Pareto-distributed (most matches score little, a few score a lot). With the
``incr`` operator (season points added after each match) the leaders keep climbing, so the top
10 changes at every scorer tick under load; with ``best`` a long-tailed top 10 settles within a
minute and snapshots become rare — which is why ``incr`` is the load test's default.

Applied submissions are counted from the queue itself: the scorer deletes what it applied, so
``applied = accepted − growth of XLEN`` — true for any fleet, not only one this tool started.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from leaderboard import GameConfig, Leaderboard, RedisClient, Submission, now_ms
from leaderboard.errors import BacklogFull, BadRequest
from leaderboard.queue import Queue, backlog

REGIONS = ("eu", "na", "asia")
MODES = ("solo", "duo")
POINTS_CAP = 100_000


@dataclass(slots=True)
class Source:
    """An endless supply of plausible submissions (pure: a seeded generator, no I/O)."""

    players: int = 100_000
    op: str | None = "incr"
    prefix: str = "p"  # player ids: <prefix><index>; load-test sockets use the same ids
    name_share: float = 0.05  # slips that carry a display name (profiles change rarely)
    seed: int | None = None
    # points a player's first slip starts from (``--feed-into-top``: the watched board's 10th
    # place, so that on an established board each new player enters its top 10 and moves it)
    floor: int = 0
    rnd: random.Random = field(init=False)
    serial: int = 0
    run: str = field(init=False)
    _lifted: set[int] = field(init=False, default_factory=set)  # players whose first slip had the floor

    def __post_init__(self) -> None:
        self.rnd = random.Random(self.seed)
        self.run = f"{self.rnd.getrandbits(40):010x}"

    def player(self) -> int:
        return int(self.players * self.rnd.random() ** 3)

    def take(self, n: int) -> list[Submission]:
        ts, rnd, out = now_ms(), self.rnd, []
        for _ in range(n):
            self.serial += 1
            index = self.player()
            floor = 0
            if self.floor and index not in self._lifted:
                self._lifted.add(index)
                floor = self.floor
            out.append(
                Submission(
                    id=f"lt-{self.run}-{self.serial}",
                    player=f"{self.prefix}{index}",
                    points=floor + min(int(rnd.paretovariate(1.5) * 10), POINTS_CAP),
                    ts_ms=ts,
                    op=self.op,
                    name=f"Player {index}" if rnd.random() < self.name_share else None,
                    region=REGIONS[index % 3],
                    mode=MODES[index & 1],
                )
            )
        return out


async def tenth_place(redis: RedisClient, config: GameConfig, window: str) -> int | None:
    """The points of the global board's 10th place in ``window``, None while it holds fewer (or
    the game keeps no such window)."""
    try:
        entries = (await Leaderboard(redis, config).top(window, n=10)).entries
    except BadRequest:
        return None
    return int(entries[9].score) if len(entries) == 10 else None


class Flood:
    """File submissions at ``rate`` per second (0: as fast as the queue takes them) until
    stopped; ``sample()`` once a second records accepted and applied per second."""

    def __init__(
        self,
        redis: RedisClient,
        config: GameConfig,
        source: Source,
        *,
        rate: float,
        chunk: int = 0,
        producers: int = 2,
    ) -> None:
        self.redis = redis
        self.queue = Queue(redis, config)
        self.stream = config.keys.submissions
        self.source = source
        self.rate = rate
        # ten chunks a second at a target rate (smooth); big chunks flat out (cheap per slip)
        self.chunk = chunk or (max(1, min(500, round(rate / 10))) if rate > 0 else 500)
        self.producers = 1 if rate > 0 else producers
        self.accepted = 0
        self.refused = 0  # chunks refused with backlog_full (retried, like a game server would)
        self._tasks: list[asyncio.Task[None]] = []
        self._stopped = False
        self._last: tuple[float, int, int] | None = None
        self.samples: list[tuple[float, float, float, int]] = []  # (time, accepted/s, applied/s, backlog)

    async def backlog(self) -> int:
        return await backlog(self.redis, self.stream)

    def start(self) -> None:
        self._started = time.monotonic()
        self._tasks = [asyncio.create_task(self._produce(), name=f"flood-{i}") for i in range(self.producers)]

    async def _produce(self) -> None:
        chunk = self.source.take(self.chunk)
        while not self._stopped:
            if self.rate > 0:
                due = self._started + (self.accepted + len(chunk)) / self.rate
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
            try:
                await self.queue.submit_many(chunk)
            except BacklogFull:
                self.refused += 1
                await asyncio.sleep(0.01)
                continue
            self.accepted += len(chunk)
            chunk = self.source.take(self.chunk)

    async def drain(self, timeout: float) -> int:
        """Wait (at most ``timeout`` s) until the scorer has applied everything; the backlog left."""
        deadline = time.monotonic() + timeout
        while (backlog := await self.backlog()) and time.monotonic() < deadline:  # noqa: ASYNC110 (polling Redis)
            await asyncio.sleep(0.2)
        return backlog

    async def sample(self) -> tuple[float, float]:
        """(accepted/s, applied/s) since the previous sample."""
        now, backlog = time.monotonic(), await self.backlog()
        acc, app = 0.0, 0.0
        if self._last is not None:
            t, accepted, before = self._last
            dt = max(now - t, 1e-6)
            acc = (self.accepted - accepted) / dt
            app = (self.accepted - accepted - (backlog - before)) / dt
            self.samples.append((time.time(), acc, app, backlog))
        self._last = (now, self.accepted, backlog)
        return acc, app

    async def stop(self) -> None:
        self._stopped = True
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []


class Window:
    """Applied submissions over a measured window: ``applied = accepted − backlog growth``."""

    def __init__(self, flood: Flood) -> None:
        self.flood = flood

    async def __aenter__(self) -> Window:
        self.t0, self.acc0, self.back0 = time.monotonic(), self.flood.accepted, await self.flood.backlog()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.t1, self.acc1, self.back1 = time.monotonic(), self.flood.accepted, await self.flood.backlog()

    def figures(self) -> dict[str, float]:
        seconds = max(self.t1 - self.t0, 1e-6)
        accepted = self.acc1 - self.acc0
        applied = accepted - (self.back1 - self.back0)
        return {
            "seconds": seconds,
            "accepted": accepted,
            "accepted_per_s": accepted / seconds,
            "applied": applied,
            "applied_per_s": applied / seconds,
            "backlog_start": self.back0,
            "backlog_end": self.back1,
        }


BASELINE_GAME = "loadtest-base"


async def one_at_a_time(redis: RedisClient, source: Source, seconds: float, game: str = BASELINE_GAME) -> float:
    """The baseline: one FCALL per submission, each awaited before the next (the seed lesson's
    path), on a scratch game so it leaves the measured boards alone. Submissions per second."""
    lb = Leaderboard(redis, GameConfig(game=game))
    subs: Callable[[], list[Submission]] = lambda: source.take(100)  # noqa: E731
    done, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        for sub in subs():
            await lb.submit_batch([sub.fields()])
        done += 100
    return done / (time.perf_counter() - started)
