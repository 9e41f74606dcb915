"""docs/reliability.md from a chaos run's figures (pure)."""

from __future__ import annotations

import math
from typing import Any

from .verdicts import Promise

TRIED = {
    "scorer": (
        "Scorer replicas SIGKILLed at random while submissions flow through the queue API, about a tenth "
        "of them replays of an id sent before (same fields, sometimes in the same call). Each kill "
        "starts a replacement at once; a killed replica's unacknowledged entries are claimed by a live "
        "one. Every submission is an `incr` of 4^slot points with distinct slots per player, so each "
        "board member's points, read in base 4, say how often every submission was applied; every "
        "board (global and per region, every window) is compared with that model."
    ),
    "redis": (
        "Spectator sockets on two gateways, a game-server socket and a queue sender at 20 submissions/s, "
        "while redis-server (AOF on, `appendfsync everysec`, password set) is stopped four ways: "
        "SIGTERM (it writes its AOF and exits), SIGKILL (the last second of writes may not be on disk), "
        "a long outage (stopped, started again later) and a freeze (SIGSTOP, then SIGCONT: its "
        "connections stay open and nothing answers). In each outage a spectator asks for the top "
        "and the game-server socket submits, twice a second. Once Redis answers again a new leader is "
        "submitted and every socket must show it. A submission refused before it reached Redis "
        "(connection refused) must not be applied; one whose call timed out may be, once."
    ),
    "gateway": (
        "Sockets spread over the gateways (SO_REUSEPORT), reconnecting with full-jitter backoff like "
        "the product's clients, a feed of submissions moving the top every tick; one gateway is "
        "SIGKILLed and a replacement started a second later."
    ),
    "readers": (
        "One gateway with short heartbeats, healthy sockets measuring snapshot latency; then stalled "
        "readers (tiny receive buffer, never read), slow readers (64 bytes a second, never answer a "
        "ping) and half-open connections (their client process SIGSTOPped: no FIN, no answers) join. "
        "Freed = the gateway's end of the connection is no longer ESTABLISHED (/proc/net/tcp)."
    ),
    "properties": (
        "The hypothesis property tests (protocol parser, submission validator, the function library "
        "against a pure-Python model of the rules) with `LB_PROPERTY_SCALE` times their example count."
    ),
}
TITLES = {
    "scorer": "Scorer SIGKILLed under a stream of submissions",
    "redis": "Redis restarted and unreachable",
    "gateway": "A gateway SIGKILLed with its sockets",
    "readers": "Slow, stalled and half-open readers",
    "properties": "Property tests, longer search",
}


# Faults this run does not make (its fleets have one redis-server), held by the test suite on a
# private Redis Cluster instead: said here so that the page lists every fault the fleet survives.
CLUSTER = [
    "## Redis Cluster: a whole shard lost, or every node",
    "",
    "Not faults of this run: `tests/test_cluster_outages.py` makes them in every `./dev test`, on a "
    "private cluster of 3 masters with 1 replica each (`fleet/cluster.py`, `cluster-node-timeout` 1 s, "
    "no persistence), a scorer serving three games, one on each master.",
    "",
    "| fault | promise | test |",
    "|---|---|---|",
    "| a game's master and replica SIGKILLed, restarted empty | the scorer keeps running through the "
    "returning nodes' `CLUSTERDOWN`; the other games' slips are applied throughout; the function library is "
    "loaded on the returning node by the first call that meets it missing; every slip of the game "
    "acknowledged after the return is applied | `test_a_shard_lost_and_back_empty_costs_the_scorer_nothing` |",
    "| every node SIGKILLed for 4 s, then restarted | the scorer and its metrics sampler wait (no node "
    "reachable is Redis down); every game's slips acknowledged after the return are applied "
    "| `test_every_node_down_then_back_the_scorer_waits_and_resumes` |",
    "| a game's master and replica SIGKILLed, the HTTP API asked | `503 unavailable` within "
    "`LB_API_REDIS_TIMEOUT` (0.5 s set, 1.2 s allowed with the round trip) "
    "| `test_an_api_request_is_bounded_by_its_redis_timeout_with_a_shard_down` |",
]


