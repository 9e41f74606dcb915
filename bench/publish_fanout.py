"""Redis's cost of a snapshot publish by the number of gateways: ``python -m bench.publish_fanout``.

Each gateway process subscribes once to each board's channel (sharded pub/sub, ``SSUBSCRIBE``), so
one snapshot published costs Redis one delivery per gateway process. This measures that cost: a
private redis-server, ``--subscribers`` connections subscribed to one channel (each standing for a
gateway, reading everything), then ``--publishes`` snapshot-sized ``SPUBLISH`` calls, pipelined;
for each subscriber count in turn, alternating, ``--rounds`` times. Redis's CPU comes from its
``INFO cpu`` (the whole process, microseconds: the command and the writes to the subscribers'
sockets, which happen after the command and which ``INFO commandstats`` leaves out). Every
message must reach every subscriber, or the run fails.

Unless ``--no-write``, the figures are recorded in bench/results/publish_fanout.json.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time

import redis

from bench import results
from fleet.redis_server import RedisServer
from leaderboard.settings import argument_parser

CHANNEL = "lb:{bench}:snap:weekly:global"
PIPELINE = 100  # publishes per round trip


def message_size(payload: bytes) -> int:
    """Bytes of one pushed message on a subscriber's connection (RESP2: smessage, channel, payload)."""
    parts = [b"smessage", CHANNEL.encode(), payload]
    return len(b"*3\r\n" + b"".join(b"$%d\r\n%s\r\n" % (len(p), p) for p in parts))


async def subscriber(host: str, port: int, ready: asyncio.Event, total: int) -> int:
    """Subscribe, then read until ``total`` bytes of messages arrived; the bytes read."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        channel = CHANNEL.encode()
        writer.write(b"*2\r\n$10\r\nSSUBSCRIBE\r\n$%d\r\n%s\r\n" % (len(channel), channel))
        await reader.readuntil(b":1\r\n")  # the confirmation: ["ssubscribe", channel, 1]
        ready.set()
        got = 0
        while got < total:
            chunk = await reader.read(1 << 20)
            if not chunk:
                break
            got += len(chunk)
        return got
    finally:
        writer.close()


async def cpu_s(client: redis.asyncio.Redis) -> float:
    info = await client.info("cpu")
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


async def one_phase(host: str, port: int, subscribers: int, publishes: int, payload: bytes) -> float:
    """Redis CPU seconds for ``publishes`` publishes to ``subscribers`` subscribers."""
    total = publishes * message_size(payload)
    events = [asyncio.Event() for _ in range(subscribers)]
    readers = [asyncio.create_task(subscriber(host, port, e, total)) for e in events]
    await asyncio.gather(*(e.wait() for e in events))
    client = redis.asyncio.Redis(host=host, port=port)
    try:
        cpu0 = await cpu_s(client)
        for start in range(0, publishes, PIPELINE):
            async with client.pipeline(transaction=False) as pipe:
                for _ in range(min(PIPELINE, publishes - start)):
                    pipe.execute_command("SPUBLISH", CHANNEL, payload)
                counts = await pipe.execute()
            if any(n != subscribers for n in counts):
                raise RuntimeError(f"a publish reached {set(counts)} subscribers, not {subscribers}")
        got = await asyncio.wait_for(asyncio.gather(*readers), 120)
        cpu = await cpu_s(client) - cpu0
    finally:
        await client.aclose()
    if any(n != total for n in got):
        raise RuntimeError(f"a subscriber read {min(got):,} of {total:,} bytes")
    return cpu


def positive(text: str) -> int:
    """``type=`` of a count: a whole number of at least 1, else a usage error."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text!r}")
    return int(text)


def counts(text: str) -> list[int]:
    """``type=`` of --subscribers: counts of at least 1, comma-separated."""
    return [positive(part.strip()) for part in text.split(",")]


def main(argv: list[str] | None = None) -> int:
    p = argument_parser("python -m bench.publish_fanout", __doc__ or "")
    p.add_argument("--subscribers", type=counts, default="1,10,100", help="subscriber counts, comma-separated")
    p.add_argument("--publishes", type=positive, default=20_000, help="publishes per phase")
    p.add_argument("--payload", type=positive, default=1316, help="bytes per snapshot (bench.gateway's)")
    p.add_argument("--rounds", type=positive, default=2, help="times each subscriber count, alternating")
    results.add_no_write(p)
    args = p.parse_args(argv)
    payload = b'{"type":"snapshot"' + b"x" * max(0, args.payload - 19) + b"}"
    cpu_s: dict[int, list[float]] = {c: [] for c in args.subscribers}
    with tempfile.TemporaryDirectory(prefix="publish-bench-") as data, RedisServer(data) as server:
        admin = redis.Redis(host=server.host, port=server.port)
        # a subscriber this bench reads as fast as it can; no limit so a slow read never cuts it off
        admin.config_set("client-output-buffer-limit", "pubsub 0 0 0")
        admin.close()
        started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        for _ in range(args.rounds):
            for c in args.subscribers:
                cpu = asyncio.run(one_phase(server.host, server.port, c, args.publishes, payload))
                cpu_s[c].append(cpu)
    print(
        f"{started}: {args.publishes:,} SPUBLISH of {len(payload):,} bytes per phase, "
        f"{PIPELINE} per pipeline, rounds alternating\n"
    )
    print("| subscribers (gateway processes) | Redis CPU µs per publish, each round | per delivery | vs 1 subscriber |")
    print("|---|---|---|---|")
    per_publish = {c: [cpu / args.publishes * 1e6 for cpu in runs] for c, runs in cpu_s.items()}
    base = min(per_publish[args.subscribers[0]])
    for c, per in per_publish.items():
        print(f"| {c} | {', '.join(f'{x:.1f}' for x in per)} | {min(per) / c:.2f} | {min(per) / base:.1f}× |")
    figures = {
        "publishes": args.publishes,
        "payload_bytes": len(payload),
        "redis_cpu_us_per_publish": {str(c): per for c, per in per_publish.items()},
    }
    results.save("publish_fanout", figures, args, module="bench.publish_fanout", argv=argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
