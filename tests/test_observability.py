"""The observability kit proven on a real Prometheus (deploy/prometheus/, deploy/grafana/):
``promtool`` accepts the alert rules and their unit tests pass (each alert fires on what it
watches); Debian's Prometheus scrapes every process of a running fleet (scorer, gateways, HTTP
API); every dashboard query and every alert's query returns series, so a metric renamed in the
code fails here, and Prometheus loads the rules and evaluates each without error."""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import websockets
import yaml

from fleet.prometheus_server import (
    RULES,
    PrometheusError,
    PrometheusServer,
    prometheus_binary,
    promtool_binary,
    targets_of,
)
from fleet.redis_server import RedisServer
from fleet.supervisor import Fleet, FleetSettings
from leaderboard.auth import issue

from .conftest import MS, until
from .test_api import post_applied

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "deploy" / "grafana" / "leaderboard.json"
SECRET = "an-observability-test-secret-32-bytes!"
# the last comparison at the top level of an alert's expression: QUERY <op> THRESHOLD
THRESHOLD = re.compile(r"^(?P<query>.+)\s(?P<op>[<>]=?|==|!=)\s(?P<threshold>[0-9.]+)$", re.S)

needs_promtool = pytest.mark.skipif(promtool_binary() is None, reason="promtool is not installed (./dev install)")
needs_prometheus = pytest.mark.skipif(prometheus_binary() is None, reason="prometheus is not installed (./dev install)")


def alert_rules() -> list[dict[str, Any]]:
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


def dashboard_queries() -> list[tuple[str, str]]:
    """(panel title, expression) of every query of the dashboard."""
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [(p["title"], t["expr"]) for p in panels if p["type"] != "row" for t in p["targets"]]


def split_alert(expr: str) -> str:
    """An alert's query without its threshold."""
    found = THRESHOLD.match(expr.strip())
    assert found, f"not QUERY <op> N: {expr}"
    return found["query"]


@needs_promtool
def test_promtool_accepts_the_rules_and_their_unit_tests_pass() -> None:
    rules = RULES.parent
    for args in (
        ["check", "rules", "alerts.yml"],
        ["test", "rules", "alerts.test.yml"],
        ["check", "config", "compose.yml"],
    ):
        done = subprocess.run([str(promtool_binary()), *args], cwd=rules, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
    # every alert has a unit test that sees it fire
    tested = yaml.safe_load((rules / "alerts.test.yml").read_text())["tests"]
    fired = {t["alertname"] for test in tested for t in test["alert_rule_test"] if t["exp_alerts"]}
    assert fired == {rule["alert"] for rule in alert_rules()}


def test_the_dashboard_covers_what_an_operator_watches() -> None:
    text = " ".join(expr for _, expr in dashboard_queries())
    for metric in (
        "lb_gw_connections", "lb_gw_deliveries_total", "lb_gw_pubsub_lag_seconds_bucket", "lb_gw_dropped_total",
        "lb_scorer_applied_total", "lb_scorer_backlog", "lb_scorer_dead_letters_total", "lb_gw_redis_errors_total",
        "lb_scorer_redis_errors_total", "lb_scorer_durable_commit_seconds_sum", "lb_api_requests_total",
        "lb_api_top_lookups_total",
    ):  # fmt: skip
        assert metric in text, metric


@pytest.fixture(scope="module")
async def fleet(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Fleet]:
    """Scorer, two gateways and an HTTP API on a Redis of their own, with one submission
    applied, its top read through the API and a player connected."""
    with RedisServer(tmp_path_factory.mktemp("redis")) as redis:
        settings = FleetSettings(
            redis_url=redis.url, data_dir=tmp_path_factory.mktemp("fleet"), port=0, gateways=2, apis=1,
            demo_tokens=False, log_level="WARNING", jwt_secret=SECRET,
        )  # fmt: skip
        async with Fleet(settings) as f:
            server = {"Authorization": "Bearer " + issue("game-1", "server", SECRET, exp=time.time() + 600)}
            async with httpx.AsyncClient(base_url=f.api_url, timeout=10) as http:
                slip = {"player_id": "mia", "score": 1200, "match_id": "m-1"}
                assert (await post_applied(http, "boards/global/scores", slip, server)).status_code == 200

                async def on_top() -> bool:  # the scorer's snapshot, held by the API (its ETag)
                    top = await http.get("boards/global/top", params={"n": 1})
                    return "etag" in top.headers and top.json()["entries"][0]["player"] == "mia"

                await until(on_top, 10)
            token = issue("mia", "player", SECRET, exp=time.time() + 600)
            async with websockets.connect(f"{f.ws_url}?token={token}"):
                yield f


@pytest.fixture(scope="module")
def prometheus(fleet: Fleet) -> Iterator[PrometheusServer]:
    with PrometheusServer(targets_of(fleet), interval="200ms") as prom:
        prom.wait_scraped(3)
        yield prom


def wait_series(prom: PrometheusServer, exprs: list[str], seconds: float = 10.0) -> list[str]:
    """The expressions that still return no series after ``seconds`` (a rate needs two scrapes
    in its range: asked again until then)."""
    deadline = time.monotonic() + seconds * MS * 1000
    missing = list(exprs)
    while missing and time.monotonic() < deadline:
        missing = [e for e in missing if not prom.query(e)]
        if missing:
            time.sleep(0.1)
    return missing


@pytest.mark.slow
@needs_prometheus
def test_prometheus_scrapes_every_process_of_the_fleet(fleet: Fleet, prometheus: PrometheusServer) -> None:
    up = {(s["metric"]["job"], s["metric"]["instance"]) for s in prometheus.query("up == 1")}
    assert {job for job, _ in up} == {"leaderboard-scorer", "leaderboard-gateway", "leaderboard-api"}
    assert len(up) == 1 + 2 + 1
    # what the fixture did is seen: the applied submission, the API's answers, the player's socket
    assert prometheus.query("sum(lb_scorer_applied_total) >= 1")
    assert prometheus.query('sum(lb_api_requests_total{code="200"}) >= 1')
    assert prometheus.query("sum(lb_gw_connections) == 1")
    assert prometheus.query("sum(lb_scorer_publisher) == 1") and prometheus.query("sum(lb_gw_ready) == 2")


@pytest.mark.slow
@needs_prometheus
def test_every_dashboard_and_alert_query_returns_series(prometheus: PrometheusServer) -> None:
    queries = [expr for _, expr in dashboard_queries()] + [split_alert(rule["expr"]) for rule in alert_rules()]
    assert wait_series(prometheus, queries) == []
    # every whole alert expression evaluates (healthy, it returns nothing: the threshold holds)
    for rule in alert_rules():
        prometheus.query(rule["expr"])
    # and Prometheus loaded the rules and evaluated each without an error
    loaded = prometheus.api("rules")["groups"]
    health = {r["name"]: (r["health"], r.get("lastError", "")) for g in loaded for r in g["rules"]}
    assert health == {rule["alert"]: ("ok", "") for rule in alert_rules()}


@pytest.mark.slow
@needs_prometheus
def test_a_renamed_metric_is_caught(prometheus: PrometheusServer) -> None:
    """The check above can fail: a query of a name no process exports returns no series, and a
    malformed one is refused."""
    expr = "sum by (instance) (lb_gw_connection)"
    assert wait_series(prometheus, [expr], seconds=0.5) == [expr]
    with pytest.raises(PrometheusError):
        prometheus.query("sum(rate(lb_gw_deliveries_total))")
