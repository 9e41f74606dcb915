"""The scorer's side of the durable log: turn an applied batch into records and write them,
waiting out a store that is unavailable (the batch stays unacknowledged meanwhile), and compact
the log now and then.

Group commit: the consumer's loops (LB_SCORER_CONCURRENCY) record their batches concurrently;
the batches that arrive while a write is under way wait for it to end and are then written
together, in one transaction (one commit, one fsync), by whichever of them gets there first.
Each caller still returns only once its own records are committed, and a failed write fails
every batch it carried (none of them is acknowledged: they are redelivered and recorded again).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import TypeVar

import orjson

from leaderboard import GameConfig, InvalidSubmission, Submission, SubmitResult, now_ms
from leaderboard.audit import AuditEntry
from leaderboard.backoff import redis_backoff
from leaderboard.submission import SLIP, SLIP_PARTS, entry_fields, slip_parts

from ..stats import Stats
from .audit import AuditStore
from .fold import ActionFolder
from .lifetimes import SlipLifetimes
from .records import Action, Compaction, Record, Slip
from .store import Store, StoreError

log = logging.getLogger("scorer.durable")
T = TypeVar("T")


def kept_whole(entry: Mapping[str, str], keyed: bool) -> bool:
    """Whether an applied entry is a ``Slip`` (kept whole, replayed) rather than a ``Record``
    (packed points, folded): a slip of key values, to a defined board (``board``) or to the
    game's boards (``values``), and with ``keyed`` (the batch applied under a stored default of
    key values: ``Definitions.general``) every slip of the game's boards, its points being the
    default's one key (a points slip filed before the default was stored, or straight to the
    queue: lb_submit took its points as that key)."""
    return keyed or bool(entry.get("board") or entry.get("values"))


def records_of(
    entries: Sequence[Mapping[str, str]], results: Sequence[SubmitResult], *, keyed: bool = False
) -> list[Record]:
    """The records of an applied batch (its stream entries as the queue holds them, a slip or
    fields by name): every ``ok``, and every ``duplicate`` (its first outcome may have been
    lost in a crash before it was recorded; if it was not, the store ignores it). A slip kept
    whole (``kept_whole``; ``keyed``: the batch was applied under a stored default of key
    values) is a ``Slip`` (``slips_of``)."""
    out: list[Record] = []
    if keyed:
        return out
    ids: set[str] = set()
    for index, (entry, result) in enumerate(zip(entries, results, strict=True)):
        status = result.status
        if status != "ok" and status != "duplicate":
            continue
        slip = entry.get(SLIP)
        if slip is not None and len(entry) == 1:
            # nearly every entry: a slip alone, its row made from its parts with no dict between
            sid, player, points, ts, name = slip_parts(slip)
            op = region = mode = tournament = ""
        else:
            fields = entry_fields(entry)
            if kept_whole(fields, False):  # a Slip: slips_of
                continue
            get = fields.get
            sid, player, points, ts, name = (get(part, "") for part in SLIP_PARTS)
            op, region, mode, tournament = get("op", ""), get("region", ""), get("mode", ""), get("tournament", "")
        if status == "duplicate":
            # answered before the function validates anything: its fields may be junk (an ``ok``
            # one's were all validated before it was applied: only the numbers to convert)
            try:
                Submission.parse(entry_fields(entry))
            except InvalidSubmission:
                continue
        if sid in ids:  # the same id twice in a batch: the second is a duplicate
            continue
        ids.add(sid)
        row = (sid, player, int(points), int(ts), op, name, region, mode, status == "duplicate")
        out.append(_new(Record, (*row, result.applied_us, index, tournament)))
    return out


def slips_of(
    entries: Sequence[Mapping[str, str]], results: Sequence[SubmitResult], *, keyed: bool = False
) -> list[Slip]:
    """The slips kept whole (``kept_whole``) of an applied batch, ``ok`` or ``duplicate`` as in
    ``records_of``, one per id (the first in the batch: a later one with the same id was a
    duplicate of it), each kept with its fields by name."""
    out: dict[str, Slip] = {}
    for index, (entry, result) in enumerate(zip(entries, results, strict=True)):
        if result.status not in ("ok", "duplicate") or not kept_whole(entry, keyed):
            continue
        fields = entry_fields(entry)
        sid = fields.get("id", "")
        if sid and sid not in out:
            out[sid] = Slip(sid, result.applied_us, index, orjson.dumps(fields).decode())
    return list(out.values())


_new = tuple.__new__  # a Record from its row in one C call (records.Record)


def earliest(batches: Iterable[Sequence[Record]]) -> list[Record]:
    """The records of several batches, one per id: its earliest application, which is the one
    the store keeps (durable/store.py) when the batches are written one after another."""
    first: dict[str, Record] = {}
    for records in batches:
        for r in records:
            held = first.get(r.id)
            if held is None or (r.applied_us, r.index) < (held.applied_us, held.index):
                first[r.id] = r
    return list(first.values())


def _drop_outcome(done: asyncio.Future[None]) -> None:
    """Retrieve a carried batch's outcome for a caller that is gone (asyncio would otherwise log
    a failed commit as "Future exception was never retrieved")."""
    if not done.cancelled():
        done.exception()


class Recorder:
    def __init__(
        self,
        store: Store,
        config: GameConfig,
        *,
        retention_days: float,
        compact_every_s: float,
        stats: Stats | None = None,
    ) -> None:
        self.store = store
        self.stats = stats or Stats()  # the commits' count and time, and the store's refusals
        self.config = config
        self.retention_ms = int(retention_days * 86_400_000)
        self.compact_every_s = compact_every_s
        self.recorded = 0  # new rows written by this process
        self.commits = 0  # transactions that wrote them
        self._opened = False
        # the batches for the next commit, each by the future its caller waits on
        self._waiting: dict[asyncio.Future[None], list[Record]] = {}
        # as many commits at a time as the store takes (store.Store.writers): the batches behind
        # them group up
        self._committing = asyncio.Semaphore(store.writers)
        self.audit = AuditStore(store)

    async def open(self) -> None:
        await self._retry(self.store.open, "open")
        self._opened = True

    async def close(self) -> None:
        await self.store.close()

    async def record(
        self, entries: Sequence[Mapping[str, str]], results: Sequence[SubmitResult], *, keyed: bool = False
    ) -> None:
        """Returns once the batch's records are durable; retries while the store is unavailable.
        ``keyed``: the batch was applied under a stored default of key values (``kept_whole``)."""
        records, slips = records_of(entries, results, keyed=keyed), slips_of(entries, results, keyed=keyed)
        if not records and not slips:
            return
        if not self._opened:
            await self.open()
        if slips:
            await self._retry(lambda: self.store.record_slips(self.config.game, slips), "record slips")
        if not records:
            return
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting[done] = records
        try:
            async with self._committing:
                if done in self._waiting:  # else a commit that started while we queued carries ours
                    group, self._waiting = self._waiting, {}
                    await self._commit(group)
            # with more than one writer, that commit may still run
            await asyncio.shield(done)
        except asyncio.CancelledError:
            # never written (nobody is to wait for it), or carried by a commit whose outcome,
            # now or when it ends, is nobody's to raise: the cancellation is what we raise
            if self._waiting.pop(done, None) is None:
                done.add_done_callback(_drop_outcome)
            raise

    async def _commit(self, group: dict[asyncio.Future[None], list[Record]]) -> None:
        records = next(iter(group.values())) if len(group) == 1 else earliest(group.values())
        started = time.perf_counter()
        try:
            # (not ``self.recorded += await ...``: that reads the count before the await, and two
            # commits at once would each add to the one they read)
            written = await self._retry(lambda: self.store.record(self.config.game, records), "record")
        except BaseException as exc:
            # Every batch of the group fails with it (each caller raises it): none is acknowledged.
            # A cancelled commit (shutdown) may or may not have committed: to the others it failed.
            failure = exc if isinstance(exc, Exception) else StoreError(f"recording interrupted ({exc!r})")
            for done in group:
                done.set_exception(failure)
            if failure is not exc:
                raise
            return
        self.recorded += written
        self.commits += 1
        self.stats.durable_commits += 1
        self.stats.durable_commit_s += time.perf_counter() - started
        for done in group:
            done.set_result(None)

    async def record_actions(self, actions: Sequence[Action]) -> None:
        """Journaled actions (durable/records.py): returns once durable; retries while the store
        is unavailable (the journal entries stay unacknowledged meanwhile)."""
        if not actions:
            return
        if not self._opened:
            await self.open()
        await self._retry(lambda: self.store.record_actions(self.config.game, actions), "record actions")

    async def record_audit(self, entries: Sequence[AuditEntry]) -> None:
        """The audit log's entries (durable/audit.py), as ``record_actions``."""
        if entries:
            await self._retry(lambda: self.audit.record(self.config.game, entries), "record audit")

    async def _retry(self, op: Callable[[], Awaitable[T]], what: str) -> T:
        backoff = redis_backoff()
        while True:
            try:
                return await op()
            except self.store.unavailable as exc:
                self.stats.durable_unavailable += 1
                if backoff.attempt == 0:
                    log.warning("durable store unavailable (%s: %s); retrying, batch not acknowledged", what, exc)
                await asyncio.sleep(backoff.next_delay())

    async def compact(self, *, now: int | None = None) -> Compaction:
        """Fold the raw rows older than the retention into board rows, and drop the board rows
        and the defined boards' slips whose periods expired (``now``: the clock, ms)."""
        now = now_ms() if now is None else now
        game = self.config.game
        result = await self.store.compact(
            game, before_ts=now - self.retention_ms, now_s=now // 1000, folder=ActionFolder(self.config)
        )
        lifetimes = SlipLifetimes(await self.store.actions(game))
        result = replace(
            result, slips=await self.store.prune_slips(game, now_s=now // 1000, lifetime=lifetimes.expire_at)
        )
        if result.folded or result.expired or result.slips:
            log.info(
                "durable log compacted: %d submissions folded into %d board rows, %d expired rows and %d expired "
                "slips dropped",
                result.folded,
                result.board_rows,
                result.expired,
                result.slips,
            )
        return result

    async def run(self, stop: asyncio.Event) -> None:
        """Compact every ``compact_every_s`` until ``stop`` (several replicas may: it is serialised)."""
        from ..stream import sleep_unless

        while not await sleep_unless(stop, self.compact_every_s):
            try:
                await self.compact()
            except self.store.unavailable as exc:
                log.warning("durable log compaction failed (%s); next try in %.0f s", exc, self.compact_every_s)
