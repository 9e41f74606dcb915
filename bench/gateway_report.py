"""``bench.gateway``'s report: a run's results (``Result``), its table, and the ratios of each
round's targets against the floor, the baselines and each other."""

from __future__ import annotations

from dataclasses import dataclass

# the floor's variants (bench/floor/floor.c says what each isolates): name -> its environment
FLOOR_VARIANTS = {
    "floor": {},
    "floor-mt": {"FLOOR_THREADS": "4"},
    "floor-touch": {"FLOOR_TOUCH": "512"},
    "floor-greet": {"FLOOR_GREET": "1400"},
}
BASELINES = ("naive", "node-ws", *FLOOR_VARIANTS)
# the targets that take deltas, compressed frames, or both: (environment, what their clients ask for)
WIRES = {
    "gateway-deltas": ({}, "deltas"),
    "gateway-deflate": ({"LB_GW_DEFLATE": "1"}, "deflate"),
    "gateway-both": ({"LB_GW_DEFLATE": "1"}, "deltas,deflate"),
}


@dataclass
class Result:
    name: str
    sockets: int
    deliveries: int
    expected: int
    cpu_ms_per_1k: float
    user_ms_per_1k: float  # the part spent in user space (Python), not in the kernel's TCP
    clients_ms_per_1k: float  # the client processes': they share the cores, so they bound the spread
    gc_pauses: int  # the gateway's garbage collections over the whole run (connecting included) ...
    gc_pause_ms: float  # ... and the time the loop stood still for them
    rss_kb_per_conn: float
    bytes_per_delivery: float  # bytes the clients read over the publishing window, per delivery
    spread_p50_ms: float  # first to last arrival of one snapshot (kernel receive timestamps)
    spread_p99_ms: float
    read_spread_p50_ms: float  # ... and first to last read by the client processes
    read_spread_p99_ms: float
    lat_p50_ms: float
    lat_p99_ms: float


def table(results: list[Result]) -> str:
    head = (
        "| target | sockets | deliveries | bytes / delivery | CPU ms / 1k deliveries (user space) | RSS KB / conn "
        "| spread at arrival p50 / p99 ms | spread when read p50 / p99 ms | publish→arrival p50 / p99 ms "
        "| clients' CPU ms / 1k | GC pauses (ms) |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|\n"
    )
    rows = "".join(
        f"| {x.name} | {x.sockets} | {x.deliveries}/{x.expected} | {x.bytes_per_delivery:.0f} "
        f"| {x.cpu_ms_per_1k:.1f} ({x.user_ms_per_1k:.1f}) "
        f"| {x.rss_kb_per_conn:.1f} "
        f"| {x.spread_p50_ms:.0f} / {x.spread_p99_ms:.0f} | {x.read_spread_p50_ms:.0f} / {x.read_spread_p99_ms:.0f} "
        f"| {x.lat_p50_ms:.0f} / {x.lat_p99_ms:.0f} "
        f"| {x.clients_ms_per_1k:.1f} | {'–' if x.name in BASELINES else f'{x.gc_pauses} ({x.gc_pause_ms:.0f})'} |\n"
        for x in results
    )
    return head + rows


def rounds(results: list[Result]) -> list[dict[str, Result]]:
    """The runs grouped into rounds: round k holds each target's k-th run (``--targets
    floor,gateway,floor,gateway`` is two rounds), so a target run twice is two figures, not one
    overwriting the other."""
    seen: dict[str, int] = {}
    grouped: list[dict[str, Result]] = []
    for x in results:
        k = seen.get(x.name, 0)
        seen[x.name] = k + 1
        if k == len(grouped):
            grouped.append({})
        grouped[k][x.name] = x
    return grouped


def ratios(results: list[Result]) -> str:
    """The gateway against its baselines within each round (a round's runs ran back to back, so
    the machine's load was the same for both)."""
    grouped = rounds(results)
    return "".join(_round_ratios(by, f"round {k + 1}: " if len(grouped) > 1 else "") for k, by in enumerate(grouped))