def render(doc: dict[str, Any], checks: list[Promise]) -> str:
    m = doc["machine"]
    kept = sum(p.ok for p in checks)
    lines = [
        "# Reliability: what the chaos run tried and what it counted",
        "",
        "Written by `python -m loadtest chaos` (do not edit by hand; run it again). Every fault runs",
        "against a private fleet of its own: an embedded redis-server with AOF on and a password,",
        "scorer replicas and gateways, all on loopback; the expectation each count is compared with is",
        "computed from what was sent (loadtest/chaos/model.py), not by the product's code.",
        "",
        f"- command: `{doc['command']}`{' (quick: small scale)' if doc['quick'] else ''}",
        f"- date: {doc['started']}, {doc['total_s']:.0f} s in all (seed {doc['seed']})",
        f"- machine: {m['cpus']} CPUs ({m['cpu']}), Linux {m['kernel']}, Python {m['python']}, "
        f"redis-server {m['redis']}; shared with other work while it ran, so timings are upper bounds",
        f"- result: **{kept} of {len(checks)} promises kept**",
        "",
        "| fault | promise | result | figure |",
        "|---|---|---|---|",
    ]
    lines += [f"| {p.fault} | {p.text} | {'pass' if p.ok else '**FAIL**'} | {p.figure} |" for p in checks]
    for fault, res in doc["results"].items():
        lines += ["", f"## {TITLES[fault]}", "", TRIED[fault], ""]
        if "error" in res:
            lines.append(f"The fault did not run to the end: {res['error']}.")
            continue
        lines += _rows(_figures(fault, res))
        lines.append(f"\n{doc['seconds'].get(fault, 0):.0f} s.")
    lines += ["", *CLUSTER]
    return "\n".join(lines) + "\n"


def _rows(rows: list[tuple[str, Any]]) -> list[str]:
    return ["| figure | value |", "|---|---|", *(f"| {k} | {_fmt(v)} |" for k, v in rows)]


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return "n/a" if math.isnan(v) else f"{v:,.2f}"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, dict):
        return ", ".join(f"{k} {_fmt(x)}" for k, x in v.items()) or "none"
    return str(v)


def _verdict_rows(v: dict[str, Any]) -> list[tuple[str, Any]]:
    return [
        ("submissions sent (distinct ids)", v["sent"]),
        ("sends, replays included", v["sends"]),
        ("replays of an id sent before", v["replays"]),
        ("sends refused before reaching Redis (error raised)", v["refused_sends"]),
        ("sends timed out (outcome unknown to the sender)", v["unknown_sends"]),
        ("confirmed by the queue", v["acked"]),
        ("applied exactly once", v["applied"]),
        ("duplicates refused (replays that changed nothing)", v["duplicates_refused"]),
        ("lost (confirmed, not applied)", v["lost"]),
        ("applied twice", v["twice"]),
        ("applied after a timed-out send (a retry would be deduplicated)", v["unconfirmed_applied"]),
        ("applied although every send was refused", v["refused_applied"]),
        ("board members no submission explains", v["strangers"]),
        ("boards compared", v["boards"]),
    ]


