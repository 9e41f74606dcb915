"""Smoke runs of every ``python -m loadtest`` mode: a few hundred sockets, a few seconds, against
a small fleet on the suite's redis-server. They assert the figures exist and are plausible —
nothing lost, latencies positive and bounded, everyone back after a storm — not performance."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import orjson
import pytest
import redis

from gateway.frames import text_frame
from leaderboard import Entry, GameConfig, Leaderboard, Submission, connect, now_ms, wire
from loadtest.__main__ import main
from loadtest.messages import message_type, snapshot_identity
from loadtest.wsclient import ClientReader, accept_value
from loadtest.wsconn import Conn
from loadtest.wsworker import Worker, WorkerSettings

pytestmark = pytest.mark.timeout(90)


def run(mode: str, tmp_path: Path, redis_url: str, *extra: str) -> dict:  # type: ignore[type-arg]
    stem = tmp_path / mode
    argv = [
        mode,
        "--redis-url",
        redis_url,
        "--game",
        f"lt{mode}",
        "--quiet",
        "--out",
        str(stem),
        "--time-limit",
        "80",
        *extra,
    ]
    assert main(argv) == 0
    html = stem.with_suffix(".html").read_text()
    assert "<svg" in html and "http://" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "")
    doc = orjson.loads(stem.with_suffix(".json").read_bytes())
    assert doc["mode"] == mode and doc["settings"]["mode"] == mode and "jwt_secret" not in doc["settings"]
    # the private fleet wrote into a Redis it did not start: the run's players are gone from it
    assert "WARNING" not in doc["figures"]["cleanup"], doc["figures"]["cleanup"]
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        for key in client.scan_iter(match="lb:*:board:*"):
            assert not [m for m in client.zrange(key, 0, -1) if str(m).startswith("lt-")], key
    finally:
        client.close()
    return doc  # type: ignore[no-any-return]


def check_load(f: dict, sockets: int) -> None:  # type: ignore[type-arg]
    assert f["opened"] == sockets and f["connect_failures"] == 0
    assert f["snapshots"] >= 2, "the feed keeps the top 10 moving: a snapshot per tick"
    assert f["lost"] == 0 and f["deliveries"] == f["expected_deliveries"] == sockets * f["snapshots"]
    assert f["sockets_complete"] == f["sockets_eligible"] == sockets
    lat, spread = f["latency_ms"], f["spread_ms"]
    assert lat["count"] == f["deliveries"]
    assert 0 < lat["p50"] <= lat["p99"] <= lat["max"] < 2000
    assert 0 <= spread["p99"] < 2000
    assert f["gateway_cpu_ms_per_1k_deliveries"] > 0 and f["gateway_rss_kb_per_conn"] > 0


def fine(bucket: list[float]) -> bool:
    """A lag percentile known to within 50 ms (below 5 s, where the lag buckets are that fine)."""
    lower, upper = bucket
    return 0 <= lower < upper and (upper - lower <= 0.05 + 1e-9 or lower >= 5)


@pytest.mark.slow
def test_sockets_mode_with_naive_baseline(tmp_path: Path, redis_url: str) -> None:
    doc = run(
        "sockets",
        tmp_path,
        redis_url,
        "--sockets",
        "300",
        "--duration",
        "5",  # several ticks in the window even when the scorer has a slow second
        "--players-share",
        "0.5",
        "--baseline",
        "naive",
    )
    ours, naive = doc["figures"]["gateway"], doc["figures"]["naive"]
    check_load(ours, 300)
    check_load(naive, 300)
    assert ours["sockets_per_gateway"] == {"gw-1": 300}
    assert ours["rank_pushes"] > 0  # the authenticated half gets its own rank
    assert fine(ours["fleet"]["rank_lag_p99_s"])
    assert math.isfinite(doc["figures"]["ratios"]["gateway / naive: CPU per delivery"])
    # the report's charts are drawn from these figures: latency, CPU and memory, gateway beside naive
    assert (tmp_path / "sockets.html").read_text().count('<img src="data:image/png;base64,') == 3


@pytest.mark.slow
def test_a_feed_that_cannot_move_an_established_top_says_so_or_moves_it(tmp_path: Path, redis_url: str) -> None:
    """A live game's top 10 is far above anything the feed's fresh players score: no snapshot is
    published, and the run says it measured nothing and why (it said "0 / 0 deliveries" and no
    more). ``--feed-into-top`` starts the feed's players at its 10th place, and it moves."""
    stars = [Submission(f"star-{i}", f"star{i}", 100_000_000 + i, now_ms()).fields() for i in range(10)]

    async def establish() -> None:
        r = connect(redis_url)
        try:
            assert all(s.status == "ok" for s in await Leaderboard(r, GameConfig(game="ltsockets")).submit_batch(stars))
        finally:
            await r.aclose()

    asyncio.run(establish())
    small = ("--sockets", "50", "--duration", "2", "--players", "1000")
    f = run("sockets", tmp_path, redis_url, *small)["figures"]["gateway"]
    assert f["snapshots"] == 0 and "established (10th place: 100,000,000 points)" in f["nothing_published"]
    assert "NOTHING MEASURED" in (tmp_path / "sockets.html").read_text()
    f = run("sockets", tmp_path, redis_url, *small, "--feed-into-top")["figures"]["gateway"]
    assert "nothing_published" not in f
    assert f["snapshots"] >= 1 and f["deliveries"] == f["expected_deliveries"] == 50 * f["snapshots"]


