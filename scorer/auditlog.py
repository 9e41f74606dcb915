"""The audit log's worker and its restore: the moderators' actions (``lb:{g}:audit``, written
by leaderboard/audit.py) recorded in the durable log's ``audit`` table (durable/audit.py), with
the guarantee of the journal (journal.py): recorded, then acknowledged; a replica that dies in
between leaves the entries pending and another records them again, the table keeping one row per
stream id. Unlike the journal, the stream is not trimmed once recorded: it is the audit log the
admin console shows. A rebuild writes it back from the table, ids and all (``restore``), so a
Redis that lost everything shows the same audit log afterwards.
Runs only with a durable log (LB_DURABLE_URL); in burst mode it too returns once drained.
"""

from __future__ import annotations

from leaderboard import GameConfig, RedisClient
from leaderboard.audit import AuditEntry, append

from .durable.audit import AuditStore, order
from .durable.recorder import Recorder
from .settings import ScorerSettings
from .stream import Batch, GroupWorker

GROUP = "durable"


class AuditWorker(GroupWorker):
    def __init__(self, redis: RedisClient, settings: ScorerSettings, recorder: Recorder) -> None:
        super().__init__(redis, settings, stream=settings.game.keys.audit, group=GROUP, start_id="0")
        self.recorder = recorder
        self.unknown = 0  # entries not of the audit log's form: acknowledged, not recorded

    async def handle(self, batch: Batch) -> None:
        entries = []
        for sid, fields in batch:
            try:
                entries.append(AuditEntry.of(sid, fields))
            except (KeyError, ValueError):
                self.unknown += 1
                self.log.warning("audit: entry %s of unknown form skipped", sid)
        await self.recorder.record_audit(entries)
        await self.acknowledge(("XACK", self.stream, self.group, *(sid for sid, _ in batch)))


async def restore(redis: RedisClient, store: AuditStore, config: GameConfig) -> int:
    """Write the recorded audit log back to ``lb:{g}:audit`` with its ids; entries the stream
    holds already (a rebuild with ``--force`` over a Redis that kept it) are left. The entries
    written."""
    key = config.keys.audit
    last = await redis.xrevrange(key, "+", "-", count=1)
    newest = order(str(last[0][0])) if last else (-1, -1)
    written = 0
    for entry in await store.entries(config.game):
        if order(entry.id) > newest:  # a stream takes only ids above its last
            await append(redis, config.keys, entry)
            written += 1
    return written
