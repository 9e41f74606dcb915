"""A submission that asks to keep its outcome (``?wait=applied`` on the HTTP API): lb_submit
records what it decided per board, lb_status answers with it, and the rank it reports is the rank
the player's own socket is pushed, through real processes (the API and the scorer as
``python -m`` children, a gateway on real sockets)."""

from __future__ import annotations

from typing import Any

import httpx
import redis.asyncio as aioredis
from websockets.asyncio.client import ClientConnection

from fleet.redis_server import RedisServer
from leaderboard import GameConfig, Leaderboard, Submission, boards, now_ms

from .conftest import NOW
from .gw_helpers import client, greet, recv_type, running, token
from .test_api import GAME, SECRET, api_process, post_applied, scorer
from .test_api import token as api_token


async def pushed_score(ws: ClientConnection, score: int) -> dict[str, Any]:
    """The next own-rank push showing ``score`` (pushes before the write was applied show the old one)."""
    while True:
        push = await recv_type(ws, "rank", within=10.0)
        if push["score"] == score:
            return push


async def test_wait_applied_reports_the_rank_the_socket_pushes(
    redis_server: RedisServer, redis_url: str, r: aioredis.Redis
) -> None:
    lb = Leaderboard(r, GameConfig(game=GAME))
    now = now_ms()
    await lb.submit_batch([Submission(f"m{i}", f"p{i}", 100 * i, now).fields() for i in range(1, 8)])
    with api_process(redis_server.url) as api_url:
        async with (
            scorer(redis_url),
            running(redis_url, game=GameConfig(game=GAME), jwt_secrets=(SECRET,), rank_interval=0.1) as gw,
            client(gw, f"?token={token('mia', secret=SECRET)}") as ws,
            httpx.AsyncClient(base_url=api_url, timeout=10) as http,
        ):
            _, snap = await greet(ws)

            async def post(score: int, match: str) -> dict[str, Any]:
                resp = await post_applied(
                    http,
                    "/v1/boards/global/scores",
                    {"player_id": "mia", "score": score, "match_id": match},
                    api_token("backend", "server"),  # made now: a long suite outlives one made at import
                )
                assert resp.status_code == 200, resp.text
                body: dict[str, Any] = resp.json()
                assert body["status"] == "applied"
                [row] = [b for b in body["boards"] if (b["board"], b["window"]) == (snap["board"], snap["window"])]
                return body | {"row": row}

            first = await post(450, "w-1")
            assert {b["window"] for b in first["boards"]} == set(GameConfig(game=GAME).windows)
            assert first["row"] | {"period": ""} == {
                "board": "global",
                "window": snap["window"],
                "period": "",
                "improved": True,
                "rank": 4,  # under 700, 600, 500
                "previous_rank": None,
                "points": 450,
            }
            assert (await pushed_score(ws, 450))["rank"] == first["row"]["rank"]

            better = await post(650, "w-2")
            assert (better["row"]["rank"], better["row"]["previous_rank"]) == (2, 4)
            assert (await pushed_score(ws, 650))["rank"] == better["row"]["rank"]

            # a retry with the same id: the same rows, and nothing applied twice
            again = await post(650, "w-2")
            assert again["boards"] == better["boards"]
            worse = await post(10, "w-3")  # a best not beaten: not improved, the rank unchanged
            assert (worse["row"]["improved"], worse["row"]["rank"], worse["row"]["points"]) == (False, 2, 650)


async def test_only_slips_that_ask_keep_their_outcome(lb: Leaderboard) -> None:
    asked = Submission("a-1", "ana", 300, NOW, outcome=True)
    plain = Submission("b-1", "ben", 500, NOW)
    await lb.submit_batch([asked.fields(), plain.fields()], now=NOW + 1000, rows=False)
    kept = await lb.status("a-1", now=NOW + 1000)
    assert kept.status == "applied" and [(b.board.window, b.rank, b.previous_rank, b.best) for b in kept.boards] == [
        (w, 1, None, 300)
        for w in lb.config.windows  # ben came after it in the batch
    ]
    assert await lb.status("b-1", now=NOW + 1000) == type(kept)("b-1", "applied")  # no rows kept
    # the outcome lives in the bucket of the slip's own hour, and goes with its seen ids
    [bucket] = [k async for k in lb.redis.scan_iter(match=lb.keys.outcomes(NOW // 3_600_000))]
    assert 0 < await lb.redis.ttl(bucket) <= await lb.redis.ttl(lb.keys.seen(NOW // 3_600_000))
    assert await lb.redis.hlen(bucket) == 1


async def test_a_defined_boards_kept_outcome_has_its_ranks(lb: Leaderboard) -> None:
    """On a two-key (lex) board and a packed one alike: the rank and previous rank the write gave."""
    await lb.create_board(
        boards.parse(
            {"id": "tower", "keys": [{"name": "floor"}, {"name": "time", "direction": "asc"}], "windows": ["alltime"]}
        )
    )
    await lb.create_board(
        boards.parse({"id": "run", "keys": [{"name": "ms", "direction": "asc"}], "windows": ["alltime"]})
    )
    for board, first, better in (("tower", (9, 500), (12, 700)), ("run", (900,), (300,))):
        others = [Submission(f"{board}-{p}", p, 0, NOW, board=board, values=first) for p in ("ann", "bob")]
        asked = Submission(f"{board}-m1", "mia", 0, NOW + 1, board=board, values=first, outcome=True)
        again = Submission(f"{board}-m2", "mia", 0, NOW + 2, board=board, values=better, outcome=True)
        await lb.submit_batch([s.fields() for s in (*others, asked, again)], now=NOW + 1000, rows=False)
        [row] = (await lb.status(f"{board}-m1", now=NOW + 1000)).boards
        assert (row.rank, row.previous_rank) == (3, None)  # tied with both, reached last
        [row] = (await lb.status(f"{board}-m2", now=NOW + 1000)).boards
        assert (row.rank, row.previous_rank) == (1, 3)
