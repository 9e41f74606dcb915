"""HAProxy in front of the gateways: the configuration, rendered from the gateway list, and a
process that runs it (the fleet's ``--balancer haproxy``, the tests, the load test).

``python -m fleet.haproxy --gateway 10.0.1.11:8000 --gateway 10.0.1.12:8000`` prints the
configuration; ``deploy/haproxy.cfg`` is that output for the example in docs/operations.md (a test
keeps the two equal). ``python -m fleet.haproxy state gw-1 drain|ready`` and ``… servers`` speak
to a running haproxy's runtime API (a rolling restart by hand). What the configuration does, and why:

* ``mode http`` with ``timeout tunnel 1h``: the upgrade request is read as HTTP (so the balancer
  can answer ``/metrics`` itself and add ``X-Forwarded-For``), then the WebSocket is a tunnel that
  lives an hour without traffic limits of its own — the gateways' heartbeats find dead peers;
* ``balance leastconn``: WebSockets live for hours, so the number open, not the number of new
  requests, is what should be even across gateways (a restarted gateway fills up first);
* a handshake refused by one gateway (its listener closed, or a 503 while it drains or is full)
  is retried on another, so a player never sees one gateway's restart;
* health checks ``GET /readyz`` every second: a draining gateway, or one without Redis, answers
  503 and gets no new connections after two failed checks; its open tunnels are left alone (the
  gateway closes them itself, in staggered batches with 1012);
* the client's address: any ``X-Forwarded-For`` the client sent is deleted and the balancer's own
  is added, so the gateway (``LB_GW_TRUSTED_PROXIES``) can believe the last value;
* ``/v1/`` goes to the HTTP API processes (backend ``api``, health-checked on their ``/readyz``,
  which stays 200 without Redis: the API's own answers, a held top or its 503 problem, must reach
  the client rather than haproxy's page for a backend with no server), everything else (``/ws``,
  the page) to the gateways: one public port;
* a public ``GET /v1/boards/{board}/top`` (no ``Authorization``) is answered from haproxy's
  ``cache`` for its ``Cache-Control: max-age`` (1 s; the cache's own ``max-age 1`` caps it), with
  ``304`` on the ETag: the top is the same public data for every client, so the balancer, not
  each API process, serves the crowd — like a CDN in front of the API. A request with a token
  goes to the API (a bad token must be refused there), and so does every other route: a
  player's rank, around, friends and all writes are never stored;
* ``/metrics`` is answered 404 at the balancer: the gateways serve it on a loopback port of their
  own, and nothing on the players' port should lead there;
* a stats socket (the runtime API, ``level admin``): ``python -m fleet rollout`` puts a server in
  ``drain`` before it restarts that gateway, and back to ``ready`` once it answers ``/readyz``;
* one log line per request once it is answered (``LOG_FORMAT``: for a WebSocket, its upgrade or
  its refusal, the gateway that took it, the retries), to stdout (journald under systemd) — the
  path only: a token may ride in the query string, and must never reach a log.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import logging
import os
import resource
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from subprocess import DEVNULL
from typing import IO

from leaderboard.lifecycle import Service
from leaderboard.settings import argument_parser

from .children import die_with_parent, stop_process

log = logging.getLogger("fleet.haproxy")

BACKEND = "gateways"
API_BACKEND = "api"
TOP_CACHE = "top"
# descriptors per player: the client's connection and the one to its gateway
FDS_PER_CONNECTION = 2
FD_RESERVE = 200  # listeners, health checks, the stats socket, logs
# httplog's fields (docs/operations.md reads them), with the path instead of the whole request
# line: ``/ws?token=…`` would write players' tokens into the log
DEFAULT_LOG = "stdout format raw local0 info"  # under systemd, stdout is the journal
LOG_FORMAT = "%ci:%cp [%tr] %ft %b/%s %TR/%Tw/%Tc/%Tr/%Ta %ST %B %tsc %ac/%fc/%bc/%sc/%rc %sq/%bq %HM %HP"


class CommandRefused(RuntimeError):
    """The runtime API answered a command with an error (an unknown server, a bad state)."""


@dataclass(frozen=True, slots=True)
class Gateway:
    """One backend server: ``gw-1`` at ``127.0.0.2:8000`` (or an HTTP API process, ``api-1``)."""

    name: str
    address: str  # host:port

    @classmethod
    def parse(cls, text: str, index: int, prefix: str = "gw") -> Gateway:
        """``host:port`` or ``name=host:port``; the name defaults to ``<prefix>-<index + 1>``."""
        name, _, address = text.rpartition("=")
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65_536:
            raise ValueError(f"a gateway is host:port or name=host:port, not {text!r}")
        return cls(name or f"{prefix}-{index + 1}", address)


@dataclass(frozen=True, slots=True)
class BalancerConfig:
    gateways: tuple[Gateway, ...]
    bind: str = ":80"  # host:port the players connect to
    apis: tuple[Gateway, ...] = ()  # the HTTP API's processes: /v1/ goes to them
    tls_cert: str = ""  # a PEM (certificate + key): the bind speaks TLS
    stats_socket: str = "/run/haproxy/leaderboard.sock"  # empty: a private one (class Haproxy)
    maxconn: int = 9_000  # per process: 2 descriptors each, under a 20,000 descriptor limit
    threads: int = 1
    check_interval_ms: int = 1000
    # a gateway is taken out after this many failed checks, and back in after as many good ones
    check_fall: int = 2
    check_rise: int = 2
    # where haproxy logs (its ``log`` directive); empty: nowhere
    log: str = DEFAULT_LOG
    # MB of public ``GET …/top`` answers held in front of the HTTP API (their max-age); 0: no cache
    top_cache_mb: int = 16

    def __post_init__(self) -> None:
        if not self.gateways:
            raise ValueError("a balancer needs at least one gateway")
        names = [g.name for g in (*self.gateways, *self.apis)]
        if len(set(names)) != len(names):
            raise ValueError(f"gateway names must be unique: {', '.join(names)}")
        if self.maxconn < 1 or self.threads < 1:
            raise ValueError("maxconn and threads must be at least 1")
        if not 0 <= self.top_cache_mb <= 4095:
            raise ValueError("top_cache_mb is 0..4095")

    @property
    def fd_limit(self) -> int:
        """Descriptors the process needs at ``maxconn``."""
        return self.maxconn * FDS_PER_CONNECTION + FD_RESERVE


def render(c: BalancerConfig) -> str:
    """The haproxy.cfg text (HAProxy 2.6, Debian 12's)."""
    tls = f" ssl crt {c.tls_cert} alpn http/1.1" if c.tls_cert else ""
    servers = "\n".join(f"    server {g.name} {g.address}" for g in c.gateways)
    api_route, api_backend, cache_rules, cache_section = "", "", "", ""
    if c.apis and c.top_cache_mb:
        cache_rules = f"""\
    # a board's top without a token is public, the same for every client: answered here for its
    # max-age (1 s) by the copy the first request fetched; with a token (a bad one must be
    # refused) and every other route (a player's rank, writes), always the API's
    acl top_path path_reg ^/v1/boards/[^/]+/top$
    acl token req.hdr(authorization) -m found
    http-request set-var(txn.public_top) bool(true) if METH_GET top_path !token
    http-request cache-use {TOP_CACHE} if {{ var(txn.public_top) -m bool }}
    http-response cache-store {TOP_CACHE} if {{ var(txn.public_top) -m bool }}
"""
        cache_section = f"""
cache {TOP_CACHE}
    total-max-size {c.top_cache_mb}
    max-object-size 262144
    # the longest any answer is held, whatever its Cache-Control says
    max-age 1
"""
    if c.apis:
        api_route = (
            "    # the HTTP API under /v1/ and its operators' console (a server token's alone: api/console.py),\n"
        )
        api_route += "    # the gateways (/ws, the page) otherwise: one public port\n"
        api_route += f"    use_backend {API_BACKEND} if {{ path_beg /v1/ }} || {{ path /console }}\n"
        api_servers = "\n".join(f"    server {a.name} {a.address}" for a in c.apis)
        api_backend = f"""
backend {API_BACKEND}
    balance leastconn
    option forwardfor
    # a process that closed its listener (it finishes its requests, then exits): another one;
    # a request already sent is never sent twice (a write's retry is the client's, by match_id)
    retries 3
    option redispatch 1
    retry-on conn-failure
{cache_rules}    option httpchk
    http-check send meth GET uri /readyz ver HTTP/1.1 hdr Host api
    http-check expect status 200
    default-server check inter {c.check_interval_ms} fall {c.check_fall} rise {c.check_rise}
{api_servers}
"""
    log = (
        f"    # one line per request once answered: for a WebSocket, its upgrade (101) or refusal\n    log {c.log}\n"
        if c.log
        else ""
    )
    log_defaults = f'    log global\n    option dontlognull\n    log-format "{LOG_FORMAT}"\n' if c.log else ""
    return f"""\
# Rendered by `python -m fleet.haproxy` from the gateway list: change the list and render again.
global
{log}    maxconn {c.maxconn}
    nbthread {c.threads}
    # the runtime API: the rolling restart drains one server at a time through it
    stats socket {c.stats_socket} mode 600 level admin
    # each connection holds two descriptors (client side, gateway side)
    fd-hard-limit {c.fd_limit}

defaults
    mode http
{log_defaults}    timeout connect 5s
    timeout http-request 10s
    timeout client 30s
    timeout server 30s
    # once upgraded, a WebSocket is a tunnel: idle for up to an hour (the gateways ping every 20 s)
    timeout tunnel 1h
    timeout client-fin 5s
    timeout server-fin 5s

frontend players
    bind {c.bind}{tls}
    maxconn {c.maxconn}
    # metrics are an operator's, on each gateway's own loopback port: never through here
    http-request deny deny_status 404 if {{ path /metrics }} || {{ path_beg /metrics/ }}
    # only the balancer says where a client comes from
    http-request del-header X-Forwarded-For
{api_route}    default_backend {BACKEND}

backend {BACKEND}
    balance leastconn
    option forwardfor
    # a gateway that just closed its listener (drain) refuses the connection, one at its cap or
    # draining answers 503: try another gateway instead of failing the player
    retries 3
    option redispatch 1
    retry-on conn-failure empty-response 503
    # websockets answers HTTP/1.1 only; /readyz is 503 while draining or without Redis
    option httpchk
    http-check send meth GET uri /readyz ver HTTP/1.1 hdr Host gateway
    http-check expect status 200
    default-server check inter {c.check_interval_ms} fall {c.check_fall} rise {c.check_rise}
{servers}
{api_backend}{cache_section}"""


class Runtime:
    """HAProxy's runtime API on its stats socket (``level admin``)."""

    def __init__(self, socket_path: str) -> None:
        self.socket_path = socket_path

    async def command(self, line: str, timeout: float = 5.0) -> str:
        """One runtime API command on the stats socket; its answer."""
        reader, writer = await asyncio.wait_for(asyncio.open_unix_connection(self.socket_path), timeout)
        try:
            writer.write(line.encode() + b"\n")
            await writer.drain()
            return (await asyncio.wait_for(reader.read(), timeout)).decode()
        finally:
            writer.close()

    async def set_state(self, server: str, state: str, backend: str = BACKEND) -> None:
        """``ready``, ``drain`` (no new connections, open ones stay) or ``maint``."""
        answer = (await self.command(f"set server {backend}/{server} state {state}")).strip()
        if answer:
            raise CommandRefused(f"haproxy: set server {server} state {state}: {answer}")

    async def servers(self, backend: str = BACKEND) -> dict[str, dict[str, str]]:
        """Per server of ``backend``: ``status`` (UP, DOWN, DRAIN, MAINT, …), ``scur`` (connections
        open), …"""
        text = await self.command("show stat")
        lines = [line for line in text.splitlines() if line]
        header = lines[0].lstrip("# ").split(",")
        out: dict[str, dict[str, str]] = {}
        for line in lines[1:]:
            row = dict(zip(header, line.split(","), strict=False))
            if row.get("pxname") == backend and row.get("svname") not in ("FRONTEND", "BACKEND"):
                out[row["svname"]] = row
        return out


class Haproxy(Service):
    """One haproxy process on a rendered configuration, and its runtime API::

        async with Haproxy(BalancerConfig((Gateway("gw-1", "127.0.0.2:8000"),), bind="127.0.0.1:8080")) as lb:
            await lb.set_state("gw-1", "drain")

    The configuration file, and the stats socket unless the config names one, live in a private
    temporary directory. Several may share one ``bind`` (haproxy binds with SO_REUSEPORT): one
    process holds at most ``maxconn`` players under the descriptor limit.
    """

    def __init__(self, config: BalancerConfig, *, name: str = "haproxy", log_path: Path | None = None) -> None:
        self._dir = Path(tempfile.mkdtemp(prefix="lb-haproxy-"))
        self.name = name
        self.log_path = log_path  # haproxy's stdout (its log lines) is appended here; None: dropped
        if not config.stats_socket:  # short: a Unix socket's path holds at most 107 bytes
            config = dataclasses.replace(config, stats_socket=str(self._dir / "stats.sock"))
        self.config = config
        self.proc: asyncio.subprocess.Process | None = None
        self.runtime = Runtime(config.stats_socket)

    @staticmethod
    def binary() -> str | None:
        return shutil.which("haproxy") or next(
            (p for p in ("/usr/sbin/haproxy", "/usr/local/sbin/haproxy") if os.access(p, os.X_OK)), None
        )

    @property
    def stats_socket(self) -> str:
        return self.config.stats_socket

    async def start(self) -> Haproxy:
        binary = self.binary()
        if binary is None:
            raise RuntimeError("haproxy is not installed (./dev install installs Debian's)")
        _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard != resource.RLIM_INFINITY and self.config.fd_limit > hard:
            raise ValueError(
                f"haproxy with maxconn {self.config.maxconn} needs {self.config.fd_limit} descriptors, the "
                f"limit is {hard}: lower maxconn and run more haproxy processes on the same port"
            )
        cfg = self._dir / "haproxy.cfg"
        cfg.write_text(render(self.config))
        check = await asyncio.create_subprocess_exec(
            binary, "-c", "-f", str(cfg), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
        )
        out, _ = await check.communicate()
        if check.returncode != 0:
            raise RuntimeError(f"haproxy refused its configuration: {out.decode(errors='replace').strip()}")
        with contextlib.ExitStack() as files:  # the child keeps its own copy of the descriptor
            sink: IO[bytes] | int = files.enter_context(self.log_path.open("ab")) if self.log_path else DEVNULL
            self.proc = await asyncio.create_subprocess_exec(
                binary,
                "-db",
                "-f",
                str(cfg),
                stdin=DEVNULL,
                stdout=sink,
                stderr=sys.stderr,
                start_new_session=True,
                preexec_fn=_haproxy_child,
            )
        deadline = time.monotonic() + 10
        while True:
            if self.proc.returncode is not None:
                raise RuntimeError(f"haproxy exited with {self.proc.returncode} at start")
            with contextlib.suppress(OSError):
                await self.command("show info")
                break
            if time.monotonic() > deadline:
                raise RuntimeError("haproxy did not open its stats socket within 10 s")
            await asyncio.sleep(0.05)
        log.info(
            "%s (pid %d) on %s in front of %d gateways",
            self.name,
            self.proc.pid,
            self.config.bind,
            len(self.config.gateways),
        )
        return self

    async def command(self, line: str, timeout: float = 5.0) -> str:
        return await self.runtime.command(line, timeout)

    async def set_state(self, server: str, state: str, backend: str = BACKEND) -> None:
        await self.runtime.set_state(server, state, backend)

    async def servers(self, backend: str = BACKEND) -> dict[str, dict[str, str]]:
        return await self.runtime.servers(backend)

    async def _close(self) -> None:
        """SIGTERM (haproxy closes every connection at once), SIGKILL if it hangs."""
        proc, self.proc = self.proc, None
        if proc is not None:
            await stop_process(proc, 10)
        shutil.rmtree(self._dir, ignore_errors=True)


def _haproxy_child() -> None:
    die_with_parent()
    # haproxy wants the descriptors of its maxconn; the hard limit is checked before the start
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


# deploy/haproxy.cfg: three gateway hosts, each with an HTTP API process too, TLS at the balancer
# (docs/operations.md)
EXAMPLE_ARGS = (
    "--gateway", "gw-1=10.0.1.11:8000", "--gateway", "gw-2=10.0.1.12:8000", "--gateway", "gw-3=10.0.1.13:8000",
    "--api", "api-1=10.0.1.11:8081", "--api", "api-2=10.0.1.12:8081", "--api", "api-3=10.0.1.13:8081",
    "--bind", ":443", "--tls-cert", "/etc/haproxy/certs/leaderboard.pem",
)  # fmt: skip


STATS_SOCKET = "/run/haproxy/leaderboard.sock"


def runtime_main(argv: list[str]) -> int:
    """``state NAME ready|drain|maint [--wait-up S]`` and ``servers`` on each ``--stats-socket``."""
    p = argument_parser("python -m fleet.haproxy", "HAProxy's runtime API, on the balancers' stats sockets.")
    commands = p.add_subparsers(dest="command", required=True)
    state = commands.add_parser("state", help="set a gateway's state in every balancer")
    state.add_argument("server", help="the server's name (gw-1, …; api-1, … with --backend api)")
    state.add_argument("state", choices=("ready", "drain", "maint"), help="drain: no new players; ready: back in")
    state.add_argument(
        "--wait-up",
        type=float,
        default=0.0,
        metavar="S",
        help="then wait up to S seconds until every balancer sees it UP",
    )
    servers = commands.add_parser("servers", help="each gateway's status and open connections, per balancer")
    for q in (state, servers):
        q.add_argument(
            "--stats-socket", action="append", default=[], help=f"a balancer's stats socket (repeat; {STATS_SOCKET})"
        )
        q.add_argument(
            "--backend", default=BACKEND, choices=(BACKEND, API_BACKEND), help="the gateways' or the HTTP API's"
        )
    args = p.parse_args(argv)
    if args.command == "state" and not 0 <= args.wait_up <= 3600:
        p.error("--wait-up is 0..3600 seconds")
    balancers = [Runtime(path) for path in args.stats_socket or [STATS_SOCKET]]
    try:
        return asyncio.run(_runtime(args, balancers))
    except (OSError, RuntimeError, TimeoutError) as exc:
        print(f"haproxy runtime API: {exc or 'no answer in time'}", file=sys.stderr)
        return 1


async def _runtime(args: argparse.Namespace, balancers: list[Runtime]) -> int:
    if args.command == "servers":
        for b in balancers:
            for name, row in (await b.servers(args.backend)).items():
                print(f"{b.socket_path} {name} {row.get('status', '?')} {row.get('scur', '?')} connections")
        return 0
    for b in balancers:
        await b.set_state(args.server, args.state, args.backend)
    deadline = time.monotonic() + args.wait_up
    while args.wait_up:
        states = [(await b.servers(args.backend)).get(args.server, {}).get("status", "") for b in balancers]
        if all(s == "UP" for s in states):  # not "UP 1/2": a check failed, going down
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"{args.server} is not UP in every balancer within {args.wait_up:g} s: {states}")
        await asyncio.sleep(0.2)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] in (["state"], ["servers"]):
        return runtime_main(argv)
    p = argument_parser("python -m fleet.haproxy", (__doc__ or "").split("\n\n")[1])
    p.add_argument(
        "--gateway", action="append", default=[], metavar="[NAME=]HOST:PORT", help="a gateway (repeat for each)"
    )
    p.add_argument(
        "--api", action="append", default=[], metavar="[NAME=]HOST:PORT", help="an HTTP API process: /v1/ (repeat)"
    )
    p.add_argument("--bind", default=":443", help="where players connect, host:port")
    p.add_argument("--tls-cert", default="", help="PEM with certificate and key: TLS at the balancer")
    p.add_argument("--stats-socket", default=STATS_SOCKET, help="the runtime API's socket")
    p.add_argument("--maxconn", type=int, default=9_000, help="connections per haproxy process")
    p.add_argument("--threads", type=int, default=1, help="haproxy threads (nbthread)")
    p.add_argument("--log", default=DEFAULT_LOG, help="haproxy's log target ('' for none; e.g. '/dev/log local0')")
    args = p.parse_args(argv)
    try:
        gateways = tuple(Gateway.parse(text, i) for i, text in enumerate(args.gateway))
        apis = tuple(Gateway.parse(text, i, prefix="api") for i, text in enumerate(args.api))
        config = BalancerConfig(
            gateways,
            apis=apis,
            bind=args.bind,
            tls_cert=args.tls_cert,
            stats_socket=args.stats_socket,
            maxconn=args.maxconn,
            threads=args.threads,
            log=args.log,
        )
    except ValueError as exc:
        p.error(str(exc))
    sys.stdout.write(render(config))
    return 0


if __name__ == "__main__":
    sys.exit(main())