@pytest.mark.slow
def test_mixed_mode_applies_the_flood(tmp_path: Path, redis_url: str) -> None:
    doc = run("mixed", tmp_path, redis_url, "--sockets", "300", "--gateways", "2", "--duration", "4", "--rate", "500")
    f = doc["figures"]["gateway"]
    check_load(f, 300)
    assert set(f["sockets_per_gateway"]) == {"gw-1", "gw-2"}
    subs = f["submissions"]
    assert 300 < subs["accepted_per_s"] < 700 and subs["applied_per_s"] > 300
    # what held each side back: the client processes' own figures, the gateways' from /metrics
    c = f["clients"]
    assert c["processes"] == 1 and c["cpu_pct"] > 0 and c["loop_lag_max_ms"] >= 0 and c["gc_pauses"] >= 0
    assert f["fleet"]["write_p99_le_s"] > 0 and fine(f["fleet"]["pubsub_lag_p99_s"])
    # every snapshot of the window, written by each of the two gateways: one observation each. The
    # gateways' metrics are read as the window closes, and a snapshot stamped just inside it can still
    # be on its way through pub/sub then (the last one was, once, under a loaded machine)
    assert f["fleet"]["written_lag_count"] >= 2 * (f["snapshots"] - 1) and fine(f["fleet"]["written_lag_max_s"])


@pytest.mark.slow
def test_submit_mode_with_baseline(tmp_path: Path, redis_url: str) -> None:
    doc = run(
        "submit",
        tmp_path,
        redis_url,
        "--rate",
        "1000",
        "--duration",
        "3",
        "--warmup",
        "1",
        "--baseline",
        "single",
        "--baseline-seconds",
        "1",
    )
    f = doc["figures"]["flood"]
    assert 700 < f["accepted_per_s"] < 1300 and f["applied_per_s"] > 500
    assert doc["figures"]["baseline_one_at_a_time_per_s"] > 0


@pytest.mark.slow
def test_storm_everyone_comes_back(tmp_path: Path, redis_url: str) -> None:
    doc = run(
        "storm", tmp_path, redis_url, "--sockets", "400", "--others", "100", "--gateways", "3", "--max-wait", "30"
    )
    f = doc["figures"]["storm"]
    assert f["victims"] >= 400 and f["never_back"] == 0 and f["reconnected"] == f["victims"]
    assert set(f["victims_by_gateway"]) == {"gw-1"}
    assert 0 < f["t99_s"] <= f["t100_s"] < 30
    assert sum(f["reconnects_per_s"]) == f["victims"] and f["peak_reconnects_per_s"] > 0


