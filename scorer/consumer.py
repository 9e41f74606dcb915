"""The submissions consumer: read a batch from the queue, apply it with one FCALL, dead-letter
what was refused, acknowledge and trim. See stream.GroupWorker for the delivery guarantees.

Why the acknowledgement trims (``lb_ack``: XACK, then ``XTRIM MINID`` below the oldest entry the
group has still to apply) rather than deleting each entry (XDEL): XDEL searches each id's node
and was the dearest command of the whole path per submission; the trim frees whole nodes. The
stream then holds every entry not yet acknowledged, plus acknowledged ones newer than one still
pending (another loop's or replica's batch in flight, a dead replica's entries until claimed), so
its length bounds the backlog from above and equals it once nothing older is pending.
``lb_enqueue`` reads the length, and only when that says full counts the backlog exactly from
the group (XINFO GROUPS: entries not delivered plus pending): the cap is never passed and never
refuses early, with no extra read per batch. Pending entries are never trimmed, so a crash
anywhere leaves them to be claimed, as before.

With a durable log (LB_DURABLE_URL), each batch goes apply → record → acknowledge. Both writes
are idempotent by submission id and the acknowledgement comes last, so a crash between any two
steps leaves the entries pending: they are redelivered, lb_submit answers ``duplicate`` for the
ones it applied, and those are recorded then (the store ignores ids it already holds). Nothing
is acknowledged that is not both applied and recorded; nothing is applied or recorded twice.

The argument is per batch, so it holds with several loops (LB_SCORER_CONCURRENCY) and the
recorder's group commit: each batch's own three steps keep their order, whatever other batches
do meanwhile, and a batch recorded with others in one transaction is acknowledged only once that
transaction committed (if it fails, every batch in it stays pending). Batches are applied in one
order (their ``applied`` stamps), recorded in another and acknowledged in a third; the log's
order is the first (durable/store.py), and an id in two batches in flight (a re-sent copy) keeps
its earlier application whichever is recorded first (the store keeps it; ``recorder.earliest`` within
one transaction).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from leaderboard import RedisClient, SubmitResult, now_ms
from leaderboard.boards import Definition
from leaderboard.keys import HOUR_MS
from leaderboard.queue import SCORER_GROUP
from leaderboard.submission import entry_fields
from leaderboard.transport import Command

from .durable.recorder import Recorder
from .settings import ScorerSettings
from .stats import Stats
from .stream import REDIS_DOWN, Batch, GroupWorker

GROUP = SCORER_GROUP
# Not a code of the function library: the entry broke the batch call itself (or the Python
# encoder), so it was applied alone, failed alone, and went to the dead letters.
UNPROCESSABLE = "unprocessable"
# Nor this: the entry was delivered max_deliveries times without being acknowledged — each reader
# died while holding it (a crash no exception handler sees), so it is set aside, not retried forever.
TOO_MANY_DELIVERIES = "too_many_deliveries"


class Consumer(GroupWorker):
    def __init__(
        self,
        redis: RedisClient,
        settings: ScorerSettings,
        stats: Stats | None = None,
        *,
        now: Callable[[], int] = now_ms,
        recorder: Recorder | None = None,
    ) -> None:
        keys = settings.game.keys
        super().__init__(
            redis, settings, stream=keys.submissions, group=GROUP, concurrency=settings.concurrency, stats=stats
        )
        self.settings = settings
        self.now = now
        self.dead_letters = keys.dead_letters
        self.queued = keys.queued
        self._poisoned: set[str] = set()  # claimed ids over the delivery cap: never applied
        self.recorder = recorder

    def _crash_point(self, step: str) -> None:
        if self.settings.crash_at == step:  # LB_SCORER_CRASH_AT: the crash tests' hook
            self.log.warning("LB_SCORER_CRASH_AT=%s: exiting abruptly", step)
            os._exit(70)

    async def handle(self, batch: Batch) -> None:
        # The game's stored default, read once: the batch's game slips are applied in its shape
        # and recorded in it (a points slip under a default of key values carries its one key,
        # and the durable log keeps it whole), whatever a refresh meanwhile reads.
        await self.lb.boards.refresh_due()
        general = self.lb.boards.general
        if self._poisoned.isdisjoint(sid for sid, _ in batch):
            results = await self.apply([fields for _, fields in batch], general=general)
        else:
            results = await self._apply_unpoisoned(batch, general)
        self._crash_point("applied")
        if self.recorder is not None:
            await self.recorder.record([fields for _, fields in batch], results, keyed=general is not None)
            self._crash_point("recorded")
        ids = [sid for sid, _ in batch]
        at = str(self.now())
        # What a game server asks (lb_status, docs/protocol.md): its slips leave the queued set,
        # and a refused one is found by its submission id, with its code, for as long as ids are
        # remembered (the dead-letter stream keeps it too, but is read by entry, not by id).
        ack = self.lb.ack_command(
            self.stream,
            self.group,
            ids,
            queued=self.queued,
            submission_ids=[result.id for result in results if result.id],
        )
        dead = banned = 0
        letters: list[Command] = []
        refusals: list[str] = []
        for (sid, fields), result in zip(batch, results, strict=True):
            if result.status != "error":
                continue
            code, message = result.code or UNPROCESSABLE, result.message or ""
            if result.id:
                # "<code> <message>": plain text, as the message may hold any bytes of the slip
                refusals += [result.id, f"{code} {message}"]
            dead += 1
            # a banned player's slip is refused like any bad one (kept in the dead letters,
            # with its code) and counted on its own, so a ban's effect is visible
            banned += result.code == "banned"
            letter = {
                **entry_fields(fields),  # by name, whichever form the entry came in
                "dead.id": sid,
                "dead.code": code,
                "dead.message": message,
                "dead.at": at,
                "dead.by": self.consumer,
            }
            maxlen = self.settings.dead_letters_maxlen
            letters.append(
                ("XADD", self.dead_letters, "MAXLEN", "~", maxlen, "*", *(x for kv in letter.items() for x in kv))
            )
        if not letters:
            await self.acknowledge(ack)
        else:
            # One MULTI: a dead letter is written exactly when its entry is acknowledged.
            refused_key = self.settings.game.keys.refused(int(at) // HOUR_MS)
            expire_at = (int(at) // HOUR_MS + 1) * HOUR_MS // 1000 + self.settings.game.idempotency_s
            commands: list[Command] = [("MULTI",), *letters]
            if refusals:
                commands += [("HSET", refused_key, *refusals), ("EXPIREAT", refused_key, expire_at)]
            await self.acknowledge(*commands, ack, ("EXEC",))
        s = self.stats
        s.batches += 1
        s.dead_letters += dead
        s.banned += banned
        for result in results:
            if result.status == "ok":
                s.applied += 1
            elif result.status == "duplicate":
                s.duplicates += 1

    async def _claim(self) -> Batch:
        claimed = await super()._claim()
        self.stats.claimed += len(claimed)
        if claimed:
            # Delivery counts are only known to XPENDING; a claim is rare, so one more read is cheap.
            pending: Any = await self.redis.xpending_range(
                self.stream,
                self.group,
                min=claimed[0][0],
                max=claimed[-1][0],
                count=len(claimed),
                consumername=self.consumer,
            )
            self._poisoned |= {
                str(p["message_id"]) for p in pending if int(p["times_delivered"]) > self.settings.max_deliveries
            }
        return claimed

    async def _apply_unpoisoned(self, batch: Batch, general: Definition | None) -> list[SubmitResult]:
        good = [(sid, fields) for sid, fields in batch if sid not in self._poisoned]
        applied = iter(await self.apply([fields for _, fields in good], general=general))
        message = f"delivered more than {self.settings.max_deliveries} times without an acknowledgement"
        results = []
        for sid, fields in batch:
            if sid in self._poisoned:
                self._poisoned.discard(sid)
                sub_id = entry_fields(fields).get("id", "")
                results.append(SubmitResult(sub_id, "error", code=TOO_MANY_DELIVERIES, message=message))
            else:
                results.append(next(applied))
        return results

    async def apply(
        self, entries: Sequence[Mapping[str, str]], *, general: Definition | Literal["registry"] | None = "registry"
    ) -> list[SubmitResult]:
        """One FCALL for the batch; if the call itself fails on bad data, each entry alone, so
        one poisonous entry is dead-lettered instead of blocking its batch forever. ``general``:
        the game's stored default the game's slips are applied in (``submit_batch``: read from
        the registry unless given)."""
        try:
            return await self._submit(entries, general)
        except REDIS_DOWN:
            raise
        except Exception:
            pass  # isolate the culprit below
        results = []
        for entry in entries:
            try:
                [result] = await self._submit([entry], general)
            except REDIS_DOWN:
                raise
            except Exception as exc:
                message = f"{type(exc).__name__}: {exc}"[:200]
                result = SubmitResult(entry_fields(entry).get("id", ""), "error", code=UNPROCESSABLE, message=message)
            results.append(result)
        return results

    async def _submit(
        self, entries: Sequence[Mapping[str, str]], general: Definition | Literal["registry"] | None
    ) -> list[SubmitResult]:
        # With a durable log, each batch carries when Redis applied it: the log's order (durable/store.py)
        stamp = self.recorder is not None
        return await self.lb.submit_batch(entries, now=self.now(), rows=False, stamp=stamp, general=general)
