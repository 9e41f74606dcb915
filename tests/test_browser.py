"""The live page in a real headless Chromium against a real fleet (redis-server, scorer, gateway).

Skipped, with the reason, only where Chromium cannot be installed (./dev test installs it).
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import os
import shutil
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis.asyncio as aioredis

from fleet import demo
from fleet.supervisor import Fleet, FleetSettings
from leaderboard import GameConfig, Leaderboard, Submission, boards, now_ms
from leaderboard.auth import issue
from leaderboard.moderation import Moderation
from leaderboard.profiles import Profile
from leaderboard.queue import Queue

from .test_seed_boards import DEFINITIONS as SEED_BOARDS

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
pytestmark = pytest.mark.skipif(
    not os.path.exists(CHROMIUM), reason="Chromium is not installed (./dev test installs it as root with apt-get)"
)
ROOT = Path(__file__).resolve().parent.parent
SECRET = "browser-test-secret-of-at-least-32-bytes"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-sync",
    "--disable-background-networking",
    "--disable-component-update",
]


def fleet_settings(redis_url: str, tmp_path: Path, *, demo_tokens: bool = False) -> FleetSettings:
    return FleetSettings(
        redis_url=redis_url,
        data_dir=tmp_path,
        port=0,
        gateways=1,
        jwt_secret=SECRET,
        demo_tokens=demo_tokens,
        log_level="WARNING",
        env=(("LB_GAME", "test"), ("LB_GW_RANK_INTERVAL", "1")),
    )


@pytest.fixture
async def fleet(redis_url: str, tmp_path: Path) -> AsyncIterator[Fleet]:
    async with Fleet(fleet_settings(redis_url, tmp_path)) as f:
        yield f


@pytest.fixture
async def demo_fleet(redis_url: str, tmp_path: Path) -> AsyncIterator[Fleet]:
    """A fleet as ``./dev run`` starts it: demo tokens on (the demo traffic is up to each test)."""
    async with Fleet(fleet_settings(redis_url, tmp_path, demo_tokens=True)) as f:
        yield f


@pytest.fixture(scope="module")
async def browser() -> AsyncIterator[Any]:
    playwright = pytest.importorskip("playwright.async_api")
    async with playwright.async_playwright() as p:
        b = await p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        await b.close()


async def submit(r: aioredis.Redis, *subs: tuple[str, int, str]) -> None:
    now = now_ms()
    await Queue(r, GameConfig(game="test")).submit_many(
        [Submission(f"{player}-{points}-{now}", player, points, now, name=name) for player, points, name in subs]
    )


async def rows(page: Any) -> list[str]:
    return list(await page.locator("#top tbody tr .name").all_inner_texts())


async def wait_until(check: Any, timeout: float) -> float:
    """Poll the page (a browser has no event to await from here); the seconds it took."""
    start = time.monotonic()
    while not await check():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"not within {timeout} s")
        await asyncio.sleep(0.05)
    return time.monotonic() - start


async def test_top10_shows_and_a_change_appears_within_2_s(fleet: Fleet, browser: Any, r: aioredis.Redis) -> None:
    await submit(r, *((f"p{i}", 100 * i, f"Player {i}") for i in range(1, 13)))
    page = await browser.new_page(viewport={"width": 390, "height": 844})  # a phone screen
    await page.goto(fleet.page_url)
    await wait_until(lambda: _eq(rows(page), [f"Player {i}" for i in range(12, 2, -1)]), 10)
    assert await page.inner_text("#status-text") == "Live"
    await submit(r, ("mia", 5000, "Mia Storm"))
    took = await wait_until(lambda: _first(rows(page), "Mia Storm"), 2.0)
    assert took <= 2.0
    assert await page.locator("#top tbody tr").count() == 10
    await submit(r, ("long", 6000, "Maximilian Alexander von Habsburg-Lothringen der Zweite"))
    await wait_until(lambda: _first(rows(page), "Maximilian Alexander von Habsburg-Lothringen der Zweite"), 2.0)
    assert await no_horizontal_scroll(page)
    await page.close()


async def no_horizontal_scroll(page: Any) -> bool:
    return bool(await page.evaluate("document.documentElement.scrollWidth <= document.documentElement.clientWidth"))


async def test_page_reconnects_by_itself_after_its_gateway_dies(fleet: Fleet, browser: Any, r: aioredis.Redis) -> None:
    await submit(r, ("ana", 300, "Ana"))
    page = await browser.new_page()
    await page.goto(fleet.page_url)
    await wait_until(lambda: _first(rows(page), "Ana"), 10)
    # Two minutes on with nothing new: connected, the board is idle, not lost (not red).
    await page.clock.set_fixed_time(time.time() + 120)  # Date only: the page's timers keep running
    await wait_until(lambda: _eq(page.get_attribute("#fresh", "data-state"), "idle"), 3)
    assert (await page.inner_text("#fresh")).startswith("idle")
    red = "rgb(210, 69, 47)"  # --down: the colour of a lost connection
    assert await page.eval_on_selector("#fresh", "e => getComputedStyle(e).color") != red
    [gw] = fleet.gateways
    gw.send_signal(signal.SIGKILL)
    await gw.wait()
    await wait_until(lambda: _contains(page.inner_text("#status-text"), "Reconnecting"), 5)
    await wait_until(lambda: _eq(page.get_attribute("#fresh", "data-state"), "offline"), 3)  # now it is
    assert await page.eval_on_selector("#fresh", "e => getComputedStyle(e).color") == red
    assert await rows(page) == ["Ana"]  # the last snapshot stays on screen
    await submit(r, ("leo", 900, "Leo"))  # the board moves while the page is away
    fleet.gateways[0] = await fleet.start_gateway(0)
    await wait_until(lambda: _eq(rows(page), ["Leo", "Ana"]), 30)  # back, showing the current board
    assert await page.inner_text("#status-text") == "Live"
    await page.close()


async def test_rank_panel_shows_and_updates(fleet: Fleet, browser: Any, r: aioredis.Redis) -> None:
    await submit(r, ("ana", 500, "Ana"), ("mia", 100, "Mia"), ("leo", 300, "Leo"))
    token = issue("mia", "player", SECRET, exp=time.time() + 600)
    page = await browser.new_page()
    await page.goto(f"{fleet.page_url}#token={token}")
    await wait_until(lambda: _eq(page.inner_text("#my-rank"), "#3"), 10)
    assert not await page.locator("#me").is_hidden()
    await wait_until(lambda: _eq(around_me(page), "3"), 5)  # the neighbours come without asking
    await submit(r, ("mia", 900, "Mia"))
    await wait_until(lambda: _eq(page.inner_text("#my-rank"), "#1"), 5)
    await wait_until(lambda: _eq(around_me(page), "1"), 5)
    assert await page.locator("#top tbody tr.me .you").count() == 1  # marked in the top 10, not only bold
    assert await page.locator("#around li.me .you").count() == 1
    await page.close()


async def test_rank_panel_shows_your_rank_last_week(fleet: Fleet, browser: Any, r: aioredis.Redis) -> None:
    last_week = now_ms() - 7 * 86_400_000
    lb = Leaderboard(r, GameConfig(game="test"))
    slips = [Submission(f"lw-{p}", p, pts, last_week).fields() for p, pts in (("ana", 500), ("mia", 100))]
    await lb.submit_batch(slips, now=last_week)
    await submit(r, ("mia", 50, "Mia"))
    token = issue("mia", "player", SECRET, exp=time.time() + 600)
    page = await browser.new_page()
    await page.goto(f"{fleet.page_url}#token={token}")
    await wait_until(lambda: _contains(page.inner_text("#my-past"), "#2 of 2"), 10)
    assert (await page.inner_text("#my-past")).startswith("Last week (")
    await page.locator("#windows button", has_text="alltime").click()
    await wait_until(lambda: page.locator("#my-past").is_hidden(), 5)  # the all-time board has no past
    await page.close()


async def test_a_tournament_shows_live_beside_the_windows(fleet: Fleet, browser: Any, r: aioredis.Redis) -> None:
    lb = Leaderboard(r, GameConfig(game="test"))
    now = now_ms()
    await lb.create_tournament("cup", now - 60_000, now + 3_600_000)
    await lb.join("cup", ["mia", "leo"])
    await Queue(r, GameConfig(game="test")).submit(Submission("t1", "leo", 300, now, name="Leo", tournament="cup"))
    token = issue("mia", "player", SECRET, exp=time.time() + 600)
    page = await browser.new_page()
    await page.goto(f"{fleet.page_url}#window=t-cup&token={token}")
    await wait_until(lambda: _eq(rows(page), ["Leo"]), 10)
    assert await page.locator("#windows button", has_text="t-cup").get_attribute("aria-pressed") == "true"
    await Queue(r, GameConfig(game="test")).submit(Submission("t2", "mia", 500, now_ms(), name="Mia", tournament="cup"))
    await wait_until(lambda: _eq(page.inner_text("#my-rank"), "#1"), 5)  # own-rank pushes work on it too
    await wait_until(lambda: _eq(rows(page), ["Mia", "Leo"]), 5)
    await page.close()


async def test_every_board_is_offered_and_shows_its_keys_by_their_display_hints(
    fleet: Fleet, browser: Any, r: aioredis.Redis
) -> None:
    """The picker lists the game's boards as links; each opens in its own first window (none
    keeps ``weekly``, the game's default), and shows its keys by their display hints in the top,
    the rank panel, the players around and the feed: times as durations (m:ss.mmm), money as
    units and cents (exact beyond a double's 2^53), both keys of a two-key board; metadata as text."""
    config = GameConfig(game="test")
    lb = Leaderboard(r, config)
    ms = {"name": "lap", "direction": "asc", "display": "duration_ms", "min": 0, "max": 36_000_000}
    speedrun = {"id": "speedrun", "keys": [ms], "windows": ["daily"], "metadata_bytes": 64}
    await lb.create_board(boards.parse(speedrun))
    balance = {"name": "balance", "display": "money"}
    await lb.create_board(boards.parse({"id": "wallet", "keys": [balance], "operator": "set", "windows": ["monthly"]}))
    floor = {"name": "floor", "min": 0, "max": 10_000}
    time_key = {"name": "time", "direction": "asc", "display": "duration_ms"}
    await lb.create_board(boards.parse({"id": "tower", "keys": [floor, time_key], "windows": ["daily"]}))
    now = now_ms()
    html = '<img src=x onerror="window.pwned=1">'
    runs = [
        ("speedrun", "ana", (61_500,), "Mazda MX-5"),
        ("speedrun", "ben", (59_990,), html),
        ("speedrun", "cy", (3_725_042,), None),  # over an hour: minutes keep counting
        ("wallet", "ana", (123_456,), None),
        ("wallet", "ben", (-5,), None),
        ("wallet", "cy", (10**17 + 1,), None),  # 10^15 units and a cent: beyond 2^53
        ("tower", "ana", (1_204, 81_250), None),
        ("tower", "ben", (1_204, 79_900), None),  # the same floor, faster: ranked apart
    ]
    await Queue(r, config).submit_many(
        [Submission(f"d{i}", p, 0, now, board=b, values=v, meta=m) for i, (b, p, v, m) in enumerate(runs)]
    )
    page = await browser.new_page(locale="en-US")
    await page.goto(f"{fleet.page_url}#token={issue('ana', 'player', SECRET, exp=time.time() + 600)}")
    links = page.locator("#boards a")
    await wait_until(lambda: _eq(links.all_inner_texts(), ["global", "speedrun", "tower", "wallet"]), 10)
    cells, around = page.locator("#top tbody tr td.num"), page.locator("#around li .num")

    await links.filter(has_text="speedrun").click()  # a link: the address names the board
    assert page.url.endswith("&board=speedrun") or "board=speedrun" in page.url
    await wait_until(lambda: _eq(cells.all_inner_texts(), ["0:59.990", "1:01.500", "62:05.042"]), 5)
    assert await page.inner_text("#windows [aria-pressed=true]") == "daily"  # its own first window
    assert await page.text_content("#score-col") == "lap"  # shown in capitals, like the other heads
    await wait_until(lambda: _contains(page.inner_text("#my-score"), "lap 1:01.500 · of 3 players"), 5)
    await wait_until(lambda: _eq(around.all_inner_texts(), ["0:59.990", "1:01.500", "62:05.042"]), 5)
    assert "points" not in await page.inner_text("main")
    metas = await page.locator("#top tbody tr td.player .meta").all_inner_texts()
    assert metas == [html, "Mazda MX-5"]  # the markup as text; cy has none
    assert await page.locator("#around li .meta").all_inner_texts() == [html, "Mazda MX-5"]
    assert not await page.evaluate("window.pwned === 1")
    await wait_until(lambda: _contains(page.locator("#feed .num").all_inner_texts(), " · 1:01.500"), 5)

    await page.locator("#boards a", has_text="tower").click()
    await wait_until(lambda: _eq(cells.all_inner_texts(), ["1,204 · 1:19.900", "1,204 · 1:21.250"]), 5)
    await wait_until(lambda: _eq(around.all_inner_texts(), ["1,204 · 1:19.900", "1,204 · 1:21.250"]), 5)
    await wait_until(lambda: _contains(page.inner_text("#my-score"), "floor 1,204 · time 1:21.250"), 5)
    assert await page.inner_text("#my-rank") == "#2"

    await page.goto(f"{fleet.page_url}#board=board:wallet")  # the long form, and a spectator
    await page.reload()
    await wait_until(lambda: _eq(cells.all_inner_texts(), ["1,000,000,000,000,000.01", "1,234.56", "-0.05"]), 10)
    assert await page.inner_text("#windows [aria-pressed=true]") == "monthly"
    await page.goto(f"{fleet.page_url}#board=nope")
    await wait_until(lambda: _eq(page.get_attribute("#fresh", "data-state"), "error"), 5)
    await page.close()


async def test_a_board_kept_per_region_offers_its_regions(fleet: Fleet, browser: Any, r: aioredis.Redis) -> None:
    """A board kept per region opens on its home (all regions); the regions its slips named are
    offered beside the board picker, and one picked reads that region's board in every panel
    (top, rank, around, feed); the address is then a link that opens it directly.
    ``LB_UPDATE_SCREENSHOT=1`` saves the region's board as docs/screenshot-regions.png."""
    config = GameConfig(game="test")
    lb = Leaderboard(r, config)
    floor = {"name": "floor", "min": 0, "max": 10_000}
    time_key = {"name": "time", "direction": "asc", "display": "duration_ms"}
    tower = {"id": "tower", "keys": [floor, time_key], "windows": ["daily"], "scopes": ["region"]}
    await lb.create_board(boards.parse(tower))
    now = now_ms()
    climbs = [
        ("ana", (12, 81_000), "eu"),
        ("ben", (12, 79_000), "us"),
        ("cy", (9, 50_000), "eu"),
        ("dee", (14, 1), None),  # no region: the home board only
    ]
    queue = Queue(r, config)
    await queue.submit_many(
        [
            *(Submission(f"c-{p}", p, 0, now, name=p.title(), board="tower", values=v, region=g) for p, v, g in climbs),
            Submission("g-ben", "ben", 5, now, name="Ben", region="us"),  # the game's own region:us
        ]
    )
    page = await browser.new_page(locale="en-US", viewport={"width": 1100, "height": 620})
    await page.goto(f"{fleet.page_url}#board=tower&token={issue('ana', 'player', SECRET, exp=time.time() + 600)}")
    await wait_until(lambda: _eq(rows(page), ["Dee", "Ben", "Ana", "Cy"]), 10)  # the home: every region
    scopes = page.locator("#scopes a")
    await wait_until(lambda: _eq(scopes.all_inner_texts(), ["all regions", "eu", "us"]), 5)
    assert await page.locator("#scopes a[aria-current=page]").inner_text() == "all regions"
    assert await page.locator("#boards a").all_inner_texts() == ["global", "tower"]  # homes only
    await wait_until(lambda: _eq(page.inner_text("#my-rank"), "#3"), 5)

    await scopes.filter(has_text="eu").click()
    await wait_until(lambda: _eq(rows(page), ["Ana", "Cy"]), 5)
    assert "board=tower:region:eu" in page.url
    cells = page.locator("#top tbody tr td.num")
    assert await cells.all_inner_texts() == ["12 · 1:21.000", "9 · 0:50.000"]
    assert await page.locator("#boards a[aria-current=page]").inner_text() == "tower"
    await wait_until(lambda: _eq(page.inner_text("#my-rank"), "#1"), 5)
    await wait_until(lambda: _eq(page.locator("#around li .name").all_inner_texts(), ["Ana", "Cy"]), 5)
    assert await page.inner_text("#players") == "2"
    # the feed: the region's entries only (a slip of the US's board is not this board's)
    await queue.submit_many(
        [
            Submission("c-eve", "eve", 0, now_ms(), name="Eve", board="tower", values=(20, 1), region="us"),
            Submission("c-fay", "fay", 0, now_ms(), name="Fay", board="tower", values=(30, 1), region="eu"),
        ]
    )
    await wait_until(lambda: _eq(rows(page), ["Fay", "Ana", "Cy"]), 5)
    await wait_until(lambda: _contains(page.locator("#feed .name").all_inner_texts(), "Fay"), 5)
    assert "Eve" not in await page.locator("#feed .name").all_inner_texts()
    if os.environ.get("LB_UPDATE_SCREENSHOT"):
        await page.screenshot(path=str(ROOT / "docs" / "screenshot-regions.png"))

    link = page.url  # a link to the region's board opens it directly
    opened = await browser.new_page(locale="en-US")
    await opened.goto(link)
    await wait_until(lambda: _eq(rows(opened), ["Fay", "Ana", "Cy"]), 10)
    await wait_until(lambda: _eq(opened.locator("#scopes a[aria-current=page]").all_inner_texts(), ["eu"]), 5)
    await opened.locator("#scopes a", has_text="all regions").click()
    await wait_until(lambda: _eq(rows(opened), ["Fay", "Eve", "Dee", "Ben", "Ana", "Cy"]), 5)
    # the game's own boards offer their regions the same way
    await opened.locator("#boards a", has_text="global").click()
    await wait_until(lambda: _eq(opened.locator("#scopes a").all_inner_texts(), ["all regions", "us"]), 5)
    await opened.locator("#scopes a", has_text="us").click()
    await wait_until(lambda: _eq(rows(opened), ["Ben"]), 5)
    assert "board=region:us" in opened.url
    await opened.close()
    await page.close()


async def around_me(page: Any) -> str | None:
    """The rank the "players around you" list shows for the player, or None."""
    me = page.locator("#around li.me")
    return await me.get_attribute("value") if await me.count() == 1 else None


async def test_around_follows_the_rank_push_and_the_counts_agree(fleet: Fleet, browser: Any, r: aioredis.Redis) -> None:
    await submit(r, ("ana", 500, "Ana"), ("mia", 300, "Mia"), ("leo", 100, "Leo"))
    token = issue("mia", "player", SECRET, exp=time.time() + 600)
    page = await browser.new_page()
    await page.goto(f"{fleet.page_url}#token={token}")
    await wait_until(lambda: _eq(around_me(page), "2"), 10)
    # Others overtake the player, who does not play: the rank push must carry the list along.
    await submit(r, ("zoe", 400, "Zoe"), ("kai", 350, "Kai"))
    await wait_until(lambda: _eq(page.inner_text("#my-rank"), "#4"), 5)
    await wait_until(lambda: _eq(around_me(page), "4"), 5)
    around = await page.locator("#around li .name").all_inner_texts()
    assert around == ["Zoe", "Kai", "Mia", "Leo"], around
    # One player count on the page, whichever message brought it last.
    assert await page.inner_text("#players") == "5"
    assert "of 5 players" in await page.inner_text("#my-score")
    await page.close()


async def test_ties_share_a_rank_and_a_deep_rank_is_marked_approximate(
    redis_url: str, tmp_path: Path, browser: Any, r: aioredis.Redis
) -> None:
    env = (("LB_RANK_MODE", "competition"), ("LB_GW_DEEP_RANK_FROM", "5"))
    settings = fleet_settings(redis_url, tmp_path)
    settings = dataclasses.replace(settings, env=settings.env + env)
    await submit(
        r,
        ("ana", 5000, "Ana"),
        ("bo", 5000, "Bo"),
        ("cy", 4000, "Cy"),
        *((f"p{i}", 100 + i, f"P{i}") for i in range(40)),
        ("mia", 10, "Mia"),
    )
    token = issue("mia", "player", SECRET, exp=time.time() + 600)
    async with Fleet(settings) as fleet:
        page = await browser.new_page()
        await page.goto(f"{fleet.page_url}#token={token}")
        await wait_until(
            lambda: _eq(
                page.locator("#top tbody tr .rank").all_inner_texts(), ["1", "1", "3", *map(str, range(4, 11))]
            ),
            10,
        )
        assert "(1, 1, 3)" in await page.inner_text("#mode")
        # mia is last of 44: far past the exact ranks, so the push is an estimate, marked as such
        await wait_until(lambda: _startswith(page.inner_text("#my-rank"), "≈ #"), 10)
        assert (await page.inner_text("#my-pct")).startswith("bottom ")  # the last of 44: not "top 100 %"
        await page.close()


async def _startswith(text: Any, prefix: str) -> bool:
    return str(await text).startswith(prefix)


async def test_switching_windows_marks_no_row_new(fleet: Fleet, browser: Any, r: aioredis.Redis) -> None:
    await submit(r, *((f"p{i}", 100 * i, f"Player {i}") for i in range(1, 13)))
    page = await browser.new_page()
    await page.goto(fleet.page_url)
    await wait_until(lambda: _eq(rows(page), [f"Player {i}" for i in range(12, 2, -1)]), 10)
    assert await marked(page) == 0  # a first look shows no movement either
    for name in ("weekly", "alltime", "daily"):
        await page.click(f"#windows button:text-is('{name}')")
        await wait_until(lambda: _eq(page.inner_text("#windows [aria-pressed=true]"), name), 5)  # noqa: B023
        await wait_until(lambda: _eq(rows(page), [f"Player {i}" for i in range(12, 2, -1)]), 5)
        assert await marked(page) == 0, (name, await page.inner_html("#top tbody"))
    await submit(r, ("mia", 550, "Mia"))  # a real entry is still shown as one
    await wait_until(lambda: _contains(rows(page), "Mia"), 5)
    assert await page.locator('#top tbody tr[data-player="mia"] .move').get_attribute("title") == "new in the top 10"
    await page.close()


async def marked(page: Any) -> int:
    """Rows showing a movement mark or the change highlight."""
    return int(await page.locator("#top tbody tr.moved, #top tbody tr .move:not(:empty)").count())


async def test_favicon_is_served_and_the_page_loads_without_errors(demo_fleet: Fleet, browser: Any) -> None:
    """As ``./dev run`` serves it (a fleet without demo tokens answers the page's /demo-token with 404)."""
    fleet = demo_fleet
    page = await browser.new_page()
    failures: list[str] = []

    def on_console(message: Any) -> None:
        if message.type == "error":
            failures.append(message.text)

    def on_response(resp: Any) -> None:
        if resp.status >= 400:
            failures.append(f"{resp.status} {resp.url}")

    page.on("console", on_console)
    page.on("response", on_response)
    await page.goto(fleet.page_url)
    await wait_until(lambda: _eq(page.inner_text("#status-text"), "Live"), 10)
    icon = await page.request.get(f"{fleet.page_url}favicon.ico")
    assert icon.status == 200 and icon.headers["content-type"].startswith("image/")
    assert (await icon.body())[:4] == b"\x00\x00\x01\x00"  # an ICO file
    assert await page.get_attribute("link[rel=icon]", "href") == "/favicon.ico"
    # README's browser snippet, as it is, on the page the fleet serves: a player's live top
    await page.add_script_tag(
        type="module", content="const render = (top) => { window.rendered = top; };\n" + _readme_snippet()
    )
    await wait_until(lambda: _eq(page.evaluate("window.rendered?.type"), "snapshot"), 10)
    assert await page.evaluate("window.rendered.board") == "global"
    assert failures == []
    await page.close()


def _readme_snippet() -> str:
    """README's JavaScript for a page (the block that makes a LeaderboardClient)."""
    blocks = (ROOT / "README.md").read_text().split("```js\n")[1:]
    [snippet] = [block.split("```")[0] for block in blocks if "new LeaderboardClient" in block]
    return snippet


async def test_a_rejected_token_on_a_demo_fleet_is_replaced(demo_fleet: Fleet, browser: Any) -> None:
    """An expired or foreign token (a demo restarted with a new secret): get a demo token, go on."""
    stale = issue("mia", "player", "another-secret-of-at-least-32-bytes!!", exp=time.time() + 600)
    page = await browser.new_page()
    await page.goto(f"{demo_fleet.page_url}#token={stale}")
    # Every connection is greeted as a spectator first; the demo player's welcome follows the hello.
    await wait_until(lambda: _contains(page.evaluate("window.leaderboard?.welcome?.player || ''"), "player"), 10)
    assert await page.inner_text("#status-text") == "Live"
    assert not await page.locator("#me").is_hidden()
    await page.close()


async def test_a_rejected_token_without_demo_tokens_stops(fleet: Fleet, browser: Any) -> None:
    """Production: no /demo-token, so retrying cannot help and the page says why."""
    page = await browser.new_page()
    await page.goto(f"{fleet.page_url}#token=not-a-token")
    await wait_until(lambda: _contains(page.inner_text("#status-text"), "Disconnected: invalid_token"), 10)
    # A renewed token refused again stops too: one renewal per welcome, never a loop.
    renewals = await page.evaluate(
        """async () => {
            const { LeaderboardClient } = await import("/client.js");
            let calls = 0;
            const c = new LeaderboardClient(`ws://${location.host}/ws`,
                { token: "bad", renewToken: async () => (calls++, "still-bad") });
            const stopped = new Promise((resolve) => c.addEventListener("status",
                (e) => e.detail.status === "stopped" && resolve(e.detail.reason)));
            c.start();
            const reason = await Promise.race([stopped, new Promise((r) => setTimeout(() => r("timeout"), 5000))]);
            c.stop();
            return { calls, reason };
        }"""
    )
    assert renewals == {"calls": 1, "reason": "invalid_token"}
    await page.close()


async def _eq(value: Any, expected: Any) -> bool:
    return bool(await value == expected)


async def _first(value: Any, expected: str) -> bool:
    got = await value
    return bool(got) and got[0] == expected


async def _contains(value: Any, needle: str) -> bool:
    return needle in await value


async def test_browser_backoff_is_full_jitter_and_spread(fleet: Fleet, browser: Any) -> None:
    """The browser client's own backoff, run in the browser: bounds, growth, reset, hints, spread."""
    page = await browser.new_page()
    await page.goto(fleet.page_url)
    result = await page.evaluate(
        """async () => {
            const { Backoff } = await import("/client.js");
            const b = new Backoff();
            const caps = [], inBounds = [];
            for (let i = 0; i < 10; i++) { const cap = b.cap; caps.push(cap); const d = b.nextDelay();
                                           inBounds.push(d >= 0 && d <= cap); }
            b.connectedFor(3); const afterShort = b.cap; b.connectedFor(10); const afterStable = b.cap;
            const drain = new Backoff(); const drains = [...Array(200)].map(() => drain.nextDelay(1012));
            const over = [...Array(200)].map(() => new Backoff().nextDelay(1013));
            const firsts = [...Array(1000)].map(() => new Backoff().nextDelay());
            const buckets = Array(10).fill(0); for (const d of firsts) buckets[Math.min(9, Math.floor(d / 0.05))]++;
            return { caps, inBounds, afterShort, afterStable, drainMax: Math.max(...drains),
                     drainAttempt: drain.attempt, overMax: Math.max(...over), buckets };
        }"""
    )
    assert result["caps"][:7] == [0.5, 1, 2, 4, 8, 16, 20] and all(result["inBounds"])
    assert (result["afterShort"], result["afterStable"]) == (20, 0.5)
    assert result["drainMax"] <= 1 and result["drainAttempt"] == 0
    assert 2 < result["overMax"] <= 5
    assert all(60 <= n <= 140 for n in result["buckets"]), result["buckets"]
    await page.close()


@pytest.mark.slow
async def test_the_demo_stays_a_race(demo_fleet: Fleet, browser: Any, tmp_path: Path) -> None:
    """The page on ``./dev run``'s traffic: the top 10 keeps changing and the entries feed fills.
    Twenty seconds in the suite; ``LB_DEMO_RACE_S=60`` (or longer) watches the race for longer."""
    desktop = await browser.new_page(viewport={"width": 1100, "height": 760})
    phone = await browser.new_page(viewport={"width": 390, "height": 844})
    for page in (desktop, phone):
        await page.goto(demo_fleet.page_url)
        await wait_until(lambda: _eq(page.inner_text("#status-text"), "Live"), 10)  # noqa: B023
    assert await desktop.locator("#feed .placeholder").count() == 1  # until the first entry
    traffic = asyncio.create_task(demo.traffic(demo_fleet.redis_url, GameConfig(game="test"), DEMO_RATE, seed=1))
    try:
        seen: list[list[str]] = []
        start = time.monotonic()
        while time.monotonic() - start < RACE_S:
            seen.append(await rows(desktop))
            await asyncio.sleep(1)  # one sample a second: the rate of change is what is measured
        changes = sum(a != b for a, b in itertools.pairwise(seen))
        assert changes >= (len(seen) - 1) / 2, f"the top 10 changed in only {changes} of {len(seen) - 1} seconds"
        assert {name for top in seen[-10:] for name in top} - {name for top in seen[:10] for name in top}
        entries = await desktop.locator("#feed li:not(.placeholder)").count()
        assert entries >= 5 and await desktop.locator("#feed .placeholder").count() == 0, entries
        fresh = await desktop.inner_text("#fresh")
        assert fresh in ("updated 0 s ago", "updated 1 s ago", "updated 2 s ago"), fresh
        assert int(await desktop.get_attribute("#spark", "data-points") or 0) >= 1
        for page in (desktop, phone):
            assert await no_horizontal_scroll(page)
        await wait_until(lambda: rank_and_around_agree(desktop), 5)
        if os.environ.get("LB_UPDATE_SCREENSHOT"):
            await desktop.screenshot(path=str(ROOT / "docs" / "screenshot.png"))
            await phone.screenshot(path=str(tmp_path / "phone.png"), full_page=True)  # to look at, not kept
            print(f"phone screenshot: {tmp_path / 'phone.png'}")
    finally:
        traffic.cancel()
        await asyncio.gather(traffic, return_exceptions=True)
        for page in (desktop, phone):
            await page.close()


async def test_the_page_on_deltas_shows_what_full_snapshots_show(demo_fleet: Fleet, browser: Any) -> None:
    """The page (its client takes deltas) beside a client of full snapshots, on the demo's
    traffic: every version both got is the same snapshot, and the page shows the last one.
    In the suite, until the page has applied deltas; ``LB_DEMO_RACE_S`` watches for longer."""
    page = await browser.new_page()
    await page.goto(demo_fleet.page_url)
    await wait_until(lambda: _eq(page.inner_text("#status-text"), "Live"), 10)
    await page.evaluate(
        """async () => {
            const { LeaderboardClient } = await import("/client.js");
            window.seen = { deltas: {}, full: {} };
            const full = new LeaderboardClient(`ws://${location.host}/ws`, { deltas: false });
            window.full = full;
            for (const [name, c] of [["deltas", window.leaderboard], ["full", full]]) {
                c.addEventListener("snapshot", (e) => { window.seen[name][e.detail.version] = e.detail; });
            }
            full.start();
        }"""
    )
    stop = asyncio.Event()
    traffic = asyncio.create_task(
        demo.traffic(demo_fleet.redis_url, GameConfig(game="test"), DEMO_RATE, seed=2, stop=stop)
    )
    try:
        # until the page has applied deltas: a socket takes full snapshots at first, after a skipped
        # tick, and while the top changes so much that a delta would not be smaller
        await wait_until(lambda: page.evaluate("() => window.leaderboard.deltasApplied >= 2"), 30)
        await asyncio.sleep(float(os.environ.get("LB_DEMO_RACE_S", "0")))  # a longer watch, when asked
    finally:
        stop.set()
        await traffic
    same = """() => {
        const d = window.leaderboard.snapshots.get("global|weekly"), f = window.full.snapshots.get("global|weekly");
        return !!d && !!f && d.version === f.version;
    }"""
    await wait_until(lambda: page.evaluate(same), 5)
    result = await page.evaluate(
        """() => {
            // key order aside: a delta's entry keeps its base's order of fields
            const canon = (x) => Array.isArray(x) ? x.map(canon) : x && typeof x === "object"
                ? Object.fromEntries(Object.keys(x).sort().map((k) => [k, canon(x[k])])) : x;
            const same = (a, b) => JSON.stringify(canon(a)) === JSON.stringify(canon(b));
            const versions = Object.keys(window.seen.deltas).filter((v) => v in window.seen.full);
            const differ = versions.filter((v) => !same(window.seen.deltas[v], window.seen.full[v]));
            const last = window.full.snapshots.get("global|weekly");
            return { versions: versions.length, differ, applied: window.leaderboard.deltasApplied,
                     resyncs: window.leaderboard.resyncs, names: last.entries.map((e) => e.name || e.player) };
        }"""
    )
    assert result["versions"] >= 2 and result["applied"] >= 1 and not result["differ"], result
    assert result["resyncs"] == 0
    assert await rows(page) == result["names"]
    await page.evaluate("() => window.full.stop()")
    await page.close()


DEMO_RATE = 200  # submissions/s: a shared test machine; the fleet's default is 300
RACE_S = max(20.0, float(os.environ.get("LB_DEMO_RACE_S", "20")))  # 20: ten samples at each end


async def rank_and_around_agree(page: Any) -> bool:
    shown = (await page.inner_text("#my-rank")).removeprefix("#").replace(",", "")
    return bool(shown == await around_me(page))


PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c4890000000d49444154789c6360000002"
    "0001e221bc330000000049454e44ae426082"
)


