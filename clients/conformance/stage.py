"""What the scenarios act on: a real fleet of the project's own processes (an embedded
redis-server, the scorer, two gateways sharing one port, reached through a relay that counts the
connections: relay.py) and a scripted server, started once for a whole run and shared by every
scenario and every client.

The fleet's gateways are not restarted by the fleet itself: a scenario that drains or kills one
needs it gone while the client reconnects (else the client could meet it again, new, under its
old id); ``restore()`` brings it back before the next scenario that needs the fleet.
"""

from __future__ import annotations

import asyncio
import itertools
import signal
import time
import uuid
from pathlib import Path

from fleet import rebalance
from fleet.children import listening_pids
from fleet.supervisor import Fleet, FleetSettings
from leaderboard import GameConfig, RedisClient, Submission, connect, now_ms
from leaderboard.auth import issue
from leaderboard.queue import Queue

from .relay import Relay
from .scripted import ScriptedServer

# Server settings of the run's fleet (no client knob): rank pushes twice a second so a scenario
# sees one soon, a short drain, no durable log to write.
FLEET_ENV = (("LB_GW_RANK_INTERVAL", "0.5"), ("LB_DURABLE_URL", ""))
SHED_ALL = 10**6  # sockets: more than a gateway of this fleet holds (a shed closes at most all)
FORGED_SECRET = "not-the-fleets-secret-but-long-enough"  # signs tokens the gateways refuse


class Stage:
    """``async with Stage(data_dir) as stage:`` — the fleet and the scripted server, up."""

    def __init__(self, data_dir: Path, *, gateways: int = 2) -> None:
        self.fleet = Fleet(
            FleetSettings(
                data_dir=data_dir,
                port=0,
                gateways=gateways,
                restart=False,
                demo_tokens=False,
                drain_window=0.2,
                env=FLEET_ENV,
            )
        )
        self.scripted = ScriptedServer()
        self.relay: Relay | None = None  # in front of the fleet's port: counts the connections
        self.config = GameConfig.from_env()  # the fleet's children read the same environment
        self.run_id = uuid.uuid4().hex[:8]  # players and submissions of this run only
        self._points = itertools.count(1)
        self._redis: RedisClient | None = None
        self._queue: Queue | None = None
        self._restoring: asyncio.Task[None] | None = None
        self._stopped: set[int] = set()  # gateways a scenario stopped, by index

    async def __aenter__(self) -> Stage:
        await self.fleet.start()
        try:
            self.relay = await Relay(self.fleet.settings.host, self.fleet.port).__aenter__()
            await self.scripted.__aenter__()
            self._redis = connect(self.fleet.redis_url)
            self._queue = Queue(self._redis, self.config)
        except BaseException:
            await self.fleet.close()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._restoring is not None:
            await asyncio.gather(self._restoring, return_exceptions=True)
        await self.scripted.__aexit__()
        if self.relay is not None:
            await self.relay.__aexit__()
        if self._redis is not None:
            await self._redis.aclose()
        await self.fleet.close()

    @property
    def url(self) -> str:
        """The fleet's WebSocket URL, through the relay."""
        assert self.relay is not None
        return f"ws://127.0.0.1:{self.relay.port}/ws"

    @property
    def connections(self) -> int:
        """Connections opened to the fleet through the relay since the stage began."""
        return self.relay.connections if self.relay is not None else 0

    def player(self, name: str) -> str:
        return f"{name}-{self.run_id}"

    def token(self, player: str, *, forged: bool = False) -> str:
        secret = FORGED_SECRET if forged else self.fleet.settings.jwt_secret
        return issue(player, "player", secret, exp=time.time() + 3600)

    def rising(self) -> int:
        """Points above every earlier call's: each submission enters the top 10 (a new snapshot)."""
        return 1000 * next(self._points)

    async def submit(self, player: str, points: int) -> None:
        assert self._queue is not None
        sub = Submission(id=f"conf-{uuid.uuid4().hex[:12]}", player=player, points=points, ts_ms=now_ms())
        await self._queue.submit(sub)

    def stop_gateway(self, gateway_id: str, *, kill: bool) -> None:
        """SIGTERM (it drains: 1012 to every socket) or SIGKILL (the sockets just break)."""
        index = self._index(gateway_id)
        self.fleet.gateways[index].send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        self._stopped.add(index)  # restore() starts it again once it has exited

    async def shed(self, gateway_id: str, *, timeout: float = 5.0) -> None:
        """Every socket of one gateway closed with 1012 ``rebalance`` at once (its operator's
        ``POST /admin/shed``): the gateway stays up, and its clients come back to either one."""
        member = self.fleet.layout().gateways[self._index(gateway_id)]
        deadline = time.monotonic() + timeout
        while True:
            try:
                await rebalance.shed(member, SHED_ALL, 0.0)
                return
            except RuntimeError:
                # refused while the last shed still waits for a closing handshake (one at a time)
                if time.monotonic() >= deadline:
                    raise
            await asyncio.sleep(0.05)

    def restore_soon(self) -> asyncio.Task[None]:
        """Start bringing every gateway back (those a scenario stopped, started anew)."""
        if self._restoring is None or self._restoring.done():
            self._restoring = asyncio.create_task(self._restore())
        return self._restoring

    async def restore(self) -> None:
        """Every gateway up and listening again."""
        await self.restore_soon()

    async def _restore(self) -> None:
        fleet = self.fleet
        for i, proc in enumerate(fleet.gateways):
            if proc.returncode is None and i not in self._stopped:
                continue
            await proc.wait()  # a drain ends by itself, within the drain window
            fleet.gateways[i] = await fleet.start_gateway(i)
            self._stopped.discard(i)
        async with asyncio.timeout(fleet.settings.start_timeout):
            while not self._all_up():
                if any(p.returncode is not None for p in fleet.gateways):
                    raise RuntimeError("a gateway of the conformance fleet exited at start")
                await asyncio.sleep(0.05)

    def _all_up(self) -> bool:
        """Every gateway listening on the shared port."""
        return {p.pid for p in self.fleet.gateways} <= set(listening_pids(self.fleet.port))

    def _index(self, gateway_id: str) -> int:
        ids = [f"gw-{i + 1}" for i in range(len(self.fleet.gateways))]  # the ids the fleet gives them
        if gateway_id not in ids:
            raise ValueError(f"no gateway {gateway_id!r} in this fleet ({', '.join(ids)})")
        return ids.index(gateway_id)
