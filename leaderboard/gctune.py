"""Garbage collection for long-lived processes that make many short-lived objects.

Everything alive once a process has started (modules, settings, connections, the scripts'
caches) lives as long as the process: frozen, it is never scanned again. And Python's default
threshold (700 new container objects) runs a young collection several times per batch or tick,
each one a pause of the event loop; a higher threshold runs fewer, at the same total work.
"""

from __future__ import annotations

import gc


def fewer_collections(threshold: int) -> None:
    """Freeze what exists now and collect the young generation every ``threshold`` objects
    (0: leave Python's defaults)."""
    if threshold > 0:
        gc.freeze()
        _, older, oldest = gc.get_threshold()
        gc.set_threshold(threshold, older, oldest)
