"""The submissions consumer: read a batch from the queue, apply it with one FCALL, dead-letter
what was refused, acknowledge and delete. See stream.GroupWorker for the delivery guarantees.

Why entries are deleted once acknowledged (XACK + XDEL in one MULTI) rather than trimmed with
``XTRIM MINID``: deleting leaves the stream holding exactly the entries not yet applied, so its
length *is* the backlog the submit API checks, with no extra reads per batch. MINID trimming would
need the oldest pending id of the whole group (XPENDING) and the group's read position before
every trim, and would still count acknowledged entries newer than the oldest pending one.
Entries are deleted roughly in arrival order, so the stream's nodes empty and are freed quickly.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from leaderboard import Leaderboard, SubmitResult, now_ms
from leaderboard.library import Command, _BatchPlan, decode_batch, encode_batch, execute_packed

from .settings import ScorerSettings
from .stats import Stats
from .stream import REDIS_DOWN, Batch, GroupWorker

GROUP = "scorer"
# Not a code of the function library: the entry broke the batch call itself (or the Python
# encoder), so it was applied alone, failed alone, and went to the dead letters.
UNPROCESSABLE = "unprocessable"


def statuses(plan: _BatchPlan, replies: Sequence[Any]) -> list[SubmitResult]:
    """``decode_batch`` without the per-board rows, which the consumer never looks at: building
    a dataclass per board and submission cost as much as the rest of the decoding."""
    results: list[SubmitResult] = []
    it = iter(replies)
    for item in plan.entries:
        if isinstance(item, SubmitResult):
            results.append(item)
            continue
        reply = next(it)
        if reply[0] == "error":
            results.append(SubmitResult(item[0], "error", code=reply[1], message=reply[2]))
        else:
            results.append(SubmitResult(item[0], reply[0]))
    return results


class Consumer(GroupWorker):
    def __init__(
        self,
        redis: aioredis.Redis,
        settings: ScorerSettings,
        stats: Stats | None = None,
        *,
        now: Callable[[], int] = now_ms,
    ) -> None:
        keys = settings.game.keys
        super().__init__(
            redis,
            stream=keys.submissions,
            group=GROUP,
            consumer=settings.name,
            batch=settings.batch,
            block_ms=settings.block_ms,
            claim_idle_ms=settings.claim_idle_ms,
            concurrency=settings.concurrency,
        )
        self.lb = Leaderboard(redis, settings.game)
        self.settings = settings
        self.stats = stats or Stats()
        self.now = now
        self.dead_letters = keys.dead_letters

    async def handle(self, batch: Batch) -> None:
        results = await self.apply([fields for _, fields in batch])
        ids = [sid for sid, _ in batch]
        at = str(self.now())
        dead = 0
        # One MULTI: a dead letter is written exactly when its entry is acknowledged, and an entry
        # leaves the stream exactly when it is acknowledged (the backlog count stays exact).
        commands: list[Command] = [("MULTI",)]
        for (sid, fields), result in zip(batch, results, strict=True):
            if result.status == "error":
                dead += 1
                letter = {
                    **fields,
                    "dead.id": sid,
                    "dead.code": result.code or UNPROCESSABLE,
                    "dead.message": result.message or "",
                    "dead.at": at,
                    "dead.by": self.consumer,
                }
                maxlen = self.settings.dead_letters_maxlen
                commands.append(
                    ("XADD", self.dead_letters, "MAXLEN", "~", maxlen, "*", *(x for kv in letter.items() for x in kv))
                )
        commands += [("XACK", self.stream, self.group, *ids), ("XDEL", self.stream, *ids), ("EXEC",)]
        replies = await execute_packed(self.redis, *commands)
        for reply in replies[-1]:  # errors inside EXEC come back as values, not raised
            if isinstance(reply, Exception):
                raise reply
        s = self.stats
        s.batches += 1
        s.dead_letters += dead
        for result in results:
            if result.status == "ok":
                s.applied += 1
            elif result.status == "duplicate":
                s.duplicates += 1

    async def _claim(self) -> Batch:
        claimed = await super()._claim()
        self.stats.claimed += len(claimed)
        return claimed

    async def apply(self, entries: Sequence[Mapping[str, str]]) -> list[SubmitResult]:
        """One FCALL for the batch; if the call itself fails on bad data, each entry alone, so
        one poisonous entry is dead-lettered instead of blocking its batch forever."""
        try:
            return await self._submit(entries)
        except REDIS_DOWN:
            raise
        except Exception:
            pass  # isolate the culprit below
        results = []
        for entry in entries:
            try:
                [result] = await self._submit([entry])
            except REDIS_DOWN:
                raise
            except Exception as exc:
                message = f"{type(exc).__name__}: {exc}"[:200]
                result = SubmitResult(entry.get("id", ""), "error", code=UNPROCESSABLE, message=message)
            results.append(result)
        return results

    async def _submit(self, entries: Sequence[Mapping[str, str]]) -> list[SubmitResult]:
        """``Leaderboard.submit_batch``, with the command packed by hiredis (see execute_packed)."""
        plan = encode_batch(self.settings.game, entries, self.now())
        if plan.count == 0:  # every entry was refused before the call
            return decode_batch(plan, [])
        command = ("FCALL", "lb_submit", len(plan.keys), *plan.keys, *plan.args)
        try:
            [replies] = await execute_packed(self.redis, command)
        except ResponseError as exc:
            if "function not found" not in str(exc).lower():
                raise
            # Redis restarted without the library (no persistence): load it and go on.
            await self.lb.load()
            [replies] = await execute_packed(self.redis, command)
        return statuses(plan, replies)
