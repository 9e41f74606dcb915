"""The load test's reports are made to be shared: no password or token secret in any of them."""

from __future__ import annotations

import base64
import re
import secrets
import sys
from pathlib import Path

import pytest

from fleet.redis_server import RedisServer
from leaderboard.settings import redacted
from loadtest.__main__ import command_of, main
from loadtest.report import shareable, write


def test_a_run_with_a_password_in_its_redis_url_leaves_it_in_no_report(tmp_path: Path) -> None:
    password, token_secret = f"pw-{secrets.token_hex(8)}", f"jwt-{secrets.token_hex(8)}"
    with RedisServer(tmp_path / "redis", password=password) as server:
        assert password in server.url
        stem = tmp_path / "reports" / "run"
        argv = ["submit", "--redis-url", server.url, "--game", "ltsecret", "--rate", "200", "--duration", "1",
                "--warmup", "0.5", "--jwt-secret", token_secret, "--quiet", "--out", str(stem),
                "--time-limit", "60"]  # fmt: skip
        assert main(argv) == 0
    files = [stem.with_suffix(".json"), stem.with_suffix(".html")]
    for path in files:
        text = path.read_text()
        assert password not in text and token_secret not in text, path
        assert redacted(server.url) in text, path  # the URL itself still shown


def test_every_url_and_secret_option_is_hidden_in_a_reports_strings() -> None:
    doc = {
        "settings": {"redis_url": "rediss+cluster://user:s3cret@127.0.0.1:7000", "gateway_env": [("LB_X", "1")]},
        "rows": [("note", "tried unix:///run/redis.sock?db=0&password=s3cret and redis://:s3cret@h:1/0, failed")],
    }
    assert "s3cret" not in str(shareable(doc))
    assert shareable(doc)["settings"]["redis_url"] == "rediss+cluster://user:***@127.0.0.1:7000"
    assert shareable(("ws://127.0.0.1:8000/ws?game=arena", 3)) == ("ws://127.0.0.1:8000/ws?game=arena", 3)
    for argv in (["--jwt-secret", "s3cret"], ["--jwt-secret=s3cret"], ["--j", "s3cret"],
                 ["--gateway-env", "LB_JWT_SECRETS=s3cret"]):  # fmt: skip
        shown = command_of(["sockets", *argv, "--sockets", "10"])
        assert "s3cret" not in shown and shown.endswith("*** --sockets 10"), shown


def phase(scale: float) -> dict[str, object]:
    """A socket phase's headline figures, as ``loadtest.modes.socket_phase`` records them."""
    percentiles = {"count": 100, "p50": 20.0 * scale, "p90": 40.0 * scale, "p99": 60.0 * scale, "max": 80.0}
    return {
        "latency_ms": percentiles,
        "spread_ms": percentiles,
        "gateway_cpu_ms_per_1k_deliveries": 9.0 * scale,
        "gateway_rss_kb_per_conn": 7.0 * scale,
    }


def test_the_html_report_embeds_charts_of_its_headline_figures(tmp_path: Path) -> None:
    doc = {
        "mode": "sockets",
        "command": "python -m loadtest sockets",
        "figures": {"gateway": phase(1), "naive": phase(2)},
    }
    write(tmp_path / "run", doc, [("mode", "sockets")], [])
    page = (tmp_path / "run.html").read_text()
    uris = re.findall(r'<img src="data:image/png;base64,([A-Za-z0-9+/=]+)" alt="([^"]+)"', page)
    assert [alt for _, alt in uris] == ["Snapshot latency", "Gateway CPU per delivery", "Memory per connection"]
    assert all(base64.b64decode(data).startswith(b"\x89PNG\r\n\x1a\n") for data, _ in uris)
    # a run that measured no gateway process (against --url) has no CPU or memory chart
    unmeasured = {**phase(1), "gateway_cpu_ms_per_1k_deliveries": None, "gateway_rss_kb_per_conn": None}
    write(tmp_path / "url", {**doc, "figures": {"gateway": unmeasured}}, [], [])
    assert re.findall(r'alt="([^"]+)"', (tmp_path / "url.html").read_text()) == ["Snapshot latency"]


def test_without_matplotlib_the_report_is_written_and_says_charts_need_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # what an import finds when it is not installed
    write(tmp_path / "run", {"mode": "sockets", "figures": {"gateway": phase(1)}}, [("mode", "sockets")], [])
    page = (tmp_path / "run.html").read_text()
    assert "need matplotlib" in page and "data:image/png" not in page
    assert (tmp_path / "run.json").exists()
