"""A private Prometheus child process, scraping a running fleet, for the tests and the scrape
benchmark of the observability kit (deploy/prometheus/, deploy/grafana/): Debian's ``prometheus``
on a free loopback port with a fresh data directory, its jobs those of the one-host trial's
configuration (deploy/prometheus/compose.yml) pointed at the fleet's ``/metrics`` addresses, the
alert rules loaded; stopped (and its directory removed) on exit. Queried over its HTTP API::

    with PrometheusServer(targets_of(fleet), interval="200ms") as prom:
        prom.wait_scraped(3)
        series = prom.query("sum(lb_gw_connections)")
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml

from .children import die_with_parent, end_server
from .redis_server import free_port
from .supervisor import Fleet

DEPLOY = Path(__file__).resolve().parent.parent / "deploy" / "prometheus"
CONFIG = DEPLOY / "compose.yml"
RULES = DEPLOY / "alerts.yml"


def prometheus_binary() -> str | None:
    return shutil.which("prometheus")


def promtool_binary() -> str | None:
    return shutil.which("promtool")


def targets_of(fleet: Fleet) -> dict[str, list[str]]:
    """The trial configuration's jobs -> this fleet's ``host:port`` of each process's /metrics."""
    a = fleet.addresses
    return {
        "leaderboard-scorer": [f"{a.host}:{a.scorer_metrics_port}"],
        "leaderboard-gateway": [f"{a.host}:{port}" for port in a.gateway_metrics_ports.values()],
        "leaderboard-api": [f"{a.host}:{port}" for port in a.api_metrics_ports.values()],
    }


class PrometheusError(RuntimeError):
    """Prometheus answered a query with an error (a malformed expression, say)."""


class PrometheusServer:
    def __init__(
        self, targets: Mapping[str, Sequence[str]], *, interval: str = "200ms", startup_timeout: float = 30.0
    ) -> None:
        binary = prometheus_binary()
        if binary is None:
            raise FileNotFoundError("prometheus is not installed (Debian: apt-get install prometheus)")
        self.binary = binary
        self.targets = {job: list(t) for job, t in targets.items()}
        self.interval = interval
        self.startup_timeout = startup_timeout
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.dir: Path | None = None
        self.process: subprocess.Popen[bytes] | None = None

    def config(self) -> dict[str, Any]:
        """The trial's configuration: its jobs (each must be given targets), the rules by path."""
        config: dict[str, Any] = yaml.safe_load(CONFIG.read_text())
        config["global"] = {"scrape_interval": self.interval, "scrape_timeout": self.interval}
        config["global"]["evaluation_interval"] = self.interval
        config["rule_files"] = [str(DEPLOY / name) for name in config["rule_files"]]
        jobs = {job["job_name"]: job for job in config["scrape_configs"]}
        assert set(jobs) == set(self.targets), f"the jobs are {sorted(jobs)}"
        for name, job in jobs.items():
            job["static_configs"] = [{"targets": self.targets[name]}]
        return config

    def start(self) -> PrometheusServer:
        self.dir = Path(tempfile.mkdtemp(prefix="lb-prometheus-"))
        (self.dir / "prometheus.yml").write_text(yaml.safe_dump(self.config()))
        with open(self.dir / "prometheus.log", "wb") as logfile:
            self.process = subprocess.Popen(
                [
                    self.binary,
                    f"--config.file={self.dir / 'prometheus.yml'}",
                    f"--storage.tsdb.path={self.dir / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--log.level=warn",
                ],
                stdout=subprocess.DEVNULL,
                stderr=logfile,
                cwd=self.dir,
                start_new_session=True,
                preexec_fn=die_with_parent,
            )
        deadline = time.monotonic() + self.startup_timeout
        while not self._ready():
            if self.process.poll() is not None or time.monotonic() > deadline:
                log = (self.dir / "prometheus.log").read_text(errors="replace")[-2000:]
                self.stop()
                raise RuntimeError(f"prometheus did not start on port {self.port}: {log}")
            time.sleep(0.05)
        return self

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def api(self, path: str, **params: str) -> Any:
        """``GET /api/v1/<path>``'s data; a refused query raises PrometheusError."""
        query = urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=10) as resp:
                body = json.load(resp)
        except urllib.error.HTTPError as exc:
            body = json.load(exc)
        if body["status"] != "success":
            raise PrometheusError(f"{body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The instant vector ``expr`` evaluates to now (its series)."""
        data = self.api("query", query=expr)
        result: list[dict[str, Any]] = data["result"] if data["resultType"] == "vector" else [data["result"]]
        return result

    def scrapes(self) -> dict[str, int]:
        """Each target (``job/host:port``) -> the scrapes Prometheus has stored of it."""
        found = self.query("count_over_time(up[1h])")
        return {f"{s['metric']['job']}/{s['metric']['instance']}": int(s["value"][1]) for s in found}

    def wait_scraped(self, times: int, timeout: float = 30.0) -> None:
        """Until every target was scraped ``times`` times, each successfully the last time."""
        wanted = {f"{job}/{t}" for job, targets in self.targets.items() for t in targets}
        deadline = time.monotonic() + timeout
        while True:
            done = self.scrapes()
            up = {f"{s['metric']['job']}/{s['metric']['instance']}" for s in self.query("up == 1")}
            if set(done) >= wanted and min(done[t] for t in wanted) >= times and up >= wanted:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"scrapes after {timeout} s: {done}, up: {sorted(up)}")
            time.sleep(0.05)

    def stop(self, timeout: float = 10.0) -> None:
        """Idempotent: SIGTERM (SIGKILL if it hangs), then the directory goes."""
        end_server(self.process, self.dir, signal.SIGTERM, timeout)
        self.dir = None

    def __enter__(self) -> PrometheusServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
