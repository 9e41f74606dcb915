"""The gateway's settings: one frozen object, read once from ``LB_``-prefixed environment variables
through ``leaderboard.settings`` (``python -m gateway --help`` and README's table list them)::

    settings = GatewaySettings.from_env()
    settings = GatewaySettings(port=0, redis_url=url, jwt_secrets=(secret_of_32_bytes,), ping_interval=0.2)

Durations are seconds (floats). A limit of 0 means "no cap" where its help says so.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

from leaderboard import GameConfig
from leaderboard.auth import strong_secrets
from leaderboard.budget import MAX_COST
from leaderboard.keys import parse_scope
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
    one_of,
    parse_list,
    redis_url,
    setting,
    validate,
)


def parse_boards(raw: str) -> tuple[str, ...]:
    return tuple(parse_scope(board) for board in parse_list(raw))


# package data: found the same way in a source tree and in an installed wheel
STATIC_DIR = Path(str(files("gateway") / "static"))
# the JS client's module, served at /client.js (clients/js/src/, installed as gateway.jsclient)
JS_CLIENT = Path(str(files("gateway.jsclient") / "client.js"))


def _default_id() -> str:
    return f"gw-{socket.gethostname()[:16]}-{os.getpid()}"


@dataclass(frozen=True, slots=True)
class GatewaySettings:
    # --- where
    host: str = setting("LB_GW_HOST", "127.0.0.1", "listen address; the WebSocket is on /ws")
    port: int = setting("LB_GW_PORT", 8000, "listen port; 0 = any free one", check=between(0, 65_535))
    reuse_port: bool = setting(
        "LB_GW_REUSE_PORT",
        False,
        "SO_REUSEPORT: several gateway processes share the port (the fleet sets it for its own gateways)",
    )
    gateway_id: str = setting(
        "LB_GW_ID", factory=_default_id, shown="gw-<host>-<pid>", help="gateway id sent in welcome"
    )
    redis_url: str = redis_url(help="Redis to use (./dev run's own: in var/fleet.env)")
    redis_pool: RedisPool = nested(RedisPool)
    replicas: ReplicaReads = nested(ReplicaReads)
    game: GameConfig = nested(GameConfig)
    default_window: str = setting(
        "LB_GW_WINDOW", "", "window of a connection's default board (empty: weekly if kept, else the first window)"
    )
    static_dir: Path = setting(
        "LB_GW_STATIC_DIR",
        STATIC_DIR,
        shown="(the installed gateway/static)",
        help="the page (/, /app.js, /style.css)",
    )
    # --- auth
    jwt_secrets: tuple[str, ...] = setting(
        "LB_JWT_SECRETS",
        (),
        "HS256 secrets of at least 32 bytes, comma-separated; the first is current, all verify (rotation)",
        check=strong_secrets,
        secret=True,
    )
    allowed_origins: tuple[str, ...] = setting(
        "LB_GW_ORIGINS", (), "allowed Origin values, comma-separated (empty: any); others are closed with 1008"
    )
    demo_tokens: bool = setting("LB_GW_DEMO_TOKENS", False, "local demo only: GET /demo-token hands out player tokens")
    demo_players: int = setting(
        "LB_GW_DEMO_PLAYERS", 3000, "demo tokens are for player0 .. player<N-1>", check=at_least(1)
    )
    boards: tuple[str, ...] = setting(
        "LB_GW_BOARDS",
        (),
        "boards the page offers and anyone may subscribe to besides global, e.g. region:eu,mode:duo (region:eu also "
        "offers board:<id>:region:eu of each board kept per region; others once slips named them)",
        parse=parse_boards,
    )
    # --- limits
    max_frame: int = setting(
        "LB_GW_MAX_FRAME", 4096, "largest inbound frame (bytes); beyond: close 1009", check=at_least(1)
    )
    max_subscriptions: int = setting("LB_GW_MAX_SUBSCRIPTIONS", 8, "boards per connection", check=at_least(1))
    rate: float = setting("LB_GW_RATE", 20.0, "client messages per second, sustained", check=above(0))
    burst: int = setting("LB_GW_BURST", 40, "client messages in a burst", check=at_least(1))
    abuse_limit: int = setting(
        "LB_GW_ABUSE_LIMIT",
        50,
        "rate-limited messages in 10 s before the connection is closed with 1008",
        check=at_least(1),
    )
    # Reads are budgeted by what they cost Redis, per player or spectator address, not per
    # socket (leaderboard/budget.py; docs/security.md has the measured cost of a unit).
    read_rate: float = setting(
        "LB_GW_READ_RATE",
        50.0,
        "read units per second per player (spectators: per address); a unit is about one row or player read",
        check=above(0),
    )
    read_burst: int = setting(
        "LB_GW_READ_BURST",
        300,
        f"read units a player or address may spend at once (at least {MAX_COST}: a ranks of 100 costs 100)",
        check=at_least(MAX_COST),
    )
    read_budgets: int = setting(
        "LB_GW_READ_BUDGETS",
        50_000,
        "players and addresses whose read budget is remembered (the least recently used are forgotten first)",
        check=at_least(1),
    )
    max_connections: int = setting(
        "LB_GW_MAX_CONNECTIONS", 20_000, "connections per process (0 = no cap); HTTP 503 beyond", check=at_least(0)
    )
    fleet_beat_s: float = setting(
        "LB_GW_FLEET_BEAT_S",
        5.0,
        "how often the gateway records its connection count in Redis for the admin console (0 = never)",
        check=at_least(0),
    )
    max_per_address: int = setting(
        "LB_GW_MAX_PER_ADDRESS",
        0,
        "connections per client address (0 = no cap; mind players behind one NAT); HTTP 503 beyond",
        check=at_least(0),
    )
    # behind a balancer every peer is the balancer: its X-Forwarded-For names the client, but
    # only a balancer of ours may say so (leaderboard/proxies.py)
    trusted_proxies: tuple[str, ...] = setting(
        "LB_GW_TRUSTED_PROXIES",
        (),
        "balancer addresses or networks, comma-separated, whose X-Forwarded-For (last value) is the client's address",
        parse=parse_networks,
        check=valid_networks,
    )
    # accept queue: asyncio's default of 100 overflows in a reconnect storm, and every SYN the
    # kernel drops costs that client a 1 s, then 3 s, retransmission (capped by net.core.somaxconn)
    backlog: int = setting(
        "LB_GW_BACKLOG", 2048, "the listener's accept queue (capped by net.core.somaxconn)", check=at_least(1)
    )
    connect_rate: float = setting(
        "LB_GW_CONNECT_RATE",
        1000.0,
        "handshakes per second, burst of the same size (0 = no cap); HTTP 503 beyond",
        check=at_least(0),
    )
    # Handshakes in flight (TCP accepted, not yet upgraded) are bounded apart from the caps
    # above, which count complete requests: half-sent requests would otherwise each hold a
    # descriptor for the whole handshake timeout (gateway/handshakes.py).
    max_handshakes: int = setting(
        "LB_GW_MAX_HANDSHAKES",
        1000,
        "TCP connections accepted but not yet upgraded to WebSocket (0 = no cap); beyond, the oldest is reset",
        check=at_least(0),
    )
    handshake_timeout: float = setting(
        "LB_GW_HANDSHAKE_TIMEOUT",
        3.0,
        "seconds from TCP accept to a complete WebSocket upgrade; slower peers are dropped",
        check=above(0),
    )
    # A Redis that keeps its connections but answers nothing (wedged, or a path that drops
    # packets) would otherwise hold every request until TCP gives up, minutes later: with a bound
    # the client gets ``unavailable`` and may retry (a submit with the same id is applied once).
    redis_timeout: float = setting(
        "LB_GW_REDIS_TIMEOUT",
        2.0,
        "seconds a Redis read or connect may take before the request is answered unavailable (0 = no bound)",
        check=at_least(0),
    )
    # --- observability: per process (behind a shared port a scrape would reach a random one),
    # and on loopback by default, away from the players' port
    metrics_host: str = setting("LB_GW_METRICS_HOST", "127.0.0.1", "address of this process's GET /metrics")
    metrics_port: int = setting(
        "LB_GW_METRICS_PORT", 9320, "port of this process's GET /metrics; 0 turns it off", check=between(0, 65_535)
    )
    # --- flow control
    write_buffer: int = setting(
        "LB_GW_WRITE_BUFFER",
        64 * 1024,
        "per-socket write buffer bound (bytes); above it a socket skips messages",
        check=at_least(1),
    )
    max_skips: int = setting(
        "LB_GW_MAX_SKIPS", 5, "consecutive skipped messages before a slow socket is closed", check=at_least(1)
    )
    stall_timeout: float = setting(
        "LB_GW_STALL_TIMEOUT", 10.0, "seconds over the buffer bound before a slow socket is closed", check=above(0)
    )
    fanout: str = setting(
        "LB_GW_FANOUT",
        "frame",
        "frame (frame once, write bytes) or broadcast (websockets.broadcast; for comparison)",
        check=one_of("frame", "broadcast"),
    )
    # threads writing one snapshot's frames (system calls run outside the GIL): more than 1 only
    # pays on a host with a core to spare for each, e.g. one gateway process on 2 cores
    fanout_threads: int = setting(
        "LB_GW_FANOUT_THREADS",
        1,
        "threads writing one snapshot's frames; 2 when a gateway has 2 cores to itself",
        check=at_least(1),
    )
    # a tick's boards reach the gateway back to back (the scorer publishes them in one call), so
    # a few milliseconds gather them: each socket then gets its tick in one write (fanout.py)
    coalesce: float = setting(
        "LB_GW_COALESCE",
        0.005,
        "seconds a tick's messages are gathered so each socket gets them in one write (0 = off: one write each)",
        check=at_least(0),
    )
    # --- bytes per delivery (docs/protocol.md, "Snapshot deltas" and "Compression")
    deltas: bool = setting(
        "LB_GW_DELTAS",
        True,
        "offer snapshot deltas to clients whose hello asks for them (0 = full snapshots to every client)",
    )
    delta_full_every: int = setting(
        "LB_GW_DELTA_FULL_EVERY",
        30,
        "a delta client gets the full snapshot every this many versions (0 = only when it needs one)",
        check=at_least(0),
    )
    deflate: bool = setting(
        "LB_GW_DEFLATE",
        False,
        "negotiate permessage-deflate (no context takeover): each snapshot frame compressed once for every "
        "socket that negotiated it; with deltas, about 0.17x the bytes of full snapshots (docs/benchmarks.md): "
        "turn it on",
    )
    deflate_level: int = setting(
        "LB_GW_DEFLATE_LEVEL", 6, "zlib level of the shared compressed frames (1-9)", check=between(1, 9)
    )
    # --- the process (python -m gateway only): young objects before a collection. Python's
    # default, 700, runs a full collection every few thousand handshakes while sockets pile up,
    # each pausing the loop for longer as the heap grows (docs/benchmarks.md); 0 keeps it.
    gc_threshold: int = setting(
        "LB_GW_GC_THRESHOLD",
        10_000,
        "young objects before a garbage collection (0 keeps Python's default)",
        check=at_least(0),
    )
    # --- heartbeats
    # "sweep": one task pings every socket (heartbeat.py); "websockets": its keepalive task per
    # connection (for comparison: docs/benchmarks.md)
    heartbeat: str = setting(
        "LB_GW_HEARTBEAT",
        "sweep",
        "sweep (one task pings every socket) or websockets (a task per socket)",
        check=one_of("sweep", "websockets"),
    )
    ping_interval: float = setting("LB_GW_PING_INTERVAL", 20.0, "protocol ping interval (s)", check=above(0))
    ping_timeout: float = setting("LB_GW_PING_TIMEOUT", 20.0, "protocol ping timeout (s)", check=above(0))
    client_ping_interval: float = setting(
        "LB_GW_CLIENT_PING_INTERVAL", 15.0, "app-level ping cadence advertised in welcome (s)", check=above(0)
    )
    close_timeout: float = setting("LB_GW_CLOSE_TIMEOUT", 5.0, "closing handshake timeout (s)", check=above(0))
    # --- own rank
    rank_interval: float = setting("LB_GW_RANK_INTERVAL", 5.0, "own-rank cadence (s)", check=above(0))
    rank_chunk: int = setting("LB_GW_RANK_CHUNK", 500, "players per own-rank read", check=at_least(1))
    # announcements come whenever a submission enters a top 10, own ranks on their own cadence:
    # held for the next snapshot tick, they share its write instead of costing one each
    push_hold: float = setting(
        "LB_GW_PUSH_HOLD",
        1.0,
        "announcements and own-rank pushes wait up to this long (s) to share the next tick's write "
        "(needs LB_GW_COALESCE > 0; 0 = at once)",
        check=at_least(0),
    )
    deep_rank_from: int = setting(
        "LB_GW_DEEP_RANK_FROM",
        10_000,
        "own-rank pushes beyond this rank are approximate (histogram, 3 digits); 0 = always exact",
        check=at_least(0),
    )
    overtaken_per_minute: int = setting(
        "LB_GW_OVERTAKEN_PER_MINUTE",
        6,
        "overtaken events per connection per minute; beyond, they are counted and not sent (0 = none)",
        check=at_least(0),
    )
    friends_per_read: int = setting(
        "LB_GW_FRIENDS_PER_READ",
        500,
        "overtaken events: watched friends' standings added to one own-rank read at most; more are read "
        "in turn over the next rounds",
        check=at_least(1),
    )
    # --- drain
    drain_delay: float = setting(
        "LB_GW_DRAIN_DELAY", 2.0, "drain: readiness fails this long before the listener closes (s)", check=at_least(0)
    )
    drain_window: float = setting(
        "LB_GW_DRAIN_WINDOW",
        10.0,
        "drain: sockets are closed with 1012 in batches over this long (s)",
        check=at_least(0),
    )
    drain_batches: int = setting("LB_GW_DRAIN_BATCHES", 10, "drain: number of batches", check=at_least(1))
    log_level: str = log_level()

    def __post_init__(self) -> None:
        validate(self)
        self.game.default_window(self.default_window)  # refuses a window the game does not keep

    @property
    def window(self) -> str:
        """The board window a connection is subscribed to when it does not name one."""
        return self.game.default_window(self.default_window)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> GatewaySettings:
        return load(cls, env)