async def test_the_top_shows_profiles_escaped(fleet: Fleet, browser: Any, r: aioredis.Redis) -> None:
    await submit(r, ("ana", 500, "Ana"), ("zoe", 300, "Zoe"))
    page = await browser.new_page()
    # the avatar host is answered inside the browser: no traffic leaves the machine
    await page.route("https://cdn.example/**", lambda route: route.fulfill(content_type="image/png", body=PNG))
    await page.goto(fleet.page_url)
    await wait_until(lambda: _eq(rows(page), ["Ana", "Zoe"]), 10)
    mod = Moderation(Leaderboard(r, GameConfig(game="test")))
    html = '<img src=x onerror="window.pwned=1">'
    await mod.set_profile("ana", Profile(name=html, avatar="https://cdn.example/ana.png", country="SE"))
    await wait_until(lambda: _first(rows(page), html), 5)  # the name as text, not markup
    ana = page.locator("#top tbody tr").first
    assert await ana.locator(".flag").get_attribute("title") == "SE"
    assert await ana.locator(".flag").inner_text() == "\U0001f1f8\U0001f1ea"
    assert await ana.locator("img.avatar").get_attribute("src") == "https://cdn.example/ana.png"
    assert not await page.evaluate("window.pwned === 1")
    await page.close()