def _round_ratios(by: dict[str, Result], tag: str) -> str:
    ours, naive = by.get("gateway"), by.get("naive")
    ka = by.get("gateway-keepalive")
    if ours is not None and ka is not None:
        others = (
            f"- {tag}heartbeat sweep vs websockets' keepalive task per socket: CPU per delivery "
            f"{ours.cpu_ms_per_1k:.1f} vs {ka.cpu_ms_per_1k:.1f} ms / 1k, RSS per connection "
            f"{ours.rss_kb_per_conn:.1f} vs {ka.rss_kb_per_conn:.1f} KB\n"
        )
    else:
        others = ""
    peer = by.get("node-ws")
    if ours is not None and peer is not None:
        others += (
            f"- {tag}gateway vs Node.js with ws (the peers' fan-out): CPU per delivery {ours.cpu_ms_per_1k:.1f} vs "
            f"{peer.cpu_ms_per_1k:.1f} ms / 1k (**{ours.cpu_ms_per_1k / peer.cpu_ms_per_1k:.2f}×**), RSS per "
            f"connection {ours.rss_kb_per_conn:.1f} vs {peer.rss_kb_per_conn:.1f} KB, spread p99 "
            f"{ours.spread_p99_ms:.0f} vs {peer.spread_p99_ms:.0f} ms\n"
        )
    if ours is None or naive is None:
        return others
    lines = [
        f"- {tag}CPU per delivery: gateway / naive = **{ours.cpu_ms_per_1k / naive.cpu_ms_per_1k:.2f}×** "
        f"(target ≤ 0.5×); user-space CPU only (without the kernel's loopback TCP, which also carries the "
        f"clients' receive path here): **{ours.user_ms_per_1k / naive.user_ms_per_1k:.2f}×**",
        f"- {tag}RSS per connection: gateway / naive = "
        f"**{ours.rss_kb_per_conn / naive.rss_kb_per_conn:.2f}×** "
        f"({ours.rss_kb_per_conn:.1f} KB; target ≤ 10 KB)",
        f"- {tag}spread p99 (target ≤ 100 ms): at arrival gateway {ours.spread_p99_ms:.0f} ms vs naive "
        f"{naive.spread_p99_ms:.0f} ms; when read by the clients {ours.read_spread_p99_ms:.0f} vs "
        f"{naive.read_spread_p99_ms:.0f} ms",
        f"- {tag}publish→arrival p99: gateway / naive = {ours.lat_p99_ms / max(naive.lat_p99_ms, 1e-9):.2f}×",
    ]
    bc = by.get("gateway-broadcast")
    if bc is not None:
        lines.append(
            f"- {tag}frame once vs websockets.broadcast() inside the gateway: CPU per delivery "
            f"{ours.cpu_ms_per_1k:.1f} vs {bc.cpu_ms_per_1k:.1f} ms / 1k "
            f"(**{ours.cpu_ms_per_1k / bc.cpu_ms_per_1k:.2f}×**), spread p99 {ours.spread_p99_ms:.0f} vs "
            f"{bc.spread_p99_ms:.0f} ms"
        )
    return "\n".join(lines) + "\n" + others


@dataclass
class Pooled:
    """One target's runs (A/B/A/B) taken together: CPU weighted by deliveries, RSS averaged."""

    cpu_ms_per_1k: float
    user_ms_per_1k: float
    rss_kb_per_conn: float
    spread_p99_ms: float  # the worst run's
    deliveries: int
    expected: int


def pooled(results: list[Result], name: str) -> Pooled | None:
    runs = [x for x in results if x.name == name]
    if not runs:
        return None
    deliveries = sum(x.deliveries for x in runs)
    return Pooled(
        cpu_ms_per_1k=sum(x.cpu_ms_per_1k * x.deliveries for x in runs) / max(1, deliveries),
        user_ms_per_1k=sum(x.user_ms_per_1k * x.deliveries for x in runs) / max(1, deliveries),
        rss_kb_per_conn=sum(x.rss_kb_per_conn for x in runs) / len(runs),
        spread_p99_ms=max(x.spread_p99_ms for x in runs),
        deliveries=deliveries,
        expected=sum(x.expected for x in runs),
    )


