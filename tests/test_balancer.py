"""HAProxy in front of the gateways: the shipped configuration, and a private haproxy in front of
three gateway processes (each on its own loopback address, as if on its own host)."""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import random
import signal
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path

import orjson
import pytest
import redis.asyncio as aioredis
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from fleet import demo
from fleet.haproxy import EXAMPLE_ARGS, BalancerConfig, CommandRefused, Gateway, Haproxy, main, render
from fleet.rebalance import counts, rebalance
from fleet.redis_server import free_port
from fleet.rollout import rollout
from fleet.supervisor import Fleet, FleetSettings
from gateway.server import Gateway as GatewayServer
from leaderboard import GameConfig

from .conftest import MS
from .gw_helpers import http_get, running, token
from .gw_helpers import settings as gw_settings

T = 1000 * MS
REPO = Path(__file__).resolve().parent.parent
GAME = GameConfig(game="balanced")

needs_haproxy = pytest.mark.skipif(
    Haproxy.binary() is None, reason="haproxy is not installed (./dev install installs Debian's, as root)"
)


def test_the_shipped_configuration_is_the_renderers_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(list(EXAMPLE_ARGS)) == 0
    shipped = (REPO / "deploy" / "haproxy.cfg").read_text()
    assert capsys.readouterr().out == shipped, "render deploy/haproxy.cfg again: python -m fleet.haproxy " + " ".join(
        EXAMPLE_ARGS
    )
    for line in (
        "timeout tunnel 1h",
        "balance leastconn",
        "option forwardfor",
        "uri /readyz",
        "level admin",
        "http-request del-header X-Forwarded-For",
        "deny_status 404 if { path /metrics }",
        "log stdout format raw local0",
        "log-format",
    ):
        assert line in shipped


def test_bad_gateway_lists_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in ([], ["--gateway", "10.0.0.1"], ["--gateway", "a=10.0.0.1:80", "--gateway", "a=10.0.0.2:80"]):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "at least one gateway" in err and "host:port or name=host:port" in err and "must be unique" in err
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["--gateway", "127.0.0.2:8000"]) == 0


@needs_haproxy
async def test_haproxy_runs_the_configuration_and_answers_its_runtime_api() -> None:
    config = BalancerConfig((Gateway("gw-1", "127.0.0.2:1"),), bind=f"127.0.0.1:{free_port()}", stats_socket="")
    async with Haproxy(config) as lb:
        assert "Name: HAProxy" in await lb.command("show info")
        assert set(await lb.servers()) == {"gw-1"}
        await lb.set_state("gw-1", "drain")
        assert (await lb.servers())["gw-1"]["status"].startswith(("DRAIN", "DOWN"))
        with pytest.raises(CommandRefused):
            await lb.set_state("gw-9", "drain")
    assert render(config).count("server gw-1 127.0.0.2:1") == 1


@needs_haproxy
async def test_python_m_fleet_haproxy_sets_states_and_lists_servers(capfd: pytest.CaptureFixture[str]) -> None:
    """The rolling restart by hand needs nothing but the product (no socat)."""
    config = BalancerConfig((Gateway("gw-1", "127.0.0.2:1"),), bind=f"127.0.0.1:{free_port()}", stats_socket="")
    async with Haproxy(config) as lb:
        sock = ["--stats-socket", lb.stats_socket]

        async def cli(*argv: str) -> int:
            return await asyncio.to_thread(main, [*argv, *sock])

        capfd.readouterr()
        assert await cli("state", "gw-1", "drain") == 0
        assert (await lb.servers())["gw-1"]["status"].startswith(("DRAIN", "DOWN"))
        assert await cli("servers") == 0
        assert capfd.readouterr().out.startswith(f"{lb.stats_socket} gw-1 ")
        assert await cli("state", "gw-9", "drain") == 1  # no such server: said, nothing changed
        assert "set server gw-9 state drain" in capfd.readouterr().err
        # back to ready, but nothing listens on 127.0.0.2:1: it never comes UP within the wait
        assert await cli("state", "gw-1", "ready", "--wait-up", str(0.5 * T)) == 1
        assert "gw-1 is not UP in every balancer within" in capfd.readouterr().err
    assert await asyncio.to_thread(main, ["servers", "--stats-socket", lb.stats_socket]) == 1  # haproxy is gone
    assert "haproxy runtime API:" in capfd.readouterr().err