async def test_a_player_sets_their_display_name_from_the_page(fleet: Fleet, browser: Any, r: aioredis.Redis) -> None:
    await submit(r, ("mia", 500, "Mia"), ("ana", 300, "Ana"))
    token = issue("mia", "player", SECRET, exp=time.time() + 600)
    page = await browser.new_page()
    await page.goto(f"{fleet.page_url}#token={token}")
    await wait_until(lambda: _eq(rows(page), ["Mia", "Ana"]), 10)
    await page.fill("#name-input", "Mi\u0301a \u2728")  # a combining accent: stored as one code point
    await page.click("#name-form button")
    await wait_until(lambda: _eq(page.inner_text("#name-status"), "Saved"), 5)
    profile: Any = await r.hget(GameConfig(game="test").keys.profiles, "mia")
    assert orjson.loads(profile)["name"] == "M\u00eda \u2728"
    await wait_until(lambda: _first(rows(page), "M\u00eda \u2728"), 5)  # the next snapshot carries it
    await page.fill("#name-input", "bad\u202ename")
    await page.click("#name-form button")
    await wait_until(lambda: _contains(page.inner_text("#name-status"), "name must be"), 5)
    await page.close()


WATCH_STANDING = """() => {
    // every state the page passes through, recorded at each change of the DOM
    window.seen = [];
    const state = () => ({
        me: !document.getElementById("me").hidden,
        rank: document.getElementById("my-rank").textContent,
        players: document.getElementById("players").textContent,
        feed: document.querySelectorAll("#feed li:not(.placeholder)").length,
    });
    new MutationObserver(() => window.seen.push(state()))
        .observe(document.body, { subtree: true, childList: true, characterData: true, attributes: true });
}"""