def _figures(fault: str, r: dict[str, Any]) -> list[tuple[str, Any]]:
    if fault == "scorer":
        p = r["plan"]
        return [
            (
                "plan",
                f"{p['submissions']:,} sends at {p['rate']:,.0f}/s, {p['replay_share']:.0%} replays, "
                f"{p['replicas']} replicas, a kill every {p['kill_every_s'][0]}–{p['kill_every_s'][1]} s",
            ),
            ("scorer SIGKILLs", r["kills"]),
            ("sending took s", r["send_s"]),
            ("queue drained after the last send, s", r["drain_s"]),
            ("dead-lettered", r["dead_letters"]),
            *_verdict_rows(r["verdict"]),
        ]
    if fault == "redis":
        rows: list[tuple[str, Any]] = []
        for ph in r["phases"]:
            n = ph["phase"]
            rows += [
                (f"{n}: Redis down for s", ph["outage_s"]),
                (
                    f"{n}: sockets open before / closed by the outage",
                    f"{ph['sockets_before']} / {ph['sockets_closed']}",
                ),
                (f"{n}: replies to requests in the outage", ph["requests"]),
                (f"{n}: replies to socket submissions in the outage", ph["socket_submits"]),
                (f"{n}: submissions refused or timed out (queue API and socket)", ph["refused_or_unknown"]),
                (f"{n}: the stored snapshot had it after s (the scorer's part)", ph["stored_snapshot_s"]),
                (f"{n}: every socket had the current top after s", ph["current_snapshot_s"]),
                (f"{n}: the same, by gateway", ph["current_snapshot_s_by_gateway"]),
                (f"{n}: sockets without it", ph["current_snapshot_missing"]),
            ]
        rows += [
            ("lost to the SIGKILL (confirmed in its last unsynced second)", r["lost_in_kill_window"]),
            ("lost otherwise", r["lost_elsewhere"]),
            ("refusals seen by the queue sender, by error", r["refusals"]),
            *_verdict_rows(r["verdict"]),
        ]
        return rows
    if fault == "gateway":
        t = r["time_to_reconnect_s"]
        return [
            ("sockets / gateways", f"{r['plan']['sockets']:,} / {r['plan']['gateways']}"),
            ("sockets per gateway before the kill", r["spread_before"]),
            ("dropped by the kill", r["victims"]),
            ("back / never back", f"{r['back']:,} / {r['never_back']}"),
            ("all back after s", r["all_back_s"]),
            ("time to reconnect p50 / p99 / max s", f"{t['p50']:.2f} / {t['p99']:.2f} / {t['max']:.2f}"),
            (
                "reconnects per second, peak / average",
                f"{r['reconnects_per_s_peak']:,} / {r['reconnects_per_s_avg']:,.0f}",
            ),
            ("snapshots published from the kill to the end", r["snapshots_published"]),
            ("snapshots missed by survivors", r["survivor_snapshots_missed"]),
            ("snapshots published while a victim was away (summed)", r["victim_snapshots_missed_while_away"]),
            ("sockets without the current snapshot at the end", r["current_snapshot_missing"]),
        ]
    if fault == "readers":
        p, b, d = r["plan"], r["healthy_latency_ms_before"], r["healthy_latency_ms_during"]
        return [
            (
                "healthy / stalled / slow / half-open sockets",
                f"{p['healthy']} / {p['stalled']} / {p['slow']} / {p['half_open']}",
            ),
            ("ping interval + timeout s", f"{p['ping_interval_s']} + {p['ping_timeout_s']}"),
            ("held by the gateway at the start", r["held_at_start"]),
            ("freed after s", r["freed_after_s"]),
            ("healthy latency before p50 / p99 ms", f"{b['p50']:.1f} / {b['p99']:.1f} ({b['count']:,} deliveries)"),
            ("healthy latency during p50 / p99 ms", f"{d['p50']:.1f} / {d['p99']:.1f} ({d['count']:,} deliveries)"),
            ("healthy sockets dropped", r["healthy_dropped"]),
            (
                "gateway RSS start / peak / end MB",
                f"{r['rss_mb']['start']} / {r['rss_mb']['peak']} / {r['rss_mb']['end']}",
            ),
        ]
    if "skipped" in r:
        return [("skipped", r["skipped"])]
    return [
        ("files", ", ".join(r["files"])),
        ("example-count factor", r["scale"]),
        ("passed / failed", f"{r['passed']} / {r['failed']}"),
        *([("output", " ".join(r["tail"]))] if r["tail"] else []),
    ]
