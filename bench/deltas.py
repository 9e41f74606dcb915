"""Snapshot deltas on the demo's traffic: which delta format, and how many bytes a delivery costs.

    python -m bench.deltas                    # 600 ticks of the demo's ladder after a warm-up
    python -m bench.deltas --ticks 300 --rate 300 --no-write

``demo_snapshots`` plays the demo's ladder (fleet/demo.py: the same players, ratings and names
``./dev run`` submits, at its default 300 matches a second) into the weekly global top 10 as the
scorer publishes it: a new version whenever the top 10 changed in a one-second tick. The same
sequence feeds ``bench.gateway --traffic demo``.

For each consecutive pair it measures the bytes of: the full snapshot (today), the JSON-aware
delta the gateway sends (leaderboard/delta.py), a Fossil delta of the snapshot's bytes (the format
Centrifugo uses: ``fossil_delta`` below, the algorithm of Fossil's delta.c: a rolling hash over
16-byte blocks of the base, copy and insert commands, a checksum), and each of those compressed
as permessage-deflate sends a message without context takeover. Prints a table and (unless
--no-write) records it in bench/results/deltas.json.
"""

from __future__ import annotations

import itertools
import statistics
import sys
import zlib

from bench import results as bench_results
from fleet.demo import Ladder
from leaderboard import delta, wire
from leaderboard.results import Entry
from leaderboard.settings import argument_parser

TOP = 10
NHASH = 16  # Fossil's block size


def demo_tops(ticks: int, *, rate: int = 300, warmup: int = 60, seed: int = 1) -> list[list[Entry]]:
    """The weekly global top 10 over ``ticks`` seconds of the demo's traffic (after ``warmup``
    seconds), once per second in which it changed: what the scorer publishes."""
    ladder = Ladder(seed)
    scores: dict[str, tuple[int, str]] = {}  # player -> (points, name): op "set", the last rating
    out: list[list[Entry]] = []
    last: list[tuple[str, int, str]] = []
    now = 1_900_000_000_000
    for second in range(warmup + ticks):
        for _ in range(rate):
            sub = ladder.next(now)
            scores[sub.player] = (int(sub.points), sub.name or sub.player)
        now += 1000
        top = sorted(((-p, player, name) for player, (p, name) in scores.items()))[:TOP]
        current = [(player, -neg, name) for neg, player, name in top]
        if second >= warmup and current != last:
            out.append([Entry(i + 1, player, p, {"name": name}) for i, (player, p, name) in enumerate(current)])
        last = current
    return out


def demo_snapshot(entries: list[Entry], version: int, ts_ms: int) -> bytes:
    return wire.snapshot(board="global", window="weekly", period="2030-W48", version=version, ts_ms=ts_ms,
                         entries=entries)  # fmt: skip


def demo_snapshots(ticks: int, *, rate: int = 300, warmup: int = 60, seed: int = 1) -> list[bytes]:
    """``demo_tops`` as the snapshots the scorer publishes, versions counting up, one a second."""
    tops = demo_tops(ticks, rate=rate, warmup=warmup, seed=seed)
    return [demo_snapshot(top, i + 1, 1_900_000_000_000 + 1000 * i) for i, top in enumerate(tops)]


def fossil_delta(source: bytes, target: bytes) -> bytes:
    """A Fossil delta (delta.c's format: ``<len>\\n``, then ``<n>@<offset>,`` copies and
    ``<n>:<bytes>`` inserts, ``<checksum>;``), found as delta.c finds it: the base indexed by
    16-byte block, each match extended backwards and forwards."""

    def b64(n: int) -> bytes:
        digits = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz~"
        out = b""
        while True:
            out = digits[n & 63 : (n & 63) + 1] + out
            n >>= 6
            if not n:
                return out

    out = [b64(len(target)), b"\n"]
    blocks: dict[bytes, int] = {}
    for i in range(0, len(source) - NHASH + 1, NHASH):
        blocks.setdefault(source[i : i + NHASH], i)
    base = 0  # target bytes already described
    i = 0
    while i + NHASH <= len(target):
        at = blocks.get(target[i : i + NHASH])
        if at is None:
            i += 1
            continue
        back = 0
        while back < min(at, i - base) and source[at - back - 1] == target[i - back - 1]:
            back += 1
        start, src = i - back, at - back
        end = i + NHASH
        while end < len(target) and src + (end - start) < len(source) and source[src + end - start] == target[end]:
            end += 1
        if start > base:
            out += [b64(start - base), b":", target[base:start]]
        out += [b64(end - start), b"@", b64(src), b","]
        base = i = end
    if base < len(target):
        out += [b64(len(target) - base), b":", target[base:]]
    out += [b64(zlib.crc32(target)), b";"]
    return b"".join(out)


def deflated(message: bytes) -> int:
    """Bytes of ``message`` compressed as the gateway compresses a shared frame (gateway/frames.py)."""
    encoder = zlib.compressobj(6, zlib.DEFLATED, -15)
    return len(encoder.compress(message) + encoder.flush(zlib.Z_SYNC_FLUSH)) - 4


def measure(snapshots: list[bytes]) -> dict[str, float]:
    """Mean bytes per message of each format over consecutive pairs (payloads, before framing)."""
    sizes: dict[str, list[int]] = {
        k: [] for k in ("full", "json", "fossil", "full+deflate", "json+deflate", "fossil+deflate")
    }
    for before, after in itertools.pairwise(snapshots):
        json_delta = delta.encode(before, after) or after
        fossil = fossil_delta(before, after)
        for name, message in (("full", after), ("json", json_delta), ("fossil", fossil)):
            sizes[name].append(len(message))
            sizes[f"{name}+deflate"].append(deflated(message))
    return {name: statistics.fmean(values) for name, values in sizes.items()}


def main(argv: list[str] | None = None) -> int:
    p = argument_parser("python -m bench.deltas", __doc__ or "")
    p.add_argument("--ticks", type=int, default=600, help="seconds of the demo's traffic measured")
    p.add_argument("--rate", type=int, default=300, help="matches a second (the demo's default: 300)")
    bench_results.add_no_write(p)
    args = p.parse_args(argv)
    snapshots = demo_snapshots(args.ticks, rate=args.rate)
    figures = measure(snapshots)
    full = figures["full"]
    print(f"{len(snapshots)} snapshots in {args.ticks} s of the demo's traffic ({args.rate} matches/s)")
    print("| format | bytes per message | vs full |\n|---|---:|---:|")
    for name, value in figures.items():
        print(f"| {name} | {value:.0f} | {value / full:.3f}x |")
    bench_results.save("deltas", {"snapshots": len(snapshots), "ticks": args.ticks, "rate": args.rate, **figures}, args,
                       module="bench.deltas", argv=argv)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