@pytest.mark.slow
async def test_a_reconnect_keeps_the_rank_the_count_and_the_feed_on_screen(
    fleet: Fleet, browser: Any, r: aioredis.Redis
) -> None:
    """Every connection is greeted as a spectator before the hello is read: that greeting must not
    blank the player's panel, the count or the feed while the page comes back."""
    await submit(r, ("mia", 100, "Mia"))
    token = issue("mia", "player", SECRET, exp=time.time() + 600)
    page = await browser.new_page()
    await page.goto(f"{fleet.page_url}#token={token}")
    await wait_until(lambda: _eq(page.inner_text("#my-rank"), "#1"), 10)
    await submit(r, ("ana", 500, "Ana"), ("leo", 300, "Leo"))  # announced live to the open page
    await wait_until(lambda: _eq(page.inner_text("#my-rank"), "#3"), 10)
    await wait_until(lambda: _eq(page.inner_text("#players"), "3"), 15)
    await wait_until(lambda: _contains(page.locator("#feed .name").all_inner_texts(), "Ana"), 5)
    feed = await page.locator("#feed .name").all_inner_texts()
    await page.evaluate(WATCH_STANDING)
    [gw] = fleet.gateways
    gw.send_signal(signal.SIGKILL)
    await gw.wait()
    await wait_until(lambda: _contains(page.inner_text("#status-text"), "Reconnecting"), 5)
    fleet.gateways[0] = await fleet.start_gateway(0)
    await wait_until(lambda: _eq(page.inner_text("#status-text"), "Live"), 30)
    await wait_until(lambda: _eq(page.evaluate("window.leaderboard.welcome.player"), "mia"), 5)
    await submit(r, ("zoe", 50, "Zoe"))  # news after the reconnect: it joins what was kept
    await wait_until(lambda: _eq(page.locator("#feed .name").all_inner_texts(), ["Zoe", *feed]), 10)
    seen = await page.evaluate("window.seen")
    assert seen and all(s["me"] and s["rank"] == "#3" and s["players"] in ("3", "4") for s in seen), seen
    assert min(s["feed"] for s in seen) == len(feed), seen
    await page.close()


