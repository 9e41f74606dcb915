"""Evening out the gateways after a rolling restart: the plan, the gateway's shed action on its
metrics address, and ``python -m fleet rebalance`` through a real haproxy."""

from __future__ import annotations

import asyncio
import contextlib
import io
from pathlib import Path
from typing import Any

import orjson
import pytest
from websockets.asyncio.client import ClientConnection

from fleet.__main__ import main as fleet_main
from fleet.haproxy import Haproxy
from fleet.layout import Member
from fleet.rebalance import balanced, counts, main, plan, rebalance
from fleet.redis_server import free_port
from gateway.server import Gateway

from .conftest import until
from .gw_helpers import T, client, recv, running
from .test_balancer import Changes, Player, balanced_fleet, needs_haproxy


def test_the_plan_sheds_only_the_excess_of_gateways_well_above_the_mean() -> None:
    assert plan({"gw-1": 300, "gw-2": 300, "gw-3": 0}, 0.1) == {"gw-1": 100, "gw-2": 100}
    assert plan({"gw-1": 40, "gw-2": 20, "gw-3": 0}, 0.1) == {"gw-1": 20}  # gw-2, at the mean: nothing
    assert plan({"gw-1": 210, "gw-2": 200, "gw-3": 190}, 0.1) == {}  # within 10 %
    assert plan({"gw-1": 4, "gw-2": 0}, 0.1) == {}  # a few sockets are not worth a reconnect
    assert plan({}, 0.1) == {}
    assert balanced({"gw-1": 200, "gw-2": 205, "gw-3": 195}, 0.1)
    assert not balanced({"gw-1": 300, "gw-2": 300, "gw-3": 0}, 0.1)


async def _post(gw: Gateway, target: str, method: str = "POST") -> tuple[int, dict[str, Any]]:
    assert gw.metrics_port is not None
    reader, writer = await asyncio.open_connection("127.0.0.1", gw.metrics_port)
    writer.write(f"{method} {target} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    raw = await asyncio.wait_for(reader.read(), 5 * T)
    writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split()[1]), orjson.loads(body) if body.startswith(b"{") else {}


async def test_a_gateway_sheds_on_its_metrics_address_and_refuses_bad_requests(redis_url: str) -> None:
    # a drain that waits 2 s before it closes anything: the shed refused meanwhile is seen
    async with running(redis_url, drain_delay=2.0) as gw, contextlib.AsyncExitStack() as stack:
        sockets: list[ClientConnection] = []
        for _ in range(10):
            ws = await stack.enter_async_context(client(gw))
            assert (await recv(ws))["type"] == "welcome"
            sockets.append(ws)
        for query in (
            "",
            "?over=1",
            "?count=abc",
            "?count=-1",
            "?count=1&count=2",
            "?count=1&x=2",
            "?count=1&over=nan",
            "?count=1&over=1e9",
            "?count=1&over=-1",
            "?count=%C2%B2",
            "?count=9999999999",
        ):
            status, answer = await _post(gw, f"/admin/shed{query}")
            assert (status, answer["error"]) == (400, "bad_request"), query
        assert (await _post(gw, "/admin/shed?count=1", method="GET"))[0] == 404  # an action is a POST
        assert (await _post(gw, "/metrics"))[0] == 404
        assert all(ws.close_code is None for ws in sockets)  # refused: nothing closed

        status, answer = await _post(gw, "/admin/shed?count=4&over=0.2")
        assert (status, answer["shedding"], answer["connections"]) == (202, 4, 10)
        assert (await _post(gw, "/admin/shed?count=1"))[1]["error"] == "busy"  # one shed at a time
        assert gw._shedding is not None
        await asyncio.wait_for(asyncio.shield(gw._shedding), 5 * T)
        pending = {asyncio.create_task(ws.wait_closed()) for ws in sockets}
        async with asyncio.timeout(5 * T):
            while len(pending) > 6:
                _, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
        closed = [ws for ws in sockets if ws.close_code is not None]
        assert [(ws.close_code, ws.close_reason) for ws in closed] == [(1012, "rebalance")] * 4
        assert len(gw.clients) == 6
        status, answer = await _post(gw, "/admin/shed?count=100&over=0")  # at most every socket
        assert (status, answer["shedding"]) == (202, 6)
        await asyncio.wait_for(asyncio.shield(gw._shedding), 5 * T)
        drain = asyncio.create_task(gw.drain())
        await until(lambda: gw.draining, 2 * T, every=0)  # it says so before its first wait
        assert (await _post(gw, "/admin/shed?count=1"))[1]["error"] == "draining"
        await drain


