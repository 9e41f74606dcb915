"""Cost of moderation and profiles on a board of 1,000,000 members: ``python -m bench.moderation``.

Fills a private redis-server fast (ZADD pipelines of packed scores, no submissions): every window
of the game (daily, weekly, alltime) gets a ``global`` board of ``--members`` players and
``--regions`` region boards splitting them, and ``--profiles`` players get a profile. Then it times,
alternating one of each per round so load on the shared machine falls on all alike:

- baseline: the top 10 as a plain ZRANGE (what ``lb_top`` reads, without the profile join);
- top with profiles: ``Leaderboard.top`` (``lb_top``: the same ZRANGE and one HMGET);
- ban: ``Moderation.ban`` of a random player (SCAN of the game's boards, then ``lb_ban``);
- correct: ``Moderation.correct`` of a random player on every window (SCAN, ZSCOREs, ``lb_correct``);
- profile: ``Moderation.set_profile`` (the versions hash, then ``lb_profile``);
- a friends list of 100 players with a profile each: ``Leaderboard.ranks`` without and with
  ``profiles=True`` (``lb_ranks`` and one HMGET in the same round trip);

then fills the database with ``--other-keys`` keys of another game and times the ban again
(with its baseline), since the ban's SCAN walks every key of the database;

and, on two more servers, the cost of the tombstone check in ``lb_submit``: batches of 500
submissions against the library as shipped and against the same library without the batch's
read of the tombstones (one ``HMGET`` of its players, a lookup per slip), alternating, as Redis
time per submission (INFO commandstats);

and on those two servers again the cost of the journal (the durable log's record of each
change): ``lb_ban``, ``lb_unban``, ``lb_correct``, ``lb_profile`` and ``lb_join`` called directly
(no SCAN) ``--journal-calls`` times each, alternating between the library as shipped and the
same library whose journal helper returns at once, as Redis time per call (INFO commandstats).
Figures are medians (and p90) of wall-clock time per call, and ratios to the baseline's median.
Unless ``--no-write``, they are recorded in bench/results/moderation.json.
"""

from __future__ import annotations

import asyncio
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import orjson
import redis

from bench import results
from fleet.redis_server import RedisServer
from leaderboard import GameConfig, Leaderboard, Submission, boards, connect, now_ms, snapshot
from leaderboard.library import library_code
from leaderboard.moderation import Moderation
from leaderboard.profiles import Profile
from leaderboard.results import BoardRef
from leaderboard.settings import argument_parser
from leaderboard.transport import RedisClient

GAME = "bench"
CHUNK = 10_000
TOMBSTONE = "  ctx.banned_players = batch.banned_among(ctx.banned, batch_players)\n"  # lua/submit.lua
JOURNAL = "local function journal(key, fn, ...)\n"


async def fill(r: RedisClient, config: GameConfig, members: int, regions: int, profiles: int, now: int) -> None:
    keys, rnd = config.keys, random.Random(1)
    points = [rnd.randrange(1_000_000) for _ in range(members)]
    for spec in config.window_specs:
        period = spec.period(now)
        t = now - 3_600_000 if spec.name != "alltime" else now
        boards = [keys.board(spec.name, period.label, "global")]
        boards += [keys.board(spec.name, period.label, f"region:r{i}") for i in range(regions)]
        for start in range(0, members, CHUNK):
            global_args: list[Any] = []
            regional: dict[int, list[Any]] = {}
            for i in range(start, min(start + CHUNK, members)):
                score = period.pack(points[i], t + (i % 3_600) * 1000 if spec.name != "alltime" else t)
                global_args += [score, f"p{i}"]
                if regions:
                    regional.setdefault(i % regions, []).extend((score, f"p{i}"))
            async with r.pipeline(transaction=False) as pipe:
                pipe.zadd(boards[0], dict(zip(global_args[1::2], global_args[::2], strict=True)))
                for region, args in regional.items():
                    pipe.zadd(boards[1 + region], dict(zip(args[1::2], args[::2], strict=True)))
                await pipe.execute()
        fields: dict[str | bytes, str | bytes] = {f"{spec.name}:{period.label}:global": "1"}
        fields |= {f"{spec.name}:{period.label}:region:r{i}": "1" for i in range(regions)}
        await r.hset(keys.versions, mapping=fields)  # type: ignore[arg-type]
    for start in range(0, profiles, CHUNK):
        chunk = range(start, min(start + CHUNK, profiles))
        avatar = "https://cdn.example/avatars/{}.png"
        rows: dict[Any, Any] = {
            f"p{i}": orjson.dumps({"name": f"Player {i}", "country": "SE", "avatar": avatar.format(i)}).decode()
            for i in chunk
        }
        await r.hset(keys.profiles, mapping=rows)


