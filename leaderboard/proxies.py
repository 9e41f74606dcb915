"""Where a client connects from: the peer's address, or — behind a trusted balancer — the address
the balancer forwarded in ``X-Forwarded-For``.

The gateway's per-address connection cap (``LB_GW_MAX_PER_ADDRESS``) counts by this address, and
so does the HTTP API's read budget of a spectator (``LB_API_TRUSTED_PROXIES``: the same rule). Behind HAProxy
every peer is the balancer, so without the forwarded address one cap would hold for all players at
once; but a header is only as true as whoever wrote it, so it is believed only from a peer in
``LB_GW_TRUSTED_PROXIES``, and only its last value: a balancer appends the address it saw, while
anything to the left of it came from the client and may be forged (deploy/haproxy.cfg deletes the
client's header besides).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_networks(raw: str) -> tuple[str, ...]:
    """``10.0.0.5, 10.1.0.0/16`` → normalised networks; a bad entry is a settings error."""
    out = []
    for item in raw.split(","):
        if item.strip():
            try:
                out.append(str(ipaddress.ip_network(item.strip(), strict=False)))
            except ValueError:
                raise ValueError(f"{item.strip()!r} is not an IP address or network") from None
    return tuple(out)


def valid_networks(items: tuple[str, ...]) -> str | None:
    """A settings check: what is wrong with ``items`` as networks, or None."""
    try:
        parse_networks(",".join(items))
    except ValueError as exc:
        return f"must be IP addresses or networks: {exc}"
    return None


def networks(items: Sequence[str]) -> tuple[Network, ...]:
    return tuple(ipaddress.ip_network(item, strict=False) for item in items)


def client_address(peer: str, forwarded_for: str | None, trusted: Sequence[Network]) -> str:
    """The address to count a connection against."""
    if not forwarded_for or not trusted:
        return peer
    try:
        peer_ip = ipaddress.ip_address(peer)
    except ValueError:
        return peer  # not an IP peer (a Unix socket): nothing to trust
    if not any(peer_ip in net for net in trusted):
        return peer
    last = forwarded_for.rsplit(",", 1)[-1].strip()
    try:
        return str(ipaddress.ip_address(last))
    except ValueError:
        return peer  # a trusted proxy that wrote garbage: fall back to the proxy itself
