"""The admin console and the operators' routes against one real fleet (redis-server, scorer with
a durable log, gateway, HTTP API), the console in a real headless Chromium: never served without a
server-role token; a player looked up, banned, corrected, unbanned, a defined board's entry
removed, dead letters requeued (refused again: kept, with its code) and dropped, each action in
the audit log the page shows and in the durable log the scorer keeps; the fleet's gateways,
scorer replica, lease holder and backlog; each board's live top N.
``LB_UPDATE_SCREENSHOT=1`` saves the console's pictures as docs/console-*.png.

Skipped, with the reason, only where Chromium cannot be installed (./dev test installs it).
"""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from fleet.supervisor import Fleet, FleetSettings
from leaderboard import GameConfig, Leaderboard, Submission, boards, connect, now_ms
from leaderboard.audit import read
from leaderboard.auth import issue
from leaderboard.queue import Queue
from scorer.durable import open_store
from scorer.durable.audit import AuditStore

from .conftest import until
from .test_browser import CHROMIUM, CHROMIUM_ARGS, wait_until

ROOT = Path(__file__).resolve().parent.parent
SECRET = "console-test-secret-of-at-least-32-bytes"
CONFIG = GameConfig(game="test")
OPS = issue("ops:alice", "server", SECRET, exp=time.time() + 3600)
PLAYER = issue("mia", "player", SECRET, exp=time.time() + 3600)
TOWER = {"id": "tower", "keys": [{"name": "floor"}, {"name": "ms", "direction": "asc", "display": "duration_ms"}]}
ROUTES = [
    ("GET", "/v1/players/mia"),
    ("GET", "/v1/audit"),
    ("GET", "/v1/deadletters"),
    ("POST", "/v1/deadletters/1-0/requeue"),
    ("POST", "/v1/deadletters/1-0/drop"),
    ("GET", "/v1/fleet"),
]


@pytest.fixture(scope="module")
async def ops(redis_server: Any, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[Fleet, str]]:
    """One fleet for the module: its scorer keeps a durable log (the audit log recorded there)."""
    data = tmp_path_factory.mktemp("console")
    r = connect(redis_server.url)
    await r.flushall()
    await r.aclose()
    store_url = f"sqlite:///{data}/scores.db"
    settings = FleetSettings(
        redis_url=redis_server.url,
        data_dir=data,
        port=0,
        gateways=1,
        apis=1,
        jwt_secret=SECRET,
        log_level="WARNING",
        env=(("LB_GAME", "test"), ("LB_DURABLE_URL", store_url), ("LB_GW_FLEET_BEAT_S", "0.2")),
    )
    async with Fleet(settings) as fleet:
        yield fleet, store_url


def base(fleet: Fleet) -> str:
    return fleet.api_url.removesuffix("/v1/")


async def test_nothing_of_the_console_without_a_server_token(ops: tuple[Fleet, str]) -> None:
    fleet, _ = ops
    async with httpx.AsyncClient(base_url=base(fleet), timeout=10) as http:
        signin = await http.get("/console")
        assert signin.status_code == 401 and signin.headers["content-type"].startswith("text/html")
        assert 'id="signin"' in signin.text and "Audit log" not in signin.text
        assert signin.headers["x-frame-options"] == "DENY" and signin.headers["cache-control"] == "no-store"
        as_player = await http.get("/console", headers={"Authorization": f"Bearer {PLAYER}"})
        assert as_player.status_code == 403 and as_player.json()["code"] == "forbidden"
        forged = issue("ops:alice", "server", "another-secret-of-at-least-32-bytes!!", exp=time.time() + 60)
        bad = await http.get("/console", headers={"Authorization": f"Bearer {forged}"})
        assert bad.status_code == 401 and bad.json()["code"] == "invalid_token"
        for method, path in ROUTES:
            body = {"reason": "x"} if method == "POST" else None
            anonymous = await http.request(method, path, json=body)
            assert (anonymous.status_code, anonymous.json()["code"]) == (401, "auth_required"), path
            player = await http.request(method, path, json=body, headers={"Authorization": f"Bearer {PLAYER}"})
            assert (player.status_code, player.json()["code"]) == (403, "forbidden"), path
        console = await http.get("/console", headers={"Authorization": f"Bearer {OPS}"})
        assert console.status_code == 200 and "Audit log" in console.text
        auth = {"Authorization": f"Bearer {OPS}"}
        for query, code in [("n=0", "bad_message"), ("before=yesterday", "bad_message")]:
            refused = await http.get(f"/v1/audit?{query}", headers=auth)
            assert (refused.status_code, refused.json()["code"]) == (400, code)
        unknown = await http.post("/v1/deadletters/1-0/drop", json={"reason": "x"}, headers=auth)
        assert (unknown.status_code, unknown.json()["code"]) == (404, "unknown_dead_letter")
        no_reason = await http.post("/v1/deadletters/1-0/drop", json={}, headers=auth)
        assert no_reason.json()["code"] == "invalid_reason"


