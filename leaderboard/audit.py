"""The moderators' audit log: who did what to which player, when, the reason they gave, and the
player's standing before and after. ``AuditedModeration`` is the moderation every caller uses
(the socket's and the HTTP API's server-role requests, the scorer's ``ban``/``unban``/``correct``
commands, the admin console through the HTTP API): the same calls as ``Moderation``, each
followed by its entry in ``lb:{g}:audit``::

    mods = AuditedModeration(lb)
    await mods.ban("p-42", actor="ops:alice", reason="speed hack, ticket 991")
    [entry] = await read(lb.redis, lb.keys, count=1)
    entry.before["entries"]  # the boards p-42 was on, with rank and score

The entry is written after the action succeeded (a refused action changed nothing and is not
logged); a process that dies between the two leaves the action journaled (with its actor and
reason) but without its entry here. The scorer records the stream in the durable log and a
rebuild writes it back, entry ids and all (scorer/auditlog.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from .keys import Keys
from .lookup import entries
from .moderation import BanResult, Moderation, check_audit, check_player
from .results import Correction
from .transport import RedisClient, now_ms

ACTIONS = ("ban", "unban", "correct", "remove")
MAX_READ = 500  # entries one read returns at most


@dataclass(frozen=True, slots=True)
class AuditEntry:
    id: str  # the stream id: its order, and its identity in the durable log
    at: int  # ms since the epoch
    actor: str
    action: str  # one of ACTIONS
    player: str
    reason: str
    before: Any  # JSON values: what the action changed, as it was and as it became
    after: Any

    def fields(self) -> dict[str, str]:
        return {
            "at": str(self.at),
            "actor": self.actor,
            "action": self.action,
            "player": self.player,
            "reason": self.reason,
            "before": orjson.dumps(self.before).decode(),
            "after": orjson.dumps(self.after).decode(),
        }

    @classmethod
    def of(cls, stream_id: str, fields: dict[str, str]) -> AuditEntry:
        return cls(
            stream_id,
            int(fields["at"]),
            fields["actor"],
            fields["action"],
            fields["player"],
            fields["reason"],
            orjson.loads(fields["before"]),
            orjson.loads(fields["after"]),
        )

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


async def append(redis: RedisClient, keys: Keys, entry: AuditEntry) -> str:
    """Add ``entry`` (its ``id``: ``*`` for a new one, or the id it had: a rebuild); its id."""
    return str(await redis.xadd(keys.audit, entry.fields(), id=entry.id))  # type: ignore[arg-type]


async def read(
    redis: RedisClient, keys: Keys, *, count: int = 50, before: str | None = None, player: str | None = None
) -> list[AuditEntry]:
    """The newest entries first, up to ``count``, older than the id ``before``; ``player``: only
    theirs (read from the newest back, at most MAX_READ entries scanned per ``count``)."""
    count = max(1, min(count, MAX_READ))
    top = f"({before}" if before else "+"
    out: list[AuditEntry] = []
    while len(out) < count:
        batch = await redis.xrevrange(keys.audit, top, "-", count=MAX_READ if player else count)
        if not batch:
            break
        for sid, fields in batch:
            entry = AuditEntry.of(str(sid), {str(k): str(v) for k, v in (fields or {}).items()})
            if player is None or entry.player == player:
                out.append(entry)
        top = f"({batch[-1][0]!s}"
        if len(batch) < (MAX_READ if player else count):
            break
    return out[:count]


def _corrections(rows: Sequence[Correction], *, points: int | None, values: Sequence[object] | None) -> Any:
    """A correction's before and after, per board."""
    before: list[dict[str, Any]] = []
    after: list[dict[str, Any]] = []
    for c in rows:
        where = {"board": c.board.scope, "window": c.board.window, "period": c.board.period}
        if c.keys is not None or (points is None and c.previous is None):  # a defined board
            before.append(where | {"values": None if c.keys is None else [str(v) for v in c.keys]})
            after.append(where | {"values": None if values is None else [str(v) for v in values], "rank": c.rank})
        else:
            before.append(where | {"points": c.previous})
            after.append(where | {"points": points, "rank": c.rank})
    return before, after


class AuditedModeration(Moderation):
    """``Moderation`` whose bans, unbans and corrections each add their audit entry."""

    async def _log(self, action: str, player: str, actor: str, reason: str, before: Any, after: Any) -> None:
        entry = AuditEntry("*", now_ms(), actor, action, player, reason, before, after)
        await append(self.lb.redis, self.keys, entry)

    async def ban(self, player: str, *, actor: str, reason: str) -> BanResult:
        check_player(player)
        actor, reason = check_audit(actor, reason)  # refused before anything is read
        before = {"banned": await self.banned(player), "entries": await entries(self, player)}
        result = await super().ban(player, actor=actor, reason=reason)
        after = {"banned": await self.banned(player), "entries": await entries(self, player)}
        await self._log("ban", player, actor, reason, before, after)
        return result

    async def unban(self, player: str, *, actor: str, reason: str = "") -> bool:
        check_player(player)
        actor, reason = check_audit(actor, reason, reason_required=False)
        before = {"banned": await self.banned(player)}
        was = await super().unban(player, actor=actor, reason=reason)
        await self._log("unban", player, actor, reason, before, {"banned": await self.banned(player)})
        return was

    async def correct(self, player: str, points: int | str | None = None, **options: Any) -> list[Correction]:
        """``Moderation.correct`` (its keyword options as they are), then its entry: a removal
        from a defined board (``remove``) or a correction, each board's value before and after."""
        rows = await super().correct(player, points, **options)
        actor, reason = check_audit(options.get("actor"), options.get("reason"))  # as the correction recorded them
        remove = bool(options.get("remove"))
        number = None if points is None else int(points)
        before, after = _corrections(rows, points=number, values=None if remove else options.get("values"))
        await self._log("remove" if remove else "correct", player, actor, reason, before, after)
        return rows
