"""Redis time of each socket request, at its largest: ``python -m bench.read_costs``.

The gateway budgets a player's (or a spectator address's) requests by their cost in units
(leaderboard/budget.py: one unit per row or player read). This measures what a unit costs Redis:
against a private redis-server, a board of ``--players`` players (drained through the real scorer,
as bench.rank_reads does), every player with a profile, and a window's finals kept, each request
type is made ``--calls`` times the way the gateway's handler makes it (the same ``Leaderboard``
call), and ``INFO commandstats`` (reset before each type) gives the Redis time of the commands it
sends. Printed: microseconds of Redis time per request and per unit, and from the largest per-unit
cost, the Redis time one player or address can take per second under the defaults
(``LB_GW_READ_RATE`` units/s, after a burst of ``LB_GW_READ_BURST``).

Unless ``--no-write``, the figures are recorded in bench/results/read_costs.json.
"""

from __future__ import annotations

import asyncio
import random
import sys
import tempfile
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import redis

from bench import results
from bench.rank_reads import drain, fill
from fleet.redis_server import RedisServer
from gateway.settings import GatewaySettings
from leaderboard import GameConfig, Leaderboard, connect
from leaderboard import protocol as p
from leaderboard.budget import cost
from leaderboard.library import library_code
from leaderboard.settings import argument_parser

CONFIG = GameConfig(game="bench")
WINDOW = "weekly"


def requests(players: int, rnd: random.Random) -> dict[str, tuple[p.Request, Callable[[Leaderboard], Awaitable[Any]]]]:
    """Each request type at its largest (protocol.py's bounds) and, where its size varies, at its
    smallest (one unit: the call's fixed cost), with the read its handler makes."""

    def some(n: int) -> tuple[str, ...]:
        return tuple(f"p{rnd.randrange(players)}" for _ in range(n))

    top = p.Top(1, "global", WINDOW, p.MAX_TOP, None)
    top1 = p.Top(1, "global", WINDOW, 1, None)
    around = p.Around(1, "global", WINDOW, None, p.MAX_AROUND, None)
    around0 = p.Around(1, "global", WINDOW, None, 0, None)
    rank = p.Rank(1, "global", WINDOW, None, None)
    ranks = p.Ranks(1, "global", WINDOW, some(p.MAX_FRIENDS), None)
    stats = p.Stats(1, "global", WINDOW, None)
    finals = p.Finals(1, "global", WINDOW, p.MAX_FINALS)
    subscribe = p.Subscribe(1, "region:nowhere", WINDOW)  # not global: the gateway asks Redis
    return {
        "top 100": (top, lambda lb: lb.top(WINDOW, "global", p.MAX_TOP)),
        "top 1": (top1, lambda lb: lb.top(WINDOW, "global", 1)),
        "around k=25": (around, lambda lb: lb.around(some(1)[0], WINDOW, "global", p.MAX_AROUND)),
        "around k=0": (around0, lambda lb: lb.around(some(1)[0], WINDOW, "global", 0)),
        "rank": (rank, lambda lb: lb.ranks(list(some(1)), WINDOW, "global")),
        "ranks of 100": (ranks, lambda lb: lb.ranks(list(some(p.MAX_FRIENDS)), WINDOW, "global", profiles=True)),
        "stats": (stats, lambda lb: lb.stats(WINDOW, "global")),
        "finals 10": (finals, lambda lb: lb.finals(WINDOW, p.MAX_FINALS)),
        "subscribe (a board not watched here)": (subscribe, lambda lb: _exists(lb, "region:nowhere")),
    }


async def _exists(lb: Leaderboard, scope: str) -> int:
    """What ``Hub.exists`` asks Redis for a board nobody on the gateway watches yet."""
    spec = await lb.window_of(WINDOW)
    label = spec.period(int(1e12)).label
    return int(await lb.redis.exists(lb.keys.latest(WINDOW, scope), lb.keys.board(WINDOW, label, scope)))


