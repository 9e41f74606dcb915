"""The HTTP API behind the fleet's haproxy: a public ``GET …/top`` answered by the balancer's cache
for its max-age (the API sees one request per second and URL, however many clients ask), anything
with a token and every other route passed through; a spectator's read budget kept per client
address from the balancer's ``X-Forwarded-For``, which a client cannot forge."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from fleet.haproxy import API_BACKEND, BalancerConfig, Gateway, Haproxy
from fleet.redis_server import RedisServer, free_port
from leaderboard.budget import MAX_COST

from .conftest import until
from .test_api import PLAYER, SERVER, api_process, own_redis, problem, publish, seed, spublish

pytestmark = pytest.mark.skipif(Haproxy.binary() is None, reason="haproxy is not installed (./dev install)")


@pytest.fixture(scope="module")
async def balanced(redis_server: RedisServer) -> AsyncIterator[tuple[str, Haproxy]]:
    """One API process for the module behind a haproxy with the top cache; the balancer's URL."""
    budget = {"LB_API_READ_RATE": "1", "LB_API_READ_BURST": str(MAX_COST)}
    # haproxy connects from 127.0.0.1: its X-Forwarded-For is the client's (the fleet's setting)
    with api_process(redis_server.url, **budget, LB_API_TRUSTED_PROXIES="127.0.0.1") as url:
        config = BalancerConfig(
            (Gateway("gw-1", "127.0.0.2:1"),),  # no gateway answers: only /v1/ is asked here
            apis=(Gateway("api-1", url.removeprefix("http://")),),
            bind=f"127.0.0.1:{free_port()}",
            stats_socket="",
            log="",
        )
        async with Haproxy(config) as lb:
            await until(lambda: _up(lb), 10)
            yield f"http://{config.bind}", lb


async def _up(lb: Haproxy) -> bool:
    return (await lb.servers(API_BACKEND))["api-1"]["status"] == "UP"


async def reached_api(lb: Haproxy) -> int:
    """Answers the API process gave through the balancer so far."""
    row: dict[str, Any] = (await lb.servers(API_BACKEND))["api-1"]
    return sum(int(row[f"hrsp_{k}xx"] or 0) for k in range(1, 6))


async def test_a_public_top_is_answered_by_the_balancers_cache_within_its_max_age(
    balanced: tuple[str, Haproxy], r: aioredis.Redis
) -> None:
    url, lb = balanced
    await seed(r)
    await publish(r, "mode:cached", 1)
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        first = await http.get("/v1/boards/mode:cached/top")
        assert first.status_code == 200 and first.headers["cache-control"].startswith("max-age=1")
        before = await reached_api(lb)
        again = [await http.get("/v1/boards/mode:cached/top") for _ in range(5)]
        etag = first.headers["etag"]
        same = await http.get("/v1/boards/mode:cached/top", headers={"If-None-Match": etag})
        passed = await reached_api(lb) - before
        # within the second: the cached copy (one refill at most, when its second ran out meanwhile)
        assert passed <= 1 and all(a.content == first.content for a in again)
        assert same.status_code == 304 and same.headers["etag"] == etag

        # a token (a bad one must be refused by the API), another route: never from the cache
        before = await reached_api(lb)
        problem(
            await http.get("/v1/boards/mode:cached/top", headers={"Authorization": "Bearer x"}), 401, "invalid_token"
        )
        assert (await http.get("/v1/boards/mode:cached/top", headers=PLAYER)).status_code == 200
        mine = await http.get("/v1/boards/mode:cached/players/mia", headers=PLAYER)
        assert mine.status_code == 200
        assert await reached_api(lb) - before == 3

        # the next snapshot reaches a public client within the cache's max-age (and the API's watch)
        await spublish(r, "mode:cached", 2)
        published = time.monotonic()

        async def newer() -> bool:
            resp = await http.get("/v1/boards/mode:cached/top")
            return str(resp.headers.get("etag", "")).endswith('.2"')

        await until(newer, 5)
        assert time.monotonic() - published < 3  # 1 s held here, the API's pub/sub in front of it