async def test_a_rank_near_the_bottom_reads_as_the_bottom(fleet: Fleet, browser: Any, r: aioredis.Redis) -> None:
    await submit(r, *((f"p{i}", 1000 + i, f"P{i}") for i in range(150)), ("mia", 10, "Mia"))
    page = await browser.new_page()
    await page.goto(f"{fleet.page_url}#token={issue('mia', 'player', SECRET, exp=time.time() + 600)}")
    await wait_until(lambda: _eq(page.inner_text("#my-rank"), "#151"), 10)
    # top_percent is 100 (everyone is at or above mia): "top 100 %" would read as praise
    await wait_until(lambda: _eq(page.inner_text("#my-pct"), "bottom 1 %"), 5)
    leader = await browser.new_page()
    await leader.goto(f"{fleet.page_url}#token={issue('p149', 'player', SECRET, exp=time.time() + 600)}")
    await wait_until(lambda: _eq(leader.inner_text("#my-pct"), "top 0.7 %"), 10)
    for p in (page, leader):
        await p.close()


async def test_a_deep_rank_and_its_share_fit_a_phone(fleet: Fleet, browser: Any, r: aioredis.Redis) -> None:
    """ "#2,016" and "bottom 35 %" beside the sparkline were wider than a 390 px screen: the page
    scrolled sideways. The rank line wraps instead."""
    await submit(
        r,
        *((f"p{i}", 10_000 + i, f"P{i}") for i in range(2015)),
        ("mia", 5000, "Mia"),
        *((f"q{i}", 100 + i, f"Q{i}") for i in range(1085)),
    )
    page = await browser.new_page(viewport={"width": 390, "height": 844})
    await page.goto(f"{fleet.page_url}#token={issue('mia', 'player', SECRET, exp=time.time() + 600)}")
    await wait_until(lambda: _eq(page.inner_text("#my-rank"), "#2,016"), 10)
    await wait_until(lambda: _eq(page.inner_text("#my-pct"), "bottom 35 %"), 5)
    assert await no_horizontal_scroll(page)
    await page.close()


