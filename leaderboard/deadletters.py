"""The dead letters (``lb:{g}:deadletters``: slips the scorer refused, docs/operations.md "Dead
letters") as operators review them: list, requeue (the slip filed again, same id) or drop. The
scorer's ``deadletters`` commands, the HTTP API's ``/v1/deadletters`` routes and the admin console
all call these, and each requeue or drop adds its entry to the audit log (audit.py)::

    letters = DeadLetters(lb, queue)
    [letter] = await letters.list(count=1)
    await letters.requeue(letter.id, actor="ops:alice", reason="definition fixed")

A requeue files the slip's own fields again through the queue (``Queue.submit``: the same checks
as any submission, so one still refused is refused now, with its code, and its letter stays),
then deletes the letter. Its id is the submission's: a slip applied meanwhile stays a no-op, and a
requeue cut short between the two steps is safe to do again.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from redis.exceptions import ResponseError

from .audit import AuditEntry, append
from .errors import InvalidInput
from .library import Leaderboard
from .moderation import check_audit
from .queue import Queue
from .submission import Submission
from .transport import now_ms

DEAD = "dead."  # the prefix of the scorer's own fields of a letter (its slip's are the others)
MAX_LIST = 200


@dataclass(frozen=True, slots=True)
class Letter:
    id: str  # its stream id in the dead letters
    fields: dict[str, str]  # the slip's own fields (id, player, points or values, ts, ...)
    code: str  # why the scorer refused it
    message: str
    at: int  # when, ms
    by: str  # the replica

    @classmethod
    def of(cls, stream_id: str, raw: dict[str, str]) -> Letter:
        own = {k: v for k, v in raw.items() if not k.startswith(DEAD)}
        at = raw.get(DEAD + "at", "0")
        return cls(
            stream_id,
            own,
            raw.get(DEAD + "code", ""),
            raw.get(DEAD + "message", ""),
            int(at) if at.isdigit() else 0,
            raw.get(DEAD + "by", ""),
        )

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _unknown(letter_id: str) -> InvalidInput:
    return InvalidInput("unknown_dead_letter", f"no dead letter {letter_id!r}")


class DeadLetters:
    """One game's dead letters."""

    def __init__(self, lb: Leaderboard, queue: Queue) -> None:
        self.lb, self.queue = lb, queue
        self.key = lb.keys.dead_letters

    async def count(self) -> int:
        return int(await self.lb.redis.xlen(self.key))

    async def list(self, *, count: int = 50, before: str | None = None) -> list[Letter]:
        """The newest first, up to ``count`` (at most MAX_LIST), older than the id ``before``."""
        top = f"({before}" if before else "+"
        rows = await self.lb.redis.xrevrange(self.key, top, "-", count=max(1, min(count, MAX_LIST)))
        return [Letter.of(str(sid), {str(k): str(v) for k, v in (raw or {}).items()}) for sid, raw in rows or []]

    async def get(self, letter_id: str) -> Letter:
        if not isinstance(letter_id, str) or not letter_id or len(letter_id) > 41:  # <20 digits>-<20 digits>
            raise _unknown(str(letter_id))
        try:
            rows = await self.lb.redis.xrange(self.key, letter_id, letter_id)
        except ResponseError:  # not a stream id
            raise _unknown(letter_id) from None
        if not rows:
            raise _unknown(letter_id)
        sid, raw = rows[0]
        return Letter.of(str(sid), {str(k): str(v) for k, v in (raw or {}).items()})

    async def requeue(self, letter_id: str, *, actor: str, reason: str) -> str:
        """File the letter's slip again and delete the letter; the queue entry's id.
        InvalidSubmission (its code) when the slip is still refused: the letter stays."""
        actor, reason = check_audit(actor, reason)
        letter = await self.get(letter_id)
        filed = await self.queue.submit(Submission.parse(letter.fields))
        await self.lb.redis.xdel(self.key, letter.id)
        await self._log("requeue", letter, actor, reason, {"queued": filed})
        return filed

    async def drop(self, letter_id: str, *, actor: str, reason: str) -> None:
        """Delete the letter, its slip given up."""
        actor, reason = check_audit(actor, reason)
        letter = await self.get(letter_id)
        await self.lb.redis.xdel(self.key, letter.id)
        await self._log("drop", letter, actor, reason, None)

    async def _log(self, action: str, letter: Letter, actor: str, reason: str, after: Any) -> None:
        player = letter.fields.get("player", "")
        entry = AuditEntry("*", now_ms(), actor, action, player, reason, letter.as_dict(), after)
        await append(self.lb.redis, self.lb.keys, entry)