async def _until_status(lb: Haproxy, name: str, status: str) -> None:
    async with asyncio.timeout(10 * T):
        while True:
            if (await lb.servers())[name]["status"] == status:
                return
            await asyncio.sleep(0.05)


@pytest.mark.slow
@needs_haproxy
async def test_rebalance_evens_out_three_gateways_through_haproxy(
    tmp_path: Path, redis_url: str, capfd: pytest.CaptureFixture[str]
) -> None:
    async with balanced_fleet(tmp_path, redis_url, 3) as fleet:
        lb = fleet.balancers[0]
        gateways = fleet.layout().gateways
        stop = asyncio.Event()
        changes = Changes()
        players = [Player(i, changes) for i in range(60)]
        tasks: list[asyncio.Task[None]] = []

        async def join(group: list[Player]) -> None:
            tasks.extend(asyncio.create_task(p.run(fleet.ws_url, stop)) for p in group)
            async with asyncio.timeout(30 * T):
                await asyncio.gather(*(p.connected.wait() for p in group))

        try:
            # 40 on gw-1, then 20 on gw-2 (leastconn: 0 < 40), gw-3 empty, as after a rollout
            for name in ("gw-2", "gw-3"):
                await lb.set_state(name, "drain")
            await join(players[:40])
            await lb.set_state("gw-2", "ready")
            await _until_status(lb, "gw-2", "UP")
            await join(players[40:])
            await lb.set_state("gw-3", "ready")
            await _until_status(lb, "gw-3", "UP")
            assert await counts(gateways) == {"gw-1": 40, "gw-2": 20, "gw-3": 0}

            result = await rebalance(gateways, over_s=1.0, tolerance=0.1, timeout=30 * T)
            await changes.until(lambda: all(p.connected.is_set() for p in players), 30 * T)
            after = await counts(gateways)

            # evened out already: the command sheds nothing and says so
            code = await asyncio.to_thread(main, ["--data-dir", str(tmp_path), "--over", "1"])
        finally:
            stop.set()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        assert result.before == {"gw-1": 40, "gw-2": 20, "gw-3": 0}
        assert result.shed == {"gw-1": 20}  # gw-2 was at the mean: it shed nothing
        assert result.settled and balanced(result.after, 0.1) and sum(result.after.values()) >= 55
        assert sum(after.values()) == 60 and all(15 <= n <= 25 for n in after.values()), after
        moved = [p for p in players if len(p.gateways) > 1]
        assert len(moved) == 20 and all(p.gateways[0] == "gw-1" for p in moved)
        assert all(p.closes[0] == 1012 for p in moved)
        assert all(p.gateways[1] != "gw-1" for p in moved)  # to the emptier ones
        assert code == 0 and "nothing shed" in capfd.readouterr().out


def test_rebalance_without_a_fleet_or_with_bad_options_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--data-dir", str(tmp_path)]) == 1
    assert f"no {tmp_path}/fleet.json" in capsys.readouterr().err
    assert fleet_main(["rebalance", "--data-dir", str(tmp_path)]) == 1  # python -m fleet rebalance
    assert f"no {tmp_path}/fleet.json" in capsys.readouterr().err
    for argv in (["--over", "-1"], ["--tolerance", "nan"], ["--settle-timeout", "1e9"]):
        with pytest.raises(SystemExit) as exc, contextlib.redirect_stderr(io.StringIO()):
            main(["--data-dir", str(tmp_path), *argv])
        assert exc.value.code == 2


async def test_a_gateway_whose_metrics_do_not_answer_stops_the_rebalance_before_any_shed(redis_url: str) -> None:
    async with running(redis_url) as gw, client(gw) as ws:
        assert (await recv(ws))["type"] == "welcome"
        assert gw.metrics_port is not None
        members = [Member("gw-1", "127.0.0.1", gw.port, gw.metrics_port), Member("gw-2", "127.0.0.1", 1, free_port())]
        with pytest.raises(RuntimeError, match="gw-2: no metrics"):
            await rebalance(members, over_s=0)
        assert ws.close_code is None and len(gw.clients) == 1