async def test_the_feed_shows_the_latest_entries_as_the_page_opens(
    fleet: Fleet, browser: Any, r: aioredis.Redis
) -> None:
    """Entries announced before the page opened are on it at once, not "no one has entered yet"."""
    await submit(r, ("ana", 500, "Ana"), ("leo", 300, "Leo"))
    latest = GameConfig(game="test").keys.latest("weekly", "global")

    async def published() -> bool:  # announced in the same call that wrote them; the tick follows
        return '"leo"' in str(await r.get(latest) or "")

    await wait_until(published, 10)
    page = await browser.new_page()
    await page.goto(fleet.page_url)
    await wait_until(lambda: _eq(page.locator("#feed .name").all_inner_texts(), ["Leo", "Ana"]), 5)
    assert await page.locator("#feed .placeholder").count() == 0
    assert "entered at #" in await page.inner_text("#feed li >> nth=0")
    await page.close()


async def moved(page: Any) -> list[str]:
    """The players of the rows highlighted as having moved."""
    return [
        str(p) for p in await page.locator("#top tbody tr.moved").evaluate_all("rs => rs.map(r => r.dataset.player)")
    ]


async def test_only_rows_that_moved_by_their_own_score_are_highlighted(
    fleet: Fleet, browser: Any, r: aioredis.Redis
) -> None:
    await submit(r, *((f"p{i}", 100 * i, f"Player {i}") for i in range(1, 13)))
    page = await browser.new_page()
    await page.goto(fleet.page_url)
    await wait_until(lambda: _eq(rows(page), [f"Player {i}" for i in range(12, 2, -1)]), 10)
    await submit(r, ("mia", 1050, "Mia"))  # enters at #3: the rows below move down a place
    await wait_until(lambda: _contains(rows(page), "Mia"), 5)
    assert await moved(page) == ["mia"]
    assert await page.locator('#top tbody tr[data-player="p4"] .move').get_attribute("title") == "down from #9"
    await submit(r, ("p9", 1150, "Player 9"))  # climbs from #5 to #2
    after = ["Player 12", "Player 9", "Player 11", "Mia", "Player 10", *(f"Player {i}" for i in range(8, 3, -1))]
    await wait_until(lambda: _eq(rows(page), after), 5)
    assert await moved(page) == ["p9"]
    await page.close()


