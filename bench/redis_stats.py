"""What a benchmark reads of a redis-server's own accounting: its CPU (``INFO cpu``) and each
command's time and calls (``INFO commandstats``, since the last ``CONFIG RESETSTAT``)."""

from __future__ import annotations

from typing import Any

import redis


def cpu(client: redis.Redis) -> float:
    """Seconds of CPU the Redis process has used (every thread), user + system."""
    info: dict[str, Any] = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def main_thread_cpu(client: redis.Redis) -> float:
    """Seconds of CPU Redis's main thread has used (where commands and functions run), user + system."""
    info: dict[str, Any] = client.info("cpu")
    return float(info["used_cpu_user_main_thread"]) + float(info["used_cpu_sys_main_thread"])


def usec(client: redis.Redis) -> dict[str, tuple[int, int]]:
    """Command -> (usec, calls) since the last CONFIG RESETSTAT."""
    stats: dict[str, Any] = client.info("commandstats")
    return {name.removeprefix("cmdstat_"): (int(s["usec"]), int(s["calls"])) for name, s in stats.items()}