async def prepare(url: str, players: int) -> None:
    """Profiles for every player, and a window's finals kept (each with a top 100)."""
    client = connect(url)
    lb = Leaderboard(client, CONFIG)
    for start in range(0, players, 1000):
        profiles: dict[Any, Any] = {
            f"p{i}": orjson.dumps({"name": f"Player {i}", "country": "FR"}).decode()
            for i in range(start, min(players, start + 1000))
        }
        await client.hset(lb.keys.profiles, mapping=profiles)
    top = [{"rank": i + 1, "player": f"p{i}", "points": 10_000 - i} for i in range(100)]
    event = {"window": WINDOW, "period": "2026-W01", "top": {"global": top}}
    await client.lpush(lb.keys.finals(WINDOW), *(orjson.dumps(event) for _ in range(p.MAX_FINALS)))
    await client.aclose()


async def measure(url: str, players: int, calls: int, seed: int) -> list[tuple[str, int, float]]:
    """(request, units, us of Redis time per request) per request type."""
    admin = redis.Redis.from_url(url)
    client = connect(url)
    lb = Leaderboard(client, CONFIG)
    rnd = random.Random(seed)
    rows = []
    for name, (req, call) in requests(players, rnd).items():
        await call(lb)  # warm: the client's connection, the window's lookups
        admin.config_resetstat()
        for _ in range(calls):
            await call(lb)
        # Commands run inside a function are counted in its FCALL_RO and again on their own:
        # only what the client sent counts (every request type sends FCALL_RO or plain commands).
        stats = admin.info("commandstats")
        if "cmdstat_fcall_ro" in stats:
            usec = stats["cmdstat_fcall_ro"]["usec"] + stats.get("cmdstat_hmget", {}).get("usec", 0)
        else:
            usec = sum(v["usec"] for k, v in stats.items() if k != "cmdstat_config")
        rows.append((name, cost(req), usec / calls))
    await client.aclose()
    admin.close()
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argument_parser("python -m bench.read_costs", __doc__ or "")
    parser.add_argument("--players", type=int, default=100_000, help="players on the board")
    parser.add_argument("--calls", type=int, default=2000, help="requests of each type")
    parser.add_argument("--seed", type=int, default=1, help="seed of the generated workload")
    results.add_no_write(parser)
    args = parser.parse_args(argv)
    if args.players < 100 or args.calls < 1:
        parser.error("--players must be at least 100 (the dearest request reads 100) and --calls at least 1")
    with tempfile.TemporaryDirectory(prefix="read-costs-") as data, RedisServer(data) as server:
        r = redis.Redis.from_url(server.url)
        r.function_load(library_code(), replace=True)
        r.close()
        asyncio.run(fill(server.url, args.players, args.seed))
        drain(server.url)
        asyncio.run(prepare(server.url, args.players))
        rows = asyncio.run(measure(server.url, args.players, args.calls, args.seed))
    print(f"board of {args.players:,} players with profiles; {args.calls:,} requests of each type, one client")
    print(f"{'request':<38} {'units':>5} {'us/request':>10} {'us/unit':>8}")
    for name, units, us in rows:
        print(f"{name:<38} {units:>5} {us:>10.1f} {us / units:>8.2f}")
    worst = max(us / units for _, units, us in rows)
    s = GatewaySettings()
    print(
        f"worst case per unit: {worst:.2f} us; under the defaults ({s.read_rate:g} units/s, burst {s.read_burst}) "
        f"one player or address takes at most {s.read_rate * worst / 1000:.2f} ms of Redis time per second "
        f"({s.read_rate * worst / 1e4:.2f}% of a core), after a first second of at most "
        f"{(s.read_rate + s.read_burst) * worst / 1000:.2f} ms"
    )
    figures = {
        "players": args.players,
        "requests": {
            name: {"units": units, "redis_us": us, "redis_us_per_unit": us / units} for name, units, us in rows
        },
        "worst_us_per_unit": worst,
        "max_redis_ms_per_s": s.read_rate * worst / 1000,
    }
    results.save("read_costs", figures, args, module="bench.read_costs", argv=argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
