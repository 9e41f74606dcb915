"""The load-test modes, each a script of what to start, when to measure and what to break:
``sockets`` and ``mixed`` (``run_load``), ``submit``, ``storm`` and ``rollout``. Each returns a
``Result``: every figure, the time series behind the charts, and the terminal rows; ``__main__``
writes the reports. The measuring of a socket phase is ``loadtest.measure``, the figures from
what was measured ``loadtest.figures``, the rows and charts from the figures ``loadtest.rows``.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import signal
import time
from dataclasses import dataclass, field
from typing import Any

from fleet.rollout import Step, rollout
from leaderboard import GameConfig, RedisClient, connect

from . import report
from .figures import GRACE, nothing_published, phase_figures, rollout_figures, storm_figures
from .flood import Flood, Source, Window, one_at_a_time, tenth_place
from .measure import SETTLE, catch_up, channel_of, measure_phase, swarm_of
from .progress import Progress, Watch
from .rows import (
    balancer_rows,
    phase_charts,
    phase_rows,
    ratio_rows,
    rollout_charts,
    rollout_rows,
    storm_charts,
    storm_rows,
)
from .swarm import Swarm
from .target import NaiveGateway, SnapshotMonitor, Target, wait_listening


@dataclass
class Result:
    mode: str
    figures: dict[str, Any] = field(default_factory=dict)
    series: dict[str, Any] = field(default_factory=dict)
    rows: list[tuple[str, Any]] = field(default_factory=list)
    charts: list[str] = field(default_factory=list)


async def into_top(
    flood: Flood, redis: RedisClient, config: GameConfig, args: argparse.Namespace, progress: Progress
) -> None:
    """``--feed-into-top``: each feed player's first slip starts from the watched board's 10th
    place, so a feed of a board whose top 10 is established moves it (without, its slips may never
    reach it: no snapshot is published, and a socket phase measures nothing)."""
    if not getattr(args, "feed_into_top", False):
        return
    tenth = await tenth_place(redis, config, args.window)
    if tenth is not None:
        flood.source.floor = tenth
        progress.note(f"--feed-into-top: the feed's players start at the board's 10th place, {tenth:,} points")


async def why_nothing(flood: Flood | None, redis: RedisClient, config: GameConfig, window: str, backlog0: int) -> str:
    """Why no snapshot was published in a window (``figures.nothing_published``), read now."""
    growth = await flood.backlog() - backlog0 if flood is not None else 0
    return nothing_published(
        rate=flood.rate if flood is not None else 0,
        accepted=flood.accepted if flood is not None else 0,
        backlog_growth=growth,
        tenth=await tenth_place(redis, config, window),
    )


async def run_load(mode: str, target: Target, args: argparse.Namespace, progress: Progress) -> Result:
    """``sockets`` (a light feed keeps snapshots coming) and ``mixed`` (a flood at ``--rate``)."""
    rate = args.feed_rate if mode == "sockets" else args.rate
    result = Result(mode)
    config = GameConfig(game=target.game)
    channel = channel_of(target.game, args.window)
    redis = connect(target.redis_url)
    flood = (
        Flood(redis, config, Source(players=args.players, op=args.op, prefix=target.player_prefix), rate=rate)
        if rate != 0
        else None
    )
    backlog0 = 0
    try:
        async with SnapshotMonitor(target.redis_url, channel) as monitor:
            if flood is not None:
                await into_top(flood, redis, config, args, progress)
                backlog0 = await flood.backlog()
                flood.start()
            await asyncio.sleep(1.0)  # the first tick: boards exist, stored snapshots too
            label = "haproxy" if target.balancer_pids else "gateway"
            phases = [label, "direct"] if args.baseline == "direct" else [label]
            if getattr(args, "direct_first", False):
                phases.reverse()  # runs alternate the order: what the machine did meanwhile shows
            for phase in phases:
                through = phase != "direct"
                samples = await measure_phase(
                    phase,
                    target.ws_url,
                    target.gateway_pids,
                    target,
                    args,
                    monitor,
                    flood if mode == "mixed" else None,
                    progress,
                    # direct: the same sockets straight to the gateways' own addresses, the balancer idle
                    first_source=2 if through else 40,
                    balancer_pids=target.balancer_pids if through else None,
                    spread=None if through else target.direct_urls,
                )
                f, ser = phase_figures(samples)
                if not f["snapshots"]:
                    f["nothing_published"] = await why_nothing(flood, redis, config, args.window, backlog0)
                    progress.note(f"{phase}: NOTHING MEASURED: no snapshot was published: {f['nothing_published']}")
                result.figures[phase] = f
                result.series[phase] = ser
                result.rows += phase_rows(f, f"{phase}: " if target.balancer_pids else "")
                result.charts += phase_charts(phase, ser)
            figures = result.figures[label]
            if args.baseline == "direct":
                rows = balancer_rows(figures, result.figures["direct"])
                result.rows += rows
                result.figures["through_haproxy_vs_direct"] = dict(rows)
            if args.baseline == "naive":
                async with NaiveGateway(target.redis_url, channel) as naive:
                    assert naive.proc is not None
                    samples = await measure_phase(
                        "naive",
                        naive.ws_url,
                        [naive.proc.pid],
                        target,
                        args,
                        monitor,
                        flood if mode == "mixed" else None,
                        progress,
                        first_source=40,
                    )
                nf, ns = phase_figures(samples)
                result.figures["naive"] = nf
                result.series["naive"] = ns
                result.rows += phase_rows(nf, "naive: ")
                result.rows += ratio_rows(figures, nf)
                result.figures["ratios"] = dict(ratio_rows(figures, nf))
                result.charts += phase_charts("naive", ns)
    finally:
        if flood is not None:
            await flood.stop()
        await redis.aclose()
    if flood is not None and mode == "mixed":
        result.charts.append(
            report.bar_chart("submissions applied per second", [s[2] for s in flood.samples], "seconds", "applied/s")
        )
    return result


async def run_submit(target: Target, args: argparse.Namespace, progress: Progress) -> Result:
    result = Result("submit")
    redis = connect(target.redis_url)
    source = Source(players=args.players, op=args.op, prefix=target.player_prefix)
    flood = Flood(redis, GameConfig(game=target.game), source, rate=args.rate)
    try:
        watch = Watch("submit", progress, [], flood)
        await flood.sample()
        flood.start()
        await watch.run(args.warmup)
        async with Window(flood) as window:
            await watch.run(args.duration)
        await flood.stop()
        progress.end()
        fig = window.figures()
        fig["refused_backlog_full_chunks"] = flood.refused
        fig["scorer_cpu_pct"] = math.nan
        result.figures["flood"] = fig
        result.rows += [
            ("offered (accepted by the queue) /s", fig["accepted_per_s"]),
            ("applied by the scorer /s", fig["applied_per_s"]),
            ("backlog at start / end", f"{fig['backlog_start']:,} / {fig['backlog_end']:,}"),
            ("chunks refused (backlog full)", flood.refused),
        ]
        if args.baseline == "single":
            left = await flood.drain(60)  # the baseline gets a Redis the scorer no longer keeps busy
            progress.note(
                f"baseline: one FCALL per submission, one at a time, {args.baseline_seconds:.0f} s "
                f"(backlog left {left:,})"
            )
            base = await one_at_a_time(
                redis, Source(players=args.players, op=args.op, prefix=target.player_prefix), args.baseline_seconds
            )
            result.figures["baseline_one_at_a_time_per_s"] = base
            result.rows += [
                ("baseline one-at-a-time /s", base),
                ("applied / baseline", fig["applied_per_s"] / base if base else math.nan),
            ]
    finally:
        await flood.stop()
        await redis.aclose()
    result.series["samples"] = flood.samples
    result.charts += [
        report.bar_chart("submissions applied per second", [s[2] for s in flood.samples], "seconds", "applied/s"),
        report.line_chart(
            "backlog (entries waiting)", [(i, s[3]) for i, s in enumerate(flood.samples)], "seconds", "entries"
        ),
    ]
    return result


async def run_storm(target: Target, args: argparse.Namespace, progress: Progress) -> Result:
    """Sockets onto one gateway, then the others start, then that one is SIGKILLed; the
    sockets come back (to the survivors) with full-jitter backoff."""
    result = Result("storm")
    fleet = target.fleet
    redis = connect(target.redis_url)
    flood = Flood(
        redis,
        GameConfig(game=target.game),
        Source(players=args.players, op=args.op, prefix=target.player_prefix),
        rate=args.feed_rate,
    )
    swarms: list[Swarm] = []
    try:
        if args.feed_rate:
            await into_top(flood, redis, GameConfig(game=target.game), args, progress)
            flood.start()
        victim_swarm = swarm_of(args, target, target.ws_url, reconnect=True)
        swarms.append(await victim_swarm.start())
        watch = Watch("storm", progress, swarms, None)
        ramp_limit = args.sockets / max(args.connect_rate, 1) + 30
        await watch.run(ramp_limit, until=lambda: victim_swarm.totals()["open"] >= args.sockets)
        if fleet is not None:
            victim = fleet.gateways[0]
            victim_pid = victim.pid
            port = fleet.port
            for i in range(len(fleet.gateways), args.gateways):
                fleet.gateways.append(await fleet.start_gateway(i))
            await wait_listening(port, [p.pid for p in fleet.gateways])
            await asyncio.sleep(0.5)
        else:
            victim_pid = args.victim_pid
            if not victim_pid:
                raise ValueError("storm against an existing fleet needs --victim-pid")
        if args.others:
            others = Swarm(
                target.ws_url,
                sockets=args.others,
                rate=args.connect_rate,
                reconnect=True,
                first_source=20,
                first_index=args.sockets,
                player_prefix=target.player_prefix,
            )
            swarms.append(await others.start())
            await watch.run(
                args.others / max(args.connect_rate, 1) + 30, until=lambda: others.totals()["open"] >= args.others
            )
        await watch.run(2.0)
        total = sum(s.sockets for s in swarms)
        before_open = sum(s.totals()["open"] for s in swarms)
        progress.note(f"killing gateway pid {victim_pid} (SIGKILL) with {before_open:,} sockets open in all")
        t_kill = time.time()
        os.kill(victim_pid, signal.SIGKILL)
        if fleet is not None and args.replace:
            await asyncio.sleep(args.replace_after)
            fleet.gateways.append(await fleet.start_gateway(len(fleet.gateways)))

        def all_back() -> bool:
            return time.time() - t_kill > 2 and sum(s.totals()["open"] for s in swarms) >= total

        await watch.run(args.max_wait, until=all_back)
        await watch.run(1.0)
        progress.end()
        reports = [rep for s in swarms for rep in await s.report([], since=t_kill)]
    finally:
        for s in swarms:
            await s.close()
        await flood.stop()
        await redis.aclose()
    f = storm_figures(reports, t_kill, sockets=args.sockets, others=args.others, victim_pid=victim_pid)
    result.figures["storm"] = f
    result.series["timeline"] = watch.timeline
    result.rows += storm_rows(f, max_wait=args.max_wait)
    result.charts += storm_charts(f, watch.timeline)
    return result


async def run_rollout(target: Target, args: argparse.Namespace, progress: Progress) -> Result:
    """Sockets through haproxy onto every gateway, then a rolling restart (``fleet.rollout``) of
    every gateway in turn; the sockets come back through the balancer with full-jitter backoff."""
    result = Result("rollout")
    fleet = target.fleet
    if fleet is None or not fleet.balancers:
        raise ValueError("rollout runs against a private fleet behind haproxy (without --url)")
    redis = connect(target.redis_url)
    source = Source(players=args.players, op=args.op, prefix=target.player_prefix)
    flood = Flood(redis, GameConfig(game=target.game), source, rate=args.feed_rate)
    swarm = swarm_of(args, target, target.ws_url, reconnect=True)
    steps: list[Step] = []

    def note(step: Step) -> None:
        progress.note(
            f"{step.gateway}: drained in {step.drained_s:.1f} s, ready {step.restarted_s:.1f} s later, "
            f"UP in the balancer after {step.back_in_s:.1f} s"
        )

    config = GameConfig(game=target.game)
    backlog0 = 0
    try:
        async with SnapshotMonitor(target.redis_url, channel_of(target.game, args.window)) as monitor:
            if args.feed_rate:
                await into_top(flood, redis, config, args, progress)
                backlog0 = await flood.backlog()
                flood.start()
            await asyncio.sleep(1.0)  # the first tick: the board and its stored snapshot exist
            await swarm.start()
            watch = Watch("rollout", progress, [swarm], None)
            ramp_limit = args.sockets / max(args.connect_rate, 1) + 30
            await watch.run(ramp_limit, until=lambda: swarm.totals()["open"] >= args.sockets)
            await watch.run(SETTLE)
            before = swarm.totals()
            progress.note(f"rolling restart of {len(fleet.gateways)} gateways, {before['open']:,} sockets open")
            t0 = time.time()
            task = asyncio.create_task(rollout(fleet.layout(), on_step=note))
            await watch.run(args.max_wait * len(fleet.gateways), until=task.done)
            if not task.done():
                task.cancel()
                raise RuntimeError(f"the rolling restart did not finish within {args.max_wait * len(fleet.gateways)} s")
            steps = task.result()
            t_done = time.time()
            await watch.run(args.max_wait, until=lambda: swarm.totals()["open"] >= args.sockets)
            await watch.run(3.0)  # a few ticks with everyone back: a snapshot missed would show
            t1 = time.time()
            await watch.run(GRACE)
            progress.end()
            expected = monitor.between(t0, t1)
            await catch_up(swarm, [k for k, _ in expected], since=t0)
            reports = await swarm.report([k for k, _ in expected], since=t0)
            fed = flood if args.feed_rate else None
            why = "" if expected else await why_nothing(fed, redis, config, args.window, backlog0)
    finally:
        await swarm.close()
        await flood.stop()
        await redis.aclose()
    f = rollout_figures(
        reports,
        t0,
        t_done,
        sockets=args.sockets,
        gateways=len(fleet.gateways),
        balancers=len(fleet.balancers),
        steps=steps,
        refused_before=before["refused"],
        snapshots=len(expected),
    )
    if not expected:
        f["nothing_published"] = why
        progress.note(f"rollout: NOTHING MEASURED: no snapshot was published: {why}")
    result.figures["rollout"] = f
    result.series["timeline"] = watch.timeline
    result.rows += rollout_rows(f, steps)
    result.charts += rollout_charts(f, watch.timeline)
    return result


__all__ = ["Result", "run_load", "run_rollout", "run_storm", "run_submit"]