@needs_haproxy
async def test_haproxy_logs_each_handshake_without_the_query_string(redis_url: str, tmp_path: Path) -> None:
    log_path = tmp_path / "haproxy.log"

    async def logged(count: int) -> list[str]:
        async with asyncio.timeout(10 * T):
            while True:
                lines = log_path.read_text().splitlines()
                if len(lines) >= count:
                    return lines
                await asyncio.sleep(0.05)

    async with running(redis_url) as gw:
        # the check haproxy -c -f runs inside start(): a configuration it refuses would raise here
        config = BalancerConfig(
            (Gateway("gw-1", f"127.0.0.1:{gw.port}"),), bind=f"127.0.0.1:{free_port()}", stats_socket=""
        )
        async with Haproxy(config, log_path=log_path) as lb:
            secret = token("mia")
            async with connect(f"ws://{lb.config.bind}/ws?token={secret}", open_timeout=5 * T) as ws:
                assert orjson.loads(await ws.recv())["type"] == "welcome"
            assert (await http_get(int(lb.config.bind.rpartition(":")[2]), "/metrics"))[0] == 404
            lines = await logged(2)
    ws_line, metrics_line = lines[:2]
    # client address, frontend, backend/server, timers, status, termination state, retries, the
    # method and the path — never the token in the query string
    assert ws_line.startswith("127.0.0.1:") and " players gateways/gw-1 " in ws_line, ws_line
    assert " 101 " in ws_line and ws_line.endswith(" GET /ws"), ws_line
    assert " 404 " in metrics_line and metrics_line.endswith(" GET /metrics"), metrics_line
    assert secret not in log_path.read_text()


class Changes:
    """Set by every player and the monitor on each event: waits re-check on it, never on a timer."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def bump(self) -> None:
        self._event.set()

    async def until(self, check: Callable[[], bool], within: float) -> None:
        async with asyncio.timeout(within):
            while not check():
                self._event.clear()
                await self._event.wait()


@dataclass
class Player:
    """A client as the product's: reconnects after 1012 with jittered backoff, notes every snapshot."""

    index: int
    changes: Changes
    gateways: list[str] = field(default_factory=list)  # one per connection
    versions: list[list[int]] = field(default_factory=list)  # per connection, in order
    closes: list[int | None] = field(default_factory=list)
    connected: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self, url: str, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                async with connect(url, open_timeout=10 * T, close_timeout=T) as ws:
                    welcome = orjson.loads(await ws.recv())
                    self.gateways.append(welcome["gateway"])
                    self.versions.append([])
                    self.connected.set()
                    self.changes.bump()
                    async for raw in ws:
                        msg = orjson.loads(raw)
                        if msg["type"] == "snapshot":
                            self.versions[-1].append(msg["version"])
                            self.changes.bump()
                    self.closes.append(ws.close_code)
            except (OSError, InvalidStatus, TimeoutError, ConnectionClosed) as exc:
                self.closes.append(getattr(getattr(exc, "rcvd", None), "code", None))
            self.connected.clear()
            self.changes.bump()
            if not stop.is_set():
                await asyncio.sleep(random.uniform(0, 0.5))  # full jitter, as client.backoff


@contextlib.asynccontextmanager
async def balanced_fleet(
    tmp_path: Path, redis_url: str, gateways: int, *, restart: bool = True
) -> AsyncIterator[Fleet]:
    settings = FleetSettings(
        redis_url=redis_url,
        data_dir=tmp_path,
        port=0,
        gateways=gateways,
        balancer="haproxy",
        restart=restart,
        demo_tokens=False,
        log_level="WARNING",
        drain_window=1.0,
        env=(("LB_GAME", GAME.game),),
    )
    async with Fleet(settings) as fleet:
        traffic = asyncio.create_task(demo.traffic(fleet.redis_url, GAME, 200, seed=7))
        try:
            yield fleet
        finally:
            traffic.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await traffic


async def published_versions(redis_url: str, into: list[int], ready: asyncio.Event, changes: Changes) -> None:
    r = aioredis.Redis.from_url(redis_url)
    pubsub = r.pubsub()
    await pubsub.ssubscribe(GAME.keys.snapshot_channel("weekly", "global"))  # sharded, as the scorer publishes
    ready.set()
    try:
        async for msg in pubsub.listen():
            if msg["type"] == "smessage":
                into.append(orjson.loads(msg["data"])["version"])
                changes.bump()
    finally:
        await pubsub.aclose()
        await r.aclose()


