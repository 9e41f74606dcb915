"""The journal worker: records the game's journal (``lb:{g}:journal``: bans, unbans,
corrections, profiles, tournaments, entrants, closes, each appended by the function that made
the change) in the durable score log, then acknowledges the entries and trims what is recorded.

The order is that of submissions (consumer.py): the change is already applied when its entry
exists (the same atomic call), the entry is recorded, then acknowledged. A crash before the
acknowledgement leaves the entry pending: it is claimed and recorded again, and the store keeps
one row per stream id. The acknowledgement (lb_ack) trims the journal below the oldest entry not
recorded yet, so it holds little more than what is still to record; its cap (MAXLEN ~ in the
function library) matters only when no scorer records it.
Runs only with a durable log (LB_DURABLE_URL); in burst mode it too returns once drained.
"""

from __future__ import annotations

import os

from leaderboard import RedisClient

from .durable.recorder import Recorder
from .durable.records import Action
from .settings import ScorerSettings
from .stats import Stats
from .stream import Batch, GroupWorker

GROUP = "durable"


class JournalWorker(GroupWorker):
    def __init__(
        self, redis: RedisClient, settings: ScorerSettings, recorder: Recorder, stats: Stats | None = None
    ) -> None:
        super().__init__(redis, settings, stream=settings.game.keys.journal, group=GROUP, start_id="0", stats=stats)
        self.settings = settings
        self.recorder = recorder
        self.unknown = 0  # entries of a function this code does not know: acknowledged, not recorded

    async def handle(self, batch: Batch) -> None:
        actions = [a for sid, fields in batch if (a := Action.parse(sid, fields)) is not None]
        if len(actions) < len(batch):
            self.unknown += len(batch) - len(actions)
            self.log.warning("journal: %d entries of unknown form skipped", len(batch) - len(actions))
        await self.recorder.record_actions(actions)
        if self.settings.crash_at == "journaled":  # LB_SCORER_CRASH_AT: the crash tests' hook
            self.log.warning("LB_SCORER_CRASH_AT=journaled: exiting abruptly")
            os._exit(70)
        await self.acknowledge(self.lb.ack_command(self.stream, self.group, [sid for sid, _ in batch]))
