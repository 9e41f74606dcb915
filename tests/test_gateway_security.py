"""What a probe from the player side found, each closed: boards that do not exist, per-process
maps that only grew, weak secrets, metrics on the public port, the JWT library's wording."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import jwt
import pytest
import redis.asyncio as aioredis

from gateway.settings import GatewaySettings
from leaderboard import Leaderboard, Submission
from leaderboard.auth import AuthError, Identity, Tokens, authenticate
from leaderboard.settings import SettingsError

from .conftest import NOW, until
from .gw_helpers import SECRETS, T, client, greet, http_get, raw_ws, recv, request, running

ROOT = Path(__file__).resolve().parent.parent


def hub_maps(gw: object) -> dict[str, int]:
    hub = gw.hub  # type: ignore[attr-defined]
    maps = {name: len(getattr(hub, name)) for name in ("_subs", "_latest", "_channel_board", "_pending")}
    return {**maps, "subscribed": len(hub.subscriber.live)}


async def test_a_spectator_cannot_subscribe_to_boards_that_do_not_exist(redis_url: str, r: aioredis.Redis) -> None:
    async with running(redis_url, boards=("mode:duo",)) as gw, client(gw) as ws:
        await greet(ws)
        before = hub_maps(gw)
        for i in range(30):
            reply = await request(ws, {"type": "subscribe", "board": f"region:nowhere{i}"})
            assert (reply["type"], reply["code"]) == ("error", "bad_board"), reply
        assert hub_maps(gw) == before
        channels = await r.pubsub_channels()
        assert not [c for c in channels if "nowhere" in str(c)]  # never SUBSCRIBEd in Redis
        # a configured board exists before any score; so does one with data
        assert (await request(ws, {"type": "subscribe", "board": "mode:duo"}, "subscribed"))["board"] == "mode:duo"
        assert (await recv(ws))["type"] == "snapshot"
        assert (await request(ws, {"type": "unsubscribe", "board": "region:nowhere1"}))["type"] == "unsubscribed"


async def test_subscribe_and_unsubscribe_leave_the_maps_as_they_were(redis_url: str, lb: Leaderboard) -> None:
    boards = [f"region:r{i}" for i in range(40)]
    subs = [Submission(f"s{i}", f"p{i}", 10, NOW, region=b[7:]).fields() for i, b in enumerate(boards)]
    await lb.submit_batch(subs, now=NOW)  # these boards have data: they exist
    async with running(redis_url, rate=10_000.0, burst=10_000) as gw, client(gw) as ws:
        await greet(ws)
        before = hub_maps(gw)
        for _ in range(3):
            for board in boards:
                await request(ws, {"type": "subscribe", "board": board, "window": "alltime"}, "subscribed")
                await request(ws, {"type": "unsubscribe", "board": board, "window": "alltime"}, "unsubscribed")
        await until(lambda: hub_maps(gw) == before, 2 * T)  # the releases run as tasks of their own
        assert len(next(iter(gw.clients)).ranks) <= 1


def test_weak_secrets_are_refused_at_start() -> None:
    with pytest.raises(SettingsError, match="LB_JWT_SECRETS"):
        GatewaySettings(jwt_secrets=("abc",))
    with pytest.raises(SettingsError, match="LB_JWT_SECRETS"):  # every secret of a rotation
        GatewaySettings(jwt_secrets=(SECRETS[0], "short"))
    env = {**os.environ, "LB_JWT_SECRETS": "abc", "LB_GW_PORT": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "gateway"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=20
    )
    assert done.returncode == 2 and done.stderr.startswith("configuration error: LB_JWT_SECRETS")
    assert "abc" not in done.stderr  # a secret is never echoed


async def test_metrics_are_not_on_the_public_port(redis_url: str) -> None:
    async with running(redis_url) as gw:
        assert (await http_get(gw.port, "/metrics"))[0] == 404
        assert gw.metrics_port and gw.metrics_port != gw.port
        status, _, body = await http_get(gw.metrics_port, "/metrics")
        assert status == 200 and b"lb_gw_connections" in body
    async with running(redis_url, metrics_port=0) as gw:
        assert gw.metrics_port is None  # 0 turns the endpoint off


def forge(claims: dict[str, object], secret: str = SECRETS[0]) -> str:
    return jwt.encode(claims, secret, algorithm="HS256")


# The claims are built when the module is collected: a long suite must not age them past a bound.
@pytest.mark.parametrize(
    ("claims", "code", "message"),
    [
        ({"sub": "mia", "role": "player", "exp": str(int(time.time()) + 60)}, "invalid_token", "exp must be a number"),
        ({"sub": "mia", "role": "player", "exp": True}, "invalid_token", "exp must be a number"),
        ({"sub": "mia", "role": "player", "exp": time.time() + 86400, "nbf": "0"}, "invalid_token",
         "nbf must be a number"),
        ({"sub": "mia", "role": "player"}, "invalid_token", "the token has no exp claim"),
        ({"sub": "mia", "exp": time.time() + 86400}, "invalid_token", "the token has no role claim"),
        ({"sub": "mia", "role": "player", "exp": time.time() - 60}, "token_expired", "the token has expired"),
        ({"sub": "mia", "role": "player", "exp": time.time() + 86400, "nbf": time.time() + 43200}, "invalid_token",
         "the token is not valid yet"),
    ],
)  # fmt: skip
def test_token_errors_are_ours_and_stable(claims: dict[str, object], code: str, message: str) -> None:
    tokens = Tokens(SECRETS)
    for _ in range(2):  # the held tokens (the HTTP API's) answer the same, the second time too
        for check in (lambda t: authenticate(t, SECRETS), tokens.authenticate):
            with pytest.raises(AuthError) as exc:
                check(forge(claims))
            assert (exc.value.code, exc.value.message) == (code, message)


def test_a_held_token_is_checked_against_the_clock_each_time() -> None:
    tokens = Tokens(SECRETS, size=2)
    token = forge({"sub": "mia", "role": "server", "exp": time.time() + 60})
    assert tokens.authenticate(token) == Identity("server", "mia")
    with pytest.raises(AuthError) as exc:  # the clock two minutes on: expired, held or not
        tokens.authenticate(token, leeway=-120)
    assert exc.value.code == "token_expired"
    later = forge({"sub": "ben", "role": "player", "exp": time.time() + 600, "nbf": time.time() + 60})
    with pytest.raises(AuthError):
        tokens.authenticate(later)
    assert tokens.authenticate(later, leeway=120) == Identity("player", "ben")
    with pytest.raises(AuthError) as exc:
        tokens.authenticate(later)
    assert exc.value.message == "the token is not valid yet"
    for other in ("ana", "cyd"):  # past its size, the oldest held goes: still answered, by verifying again
        tokens.authenticate(forge({"sub": other, "role": "player", "exp": time.time() + 60}))
    assert tokens.authenticate(token) == Identity("server", "mia")
    with pytest.raises(AuthError) as exc:
        Tokens((SECRETS[0][::-1],)).authenticate(token)  # another process's secrets: not its held tokens
    assert exc.value.code == "invalid_token"


def _signed(payload: str, secret: str = SECRETS[0]) -> str:
    """An HS256 token over the payload's exact JSON text (a number no encoder would write)."""
    head = base64.urlsafe_b64encode(b'{"alg":"HS256","typ":"JWT"}').rstrip(b"=")
    body = base64.urlsafe_b64encode(payload.encode()).rstrip(b"=")
    mac = hmac.new(secret.encode(), head + b"." + body, hashlib.sha256).digest()
    return (head + b"." + body + b"." + base64.urlsafe_b64encode(mac).rstrip(b"=")).decode()


