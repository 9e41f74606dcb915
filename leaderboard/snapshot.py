"""The one snapshot builder (pure): a board's top-N read to the ``snapshot`` message bytes that
the publisher stores and publishes, and a gateway builds when no snapshot is stored yet.

The period comes from the read itself, so the label always names the board that was read, even
when the read straddles a rollover::

    top = await lb.top("weekly", "global", config.top_n, at=now)
    payload = build("global", top, version=7, ts_ms=now)
"""

from __future__ import annotations

from . import wire
from .results import BoardEntries


def build(scope: str, top: BoardEntries, *, version: int, ts_ms: int) -> bytes:
    """The snapshot of ``top`` (read from one board of scope ``scope``) at top-N ``version``."""
    period = top.period
    return wire.snapshot(
        board=scope,
        window=period.window.name,
        period=period.label,
        version=version,
        ts_ms=ts_ms,
        entries=top.entries,
        mode=top.mode,
        columns=top.columns,
    )
