"""The baseline of the gateway benchmark: what a first WebSocket fan-out usually looks like.

``websockets.serve`` with default settings (compression off), one Redis pub/sub subscription, and
``websockets.broadcast`` of every message to every connection. No snapshot on connect, no flow
control, no heartbeat sweep, no own-rank pushes::

    python -m bench.naive_gateway --port 8100 --redis-url redis://127.0.0.1:7000/0 --channel CHANNEL
"""

from __future__ import annotations

import os

import uvloop
from websockets.asyncio.server import ServerConnection, broadcast, serve

from leaderboard import connect
from leaderboard.settings import argument_parser
from leaderboard.transport import shard_pubsub


async def main(port: int, redis_url: str, channel: str) -> None:
    redis = connect(redis_url)  # a redis+cluster:// URL too
    connections: set[ServerConnection] = set()

    async def handler(ws: ServerConnection) -> None:
        connections.add(ws)
        try:
            await ws.wait_closed()
        finally:
            connections.discard(ws)

    async def relay() -> None:
        pubsub = await shard_pubsub(redis, channel)  # on a cluster, the master owning its slot
        await pubsub.ssubscribe(channel)
        async for message in pubsub.listen():
            if message["type"] == "smessage":
                broadcast(connections, message["data"])

    async with serve(handler, "127.0.0.1", port, compression=None):
        await relay()


if __name__ == "__main__":
    p = argument_parser("python -m bench.naive_gateway", __doc__ or "")
    p.add_argument("--port", type=int, required=True, help="listen port on 127.0.0.1")
    p.add_argument("--redis-url", help="Redis whose channel it forwards (default: LB_REDIS_URL)")
    p.add_argument("--channel", required=True, help="the pub/sub channel forwarded to every socket")
    args = p.parse_args()
    args.redis_url = args.redis_url or os.environ.get("LB_REDIS_URL") or p.error("--redis-url or LB_REDIS_URL needed")
    uvloop.run(main(args.port, args.redis_url, args.channel))
