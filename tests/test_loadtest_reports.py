"""The load test's reports are made to be shared: no password or token secret in any of them."""

from __future__ import annotations

import secrets
from pathlib import Path

from fleet.redis_server import RedisServer
from leaderboard.settings import redacted
from loadtest.__main__ import command_of, main
from loadtest.report import shareable


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
