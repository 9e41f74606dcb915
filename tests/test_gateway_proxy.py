"""The client's address behind a balancer: X-Forwarded-For is believed only from a trusted proxy,
and the per-address connection cap counts by the address believed."""

from __future__ import annotations

import contextlib
import ipaddress

import pytest
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import InvalidStatus

from gateway.settings import GatewaySettings
from leaderboard.proxies import client_address, networks
from leaderboard.settings import SettingsError

from .gw_helpers import client, greet, running


def test_the_forwarded_address_is_believed_only_from_a_trusted_peer() -> None:
    trusted = networks(("127.0.0.1", "10.0.0.0/8"))
    assert client_address("127.0.0.1", "203.0.113.7", trusted) == "203.0.113.7"
    assert client_address("10.9.8.7", "203.0.113.7", trusted) == "203.0.113.7"
    # only the last value: the balancer appended it; what is left of it the client wrote
    assert client_address("127.0.0.1", "198.51.100.1, 203.0.113.7", trusted) == "203.0.113.7"
    assert client_address("192.0.2.1", "203.0.113.7", trusted) == "192.0.2.1"  # not a proxy of ours
    assert client_address("127.0.0.1", "203.0.113.7", ()) == "127.0.0.1"  # no proxy trusted at all
    assert client_address("127.0.0.1", None, trusted) == "127.0.0.1"
    assert client_address("127.0.0.1", "not-an-address", trusted) == "127.0.0.1"
    assert client_address("127.0.0.1", " 2001:DB8::1 ", trusted) == str(ipaddress.ip_address("2001:db8::1"))


def test_trusted_proxies_must_be_addresses_or_networks() -> None:
    env = {"LB_GW_TRUSTED_PROXIES": "127.0.0.1, 10.0.0.0/8"}
    assert GatewaySettings.from_env(env).trusted_proxies == ("127.0.0.1/32", "10.0.0.0/8")
    with pytest.raises(SettingsError, match=r"LB_GW_TRUSTED_PROXIES.*'haproxy' is not an IP address"):
        GatewaySettings.from_env({"LB_GW_TRUSTED_PROXIES": "127.0.0.1,haproxy"})


async def _status(gw: object, forwarded: str, stack: contextlib.AsyncExitStack) -> int:
    """101 (and the socket kept open on ``stack``) or the refusal's HTTP status."""
    try:
        ws: ClientConnection = await stack.enter_async_context(
            client(gw, additional_headers={"X-Forwarded-For": forwarded})  # type: ignore[arg-type]
        )
    except InvalidStatus as exc:
        return exc.response.status_code
    await greet(ws)
    return 101


async def test_behind_a_trusted_proxy_the_cap_counts_each_forwarded_address(redis_url: str) -> None:
    async with running(redis_url, max_per_address=2, trusted_proxies=("127.0.0.1",)) as gw:
        async with contextlib.AsyncExitStack() as stack:
            assert [await _status(gw, "203.0.113.7", stack) for _ in range(3)] == [101, 101, 503]
            assert await _status(gw, "203.0.113.8", stack) == 101  # another player behind the same proxy
            assert await _status(gw, "203.0.113.8, 203.0.113.7", stack) == 503  # the last value counts
            assert gw.metrics.refused.labels("address")._value.get() == 2
        async with contextlib.AsyncExitStack() as stack:  # closed sockets free their address's slots
            assert [await _status(gw, "203.0.113.7", stack) for _ in range(2)] == [101, 101]


async def test_from_an_untrusted_peer_a_forged_header_changes_nothing(redis_url: str) -> None:
    for trusted in ((), ("10.0.0.0/8",)):
        async with (
            running(redis_url, max_per_address=2, trusted_proxies=trusted) as gw,
            contextlib.AsyncExitStack() as stack,
        ):
            forged = ["203.0.113.1", "203.0.113.2", "203.0.113.3"]
            assert [await _status(gw, address, stack) for address in forged] == [101, 101, 503]
