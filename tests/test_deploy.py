"""The shipped deployment artefacts, as far as this machine can check them: the systemd units
(deploy/systemd/: systemd accepts them, their stop timeout and descriptor limit fit the processes'
defaults); the Kubernetes manifests (deploy/kubernetes/: valid against the Kubernetes schemas,
every variable a setting of its process, the grace period covering the drain); the image's build
step (deploy/Dockerfile: ./dev's own) and the one-host compose file. No container is built or run
here (no container runtime on the project's machines)."""

from __future__ import annotations

import configparser
import copy
import functools
import hashlib
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import kubernetes_validate
import pytest
import yaml

from api.settings import ApiSettings
from gateway.metrics import Metrics
from gateway.settings import GatewaySettings
from leaderboard.settings import SettingsError, load, variables
from scorer.settings import ScorerSettings

UNITS = Path(__file__).resolve().parent.parent / "deploy" / "systemd"


def unit(name: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # keys are case-sensitive
    parser.read(UNITS / name)
    return parser


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
@pytest.mark.parametrize(
    ("template", "instance"),
    [("leaderboard-gateway@", "8000"), ("leaderboard-scorer@", "1"), ("leaderboard-api@", "8081")],
)
def test_systemd_accepts_the_units(tmp_path: Path, template: str, instance: str) -> None:
    text = (UNITS / f"{template}.service").read_text()
    # verify checks that ExecStart's program exists: this interpreter stands for the deployed venv's
    assert "ExecStart=/opt/leaderboard/venv/bin/python -m " in text
    path = tmp_path / f"{template}{instance}.service"
    path.write_text(text.replace("/opt/leaderboard/venv/bin/python", sys.executable))
    done = subprocess.run(["systemd-analyze", "verify", str(path)], capture_output=True, text=True, timeout=60)
    # systemd ignores an unknown or malformed setting with a warning and status 0: both must be clean
    assert (done.returncode, done.stderr) == (0, ""), done.stderr


def test_the_units_leave_the_drain_its_time_and_the_players_their_descriptors() -> None:
    gw = GatewaySettings(redis_url="redis://127.0.0.1:6379/0")
    service = unit("leaderboard-gateway@.service")["Service"]
    assert float(service["TimeoutStopSec"]) > gw.drain_delay + gw.drain_window + gw.close_timeout
    assert int(service["LimitNOFILE"]) > gw.max_connections
    assert service["KillSignal"] == "SIGTERM" and service["Restart"] == "always"
    api = unit("leaderboard-api@.service")["Service"]
    assert float(api["TimeoutStopSec"]) > ApiSettings(redis_url="redis://127.0.0.1:6379/0").drain_timeout
    assert api["KillSignal"] == "SIGTERM" and api["Restart"] == "always"
    scorer = unit("leaderboard-scorer@.service")["Service"]
    assert float(scorer["TimeoutStopSec"]) > ScorerSettings(redis_url="redis://127.0.0.1:6379/0").graceful_timeout_s


# ---------------------------------------------------------------- Kubernetes, the image, compose

DEPLOY = UNITS.parent
ROOT = DEPLOY.parent
MANIFESTS = sorted((DEPLOY / "kubernetes").glob("*.yaml"))
SETTINGS: dict[str, type[Any]] = {"gateway": GatewaySettings, "scorer": ScorerSettings, "api": ApiSettings}
# stands for the secret an operator creates (the shipped one is refused: test below)
A_SECRET = "an-operators-own-secret-of-32-bytes!!"


@functools.cache  # read once for the module (the tests copy what they change)
def documents() -> list[dict[str, Any]]:
    return [doc for path in MANIFESTS for doc in yaml.safe_load_all(path.read_text()) if doc]


def of_kind(kind: str) -> dict[str, dict[str, Any]]:
    return {doc["metadata"]["name"]: doc for doc in documents() if doc["kind"] == kind}


def module_of(command: list[str]) -> str:
    """The process a container runs: ``python -m MODULE``."""
    assert command[1:2] == ["-m"], command
    return command[2]


def deployments() -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """Process (gateway, scorer, api) -> (its Deployment, its one container)."""
    out = {}
    for deployment in of_kind("Deployment").values():
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        out[module_of(container["command"])] = (deployment, container)
    return out


def shared_env(container: dict[str, Any], secret: str | None = A_SECRET) -> dict[str, str]:
    """What a container gets from its ConfigMaps and Secrets (envFrom)."""
    maps, secrets = of_kind("ConfigMap"), of_kind("Secret")
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        if "configMapRef" in source:
            env.update(maps[source["configMapRef"]["name"]]["data"])
        else:
            env.update(secrets[source["secretRef"]["name"]]["stringData"])
    if secret is not None and "LB_JWT_SECRETS" in env:
        env["LB_JWT_SECRETS"] = secret
    return env


def container_env(container: dict[str, Any], secret: str | None = A_SECRET) -> dict[str, str]:
    """The whole environment a container's process reads (a field reference: the pod's name)."""
    own = {e["name"]: e.get("value", "leaderboard-pod-1") for e in container.get("env", [])}
    return {**shared_env(container, secret), **own}


def test_the_manifests_hold_what_the_fleet_needs() -> None:
    assert set(deployments()) == {"gateway", "scorer", "api"}
    kinds = {(doc["kind"], doc["metadata"]["name"]) for doc in documents()}
    for name in ("leaderboard-gateway", "leaderboard-scorer", "leaderboard-api"):
        assert ("PodDisruptionBudget", name) in kinds
    assert ("HorizontalPodAutoscaler", "leaderboard-gateway") in kinds
    assert {("Service", "leaderboard-gateway"), ("Service", "leaderboard-api")} <= kinds


@pytest.mark.parametrize("version", ["1.29.0", kubernetes_validate.latest_version()])
def test_the_manifests_are_valid_kubernetes_objects(version: str) -> None:
    """Against the API's own schemas (shipped in kubernetes-validate: offline), strictly: a
    misspelt field fails as an unknown property instead of being dropped by the API server."""
    for doc in documents():
        kubernetes_validate.validate(doc, version, strict=True)


def test_a_misspelt_field_is_caught_by_the_schema_check() -> None:
    deployment, _ = deployments()["gateway"]
    broken = copy.deepcopy(deployment)
    broken["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["paht"] = "/readyz"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, kubernetes_validate.latest_version(), strict=True)


def test_every_variable_in_the_manifests_is_a_setting_of_its_process() -> None:
    """No drift: each container's own variables are read by its process, each shared one by a
    process that mounts it; and the whole environment loads (parses and passes the checks)."""
    mounted: dict[str, set[str]] = {}
    for module, (_, container) in deployments().items():
        known = {var for var, _, _ in variables(SETTINGS[module])}
        own = {e["name"] for e in container["env"]}
        assert own <= known, f"{module}: {sorted(own - known)} are not its settings"
        for var in shared_env(container):
            mounted.setdefault(var, set()).add(module)
        load(SETTINGS[module], container_env(container))
    for var, modules in mounted.items():
        assert any(var in {v for v, _, _ in variables(SETTINGS[m])} for m in modules), f"{var} is read by none"


def test_the_shipped_secret_is_refused_so_no_fleet_starts_with_it() -> None:
    """The processes that verify tokens refuse the placeholder (the scorer reads no token)."""
    d = deployments()
    for module in ("gateway", "api"):
        with pytest.raises(SettingsError):
            load(SETTINGS[module], container_env(d[module][1], secret=None))


def grace_after_prestop(deployment: dict[str, Any], container: dict[str, Any]) -> float:
    """terminationGracePeriodSeconds less the preStop's sleep (both run within the grace)."""
    spec = deployment["spec"]["template"]["spec"]
    command = container.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", ["sleep", "0"])
    assert command[0] == "sleep"
    return float(spec["terminationGracePeriodSeconds"]) - float(command[1])


def test_the_grace_period_covers_the_drain_and_readiness_is_readyz() -> None:
    d = deployments()
    deployment, container = d["gateway"]
    gw = load(GatewaySettings, container_env(container))
    assert grace_after_prestop(deployment, container) > gw.drain_delay + gw.drain_window + gw.close_timeout
    assert container["lifecycle"]["preStop"]  # the Service's endpoints drop the pod before SIGTERM
    deployment, container = d["api"]
    api = load(ApiSettings, container_env(container))
    assert grace_after_prestop(deployment, container) > api.drain_timeout
    assert container["lifecycle"]["preStop"]
    deployment, container = d["scorer"]
    scorer = load(ScorerSettings, container_env(container))
    assert grace_after_prestop(deployment, container) > scorer.graceful_timeout_s
    ports = {
        "gateway": gw.port,
        "api": api.port,
        "scorer": scorer.metrics_port,  # a scorer answers its probe beside /metrics
    }
    for module, (_, container) in d.items():
        probe = container["readinessProbe"]["httpGet"]
        named = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert probe["path"] == "/readyz" and named[probe["port"]] == ports[module], module


def test_the_autoscaler_adds_a_gateway_before_one_is_full() -> None:
    hpa = of_kind("HorizontalPodAutoscaler")["leaderboard-gateway"]
    (metric,) = hpa["spec"]["metrics"]
    # the gateway's own gauge, per pod (served to the autoscaler by a Prometheus adapter)
    assert metric["pods"]["metric"]["name"] == "lb_gw_connections"
    assert "lb_gw_connections" in Metrics().render().decode()
    _, container = deployments()["gateway"]
    cap = load(GatewaySettings, container_env(container)).max_connections
    assert 0 < float(metric["pods"]["target"]["averageValue"]) < cap


def test_the_pods_export_metrics_where_their_annotations_say() -> None:
    for module, (deployment, container) in deployments().items():
        settings = load(SETTINGS[module], container_env(container))
        annotations = deployment["spec"]["template"]["metadata"]["annotations"]
        assert int(annotations["prometheus.io/port"]) == settings.metrics_port != 0
        assert settings.metrics_host == "0.0.0.0"  # reachable from outside the pod


DOCKERFILE = DEPLOY / "Dockerfile"


def test_the_image_is_built_by_the_same_install_step_as_a_checkout() -> None:
    """One source for both: the image's one project step is ``./dev install --runtime``, the
    virtualenv step ``./dev test`` and ``./dev install`` run (need_venv, from requirements.lock),
    given the files it reads and the packages the project installs."""
    text = DOCKERFILE.read_text()
    runs = [line for line in text.splitlines() if line.startswith("RUN ")]
    assert [r for r in runs if "./dev" in r] == ["RUN ./dev install --runtime && rm -rf /root/.cache"]
    dev = (ROOT / "dev").read_text()
    runtime = dev.split('if [ "${1:-}" = --runtime ]; then', 1)[1].split("fi", 1)[0]
    assert "need_venv" in runtime and "need_venv" in dev.split("run_tests() {", 1)[1].split("}", 1)[0]
    copied = {part.rstrip("/") for line in text.splitlines() if line.startswith("COPY ") for part in line.split()[1:-1]}
    assert {"dev", "pyproject.toml", "requirements.lock"} <= copied
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    assert {p.split(".")[0] for p in packages if p != "leaderboard.lua"} | {"lua"} <= copied
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert ".venv*" in ignored and "var" in ignored and not {"dev", "requirements.lock", "lua"} & set(ignored)


def test_dev_install_runtime_installs_the_virtualenv_alone() -> None:
    """``./dev install --runtime`` is the virtualenv step, nothing else: where the virtualenv is
    current (./dev test made it), it returns at once, installing nothing (no apt-get, no pip)."""
    stamp = ROOT / ".venv" / ".installed"
    want = hashlib.sha256((ROOT / "requirements.lock").read_bytes() + (ROOT / "pyproject.toml").read_bytes())
    if not stamp.exists() or stamp.read_text().strip() != want.hexdigest():
        pytest.skip("the virtualenv was not made by ./dev (run through ./dev test or ./dev install)")
    done = subprocess.run(["./dev", "install", "--runtime"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_the_compose_file_runs_each_process_with_its_own_settings() -> None:
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    services = compose["services"]
    ours = {name: s for name, s in services.items() if s.get("image", "").startswith("leaderboard:")}
    exported = set()
    assert {module_of(s["command"]) for s in ours.values()} == set(SETTINGS)
    for name, service in ours.items():
        module = module_of(service["command"])
        env = {k: str(v) for k, v in service["environment"].items()}
        known = {var for var, _, _ in variables(SETTINGS[module])}
        assert set(env) <= known, f"{name}: {sorted(set(env) - known)} are not its settings"
        if "LB_JWT_SECRETS" in env:  # ${LB_JWT_SECRETS:?...}: the operator's, or compose refuses
            env["LB_JWT_SECRETS"] = A_SECRET
        settings = load(SETTINGS[module], env)
        assert settings.metrics_port and settings.metrics_host == "0.0.0.0"
        exported.add(f"{name}:{settings.metrics_port}")
        host = urlsplit(settings.redis_url).hostname
        assert host in services, f"{name} reaches Redis at {host}, no service of the file"
    # the trial's Prometheus scrapes each process where it exports its metrics
    prometheus = yaml.safe_load((DEPLOY / "prometheus" / "compose.yml").read_text())
    targets = {t for job in prometheus["scrape_configs"] for c in job["static_configs"] for t in c["targets"]}
    assert targets == exported
