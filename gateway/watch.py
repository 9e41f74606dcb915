"""One connection's ``watch`` (who may overtake its player: gateway/overtaken.py), kept on its
``Client``; pure state, no I/O."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from leaderboard.boards import LiveBoard
from leaderboard.messages import PassedBy

MINUTE = 60.0
_PENDING = 8  # events waiting per connection and board: enough for a round, bounded against a flood


@dataclass(slots=True)
class Watch:
    """One connection's ``watch``: its friends, whether it is told about leaving a top N, what
    waits for its next rank read (board -> passer -> (reason, the passer's snapshot row or None,
    the top N)), and its events of the running minute."""

    friends: tuple[str, ...]
    top: bool
    pending: dict[LiveBoard, dict[str, tuple[PassedBy, Mapping[str, Any] | None, int]]] = field(default_factory=dict)
    sent: int = 0
    since: float = 0.0

    def queue(
        self, key: LiveBoard, by: str, reason: PassedBy, row: Mapping[str, Any] | None = None, n: int = 0
    ) -> None:
        waiting = self.pending.setdefault(key, {})
        if by in waiting or len(waiting) < _PENDING:
            waiting[by] = (reason, row, n)

    def allow(self, now: float, limit: int) -> bool:
        if now - self.since >= MINUTE:
            self.since, self.sent = now, 0
        if self.sent >= limit:
            return False
        self.sent += 1
        return True
