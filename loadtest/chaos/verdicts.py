"""The promises a chaos run checks, each a pass or a fail from the run's figures (pure)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Promise:
    fault: str
    text: str
    ok: bool
    figure: str
    timing: bool = False  # a time bound (a starved machine can miss it), not a count


def promises(results: dict[str, Any]) -> list[Promise]:
    """Every promise of every fault that ran; a fault that failed to run is one failed promise."""
    out: list[Promise] = []
    for fault, res in results.items():
        if "error" in res:
            out.append(Promise(fault, "the fault ran to the end", False, str(res["error"])))
            continue
        out += _CHECKS[fault](res)
    return out


def _scorer(r: dict[str, Any]) -> list[Promise]:
    v = r["verdict"]
    f = "scorer kills"
    return [
        Promise(f, "no confirmed submission lost", v["lost"] == 0, f"{v['lost']} lost of {v['acked']:,} confirmed"),
        Promise(f, "no submission applied twice", v["twice"] == 0, f"{v['twice']} applied twice"),
        Promise(
            f,
            "every replayed id refused",
            v["duplicates_refused"] == v["replays"] - v["refused_sends"],
            f"{v['duplicates_refused']:,} of {v['replays']:,} replays changed nothing",
        ),
        Promise(
            f,
            "every board member and score as the model says",
            v["strangers"] == 0 and v["lost"] == 0 and v["twice"] == 0,
            f"{v['boards']} boards, {v['strangers']} unexplained members",
        ),
        Promise(f, "nothing dead-lettered", r["dead_letters"] == 0, f"{r['dead_letters']} dead letters"),
    ]


def _redis(r: dict[str, Any]) -> list[Promise]:
    f, v, out = "redis restarts", r["verdict"], []
    for p in r["phases"]:
        name = p["phase"]
        req, sub = p["requests"], p["socket_submits"]
        out += [
            Promise(
                f,
                f"{name}: every socket kept",
                p["sockets_closed"] == 0,
                f"{p['sockets_closed']} of {p['sockets_before']} closed",
            ),
            Promise(
                f,
                f"{name}: requests answered `unavailable`",
                set(req) == {"unavailable"},
                ", ".join(f"{k} {n}" for k, n in sorted(req.items())),
            ),
            Promise(
                f,
                f"{name}: socket submissions refused, none unanswered",
                set(sub) == {"unavailable"},
                ", ".join(f"{k} {n}" for k, n in sorted(sub.items())),
            ),
            Promise(
                f,
                f"{name}: every socket has the current top within 2 s",
                p["current_snapshot_ok"],
                f"{p['current_snapshot_s']:.2f} s, {p['current_snapshot_missing']} sockets without it",
                True,
            ),
        ]
    out += [
        Promise(
            f,
            "no confirmed submission lost (outside a SIGKILL's AOF second)",
            r["lost_elsewhere"] == 0,
            f"{r['lost_elsewhere']} lost; {r['lost_in_kill_window']} lost to the SIGKILL's unsynced AOF second",
        ),
        Promise(f, "no submission applied twice", v["twice"] == 0, f"{v['twice']} applied twice"),
        Promise(
            f,
            "refused submissions not applied",
            v["refused_applied"] == 0 and v["strangers"] == 0,
            f"{v['refused_sends']:,} sends refused, {v['refused_applied']} applied anyway; "
            f"{v['unknown_sends']} timed out, {v['unconfirmed_applied']} of those applied (once)",
        ),
    ]
    return out


def _gateway(r: dict[str, Any]) -> list[Promise]:
    f = "gateway kill"
    t = r["all_back_s"]
    return [
        Promise(
            f,
            "every dropped socket back",
            r["never_back"] == 0 and r["victims"] > 0,
            f"{r['back']:,} of {r['victims']:,} back, all within {t:.2f} s"
            if not math.isnan(t)
            else f"{r['never_back']} never back",
        ),
        Promise(
            f,
            "survivors missed no snapshot",
            r["survivor_snapshots_missed"] == 0,
            f"{r['survivor_snapshots_missed']} missed by {r['survivors']:,} sockets",
        ),
        Promise(
            f,
            "every socket has the current snapshot afterwards",
            r["current_snapshot_missing"] == 0,
            f"{r['current_snapshot_missing']} of {r['sockets_open_at_end']:,} without it",
        ),
    ]


def _readers(r: dict[str, Any]) -> list[Promise]:
    f, plan = "bad readers", r["plan"]
    before, during = r["healthy_latency_ms_before"], r["healthy_latency_ms_during"]
    bad = plan["stalled"] + plan["slow"] + plan["half_open"]
    rss = r["rss_mb"]
    growth_cap = bad * 64 / 1024 + 16  # MB: each bad socket's write buffer bound (64 KiB) + slack
    lat_ok = during["count"] > 0 and during["p99"] <= 2 * before["p99"] + 20
    freed = r["freed_after_s"]
    return [
        Promise(
            f,
            "stalled and half-open sockets freed within ping interval + timeout (+ 2 sweeps + 0.5 s)",
            r["freed_within_bound"],
            ", ".join(f"{k} {v:.2f} s" for k, v in sorted(freed.items())) + f" (bound {plan['bound_s']:.1f} s)",
            True,
        ),
        Promise(f, "slow readers freed", "slow" in freed, f"{freed.get('slow', 'never')} s"),
        Promise(
            f,
            "healthy sockets unaffected: none dropped",
            r["healthy_dropped"] == 0,
            f"{r['healthy_dropped']} of {plan['healthy']} dropped",
        ),
        Promise(
            f,
            "healthy snapshot latency p99 ≤ 2× before + 20 ms",
            lat_ok,
            f"p50/p99 {before['p50']:.1f}/{before['p99']:.1f} ms before, "
            f"{during['p50']:.1f}/{during['p99']:.1f} ms during",
            True,
        ),
        Promise(
            f,
            "gateway memory bounded",
            rss["peak"] - rss["start"] <= growth_cap,
            f"RSS {rss['start']} → peak {rss['peak']} → {rss['end']} MB (cap +{growth_cap:.0f} MB)",
        ),
    ]


def _properties(r: dict[str, Any]) -> list[Promise]:
    f = "property tests"
    if "skipped" in r:
        return [Promise(f, "property tests pass", False, "not run: " + r["skipped"])]
    ok = r.get("exit") == 0 and r["failed"] == 0 and r["passed"] > 0
    note = r.get("error", f"{r['passed']} passed, {r['failed']} failed")
    return [Promise(f, f"property tests pass at {r['scale']:g}× examples", ok, f"{note} in {r.get('seconds', 0)} s")]


_CHECKS = {
    "scorer": _scorer,
    "redis": _redis,
    "gateway": _gateway,
    "readers": _readers,
    "properties": _properties,
}
