"""The I/O shell shared by the faults: a private fleet, scorer replicas, a sender that records
every confirmation and refusal in the model, the board reader and a small WebSocket client.

The fleet is ``loadtest.target.private_fleet`` (``fleet.supervisor.Fleet``: embedded redis-server
with AOF and a password, a scorer, gateways); nothing here starts a process any other way."""

from __future__ import annotations

import asyncio
import contextlib
import random
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import orjson
from redis.exceptions import RedisError
from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import WebSocketException

from fleet.children import die_with_parent
from fleet.redis_server import free_port
from fleet.supervisor import Fleet
from leaderboard import BacklogFull, GameConfig, Submission, now_ms
from leaderboard.queue import Queue
from leaderboard.transport import RedisClient
from leaderboard.windows import window

from ..target import Target, private_fleet
from .model import Model, Slip, unpack

REGIONS = ("eu", "na")


@contextlib.asynccontextmanager
async def chaos_fleet(tmp: Path, name: str, *, gateways: int, env: dict[str, str]) -> AsyncIterator[Target]:
    """A private fleet of its own for one fault: game ``chaos``, its own data directory."""
    async with private_fleet(
        gateways=gateways,
        redis_url=None,
        data_dir=tmp / name,
        game="chaos",
        env={"LB_OPERATOR": "incr", "LB_LOG_LEVEL": "ERROR", **env},
    ) as target:
        yield target