DRIVERS = [  # name, lap (ms), car: a speedrun board's entries, lowest first
    ("Mia Storm", 461_250, "Porsche 911 GT3 RS"),
    ("Leo Park", 463_900, "Nissan GT-R Nismo"),
    ("Ana Souza", 465_075, "Mercedes-AMG GT Black Series"),
    ("Kai Berg", 468_310, "Lamborghini Huracán STO"),
    ("Zoe Chen", 470_004, "Porsche 718 Cayman GT4"),
    ("Ben Okafor", 472_560, "BMW M4 CSL"),
    ("Ivy Novak", 474_120, "Honda Civic Type R"),
    ("Sam Rossi", 479_880, "Toyota GR Supra"),
    ("Eva Lind", 483_415, "Mazda MX-5"),
    ("Tom Harris", 489_990, "Volkswagen Golf GTI"),
    ("Noa Katz", 497_230, "Ford Mustang Mach 1"),
]
CLIMBERS = [  # name, floor, completion time (ms): the Tower board (seed 003, section 4.2)
    ("Mia Storm", 58, 1_925_400),
    ("Leo Park", 58, 2_011_250),
    ("Ana Souza", 57, 1_750_900),
    ("Kai Berg", 55, 1_640_000),
    ("Zoe Chen", 55, 1_702_315),
    ("Ben Okafor", 55, 1_702_316),
    ("Ivy Novak", 52, 1_480_120),
    ("Sam Rossi", 49, 1_390_555),
    ("Eva Lind", 47, 1_299_800),
    ("Tom Harris", 44, 1_205_010),
    ("Noa Katz", 40, 1_100_000),
]