@pytest.mark.parametrize("claim", ["exp", "nbf", "iat"])
@pytest.mark.parametrize("value", ["1e400", "-1e400", "NaN", "Infinity", "-Infinity"])
def test_a_non_finite_time_claim_is_refused(claim: str, value: str) -> None:
    """Python's JSON reads 1e400 as infinity and NaN as NaN: an exp of either never compared as past,
    so a backend's bug minted a token that never expired. A valid signature does not save it."""
    now = int(time.time())
    times = {"exp": str(now + 60), "iat": str(now)}
    finite = '{"sub": "mia", "role": "player", ' + ", ".join(f'"{k}": {v}' for k, v in times.items()) + "}"
    payload = (
        '{"sub": "mia", "role": "player", '
        + ", ".join(f'"{k}": {v}' for k, v in (times | {claim: value}).items())
        + "}"
    )
    with pytest.raises(AuthError) as exc:
        authenticate(_signed(payload), SECRETS)
    assert (exc.value.code, exc.value.message) == ("invalid_token", f"{claim} must be a finite number")
    assert authenticate(_signed(finite), SECRETS).player == "mia"  # the same token, finite: accepted


async def test_a_never_expiring_token_is_refused_on_the_socket(redis_url: str) -> None:
    forever = _signed(f'{{"sub": "mia", "role": "server", "exp": 1e400, "iat": {int(time.time())}}}')
    async with running(redis_url) as gw, client(gw) as ws:
        await greet(ws)
        await ws.send(json.dumps({"type": "hello", "token": forever}))
        assert (await recv(ws))["code"] == "invalid_token"
        await asyncio.wait_for(ws.wait_closed(), 2 * T)
        assert ws.close_code == 1008


