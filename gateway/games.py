"""The games one gateway process serves (``LB_GAMES``): per game, its function wrappers, its
queue, its hub (one sharded pub/sub connection, on the node that owns the game's slot) and its
own-rank pusher. A connection belongs to one game, named when it connects (``/ws?game=arena``;
docs/protocol.md), for its whole life; the Redis clients and the sockets' write path are shared.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from leaderboard import GameConfig, Leaderboard, RedisClient
from leaderboard.queue import Queue
from leaderboard.replicas import Replicas

from .client import Client
from .hub import Hub
from .metrics import Metrics
from .outbound import Outbound
from .ranks import RankPusher
from .settings import GatewaySettings


@dataclass(eq=False)
class Game:
    config: GameConfig
    lb: Leaderboard
    reads: Leaderboard  # lb, its player-facing reads served by replicas where enabled (replicas.py)
    queue: Queue
    hub: Hub
    ranks: RankPusher
    clients: set[Client] = field(default_factory=set)

    @property
    def name(self) -> str:
        return self.config.game

    @property
    def serving(self) -> bool:
        """Its pub/sub connection is subscribed: its shard answers, new sockets are admitted."""
        return self.hub.connected.is_set()


def build_games(
    settings: GatewaySettings,
    redis: RedisClient,
    raw: RedisClient,
    metrics: Metrics,
    out: Outbound,
    replicas: Replicas | None = None,
) -> dict[str, Game]:
    """One ``Game`` per game served, the default (first) first; its own-rank pushes and read
    requests served by ``replicas`` when given."""
    games: dict[str, Game] = {}
    for config in settings.game.served:
        lb = Leaderboard(redis, config)
        reads = lb.reading_from(replicas) if replicas is not None else lb
        hub = Hub(settings, raw, lb, metrics, out)
        clients: set[Client] = set()
        ranks = RankPusher(_getter(clients), out, reads, settings, metrics, hub.overtaken)
        queue = Queue(redis, config)
        games[config.game] = Game(config, lb, reads, queue, hub, ranks, clients)
    return games


def _getter(clients: set[Client]) -> Callable[[], set[Client]]:
    return lambda: clients
