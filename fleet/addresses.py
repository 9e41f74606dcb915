"""Where a local fleet's parts listen, and how people and other commands find them: the players'
port (shared by the gateways with SO_REUSEPORT, or haproxy's in front of gateways on addresses of
their own), the HTTP API's (behind haproxy: the same public port, ``/v1/``; else a port the API
processes share), each process's ``/metrics`` port, the lines printed at start and ``fleet.env``."""

from __future__ import annotations

import shlex

from leaderboard.settings import redacted

from .redis_server import free_port


class Addresses:
    """Chosen once and kept for the fleet's life: a free port is picked at first use, and a
    replaced gateway comes back on its predecessor's address and metrics port.

    ``metrics_port``: the scorer's, gateway N's is this + N (0: free ones); ``balanced``: the
    gateways behind a balancer, gateway N on 127.0.0.<N + 1> and ``gateway_port`` (0: a free one
    each), the API processes on loopback ports of their own; else the API processes share
    ``api_port`` (0: the public port + 1 when that is pinned, else a free one)."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        balanced: bool = False,
        gateway_port: int = 0,
        metrics_port: int = 0,
        scorer_metrics_port: int = 0,
        api_port: int = 0,
        tls: bool = False,
    ) -> None:
        self.host = host
        self.tls = tls  # the balancer's port speaks TLS: https:// and wss://
        self.pinned_api_port = api_port or (port + 1 if port and not balanced else 0)
        self.port = port or free_port(host)
        self._api_port = self.pinned_api_port
        self.balanced = balanced
        self.gateway_port = gateway_port
        self.metrics_port = metrics_port
        self.scorer_metrics_port = scorer_metrics_port or metrics_port or free_port(host)
        self._scorer_pinned = bool(scorer_metrics_port or metrics_port)
        self.gateway_metrics_ports: dict[int, int] = {}
        self.api_metrics_ports: dict[int, int] = {}
        self._gateways: dict[int, tuple[str, int]] = {}
        self._apis: dict[int, tuple[str, int]] = {}

    @property
    def page_url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.port}/"

    @property
    def ws_url(self) -> str:
        return f"{'wss' if self.tls else 'ws'}://{self.host}:{self.port}/ws"

    @property
    def api_url(self) -> str:
        """The HTTP API's base URL: the public port behind a balancer, else the API processes' own."""
        port = self.port if self.balanced else self.api(0)[1]
        scheme = "https" if self.tls and self.balanced else "http"
        return f"{scheme}://{self.host}:{port}/v1/"

    def api(self, index: int) -> tuple[str, int]:
        """Where API process ``index`` listens: behind a balancer a loopback port of its own (the
        port names the process, for a rolling restart), else the port all of them share."""
        if not self.balanced:
            if not self._api_port:
                self._api_port = free_port(self.host)
            return self.host, self._api_port
        if index not in self._apis:
            self._apis[index] = ("127.0.0.1", free_port("127.0.0.1"))
        return self._apis[index]

    @property
    def metrics_urls(self) -> list[str]:
        ports = [*self.gateway_metrics_ports.values(), self.scorer_metrics_port, *self.api_metrics_ports.values()]
        return [f"http://{self.host}:{port}/metrics" for port in ports]

    def gateway(self, index: int) -> tuple[str, int]:
        """Where gateway ``index`` listens: the shared port, or behind a balancer 127.0.0.<index + 2>
        on a port of its own."""
        if not self.balanced:
            return self.host, self.port
        if index not in self._gateways:
            host = f"127.0.0.{index + 2}"
            self._gateways[index] = (host, self.gateway_port or free_port(host))
        return self._gateways[index]

    def gateway_metrics_port(self, index: int) -> int:
        """Gateway ``index``'s /metrics port (the shared port would reach a random gateway)."""
        if index not in self.gateway_metrics_ports:
            base = self.metrics_port
            self.gateway_metrics_ports[index] = base + index + 1 if base else free_port(self.host)
        return self.gateway_metrics_ports[index]

    def api_metrics_port(self, index: int) -> int:
        """API process ``index``'s /metrics port: a free one, kept for the process that replaces it."""
        if index not in self.api_metrics_ports:
            self.api_metrics_ports[index] = free_port(self.host)
        return self.api_metrics_ports[index]

    def pinned(self, gateways: int, apis: int = 0) -> list[tuple[str, int]]:
        """The addresses the settings pin (not the free ports picked here): checked before
        anything starts."""
        pinned = [(self.host, self.scorer_metrics_port)] if self._scorer_pinned else []
        if self.metrics_port:
            pinned += [(self.host, self.gateway_metrics_port(i)) for i in range(gateways)]
        if self.balanced and self.gateway_port:
            pinned += [self.gateway(i) for i in range(gateways)]
        if apis and self.pinned_api_port:
            pinned.append((self.host, self.pinned_api_port))
        return pinned


def env_file_text(redis_url: str, jwt_secrets: str, api_url: str = "") -> str:
    """``fleet.env``: what another command needs to reach this fleet, for ``source`` (a game
    server signs its tokens with ``LB_JWT_SECRETS``'s first secret and calls ``LB_API_URL``)."""
    text = f"export LB_REDIS_URL={shlex.quote(redis_url)}\nexport LB_JWT_SECRETS={shlex.quote(jwt_secrets)}\n"
    return text + (f"export LB_API_URL={shlex.quote(api_url)}\n" if api_url else "")


def banner(addresses: Addresses, *, redis_url: str, env_file: str, balancers: int, data_dir: str, apis: int = 0) -> str:
    """What ``./dev run`` prints once the fleet is up (the Redis password redacted)."""
    balancer = (
        f"  balancer:   haproxy × {balancers} (rolling restart: python -m fleet rollout --data-dir {data_dir})\n"
        if balancers
        else ""
    )
    api = f"  http api:   {addresses.api_url}\n" if apis else ""
    return (
        f"\n  live page:  {addresses.page_url}\n  metrics:    {'  '.join(addresses.metrics_urls)}\n"
        f"  websocket:  {addresses.ws_url}\n{api}  redis:      {redacted(redis_url)}\n"
        f"  other commands (scorer submit, loadtest, examples) find Redis and the token secret after:  "
        f"source {env_file}\n"
        f"{balancer}  Ctrl-C stops everything (twice: at once).\n"
    )
