"""``python -m loadtest`` against a Redis Cluster and against a gateway URL naming a game: small
runs of the modes on a private 3-master cluster, through everything that reads Redis (the
submission feed, the snapshot monitor's sharded subscription, Redis's command statistics, the
removal of the run's players). ``sockets`` and ``mixed`` share their code: ``mixed`` runs here."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
from redis.cluster import RedisCluster

from fleet.cluster import Cluster
from fleet.supervisor import Fleet, FleetSettings
from loadtest.__main__ import main

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]  # slow: the module starts a cluster


def boards(cluster: Cluster, game: str) -> dict[str, list[str]]:
    """Every board of ``game`` on the cluster's masters, with its members."""
    client = RedisCluster.from_url(cluster.url.replace("redis+cluster", "redis"), decode_responses=True)
    try:
        keys = client.scan_iter(match=f"lb:{{{game}}}:board:*", target_nodes=RedisCluster.PRIMARIES)
        return {key: [str(m) for m in client.zrange(key, 0, -1)] for key in keys}
    finally:
        client.close()


def run_players(cluster: Cluster, game: str) -> dict[str, list[str]]:
    """The run's synthetic players (``lt-…``) still on ``game``'s boards, per board."""
    found = {key: [m for m in members if m.startswith("lt-")] for key, members in boards(cluster, game).items()}
    return {key: members for key, members in found.items() if members}


def run(mode: str, tmp_path: Path, cluster: Cluster, *extra: str) -> dict[str, Any]:
    """A private fleet on the cluster (``--redis-url redis+cluster://…``); the JSON report."""
    stem = tmp_path / mode
    argv = [mode, "--redis-url", cluster.url, "--game", f"lt{mode}", "--out", str(stem), "--quiet"]
    argv += ["--time-limit", "80", *extra]
    assert main(argv) == 0
    doc: dict[str, Any] = orjson.loads(stem.with_suffix(".json").read_bytes())
    assert "WARNING" not in doc["figures"]["cleanup"], doc["figures"]["cleanup"]
    assert not run_players(cluster, f"lt{mode}")
    return doc


def test_submit_mode_on_a_cluster(tmp_path: Path, cluster: Cluster) -> None:
    extra = ["--rate", "500", "--duration", "2", "--warmup", "1"]
    doc = run("submit", tmp_path, cluster, *extra, "--baseline", "single", "--baseline-seconds", "0.5")
    f = doc["figures"]["flood"]
    assert f["accepted_per_s"] > 300 and f["applied_per_s"] > 200
    assert doc["figures"]["baseline_one_at_a_time_per_s"] > 0


@pytest.mark.timeout(150)
async def test_a_run_against_a_url_naming_a_game_loads_and_watches_that_game(tmp_path: Path, cluster: Cluster) -> None:
    """Gateways serving two games, the URL naming the second (not their default): the sockets,
    the feed and the monitor all go to that game, and player tokens ride along in the query."""
    env = (("LB_GAMES", "main,other"), ("LB_GW_RANK_INTERVAL", "1"))  # rank pushes within a 2 s window
    settings = FleetSettings(
        redis_url=cluster.url, data_dir=tmp_path, port=0, gateways=1, demo_tokens=False, log_level="WARNING", env=env
    )
    async with Fleet(settings) as fleet:
        stem = tmp_path / "run"
        argv = ["-m", "loadtest", "mixed", "--url", fleet.ws_url + "?game=other", "--redis-url", cluster.url]
        argv += ["--jwt-secret", settings.jwt_secret, "--out", str(stem)]
        argv += ["--players-share", "0.5", "--baseline", "naive", "--sockets", "40", "--duration", "2"]
        argv += ["--rate", "300", "--quiet", "--time-limit", "90"]
        proc = await asyncio.create_subprocess_exec(
            sys.executable, *argv, cwd=tmp_path, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        out, err = await asyncio.wait_for(proc.communicate(), 100)
        assert proc.returncode == 0, err.decode()
        doc = orjson.loads(stem.with_suffix(".json").read_bytes())
        f = doc["figures"]["gateway"]
        assert f["url"].endswith("/ws?game=other")
        assert f["snapshots"] >= 1 and f["lost"] == 0 and f["deliveries"] == 40 * f["snapshots"]
        assert f["rank_pushes"] > 0  # the players' tokens were accepted after ?game=
        # their rank reads (FCALL_RO) ran on the master owning the game's slot: every node is counted
        assert f["fleet"]["redis_rank_reads"] > 0
        assert f["submissions"]["applied_per_s"] > 0
        naive = doc["figures"]["naive"]  # bench/naive_gateway.py on the cluster: its channel's shard
        assert naive["snapshots"] >= 1 and naive["lost"] == 0 and naive["deliveries"] == 40 * naive["snapshots"]
        assert boards(cluster, "main") == {}  # nothing went to the gateways' default game
        assert not run_players(cluster, "other")
        assert "synthetic players removed" in out.decode()


def test_a_url_and_a_game_that_disagree_are_refused(capsys: pytest.CaptureFixture[str], cluster: Cluster) -> None:
    argv = ["sockets", "--url", "ws://127.0.0.1:9/ws?game=kart", "--game", "arena", "--redis-url", cluster.url]
    argv += ["--quiet", "--time-limit", "10"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "--game 'arena' and --url's ?game=kart name different games" in err and len(err.strip().splitlines()) == 1
