"""TLS at the balancer: a fleet behind haproxy with a certificate from a private CA made here
(``fleet.certs``, never a committed key) serves wss:// and https:// on its one public port,
refuses a client that does not trust the CA, and speaks no plain WebSocket there."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import redis

from client import LeaderboardClient, Untrusted
from client.connection import TLS_HANDSHAKE_FAILED, tls_context
from fleet import certs
from fleet.haproxy import Haproxy
from fleet.redis_server import RedisServer
from fleet.supervisor import Fleet, FleetSettings
from leaderboard.auth import issue
from loadtest.swarm import Swarm
from loadtest.wsclient import handshake

from .conftest import MS
from .test_api import post_applied

T = 1000 * MS
SECRET = "a-tls-fleets-own-secret-of-32-bytes-long!"

pytestmark = pytest.mark.skipif(Haproxy.binary() is None, reason="haproxy is not installed (./dev install)")


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> certs.Certificates:
    return certs.make(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
async def tls_fleet(
    made: certs.Certificates, redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Fleet]:
    client = redis.Redis.from_url(redis_server.url)
    client.flushall()  # keys only: the function library stays loaded
    client.close()
    settings = FleetSettings(
        redis_url=redis_server.url, data_dir=tmp_path_factory.mktemp("fleet"), port=0, gateways=1, apis=1,
        balancer="haproxy", tls_cert=str(made.server), demo_tokens=False, log_level="WARNING", jwt_secret=SECRET,
    )  # fmt: skip
    async with Fleet(settings) as fleet:
        yield fleet


async def test_wss_gets_snapshots_and_https_reaches_the_api(tls_fleet: Fleet, made: certs.Certificates) -> None:
    assert tls_fleet.ws_url.startswith("wss://") and tls_fleet.api_url.startswith("https://")
    server = {"Authorization": "Bearer " + issue("game-1", "server", SECRET, exp=time.time() + 600)}
    async with httpx.AsyncClient(base_url=tls_fleet.api_url, verify=tls_context(str(made.ca)), timeout=10 * T) as http:
        slip = {"player_id": "ana", "score": 42, "match_id": "tls-1"}
        done = await post_applied(http, "boards/global/scores", slip, server)
        assert done.status_code == 200 and done.json()["status"] == "applied", done.text
    token = issue("ana", "player", SECRET, exp=time.time() + 600)
    async with LeaderboardClient(tls_fleet.ws_url, token=token, ca_file=str(made.ca)) as player:
        snap = await player.wait_for(
            lambda m: m["type"] == "snapshot" and any(e["player"] == "ana" for e in m["entries"]), 10 * T
        )
        assert snap["board"] == "global"


async def test_a_client_that_does_not_trust_the_ca_is_refused(tls_fleet: Fleet, tmp_path: Path) -> None:
    other = certs.make(tmp_path / "other")  # another CA: the fleet's certificate is not its
    async with LeaderboardClient(tls_fleet.ws_url, ca_file=str(other.ca)) as player:
        with pytest.raises(Untrusted) as refused:
            await player.wait_for(lambda m: m["type"] == "snapshot", 10 * T)
        assert refused.value.close_code == TLS_HANDSHAKE_FAILED and refused.value.code == "untrusted_certificate"
        assert player.status == "refused" and player.connects == 0
    # and without --ca-file: the system's CAs do not know a private one either
    async with LeaderboardClient(tls_fleet.ws_url) as player:
        with pytest.raises(Untrusted):
            await player.wait_for(lambda m: m["type"] == "snapshot", 10 * T)


async def test_plain_websocket_to_the_tls_port_is_refused(tls_fleet: Fleet) -> None:
    """An upgrade request in the clear gets no HTTP answer at all: haproxy reads it as a broken
    TLS ClientHello and closes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", tls_fleet.port)
    try:
        writer.write(handshake("127.0.0.1", "/ws"))
        answer = await asyncio.wait_for(reader.read(), 5 * T)  # until haproxy closes
    except ConnectionResetError:
        answer = b""
    finally:
        writer.close()
    assert not answer.startswith(b"HTTP/")


async def test_the_load_tests_clients_speak_wss_and_refuse_another_ca(
    tls_fleet: Fleet, made: certs.Certificates, tmp_path: Path
) -> None:
    async with Swarm(tls_fleet.ws_url, sockets=20, rate=0, workers=1, ca_file=str(made.ca)) as trusting:
        assert await trusting.wait_open(20 * T)
        # the 101 came back through TLS: its plaintext was read, as every frame after it
        assert trusting.totals()["opened"] == 20 and trusting.totals()["failed"] == 0
    other = certs.make(tmp_path / "other")
    async with Swarm(tls_fleet.ws_url, sockets=5, rate=0, workers=1, ca_file=str(other.ca)) as wary:
        assert await wary.wait_open(20 * T)
        assert wary.totals()["opened"] == 0 and wary.totals()["failed_tls"] == 5


def test_a_certificate_without_a_balancer_or_a_readable_file_is_refused(
    made: certs.Certificates, tmp_path: Path
) -> None:
    with pytest.raises(ValueError, match="--balancer haproxy"):
        FleetSettings(data_dir=tmp_path, tls_cert=str(made.server))
    with pytest.raises(ValueError, match="not a readable file"):
        FleetSettings(data_dir=tmp_path, balancer="haproxy", tls_cert=str(tmp_path / "missing.pem"))
