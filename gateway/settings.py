"""The gateway's settings: one frozen object, read once from ``LB_``-prefixed environment variables
(README's configuration table lists them all)::

    settings = GatewaySettings.from_env()
    settings = GatewaySettings(port=0, redis_url=url, jwt_secrets=("s3cret",), ping_interval=0.2)

Durations are seconds (floats). ``None`` never means "default": a limit of 0 disables it where the
table says so.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from leaderboard import GameConfig

STATIC_DIR = Path(__file__).resolve().parent / "static"


def _default_id() -> str:
    return f"gw-{socket.gethostname()[:16]}-{os.getpid()}"


@dataclass(frozen=True, slots=True)
class GatewaySettings:
    # --- where
    host: str = "127.0.0.1"
    port: int = 8000
    reuse_port: bool = True  # several processes share the port (SO_REUSEPORT)
    gateway_id: str = field(default_factory=_default_id)
    redis_url: str = "redis://127.0.0.1:6379/0"
    game: GameConfig = field(default_factory=GameConfig)
    default_window: str = ""  # "" = weekly if kept, else the first configured window
    static_dir: Path = STATIC_DIR
    # --- auth
    jwt_secrets: tuple[str, ...] = ()  # first signs (elsewhere), all verify: key rotation
    allowed_origins: tuple[str, ...] = ()  # empty: any origin (and clients without one)
    demo_tokens: bool = False  # GET /demo-token hands out player tokens: local demo only
    demo_players: int = 3000  # ... for player0 .. player<N-1>
    # --- limits
    max_frame: int = 4096  # inbound frame bytes; beyond: close 1009
    max_subscriptions: int = 8
    rate: float = 20.0  # client messages per second, sustained
    burst: int = 40  # ... and in a burst
    abuse_limit: int = 50  # rate-limited messages tolerated before close 1008
    max_connections: int = 20_000
    # accept queue: asyncio's default of 100 overflows in a reconnect storm, and every SYN the
    # kernel drops costs that client a 1 s, then 3 s, retransmission (capped by net.core.somaxconn)
    backlog: int = 2048
    connect_rate: float = 1000.0  # handshakes per second (burst of the same size); 0 = no cap
    backlog_max: int = 1_000_000  # submissions stream cap (refuse with backlog_full)
    # --- flow control
    write_buffer: int = 64 * 1024  # per-socket write buffer bound; above it a socket skips ticks
    max_skips: int = 5  # consecutive skipped messages before a slow socket is closed
    stall_timeout: float = 10.0  # ... or this long above the bound
    fanout: str = "frame"  # "frame": frame once, write bytes; "broadcast": websockets.broadcast()
    # threads writing one snapshot's frames (system calls run outside the GIL): more than 1 only
    # pays on a host with a core to spare for each, e.g. one gateway process on 2 cores
    fanout_threads: int = 1
    # --- the process (python -m gateway only): young objects before a collection. Python's
    # default, 700, runs a full collection every few thousand handshakes while sockets pile up,
    # each pausing the loop for longer as the heap grows (docs/benchmarks.md); 0 keeps it.
    gc_threshold: int = 10_000
    # --- heartbeats
    # "sweep": one task pings every socket (heartbeat.py); "websockets": its keepalive task per
    # connection (for comparison: docs/benchmarks.md)
    heartbeat: str = "sweep"
    ping_interval: float = 20.0  # protocol pings
    ping_timeout: float = 20.0
    client_ping_interval: float = 15.0  # advertised in welcome: app-level ping cadence
    close_timeout: float = 5.0
    # --- own rank
    rank_interval: float = 5.0
    rank_chunk: int = 500  # players per read (one FCALL_RO per board per chunk)
    # --- drain
    drain_delay: float = 2.0  # readiness fails this long before the listener closes
    drain_window: float = 10.0  # sockets are closed in batches spread over this long
    drain_batches: int = 10

    def __post_init__(self) -> None:
        if self.default_window and self.default_window not in self.game.windows:
            raise ValueError(f"default window {self.default_window!r} is not a configured window")
        if self.fanout not in ("frame", "broadcast"):
            raise ValueError("fanout must be 'frame' or 'broadcast'")
        if self.heartbeat not in ("sweep", "websockets"):
            raise ValueError("heartbeat must be 'sweep' or 'websockets'")
        for name in (
            "max_frame",
            "max_subscriptions",
            "burst",
            "max_connections",
            "backlog",
            "fanout_threads",
            "rank_chunk",
            "drain_batches",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        if self.gc_threshold < 0:
            raise ValueError("gc_threshold must be >= 0")
        for name in ("ping_interval", "ping_timeout", "rank_interval", "close_timeout", "rate"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0")

    @property
    def window(self) -> str:
        """The board window a connection is subscribed to when it does not name one."""
        if self.default_window:
            return self.default_window
        return "weekly" if "weekly" in self.game.windows else self.game.windows[0]

    def with_(self, **changes: Any) -> GatewaySettings:
        return replace(self, **changes)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> GatewaySettings:
        env = os.environ if env is None else env
        kwargs: dict[str, Any] = {"game": GameConfig.from_env(env)}
        types = {f.name: f.type for f in fields(cls)}
        for name, var in _ENV.items():
            if var not in env:
                continue
            raw, kind = env[var], types[name]
            try:
                if kind == "tuple[str, ...]":
                    kwargs[name] = tuple(v.strip() for v in raw.split(",") if v.strip())
                elif kind == "bool":
                    kwargs[name] = raw.strip().lower() in ("1", "true", "yes", "on")
                elif kind == "int":
                    kwargs[name] = int(raw)
                elif kind == "float":
                    kwargs[name] = float(raw)
                elif kind == "Path":
                    kwargs[name] = Path(raw)
                else:
                    kwargs[name] = raw
            except ValueError as exc:
                raise ValueError(f"{var}={raw!r}: {exc}") from None
        return cls(**kwargs)


# field -> environment variable (README's configuration table, "gateway" rows)
_ENV = {
    "host": "LB_GW_HOST",
    "port": "LB_GW_PORT",
    "reuse_port": "LB_GW_REUSE_PORT",
    "gateway_id": "LB_GW_ID",
    "redis_url": "LB_REDIS_URL",
    "default_window": "LB_GW_WINDOW",
    "static_dir": "LB_GW_STATIC_DIR",
    "jwt_secrets": "LB_JWT_SECRETS",
    "allowed_origins": "LB_GW_ORIGINS",
    "demo_tokens": "LB_GW_DEMO_TOKENS",
    "demo_players": "LB_GW_DEMO_PLAYERS",
    "max_frame": "LB_GW_MAX_FRAME",
    "max_subscriptions": "LB_GW_MAX_SUBSCRIPTIONS",
    "rate": "LB_GW_RATE",
    "burst": "LB_GW_BURST",
    "abuse_limit": "LB_GW_ABUSE_LIMIT",
    "max_connections": "LB_GW_MAX_CONNECTIONS",
    "backlog": "LB_GW_BACKLOG",
    "connect_rate": "LB_GW_CONNECT_RATE",
    "backlog_max": "LB_BACKLOG_MAX",
    "write_buffer": "LB_GW_WRITE_BUFFER",
    "max_skips": "LB_GW_MAX_SKIPS",
    "stall_timeout": "LB_GW_STALL_TIMEOUT",
    "fanout": "LB_GW_FANOUT",
    "fanout_threads": "LB_GW_FANOUT_THREADS",
    "gc_threshold": "LB_GW_GC_THRESHOLD",
    "heartbeat": "LB_GW_HEARTBEAT",
    "ping_interval": "LB_GW_PING_INTERVAL",
    "ping_timeout": "LB_GW_PING_TIMEOUT",
    "client_ping_interval": "LB_GW_CLIENT_PING_INTERVAL",
    "close_timeout": "LB_GW_CLOSE_TIMEOUT",
    "rank_interval": "LB_GW_RANK_INTERVAL",
    "rank_chunk": "LB_GW_RANK_CHUNK",
    "drain_delay": "LB_GW_DRAIN_DELAY",
    "drain_window": "LB_GW_DRAIN_WINDOW",
    "drain_batches": "LB_GW_DRAIN_BATCHES",
}
