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
from leaderboard.audit import AuditEntry
from leaderboard.transport import Command, execute_packed

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
    """Write the recorded audit log back to ``lb:{g}:audit`` with its ids, merged with what the
    stream holds (a rebuild with ``--force`` over a Redis that kept some, or that took new
    entries since): a stream takes ids only above its last, so when a recorded entry is missing
    below one it holds, the stream is written again whole, in id order, in one MULTI (its
    ``durable`` group then starts again from the first entry: recorded again, kept once). The
    entries added."""
    key = config.keys.audit
    rows = await redis.xrange(key) or []
    held = {str(sid): {str(k): str(v) for k, v in (fields or {}).items()} for sid, fields in rows}
    recorded = {e.id: e for e in await store.entries(config.game)}
    missing = [recorded[sid] for sid in sorted(recorded.keys() - held.keys(), key=order)]
    if not missing:
        return 0
    newest = max((order(sid) for sid in held), default=(-1, -1))
    commands: list[Command] = []
    if order(missing[0].id) <= newest:  # one goes below what the stream holds: all again, in order
        merged = {**{sid: AuditEntry.of(sid, fields) for sid, fields in held.items()}, **recorded}
        commands.append(("DEL", key))
        missing = [merged[sid] for sid in sorted(merged, key=order)]  # what the MULTI writes
    for entry in missing:
        commands.append(("XADD", key, entry.id, *(x for kv in entry.fields().items() for x in kv)))
    # one MULTI: the stream is never seen, nor left by a crash, half written
    await execute_packed(redis, ("MULTI",), *commands, ("EXEC",))
    return len(recorded.keys() - held.keys())
