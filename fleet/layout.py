"""The fleet's layout file, ``<data dir>/fleet.json`` (written by ``./dev run --balancer
haproxy``): the balancers' stats sockets and the gateways and HTTP API processes behind them, read
by ``python -m fleet rollout`` and ``rebalance``."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Member:
    """A gateway (or an HTTP API process) behind the balancer: its server name there and its
    backend, where it listens, its metrics address (the port names the process: every gateway has
    its own; an API process is named by its own listening port)."""

    name: str
    host: str
    port: int
    metrics_port: int
    metrics_host: str = "127.0.0.1"
    backend: str = "gateways"


@dataclass(frozen=True, slots=True)
class Layout:
    """What ``fleet.json`` holds: the balancers' stats sockets and the processes behind them."""

    stats_sockets: tuple[str, ...]
    gateways: tuple[Member, ...]
    apis: tuple[Member, ...] = ()

    def dump(self) -> str:
        return json.dumps(
            {
                "stats_sockets": list(self.stats_sockets),
                "gateways": [asdict(g) for g in self.gateways],
                "apis": [asdict(a) for a in self.apis],
            }
        )

    @classmethod
    def load(cls, path: Path) -> Layout:
        raw = json.loads(path.read_text())
        members = [tuple(Member(**m) for m in raw.get(part, ())) for part in ("gateways", "apis")]
        return cls(tuple(raw["stats_sockets"]), *members)


def load_layout(path: Path) -> Layout | None:
    """The layout file, or None after saying why there is none."""
    try:
        return Layout.load(path)
    except FileNotFoundError:
        print(
            f"no {path}: is a fleet running there with --balancer haproxy? (the balancer steers players "
            "away from the gateway restarted, and to the emptiest ones)",
            file=sys.stderr,
        )
        return None
