"""The local fleet, one command: ``./dev run`` (``python -m fleet``).

Starts the embedded redis-server (loopback, a fresh password, AOF on, data under var/) unless a
Redis URL is given, loads the function library, one scorer (with the badge worker), N gateway
processes sharing one port (SO_REUSEPORT), the HTTP API's processes (on the next port, which they
share) and demo game-server traffic, then prints the page, HTTP API and metrics URLs and writes
var/fleet.env for other commands (source it): the Redis URL, the token secret (``LB_JWT_SECRETS``
from the environment when set, else the one kept in var/jwt-secret, made at the first start) and
the API's URL. A gateway or the scorer that
dies is restarted with backoff. A second fleet on the same data directory, or on a port something
else listens on (unless --join), is refused. Ctrl-C stops everything in order: gateways drain, the
scorer acks its last batch, Redis flushes its AOF, each within --stop-timeout; a second Ctrl-C
kills the fleet's processes at once.

With --balancer haproxy the gateways listen on addresses of their own (127.0.0.2, .3, …, as if on
several hosts) behind haproxy on the port, which also takes the HTTP API (``/v1/``): one public
port; ``python -m fleet rollout`` then restarts the gateways and the API processes one by one
without losing a player or a request (fleet/rollout.py).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

from redis.exceptions import AuthenticationError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from gateway.settings import GatewaySettings
from leaderboard import GameConfig
from leaderboard.settings import (
    LOG_LEVELS,
    above,
    argument_parser,
    at_least,
    between,
    load_or_exit,
    log_level,
    one_of,
    redacted,
    redis_url,
    redis_url_arg,
    setting,
    unreachable,
    validate,
)
from scorer.settings import ScorerSettings

from . import demo, rebalance, rollout
from .addresses import banner
from .claims import JWT_SECRET_FILE, kept_secret
from .supervisor import Fleet, FleetSettings

log = logging.getLogger("fleet")


@dataclass(frozen=True, slots=True)
class FleetOptions:
    """What ``./dev run`` reads from the environment; each is also an option (which wins)."""

    gateways: int = setting("LB_FLEET_GATEWAYS", 2, "gateway processes on the port", check=between(1, 64))
    apis: int = setting(
        "LB_FLEET_API",
        1,
        "HTTP API processes (behind haproxy on the public port under /v1/, else sharing LB_FLEET_API_PORT)",
        check=between(0, 16),
    )
    api_port: int = setting(
        "LB_FLEET_API_PORT",
        0,
        "without a balancer, the HTTP API processes' shared port; 0 = the gateways' port + 1 (a free one if that is 0)",
        check=between(0, 65_535),
    )
    host: str = setting("LB_FLEET_HOST", "127.0.0.1", "the gateways' listen address")
    port: int = setting("LB_FLEET_PORT", 8000, "the gateways' port; 0 = any free one", check=between(0, 65_535))
    redis_url: str = redis_url(
        "",
        "Redis to use; unset, ./dev run starts its own (loopback, random port, a password, AOF on) and "
        "writes its URL to <data dir>/fleet.env",
    )
    redis_replicas: int = setting(
        "LB_FLEET_REDIS_REPLICAS",
        0,
        "replicas of the embedded redis-server (each its own process and data directory); with any, the "
        "gateways and the HTTP API read from them (LB_READ_REPLICAS=1 unless set)",
        check=between(0, 8),
    )
    data_dir: str = setting(
        "LB_DATA_DIR",
        "var",
        "the fleet's data directory (locked while it runs): Redis's data, fleet.env, scores.db, jwt-secret (the"
        " token secret when LB_JWT_SECRETS is not set, kept across starts)",
    )
    demo_rate: float = setting("LB_DEMO_RATE", 300.0, "demo submissions per second", check=at_least(0))
    demo_external: bool = setting(
        "LB_DEMO_EXTERNAL",
        False,
        "let the demo traffic write into a Redis this fleet did not start (LB_REDIS_URL); off, it refuses",
    )
    stop_timeout: float = setting(
        "LB_FLEET_STOP_TIMEOUT",
        10.0,
        "seconds each phase of a stop (gateways' drain, the scorer's last batch, Redis's flush) gets before "
        "its processes are killed; a second Ctrl-C kills at once",
        check=above(0),
    )
    metrics_port: int = setting(
        "LB_FLEET_METRICS_PORT",
        0,
        "the scorer's /metrics port; gateway N's is this + N; 0 = free ones",
        check=between(0, 65_535 - 64),
    )
    balancer: str = setting(
        "LB_FLEET_BALANCER",
        "none",
        "none (gateways share the port) or haproxy (gateways on 127.0.0.2, .3, … behind haproxy on the port)",
        check=one_of("none", "haproxy"),
    )
    balancers: int = setting(
        "LB_FLEET_BALANCERS",
        1,
        "haproxy processes on the port (each holds LB_FLEET_BALANCER_MAXCONN)",
        check=between(1, 16),
    )
    balancer_maxconn: int = setting(
        "LB_FLEET_BALANCER_MAXCONN",
        9_000,
        "players per haproxy process (2 descriptors each: mind ulimit -n)",
        check=at_least(1),
    )
    gateway_port: int = setting(
        "LB_FLEET_GATEWAY_PORT",
        0,
        "behind haproxy: the port of every gateway, each on its own address (127.0.0.2, .3, …); 0 = a free one each",
        check=between(0, 65_535),
    )
    tls_cert: str = setting(
        "LB_FLEET_TLS_CERT",
        "",
        "with --balancer haproxy: a PEM holding the certificate, its chain and its key; the port then speaks "
        "TLS only (https://, wss://); empty = plain",
    )
    log_level: str = log_level()

    def __post_init__(self) -> None:
        validate(self)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    o = load_or_exit(FleetOptions)
    p = argument_parser("./dev run", (__doc__ or "").split("\n\n")[1], FleetOptions, GameConfig)
    p.add_argument("--gateways", type=int, default=o.gateways, help="gateway processes on the port")
    p.add_argument("--api", type=int, default=o.apis, help="HTTP API processes (0: none)")
    p.add_argument(
        "--api-port", type=int, default=o.api_port, help="without a balancer, the HTTP API's port (0: port + 1)"
    )
    p.add_argument("--host", default=o.host, help="listen address")
    p.add_argument("--port", type=int, default=o.port, help="gateways' port, 0 = any free one")
    p.add_argument("--join", action="store_true", help="share the port with processes already listening on it")
    # the default is not shown: it holds the password once `source var/fleet.env` has set LB_REDIS_URL
    p.add_argument(
        "--redis-url",
        default=None,
        type=redis_url_arg,
        help="use this Redis instead of starting one (default: LB_REDIS_URL)",
    )
    p.add_argument("--data-dir", default=o.data_dir, help="embedded Redis data directory")
    p.add_argument(
        "--redis-replicas",
        type=int,
        default=o.redis_replicas,
        help="replicas of the embedded Redis, serving the players' reads (LB_READ_REPLICAS)",
    )
    p.add_argument("--balancer", default=o.balancer, choices=("none", "haproxy"), help="a load balancer in front")
    p.add_argument("--balancers", type=int, default=o.balancers, help="haproxy processes on the port")
    p.add_argument("--balancer-maxconn", type=int, default=o.balancer_maxconn, help="players per haproxy process")
    p.add_argument(
        "--tls-cert",
        default=o.tls_cert,
        metavar="PEM",
        help="with --balancer haproxy: TLS on the port (https://, wss://) with this PEM, certificate then key "
        "(haproxy's crt); plain ws:// is refused there",
    )
    p.add_argument(
        "--gateway-port",
        type=int,
        default=o.gateway_port,
        help="behind haproxy: every gateway's port on its own address, 0 = a free one each",
    )
    p.add_argument(
        "--metrics-port",
        type=int,
        default=o.metrics_port,
        help="the scorer's /metrics port, gateway N's is this + N; 0 = free ones",
    )
    p.add_argument("--demo-rate", type=float, default=o.demo_rate, help="demo submissions per second")
    p.add_argument("--no-demo", action="store_true", help="no demo traffic and no demo tokens")
    p.add_argument(
        "--demo-external",
        action="store_true",
        default=o.demo_external,
        help="write demo traffic into a Redis this fleet did not start (refused without it)",
    )
    p.add_argument("--duration", type=float, default=None, help="stop by itself after this many seconds")
    p.add_argument(
        "--stop-timeout",
        type=float,
        default=o.stop_timeout,
        help="seconds per phase of a stop before its processes are killed",
    )
    p.add_argument("--log-level", default=o.log_level, choices=LOG_LEVELS, type=str.upper, help="log level")
    args = p.parse_args(argv)
    # from the environment, perhaps without meaning it (`source var/fleet.env` sets it): said at start
    args.inherited_redis = args.redis_url is None and bool(o.redis_url)
    args.redis_url = args.redis_url or o.redis_url or None
    # Every process's configuration is checked here, before anything starts: a typo is one line
    # and exit status 2, not every child failing at start with the same message.
    args.game = load_or_exit(GameConfig)
    load_or_exit(ScorerSettings)
    gateway = load_or_exit(GatewaySettings)
    try:
        # an exported LB_JWT_SECRETS is the game backend's: the gateways must accept its tokens;
        # else the data directory's own, kept across starts (a new one would refuse every token
        # the last run signed)
        args.jwt_secret = ",".join(gateway.jwt_secrets) or kept_secret(Path(args.data_dir) / JWT_SECRET_FILE)
        args.settings = FleetSettings(
            redis_url=args.redis_url,
            data_dir=Path(args.data_dir),
            host=args.host,
            port=args.port,
            gateways=args.gateways,
            apis=args.api,
            api_port=args.api_port,
            join=args.join,
            jwt_secret=args.jwt_secret,
            demo_tokens=not args.no_demo,
            log_level=args.log_level.upper(),
            stop_timeout=args.stop_timeout,
            balancer="" if args.balancer == "none" else args.balancer,
            balancers=args.balancers,
            balancer_maxconn=args.balancer_maxconn,
            gateway_port=args.gateway_port,
            metrics_port=args.metrics_port,
            tls_cert=args.tls_cert,
            redis_replicas=args.redis_replicas,
        )
    except (ValueError, OSError) as exc:  # OSError: the data directory's secret not readable or writable
        p.error(str(exc))
    return args


async def finish(tasks: list[asyncio.Task[None]], timeout: float) -> None:
    """Wait up to ``timeout`` for ``tasks`` (already told to stop), then cancel what is left and
    move on without waiting for it: a task that swallows its cancellation must not hold the stop."""
    if not tasks:
        return
    done, pending = await asyncio.wait(tasks, timeout=timeout)
    for task in done:
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.warning("%s ended with %r", task.get_name(), exc)
    for task in pending:
        log.warning("%s did not stop in %.0f s: cancelled, not awaited", task.get_name(), timeout)
        task.cancel()


async def serve(args: argparse.Namespace) -> int:
    settings: FleetSettings = args.settings
    fleet = Fleet(settings, on_status=lambda line: print(line, flush=True))
    stop = asyncio.Event()
    signals = 0

    def on_signal(signum: int) -> None:
        nonlocal signals
        signals += 1
        if signals == 1:
            stop.set()
            return
        # uvicorn's rule: the operator asked twice, so nothing more is waited for
        log.warning("%s again: killing the fleet's processes", signal.Signals(signum).name)
        fleet.kill()
        logging.shutdown()
        os._exit(1)

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal, sig)
    demo_on = not args.no_demo
    if args.inherited_redis:
        log.warning(
            "using the Redis at %s from LB_REDIS_URL, which this fleet did not start: its data is "
            "shared with whoever else uses it; after `source var/fleet.env` that is the running fleet's "
            "(`unset LB_REDIS_URL` for a Redis of this fleet's own)",
            redacted(args.redis_url),
        )
    if demo_on and not fleet.owns_redis and not args.demo_external:
        log.warning("demo traffic off: it writes only into a Redis this fleet started (or with --demo-external)")
        demo_on = False
    async with fleet:
        demo_stop = asyncio.Event()
        tasks = []
        if demo_on:
            served = args.game.served  # demo traffic to every game, the rate shared
            tasks += [
                asyncio.create_task(
                    demo.traffic(fleet.redis_url, game, args.demo_rate / len(served), stop=demo_stop),
                    name=f"demo traffic ({game.game})",
                )
                for game in served
            ]
        print(
            banner(
                fleet.addresses,
                redis_url=fleet.redis_url,
                env_file=str(fleet.env_file),
                balancers=len(fleet.balancers),
                data_dir=args.data_dir,
                apis=len(fleet.apis),
            ),
            flush=True,
        )
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), args.duration)
        log.info("stopping the fleet (Ctrl-C again kills it at once)")
        demo_stop.set()
        await finish(tasks, settings.stop_timeout)
    log.info("stopped")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["rollout"]:
        return rollout.main(argv[1:], data_dir=load_or_exit(FleetOptions).data_dir)
    if argv[:1] == ["rebalance"]:
        return rebalance.main(argv[1:], data_dir=load_or_exit(FleetOptions).data_dir)
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        return asyncio.run(serve(args))
    except (RedisConnectionError, RedisTimeoutError, AuthenticationError) as exc:
        log.error("%s", unreachable(args.redis_url or "the embedded redis-server", exc))
        return 1
    except (RuntimeError, ValueError) as exc:
        log.error("%s", exc)
        return 1


if __name__ == "__main__":
    sys.exit(main())