async def test_the_operators_console_is_reached_through_the_balancer(balanced: tuple[str, Haproxy]) -> None:
    url, lb = balanced
    before = await reached_api(lb)
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        signin = await http.get("/console")  # the API's sign-in form, not the gateways' 404
        assert signin.status_code == 401 and signin.headers["content-type"].startswith("text/html")
        problem(await http.get("/console", headers=PLAYER), 403, "forbidden")
        page = await http.get("/console", headers=SERVER)
        assert page.status_code == 200 and page.headers["cache-control"] == "no-store"
    assert await reached_api(lb) == before + 3


async def test_a_spectators_budget_is_its_own_address_behind_the_balancer(balanced: tuple[str, Haproxy]) -> None:
    url, _ = balanced
    finals = "/v1/boards/global/finals?n=10"  # the dearest read a spectator may make: the whole budget

    def client(address: str) -> httpx.AsyncClient:
        transport = httpx.AsyncHTTPTransport(local_address=address)
        return httpx.AsyncClient(base_url=url, timeout=10, transport=transport)

    async with client("127.0.0.3") as one, client("127.0.0.4") as other:
        assert (await one.get(finals)).status_code == 200
        # spent; a forged X-Forwarded-For is replaced by the balancer's, so it buys nothing
        problem(await one.get(finals, headers={"X-Forwarded-For": "203.0.113.9"}), 429, "rate_limited")
        # another address behind the same balancer has a budget of its own
        assert (await other.get(finals)).status_code == 200


async def test_a_redis_outage_reaches_clients_as_the_apis_own_answers_not_the_balancers(tmp_path: Path) -> None:
    """Redis stopped behind the balancer: the API stays in (its health check does not need Redis),
    so a client gets the held top while its stale-if-error lasts, then the API's problem+json 503
    with Retry-After — never haproxy's own error page for a backend without a server."""
    async with own_redis(tmp_path, "global", 1) as (server, _):
        hold = {"LB_API_TOP_TTL": "0.2", "LB_API_STALE_IF_ERROR": "1.5", "LB_API_REDIS_TIMEOUT": "0.5"}
        with api_process(server.url, **hold) as api:
            config = BalancerConfig(
                (Gateway("gw-1", "127.0.0.2:1"),),
                apis=(Gateway("api-1", api.removeprefix("http://")),),
                bind=f"127.0.0.1:{free_port()}",
                stats_socket="",
                log="",
                check_interval_ms=100,  # two failed checks would take it out within 0.2 s
            )
            async with Haproxy(config) as lb, httpx.AsyncClient(base_url=f"http://{config.bind}", timeout=10) as http:
                await until(lambda: _up(lb), 10)
                fresh = await http.get("/v1/boards/global/top")
                assert fresh.status_code == 200
                server.stop()
                stopped = time.monotonic()
                seen: list[httpx.Response] = []

                async def outlasted() -> bool:
                    # a refusal seen, and ten of haproxy's checks since Redis stopped: five times
                    # what it takes to mark a server down
                    seen.append(await http.get("/v1/boards/global/top"))
                    return seen[-1].status_code == 503 and time.monotonic() - stopped > 10 * 0.1

                await until(outlasted, 15)
                assert seen[0].status_code == 200  # asked at once: within the hold's stale-if-error
                for answer in seen:
                    if answer.status_code == 200:  # held: the same top, its ETag
                        assert answer.content == fresh.content and answer.headers["etag"] == fresh.headers["etag"]
                    else:
                        assert problem(answer, 503, "unavailable") and answer.headers["retry-after"] == "1"
                stats = await http.get("/v1/boards/global/stats")
                problem(stats, 503, "unavailable")
                assert stats.headers["retry-after"] == "1"
                assert await _up(lb)
