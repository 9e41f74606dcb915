"""The HTTP API as a real process (``python -m api``) against the suite's redis-server, and a real
scorer where a submission must be applied: each route, the idempotent retry, the roles, every
refusal's status and code, and the OpenAPI document."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import jsonschema
import pytest
import redis
import redis.asyncio as aioredis
from openapi_spec_validator import validate
from prometheus_client.parser import text_string_to_metric_families

from api.routes import openapi
from fleet.redis_server import RedisServer, free_port
from leaderboard import GameConfig, Leaderboard, Submission, boards, now_ms, snapshot
from leaderboard.auth import issue
from leaderboard.definitions import configured
from leaderboard.library import library_code
from leaderboard.windows import window

from .conftest import until

ROOT = Path(__file__).resolve().parent.parent
SECRET = "api-test-secret-of-at-least-32-bytes!"
GAME = "test"


def token(player: str, role: str) -> dict[str, str]:
    # a day: the module's tokens are made when the suite is collected and used whenever the
    # module's turn comes, in whichever of the suite's processes
    return {"Authorization": "Bearer " + issue(player, role, SECRET, exp=time.time() + 86_400)}


SERVER, PLAYER = token("backend", "server"), token("mia", "player")


def _env(redis_url: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LB_")}
    return {**env, "LB_REDIS_URL": redis_url, "LB_GAME": GAME, "LB_JWT_SECRETS": SECRET, **extra}


@pytest.fixture(scope="module")
def api_url(redis_server: RedisServer) -> Iterator[str]:
    """One API process for the module: it holds no state, so the tests' flushes do not matter to it."""
    with api_process(redis_server.url) as url:
        yield url


@contextlib.contextmanager
def api_process(redis_url: str, log: Path | None = None, /, **env: str) -> Iterator[str]:
    """A ``python -m api`` process on a free port; its stderr (its log) appended to ``log`` if given."""
    port = free_port()
    stack = contextlib.ExitStack()
    proc = subprocess.Popen(
        [sys.executable, "-m", "api"],
        stderr=stack.enter_context(log.open("ab")) if log else None,
        cwd=ROOT,
        env=_env(
            redis_url,
            LB_API_PORT=str(port),
            LB_LOG_LEVEL="WARNING",
            # a test of the budget sets its own
            **{"LB_API_MAX_BODY": "512", "LB_API_READ_RATE": "100000", **env},
        ),
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            assert proc.poll() is None, "python -m api exited"
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(url + "/v1/openapi.json", timeout=1).status_code == 200:
                    break
            assert time.monotonic() < deadline, "python -m api did not answer within 20 s"
            time.sleep(0.02)  # a process starting: no event to await across processes
        yield url
    finally:
        proc.terminate()
        try:
            assert proc.wait(timeout=10) == 0  # a clean stop: the requests under way finished
        finally:
            stack.close()


@pytest.fixture
async def http(api_url: str, redis_url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=api_url, timeout=10) as client:
        yield client


@contextlib.asynccontextmanager
async def scorer(redis_url: str, **env: str) -> AsyncIterator[None]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "scorer",
        cwd=ROOT,
        env=_env(redis_url, LB_SCORER_METRICS_PORT="0", LB_SCORER_BLOCK_MS="20", LB_LOG_LEVEL="WARNING", **env),
    )
    try:
        yield
    finally:
        proc.terminate()
        await asyncio.wait_for(proc.wait(), 10)


async def post_applied(
    http: httpx.AsyncClient, path: str, slip: dict[str, Any], headers: dict[str, str] = SERVER
) -> httpx.Response:
    """``POST path?wait=applied``, answered with the slip's outcome however long the scorer takes:
    a 202 (still pending past LB_API_WAIT_MAX on a loaded machine) waits, bounded, for the slip's
    status route to leave pending, then asks again (a retry: the same answer, now the outcome)."""
    resp = await http.post(path, params={"wait": "applied"}, json=slip, headers=headers)
    if resp.status_code != 202:
        return resp
    status = path[: path.index("boards/")] + "submissions/" + quote(resp.json()["submission"], safe="")

    async def decided() -> bool:
        return bool((await http.get(status, headers=headers)).json()["status"] != "pending")  # a server token

    await until(decided, 30)
    return await http.post(path, params={"wait": "applied"}, json=slip, headers=headers)