def test_messages() -> None:
    snap = (
        b'{"type":"snapshot","board":"global","window":"weekly","period":"2026-W48","version":7,'
        b'"ts":1700000000123,"entries":[{"rank":1}]}'
    )
    assert message_type(snap) == b"snapshot"
    assert snapshot_identity(snap) == ("global|weekly|2026-W48|7", 1700000000123)
    assert message_type(b'{"board":"x","type":"rank"}') == b"rank"
    assert message_type(b"[1]") == b"" and snapshot_identity(b'{"type":"snapshot"}') is None


def snap(board: str, version: int, ts_ms: int) -> bytes:
    entries = [Entry(1, "mia", 100, {})]
    payload = wire.snapshot(
        board=board, window="weekly", period="2030-W48", version=version, ts_ms=ts_ms, entries=entries
    )
    return text_frame(payload)


def opened(conn: Conn, at: float) -> None:
    """The socket's handshake, answered at ``at``."""
    conn.reader = ClientReader("127.0.0.1", "/ws", key="dGhlIHNhbXBsZSBub25jZQ==")
    accept = accept_value("dGhlIHNhbXBsZSBub25jZQ==")
    conn.data_received(b"HTTP/1.1 101 Switching Protocols\r\nSec-WebSocket-Accept: " + accept + b"\r\n\r\n", at, at)


async def test_snapshots_read_with_a_later_tick_are_counted_as_stamped_late() -> None:
    """A read has one kernel timestamp, its last segment's: a socket read a tick late gives its
    earlier snapshot the later arrival. Those deliveries are counted; a tick's several boards,
    written together, are not."""
    worker = Worker(WorkerSettings(count=1))
    conn = Conn(worker, 0)
    t = 1_900_000_000_000
    opened(conn, 0.0)
    # one tick of two boards in one read: the same arrival for both, exact
    conn.data_received(snap("global", 1, t) + snap("region:eu", 1, t), t / 1000 + 0.2, t / 1000 + 0.3)
    # the next two ticks in one read (read a tick late): the first is stamped with the second's arrival
    conn.data_received(snap("global", 2, t + 1000) + snap("global", 3, t + 2000), t / 1000 + 2.1, t / 1000 + 2.2)
    expected = [
        f"{board}|weekly|2030-W48|{v}" for board, v in (("global", 1), ("region:eu", 1), ("global", 2), ("global", 3))
    ]
    report = worker.report(expected, since=0.0)
    assert report["stamped_late"] == 1 and sorted(report["latencies"]) == [100.0, 200.0, 200.0, 1100.0]
    assert worker.report(expected[:2], since=0.0)["stamped_late"] == 0


async def test_a_snapshot_none_of_a_processs_sockets_got_is_missing_from_each() -> None:
    """A process counts what its sockets open since before the window lack: a snapshot it never
    saw at all is lost from every one of them, not left out (it was, before); sockets opened
    during the window are not counted."""
    t = 1_900_000_000_000
    worker = Worker(WorkerSettings(count=3))
    conns = [Conn(worker, i) for i in range(3)]
    for i, conn in enumerate(conns):
        opened(conn, t / 1000 - 10 + 20 * (i == 2))  # the third opened late
        worker.conns[i] = conn
        conn.data_received(snap("global", 1, t), t / 1000 + 0.1, t / 1000 + 0.1)
    conns[0].data_received(snap("global", 2, t + 1000), t / 1000 + 1.1, t / 1000 + 1.1)
    expected = [f"global|weekly|2030-W48|{v}" for v in (1, 2, 3)]  # 3 reached none of them
    assert worker.unseen(expected, since=t / 1000) == (2, 0, 1 + 2)
    report = worker.report(expected, since=t / 1000)
    assert (report["eligible"], report["complete"], report["missing"]) == (2, 0, 3)
    assert worker.unseen(expected[:1], since=t / 1000) == (2, 2, 0)


def test_a_run_against_a_live_fleet_must_name_its_game(capsys: pytest.CaptureFixture[str], redis_url: str) -> None:
    # Without --game its synthetic players would land on the live game's boards for good.
    argv = ["sockets", "--url", "ws://127.0.0.1:9/ws", "--redis-url", redis_url, "--quiet", "--time-limit", "10"]
    assert main(argv) != 0
    err = capsys.readouterr().err
    assert "--url needs --game" in err and len(err.strip().splitlines()) == 1