def summary(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[int(0.9 * (len(ordered) - 1))]


async def timed(call: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any) -> float:
    t0 = time.perf_counter()
    await call(*args, **kwargs)
    return time.perf_counter() - t0


async def actions(url: str, args: Any, figures: dict[str, Any]) -> list[str]:
    config = GameConfig(game=GAME)
    r = connect(url)
    lb = Leaderboard(r, config)
    mod = Moderation(lb)
    now = now_ms()
    t0 = time.perf_counter()
    await fill(r, config, args.members, args.regions, args.profiles, now)
    info = await r.info("memory")
    out = [
        f"filled {len(config.windows)} windows x (global + {args.regions} regions) of {args.members:,} members "
        f"and {args.profiles:,} profiles in {time.perf_counter() - t0:.1f} s; "
        f"used_memory {int(info['used_memory']) / 2**20:,.0f} MiB"
    ]
    board = config.keys.board("weekly", config.window_specs[1].period(now).label, "global")
    rnd = random.Random(2)
    victims = rnd.sample(range(args.members), 2 * args.rounds)
    kinds = ("baseline", "top", "ban", "correct", "profile", "friends", "friends+p")
    samples: dict[str, list[float]] = {k: [] for k in kinds}
    for n in range(args.rounds):
        ban_p, fix_p = f"p{victims[2 * n]}", f"p{victims[2 * n + 1]}"
        samples["baseline"].append(await timed(r.zrange, board, 0, 9, desc=True, withscores=True))
        samples["top"].append(await timed(lb.top, "weekly", n=10, at=now))
        samples["ban"].append(await timed(mod.ban, ban_p, actor="bench", reason="bench"))
        samples["correct"].append(await timed(mod.correct, fix_p, 999_999, actor="bench", reason="bench", at=now))
        profile = Profile(name=f"Fixed {n}", country="NO")
        samples["profile"].append(await timed(mod.set_profile, fix_p, profile, at=now))
        friends = [f"p{i}" for i in rnd.sample(range(min(args.profiles, args.members)), 100)]
        samples["friends"].append(await timed(lb.ranks, friends, "weekly", at=now))
        samples["friends+p"].append(await timed(lb.ranks, friends, "weekly", at=now, profiles=True))
    base, _ = summary(samples["baseline"])
    friends_base, _ = summary(samples["friends"])
    out.append(f"{args.rounds} rounds, one of each per round in this order, wall clock per call:")
    figures["calls_ms"] = {}
    for name, values in samples.items():
        med, p90 = summary(values)
        figures["calls_ms"][name] = {"median": med * 1000, "p90": p90 * 1000}
        out.append(f"  {name:<9} median {med * 1000:8.3f} ms  p90 {p90 * 1000:8.3f} ms  x{med / base:7.1f} baseline")
    out.append(f"  friends list with profiles / without: x{summary(samples['friends+p'])[0] / friends_base:.2f}")
    if args.other_keys:
        for start in range(0, args.other_keys, CHUNK):
            await r.mset({f"lb:{{other}}:k{i}": "x" for i in range(start, min(start + CHUNK, args.other_keys))})
        more: dict[str, list[float]] = {"baseline": [], "ban": []}
        extra = random.Random(4).sample(range(args.members), args.rounds)
        for player in extra:
            more["baseline"].append(await timed(r.zrange, board, 0, 9, desc=True, withscores=True))
            more["ban"].append(await timed(mod.ban, f"p{player}", actor="bench", reason="bench"))
        base2, _ = summary(more["baseline"])
        med, p90 = summary(more["ban"])
        keys = await r.dbsize()
        figures["with_other_keys_ms"] = {
            "keys": keys,
            "baseline": base2 * 1000,
            "ban": med * 1000,
            "ban_p90": p90 * 1000,
        }
        out.append(
            f"with {args.other_keys:,} keys of another game ({keys:,} keys in the database), {args.rounds} rounds:"
        )
        out.append(f"  baseline  median {base2 * 1000:8.3f} ms")
        out.append(f"  ban       median {med * 1000:8.3f} ms  p90 {p90 * 1000:8.3f} ms  x{med / base2:7.1f} baseline")
    plain = await lb.top("weekly", n=10, at=now)
    stripped = type(plain)(plain.period, [type(e)(e.rank, e.player, e.score, None) for e in plain.entries])
    with_profiles = snapshot.build("global", plain, version=1, ts_ms=now)
    without = snapshot.build("global", stripped, version=1, ts_ms=now)
    figures["snapshot_bytes"] = {"with_profiles": len(with_profiles), "without": len(without)}
    out.append(
        f"snapshot of the top 10: {len(with_profiles)} bytes with profiles (name, avatar, country), "
        f"{len(without)} without (x{len(with_profiles) / len(without):.2f})"
    )
    await r.aclose()
    return out


async def submit_cost(urls: tuple[str, str], args: Any, figures: dict[str, Any]) -> list[str]:
    """Redis time per submission of lb_submit with and without the tombstone check."""
    config = GameConfig(game=GAME)
    clients = [connect(u) for u in urls]
    lbs = [Leaderboard(c, config) for c in clients]
    for c in clients:
        await c.hset(config.keys.banned, mapping={f"banned{i}": "{}" for i in range(1000)})
        await c.config_resetstat()
    rnd, now = random.Random(3), now_ms()
    usec = [0.0, 0.0]
    for batch in range(args.batches):
        entries = [
            Submission(f"s{batch}-{i}", f"p{rnd.randrange(args.members)}", rnd.randrange(1_000_000), now).fields()
            for i in range(500)
        ]
        for which in (0, 1) if batch % 2 == 0 else (1, 0):
            before = (await clients[which].info("commandstats")).get("cmdstat_fcall", {}).get("usec", 0)
            await lbs[which].submit_batch(entries, now=now, rows=False)
            after = (await clients[which].info("commandstats"))["cmdstat_fcall"]["usec"]
            usec[which] += after - before
    n = args.batches * 500
    for c in clients:
        await c.aclose()
    shipped, without = usec[0] / n, usec[1] / n
    figures["submit_us"] = {"with_tombstone_check": shipped, "without": without}
    return [
        f"lb_submit, {n:,} submissions per library in batches of 500, alternating, 1,000 players banned:",
        f"  with the tombstone check {shipped:.2f} us of Redis time per submission, without {without:.2f} us "
        f"(x{shipped / without:.3f})",
    ]


async def one_call(
    kind: str, lb: Leaderboard, player: str, i: int, refs: list[BoardRef], periods: list[Any], now: int
) -> Any:
    if kind == "ban":
        return await lb.ban(player, refs, actor="ops:bench", reason="bench", now=now)
    if kind == "unban":
        return await lb.unban(player, actor="ops:bench", reason="bench")
    if kind == "correct":
        game = lb.boards.get(boards.DEFAULT_ID)
        assert game is not None
        return await lb.correct(player, (i,), periods, definition=game, actor="ops:bench", reason="bench", now=now)
    if kind == "profile":
        return await lb.profile(player, {"country": ("FR", "DE")[i % 2]}, refs)
    return await lb.join("cup", [player])


async def journal_cost(urls: tuple[str, str], args: Any, figures: dict[str, Any]) -> list[str]:
    """Redis time per call of each journaling function, with the journal and without it."""
    config = GameConfig(game=GAME)
    clients = [connect(u) for u in urls]
    lbs = [Leaderboard(c, config) for c in clients]
    now, players = now_ms(), 10_000
    for c, lb in zip(clients, lbs, strict=True):
        await c.flushall()
        for b in range(0, players, 500):
            await lb.submit_batch([Submission(f"j{i}", f"p{i}", i, now).fields() for i in range(b, b + 500)], now=now)
        await lb.create_tournament("cup", now - 1000, now + 3_600_000)
        await c.config_resetstat()
    refs = [BoardRef(spec.name, spec.period(now).label, "global") for spec in config.window_specs]
    periods = [(spec.period(now), "global") for spec in config.window_specs]
    kinds = ("ban", "unban", "correct", "profile", "join")
    usec = {kind: [0.0, 0.0] for kind in kinds}
    for i in range(args.journal_calls):
        player = f"p{i % players}"  # a new one each round: every join enters one, and is journaled
        for kind in kinds:
            for which in (0, 1) if i % 2 == 0 else (1, 0):
                before = (await clients[which].info("commandstats")).get("cmdstat_fcall", {}).get("usec", 0)
                await one_call(kind, lbs[which], player, i, refs, periods, now)
                after = (await clients[which].info("commandstats"))["cmdstat_fcall"]["usec"]
                usec[kind][which] += after - before
    entries = await clients[0].xlen(config.keys.journal)
    size = await clients[0].memory_usage(config.keys.journal) or 0
    for c in clients:
        await c.aclose()
    out = [f"journal, {args.journal_calls:,} calls of each function per library, alternating:"]
    figures["journal_us"] = {}
    for kind in kinds:
        shipped, without = (u / args.journal_calls for u in usec[kind])
        figures["journal_us"][kind] = {"with_journal": shipped, "without": without}
        out.append(
            f"  lb_{kind}: {shipped:.2f} us of Redis time per call with the journal, {without:.2f} us without "
            f"(x{shipped / without:.3f}, {shipped - without:+.2f} us)"
        )
    out.append(
        f"  the journal held {entries:,} entries in {size / 1e6:.2f} MB ({size / max(entries, 1):.0f} bytes each)"
    )
    return out


def main(argv: list[str] | None = None) -> int:
    p = argument_parser("python -m bench.moderation", __doc__ or "")
    p.add_argument("--members", type=int, default=1_000_000, help="members of each global board")
    p.add_argument("--regions", type=int, default=4, help="region boards per window, splitting the members")
    p.add_argument("--profiles", type=int, default=100_000, help="players with a profile")
    p.add_argument("--rounds", type=int, default=50, help="rounds of the timed calls")
    p.add_argument("--other-keys", type=int, default=100_000, help="keys of another game, for the ban's SCAN")
    p.add_argument("--batches", type=int, default=200, help="lb_submit batches of 500 per library")
    p.add_argument("--journal-calls", type=int, default=2000, help="calls of each journaling function per library")
    p.add_argument("--journal-only", action="store_true", help="measure the journal's cost only")
    results.add_no_write(p)
    args = p.parse_args(argv)
    code = library_code()
    assert TOMBSTONE in code, "the tombstone check moved: update bench.moderation"
    variant = code.replace(TOMBSTONE, "  ctx.banned_players = {}\n")  # no tombstone read, none found
    assert JOURNAL in code, "the journal helper moved: update bench.moderation"
    unjournaled = code.replace(JOURNAL, JOURNAL + "  do return end\n")
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())  # the machine is shared: say how busy it was
    with ExitStack() as stack:
        scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="mod-bench-")))
        servers = [stack.enter_context(RedisServer(scratch / str(i))) for i in range(3)]
        for server, lib in zip(servers, (code, code, variant), strict=True):
            client = redis.Redis.from_url(server.url)
            client.function_load(lib, replace=True)
            client.close()
        lines = []
        figures: dict[str, Any] = {"members": args.members, "rounds": args.rounds}
        if not args.journal_only:
            lines += asyncio.run(actions(servers[0].url, args, figures))
            lines += asyncio.run(submit_cost((servers[1].url, servers[2].url), args, figures))
        client = redis.Redis.from_url(servers[2].url)
        client.function_load(unjournaled, replace=True)
        client.close()
        lines += asyncio.run(journal_cost((servers[1].url, servers[2].url), args, figures))
    print(f"bench.moderation, {started} (load average at the start: {load})")
    print("\n".join(lines))
    name = "moderation-journal" if args.journal_only else "moderation"
    results.save(name, figures, args, module="bench.moderation", argv=argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