def problem(resp: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"] == "application/problem+json"
    body = resp.json()
    assert body["code"] == code and body["status"] == status and body["detail"]
    return dict(body)


async def _definition(lb: Leaderboard, board: str) -> dict[str, Any] | None:
    raw = await lb.redis.hget(lb.keys.boards, board)
    return None if raw is None else dict(json.loads(raw))


async def seed(r: aioredis.Redis) -> None:
    lb = Leaderboard(r, GameConfig(game=GAME))
    now = now_ms()
    slips = [Submission(f"m{i}", f"p{i}", 100 * i, now) for i in range(1, 8)]
    await lb.submit_batch([s.fields() for s in [*slips, Submission("me", "mia", 350, now, region="eu")]])


def answer_schema(name: str) -> jsonschema.Draft202012Validator:
    """A validator of the OpenAPI document's component ``name``, its references resolved in it."""
    document = openapi()
    return jsonschema.Draft202012Validator(
        {**document["components"]["schemas"][name], "components": document["components"]}
    )


async def test_reads_answer_as_the_socket_does(http: httpx.AsyncClient, r: aioredis.Redis) -> None:
    await seed(r)
    top = await http.get("/v1/boards/global/top", params={"n": 3})
    assert top.status_code == 200
    body = top.json()
    assert body["type"] == "top" and body["board"] == "global" and body["window"] == "weekly"
    assert [(e["rank"], e["player"], e["score"]) for e in body["entries"]] == [
        (1, "p7", 700),
        (2, "p6", 600),
        (3, "p5", 500),
    ]
    daily = (await http.get("/v1/boards/region:eu/top", params={"window": "daily"})).json()
    assert daily["window"] == "daily" and [e["player"] for e in daily["entries"]] == ["mia"]

    me = (await http.get("/v1/boards/global/players/mia", headers=PLAYER)).json()
    assert (me["rank"], me["score"], me["size"]) == (5, 350, 8)
    other = (await http.get("/v1/boards/global/players/p1", headers=SERVER)).json()
    assert (other["rank"], other["score"]) == (8, 100)
    around = (await http.get("/v1/boards/global/players/mia/around", params={"k": 1}, headers=PLAYER)).json()
    assert [e["player"] for e in around["entries"]] == ["p4", "mia", "p3"]

    friends = await http.post(
        "/v1/boards/global/players:ranks", json={"players": ["p2", "mia", "nobody"]}, headers=PLAYER
    )
    assert [(f["player"], f["rank"]) for f in friends.json()["players"]] == [("p2", 7), ("mia", 5), ("nobody", None)]
    problem(await http.post("/v1/boards/global/players:ranks", json={"players": ["mia"]}), 401, "auth_required")
    problem(
        await http.post("/v1/boards/global/players:ranks", json={"players": []}, headers=PLAYER), 400, "bad_message"
    )
    stats = (await http.get("/v1/boards/region:eu/stats")).json()
    assert (stats["type"], stats["size"], stats["players"]) == ("stats", 1, 8)
    # each answer is what the document says: the socket's reply, from the same definitions
    for name, answer in [("Top", body), ("Rank", me), ("Around", around), ("Ranks", friends.json()), ("Stats", stats)]:
        assert answer_schema(name).is_valid(answer), (name, answer)
    assert not answer_schema("Top").is_valid({**body, "extra": 1})


async def test_the_top_comes_from_the_published_snapshot_with_its_etag(
    http: httpx.AsyncClient, r: aioredis.Redis, redis_url: str
) -> None:
    await seed(r)
    slip = {"player_id": "zoe", "score": 900, "match_id": "z-1"}
    async with scorer(redis_url, LB_TICK_MS="20"):
        await post_applied(http, "/v1/boards/global/scores", slip)
        tagged: list[httpx.Response] = []

        async def published() -> bool:
            resp = await http.get("/v1/boards/global/top", params={"n": 2})
            tagged[:] = [resp]
            held = resp.headers["etag"].startswith(f'"{resp.json()["period"]}.')  # the snapshot's ETag
            return held and resp.json()["entries"][0]["player"] == "zoe"

        await until(published, 10)
        [first] = tagged
        assert first.headers["cache-control"] == "max-age=1, stale-while-revalidate=1, stale-if-error=10"
        assert [(e["rank"], e["player"]) for e in first.json()["entries"]] == [(1, "zoe"), (2, "p7")]
        etag = first.headers["etag"]
        assert etag.startswith(f'"{first.json()["period"]}.')

        same = await http.get("/v1/boards/global/top", params={"n": 2}, headers={"If-None-Match": etag})
        assert same.status_code == 304 and same.content == b"" and same.headers["etag"] == etag

        slip = {"player_id": "ada", "score": 950, "match_id": "a-1"}
        await post_applied(http, "/v1/boards/global/scores", slip)

        async def changed() -> bool:
            resp = await http.get("/v1/boards/global/top", params={"n": 2}, headers={"If-None-Match": etag})
            tagged[:] = [resp]
            return resp.status_code == 200

        await until(changed, 10)
        assert tagged[0].headers["etag"] != etag and tagged[0].json()["entries"][0]["player"] == "ada"
    # more entries than a snapshot holds are read from the board: cacheable the same way
    past = await http.get("/v1/boards/global/top", params={"window": "alltime", "n": 50})
    assert past.status_code == 200 and past.headers["etag"] != etag
    assert past.headers["cache-control"] == first.headers["cache-control"]


async def test_a_submission_is_queued_then_applied_once(
    http: httpx.AsyncClient, r: aioredis.Redis, redis_url: str
) -> None:
    slip = {"player_id": "ana", "delta": 40, "match_id": "match-1"}
    queued = await http.post("/v1/boards/global/scores", json=slip, headers=SERVER)
    assert queued.status_code == 202 and queued.json()["submission"] == "match-1" and queued.json()["stream_id"]
    async with scorer(redis_url):
        applied = await post_applied(http, "/v1/boards/global/scores", slip)
        assert applied.status_code == 200, applied.text
        assert applied.json()["status"] == "applied" and applied.json()["submission"] == "match-1"
        # a retry, by the header this time: the same outcome, nothing applied twice
        retry = await post_applied(
            http,
            "/v1/boards/global/scores",
            {"player_id": "ana", "delta": 40},
            {**SERVER, "Idempotency-Key": "match-1"},
        )
        assert retry.status_code == 200 and retry.json()["status"] == "applied"
        lb = Leaderboard(r, GameConfig(game=GAME))
        await until(lambda: _queue_empty(r), 5)
        me = (await http.get("/v1/boards/global/players/ana", headers=SERVER)).json()
        assert me["score"] == 40  # once, although filed three times

        refused = await post_applied(
            http,
            "/v1/boards/global/scores",
            # the queue takes it (below the cap), the board cannot hold 40 + it: the scorer refuses
            {"player_id": "ana", "delta": GameConfig(game=GAME).rules().max_points, "match_id": "too-much"},
        )
        assert refused.status_code == 200 and refused.json()["status"] == "refused" and refused.json()["code"]
        assert (await lb.ranks(["ana"], "weekly", "global")).standings[0].score == 40


async def _queue_empty(r: aioredis.Redis) -> bool:
    return int(await r.xlen(GameConfig(game=GAME).keys.submissions)) == 0


async def test_writes_need_a_server_token(http: httpx.AsyncClient, r: aioredis.Redis) -> None:
    slip = {"player_id": "mia", "score": 10, "match_id": "m"}
    problem(await http.post("/v1/boards/global/scores", json=slip), 401, "auth_required")
    problem(await http.post("/v1/boards/global/scores", json=slip, headers=PLAYER), 403, "forbidden")
    problem(await http.get("/v1/boards/global/players/mia"), 401, "auth_required")
    assert int(await r.xlen(GameConfig(game=GAME).keys.submissions)) == 0


@pytest.mark.parametrize(
    ("headers", "code"),
    [
        ({"Authorization": "Bearer not-a-jwt"}, "invalid_token"),
        ({"Authorization": "Basic dXNlcjpwYXNz"}, "invalid_token"),
        ({"Authorization": "Bearer " + issue("mia", "player", SECRET, exp=time.time() - 60)}, "token_expired"),
        (
            {"Authorization": "Bearer " + issue("mia", "server", "another-secret-of-at-least-32-bytes", exp=2e9)},
            "invalid_token",
        ),
    ],
)
async def test_a_bad_token_is_refused(http: httpx.AsyncClient, headers: dict[str, str], code: str) -> None:
    resp = await http.get("/v1/boards/global/top", headers=headers)
    problem(resp, 401, code)
    assert resp.headers["www-authenticate"] == "Bearer"


BAD_WRITES = [
    (b"{not json", {}, 400, "bad_json"),
    (b"[1, 2]", {}, 400, "bad_json"),
    (json.dumps({"player_id": "mia", "score": "ten", "match_id": "m"}).encode(), {}, 400, "invalid_points"),
    (json.dumps({"player_id": "mia", "score": 1.5, "match_id": "m"}).encode(), {}, 400, "invalid_points"),
    (json.dumps({"player_id": 7, "score": 1, "match_id": "m"}).encode(), {}, 400, "invalid_player"),
    (json.dumps({"player_id": "mia", "score": 1}).encode(), {}, 400, "missing_id"),
    # the types and fields of the document's Score, no looser
    (json.dumps({"player_id": "mia", "score": "1200", "match_id": "m"}).encode(), {}, 400, "invalid_points"),
    (json.dumps({"player_id": "mia", "score": True, "match_id": "m"}).encode(), {}, 400, "invalid_points"),
    (json.dumps({"player_id": "mia", "score": 1, "match_id": "m", "ts": "1"}).encode(), {}, 400, "invalid_timestamp"),
    (json.dumps({"playerId": "mia", "score": 1, "match_id": "m"}).encode(), {}, 400, "unknown_field"),
    (json.dumps({"score": 1, "match_id": "m"}).encode(), {}, 400, "missing_field"),
    (json.dumps({"player_id": "mia", "score": 1, "match_id": 7}).encode(), {}, 400, "invalid_id"),
    (json.dumps({"player_id": "mia", "score": 1, "delta": 1, "match_id": "m"}).encode(), {}, 400, "bad_message"),
    (
        json.dumps({"player_id": "mia", "score": 1, "match_id": "m"}).encode(),
        {"Idempotency-Key": "n"},
        400,
        "bad_message",
    ),
    (json.dumps({"player_id": "mia", "score": 1, "match_id": "m", "ts": 1}).encode(), {}, 400, "timestamp_too_old"),
    (json.dumps({"player_id": "mia", "score": 1, "match_id": "m" * 600}).encode(), {}, 413, "body_too_large"),
]


@pytest.mark.parametrize(("body", "headers", "status", "code"), BAD_WRITES)
async def test_a_bad_write_is_refused_and_writes_nothing(
    http: httpx.AsyncClient, r: aioredis.Redis, body: bytes, headers: dict[str, str], status: int, code: str
) -> None:
    resp = await http.post(
        "/v1/boards/global/scores", content=body, headers={**SERVER, "Content-Type": "application/json", **headers}
    )
    problem(resp, status, code)
    assert await r.dbsize() == 0


async def test_bad_reads_are_refused(http: httpx.AsyncClient) -> None:
    problem(await http.get("/v1/boards/global/top", params={"window": "hourly"}), 400, "invalid_window")
    problem(await http.get("/v1/boards/planet:x/top"), 404, "bad_board")
    problem(await http.get("/v1/boards/global/top", params={"n": "0"}), 400, "bad_message")
    problem(await http.get("/v1/boards/global/top", params={"n": "lots"}), 400, "bad_message")
    problem(await http.get("/v1/boards/global/top", params={"period": "1999-W01"}), 400, "bad_period")
    problem(await http.get("/v1/boards/global/top", params={"game": "chess"}), 404, "unknown_game")
    problem(
        await http.get("/v1/boards/global/players/mia/around", params={"k": 99}, headers=PLAYER), 400, "bad_message"
    )
    problem(await http.get("/v1/nowhere"), 404, "not_found")
    problem(await http.delete("/v1/boards/global/top"), 405, "method_not_allowed")
    problem(
        await http.post("/v1/boards/global/scores", content=b"x", headers={**SERVER, "Content-Type": "text/plain"}),
        415,
        "unsupported_media_type",
    )


async def test_the_openapi_document_is_served_valid_and_checked_in(http: httpx.AsyncClient) -> None:
    served = (await http.get("/v1/openapi.json")).json()
    assert served == openapi()
    validate(served)
    checked_in = (ROOT / "docs" / "openapi.json").read_text()
    assert json.loads(checked_in) == served, "regenerate: python -m api --openapi > docs/openapi.json"


def test_redis_unreachable_is_503_with_retry_after() -> None:
    with api_process(f"redis://127.0.0.1:{free_port()}/0") as url:  # nobody listens there
        top = httpx.get(url + "/v1/boards/global/top", timeout=10)
        problem(top, 503, "unavailable")
        assert top.headers["retry-after"] == "1"
        # still ready: a balancer must leave it in, or clients get the balancer's page, not this
        assert httpx.get(url + "/readyz", timeout=10).status_code == 200
        slip = {"player_id": "mia", "score": 1, "match_id": "m"}
        problem(httpx.post(url + "/v1/boards/global/scores", json=slip, headers=SERVER, timeout=10), 503, "unavailable")


async def publish(r: aioredis.Redis, board: str, version: int) -> None:
    """A board's snapshot stored as the scorer's publisher stores it (the same builder)."""
    lb, now = Leaderboard(r, GameConfig(game=GAME)), now_ms()
    top = await lb.top("weekly", board, GameConfig(game=GAME).top_n, at=now)
    await r.set(lb.config.keys.latest("weekly", board), snapshot.build(board, top, version=version, ts_ms=now))


async def get_calls(r: aioredis.Redis) -> int:
    return int((await r.info("commandstats")).get("cmdstat_get", {}).get("calls", 0))


@contextlib.asynccontextmanager
async def own_redis(tmp_path: Path, scope: str, version: int) -> AsyncIterator[tuple[RedisServer, aioredis.Redis]]:
    """A Redis of the test's own (the module's API process reads the shared one too), the library
    loaded, the game seeded and a snapshot of ``scope`` published; stopped at the end."""
    server = RedisServer(tmp_path).start()
    try:
        raw = redis.Redis.from_url(server.url)
        raw.function_load(library_code(), replace=True)
        raw.close()
        client = aioredis.Redis.from_url(server.url, decode_responses=True)
        try:
            await seed(client)
            await publish(client, scope, version)
            yield server, client
        finally:
            await client.aclose()
    finally:
        server.stop()


async def test_concurrent_requests_for_a_top_read_redis_once(tmp_path: Path) -> None:
    # its own Redis: the GETs counted are this API process's alone; a hold that outlasts the
    # requests however loaded the machine is
    async with own_redis(tmp_path, "region:eu", 3) as (server, r):
        with api_process(server.url, LB_API_TOP_TTL="60") as url:
            async with httpx.AsyncClient(base_url=url, timeout=10) as http:
                before = await get_calls(r)
                answers = await asyncio.gather(*(http.get("/v1/boards/region:eu/top") for _ in range(30)))
                # one read in flight, the others awaited it (then it was held); and one when the
                # board's subscription was confirmed, from which on pub/sub keeps it current
                assert await get_calls(r) - before <= 2
    etag = f'"{answers[0].json()["period"]}.3"'
    assert {(a.status_code, a.headers["etag"]) for a in answers} == {(200, etag)}


async def test_a_held_top_is_served_stale_while_redis_is_down_then_503(tmp_path: Path) -> None:
    async with own_redis(tmp_path, "global", 1) as (server, _):
        hold = {"LB_API_TOP_TTL": "0.2", "LB_API_STALE_IF_ERROR": "1.5", "LB_API_REDIS_TIMEOUT": "0.5"}
        with api_process(server.url, **hold) as url:
            async with httpx.AsyncClient(base_url=url, timeout=10) as http:
                fresh = await http.get("/v1/boards/global/top")
                assert fresh.status_code == 200 and "age" not in fresh.headers  # fresh
                server.stop()
                stopped = time.monotonic()
                seen: list[tuple[float, httpx.Response]] = []

                async def refused() -> bool:
                    resp = await http.get("/v1/boards/global/top")
                    seen.append((time.monotonic() - stopped, resp))
                    return resp.status_code == 503

                await until(refused, 10)
                served = [(t, a) for t, a in seen if a.status_code == 200]
                # past the hold, Redis refusing: the held top, the same ETag, its age told
                assert any(t > 0.3 for t, _ in served)
                assert {a.headers["etag"] for _, a in served} == {fresh.headers["etag"]}
                assert all(a.content == fresh.content for _, a in served)
                problem(seen[-1][1], 503, "unavailable")


async def test_a_player_id_with_a_slash_or_percent_is_addressable(http: httpx.AsyncClient, r: aioredis.Redis) -> None:
    lb, now = Leaderboard(r, GameConfig(game=GAME)), now_ms()
    await lb.submit_batch(
        [Submission("s1", "clan/ana", 500, now).fields(), Submission("s2", "50%off", 40, now).fields()]
    )
    for player, rank in (("clan/ana", 1), ("50%off", 2)):
        path = "/v1/boards/global/players/" + quote(player, safe="")
        me = await http.get(path, headers=SERVER)
        assert me.status_code == 200 and (me.json()["player"], me.json()["rank"]) == (player, rank), me.text
        around = (await http.get(path + "/around", params={"k": 0}, headers=SERVER)).json()
        assert [e["player"] for e in around["entries"]] == [player]
    # unencoded, the '/' is a path separator: no such route
    problem(await http.get("/v1/boards/global/players/clan/ana", headers=SERVER), 404, "not_found")


async def test_an_unexpected_failure_is_a_logged_problem_500(http: httpx.AsyncClient, r: aioredis.Redis) -> None:
    # a stored snapshot no scorer wrote (not JSON): nothing the API expects
    await r.set(GameConfig(game=GAME).keys.latest("weekly", "mode:broken"), "{not json")
    resp = await http.get("/v1/boards/mode:broken/top")
    problem(resp, 500, "internal")


def test_a_players_reads_are_budgeted_then_429_with_retry_after(redis_server: RedisServer) -> None:
    from leaderboard.budget import MAX_COST

    budget = {"LB_API_READ_RATE": "1", "LB_API_READ_BURST": str(MAX_COST), "LB_API_MAX_BODY": "4096"}
    with api_process(redis_server.url, **budget) as url:
        friends = {"players": [f"f{i}" for i in range(MAX_COST)]}  # the dearest read: the whole budget
        path = url + "/v1/boards/global/players:ranks"
        assert httpx.post(path, json=friends, headers=PLAYER, timeout=10).status_code == 200
        refused = httpx.post(path, json=friends, headers=PLAYER, timeout=10)
        problem(refused, 429, "rate_limited")
        assert 1 <= int(refused.headers["retry-after"]) <= MAX_COST  # 1 unit/s back: until the read fits
        # per token subject: another player, and a game server (trusted), still read
        other = token("ben", "player")
        assert httpx.post(path, json=friends, headers=other, timeout=10).status_code == 200
        assert httpx.post(path, json=friends, headers=SERVER, timeout=10).status_code == 200


def test_x_forwarded_for_is_believed_from_a_configured_balancer_only(redis_server: RedisServer) -> None:
    from leaderboard.budget import MAX_COST

    # a balancer on another host (127.0.0.5: not uvicorn's loopback default), and a client on this
    # one (127.0.0.1) that forges the header to pick a budget of its own
    budget = {"LB_API_READ_RATE": "1", "LB_API_READ_BURST": str(MAX_COST), "LB_API_TRUSTED_PROXIES": "127.0.0.5"}
    finals = "/v1/boards/global/finals?n=10"  # the dearest read a spectator may make: the whole budget
    with api_process(redis_server.url, **budget) as url:

        def get(source: str, forwarded: str) -> httpx.Response:
            transport = httpx.HTTPTransport(local_address=source)
            with httpx.Client(base_url=url, transport=transport, timeout=10) as http:
                return http.get(finals, headers={"X-Forwarded-For": forwarded})

        # from the balancer: each forwarded client has its own budget, the last value counts
        assert get("127.0.0.5", "203.0.113.1").status_code == 200
        problem(get("127.0.0.5", "198.51.100.7, 203.0.113.1"), 429, "rate_limited")
        assert get("127.0.0.5", "203.0.113.2").status_code == 200
        # from anyone else the header is ignored: the peer's own budget, whatever it names
        assert get("127.0.0.1", "203.0.113.3").status_code == 200
        problem(get("127.0.0.1", "203.0.113.4"), 429, "rate_limited")


def _held_body(port: int, headers: dict[str, str], sent: bytes, declared: int) -> socket.socket:
    """A connection whose request declares ``declared`` bytes of body and has sent ``sent``."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    sock.sendall(
        f"POST /v1/boards/global/players:ranks HTTP/1.1\r\nHost: api\r\nContent-Type: application/json\r\n"
        f"Content-Length: {declared}\r\n{head}\r\n".encode()
        + sent
    )
    return sock


def test_a_slow_body_is_408_in_one_log_line_and_a_client_gone_mid_body_is_no_error(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    log = tmp_path / "api.log"
    with api_process(redis_server.url, log, LB_API_BODY_TIMEOUT="0.3") as url:
        port = int(url.rsplit(":", 1)[1])
        # a player's client that sends part of its body, then goes away
        _held_body(port, PLAYER, b'{"players": ["mi', 100).close()
        # one that sends part and stops: refused once the bound has passed, and the connection closed
        with _held_body(port, PLAYER, b'{"players": ["mi', 100) as slow:
            answer = b""
            while chunk := slow.recv(65536):  # until the server closes it (10 s timeout: a hang fails)
                answer += chunk
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 408 ")
        assert b"content-type: application/problem+json" in head.lower()
        assert json.loads(body)["code"] == "request_timeout"
        # the server still answers a whole body at once
        friends = {"players": ["mia"]}
        assert httpx.post(url + "/v1/boards/global/players:ranks", json=friends, headers=PLAYER).status_code == 200
    # the process has stopped (its requests finished): its whole log is written
    text = log.read_text()
    assert "Traceback" not in text and "ERROR" not in text, text
    assert len([line for line in text.splitlines() if "LB_API_BODY_TIMEOUT" in line]) == 1, text


async def spublish(r: aioredis.Redis, board: str, version: int) -> None:
    """A board's snapshot published only (not stored): pub/sub alone can bring it to the API."""
    lb, now = Leaderboard(r, GameConfig(game=GAME)), now_ms()
    top = await lb.top("weekly", board, GameConfig(game=GAME).top_n, at=now)
    channel = GameConfig(game=GAME).keys.snapshot_channel("weekly", board)
    await r.execute_command("SPUBLISH", channel, snapshot.build(board, top, version=version, ts_ms=now))


async def test_a_watched_top_comes_from_pub_sub_with_no_redis_read(tmp_path: Path) -> None:
    # its own Redis: the GETs counted are this API process's alone
    async with own_redis(tmp_path, "mode:duo", 3) as (server, r):
        with api_process(server.url) as url:
            async with httpx.AsyncClient(base_url=url, timeout=10) as http:
                await _watched_top_reads_nothing(http, r)


async def _watched_top_reads_nothing(http: httpx.AsyncClient, r: aioredis.Redis) -> None:
    first = await http.get("/v1/boards/mode:duo/top")  # the first request subscribes the API to the board
    assert first.headers["etag"].endswith('.3"')

    async def tagged(version: int) -> bool:
        resp = await http.get("/v1/boards/mode:duo/top")
        return str(resp.headers.get("etag", "")).endswith(f'.{version}"')

    version = 4

    # until the subscription is live: a published snapshot (never stored) reaches the answers; the
    # read made on the subscription's confirmation is over by then (the reader makes it before it
    # takes the messages that follow)
    async def live() -> bool:
        nonlocal version
        version += 1
        await spublish(r, "mode:duo", version)
        for _ in range(20):  # a few looks for this one: a message before the subscription is lost
            if await tagged(version):
                return True
        return False

    await until(live, 10)
    before = await get_calls(r)
    answers = [await http.get("/v1/boards/mode:duo/top") for _ in range(20)]
    await spublish(r, "mode:duo", version + 1)
    await until(lambda: tagged(version + 1), 5)
    etag = f'"{answers[0].json()["period"]}.{version + 1}"'
    same = await http.get("/v1/boards/mode:duo/top", headers={"If-None-Match": etag})
    assert same.status_code == 304
    assert await get_calls(r) - before == 0  # no Redis read for any of them, past the hold's TTL too
    assert {a.headers["etag"] for a in answers} == {f'"{answers[0].json()["period"]}.{version}"'}


async def test_operator_actions_for_the_server_role(http: httpx.AsyncClient, r: aioredis.Redis) -> None:
    await seed(r)
    lb = Leaderboard(r, GameConfig(game=GAME))
    # a player token is refused every action, and nothing changes
    problem(await http.post("/v1/players/p7/ban", json={"reason": "x"}, headers=PLAYER), 403, "forbidden")
    problem(await http.post("/v1/players/p7/ban", json={"reason": "x"}), 401, "auth_required")
    assert (await lb.ranks(["p7"], "weekly", "global")).standings[0].rank == 1

    banned = await http.post("/v1/players/p7/ban", json={"reason": "cheating"}, headers=SERVER)
    assert banned.status_code == 200 and banned.json()["type"] == "banned" and banned.json()["boards"] >= 1
    assert (await lb.ranks(["p7"], "weekly", "global")).standings[0].rank is None
    unbanned = (await http.post("/v1/players/p7/unban", json={"reason": "appeal"}, headers=SERVER)).json()
    assert unbanned == {"type": "unbanned", "player": "p7", "was_banned": True}

    fix = {"points": 10, "reason": "refund", "window": "weekly"}
    corrected = (await http.post("/v1/players/p6/corrections", json=fix, headers=SERVER)).json()
    assert corrected["type"] == "corrected" and corrected["points"] == 10 and corrected["boards"]
    assert (await lb.ranks(["p6"], "weekly", "global")).standings[0].score == 10
    bad = {"points": -5, "reason": "x"}
    problem(await http.post("/v1/players/p6/corrections", json=bad, headers=SERVER), 400, "invalid_points")

    # profiles: a server sets anyone's; a player only their own name and country
    path = "/v1/players/mia/profile"
    assert (await http.put(path, json={"name": "Mia"}, headers=PLAYER)).json()["profile"]["name"] == "Mia"
    problem(await http.put("/v1/players/p1/profile", json={"name": "X"}, headers=PLAYER), 403, "forbidden")
    problem(await http.put(path, json={"avatar": "https://x.invalid/a.png"}, headers=PLAYER), 403, "forbidden")
    assert (await http.put("/v1/players/p1/profile", json={"country": "FR"}, headers=SERVER)).status_code == 200

    # tournaments: created, entered, refused for other bounds
    now = now_ms()
    span = {"start_ms": now - 1000, "end_ms": now + 3_600_000}
    made = (await http.put("/v1/tournaments/cup1", json=span, headers=SERVER)).json()
    assert made["window"] == "t-cup1"
    again = await http.put("/v1/tournaments/cup1", json=span, headers=SERVER)
    assert again.status_code == 200  # the same bounds: no-op
    other = {"start_ms": now, "end_ms": now + 10}
    problem(await http.put("/v1/tournaments/cup1", json=other, headers=SERVER), 409, "tournament_exists")
    joined = (await http.post("/v1/tournaments/cup1/players", json={"players": ["mia", "p1"]}, headers=SERVER)).json()
    assert joined["added"] == 2
    problem(
        await http.post("/v1/tournaments/nope/players", json={"players": ["mia"]}, headers=SERVER),
        404,
        "unknown_tournament",
    )
    problem(
        await http.post("/v1/tournaments/cup1/players", json={"players": ["mia"]}, headers=PLAYER), 403, "forbidden"
    )

    # a submission's status, for the game server that filed it
    status = (await http.get("/v1/submissions/m1", headers=SERVER)).json()
    assert status["type"] == "status" and status["status"] == "applied"
    problem(await http.get("/v1/submissions/m1", headers=PLAYER), 403, "forbidden")


async def test_board_definitions_for_the_server_role(http: httpx.AsyncClient, r: aioredis.Redis) -> None:
    lb = Leaderboard(r, GameConfig(game=GAME))
    tower = {"keys": [{"name": "floor"}, {"name": "time", "direction": "asc"}], "windows": ["daily"]}
    problem(await http.put("/v1/definitions/tower", json=tower, headers=PLAYER), 403, "forbidden")
    problem(await http.get("/v1/definitions", headers=PLAYER), 403, "forbidden")
    assert await _definition(lb, "tower") is None  # nothing written

    made = (await http.put("/v1/definitions/tower", json=tower, headers=SERVER)).json()
    assert made["action"] == "create" and made["definition"]["id"] == "tower" and made["definition"]["version"] == 1
    # the same one again: a no-op, version 1; a change of top N: an update, version 2
    assert (await http.put("/v1/definitions/tower", json=tower, headers=SERVER)).json()["definition"]["version"] == 1
    updated = (await http.put("/v1/definitions/tower", json={**tower, "top_n": 20}, headers=SERVER)).json()
    assert updated["action"] == "update" and updated["definition"]["version"] == 2
    shown = (await http.get("/v1/definitions/tower", headers=SERVER)).json()
    stored = await _definition(lb, "tower") or {}
    assert "encoding" not in stored  # lex, as the stored record of two keys reads without the field
    assert shown["definition"] == updated["definition"] == {**stored, "encoding": "lex"}
    # a shown definition sent back: an update that changes nothing but the version (the encoding
    # asked for is the board's: the stored record still reads without the field)
    again = (await http.put("/v1/definitions/tower", json=shown["definition"], headers=SERVER)).json()
    assert again["definition"] == {**shown["definition"], "version": 3}
    assert await _definition(lb, "tower") == {**stored, "version": 3}
    listed = (await http.get("/v1/definitions", headers=SERVER)).json()
    top = await http.get("/v1/boards/board:tower/top", params={"window": "daily"})
    assert top.status_code == 200 and top.json()["entries"] == [], top.text
    assert [(d["id"], d["encoding"]) for d in listed["boards"]] == [("default", "packed"), ("tower", "lex")]

    # refusals: a reorder, a bad definition, an id other than the path's, an unknown board
    flipped = {**tower, "keys": [{"name": "floor", "direction": "asc"}, {"name": "time"}]}
    problem(await http.put("/v1/definitions/tower", json=flipped, headers=SERVER), 409, "board_reorder")
    problem(await http.put("/v1/definitions/x", json={"keys": []}, headers=SERVER), 400, "board_no_keys")
    problem(await http.put("/v1/definitions/x", json={**tower, "id": "y"}, headers=SERVER), 400, "invalid_board_id")
    problem(await http.get("/v1/definitions/nope", headers=SERVER), 404, "unknown_board")
    assert (await http.get("/v1/definitions/tower", headers=SERVER)).json()["definition"]["version"] == 3

    # a correction of the defined board: key values instead of points
    await lb.submit_batch([{"id": "t1", "player": "mia", "board": "tower", "values": "3,500", "ts": str(now_ms())}])
    fix = {"values": [4, "400"], "reason": "lost run", "scopes": ["board:tower"]}
    corrected = (await http.post("/v1/players/mia/corrections", json=fix, headers=SERVER)).json()
    assert corrected["values"] == ["4", "400"] and corrected["boards"][0]["previous_keys"] == ["3", "500"]
    assert (await lb.top("daily", "board:tower", n=5)).entries[0].keys == (4, 400)
    short = {**fix, "values": [4]}
    problem(await http.post("/v1/players/mia/corrections", json=short, headers=SERVER), 400, "wrong_key_count")

    deleted = (await http.delete("/v1/definitions/tower", headers=SERVER)).json()
    assert deleted == {"type": "board", "action": "delete", "board": "tower"}
    problem(await http.delete("/v1/definitions/tower", headers=SERVER), 404, "unknown_board")
    assert await _definition(lb, "tower") is None


async def test_a_defined_board_takes_key_values_and_answers_with_them(
    http: httpx.AsyncClient, r: aioredis.Redis, redis_url: str
) -> None:
    lb = Leaderboard(r, GameConfig(game=GAME))
    tower = {
        "id": "tower",
        "keys": [{"name": "floor", "min": 0, "max": 1000}, {"name": "time", "direction": "asc"}],
        "windows": ["daily"],
        "metadata_bytes": 8,
    }
    await lb.create_board(boards.parse(tower))
    path = "/v1/boards/board:tower/scores"

    async def post(body: dict[str, Any], where: str = path) -> httpx.Response:
        slip = {"player_id": "ana", "match_id": "t0", **body}
        return await http.post(where, json=slip, headers=SERVER)

    # refused before the queue, with the codes the scorer would give; nothing queued
    problem(await post({"values": [1, 2]}, "/v1/boards/board:nope/scores"), 404, "unknown_board")
    problem(await post({"values": [1]}), 400, "wrong_key_count")
    problem(await post({"values": [1001, 5]}), 400, "key_out_of_range")
    problem(await post({"values": ["1", "9223372036854775808"]}), 400, "key_out_of_range")
    problem(await post({"values": [1, 5], "meta": "123456789"}), 400, "metadata_too_large")
    problem(await post({"values": [1, 5], "score": 3}), 400, "bad_message")
    problem(await post({"score": 3, "values": [1, 5]}, "/v1/boards/global/scores"), 400, "bad_message")
    # the game's boards take points while the game stores no default of key values (test_game_default.py)
    problem(await post({"values": [1, 5]}, "/v1/boards/global/scores"), 400, "wrong_key_count")
    problem(await post({"score": 3, "meta": "x"}, "/v1/boards/global/scores"), 400, "metadata_too_large")
    # the values as the document has them: an array of integers or decimal text
    problem(await post({"values": "1,5"}), 400, "wrong_key_count")
    problem(await post({"values": [1, "5x"]}), 400, "invalid_key_value")
    problem(await post({"values": [1, 5.0]}), 400, "invalid_key_value")
    assert await r.xlen(lb.keys.submissions) == 0

    async with scorer(redis_url):
        slip = {"player_id": "ana", "values": ["12", 81_250], "meta": "run-1", "match_id": "t1"}
        applied = await post_applied(http, path, slip)
        assert applied.status_code == 200 and applied.json()["status"] == "applied", applied.text
        [row] = applied.json()["boards"]
        assert (row["board"], row["window"], row["points"]) == ("board:tower", "daily", 12)
        assert (row["keys"], row["rank"], row["previous_rank"]) == (["12", "81250"], 1, None)
        ben = {"player_id": "ben", "values": [12, 79_900], "match_id": "t2"}
        applied = await post_applied(http, path, ben)
        rows = [(b["points"], b["keys"], b["rank"]) for b in applied.json()["boards"]]
        assert rows == [(12, ["12", "79900"], 1)]  # the same floor, sooner: ahead of ana

    friends = await http.post(
        "/v1/boards/board:tower/players:ranks", params={"window": "daily"}, json={"players": ["ana", "ben", "zed"]},
        headers=PLAYER,
    )  # fmt: skip
    assert friends.status_code == 200, friends.text
    rows = [(p["player"], p["rank"], p.get("keys")) for p in friends.json()["players"]]
    assert rows == [("ana", 2, ["12", "81250"]), ("ben", 1, ["12", "79900"]), ("zed", None, None)]


async def test_stats_answer_on_every_window_a_defined_board_keeps(http: httpx.AsyncClient, r: aioredis.Redis) -> None:
    """Its own monthly and season windows, which the game does not keep, as top reads them."""
    lb = Leaderboard(r, GameConfig(game=GAME))
    season = {"start_ms": now_ms() - 3_600_000, "length_s": 7 * 86_400}
    await lb.create_board(
        boards.parse({"id": "mon", "keys": [{"name": "v"}], "windows": ["monthly", "season"], "season": season})
    )
    [result] = await lb.submit_batch(
        [{"id": "mon-1", "player": "ana", "board": "mon", "values": "3", "ts": str(now_ms())}]
    )
    assert result.status == "ok"
    for window_name in ("monthly", "season"):
        stats = await http.get("/v1/boards/board:mon/stats", params={"window": window_name})
        assert stats.status_code == 200, stats.text
        top = (await http.get("/v1/boards/board:mon/top", params={"window": window_name})).json()
        assert (stats.json()["size"], stats.json()["period"]) == (1, top["period"])


async def test_a_stored_default_board_reaches_the_api_without_a_restart(
    http: httpx.AsyncClient, r: aioredis.Redis
) -> None:
    await seed(r)
    lb = Leaderboard(r, GameConfig(game=GAME))
    stored = {**configured(lb.config).as_dict(), "rank_mode": "competition", "windows": ["weekly"]}
    stored["keys"] = [{**stored["keys"][0], "max": window("weekly").max_points, "display": "money"}]
    made = await http.put("/v1/definitions/default", json=stored, headers=SERVER)
    assert made.status_code == 200 and made.json()["action"] == "create", made.text

    async def follows() -> bool:
        # not the held snapshot (the scorer's, republished by its publisher): a read of Redis
        top = (await http.get("/v1/boards/global/top", params={"n": 3, "period": "current"})).json()
        return bool(top["mode"] == "competition" and top["entries"][0].get("keys") == ["700"])

    await until(follows, 5)
    daily = await http.get("/v1/boards/global/top", params={"window": "daily"})
    problem(daily, 400, "invalid_window")  # a window the stored default no longer keeps
    # a window the environment does not keep: the game's boards laid out as the definition's own,
    # not as the packed points its entries hold
    refused = {**stored, "windows": ["weekly", "monthly"]}
    problem(await http.put("/v1/definitions/default", json=refused, headers=SERVER), 409, "board_reorder")
    # another time zone would misread the entries the game's boards hold (docs/data-model.md)
    reshaped = {**stored, "time_zone": "Europe/Paris"}
    problem(await http.put("/v1/definitions/default", json=reshaped, headers=SERVER), 409, "board_reorder")
    assert (await _definition(lb, "default") or {}).get("time_zone") == "UTC"
    assert (await http.delete("/v1/definitions/default", headers=SERVER)).status_code == 200

    async def back() -> bool:
        return bool((await http.get("/v1/boards/global/top", params={"window": "daily"})).status_code == 200)

    await until(back, 5)


async def test_finals_of_closed_periods(http: httpx.AsyncClient, r: aioredis.Redis) -> None:
    lb = Leaderboard(r, GameConfig(game=GAME))
    day = 86_400_000
    ts = (now_ms() // day - 2) * day + 1000  # two days ago, just after midnight
    await lb.submit_batch([Submission("old-1", "ana", 70, ts).fields()], now=ts)
    await lb.close(window("daily").period(ts), ["global"], top_n=5, keep=2, maxlen=100)
    finals = await http.get("/v1/boards/global/finals", params={"window": "daily", "n": 2})
    assert finals.status_code == 200, finals.text
    [closed] = finals.json()["periods"]
    assert [(e["rank"], e["player"], e["score"]) for e in closed["entries"]] == [(1, "ana", 70)]
    problem(await http.get("/v1/boards/global/finals", params={"n": 99}), 400, "bad_message")


async def test_only_a_board_with_a_published_snapshot_is_watched(http: httpx.AsyncClient, r: aioredis.Redis) -> None:
    keys = GameConfig(game=GAME).keys

    async def subscribers(board: str) -> int:
        reply = await r.execute_command("PUBSUB", "SHARDNUMSUB", keys.snapshot_channel("weekly", board))
        return int(reply[1])

    await seed(r)
    # any well-formed name may be asked for: answered (from Redis), but no subscription held for it
    for name in ("mode:nobody", "region:nowhere"):
        answer = await http.get(f"/v1/boards/{name}/top")
        assert answer.status_code == 200 and answer.json()["entries"] == []
    await publish(r, "mode:played", 1)
    assert (await http.get("/v1/boards/mode:played/top")).status_code == 200

    async def watched() -> bool:
        return await subscribers("mode:played") == 1

    await until(watched, 5)  # the published one: watched
    assert await subscribers("mode:nobody") == 0 and await subscribers("region:nowhere") == 0


async def test_the_top_sent_before_routing_is_the_routes_answer(http: httpx.AsyncClient, r: aioredis.Redis) -> None:
    await seed(r)
    await publish(r, "mode:same", 7)
    # no query but n: answered before Starlette (server.HeldTop); a window given: by the route
    n: dict[str, Any]
    for n in ({}, {"n": 3}):
        fast = await http.get("/v1/boards/mode:same/top", params=n)
        routed = await http.get("/v1/boards/mode:same/top", params={**n, "window": "weekly"})
        assert fast.status_code == routed.status_code == 200 and fast.content == routed.content
        assert {k: v for k, v in fast.headers.items() if k != "date"} == {
            k: v for k, v in routed.headers.items() if k != "date"
        }
        etag = {"If-None-Match": fast.headers["etag"]}
        same = [
            await http.get("/v1/boards/mode:same/top", params={**n, **q}, headers=etag)
            for q in ({}, {"window": "weekly"})
        ]
        assert [s.status_code for s in same] == [304, 304]
        assert same[0].headers["etag"] == same[1].headers["etag"] == fast.headers["etag"]
    # a token is checked by the route, before anything is answered
    problem(await http.get("/v1/boards/mode:same/top", headers={"Authorization": "Bearer bad"}), 401, "invalid_token")
    problem(await http.get("/v1/boards/nope/top"), 404, "unknown_board")  # a defined board's bare id


async def test_every_top_is_cacheable_the_same_way(http: httpx.AsyncClient, r: aioredis.Redis) -> None:
    await seed(r)
    lb = Leaderboard(r, GameConfig(game=GAME))
    await publish(r, "mode:held", 1)
    held = await http.get("/v1/boards/mode:held/top")
    # a board of this test's own (the module's API process may still watch another test's), nothing
    # published for it: read from the board, with an ETag of its own and the same Cache-Control
    await lb.submit_batch([Submission("c1", "ana", 70, now_ms(), mode="cold").fields()])
    cold = "/v1/boards/mode:cold/top"
    read = [await http.get(cold, params=q) for q in ({}, {"window": "weekly"}, {"n": 50})]
    for answer in read:
        assert answer.status_code == 200 and answer.json()["entries"], answer.text
        assert answer.headers["etag"] and answer.headers["cache-control"] == held.headers["cache-control"]
    etag = read[0].headers["etag"]
    assert read[1].headers["etag"] == etag  # the same answer, the same ETag
    same = await http.get(cold, headers={"If-None-Match": etag})
    assert same.status_code == 304 and same.content == b"" and same.headers["etag"] == etag
    assert same.headers["cache-control"] == held.headers["cache-control"]
    await lb.submit_batch([Submission("c2", "zed", 5000, now_ms(), mode="cold").fields()])
    changed = await http.get(cold, headers={"If-None-Match": etag})
    assert changed.status_code == 200 and changed.headers["etag"] != etag


async def test_a_body_is_checked_as_the_document_says(http: httpx.AsyncClient, r: aioredis.Redis) -> None:
    scores = "/v1/boards/global/scores"
    unknown = problem(
        await http.post(scores, json={"playerId": "mia", "score": 1, "match_id": "m"}, headers=SERVER),
        400,
        "unknown_field",
    )
    assert "playerId" in unknown["detail"]
    missing = problem(await http.post(scores, json={"score": 1, "match_id": "m"}, headers=SERVER), 400, "missing_field")
    assert "player_id" in missing["detail"]
    no_id = problem(await http.post(scores, json={"player_id": "mia", "score": 1}, headers=SERVER), 400, "missing_id")
    assert "match_id" in no_id["detail"] and "Idempotency-Key" in no_id["detail"]
    # the operator actions' bodies too, each with the code of the field's rule
    refusals = [
        ("POST", "/v1/players/p1/ban", {"reason": "x", "why": "y"}, "unknown_field"),
        ("POST", "/v1/players/p1/ban", {"reason": 7}, "invalid_reason"),
        ("POST", "/v1/players/p1/corrections", {"points": "5", "reason": "x"}, "invalid_points"),
        ("POST", "/v1/players/p1/corrections", {"points": 5}, "missing_field"),
        ("PUT", "/v1/players/p1/profile", {}, "invalid_profile"),
        ("PUT", "/v1/players/p1/profile", {"name": "Mia", "nick": "m"}, "unknown_field"),
        ("PUT", "/v1/tournaments/cup", {"start_ms": "1", "end_ms": 2}, "bad_message"),
        ("POST", "/v1/tournaments/cup/players", {"players": ["mia"], "team": "a"}, "unknown_field"),
        ("POST", "/v1/boards/global/players:ranks", {"players": ["mia"], "n": 1}, "unknown_field"),
        ("PUT", "/v1/definitions/tower", {"keys": [{"name": "floor", "dir": "asc"}]}, "unknown_field"),
        ("PUT", "/v1/definitions/tower", {"keys": [{"name": "floor"}], "top_n": "5"}, "invalid_top_n"),
        ("PUT", "/v1/definitions/tower", {"keys": []}, "board_no_keys"),
    ]
    for method, path, body, code in refusals:
        found = problem(await http.request(method, path, json=body, headers=SERVER), 400, code)
        if code == "unknown_field":
            assert any(name in found["detail"] for name in ("why", "nick", "team", "n", "keys[0].dir")), found
    assert await r.dbsize() == 0


async def test_a_405_names_every_method_of_the_path(http: httpx.AsyncClient) -> None:
    refused = await http.delete("/v1/boards/global/top")
    problem(refused, 405, "method_not_allowed")
    assert {m.strip() for m in refused.headers["allow"].split(",")} == {"GET", "HEAD"}
    refused = await http.patch("/v1/definitions/tower", headers=SERVER)
    problem(refused, 405, "method_not_allowed")
    assert {m.strip() for m in refused.headers["allow"].split(",")} == {"GET", "HEAD", "PUT", "DELETE"}


async def test_a_retry_after_its_first_filing_was_applied_is_answered_not_queued_again(
    http: httpx.AsyncClient, r: aioredis.Redis, redis_url: str
) -> None:
    """A body without ts is stamped by the API's clock, so a retry's slip carries another stamp
    (in a later hour, another seen bucket: lb_submit would apply it again, test_scorer_queue).
    The id's first body stands for it: the retry is answered as that filing, never appended."""
    lb = Leaderboard(r, GameConfig(game=GAME))
    scores, slip = "/v1/boards/global/scores", {"player_id": "cyd", "delta": 7}
    by_key = {**SERVER, "Idempotency-Key": "k-retry"}
    async with scorer(redis_url):
        first = await post_applied(http, scores, slip, by_key)
        assert first.status_code == 200 and first.json()["status"] == "applied", first.text
        added = (await r.xinfo_stream(lb.keys.submissions))["entries-added"]
        again = await http.post(scores, params={"wait": "applied"}, json=slip, headers=by_key)
        assert again.status_code == 200 and again.json() == first.json()  # its entry, its outcome
        queued = await http.post(scores, json=slip, headers=by_key)
        assert queued.status_code == 202
        assert queued.json() == {"submission": "k-retry", "stream_id": first.json()["stream_id"], "status": "pending"}
        assert (await r.xinfo_stream(lb.keys.submissions))["entries-added"] == added
    assert (await lb.ranks(["cyd"], "alltime", "global")).standings[0].score == 7


async def test_an_idempotency_key_reused_with_another_body_is_refused(
    http: httpx.AsyncClient, r: aioredis.Redis, redis_server: RedisServer, redis_url: str
) -> None:
    lb = Leaderboard(r, GameConfig(game=GAME))
    scores = "/v1/boards/global/scores"
    first = {"player_id": "ana", "score": 500, "match_id": "k-1"}
    assert (await http.post(scores, json=first, headers=SERVER)).status_code == 202
    for other in ({**first, "score": 900}, {**first, "player_id": "ben"}, {**first, "name": "Ana"}):
        problem(await http.post(scores, json=other, headers=SERVER), 422, "idempotency_conflict")
    by_key = {**SERVER, "Idempotency-Key": "k-1"}
    problem(
        await http.post(scores, json={"player_id": "ana", "score": 900}, headers=by_key), 422, "idempotency_conflict"
    )
    problem(await http.post("/v1/boards/region:eu/scores", json=first, headers=SERVER), 422, "idempotency_conflict")
    assert await r.xlen(lb.keys.submissions) == 1  # nothing appended for them
    # the same body again, its fields in another order or the id by the header: a retry, as before
    again = await http.post(scores, json=dict(reversed(first.items())), headers=SERVER)
    assert again.status_code == 202 and again.json()["submission"] == "k-1"
    header = await http.post(scores, json={"player_id": "ana", "score": 500}, headers=by_key)
    assert header.status_code == 202

    # concurrent first filings of one id with different bodies: one is taken, the others refused
    answers = await asyncio.gather(
        *(
            http.post(scores, json={"player_id": f"p{i}", "score": i, "match_id": "k-2"}, headers=SERVER)
            for i in range(8)
        )
    )
    assert sorted(a.status_code for a in answers) == [202] + [422] * 7

    # kept in Redis: another API process (or this one restarted) holds the id to its first body
    with api_process(redis_server.url) as other_url:
        async with httpx.AsyncClient(base_url=other_url, timeout=10) as second:
            refused = await second.post(scores, json={**first, "score": 1}, headers=SERVER)
            problem(refused, 422, "idempotency_conflict")
            assert (await second.post(scores, json=first, headers=SERVER)).status_code == 202
    async with scorer(redis_url):
        applied = await post_applied(http, scores, first)
        assert applied.status_code == 200 and applied.json()["status"] == "applied", applied.text
    assert (await lb.ranks(["ana"], "weekly", "global")).standings[0].score == 500


def test_the_api_counts_its_answers_at_its_own_metrics_port(redis_url: str) -> None:
    """``LB_API_METRICS_PORT``: requests by method and status, top N lookups by source (the
    first read from Redis, the next held), on an address of its own, never the API's port.
    Nothing is published here: each request looks up twice (the fast path, then the route)."""
    port = free_port()
    with api_process(redis_url, LB_API_METRICS_PORT=str(port)) as url:
        assert httpx.get(url + "/v1/no-such-route").status_code == 404
        assert httpx.get(url + "/metrics").status_code == 404
        for _ in range(2):
            assert httpx.get(url + "/v1/boards/global/top").status_code == 200
        text = httpx.get(f"http://127.0.0.1:{port}/metrics").text
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    assert samples[("lb_api_requests_total", (("code", "404"), ("method", "GET")))] == 2
    assert samples[("lb_api_requests_total", (("code", "200"), ("method", "GET")))] >= 3  # and the start's probe
    tops = {labels[0][1]: value for (name, labels), value in samples.items() if name == "lb_api_top_lookups_total"}
    assert (tops["read"], tops["held"], tops["live"], tops["stale"]) == (1, 3, 0, 0)


# ---------------------------------------------------------------- POST .../scores:batch


async def test_a_batch_queues_each_slip_once_by_its_own_id(http: httpx.AsyncClient, r: aioredis.Redis) -> None:
    lb = Leaderboard(r, GameConfig(game=GAME))
    batch = "/v1/boards/global/scores:batch"
    slips = [{"player_id": f"b{i}", "score": 10 * i, "match_id": f"bm-{i}"} for i in range(5)]
    queued = await http.post(batch, json={"slips": slips}, headers=SERVER)
    assert queued.status_code == 202, queued.text
    answers = queued.json()["slips"]
    assert [(a["submission"], a["status"]) for a in answers] == [(f"bm-{i}", "pending") for i in range(5)]
    assert await r.xlen(lb.keys.submissions) == 5
    # again, and one of them alone by the single route: retries of their first filing, not appended
    again = await http.post(batch, json={"slips": [slips[1], {**slips[0], "ts": now_ms()}]}, headers=SERVER)
    problem(again, 422, "idempotency_conflict")  # slip 0 with another body (its ts): the whole batch refused
    assert (await http.post(batch, json={"slips": slips[:2]}, headers=SERVER)).json()["slips"] == answers[:2]
    single = await http.post("/v1/boards/global/scores", json=slips[3], headers=SERVER)
    assert single.status_code == 202 and single.json()["stream_id"] == answers[3]["stream_id"]
    assert await r.xlen(lb.keys.submissions) == 5
    # an id filed before with another body: the batch refused, none of it queued
    conflict = [{"player_id": "new", "score": 1, "match_id": "bm-new"}, {**slips[2], "score": 999}]
    problem(await http.post(batch, json={"slips": conflict}, headers=SERVER), 422, "idempotency_conflict")
    assert await r.xlen(lb.keys.submissions) == 5
    problem(await http.post(batch, json={"slips": slips}, headers=PLAYER), 403, "forbidden")
    problem(await http.post(batch, json={"slips": slips}), 401, "auth_required")


async def test_a_batch_with_a_bad_slip_is_refused_whole_with_each_slips_code(
    http: httpx.AsyncClient, r: aioredis.Redis
) -> None:
    lb = Leaderboard(r, GameConfig(game=GAME))
    batch = "/v1/boards/global/scores:batch"
    good = {"player_id": "ok", "score": 5, "match_id": "g-1"}
    bad = [
        good,
        {"player_id": "x", "score": -1, "match_id": "g-2"},  # the schema's minimum
        {"player_id": "x", "score": 1},  # no match_id: a batch has no Idempotency-Key per slip
        {"player_id": "x", "score": 1, "delta": 1, "match_id": "g-3"},  # both
        {"player_id": "x", "score": 1, "match_id": "g-4", "colour": "red"},
        {"player_id": "x", "score": 1, "match_id": "g-5", "ts": now_ms() + 3_600_000},  # the clock's rule
        "not a slip",
    ]
    body = problem(await http.post(batch, json={"slips": bad}, headers=SERVER), 400, "invalid_slips")
    assert [(e["index"], e["code"]) for e in body["errors"]] == [
        (1, "invalid_points"),
        (2, "missing_id"),
        (3, "bad_message"),
        (4, "unknown_field"),
        (6, "bad_message"),
    ]  # the clock is checked once every slip parsed: then slip 5 alone
    clock = problem(await http.post(batch, json={"slips": [good, bad[5]]}, headers=SERVER), 400, "invalid_slips")
    assert [(e["index"], e["code"]) for e in clock["errors"]] == [(1, "timestamp_in_future")]
    defined = problem(
        await http.post(
            "/v1/boards/board:nope/scores:batch", json={"slips": [{**good, "values": [1]}]}, headers=SERVER
        ),
        400,
        "invalid_slips",
    )
    assert [(e["index"], e["code"]) for e in defined["errors"]] == [(0, "bad_message")]  # score and values
    assert await r.xlen(lb.keys.submissions) == 0  # nothing queued for any of them
    # the envelope: the document's ScoreBatch
    problem(await http.post(batch, json={"slips": []}, headers=SERVER), 400, "bad_message")
    problem(await http.post(batch, json={"slips": [good], "more": 1}, headers=SERVER), 400, "unknown_field")
    problem(await http.post(batch, json=[good], headers=SERVER), 400, "bad_json")
    many = [{**good, "match_id": f"m-{i}"} for i in range(101)]
    problem(await http.post(batch, json={"slips": many}, headers=SERVER), 413, "too_many_slips")


async def test_a_batch_waits_for_each_slips_outcome(http: httpx.AsyncClient, r: aioredis.Redis, redis_url: str) -> None:
    await seed(r)
    batch = "/v1/boards/global/scores:batch"
    slips = [{"player_id": "p1", "score": 750, "match_id": "w-1"}, {"player_id": "p2", "score": 1, "match_id": "w-2"}]
    async with scorer(redis_url):
        answers: list[dict[str, Any]] = []

        async def decided() -> bool:  # a 202 (still pending past LB_API_WAIT_MAX on a loaded machine) asks again
            resp = await http.post(batch, params={"wait": "applied"}, json={"slips": slips}, headers=SERVER)
            answers[:] = resp.json()["slips"]
            return resp.status_code == 200

        await until(decided, 30, every=0.1)
    first, second = answers
    assert (first["submission"], first["status"], second["status"]) == ("w-1", "applied", "applied")
    weekly = next(b for b in first["boards"] if b["window"] == "weekly" and b["board"] == "global")
    assert (weekly["rank"], weekly["previous_rank"], weekly["improved"], weekly["points"]) == (1, 8, True, 750)
    assert not next(b for b in second["boards"] if b["window"] == "weekly" and b["board"] == "global")["improved"]
