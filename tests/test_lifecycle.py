"""One lifecycle for every object that owns tasks, connections or sockets (leaderboard.lifecycle):
``close()`` runs once however often it is called, and a start that fails part-way leaves nothing
behind — asserted on a real gateway and a real scorer against the private redis-server."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from fleet.redis_server import free_port
from gateway.server import Gateway
from leaderboard import GameConfig, connect
from leaderboard.lifecycle import Service
from scorer import Scorer, ScorerSettings
from scorer.durable import StoreError

from .conftest import MS
from .gw_helpers import settings as gateway_settings


class Recorded(Service):
    """Records its steps; its start fails after opening when told to, its close waits for
    ``release``."""

    def __init__(self, *, fail: bool = False) -> None:
        self.fail = fail
        self.steps: list[str] = []
        self.release = asyncio.Event()

    async def start(self) -> Recorded:
        self.steps.append("opened")
        if self.fail:
            raise RuntimeError("start failed part-way")
        return self

    async def _close(self) -> None:
        self.steps.append("closing")
        await self.release.wait()
        self.steps.append("closed")


async def test_close_runs_once_and_a_cancelled_caller_does_not_cut_it_short() -> None:
    service = Recorded()
    await service.start()
    first = asyncio.create_task(service.close())
    second = asyncio.create_task(service.close())
    await asyncio.sleep(0)  # both callers now wait on the one shutdown
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    assert service.closing and service.steps == ["opened", "closing"]  # going on without its caller
    service.release.set()
    await asyncio.wait_for(second, 1000 * MS)
    await service.close()
    assert service.steps == ["opened", "closing", "closed"]


async def test_a_failed_start_is_closed_before_its_error_propagates() -> None:
    service = Recorded(fail=True)
    service.release.set()
    with pytest.raises(RuntimeError, match="part-way"):
        async with service:
            pytest.fail("entered a service whose start failed")
    assert service.steps == ["opened", "closing", "closed"]


async def test_a_loop_of_redis_calls_stops_at_its_first_cancellation(redis_url: str) -> None:
    """On Python 3.11 ``asyncio.wait_for`` loses a cancellation that arrives as its inner call
    finishes, and redis-py writes each command under one when the client has a socket timeout
    (the gateway's clients do). Cancelled once, at each step of its calls in turn, a loop of
    Redis calls still stops, and the client goes on serving."""
    redis = connect(redis_url, socket_timeout=2.0)

    async def read_forever() -> None:
        while True:
            await redis.get("x")

    try:
        for steps in range(40):
            task = asyncio.create_task(read_forever())
            for _ in range(steps):
                await asyncio.sleep(0)  # the cancellation lands at another point of the call
            task.cancel()
            done, _ = await asyncio.wait({task}, timeout=2000 * MS)
            assert done, f"cancelled after {steps} steps, the loop ran on"
            assert task.cancelled()
        assert await redis.set("x", "1") and await redis.get("x") == "1"
    finally:
        await redis.aclose()


# ---------------------------------------------------------------- real parts


@contextmanager
def listening(port: int) -> Iterator[None]:
    """Something else listening on ``port`` (without SO_REUSEPORT: nobody may share it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
        sock.listen()
        yield


def bindable(port: int) -> bool:
    """Whether a listener could take ``port`` now (SO_REUSEADDR: a TIME_WAIT left does not count,
    a socket still listening does)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


async def client_ids(r: aioredis.Redis) -> set[str]:
    return {str(c["id"]) for c in await r.client_list()}


async def leaks(
    r: aioredis.Redis, clients_before: set[str], tasks_before: set[asyncio.Task[object]], ports: Iterable[int]
) -> list[str]:
    """What a closed object left behind: tasks still pending, Redis connections still open (as
    the server sees them), ports still listened on."""
    left = [
        t.get_name() for t in asyncio.all_tasks() - tasks_before if not t.done() and t is not asyncio.current_task()
    ]
    found = [f"tasks left pending: {left}"] if left else []
    # The server sees a connection go once the client closed it (a FIN away): polled, bounded.
    for _ in range(100):
        extra = [c for c in await r.client_list() if str(c["id"]) not in clients_before]
        if not extra:
            break
        await asyncio.sleep(20 * MS)
    found += [f"redis connections left open: {[c['cmd'] for c in extra]}"] if extra else []
    return found + [f"port {port} still listened on" for port in ports if not bindable(port)]


@pytest.mark.parametrize("taken", ["port", "metrics_port"])
async def test_a_gateway_whose_port_is_taken_leaves_nothing_behind(
    redis_url: str, r: aioredis.Redis, taken: str
) -> None:
    """The port (or the metrics port) is checked only after the hub subscribed on Redis: the
    failure comes part-way, with connections, tasks and perhaps the metrics listener open."""
    ports = {"port": free_port(), "metrics_port": free_port()}
    gw = Gateway(gateway_settings(redis_url, **ports))
    clients, tasks = await client_ids(r), asyncio.all_tasks()
    with listening(ports[taken]):
        with pytest.raises(OSError):
            async with gw:
                pytest.fail("entered a gateway whose start failed")
        assert gw.hub.connected.is_set()  # it did get as far as Redis
    assert await leaks(r, clients, tasks, ports.values()) == []


async def test_a_scorer_whose_store_cannot_open_leaves_nothing_behind(
    redis_url: str, r: aioredis.Redis, tmp_path: Path
) -> None:
    """The durable store opens after the metrics listener and the library load: a store that
    cannot be created (its directory is a file) fails the start part-way."""
    (tmp_path / "not-a-directory").write_text("")
    metrics_port = free_port()
    settings = ScorerSettings(
        redis_url=redis_url,
        game=GameConfig(game="test"),
        name="c1",
        metrics_port=metrics_port,
        durable_url=f"sqlite:///{tmp_path}/not-a-directory/scores.db",
    )
    scorer = Scorer(settings, burst=True)
    clients, tasks = await client_ids(r), asyncio.all_tasks()
    with pytest.raises(StoreError, match="cannot open"):
        async with scorer:
            pytest.fail("entered a scorer whose start failed")
    assert await leaks(r, clients, tasks, [metrics_port]) == []
