"""The scorer's settings: one frozen object per process, from ``LB_`` environment variables.

::

    settings = ScorerSettings.from_env()                       # the process' environment
    settings = ScorerSettings(redis_url=url, tick_ms=50)       # tests: everything by keyword

Every variable is listed in README's configuration table.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, fields

from leaderboard import GameConfig


def default_name() -> str:
    """A consumer name unique to this process: a restarted replica must not inherit the pending
    entries of its previous life by name (they are claimed by idle time like any dead replica's)."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


def parse_thresholds(text: str) -> tuple[tuple[str, int], ...]:
    """``"bronze=1000,silver=10000"`` -> ``(("bronze", 1000), ("silver", 10000))``."""
    out = []
    for part in text.split(","):
        if not part.strip():
            continue
        name, sep, value = part.partition("=")
        if not sep or not name.strip() or not value.strip().isdigit():
            raise ValueError(f"badge thresholds are name=points pairs, got {part!r}")
        out.append((name.strip(), int(value)))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class ScorerSettings:
    redis_url: str = "redis://127.0.0.1:6379/0"
    game: GameConfig = field(default_factory=GameConfig)
    name: str = field(default_factory=default_name)  # consumer name of this replica
    # --- consumer
    batch: int = 500  # entries per read, applied in one FCALL
    block_ms: int = 250  # how long an idle read waits; also bounds how fast SIGTERM is noticed
    concurrency: int = 2  # read-apply-ack loops: one encodes while Redis runs the other's batch
    claim_idle_ms: int = 10_000  # entries pending longer than this are taken from dead replicas
    forget_after_s: int = 3600  # a consumer name idle this long, holding nothing, is removed; 0: never
    max_deliveries: int = 5  # an entry claimed this often (it keeps killing its reader) is dead-lettered
    backlog_max: int = 1_000_000  # the queue refuses submissions beyond this many waiting
    dead_letters_maxlen: int = 100_000
    # --- publisher
    tick_ms: int = 1000
    lease_ttl_ms: int = 3000  # a dead publisher is replaced within this plus one tick
    snapshot_ttl_s: int = 7 * 86_400  # lifetime of a board's stored latest snapshot (refreshed)
    # --- which workers this replica runs (the consumer always runs)
    publish: bool = True
    badges: bool = True  # the badge worker can run in its own replicas, off the consumers' CPU
    # --- badge worker
    badge_thresholds: tuple[tuple[str, int], ...] = (("bronze", 1_000), ("silver", 10_000), ("gold", 100_000))
    badge_top_n: bool = True  # also award "top<N>" to whoever enters the first board's top N
    # --- observability
    metrics_host: str = "127.0.0.1"
    metrics_port: int | None = 9310  # None: no HTTP endpoint
    stats_interval_s: float = 10.0  # the stats log line; 0 disables it
    graceful_timeout_s: float = 10.0  # on SIGTERM, in-flight work gets this long before cancellation

    def __post_init__(self) -> None:
        if not 1 <= self.batch <= 10_000:
            raise ValueError("batch must be 1..10000")
        if self.concurrency < 1 or self.block_ms < 1 or self.claim_idle_ms < 1 or self.max_deliveries < 1:
            raise ValueError("concurrency, block_ms, claim_idle_ms and max_deliveries must be positive")
        if self.tick_ms < 1 or self.lease_ttl_ms <= self.tick_ms:
            # the holder renews once per tick: a lease shorter than a tick would lapse between renewals
            raise ValueError("lease_ttl_ms must be longer than tick_ms")
        if self.forget_after_s < 0:
            raise ValueError("forget_after_s must be >= 0")
        if self.backlog_max < 1 or self.snapshot_ttl_s < 1:
            raise ValueError("backlog_max and snapshot_ttl_s must be positive")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ScorerSettings:
        env = os.environ if env is None else env
        kwargs: dict[str, object] = {"game": GameConfig.from_env(env)}
        ints = {f.name for f in fields(cls) if f.type in ("int", "int | None")}
        for name, var in _VARS.items():
            if var not in env:
                continue
            raw = env[var].strip()
            try:
                if name == "metrics_port":
                    kwargs[name] = int(raw) if raw not in ("", "0") else None
                elif name in ints:
                    kwargs[name] = int(raw)
                elif name in ("stats_interval_s", "graceful_timeout_s"):
                    kwargs[name] = float(raw)
                elif name == "badge_thresholds":
                    kwargs[name] = parse_thresholds(raw)
                elif name in ("badge_top_n", "publish", "badges"):
                    kwargs[name] = raw.lower() not in ("0", "false", "no", "")
                else:
                    kwargs[name] = raw
            except ValueError as exc:
                raise ValueError(f"{var}={raw!r}: {exc}") from None
        return cls(**kwargs)  # type: ignore[arg-type]


_VARS = {
    "redis_url": "LB_REDIS_URL",
    "name": "LB_SCORER_NAME",
    "batch": "LB_SCORER_BATCH",
    "block_ms": "LB_SCORER_BLOCK_MS",
    "concurrency": "LB_SCORER_CONCURRENCY",
    "claim_idle_ms": "LB_SCORER_CLAIM_IDLE_MS",
    "forget_after_s": "LB_SCORER_FORGET_AFTER_S",
    "max_deliveries": "LB_SCORER_MAX_DELIVERIES",
    "backlog_max": "LB_BACKLOG_MAX",
    "dead_letters_maxlen": "LB_DEAD_LETTERS_MAXLEN",
    "tick_ms": "LB_TICK_MS",
    "lease_ttl_ms": "LB_LEASE_TTL_MS",
    "snapshot_ttl_s": "LB_SNAPSHOT_TTL_S",
    "publish": "LB_SCORER_PUBLISH",
    "badges": "LB_SCORER_BADGES",
    "badge_thresholds": "LB_BADGE_THRESHOLDS",
    "badge_top_n": "LB_BADGE_TOP_N",
    "metrics_host": "LB_SCORER_METRICS_HOST",
    "metrics_port": "LB_SCORER_METRICS_PORT",
    "stats_interval_s": "LB_SCORER_STATS_S",
    "graceful_timeout_s": "LB_SCORER_GRACEFUL_S",
}