class Replicas:
    """The fleet's scorer plus ``extra`` more replicas; kill one, start its replacement."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self.extra: list[asyncio.subprocess.Process] = []
        self.kills = 0

    async def add(self) -> None:
        env = self.fleet.child_env(LB_SCORER_METRICS_PORT=str(free_port()))
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "scorer",
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
        self.extra.append(proc)

    def all(self) -> list[asyncio.subprocess.Process]:
        return [p for p in (self.fleet.scorer, *self.extra) if p is not None]

    async def kill_one(self, rng: random.Random) -> None:
        """SIGKILL a random replica and start its replacement at once."""
        procs = self.all()
        i = rng.randrange(len(procs))
        victim = procs[i]
        with contextlib.suppress(ProcessLookupError):
            victim.kill()
        await victim.wait()
        self.kills += 1
        if i == 0:
            self.fleet.scorer = await self.fleet.start_scorer()
        else:
            self.extra.remove(victim)
            await self.add()

    async def close(self) -> None:
        await asyncio.gather(*(self.fleet.stop_process(p, 20) for p in self.extra))


@dataclass(slots=True)
class Sender:
    """Sends slips through the queue API a game server uses, recording each outcome."""

    redis: RedisClient
    config: GameConfig
    model: Model
    timeout: float = 5.0
    refusals: dict[str, int] = field(default_factory=dict)  # outcome → sends not confirmed

    async def send(self, slips: list[Slip]) -> bool:
        """One call for ``slips``; False when it was refused (every slip then counts a refusal)."""
        now = now_ms()
        subs = []
        for slip in slips:
            slip.ts_ms = slip.ts_ms or now
            self.model.sent(slip)
            subs.append(Submission(slip.id, slip.player, slip.points, slip.ts_ms, op="incr", region=slip.region))
        try:
            async with asyncio.timeout(self.timeout):
                await Queue(self.redis, self.config).submit_many(subs)
        except (RedisError, OSError, TimeoutError, BacklogFull) as exc:
            # refused only when it never reached Redis; a timeout or a connection lost mid-call
            # leaves the outcome unknown (Redis may have appended it: a retry is deduplicated)
            refused = isinstance(exc, BacklogFull) or "connecting to" in str(exc)
            name = f"{'refused' if refused else 'unknown outcome'} ({type(exc).__name__})"
            self.refusals[name] = self.refusals.get(name, 0) + len(slips)
            for slip in slips:
                (self.model.refused if refused else self.model.unknown)(slip)
            return False
        at = time.time()
        for slip in slips:
            self.model.acked(slip, at)
        return True


def replay_pick(model: Model, rng: random.Random, pool: list[Slip]) -> Slip | None:
    """An earlier slip that may be sent once more (fewer than three sends)."""
    for _ in range(5):
        slip = rng.choice(pool)
        if slip.sends < 3:
            return slip
    return None


async def wait_drained(redis: RedisClient, config: GameConfig, timeout: float) -> float:
    """Until the scorer has applied every queued submission (it deletes each once applied, so
    the stream's length is what still waits); the seconds it took."""
    t0 = time.monotonic()
    stream = config.keys.submissions
    while True:
        with contextlib.suppress(RedisError, OSError):
            if await redis.xlen(stream) == 0:
                return time.monotonic() - t0
        if time.monotonic() - t0 > timeout:
            raise RuntimeError(f"the scorer did not drain the queue within {timeout:.0f} s")
        await asyncio.sleep(0.2)


async def read_boards(redis: RedisClient, config: GameConfig, model: Model) -> dict[str, dict[str, int]]:
    """Every board the model's slips can reach: ``scope/window`` → player → points (periods of
    one window summed: a run that crosses midnight splits the daily board)."""
    out: dict[str, dict[str, int]] = {}
    scopes = ["global", *(f"region:{r}" for r in REGIONS)]
    times = {slip.ts_ms for slip in model.slips.values() if slip.ts_ms}
    for name in config.windows:
        labels = {window(name).period(ts).label for ts in times}
        for scope in scopes:
            board = out.setdefault(f"{scope}/{name}", {})
            for label in labels:
                key = config.keys.board(name, label, scope)
                rows = cast(list[tuple[str, float]], await redis.zrange(key, 0, -1, withscores=True))
                for player, score in rows:
                    board[str(player)] = board.get(str(player), 0) + unpack(score, name)
    return out


async def dead_letters(redis: RedisClient, config: GameConfig) -> int:
    return int(await redis.xlen(config.keys.dead_letters))


class Socket:
    """One WebSocket client that keeps every snapshot's players and every reply by id."""

    def __init__(self, url: str, token: str = "") -> None:
        self.url = url + (f"{'&' if '?' in url else '?'}token={token}" if token else "")  # after ?game=
        self.ws: ClientConnection | None = None
        self.snaps: list[tuple[float, list[str]]] = []  # (arrival, players of the top)
        self.gateway = ""  # the welcome's gateway id
        self.replies: dict[Any, dict[str, Any]] = {}
        self.closed_at = 0.0
        self._waiters: dict[Any, asyncio.Future[dict[str, Any]]] = {}
        self._task: asyncio.Task[None] | None = None
        self._ids = 0

    async def open(self) -> None:
        self.ws = await ws_connect(self.url, open_timeout=10, ping_interval=None, max_queue=None)
        self._task = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self.ws is not None
        with contextlib.suppress(WebSocketException, OSError):
            async for raw in self.ws:
                msg = orjson.loads(raw)
                kind = msg.get("type")
                if kind == "snapshot":
                    self.snaps.append((time.time(), [e["player"] for e in msg["entries"]]))
                elif kind == "welcome":
                    self.gateway = str(msg.get("gateway"))
                elif "id" in msg:
                    self.replies[msg["id"]] = msg
                    waiter = self._waiters.pop(msg["id"], None)
                    if waiter is not None and not waiter.done():
                        waiter.set_result(msg)
        self.closed_at = time.time()

    @property
    def open_now(self) -> bool:
        return self.ws is not None and self.closed_at == 0.0

    async def request(self, msg: dict[str, Any], timeout: float) -> dict[str, Any] | None:
        """Send ``msg`` with a fresh id; its reply, or None when none came within ``timeout``."""
        assert self.ws is not None
        self._ids += 1
        rid = self._ids
        waiter: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiters[rid] = waiter
        try:
            await self.ws.send(orjson.dumps({**msg, "id": rid}).decode())
            return await asyncio.wait_for(waiter, timeout)
        except (TimeoutError, WebSocketException, OSError):
            return None
        finally:
            self._waiters.pop(rid, None)

    def has(self, player: str) -> float | None:
        """Arrival time of the first snapshot that shows ``player``."""
        return next((t for t, players in self.snaps if player in players), None)

    async def close(self) -> None:
        if self.ws is not None:
            with contextlib.suppress(WebSocketException, OSError, TimeoutError):
                await asyncio.wait_for(self.ws.close(), 2)
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