async def test_a_speedrun_and_the_tower_board_on_the_page(fleet: Fleet, browser: Any, r: aioredis.Redis) -> None:
    """docs/clients.md's pictures: a speedrun board (durations, lowest first, the car as metadata)
    and the Tower board of tests/test_seed_boards.py (floor, then completion time), as a player in
    the middle sees them. ``LB_UPDATE_SCREENSHOT=1`` saves them as docs/screenshot-*.png."""
    config = GameConfig(game="test")
    lb = Leaderboard(r, config)
    lap = {"name": "lap", "direction": "asc", "display": "duration_ms", "min": 0, "max": 3_600_000}
    await lb.create_board(
        boards.parse({"id": "nordschleife", "keys": [lap], "windows": ["daily"], "metadata_bytes": 64})
    )
    await lb.create_board(boards.parse(next(d for d in SEED_BOARDS if d["id"] == "tower")))
    now = now_ms()

    def player(name: str) -> str:
        return name.split()[0].lower()

    slips = [
        Submission(f"n{i}", player(name), 0, now, name=name, board="nordschleife", values=(ms,), meta=car)
        for i, (name, ms, car) in enumerate(DRIVERS)
    ] + [
        Submission(f"t{i}", player(name), 0, now, name=name, board="tower", values=(floor, ms))
        for i, (name, floor, ms) in enumerate(CLIMBERS)
    ]
    await Queue(r, config).submit_many(slips)
    # reduced motion: the picture shows the marks, not a highlight caught halfway through fading
    page = await browser.new_page(viewport={"width": 1100, "height": 760}, locale="en-US", reduced_motion="reduce")
    token = issue("zoe", "player", SECRET, exp=time.time() + 600)
    shots = {
        "nordschleife": ("7:50.004", "7:41.250", "Porsche 911 GT3 RS"),
        "tower": ("55 · 28:22.315", "58 · 32:05.400", None),
    }
    for board, (mine, first, car) in shots.items():
        await page.goto(f"{fleet.page_url}#board={board}&token={token}")
        await page.reload()
        await wait_until(lambda: _eq(page.locator("#top tbody tr").count(), 10), 10)
        assert (await page.locator("#top tbody tr td.num").all_inner_texts())[0] == first
        await wait_until(lambda: _eq(page.inner_text("#my-rank"), "#5"), 5)
        await wait_until(lambda: _eq(page.locator("#around li").count(), 5), 5)
        assert mine in await page.inner_text("#around li.me .num")
        if car is not None:
            assert (await page.locator("#top tbody tr td.player .meta").all_inner_texts())[0] == car
        else:  # a climb while the page is open: the feed and the movement marks show it
            climb = Submission("t-late", "noa", 0, now_ms(), name="Noa Katz", board="tower", values=(56, 1_830_000))
            await Queue(r, config).submit(climb)
            await wait_until(lambda: _first(page.locator("#feed .name").all_inner_texts(), "Noa Katz"), 5)
            assert (await page.inner_text("#feed li >> nth=0")).endswith("entered at #4 · 56 · 30:30.000")
            await wait_until(lambda: _eq(page.inner_text("#my-rank"), "#6"), 5)
            await wait_until(lambda: _eq(around_me(page), "6"), 5)
        if os.environ.get("LB_UPDATE_SCREENSHOT"):
            await page.screenshot(path=str(ROOT / "docs" / f"screenshot-{board}.png"))
    await page.close()
