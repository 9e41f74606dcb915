"""``python -m api``: one HTTP API process on uvicorn (uvloop, httptools). Stateless, like a
gateway: run as many as the load asks for (``LB_API_REUSE_PORT``: several on one port).
SIGTERM/SIGINT: stop accepting, finish the requests under way (at most ``LB_API_DRAIN_TIMEOUT``),
exit 0; a second signal stops at once. ``python -m api token SUB [--role server]`` signs a token
for curl and a local game server (``python -m api token --help``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Iterator

import orjson
import uvicorn
import uvloop

from leaderboard.auth import issue
from leaderboard.settings import argument_parser, load_or_exit

from .routes import openapi
from .server import application
from .settings import ApiSettings

log = logging.getLogger("api")


class _Server(uvicorn.Server):
    """uvicorn's server with the signals left to ``serve`` below: uvicorn would re-raise the
    signal it caught once stopped, so a clean stop would end with the signal's status."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def listener(settings: ApiSettings) -> socket.socket:
    """The listening socket, bound here so that processes may share the port (SO_REUSEPORT: the
    kernel spreads connections over them)."""
    sock = socket.socket(socket.AF_INET6 if ":" in settings.host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if settings.reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((settings.host, settings.port))
    sock.set_inheritable(True)
    return sock


async def serve(settings: ApiSettings) -> int:
    config = uvicorn.Config(
        application(settings),
        loop="none",  # already running on uvloop (main)
        http="httptools",
        ws="none",
        lifespan="on",
        log_level=settings.log_level.lower(),
        access_log=False,
        server_header=False,
        # the client's address is server.py's (LB_API_TRUSTED_PROXIES): uvicorn's own rule would
        # believe an X-Forwarded-For from any loopback peer and from no balancer on another host
        proxy_headers=False,
        timeout_graceful_shutdown=settings.drain_timeout,
    )
    server = _Server(config)
    signals = 0

    def on_signal(signum: int) -> None:
        nonlocal signals
        signals += 1
        server.should_exit = True  # uvicorn: stop accepting, finish what is under way
        if signals > 1:
            log.warning("%s again: stopping at once", signal.Signals(signum).name)
            server.force_exit = True

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal, sig)
    sock = listener(settings)
    await server.serve(sockets=[sock])
    return 0 if server.started else 1


def token_main(argv: list[str]) -> int:
    """``python -m api token SUB [--role server] [--ttl S]``: a token signed with the first of
    ``LB_JWT_SECRETS`` (what a game backend does at login), for curl and a local game server."""
    parser = argument_parser("python -m api token", token_main.__doc__ or "")
    parser.add_argument("sub", help="the token's subject: a player id, or a game server's name")
    parser.add_argument("--role", choices=("player", "server"), default="player", help="its role")
    parser.add_argument("--ttl", type=float, default=3600.0, help="seconds it is valid")
    args = parser.parse_args(argv)
    secrets = [s for s in os.environ.get("LB_JWT_SECRETS", "").split(",") if s]
    if not secrets:
        print("LB_JWT_SECRETS is not set: `source var/fleet.env` (./dev run writes it there)", file=sys.stderr)
        return 1
    print(issue(args.sub, args.role, secrets[0], exp=time.time() + args.ttl))
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["token"]:
        return token_main(argv[1:])
    parser = argument_parser("python -m api", __doc__ or "", ApiSettings)
    parser.add_argument("--openapi", action="store_true", help="print the OpenAPI document and exit")
    if parser.parse_args(argv).openapi:
        print(orjson.dumps(openapi(), option=orjson.OPT_INDENT_2).decode())
        return 0
    settings = load_or_exit(ApiSettings)
    logging.basicConfig(level=settings.log_level, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    return uvloop.run(serve(settings))


if __name__ == "__main__":
    sys.exit(main())
