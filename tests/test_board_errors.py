"""Every board named the same way and refused the same way over the three ways in: the HTTP API
process, a gateway's socket and the command line. An unknown (or deleted) board, a window the
board does not keep and a period that cannot be read get one code each everywhere
(docs/protocol.md, "Errors"); a defined board is ``speedrun`` or ``board:speedrun`` alike; a read
that names no window reads the board's own first one."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest
import redis.asyncio as aioredis

from fleet.redis_server import RedisServer
from leaderboard import Leaderboard, boards, now_ms

from .gw_helpers import client, greet, request, running, token
from .test_api import PLAYER, SERVER, api_process
from .test_scorer_process import operator

RUN: dict[str, Any] = {"id": "run", "keys": [{"name": "ms", "direction": "asc"}], "windows": ["daily", "alltime"]}

# (the read's board, window, period) -> the code every way in answers
CASES = [
    (("board:nosuch", None, None), "unknown_board"),
    (("nosuch", None, None), "unknown_board"),  # the bare id names a defined board too
    (("board:run", "weekly", None), "invalid_window"),  # a window the game keeps, the board does not
    (("global", "hourly", None), "invalid_window"),
    (("board:run", "daily", "nonsense"), "bad_period"),
]


@pytest.fixture(scope="module")
def api_url(redis_server: RedisServer) -> Iterator[str]:
    # One process for the module, across each test's flush (the registry tells a Redis that
    # counted back to the version it holds: tests/test_definitions_scale.py)
    with api_process(redis_server.url) as url:
        yield url


async def define_run(lb: Leaderboard) -> None:
    await lb.create_board(boards.parse(RUN))
    await lb.submit_batch([{"id": "1", "player": "mia", "board": "run", "values": "4100", "ts": str(now_ms())}])


def _query(window: str | None, period: str | None) -> dict[str, str]:
    return {k: v for k, v in (("window", window), ("period", period)) if v is not None}


def _cli_args(board: str, window: str | None, period: str | None) -> list[str]:
    args = ["top", "--board", board]
    return args + [a for k, v in (("--window", window), ("--period", period)) if v for a in (k, v)]


async def test_an_unknown_board_window_or_period_gets_one_code_over_http_the_socket_and_the_cli(
    r: aioredis.Redis, redis_url: str, lb: Leaderboard, api_url: str
) -> None:
    await define_run(lb)
    async with running(redis_url) as gw, client(gw) as ws, httpx.AsyncClient(base_url=api_url, timeout=10) as http:
        await greet(ws)
        for (board, window, period), code in CASES:
            q = _query(window, period)
            for route in ("top", "stats"):  # stats said 200 with size 0 of a board nobody defined
                resp = await http.get(f"/v1/boards/{board}/{route}", params=q)
                assert (resp.status_code, resp.json()["code"]) == (404 if "board" in code else 400, code), resp.text
                bad = await request(ws, {"type": route, "board": board, **q}, "error")
                assert bad["code"] == code, (route, board, bad)
            rc, _, err = await operator(redis_url, *_cli_args(board, window, period))
            assert rc == 2 and err.startswith(f"refused: {code}: "), (board, err)


async def test_a_defined_board_is_named_with_or_without_board_and_read_in_its_own_first_window(
    r: aioredis.Redis, redis_url: str, lb: Leaderboard, api_url: str
) -> None:
    await define_run(lb)  # keeps daily and alltime: no weekly, the game's default window
    async with running(redis_url) as gw, client(gw) as ws, httpx.AsyncClient(base_url=api_url, timeout=10) as http:
        await greet(ws)
        for board in ("run", "board:run"):
            resp = await http.get(f"/v1/boards/{board}/top")
            assert resp.status_code == 200, resp.text
            top = await request(ws, {"type": "top", "board": board}, "top")
            rc, out, err = await operator(redis_url, "top", "--board", board)
            assert rc == 0, err
            for reply in (resp.json(), top, orjson.loads(out)):
                assert (reply["board"], reply["window"]) == ("board:run", "daily")
                assert [e["player"] for e in reply["entries"]] == ["mia"]


async def test_a_deleted_board_is_unknown_to_its_reads_at_once(
    r: aioredis.Redis, redis_url: str, lb: Leaderboard, api_url: str
) -> None:
    await define_run(lb)
    async with httpx.AsyncClient(base_url=api_url, timeout=10) as http:
        assert (await http.get("/v1/boards/board:run/top", headers=PLAYER)).status_code == 200
        assert (await http.delete("/v1/definitions/run", headers=SERVER)).status_code == 200
        for route in ("top", "stats"):
            resp = await http.get(f"/v1/boards/board:run/{route}")
            assert (resp.status_code, resp.json()["code"]) == (404, "unknown_board"), resp.text
    await define_run(lb)
    async with running(redis_url) as gw, client(gw, f"?token={token('backend', 'server')}") as ws:
        await greet(ws)
        assert (await request(ws, {"type": "top", "board": "run"}, "top"))["entries"]
        await request(ws, {"type": "board", "action": "delete", "board": "board:run"}, "board")
        bad = await request(ws, {"type": "top", "board": "run"}, "error")
        assert bad["code"] == "unknown_board"
    rc, _, err = await operator(redis_url, "top", "--board", "run")
    assert rc == 2 and err.startswith("refused: unknown_board: "), err
