"""The HTTP API's settings: one frozen object, read once from ``LB_``-prefixed environment variables
through ``leaderboard.settings`` (``python -m api --help`` lists them)::

    settings = ApiSettings.from_env()
    settings = ApiSettings(port=0, redis_url=url, jwt_secrets=(secret_of_32_bytes,))

A request selects its board as the socket's requests do: the same games, windows and default
window (``LB_GW_WINDOW``), the same tokens (``LB_JWT_SECRETS``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from leaderboard import GameConfig
from leaderboard.auth import strong_secrets
from leaderboard.budget import MAX_COST
from leaderboard.proxies import parse_networks, valid_networks
from leaderboard.settings import (
    RedisPool,
    ReplicaReads,
    above,
    at_least,
    between,
    load,
    log_level,
    nested,
    redis_url,
    setting,
    validate,
)


@dataclass(frozen=True, slots=True)
class ApiSettings:
    host: str = setting("LB_API_HOST", "127.0.0.1", "listen address; the routes are under /v1/")
    port: int = setting("LB_API_PORT", 8081, "listen port; 0 = any free one", check=between(0, 65_535))
    reuse_port: bool = setting(
        "LB_API_REUSE_PORT", False, "share the port with other API processes (SO_REUSEPORT: the kernel spreads them)"
    )
    drain_timeout: int = setting(
        "LB_API_DRAIN_TIMEOUT",
        10,
        "on SIGTERM, seconds the requests under way get to finish before the process exits",
        check=at_least(0),
    )
    redis_url: str = redis_url(help="Redis to use (./dev run's own: in var/fleet.env)")
    redis_pool: RedisPool = nested(RedisPool)
    replicas: ReplicaReads = nested(ReplicaReads)
    game: GameConfig = nested(GameConfig)
    default_window: str = setting(
        "LB_GW_WINDOW",
        "",
        "window of a request naming none, as on the socket (empty: weekly if kept, else the first)",
    )
    jwt_secrets: tuple[str, ...] = setting(
        "LB_JWT_SECRETS",
        (),
        "HS256 secrets of at least 32 bytes, comma-separated; the first is current, all verify (rotation)",
        check=strong_secrets,
        secret=True,
    )
    max_body: int = setting(
        "LB_API_MAX_BODY", 4096, "largest request body in bytes; a larger one is refused with 413", check=at_least(1)
    )
    body_timeout: float = setting(
        "LB_API_BODY_TIMEOUT",
        10.0,
        "seconds from a request's headers to the end of its body; a slower body is refused with 408",
        check=above(0),
    )
    batch_max: int = setting(
        "LB_API_BATCH_MAX",
        100,
        "most slips in one POST .../scores:batch; its body may be this many times LB_API_MAX_BODY",
        check=between(1, 1000),
    )
    wait_max: float = setting(
        "LB_API_WAIT_MAX", 2.0, "longest ?wait=applied of a submission (s); still pending then: 202", check=at_least(0)
    )
    top_ttl: float = setting(
        "LB_API_TOP_TTL",
        1.0,
        "seconds a board's published top N is held in the process (read once per board meanwhile) and cached"
        " by clients (Cache-Control max-age); 0 = read at each request",
        check=at_least(0),
    )
    stale_if_error: float = setting(
        "LB_API_STALE_IF_ERROR",
        10.0,
        "seconds past LB_API_TOP_TTL a held top N is still served (with its Age) while Redis does not answer",
        check=at_least(0),
    )
    watch_max: int = setting(
        "LB_API_WATCH_MAX",
        1000,
        "boards whose top N is kept current by pub/sub (no Redis read per request) once asked for; the others"
        " are read through LB_API_TOP_TTL's hold; 0 = none",
        check=at_least(0),
    )
    watch_idle: float = setting(
        "LB_API_WATCH_IDLE",
        60.0,
        "seconds a watched board nobody asks about stays subscribed",
        check=above(0),
    )
    redis_timeout: float = setting(
        "LB_API_REDIS_TIMEOUT",
        2.0,
        "seconds of Redis time a request may take, its calls together (a cluster client's retries inside"
        " them too), before it is answered 503 unavailable (0 = no bound)",
        check=at_least(0),
    )
    # A player's (a spectator's: an address's) reads, by what they cost Redis: the socket's rule
    # and unit (leaderboard/budget.py). Game servers are trusted and have no budget.
    read_rate: float = setting(
        "LB_API_READ_RATE",
        50.0,
        "read units per second per player token (spectators: per address); a unit is about one row or player read",
        check=above(0),
    )
    read_burst: int = setting(
        "LB_API_READ_BURST",
        300,
        f"read units a player or address may spend at once (at least {MAX_COST}: a ranks of 100 costs 100)",
        check=at_least(MAX_COST),
    )
    read_budgets: int = setting(
        "LB_API_READ_BUDGETS",
        50_000,
        "players and addresses whose read budget is remembered (the least recently used are forgotten first)",
        check=at_least(1),
    )
    # behind a balancer every peer is the balancer: its X-Forwarded-For names the client (whose
    # address is a spectator's read budget), but only a balancer of ours may say so: the
    # gateway's rule (leaderboard/proxies.py), not uvicorn's, which believes any loopback peer
    trusted_proxies: tuple[str, ...] = setting(
        "LB_API_TRUSTED_PROXIES",
        (),
        "balancer addresses or networks, comma-separated, whose X-Forwarded-For (last value) is the client's"
        " address (a spectator's read budget); from any other peer the header is ignored",
        parse=parse_networks,
        check=valid_networks,
    )
    # --- observability: per process (several share the API's port), away from it
    metrics_host: str = setting("LB_API_METRICS_HOST", "127.0.0.1", "address of this process's GET /metrics")
    metrics_port: int = setting(
        "LB_API_METRICS_PORT",
        0,
        "port of this process's GET /metrics; 0 turns it off (processes sharing a host need one each)",
        check=between(0, 65_535),
    )
    log_level: str = log_level()

    def __post_init__(self) -> None:
        validate(self)
        self.game.default_window(self.default_window)  # refuses a window the game does not keep

    @property
    def window(self) -> str:
        """The board window of a request that does not name one (the socket's rule)."""
        return self.game.default_window(self.default_window)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ApiSettings:
        return load(cls, env)
