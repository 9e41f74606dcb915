"""The scorer's settings: one frozen object per process, from ``LB_`` environment variables.

::

    settings = ScorerSettings.from_env()                       # the process' environment
    settings = ScorerSettings(redis_url=url, tick_ms=50)       # tests: everything by keyword

Read through ``leaderboard.settings`` (one loader, one boolean rule, errors naming the variable);
``python -m scorer --help`` and README's configuration table list every variable.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from leaderboard import GameConfig
from leaderboard.settings import (
    RedisPool,
    SettingsError,
    above,
    at_least,
    between,
    load,
    log_level,
    nested,
    one_of,
    redis_url,
    setting,
    validate,
)

from .durable import check_url as check_store_url


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
    redis_url: str = redis_url(help="Redis to use (./dev run's own: in var/fleet.env)")
    redis_pool: RedisPool = nested(RedisPool)
    game: GameConfig = nested(GameConfig)
    name: str = setting(
        "LB_SCORER_NAME",
        factory=default_name,
        shown="host-pid-random",
        help="consumer name of this replica (unique per process)",
    )
    # --- consumer
    batch: int = setting(
        "LB_SCORER_BATCH", 500, "entries a scorer reads and applies in one FCALL", check=between(1, 10_000)
    )
    block_ms: int = setting(
        "LB_SCORER_BLOCK_MS",
        250,
        "how long an idle read waits (also bounds how fast SIGTERM is noticed)",
        check=at_least(1),
    )
    concurrency: int = setting(
        "LB_SCORER_CONCURRENCY",
        8,
        "read-apply-ack loops per replica (while one waits on Redis or the durable log, the others work)",
        check=at_least(1),
    )
    # --- the process (python -m scorer only): young objects before a collection. Each batch
    # makes a few thousand (an entry's dict, its record, its result); with Python's default, 700,
    # collections ran several times per batch and cost ~1.5 µs per submission (docs/benchmarks.md)
    gc_threshold: int = setting(
        "LB_SCORER_GC_THRESHOLD",
        50_000,
        "young objects before a garbage collection (0 keeps Python's default)",
        check=at_least(0),
    )
    claim_idle_ms: int = setting(
        "LB_SCORER_CLAIM_IDLE_MS",
        10_000,
        "entries pending longer than this are claimed from a dead replica",
        check=at_least(1),
    )
    forget_after_s: int = setting(
        "LB_SCORER_FORGET_AFTER_S",
        3600,
        "consumer names idle this long with nothing pending (replicas that are gone) are removed; 0 keeps them",
        check=at_least(0),
    )
    max_deliveries: int = setting(
        "LB_SCORER_MAX_DELIVERIES",
        5,
        "an entry delivered more often than this without an ack (it keeps killing its readers) is dead-lettered",
        check=at_least(1),
    )
    dead_letters_maxlen: int = setting(
        "LB_DEAD_LETTERS_MAXLEN", 100_000, "approximate length the dead-letter stream is trimmed to", check=at_least(1)
    )
    # --- durable score log (scorer/durable/)
    durable_url: str = setting(
        "LB_DURABLE_URL",
        "",
        "durable score log: sqlite:///<path> (./dev run: <data dir>/scores.db) or postgresql://...; empty: off",
        check=lambda v: check_store_url(v) if v else None,
        secret=True,
    )
    durable_retention_days: float = setting(
        "LB_DURABLE_RETENTION_DAYS",
        30.0,
        "raw submissions kept this long; older ones are folded into per-board bests (kept while the board lives)",
        check=above(0),
    )
    durable_compact_s: float = setting(
        "LB_DURABLE_COMPACT_S",
        3600.0,
        "how often a replica folds raw submissions past their retention (s); 0 never",
        check=at_least(0),
    )
    crash_at: str = setting(
        "LB_SCORER_CRASH_AT",
        "",
        "testing only: exit abruptly (no cleanup) in the first batch after this step: applied, recorded "
        "(submissions), journaled (journal entries recorded, not acknowledged)",
        check=one_of("", "applied", "recorded", "journaled"),
    )
    # --- publisher
    tick_ms: int = setting("LB_TICK_MS", 1000, "snapshot publish tick (ms)", check=at_least(1))
    lease_ttl_ms: int = setting(
        "LB_LEASE_TTL_MS", 3000, "publish lease lifetime (ms); a dead publisher is replaced within it plus one tick"
    )
    snapshot_ttl_s: int = setting(
        "LB_SNAPSHOT_TTL_S",
        7 * 86_400,
        "lifetime of a board's stored latest snapshot (refreshed while the scorer runs)",
        check=at_least(1),
    )
    # --- closed periods (the publisher adds their close events)
    close_delay_s: int = setting(
        "LB_CLOSE_DELAY_S",
        60,
        "delay after a period's end before its close event, so slips still queued or a little late count",
        check=at_least(0),
    )
    closed_top_n: int = setting(
        "LB_CLOSED_TOP_N", 100, "entries per board in a period's close event and kept finals", check=between(1, 1000)
    )
    closed_keep: int = setting(
        "LB_CLOSED_KEEP",
        10,
        "closed periods whose final top N is kept per window (tournaments: in all); 0 keeps none",
        check=between(0, 100_000),
    )
    closed_maxlen: int = setting(
        "LB_CLOSED_MAXLEN", 10_000, "approximate length the close-event stream is trimmed to", check=at_least(1)
    )
    # --- which workers this replica runs (the consumer always runs)
    publish: bool = setting("LB_SCORER_PUBLISH", True, "this replica competes for the publish lease")
    badges: bool = setting(
        "LB_SCORER_BADGES", True, "this replica runs the badge worker (it can run in its own replicas)"
    )
    # --- badge worker
    badge_thresholds: tuple[tuple[str, int], ...] = setting(
        "LB_BADGE_THRESHOLDS",
        (("bronze", 1_000), ("silver", 10_000), ("gold", 100_000)),
        "badges awarded when one submission reaches the points",
        parse=parse_thresholds,
        shown="bronze=1000,silver=10000,gold=100000",
    )
    badge_top_n: bool = setting(
        "LB_BADGE_TOP_N",
        True,
        "also award top<N> to whoever enters the first window's global top N (`<id>:top<N>`: a defined board's "
        "first window's top N)",
    )
    # --- observability
    metrics_host: str = setting("LB_SCORER_METRICS_HOST", "127.0.0.1", "address of the Prometheus endpoint")
    metrics_port: int = setting(
        "LB_SCORER_METRICS_PORT", 9310, "port of GET /metrics; 0 turns it off", check=between(0, 65_535)
    )
    stats_interval_s: float = setting(
        "LB_SCORER_STATS_S", 10.0, "interval of the stats log line (s); 0 turns it off", check=at_least(0)
    )
    graceful_timeout_s: float = setting(
        "LB_SCORER_GRACEFUL_S",
        10.0,
        "on SIGTERM, how long in-flight batches get before cancellation (s)",
        check=at_least(0),
    )
    log_level: str = log_level()

    def __post_init__(self) -> None:
        validate(self)
        if self.lease_ttl_ms <= self.tick_ms:
            # the holder renews once per tick: a lease shorter than a tick would lapse between renewals
            raise SettingsError("LB_LEASE_TTL_MS must be longer than LB_TICK_MS")
        if self.durable_retention_days * 86_400 < self.game.idempotency_s:
            # a rebuild restores the idempotency memory from raw submissions: they must outlive it
            raise SettingsError("LB_DURABLE_RETENTION_DAYS must cover LB_IDEMPOTENCY_S")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ScorerSettings:
        return load(cls, env)
