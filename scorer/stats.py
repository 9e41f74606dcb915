"""The scorer's counters and gauges (pure): the workers bump them, the stats line and the
Prometheus endpoint read them, so both always say the same thing."""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(slots=True)
class Stats:
    # counters (since the process started)
    applied: int = 0  # submissions written by the function library
    duplicates: int = 0  # submissions whose id had already been applied
    dead_letters: int = 0  # submissions refused and moved to the dead-letter stream
    banned: int = 0  # of those, submissions of banned players (code "banned")
    batches: int = 0
    claimed: int = 0  # entries taken over from replicas that stopped acknowledging
    published: int = 0  # snapshots published
    badges_awarded: int = 0
    closed: int = 0  # close events added (window periods and tournaments)
    redis_errors: int = 0  # Redis calls that failed as "Redis down" (each retried with backoff)
    durable_commits: int = 0  # durable-log transactions of applied batches
    durable_commit_s: float = 0.0  # their time together (s), unavailable-store retries included
    durable_unavailable: int = 0  # durable-log writes refused by an unavailable store (each retried)
    # gauges (sampled)
    backlog: int = 0  # entries in the submissions stream: not yet applied and acknowledged
    pending: int = 0  # of those, delivered to a replica and not yet acknowledged
    oldest_age_s: float = 0.0  # age of the oldest entry still waiting
    publisher: int = 0  # publish leases this replica holds (one per game it publishes)

    def copy(self) -> Stats:
        return replace(self)


def stats_line(now: Stats, before: Stats, elapsed_s: float) -> str:
    """One log line for an interval: rates for counters, current values for gauges."""
    rate = (now.applied - before.applied) / elapsed_s if elapsed_s > 0 else 0.0
    return (
        f"applied {rate:.0f}/s (total {now.applied}), "
        f"duplicates {now.duplicates - before.duplicates}, "
        f"dead letters {now.dead_letters - before.dead_letters} (banned {now.banned - before.banned}), "
        f"claimed {now.claimed - before.claimed}, "
        f"lag {now.backlog} entries (pending {now.pending}, oldest {now.oldest_age_s:.1f} s), "
        f"published {now.published - before.published}{' (publisher)' if now.publisher else ''}, "
        f"badges {now.badges_awarded - before.badges_awarded}"
    )