def test_malformed_tokens_get_one_message() -> None:
    for token in ("not.a.jwt", "a.b", "x" * 100, forge({"sub": "m"}).rsplit(".", 1)[0] + ".AAAA"):
        with pytest.raises(AuthError) as exc:
            authenticate(token, SECRETS)
        assert exc.value.code == "invalid_token"
        assert exc.value.message in ("the token is not a well-formed HS256 JWT", "the signature does not verify")
    none_alg = jwt.encode({"sub": "mia", "role": "server", "exp": time.time() + 60}, None, algorithm="none")
    with pytest.raises(AuthError) as exc:
        authenticate(none_alg, SECRETS)
    assert exc.value.message == "the token is not signed with HS256"


async def test_binary_frames_are_refused_and_invalid_utf8_is_closed_with_1007(redis_url: str) -> None:
    async with running(redis_url) as gw:
        async with client(gw) as ws:
            await greet(ws)
            await ws.send(b'{"type":"ping","id":1}')  # JSON, but in a binary frame
            reply = await recv(ws)
            assert (reply["type"], reply["code"]) == ("error", "binary_frame")
            assert (await request(ws, {"type": "ping", "id": 2}))["type"] == "pong"  # the connection is kept
        sock = await raw_ws(gw)
        try:
            # a masked text frame whose payload is not UTF-8
            payload = b"\xff\xfe"
            sock.sendall(bytes([0x81, 0x80 | len(payload)]) + b"\0\0\0\0" + payload)
            data = b""
            async with asyncio.timeout(5):  # the gateway closes; it ends the TCP connection after
                while chunk := await asyncio.get_running_loop().sock_recv(sock, 4096):
                    data += chunk
            close = data[data.rindex(b"\x88") :]  # the last frame: close (unmasked, from the server)
            assert int.from_bytes(close[2:4], "big") == 1007
        finally:
            sock.close()


def client_text_frame(payload: bytes) -> bytes:
    """A masked client text frame (mask key 0: the payload stays as it is)."""
    size = len(payload)
    head = bytes([0x81, 0x80 | size]) if size < 126 else bytes([0x81, 0x80 | 126]) + size.to_bytes(2, "big")
    return head + b"\0\0\0\0" + payload


async def test_a_client_that_requests_without_reading_is_dropped_as_stalled(redis_url: str, lb: Leaderboard) -> None:
    subs = [Submission(f"s{i}", f"player-{i:04d}", i, NOW, name=f"name-{i:04d}").fields() for i in range(100)]
    await lb.submit_batch(subs, now=NOW)
    limits = {"write_buffer": 16 * 1024, "stall_timeout": 0.5 * T, "rate": 1e6, "burst": 1_000_000}
    limits |= {"read_rate": 1e9, "read_burst": 10**9}  # replies of the full size, as many as asked
    # heartbeats further off than the stall's sweep (a quarter of their time: 2 s) and its bound below:
    # on a loaded machine the stall may take seconds to show, and only the stall detector may end
    # this connection (a heartbeat could not before 16 s)
    limits |= {"ping_interval": 8.0 * T, "ping_timeout": 8.0 * T}
    async with running(redis_url, **limits) as gw:
        sock = await raw_ws(gw, rcvbuf=4096)
        loop = asyncio.get_running_loop()
        ask = client_text_frame(b'{"type":"top","window":"alltime","n":100}')
        # replies of ~8 KB each, never read: once the gateway stops reading, this send can only
        # end when the gateway aborts the socket
        flood = asyncio.create_task(loop.sock_sendall(sock, ask * 200_000))
        try:
            with pytest.raises(ConnectionError):  # reset by the gateway, long before a heartbeat would
                await asyncio.wait_for(flood, 14 * T)
            assert gw.metrics.dropped.labels("stalled")._value.get() == 1
            assert not gw.metrics.dropped.labels("heartbeat")._value.get()
        finally:
            flood.cancel()
            sock.close()