def against_floor_and_baselines(results: list[Result]) -> str:
    """The gateway against the floor (bench/floor/floor.c) and against its own code at other
    revisions (``gateway@REV`` targets), each target's runs pooled."""
    ours, floor = pooled(results, "gateway"), pooled(results, "floor")
    lines = []
    if ours is not None and floor is not None:
        lines.append(
            f"- gateway / floor (a C sender's write() loop), CPU per delivery: "
            f"**{ours.cpu_ms_per_1k / floor.cpu_ms_per_1k:.2f}×** ({ours.cpu_ms_per_1k:.1f} vs "
            f"{floor.cpu_ms_per_1k:.1f} ms / 1k; user space {ours.user_ms_per_1k:.1f} vs {floor.user_ms_per_1k:.1f})"
            f"{by_round(results, 'gateway', 'floor')}"
        )
    for name in dict.fromkeys(x.name for x in results if "@" in x.name):
        base = pooled(results, name)
        mine = pooled(results, name.partition("@")[0])
        if base is None or mine is None:
            continue
        lines.append(
            f"- {name.partition('@')[0]} against {name}: CPU per delivery {mine.cpu_ms_per_1k:.1f} vs "
            f"{base.cpu_ms_per_1k:.1f} ms / 1k (**{mine.cpu_ms_per_1k / base.cpu_ms_per_1k:.2f}×**), RSS per "
            f"connection **{mine.rss_kb_per_conn:.2f} vs {base.rss_kb_per_conn:.2f} KB**"
            f"{by_round(results, name.partition('@')[0], name)}"
        )
    return "".join(line + "\n" for line in lines)


def bytes_and_cpu(results: list[Result]) -> str:
    """Deltas, compressed frames and both against full snapshots (``gateway``), each target's
    runs pooled: bytes per delivery, CPU per delivery, the fan-out spread's p99."""
    full = pooled(results, "gateway")
    lines = []
    for name in WIRES:
        mine = pooled(results, name)
        if full is None or mine is None:
            continue
        b_full = sum(x.bytes_per_delivery * x.deliveries for x in results if x.name == "gateway") / full.deliveries
        b_mine = sum(x.bytes_per_delivery * x.deliveries for x in results if x.name == name) / max(1, mine.deliveries)
        lines.append(
            f"- {name} against gateway (full snapshots): bytes per delivery {b_mine:.0f} vs {b_full:.0f} "
            f"(**{b_mine / b_full:.3f}×**), CPU per delivery {mine.cpu_ms_per_1k:.1f} vs {full.cpu_ms_per_1k:.1f} "
            f"ms / 1k (**{mine.cpu_ms_per_1k / full.cpu_ms_per_1k:.2f}×**{by_round(results, name, 'gateway')}), "
            f"spread p99 {mine.spread_p99_ms:.0f} vs {full.spread_p99_ms:.0f} ms"
        )
    return "".join(line + "\n" for line in lines)


def by_round(results: list[Result], name: str, base: str) -> str:
    """``name`` / ``base`` CPU per delivery in each round that ran both, when there is more than one."""
    figures = [by[name].cpu_ms_per_1k / by[base].cpu_ms_per_1k for by in rounds(results) if name in by and base in by]
    if len(figures) < 2:
        return ""
    return "; by round " + ", ".join(f"{x:.2f}×" for x in figures)


def coalescing(results: list[Result]) -> str:
    """The --boards comparison: each target's runs pooled (A/B/A/B), then on / off."""
    on, off = pooled(results, "gateway"), pooled(results, "gateway-nocoalesce")
    if on is None or off is None:
        return ""
    return (
        f"- coalescing on / off, CPU per delivered snapshot: **{on.cpu_ms_per_1k / off.cpu_ms_per_1k:.2f}×** "
        f"({on.cpu_ms_per_1k:.1f} vs {off.cpu_ms_per_1k:.1f} ms / 1k; target ≤ 0.5×); user space only "
        f"{on.user_ms_per_1k / off.user_ms_per_1k:.2f}× ({on.user_ms_per_1k:.1f} vs {off.user_ms_per_1k:.1f})\n"
        f"- spread p99 at arrival, worst run: on {on.spread_p99_ms:.0f} ms, off {off.spread_p99_ms:.0f} ms "
        f"(target ≤ 100 ms)\n"
        f"- delivered / expected: on {on.deliveries:,} / {on.expected:,}, off {off.deliveries:,} / {off.expected:,}\n"
    )