@pytest.mark.skipif(
    not os.path.exists(CHROMIUM), reason="Chromium is not installed (./dev test installs it as root with apt-get)"
)
async def test_the_console_in_chromium(ops: tuple[Fleet, str], r: aioredis.Redis, tmp_path: Path) -> None:
    fleet, store_url = ops
    playwright = pytest.importorskip("playwright.async_api")
    lb, queue = Leaderboard(r, CONFIG), Queue(r, CONFIG)
    await lb.create_board(boards.parse(TOWER))
    now = now_ms()
    await queue.submit_many(
        [Submission(f"s-{p}", p, pts, now, name=name) for p, pts, name in [("ana", 900, "Ana"), ("mia", 700, "Mia")]]
        + [Submission("t-mia", "mia", 0, now, name="Mia", board="tower", values=(12, 81_250))]
    )
    # two slips the scorer refuses as too old (dead letters, with their code)
    for i in range(2):
        fields = {"id": f"late-{i}", "player": "ben", "points": "5", "ts": str(now - 400 * 86_400_000)}
        await r.xadd(CONFIG.keys.submissions, fields)  # type: ignore[arg-type]
    await until(lambda: _applied(r), 10)

    async with playwright.async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = await browser.new_page(viewport={"width": 1400, "height": 1000}, locale="en-US")
        await page.goto(f"{base(fleet)}/console")
        assert await page.locator("#signin").count() == 1 and await page.locator("#audit").count() == 0
        await page.fill("#token", PLAYER)  # a player's token: refused, no console
        await page.click("button[type=submit]")
        await wait_until(lambda: _has(page.inner_text("#error"), "forbidden"), 5)
        await page.fill("#token", OPS)
        await page.click("button[type=submit]")
        await page.wait_for_selector("body[data-ready='1']", timeout=10_000)

        # the fleet: one gateway (its heartbeat), one scorer replica holding the lease, the backlog
        fleet_text = await page.inner_text("#fleet")
        assert "gw-" in fleet_text or "gateway-" in fleet_text, fleet_text
        assert "none" not in (await page.inner_text("#fleet code"))
        assert await page.locator("#fleet table >> nth=1").locator("tbody tr").count() == 1
        # each board's live top N
        await wait_until(lambda: _has(page.inner_text("[data-board='global']"), "Ana"), 5)
        assert "12, 81250" in await page.inner_text("[data-board='board:tower']")
        assert "lex" in await page.inner_text("[data-board='board:tower'] .muted")  # its encoding

        await page.fill("#player", "mia")
        await page.click("#lookup button")
        await page.wait_for_selector("#shown-player")
        boards_on = await page.locator("#player-view tbody tr").all_inner_texts()
        assert any(row.startswith("global") and "#2" in row for row in boards_on), boards_on
        assert any(row.startswith("board:tower") and "12, 81250" in row for row in boards_on), boards_on

        await page.fill("#reason", "speed hack, ticket 991")
        await page.click("#ban")
        await wait_until(lambda: _has(page.inner_text("#ban-state"), "Banned by ops:alice"), 5)
        await wait_until(lambda: _has(page.inner_text("#audit tbody tr >> nth=0"), "speed hack, ticket 991"), 5)
        if os.environ.get("LB_UPDATE_SCREENSHOT"):
            await page.screenshot(path=str(ROOT / "docs" / "console-ban.png"), full_page=True)
        await page.fill("#reason", "appeal granted")
        await page.click("#unban")
        await wait_until(lambda: _has(page.inner_text("#ban-state"), "Not banned"), 5)
        await page.fill("#points", "650")
        await page.fill("#window", "alltime")
        await page.fill("#reason", "double-counted match")
        await page.click("#correct")
        await wait_until(lambda: _has(page.inner_text("#audit tbody tr >> nth=0"), "double-counted match"), 5)
        # the ban took mia off the tower; put her back through the API, then remove her from the console
        tower = boards.parse(TOWER)
        await lb.correct("mia", (12, 81_250), [(boards.period(tower, "alltime", now_ms()), "board:tower")],
                         actor="test", reason="setup", now=now_ms(), definition=tower)  # fmt: skip
        await page.click("#lookup button")
        await page.wait_for_selector("#player-view button.remove")
        await page.fill("#reason", "glitched run")
        await page.click("#player-view button.remove")
        await wait_until(lambda: _has(page.inner_text("#audit tbody tr >> nth=0"), "glitched run"), 5)

        # dead letters: a requeue still refused keeps its letter (its code shown); a drop removes it
        assert await page.locator("#dead tbody tr").count() == 2
        await page.fill("#reason", "retry after the fix")
        await page.click("#dead button.requeue >> nth=0")
        await wait_until(lambda: _has(page.inner_text("#status"), "timestamp_too_old"), 5)
        assert await page.locator("#dead tbody tr").count() == 2
        await page.fill("#reason", "too old to matter")
        await page.click("#dead button.drop >> nth=0")
        await wait_until(lambda: _eq(page.locator("#dead tbody tr").count(), 1), 5)
        await page.click("#fleet-refresh")
        if os.environ.get("LB_UPDATE_SCREENSHOT"):
            await page.screenshot(path=str(ROOT / "docs" / "console.png"), full_page=True)
        await page.screenshot(path=str(tmp_path / "console.png"), full_page=True)
        await browser.close()

    log = await read(r, CONFIG.keys, count=10)
    assert [(e.action, e.player, e.actor) for e in log] == [
        ("drop", "ben", "ops:alice"),
        ("remove", "mia", "ops:alice"),
        ("correct", "mia", "ops:alice"),
        ("unban", "mia", "ops:alice"),
        ("ban", "mia", "ops:alice"),
    ]
    correct = log[2]
    # the ban took her off every board and the unban does not restore scores: not on it before
    assert correct.before == [{"board": "global", "window": "alltime", "period": "all", "points": None}]
    assert correct.after == [{"board": "global", "window": "alltime", "period": "all", "points": 650, "rank": 2}]
    assert log[4].before["entries"] and log[4].after == {"banned": log[3].before["banned"], "entries": []}
    # the scorer's audit worker keeps the same log in the durable store
    store = open_store(store_url)
    try:
        kept = AuditStore(store)
        shown = await r.xrange(CONFIG.keys.audit)

        async def recorded() -> bool:
            return [(e.id, e.fields()) for e in await kept.entries("test")] == shown

        await until(recorded, 10)
    finally:
        await store.close()


async def _applied(r: aioredis.Redis) -> bool:
    return await r.xlen(CONFIG.keys.dead_letters) == 2 and await Leaderboard(r, CONFIG).size("alltime") == 2


async def _has(text: Any, needle: str) -> bool:
    return needle in await text


async def _eq(value: Any, expected: Any) -> bool:
    return bool(await value == expected)
