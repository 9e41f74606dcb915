"""One sweep task over all sockets instead of websockets' keepalive task per socket.

Every tick it pings sockets whose last ping is ``ping_interval`` old, closes those whose pong is
``ping_timeout`` late (a dead line: its slot is freed), and drops sockets whose write buffer has
stayed over the bound too long. A task per socket costs a Task, a coroutine frame and a timer
handle per connection; at 10k sockets one sweep is smaller (docs/benchmarks.md has the figures).

A ping is not a write of its own: it joins the socket's next tick write (``Outbound.ping_held``,
within a quarter of the timeout), as held rank pushes do, so a socket with snapshots flowing pays
no system call for its heartbeat; its pong is recognised without websockets' frame parser
(``LeanConnection.data_received``). The ping is websockets' frame with a payload of our own, one per
sweep, so a late pong of an earlier ping does not answer a newer one.

A sweep's chunks are spread evenly over its tick rather than run back to back: pings written at
once (coalescing off) and their pongs then arrive as a trickle, not a burst, and a quarter of
12,500 sockets visited at once held up the snapshot tick that fell on it by hundreds of
milliseconds (docs/benchmarks.md, 50,000 sockets), on every gateway at the same moment when
they started together. Each socket is still visited once per tick.
"""

from __future__ import annotations

import asyncio
import itertools
import struct
import time
from collections.abc import Callable, Collection

from websockets.frames import Frame, Opcode

from leaderboard import closes

from .client import Client
from .outbound import Outbound
from .settings import GatewaySettings

_CHUNK = 1000  # sockets handled between yields to the loop
_ROUNDS = itertools.count(1)  # each sweep's ping payload: a 32-bit counter


async def sweep_forever(clients: Callable[[], Collection[Client]], out: Outbound, settings: GatewaySettings) -> None:
    tick = max(0.01, min(settings.ping_interval, settings.ping_timeout) / 4)
    loop = asyncio.get_running_loop()
    while True:
        started = loop.time()
        await sweep(list(clients()), out, settings, spread=tick)
        # the next sweep one tick after this one began, whatever this one cost
        await asyncio.sleep(max(0.0, started + tick - loop.time()))


async def sweep(clients: list[Client], out: Outbound, settings: GatewaySettings, spread: float = 0.0) -> None:
    """Visit every socket once; ``spread``: seconds over which the chunks are paced (0: at once)."""
    pings = settings.heartbeat == "sweep"  # else websockets' keepalive task per socket pings
    # a held ping waits for the next tick at most a quarter of the time its pong is given
    hold = min(settings.push_hold, settings.ping_timeout / 4)
    payload = struct.pack("!I", next(_ROUNDS) & 0xFFFFFFFF)
    ping = Frame(Opcode.PING, payload).serialize(mask=False)  # one frame for every socket of this sweep
    loop = asyncio.get_running_loop()
    began = loop.time()
    chunks = -(-len(clients) // _CHUNK)
    for i, start in enumerate(range(0, len(clients), _CHUNK)):
        if i and spread > 0:
            # chunk i at its share of the tick: pings and pongs arrive as a trickle, not a burst
            await asyncio.sleep(max(0.0, began + i * spread / chunks - loop.time()))
        now = time.monotonic()
        for client in clients[start : start + _CHUNK]:
            # one flag, not the connection's state through two objects: at 10,000 sockets the
            # sweep's per-socket reads are most of its cost (closed follows the state out of
            # OPEN: LeanConnection)
            if client.closed:
                continue
            if not client.clean:  # a clean socket's transport holds nothing: not stalled
                out.check_stalled(client, now)
            if not pings:
                continue
            if client.ping_data is not None:
                if now - client.ping_sent >= settings.ping_timeout:
                    # the peer is gone or wedged: 1011 as websockets' own keepalive sends it
                    out.fail(client, closes.INTERNAL, closes.KEEPALIVE, "heartbeat")
            elif now - client.last_ping >= settings.ping_interval:
                client.last_ping = client.ping_sent = now
                client.ping_data = payload
                out.ping_held(client, ping, hold)
        await asyncio.sleep(0)
