"""A load test against a Redis it did not start removes its synthetic players afterwards, and only
them: the removal itself on a real redis-server, then a whole run against a running fleet."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import cast

import orjson
import pytest
import redis.asyncio as aioredis

from fleet.supervisor import Fleet, FleetSettings
from leaderboard import GameConfig, Leaderboard, connect, now_ms
from leaderboard.queue import Queue
from leaderboard.submission import Submission
from loadtest.cleanup import clean_up, main, remove_players, run_prefix, wait_applied

from .conftest import NOW

RUN = "lt-0123456789-"
ROOT = Path(__file__).resolve().parent.parent


def sub(i: int, player: str, points: int, *, name: str | None = None, region: str | None = None) -> dict[str, str]:
    return Submission(f"s{i}", player, points, NOW, "best", name, region).fields()


async def members(r: aioredis.Redis, config: GameConfig) -> dict[str, list[str]]:
    boards = [k async for k in r.scan_iter(match=f"{config.keys.prefix}:board:*")]
    return {k: cast(list[str], await r.zrange(k, 0, -1, desc=True)) for k in sorted(boards)}


async def test_removal_takes_only_the_runs_players_and_republishes_the_top_lists_they_were_in(
    r: aioredis.Redis,
) -> None:
    config = GameConfig(game="live", windows=("weekly", "alltime"), top_n=2)
    lb = Leaderboard(r, config)
    await lb.load()
    await lb.submit_batch(
        [
            sub(1, "mia", 500, name="Mia", region="eu"),
            sub(2, f"{RUN}1", 900, name="Player 1", region="eu"),  # leads the eu and global boards
            sub(3, "bo", 400, region="na"),
            sub(4, f"{RUN}2", 10, region="na"),  # on the na board, below its top 2
            sub(5, "lt-0123456789x", 300, region="na"),  # a real player whose id merely looks alike
        ],
        now=NOW,
    )
    before = await r.hgetall(config.keys.versions)

    done = await remove_players(r, config, RUN)

    after = await members(r, config)
    assert all(not m.startswith(RUN) for board in after.values() for m in board)
    week = lb.keys.board("weekly", "2030-W48", "global")
    assert after[week] == ["mia", "bo", "lt-0123456789x"]
    assert after[lb.keys.board("weekly", "2030-W48", "region:na")] == ["bo", "lt-0123456789x"]
    # each of the two run players was on 2 windows × (global + its region): 8 memberships on 6 boards
    assert (done.removed, done.boards, done.profiles) == (8, 6, 1)
    bumped = {f for f, v in (await r.hgetall(config.keys.versions)).items() if v != before.get(f)}
    # the boards whose top 2 held lt-…-1: global and region:eu of both windows; not region:na
    periods = (("weekly", "2030-W48"), ("alltime", "all"))
    assert bumped == {f"{w}:{p}:{s}" for w, p in periods for s in ("global", "region:eu")}
    assert done.republished == 4
    assert await r.hkeys(config.keys.profiles) == ["mia"]
    assert (await remove_players(r, config, RUN)).removed == 0  # a second removal finds nothing


async def test_the_wait_for_the_scorer_counts_only_the_runs_own_entries(r: aioredis.Redis) -> None:
    config = GameConfig(game="live")
    queue = Queue(r, config)
    await queue.submit_many([Submission(f"q{i}", f"{RUN}{i}", 5, now_ms(), "incr") for i in range(3)])
    await queue.submit_many([Submission("q-real", "mia", 5, now_ms(), "incr")])
    async with asyncio.timeout(5):
        assert await wait_applied(r, config, RUN, timeout=0.3) == 3  # no scorer: nothing applied
        ids = [i for i, _ in cast(list[tuple[str, dict[str, str]]], await r.xrange(config.keys.submissions))]
        waiting = asyncio.create_task(wait_applied(r, config, RUN, timeout=4))
        await r.xdel(config.keys.submissions, *ids)  # what the scorer does once it applied them
        assert await waiting == 0
        assert await wait_applied(r, GameConfig(game="never"), RUN, timeout=1) == 0  # no queue at all


async def test_clean_up_says_what_it_could_not_take_back_and_what_was_still_queued(r: aioredis.Redis) -> None:
    config = GameConfig(game="live")
    await Queue(r, config).submit_many([Submission("q1", f"{RUN}1", 5, now_ms(), "incr")])
    line = (await clean_up(r, config, RUN, wait=0.2)).line()
    assert "distinct-player counts and the activity stream keep them" in line
    assert "WARNING: 1 submissions of this run were still queued" in line


def test_the_cleanup_command_refuses_any_prefix_but_a_runs(redis_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    for wide in ("lt-", "", "lt-*", "p", "lt-0123456789"):
        with pytest.raises(SystemExit) as exit_:
            main(["--redis-url", redis_url, "--game", "live", "--prefix", wide])
        assert exit_.value.code == 2 and "expected a run's prefix" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        main(["--redis-url", "127.0.0.1:6379", "--game", "live", "--prefix", run_prefix()])
    assert exit_.value.code == 2 and "--redis-url" in capsys.readouterr().err
    assert main(["--redis-url", redis_url, "--game", "live", "--prefix", run_prefix(), "--wait", "0"]) == 0
    assert capsys.readouterr().out.startswith("synthetic players removed: 0 from 0 boards")


@pytest.mark.slow
@pytest.mark.timeout(120)
async def test_a_run_against_a_running_fleet_leaves_its_game_as_it_found_it(tmp_path: Path, redis_url: str) -> None:
    game = GameConfig(game="arena")
    settings = FleetSettings(
        redis_url=redis_url,
        data_dir=tmp_path,
        port=0,
        gateways=1,
        demo_tokens=False,
        log_level="WARNING",
        env=(("LB_GAME", "arena"),),
    )
    async with Fleet(settings) as fleet:
        r = connect(fleet.redis_url)
        assert isinstance(r, aioredis.Redis)
        try:
            await Queue(r, game).submit_many([Submission("real-1", "mia", 3, now_ms(), "best")])
            stem = tmp_path / "run"
            argv = ["-m", "loadtest", "mixed", "--url", fleet.ws_url, "--redis-url", fleet.redis_url]
            argv += ["--out", str(stem)]
            argv += ["--game", "arena", "--sockets", "50", "--duration", "2", "--rate", "300"]
            argv += ["--quiet", "--time-limit", "90"]
            pipe = asyncio.subprocess.PIPE
            proc = await asyncio.create_subprocess_exec(sys.executable, *argv, cwd=tmp_path, stdout=pipe, stderr=pipe)
            out, err = await asyncio.wait_for(proc.communicate(), 100)
            assert proc.returncode == 0, err.decode()
            doc = orjson.loads(stem.with_suffix(".json").read_bytes())
            assert doc["figures"]["gateway"]["snapshots"] >= 1, "the run's load did reach the boards"
            # the gateway listening on the URL's port was found and measured
            assert doc["figures"]["gateway"]["gateway_pids"] == [p.pid for p in fleet.gateways]
            assert doc["figures"]["gateway"]["gateway_cpu_ms_per_1k_deliveries"] > 0
            boards = await members(r, game)
            assert boards and all(board == ["mia"] for board in boards.values()), boards
            assert "synthetic players removed" in out.decode()
            assert "WARNING" not in doc["figures"]["cleanup"], doc["figures"]["cleanup"]
            assert await r.hkeys(game.keys.profiles) in ([], ["mia"])
            # the top 10 the sockets see is published again without them (the unit test above shows
            # the version bump that makes it due even when the last tick came before the removal)
            latest = game.keys.latest("weekly", "global")
            async with asyncio.timeout(10):
                while '"lt-' in (await r.get(latest) or '"lt-'):  # noqa: ASYNC110 (a key in Redis: no event)
                    await asyncio.sleep(0.05)
            assert '"mia"' in cast(str, await r.get(latest))
        finally:
            await r.aclose()
