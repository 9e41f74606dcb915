"""Read budgets (leaderboard/budget.py): requests cost units by what they read, and the budget is a
player's (or a spectator address's), not a socket's: two sockets of one player share it and a
reconnect does not refill it."""

from __future__ import annotations

from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection

from gateway.settings import GatewaySettings
from leaderboard import protocol as p
from leaderboard.budget import MAX_COST, Budgets, cost
from leaderboard.settings import SettingsError

from .gw_helpers import client, greet, request, running, token

# No refill within a test: what is spent stays spent.
BUDGET = {"read_rate": 1e-6, "read_burst": 150}


def _ranks(n: int, rid: int = 1) -> dict[str, Any]:
    return {"type": "ranks", "players": [f"friend{i}" for i in range(n)], "id": rid}


async def _read(ws: ClientConnection, msg: dict[str, Any]) -> str:
    """The reply's type, or its error code."""
    reply = await request(ws, msg)
    assert reply.get("id") == msg["id"]
    return str(reply["code"]) if reply["type"] == "error" else str(reply["type"])


def test_requests_cost_what_they_read() -> None:
    assert cost(p.Ranks(1, "global", "weekly", tuple(f"f{i}" for i in range(100)))) == 100
    assert cost(p.Top(1, "global", "weekly", 25)) == 25
    assert cost(p.Around(1, "global", "weekly", None, 5)) == 11
    assert cost(p.Rank(1, "global", "weekly", None)) == 1
    assert cost(p.Ping(1)) == cost(p.Hello(1, None)) == 0
    assert MAX_COST == 100  # the dearest request; LB_GW_READ_BURST may not be smaller
    with pytest.raises(SettingsError, match="LB_GW_READ_BURST"):
        GatewaySettings.from_env({"LB_GW_READ_BURST": "99"})


def test_a_budget_refills_at_its_rate_and_the_table_stays_bounded() -> None:
    budgets = Budgets(rate=10.0, burst=100, size=3)
    assert budgets.take("p:mia", 100, now=0.0)
    assert not budgets.take("p:mia", 1, now=0.0)  # refused: nothing spent
    assert budgets.left("p:mia", now=0.0) == 0.0
    assert not budgets.take("p:mia", 20, now=1.0)  # 10 units back after 1 s
    assert budgets.take("p:mia", 10, now=1.0)
    for i in range(10):
        budgets.take(f"a:10.0.0.{i}", 1, now=2.0)
    assert len(budgets) <= 3  # the least recently used went first
    assert budgets.take("a:10.0.0.9", 1, now=2.0) and budgets.left("a:10.0.0.9", now=2.0) == 98.0
    # A budget full again is forgotten: the table shrinks to what is in use.
    budgets.take("p:ana", 1, now=100.0)
    budgets.take("p:ana", 1, now=100.0)
    assert len(budgets) == 1


async def test_a_100_id_ranks_uses_100_units(redis_url: str) -> None:
    async with running(redis_url, **BUDGET) as gw, client(gw, f"?token={token('mia')}") as ws:
        await greet(ws)
        assert await _read(ws, _ranks(100, 1)) == "ranks"  # 150 - 100 = 50 left
        assert await _read(ws, _ranks(51, 2)) == "rate_limited"
        assert await _read(ws, _ranks(50, 3)) == "ranks"
        assert await _read(ws, {"type": "rank", "id": 4}) == "rate_limited"
        assert await _read(ws, {"type": "ping", "id": 5}) == "pong"  # answered without Redis: free


async def test_two_sockets_of_one_player_share_one_budget(redis_url: str) -> None:
    async with (
        running(redis_url, **BUDGET) as gw,
        client(gw, f"?token={token('mia')}") as first,
        client(gw, f"?token={token('mia')}") as second,
        client(gw, f"?token={token('ben')}") as other,
    ):
        for ws in (first, second, other):
            await greet(ws)
        assert await _read(first, _ranks(100, 1)) == "ranks"
        assert await _read(second, _ranks(100, 2)) == "rate_limited"
        assert await _read(other, _ranks(100, 3)) == "ranks"  # another player: a budget of its own


async def test_reconnecting_does_not_reset_the_budget(redis_url: str) -> None:
    async with running(redis_url, **BUDGET) as gw:
        async with client(gw, f"?token={token('mia')}") as ws:
            await greet(ws)
            assert await _read(ws, _ranks(100, 1)) == "ranks"
        async with client(gw, f"?token={token('mia')}") as ws:
            await greet(ws)
            assert await _read(ws, _ranks(100, 2)) == "rate_limited"
        # Spectators are counted by address: a new socket from the same one finds its budget.
        async with client(gw) as ws:
            await greet(ws)
            assert await _read(ws, {"type": "top", "n": 100, "id": 3}) == "top"
        async with client(gw) as ws:
            await greet(ws)
            assert await _read(ws, {"type": "top", "n": 100, "id": 4}) == "rate_limited"
            assert await _read(ws, {"type": "top", "n": 50, "id": 5}) == "top"


async def test_game_server_connections_have_no_read_budget(redis_url: str) -> None:
    async with running(redis_url, **BUDGET) as gw, client(gw, f"?token={token('gs-1', 'server')}") as ws:
        await greet(ws)
        for rid in range(3):
            assert await _read(ws, {"type": "top", "n": 100, "id": rid}) == "top"