def missed(player: Player, published: list[int]) -> list[int]:
    """Versions published while it was connected (or after the one it resumed from) that it never
    got. Versions published while it was away and older than what it resumed from are not missed:
    the stored latest it gets on reconnect replaces them."""
    got = {v for conn in player.versions for v in conn}
    first = min(got)
    excused: set[int] = set()
    for before, after in zip(player.versions, player.versions[1:], strict=False):
        if before and after:
            excused |= {v for v in published if before[-1] < v <= after[0]}
    return [v for v in published if v > first and v not in got and v not in excused]


@pytest.mark.slow
@needs_haproxy
async def test_a_drained_gateways_players_come_back_through_haproxy_and_miss_nothing(
    tmp_path: Path, redis_url: str
) -> None:
    # not restarted: its players can only go to the two others
    async with balanced_fleet(tmp_path, redis_url, 3, restart=False) as fleet:
        assert fleet.ws_url.startswith("ws://127.0.0.1:")
        # metrics never reach players through the balancer; health does
        assert (await http_get(fleet.port, "/metrics"))[0] == 404
        assert (await http_get(fleet.port, "/readyz"))[0] == 200
        published: list[int] = []
        subscribed = asyncio.Event()
        changes = Changes()
        monitor = asyncio.create_task(published_versions(fleet.redis_url, published, subscribed, changes))
        await asyncio.wait_for(subscribed.wait(), 5 * T)
        stop = asyncio.Event()
        players = [Player(i, changes) for i in range(300)]
        tasks = [asyncio.create_task(p.run(fleet.ws_url, stop)) for p in players]
        try:
            async with asyncio.timeout(60 * T):
                await asyncio.gather(*(p.connected.wait() for p in players))
            by_gateway = {gw: sum(p.gateways[0] == gw for p in players) for gw in ("gw-1", "gw-2", "gw-3")}
            assert all(n >= 50 for n in by_gateway.values()), by_gateway  # leastconn spreads them
            # the gateways believe haproxy's X-Forwarded-For (the fleet trusts 127.0.0.1)
            assert fleet.gateway_address(1)[0] == "127.0.0.3"
            victims = [p for p in players if p.gateways[0] == "gw-2"]
            t_drain = time.monotonic()
            os.kill(fleet.gateways[1].pid, signal.SIGTERM)  # its drain: 1012 in batches over a second
            await changes.until(lambda: all(len(p.gateways) >= 2 and p.connected.is_set() for p in victims), 60 * T)
            back_s = time.monotonic() - t_drain
            # two more ticks after the last one came back: each must get both
            mark = len(published)
            await changes.until(lambda: len(published) >= mark + 2, 30 * T)
            last = published[-1]
            await changes.until(lambda: all(p.versions[-1] and p.versions[-1][-1] >= last for p in players), 10 * T)
        finally:
            stop.set()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            monitor.cancel()
            await asyncio.gather(monitor, return_exceptions=True)
        assert victims and back_s < 30 * T
        for p in victims:
            assert p.closes[0] == 1012, p.closes
            assert p.gateways[1] in ("gw-1", "gw-3"), p.gateways  # not the draining one
        others = [p for p in players if p.gateways[0] != "gw-2"]
        assert all(len(p.gateways) == 1 for p in others)  # nobody else was disturbed
        # what was published up to the last version every player was waited for: one published
        # while the players were being stopped reached none of them, and is no loss
        upto = [v for v in published if v <= last]
        bad = {p.index: (m, p.versions) for p in players if (m := missed(p, upto))}
        assert bad == {}, f"published {upto}; missed, and versions received: {bad}"


