"""The submit and queue wrappers: ``lb_submit`` (submit.lua, batch.lua), ``lb_enqueue``,
``lb_ack``, ``lb_status``, ``lb_forget`` (queue.lua), ``lb_lease`` and ``lb_publish`` (publish.lua)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from redis.exceptions import ResponseError

from ..batch import SUBMIT_LAYOUT, decode_batch, encode_batch, outcome_rows
from ..boards import Definition
from ..errors import BadRequest, NotReplicated, from_reply
from ..keys import HOUR_MS
from ..loading import with_library
from ..results import Publication, Refiled, SubmissionStatus, SubmitResult
from ..transport import Command, execute_packed, now_ms
from .calls import Calls, _located, execute, library_errors


def _enqueued(reply: Sequence[Any]) -> list[str | Refiled]:
    """lb_enqueue's reply: a stream id per entry appended, a one-element array per retry."""
    return [Refiled(str(i[0])) if isinstance(i, list) else str(i) for i in reply]


class SubmitCalls(Calls):
    """The writes of submissions and their queue, and the publisher's lease and publish."""

    _buckets: tuple[tuple[int, int], list[str]]  # lb_enqueue's body bucket names, for the hour they were built

    async def submit_batch(
        self,
        entries: Sequence[Mapping[str, str]],
        *,
        now: int | None = None,
        rows: bool = True,
        announce: str | None = None,
        stamp: bool = False,
        replay: bool = False,
        general: Definition | Literal["registry"] | None = "registry",
    ) -> list[SubmitResult]:
        """lb_submit: apply submissions (stream-entry fields) in one atomic call; one result per
        entry (with per-board results unless ``rows=False``); ``announce``: another channel for
        the top-N announcements (encode_batch). ``stamp=True`` runs the call and a TIME in one
        MULTI, so each result carries when Redis applied it (``applied_us``): the durable log
        orders batches applied by several connections with it. ``replay=True``: history being
        restored (encode_batch), which closed periods and the scope cap do not refuse.
        ``general``: the game's stored default the game's slips are laid out as
        (``Definitions.general``, None: the environment's points), read from the registry unless
        given: a caller that records how the slips were applied (the scorer's durable log) reads
        it once and gives it, so that a refresh during the call cannot apply them in one shape
        and have them recorded in the other."""
        if not entries:
            return []
        if general == "registry":
            await self.boards.refresh_due()  # a stored default changes this call's operator, windows, top N
        named = {t for fields in entries if (t := fields.get("tournament"))}
        tournaments = {t: w for t in named if (w := await self.tournaments.get(t)) is not None} if named else None
        defined = {b for fields in entries if (b := fields.get("board"))}
        if any(self.boards.get(b) is None for b in defined):
            await self.boards.refresh()  # defined a moment ago, before this process's tick
        plan = encode_batch(
            self.config,
            entries,
            now_ms() if now is None else now,
            rows=rows,
            tournaments=tournaments,
            announce=announce,
            replay=replay,
            definitions={b: d for b in defined if (d := self.boards.get(b)) is not None},
            default=self.boards.general if general == "registry" else general,
        )
        if plan.count == 0:  # every entry was refused before the call
            return decode_batch(plan, [])
        command = ("FCALL", "lb_submit", len(plan.keys), *plan.keys, *plan.args)
        call = self._stamped if stamp else self._plain
        replies, applied_us = await self._matched(SUBMIT_LAYOUT, lambda: call(command))
        return decode_batch(plan, replies, rows=rows, stamp=applied_us)

    async def _plain(self, command: Command) -> tuple[Any, int]:
        return await execute(self.redis, command), 0

    async def _stamped(self, command: Command) -> tuple[Any, int]:
        # Inside MULTI, TIME answers the time the transaction started executing: batches applied
        # one after another get increasing stamps, whichever connection sent them.
        async def call() -> tuple[Any, int]:
            *_, (reply, (seconds, micros)) = await execute_packed(self.redis, ("MULTI",), command, ("TIME",), ("EXEC",))
            if isinstance(reply, ResponseError):  # errors inside EXEC come back as values
                raise from_reply(str(reply)) or _located(reply)
            return reply, int(seconds) * 1_000_000 + int(micros)

        return await with_library(self.redis, [command], call)

    async def enqueue(
        self,
        entries: Sequence[Mapping[str, str]],
        *,
        backlog_max: int,
        wait_replicas: int = 0,
        wait_timeout_ms: int = 0,
        bodies: Sequence[str] | None = None,
    ) -> list[str | Refiled]:
        """lb_enqueue: append stream entries to the submissions queue, all or none; their ids.
        Raises BacklogFull when that would take the queue past ``backlog_max``.

        ``bodies``: per entry, a fingerprint of the request that filed it ('' for none): an id
        filed before (within LB_IDEMPOTENCY_S) with another one is refused, InvalidSubmission
        ``idempotency_conflict``, and nothing is appended; with the same one the entry is a
        retry, not appended (its slip may carry another stamp, in another hour's seen bucket:
        it would be applied twice), and its place in the list is a Refiled. Without ``bodies``
        every entry is appended and the list holds stream ids only.

        ``wait_replicas`` > 0: then ``WAIT`` on the same connection until that many replicas
        have the entries (at most ``wait_timeout_ms``), so an acknowledged submission survives
        its master's failover; NotReplicated if fewer confirmed (the entries stay queued)."""
        args: list[str | int] = [backlog_max, len(entries)]
        for fields in entries:
            args.append(len(fields))
            for item in fields.items():
                args += item
        keys = [self.keys.submissions, self.keys.queued]
        if bodies is not None:
            # every hour's bucket an id filed within the idempotency window is in, the newest first
            hour, window = now_ms() // HOUR_MS, self.config.idempotency_s * 1000 // HOUR_MS
            if self._buckets[0] != (hour, window):
                self._buckets = ((hour, window), [self.keys.bodies(h) for h in range(hour, hour - window - 2, -1)])
            keys += self._buckets[1]
            args += [(hour + 1) * HOUR_MS // 1000 + self.config.idempotency_s, *bodies]
        command: Command = ("FCALL", "lb_enqueue", len(keys), *keys, *args)
        if not wait_replicas:
            return _enqueued(await execute(self.redis, command))
        # WAIT counts the replicas that have every write this connection made: one pipeline.
        with library_errors():
            ids, acked = await with_library(
                self.redis,
                self.keys.submissions,
                lambda: execute_packed(self.redis, command, ("WAIT", wait_replicas, wait_timeout_ms)),
            )
        if int(acked) < wait_replicas:
            raise NotReplicated(
                f"queued, but {acked} of {wait_replicas} replicas confirmed within {wait_timeout_ms} ms; "
                "retry with the same id"
            )
        return _enqueued(ids)

    async def status(self, submission_id: str, *, now: int | None = None) -> SubmissionStatus:
        """lb_status: what became of a submission, by its id (SubmissionStatus): applied, pending,
        refused (with the scorer's code and message) or unknown. Answers for ids up to
        LB_IDEMPOTENCY_S old, whatever their timestamp: every seen bucket and refusal bucket
        still alive is looked at (about 50 each with the default 48 h), in one read-only call."""
        if not isinstance(submission_id, str) or not submission_id:
            raise BadRequest("a submission id is required")
        now = now_ms() if now is None else now
        c = self.config
        # seen buckets are the hours of the slips' own timestamps: as old as idempotency allows,
        # as new as the clock skew lets a timestamp be ahead
        seen = range((now - c.idempotency_s * 1000) // HOUR_MS, (now + c.clock_skew_ms) // HOUR_MS + 1)
        refused = range((now - c.idempotency_s * 1000) // HOUR_MS - 1, now // HOUR_MS + 1)
        keys = [
            self.keys.queued,
            *map(self.keys.seen, seen),
            *map(self.keys.outcomes, seen),
            *map(self.keys.refused, refused),
        ]
        reply = await self._fcall_ro("lb_status", keys, submission_id, len(seen))
        if reply[0] == "refused":
            return SubmissionStatus(submission_id, "refused", code=str(reply[1]), message=str(reply[2]))
        if reply[0] == "applied" and len(reply) > 1:
            return SubmissionStatus(submission_id, "applied", boards=outcome_rows(reply[1]))
        return SubmissionStatus(submission_id, str(reply[0]))

    async def lease(self, owner: str, ttl_ms: int, *, release: bool = False) -> bool:
        """lb_lease on the publish lease: take or renew it for ``ttl_ms`` (or give it up);
        whether ``owner`` holds it afterwards."""
        action = "release" if release else "hold"
        reply = await execute(self.redis, ("FCALL", "lb_lease", 1, self.keys.publish_lease, owner, ttl_ms, action))
        return bool(reply)

    async def publish(self, owner: str, ttl_s: int, publications: Sequence[Publication]) -> bool:
        """lb_publish: publish each snapshot, store it as its board's latest (for ``ttl_s``) and
        record it as published, only if ``owner`` holds the publish lease; whether it did."""
        keys = [self.keys.publish_lease, self.keys.published]
        args: list[str | int | bytes] = [owner, ttl_s]
        for pub in publications:
            keys.append(self.keys.latest(pub.window, pub.scope))
            args += [
                self.keys.snapshot_channel(pub.window, pub.scope),
                f"{pub.window}:{pub.scope}",
                f"{pub.period}:{pub.version}:{pub.sequence}",
                pub.payload,
            ]
        command: Any = ("FCALL", "lb_publish", len(keys), *keys, *args)
        return bool(await execute(self.redis, command))

    @staticmethod
    def ack_command(
        stream: str, group: str, ids: Sequence[str], *, queued: str | None = None, submission_ids: Sequence[str] = ()
    ) -> Command:
        """lb_ack, as a command to send alone or inside the caller's MULTI: acknowledge ``ids``
        in ``group``, remove ``submission_ids`` from the ``queued`` set, and trim the stream below
        the oldest entry any group has still to apply. Its reply: the count acknowledged."""
        keys = (stream,) if queued is None else (stream, queued)
        return ("FCALL", "lb_ack", len(keys), *keys, group, len(ids), *ids, *submission_ids)

    async def forget(self, stream: str, group: str, *, idle_ms: int, keep: str) -> list[str]:
        """lb_forget: remove the consumer names of ``group`` idle ``idle_ms`` with nothing
        pending, except ``keep`` (the caller); the names removed."""
        removed = await execute(self.redis, ("FCALL", "lb_forget", 1, stream, group, idle_ms, keep))
        return [str(name) for name in removed]
