"""The HTTP API in the fleet: ``./dev run`` starts its processes and tells where they answer (and
the token secret to sign with), haproxy puts them on the public port under ``/v1/`` beside the
gateways, and ``python -m fleet rollout`` restarts them without a failed request."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import shutil
import signal
import sys
import time
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest

from fleet.haproxy import API_BACKEND, Haproxy
from fleet.rollout import rollout
from fleet.supervisor import Fleet, FleetSettings
from leaderboard.auth import issue

from .conftest import MS, until
from .test_api import post_applied
from .test_fleet import fleet, sourced

ROOT = Path(__file__).resolve().parent.parent
T = 1000 * MS
SECRET = "a-game-backends-own-secret-of-32-bytes!"

needs_haproxy = pytest.mark.skipif(Haproxy.binary() is None, reason="haproxy is not installed (./dev install)")


def bearer(secret: str, player: str, role: str) -> dict[str, str]:
    return {"Authorization": "Bearer " + issue(player, role, secret, exp=time.time() + 600)}


async def every_route(api: str, secret: str) -> None:
    """Each route answers through ``api`` (a base URL ending in /v1/), with tokens signed by
    ``secret``: a write applied, then the reads find it."""
    server, player = bearer(secret, "game-1", "server"), bearer(secret, "clan/mia", "player")
    async with httpx.AsyncClient(base_url=api, timeout=10 * T) as http:
        slip = {"player_id": "clan/mia", "score": 9_000_000, "match_id": "fleet-1"}
        done = await post_applied(http, "boards/global/scores", slip, server)
        assert done.status_code == 200 and done.json()["status"] == "applied", done.text
        me = "boards/global/players/" + quote("clan/mia", safe="")
        assert (await http.get(me, headers=player)).json()["rank"] == 1
        around = (await http.get(me + "/around", params={"k": 1}, headers=player)).json()
        assert "clan/mia" in [e["player"] for e in around["entries"]]
        friends = await http.post("boards/global/players:ranks", json={"players": ["clan/mia"]}, headers=player)
        assert friends.json()["players"][0]["rank"] == 1
        assert (await http.get("boards/global/stats")).json()["size"] >= 1

        async def on_top() -> bool:  # the scorer's next snapshot, held by the API (its ETag)
            top = await http.get("boards/global/top", params={"n": 1})
            return "etag" in top.headers and top.json()["entries"][0]["player"] == "clan/mia"

        await until(on_top, 10 * T)
        assert (await http.get("openapi.json")).json()["openapi"] == "3.1.0"


@pytest.mark.slow
async def test_dev_run_serves_the_api_with_the_secret_from_the_environment(tmp_path: Path) -> None:
    env = {"LB_JWT_SECRETS": SECRET, "LB_FLEET_API": "2"}
    async with fleet(tmp_path, "--port", "0", "--no-demo", env=env) as f:
        api = await f.value("http api:")
        exported = sourced(tmp_path)
        # a local game server finds the API and signs with the secret it gave (README's example)
        assert exported["LB_API_URL"] == api and exported["LB_JWT_SECRETS"] == SECRET
        await every_route(api, SECRET)
        assert f.proc is not None
        f.proc.send_signal(signal.SIGINT)
        assert await f.exit_code(30 * T) == 0, f.output()


@pytest.mark.slow
async def test_without_a_secret_dev_run_writes_the_one_it_made(tmp_path: Path) -> None:
    async with fleet(tmp_path, "--port", "0", "--no-demo", "--api", "1") as f:
        api = await f.value("http api:")
        made = sourced(tmp_path)["LB_JWT_SECRETS"]
        assert len(made) >= 32 and made not in f.output()
        server = bearer(made, "game-1", "server")
        async with httpx.AsyncClient(base_url=api, timeout=10 * T) as http:
            slip = {"player_id": "ana", "score": 5, "match_id": "m-1"}
            assert (await http.post("boards/global/scores", json=slip, headers=server)).status_code == 202
            other = bearer("not-the-fleets-secret-but-32-bytes-long", "game-1", "server")
            assert (await http.post("boards/global/scores", json=slip, headers=other)).status_code == 401


@pytest.mark.slow
@needs_haproxy
async def test_behind_haproxy_one_public_port_and_a_rollout_fails_no_request(tmp_path: Path, redis_url: str) -> None:
    settings = FleetSettings(
        redis_url=redis_url, data_dir=tmp_path, port=0, gateways=1, apis=2, balancer="haproxy",
        demo_tokens=False, log_level="WARNING", jwt_secret=SECRET,
    )  # fmt: skip
    async with Fleet(settings) as f:
        assert f.api_url == f"http://127.0.0.1:{f.port}/v1/"
        await every_route(f.api_url, SECRET)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{f.port}", timeout=10 * T) as http:
            assert (await http.get("/metrics")).status_code == 404  # never on the public port
            assert (await http.get("/")).status_code == 200  # the page: a gateway's
            assert "metrics" not in (await http.get("/v1/metrics")).text  # the API has none

            # requests all along a rolling restart of every process: none fails
            stop, statuses = asyncio.Event(), list[int]()
            server = bearer(SECRET, "game-1", "server")

            async def traffic(n: int) -> None:
                i = 0
                while not stop.is_set():
                    i += 1
                    slip = {"player_id": f"p{n}", "delta": 1, "match_id": f"r{n}-{i}"}
                    statuses.append(
                        (await http.post("/v1/boards/global/scores", json=slip, headers=server)).status_code
                    )
                    resp = await http.get("/v1/boards/global/top")
                    statuses.append(resp.status_code)

            before = [p.pid for p in f.apis]
            tasks = [asyncio.create_task(traffic(n)) for n in range(4)]
            try:
                steps = await rollout(f.layout(), drain_timeout=30 * T, start_timeout=30 * T)
            finally:
                stop.set()
                await asyncio.gather(*tasks)
        assert [s.gateway for s in steps] == ["gw-1", "api-1", "api-2"]
        assert [s.old_pid for s in steps[1:]] == before and not {p.pid for p in f.apis} & set(before)
        servers = await f.balancers[0].servers(API_BACKEND)
        assert {name: row["status"] for name, row in servers.items()} == {"api-1": "UP", "api-2": "UP"}
        assert len(statuses) > 20 and set(statuses) == {200, 202}, sorted(set(statuses))


def readme_http_commands() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Over HTTP") : readme.index("## Measured on")]
    return [line for block in re.findall(r"```sh\n(.*?)```", section, re.S) for line in block.splitlines() if line]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed (./dev install installs Debian's)")
async def test_the_readmes_curl_session_and_the_node_game_server_run_as_written(tmp_path: Path, redis_url: str) -> None:
    commands = readme_http_commands()
    assert any(c.startswith("curl") for c in commands) and any("game_server.mjs" in c for c in commands)
    settings = FleetSettings(
        redis_url=redis_url, data_dir=tmp_path / "var", port=0, gateways=1, apis=1, demo_tokens=False,
        log_level="WARNING",
    )  # fmt: skip
    async with Fleet(settings):
        # as in a checkout beside a running ./dev run: var/fleet.env, examples/, the virtualenv's python
        (tmp_path / "examples").symlink_to(ROOT / "examples")
        (tmp_path / "bin").mkdir()
        python = tmp_path / "bin" / "python"
        python.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$@"\n')
        python.chmod(0o755)
        script = "set -e\nsource var/fleet.env\n" + "\n".join(f"{c}; echo" for c in commands) + "\n"
        proc = await asyncio.create_subprocess_exec(
            "bash", "-c", script, cwd=tmp_path, env={"PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}",
            "PYTHONPATH": str(ROOT)}, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(proc.communicate(), 60 * T)
    assert proc.returncode == 0, f"{out.decode()}\n{err.decode()}"
    lines = [line for line in out.decode().splitlines() if line]
    applied, top, me = (json.loads(line) for line in lines[:3])
    assert applied["status"] == "applied" and applied["submission"] == "match-43"
    assert top["type"] == "top" and (me["player"], me["rank"], me["score"]) == ("mia", 1, 1200)
    # the Node game server's match, one batch of two slips
    assert lines[3].endswith(":ana: applied") and lines[4].endswith(":bo: applied"), lines
    assert lines[5:] == ["ana: rank 2 of 3 with 900 points", "bo: rank 3 of 3 with 700 points"], lines