@pytest.mark.slow
@needs_haproxy
async def test_rollout_restarts_every_gateway_in_turn(tmp_path: Path, redis_url: str) -> None:
    async with balanced_fleet(tmp_path, redis_url, 2) as fleet:
        before = [g.pid for g in fleet.gateways]
        stop = asyncio.Event()
        changes = Changes()
        players = [Player(i, changes) for i in range(40)]
        tasks = [asyncio.create_task(p.run(fleet.ws_url, stop)) for p in players]
        try:
            async with asyncio.timeout(30 * T):
                await asyncio.gather(*(p.connected.wait() for p in players))
            steps = await rollout(fleet.layout(), drain_timeout=30 * T, start_timeout=30 * T)
            await changes.until(lambda: all(p.connected.is_set() for p in players), 30 * T)
            # leastconn moves nobody back: gw-2, restarted last, stays (nearly) empty until the rebalance
            unbalanced = await counts(fleet.layout().gateways)
            evened = await rebalance(fleet.layout().gateways, over_s=0.5, timeout=30 * T)
            await changes.until(lambda: all(p.connected.is_set() for p in players), 30 * T)
            even = await counts(fleet.layout().gateways)
        finally:
            stop.set()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        assert [s.gateway for s in steps] == ["gw-1", "gw-2"]
        assert [s.old_pid for s in steps] == before
        assert all(g.pid not in before for g in fleet.gateways)
        servers = await fleet.balancers[0].servers()
        assert {name: row["status"] for name, row in servers.items()} == {"gw-1": "UP", "gw-2": "UP"}
        # every player that was moved was closed with 1012 and came back; none lost
        assert all(c == 1012 for p in players for c in p.closes)
        assert all(p.connected.is_set() for p in players)
        # a few of gw-2's players may reconnect after it is UP again, and land there
        assert sum(unbalanced.values()) == 40 and unbalanced["gw-1"] > unbalanced["gw-2"], unbalanced
        assert set(evened.shed) <= {"gw-1"} and evened.settled
        assert sum(even.values()) == 40 and all(15 <= n <= 25 for n in even.values()), even


@needs_haproxy
@pytest.mark.parametrize("trusted", [True, False])
async def test_the_gateway_counts_players_by_the_address_haproxy_forwards(redis_url: str, trusted: bool) -> None:
    """One player per address: behind a trusted haproxy each source address gets its own slot;
    when haproxy is not trusted, everyone arrives from haproxy's address and shares one."""
    proxies = ("127.0.0.1",) if trusted else ()
    async with running(redis_url, max_per_address=1, trusted_proxies=proxies) as gw:
        config = BalancerConfig(
            (Gateway("gw-1", f"127.0.0.1:{gw.port}"),), bind=f"127.0.0.1:{free_port()}", stats_socket=""
        )
        async with Haproxy(config) as lb, contextlib.AsyncExitStack() as stack:
            url = f"ws://{lb.config.bind}/ws"

            async def status(source: str) -> int:
                try:
                    ws = await stack.enter_async_context(
                        connect(
                            url,
                            open_timeout=5 * T,
                            local_addr=(source, 0),
                            additional_headers={"X-Forwarded-For": "198.51.100.9"},
                        )
                    )
                except InvalidStatus as exc:
                    return exc.response.status_code
                assert orjson.loads(await ws.recv())["type"] == "welcome"
                return 101

            got = [await status(source) for source in ("127.0.0.5", "127.0.0.6", "127.0.0.5")]
            # the forged header is deleted by haproxy either way
            assert got == ([101, 101, 503] if trusted else [101, 503, 503])


@needs_haproxy
async def test_a_gateway_without_redis_gets_no_new_players(redis_url: str) -> None:
    """/readyz is 503 while a gateway's pub/sub is down: haproxy's checks take it out."""
    lost = GatewayServer(gw_settings(f"redis://127.0.0.1:{free_port()}/0", gateway_id="gw-lost"))
    await lost.start()
    try:
        async with running(redis_url, gateway_id="gw-fine") as fine:
            config = BalancerConfig(
                (Gateway("gw-lost", f"127.0.0.1:{lost.port}"), Gateway("gw-fine", f"127.0.0.1:{fine.port}")),
                bind=f"127.0.0.1:{free_port()}",
                stats_socket="",
            )
            async with Haproxy(config) as lb:
                servers: dict[str, dict[str, str]] = {}
                async with asyncio.timeout(10 * T):
                    while servers.get("gw-lost", {}).get("status") != "DOWN":
                        servers = await lb.servers()
                        await asyncio.sleep(0.1)
                assert servers["gw-lost"]["check_code"] == "503"
                for _ in range(6):
                    async with connect(f"ws://{config.bind}/ws", open_timeout=5 * T) as ws:
                        assert orjson.loads(await ws.recv())["gateway"] == "gw-fine"
    finally:
        await lost.close()
