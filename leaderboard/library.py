"""Typed Python wrappers of the function library (lua/, assembled by assembly.py): one method per
registered function, replies as the dataclasses of results.py, ``ERR <code>`` replies as the
exception tree of errors.py (``errors.from_reply``). They take a ``redis.asyncio.Redis`` made
by ``connect()`` (str replies; undecodable bytes kept so one never poisons a whole batch)::

    lb = Leaderboard(await connect(url), GameConfig(game="arena"))
    await lb.load()
    [result] = await lb.submit_batch([Submission("m-1", "mia", 120, now_ms).fields()])
    top = await lb.top("weekly")          # top.period, top.entries

===============  ==================================  ==============================
function         wrapper                             used by
===============  ==================================  ==============================
lb_submit        ``submit_batch``                    scorer consumer
lb_enqueue       ``enqueue``                         queue.Queue (submit API)
lb_ack           ``ack_command``                     scorer consumer, journal worker
lb_status        ``status``                          gateways (status request), ``python -m scorer status``
lb_lease         ``lease``                           scorer publisher
lb_publish       ``publish``                         scorer publisher
lb_forget        ``forget``                          scorer stream workers
lb_top           ``top``                             publisher, gateways
lb_around        ``around``                          gateways
lb_ranks         ``ranks``, ``rank``                 gateways (requests, own rank)
lb_close         ``close``                           scorer publisher (closed periods)
lb_close_board   ``close_board``                     scorer publisher (a defined board's)
lb_tournament    ``create_tournament``               operators (API, ``python -m scorer``)
lb_join          ``join``                            operators, game servers
lb_ban           ``ban``                             moderation.Moderation
lb_unban         ``unban``                           moderation.Moderation
lb_correct       ``correct``                         moderation.Moderation
lb_correct_defined ``correct_defined``               moderation.Moderation, the rebuild (replay)
lb_profile       ``profile``                         moderation.Moderation
lb_rank_rebuild  ``rebuild_rank_index``              operators, once per board after an upgrade
lb_board_put     ``create_board``, ``update_board``  operators (``python -m scorer board``, server role)
lb_board_delete  ``delete_board``                    operators
lb_board_purge   ``purge_board``                     the scorer (leaderboard/purge.py)
===============  ==================================  ==============================

Reads rank in the window's rank mode (``GameConfig.rank_mode_for``, leaderboard/ranking.py).

Reads take ``period``: None or ``"current"``, ``"previous"``, or a label such as ``"2026-W48"``
(see ``Window.resolve``). A tournament is read as its window ``t-<id>``::

    last_week = await lb.rank("mia", "weekly", period="previous")
    await lb.create_tournament("spring", start_ms, end_ms)
    await lb.join("spring", ["mia", "leo"])
    top = await lb.top("t-spring")

The boards a moderation or profile call touches are found by moderation.py (``Moderation`` is
the high-level call operators use); these wrappers take them as given.

Around the wrappers, each in its module: the transport (``connect``, ``execute_packed``) in
transport.py, the library's code and its loading again on a node that lost it (every wrapper's
call goes through ``with_library``) in loading.py, the batch layout of ``lb_submit`` in
batch.py, the reads by plain commands
(``size``, ``stats``, ``feed``, ``finals``) in reads.py, and the tournament registry
(``lb.tournaments``: ``get``, ``all``, ``entered``) in tournaments.py, and the board
definitions (``lb.boards``: ``refresh``, ``get``, ``all``) in definitions.py.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from redis.exceptions import ResponseError

from . import boards
from .assembly import packaged
from .batch import DEFINITION_FIELDS, SUBMIT_LAYOUT, decode_batch, definition_record, encode_batch, outcome_rows
from .config import GameConfig
from .defined import Board
from .definitions import Definitions
from .errors import BadPeriod, BadRequest, InvalidBoard, LibraryMismatch, NotReplicated, TournamentError, from_reply
from .keys import DEFINED, HOUR_MS, defined_of, parse_scope
from .loading import library_code as library_code  # re-exported: where its callers import it from
from .loading import with_library
from .profiles import check_player_id
from .profiles import stored as stored_profile
from .ranking import COMPETITION, ORDINAL, assign_ranks, round_rank, top_percent
from .reads import PlainReads
from .results import (
    BoardEntries,
    BoardRef,
    Correction,
    Entry,
    Publication,
    Ranks,
    Refiled,
    Standing,
    SubmissionStatus,
    SubmitResult,
)
from .tournaments import Tournaments
from .transport import Command, RedisClient, execute_packed, now_ms
from .windows import (
    TOURNAMENT_RETENTION_S,
    Period,
    Window,
    tournament_of,
    tournament_window,
    window,
)

# Entries per lb_join call: the function unpacks them onto Lua's C stack, which is bounded.
_JOIN_CHUNK = 1000
# lb_correct_defined's arguments after ``how``: fixed ones, then a definition record, then per board
_CORRECT_DEFINED_ARGS, _CORRECT_DEFINED_FIELDS = 8, 7


def _located(exc: ResponseError) -> ResponseError:
    """A Redis error from inside the library with its position named as ``file.lua:line`` (the
    line map of assembly.py); the error itself when it names none."""
    text = str(exc)
    named = packaged().translate(text)
    return exc if named == text else type(exc)(named)


@contextmanager
def _library_errors() -> Iterator[None]:
    """A library error reply ('ERR <code> ...') raised as the exception tree's; others as they
    are, a position in the library named as its file's line."""
    try:
        yield
    except ResponseError as exc:
        mapped = from_reply(str(exc))
        if mapped is not None:
            raise mapped from None
        located = _located(exc)
        if located is exc:
            raise
        raise located from exc


async def _execute(redis: RedisClient, command: Command) -> Any:
    """One packed call of a library function (loaded first where missing: ``loading.with_library``),
    its library error reply raised as the exception tree's."""
    with _library_errors():
        [reply] = await with_library(redis, [command], lambda: execute_packed(redis, command))
    return reply


def _enqueued(reply: Sequence[Any]) -> list[str | Refiled]:
    """lb_enqueue's reply: a stream id per entry appended, a one-element array per retry."""
    return [Refiled(str(i[0])) if isinstance(i, list) else str(i) for i in reply]


class Leaderboard(PlainReads):
    """One game's boards, reached through the function library (and the plain reads of
    reads.py); ``tournaments`` is the game's tournament registry (tournaments.py)."""

    def __init__(self, redis: RedisClient, config: GameConfig) -> None:
        self.redis = redis
        self.keys = config.keys
        self.tournaments = Tournaments(redis, self.keys)
        self.boards = Definitions(redis, config)
        # lb_enqueue's body buckets by (hour, idempotency_s): ~50 key names, the same all hour
        self._buckets: tuple[tuple[int, int], list[str]] = ((-1, -1), [])

    @property
    def config(self) -> GameConfig:
        """The game's configuration as of the boards' last refresh: the environment's, or with
        the operator's stored ``default`` definition applied (definitions.py)."""
        return self.boards.config

    async def load(self) -> None:
        """Load (or replace) the function library; idempotent."""
        with _library_errors():  # a compile error names its file's line
            await self.redis.function_load(library_code(), replace=True)

    # --- writes

    async def submit_batch(
        self,
        entries: Sequence[Mapping[str, str]],
        *,
        now: int | None = None,
        rows: bool = True,
        announce: str | None = None,
        stamp: bool = False,
        replay: bool = False,
    ) -> list[SubmitResult]:
        """lb_submit: apply submissions (stream-entry fields) in one atomic call; one result per
        entry (with per-board results unless ``rows=False``); ``announce``: another channel for
        the top-N announcements (encode_batch). ``stamp=True`` runs the call and a TIME in one
        MULTI, so each result carries when Redis applied it (``applied_us``): the durable log
        orders batches applied by several connections with it. ``replay=True``: history being
        restored (encode_batch), which closed periods and the scope cap do not refuse."""
        if not entries:
            return []
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
        )
        if plan.count == 0:  # every entry was refused before the call
            return decode_batch(plan, [])
        command = ("FCALL", "lb_submit", len(plan.keys), *plan.keys, *plan.args)
        call = self._stamped if stamp else self._plain
        try:
            replies, applied_us = await call(command)
        except LibraryMismatch as exc:
            if exc.layout >= SUBMIT_LAYOUT:
                raise  # a newer release's library: this process waits to be replaced
            # an older release's, loaded by one of its processes during an upgrade: load this one
            await self.load()
            replies, applied_us = await call(command)
        return decode_batch(plan, replies, rows=rows, stamp=applied_us)

    async def _plain(self, command: Command) -> tuple[Any, int]:
        return await _execute(self.redis, command), 0

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
            return _enqueued(await _execute(self.redis, command))
        # WAIT counts the replicas that have every write this connection made: one pipeline.
        with _library_errors():
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
        reply = await _execute(self.redis, ("FCALL", "lb_lease", 1, self.keys.publish_lease, owner, ttl_ms, action))
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
                f"{pub.period}:{pub.version}",
                pub.payload,
            ]
        command: Any = ("FCALL", "lb_publish", len(keys), *keys, *args)
        return bool(await _execute(self.redis, command))

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
        removed = await _execute(self.redis, ("FCALL", "lb_forget", 1, stream, group, idle_ms, keep))
        return [str(name) for name in removed]

    async def close(self, period: Period, scopes: Sequence[str], *, top_n: int, keep: int, maxlen: int) -> str | None:
        """lb_close: add the period's close event (its final top ``top_n`` of each scope) once,
        and keep it in the window's finals (the newest ``keep``); the event's stream id, or None
        if the period was closed before. Either way the period's boards leave the versions hash."""
        w = period.window
        keys = [
            self.keys.closed_marker(w.name, period.label),
            self.keys.closed,
            self.keys.finals(w.name),
            self.keys.versions,
            self.keys.journal,
            *(self.keys.board(w.name, period.label, scope) for scope in scopes),
        ]
        args: list[str | int] = [
            w.name,
            period.label,
            period.start_ms,
            period.end_ms,
            w.shift,
            top_n,
            period.expire_at_s,
            keep,
            maxlen,
            now_ms(),
            self.config.rank_mode_for(w.name),
            *scopes,
        ]
        reply = await _execute(self.redis, ("FCALL", "lb_close", len(keys), *keys, *args))
        return None if reply is None else str(reply)

    async def close_board(self, board: Board, *, top_n: int, keep: int, maxlen: int) -> str | None:
        """lb_close_board: ``close`` for one period of a defined board (``defined_board``),
        whose periods are its own: the event's stream id, or None if it was closed before."""
        name, keys, args = board.close_call(top_n=top_n, keep=keep, maxlen=maxlen, now=now_ms())
        reply = await _execute(self.redis, ("FCALL", name, len(keys), *keys, *args))
        return None if reply is None else str(reply)

    async def create_tournament(self, tournament: str, start_ms: int, end_ms: int) -> Window:
        """lb_tournament: create a tournament running [start_ms, end_ms); its window (``t-<id>``).
        Creating it again with the same bounds is a no-op; TournamentError(tournament_exists)
        for other bounds, (tournament_ended) when it would end in the past."""
        try:
            spec = tournament_window(tournament, start_ms, end_ms)
        except ValueError as exc:
            raise BadRequest(str(exc)) from None
        keys = (self.keys.tournaments, self.keys.journal)
        await _execute(self.redis, ("FCALL", "lb_tournament", len(keys), *keys, tournament, start_ms, end_ms, now_ms()))
        self.tournaments.remember(tournament, spec)
        return spec

    async def join(self, tournament: str, players: Sequence[str]) -> int:
        """lb_join: enter players in a tournament (before it starts or while it runs); how many
        were newly entered. TournamentError(unknown_tournament / tournament_ended). Each call
        of the function enters up to 1,000 players atomically; a longer list takes several."""
        spec = await self.tournaments.get(tournament)
        if spec is None:
            raise TournamentError("unknown_tournament", f"no tournament {tournament!r}")
        if not players:
            raise BadRequest("players must not be empty")
        for player in players:  # all checked before the first chunk: a refused call enters nobody
            check_player_id(player)
        expire_at = spec.period(0).end_ms // 1000 + TOURNAMENT_RETENTION_S
        keys = (self.keys.tournaments, self.keys.entrants(tournament), self.keys.journal)
        added = 0
        for i in range(0, len(players), _JOIN_CHUNK):
            chunk = players[i : i + _JOIN_CHUNK]
            command: Command = ("FCALL", "lb_join", len(keys), *keys, tournament, now_ms(), expire_at, *chunk)
            added += int(await _execute(self.redis, command))
        return added

    # --- board definitions (leaderboard/boards.py; the registry in definitions.py)

    async def create_board(self, definition: boards.Definition) -> boards.Definition:
        """lb_board_put: store a new board definition (version 1). Creating the same one again is
        a no-op; InvalidBoard(board_exists) for another definition of that id. The id of a deleted
        board is created again only with keys that read its entries as they were written
        (boards.check_recreate: board_reorder), compare-and-set on that deleted definition
        (stale_board when it changed meanwhile)."""
        created = self.boards.admit(boards.parse({**definition.as_dict(), "version": 1}))
        deleted = await self.boards.deleted_json(created.id)
        if deleted is not None:
            boards.check_recreate(boards.parse(deleted), created)
        await self._put_board(created, "", deleted or "")
        return created

    async def update_board(self, definition: boards.Definition) -> boards.Definition:
        """lb_board_put: replace a board's definition with ``definition`` as its next version.
        InvalidBoard(unknown_board), (board_reorder) for a change that would reorder the live
        board (boards.check_update), (stale_board) when another update landed meanwhile. The
        game's default board may be updated while only its configuration describes it."""
        stored, deleted = await self.boards.stored_json(definition.id), None
        if stored is None:
            if definition.id != boards.DEFAULT_ID:
                raise InvalidBoard("unknown_board", f"no board {definition.id!r}")
            old = self.boards.defaults[boards.DEFAULT_ID]
            deleted = await self.boards.deleted_json(definition.id)  # stored as a create: its base too
        else:
            old = boards.parse(stored)
        updated = boards.check_update(old, self.boards.admit(definition))
        await self._put_board(updated, stored or "", deleted or "")
        return updated

    async def delete_board(self, board: str) -> None:
        """lb_board_delete: delete a board's definition. InvalidBoard(unknown_board)."""
        boards.check_id(board)
        keys = self._definition_keys
        await _execute(self.redis, ("FCALL", "lb_board_delete", len(keys), *keys, board))

    async def purge_board(self, board: str, deleted: str, keys: Sequence[str]) -> bool:
        """lb_board_purge: forget the deleted definition ``deleted`` of ``board`` when none of
        ``keys`` (its periods' keys retention may keep: leaderboard/purge.py) exists; whether
        it was forgotten."""
        names = (self.keys.deleted_boards, self.keys.board_changes, self.keys.journal, *keys)
        return bool(await _execute(self.redis, ("FCALL", "lb_board_purge", len(names), *names, board, deleted)))

    @property
    def _definition_keys(self) -> tuple[str, str, str, str, str]:
        k = self.keys
        return (k.boards, k.boards_version, k.journal, k.deleted_boards, k.board_changes)

    async def _put_board(self, definition: boards.Definition, expected: str, deleted: str) -> None:
        keys = self._definition_keys
        args = (definition.id, definition.to_json(), expected, deleted, self.config.max_boards)
        await _execute(self.redis, ("FCALL", "lb_board_put", len(keys), *keys, *args))

    # --- moderation and profiles (the boards named by the caller: see moderation.py)

    async def ban(
        self, player: str, boards: Sequence[BoardRef], *, actor: str, reason: str, now: int | None = None
    ) -> tuple[int, int]:
        """lb_ban: tombstone ``player`` and remove them from ``boards``; (boards they were on,
        of those the boards whose top N changed)."""
        keys = [self.keys.banned, self.keys.versions, self.keys.activity, self.keys.journal]
        args: list[str | int] = [
            player,
            actor,
            reason,
            now_ms() if now is None else now,
            self.config.activity_maxlen,
            self.config.top_n,
        ]
        shifts = {name: await self._shift_of(name) for name in {b.window for b in boards}}
        for b in boards:  # the companions (histogram, points set) follow the board's removal
            keys += self._board_keys(b.window, b.period, b.scope)
            args += [f"{b.window}:{b.period}:{b.scope}", shifts[b.window], self.config.rank_mode_for(b.window)]
        removed, touched = await _execute(self.redis, ("FCALL", "lb_ban", len(keys), *keys, *args))
        return int(removed), int(touched)

    async def ban_defined(
        self, player: str, boards_of: Sequence[tuple[BoardRef, boards.Definition]]
    ) -> tuple[int, int]:
        """lb_ban_defined: remove ``player`` from defined boards, each with its definition
        (after ``ban``, whose tombstone keeps new slips out; nothing journaled); (boards they
        were on, of those the boards whose top N changed)."""
        keys: list[str] = [self.keys.versions]
        args: list[str | int] = [player]
        for b, d in boards_of:
            at = (b.window, b.period, b.scope)
            keys += [self.keys.board(*at), self.keys.members(*at), self.keys.points(*at)]
            keys += [self.keys.metadata(*at), self.keys.histogram(*at)]
            lex = d.encoding == boards.LEX
            key_len = len(d.keys) * boards.KEY_HEX if lex else 0
            args += [f"{b.window}:{b.period}:{b.scope}", d.top_n, d.rank_mode, key_len, 0 if lex else d.shift(b.window)]
        removed, touched = await _execute(self.redis, ("FCALL", "lb_ban_defined", len(keys), *keys, *args))
        return int(removed), int(touched)

    def _board_keys(self, window_name: str, period: str, scope: str) -> tuple[str, str, str]:
        """A board and its companions, as lb_ban and lb_correct take them."""
        at = (window_name, period, scope)
        return self.keys.board(*at), self.keys.histogram(*at), self.keys.points(*at)

    async def _shift_of(self, window_name: str) -> int:
        """The score shift of a board's window, -1 when its window is no longer known (a
        tournament whose definition is gone): its companions are then left alone."""
        try:
            return (await self.window_of(window_name)).shift
        except (BadRequest, TournamentError):
            try:  # a window the game no longer keeps still has its fixed encoding
                return window(window_name).shift
            except ValueError:
                return -1

    async def unban(self, player: str, *, actor: str, reason: str = "") -> bool:
        """lb_unban: lift a ban; whether there was one."""
        keys = (self.keys.banned, self.keys.activity, self.keys.journal)
        args = (player, actor, reason, self.config.activity_maxlen)
        return bool(await _execute(self.redis, ("FCALL", "lb_unban", len(keys), *keys, *args)))

    async def correct(
        self,
        player: str,
        points: int,
        boards: Sequence[tuple[Period, str]],
        *,
        actor: str,
        reason: str,
        now: int | None = None,
    ) -> list[Correction]:
        """lb_correct: set ``player``'s points on each (period, scope) board given."""
        keys = [self.keys.banned, self.keys.versions, self.keys.activity, self.keys.journal]
        args: list[str | int] = [
            player,
            points,
            actor,
            reason,
            now_ms() if now is None else now,
            self.config.activity_maxlen,
            self.config.top_n,
        ]
        for period, scope in boards:
            w = period.window
            keys += self._board_keys(w.name, period.label, scope)
            args += [
                f"{w.name}:{period.label}:{scope}",
                period.start_ms,
                period.end_ms,
                w.shift,
                w.unit_ms,
                period.expire_at_s,
                self.config.rank_mode_for(w.name),
            ]
        rows = await _execute(self.redis, ("FCALL", "lb_correct", len(keys), *keys, *args))
        return [
            Correction(BoardRef(p.window.name, p.label, scope), None if int(prev) < 0 else int(prev), int(rank))
            for (p, scope), (prev, rank) in zip(boards, rows, strict=True)
        ]

    async def correct_defined(
        self,
        player: str,
        definition: boards.Definition,
        periods: Sequence[Period],
        values: Sequence[int] | None,
        *,
        metadata: str | None = None,
        actor: str,
        reason: str,
        now: int | None = None,
    ) -> list[Correction]:
        """lb_correct_defined: set ``player``'s key values (None: take them off) on the defined
        board's ``periods``; ``metadata`` None keeps the entry's, ``""`` clears it."""
        args: list[str | int] = [
            player,
            "" if values is None else ",".join(map(str, values)),
            "keep" if metadata is None else "set",
            metadata or "",
            actor,
            reason,
            now_ms() if now is None else now,
            self.config.activity_maxlen,
            1,
            *definition_record(definition),
        ]
        scope = f"{DEFINED}:{definition.id}"
        for p in periods:
            w = p.window
            args += [f"{w.name}:{p.label}:{scope}", p.start_ms, p.end_ms, definition.shift(w.name)]
            args += [w.unit_ms, p.expire_at_s, definition.rank_mode]
        rows = await self.replay_correct_defined([str(a) for a in args], journal=True)
        return [
            Correction(
                BoardRef(p.window.name, p.label, scope),
                int(prev.split(",")[0]) if prev else None,
                int(rank) or None,
                tuple(int(v) for v in prev.split(",")) if prev else None,
            )
            for p, (prev, rank) in zip(periods, rows, strict=True)
        ]

    async def replay_correct_defined(self, args: Sequence[str], *, journal: bool = False) -> list[Any]:
        """lb_correct_defined with the arguments it journaled (``journal``: journal it, as a new
        correction is; a rebuild replays without); its rows. The keys follow from the board
        records' version fields."""
        keys = [self.keys.banned, self.keys.versions, self.keys.activity, self.keys.journal]
        first = _CORRECT_DEFINED_ARGS + 1 + len(DEFINITION_FIELDS)
        for field in args[first::_CORRECT_DEFINED_FIELDS]:
            at = field.split(":", 2)
            keys += [self.keys.board(*at), self.keys.members(*at), self.keys.points(*at)]
            keys += [self.keys.metadata(*at), self.keys.histogram(*at)]
        how = "correct" if journal else "replay"
        rows: list[Any] = await _execute(self.redis, ("FCALL", "lb_correct_defined", len(keys), *keys, how, *args))
        return rows

    async def profile(self, player: str, changes: Mapping[str, str], boards: Sequence[BoardRef]) -> Mapping[str, Any]:
        """lb_profile: set (``""``: clear) profile fields of ``player``; ``boards`` are those whose
        snapshot shows the profile (the current ones). Returns the profile after the write."""
        keys = [self.keys.profiles, self.keys.versions, self.keys.journal]
        keys += [self.keys.board(b.window, b.period, b.scope) for b in boards]
        args: list[str | int] = [player, self.config.top_n, len(boards)]
        args += [f"{b.window}:{b.period}:{b.scope}" for b in boards]
        for item in changes.items():
            args += item
        raw = await _execute(self.redis, ("FCALL", "lb_profile", len(keys), *keys, *args))
        return stored_profile(raw) or {}

    # --- reads (read-only: safe on replicas through FCALL_RO)

    async def window_of(self, window_name: str) -> Window:
        """A window a read may name: one the game keeps, or a tournament's (``t-<id>``)."""
        tournament = tournament_of(window_name)
        if tournament is not None:
            spec = await self.tournaments.get(tournament)
            if spec is None:
                raise TournamentError("unknown_tournament", f"no tournament {tournament!r}")
            return spec
        try:
            spec = window(window_name)
        except ValueError as exc:
            raise BadRequest(str(exc)) from None
        if window_name not in self.config.windows:
            raise BadRequest(f"window {window_name!r} is not kept for game {self.config.game!r}")
        return spec

    async def _board(
        self, window_name: str, scope: str, at: int | None, period_name: str | None = None
    ) -> tuple[str, Period]:
        """The board key and period a read names. A defined board's (scope ``board:<id>``) is of
        its own windows, periods and time zone (``defined_board``), so the plain reads (size,
        stats) serve every window it keeps, as the function library's reads do."""
        defined = await self.defined_board(window_name, scope, at, period_name)
        if defined is not None:
            return defined.board, defined.period
        try:
            parse_scope(scope)
        except ValueError as exc:
            raise BadRequest(str(exc)) from None
        spec = await self.window_of(window_name)
        try:
            period = spec.resolve(period_name, now_ms() if at is None else at)
        except ValueError as exc:
            raise BadPeriod(str(exc)) from None
        return self.keys.board(spec.name, period.label, scope), period

    async def defined_board(
        self, window_name: str, scope: str, at: int | None = None, period_name: str | None = None
    ) -> Board | None:
        """The defined board a scope ``board:<id>`` names (its period resolved as a read names
        it), or None for any other scope. BadRequest for a board nobody defined, or a window it
        does not keep; BadPeriod as ``_board``."""
        board_id = defined_of(scope)
        if board_id is None:
            return None
        definition = self.boards.get(board_id)
        if definition is None:
            await self.boards.refresh()  # defined a moment ago, before this process's tick
            definition = self.boards.get(board_id)
        if definition is None:
            raise BadRequest(f"no board {board_id!r}")
        at = now_ms() if at is None else at
        if tournament_of(window_name) is not None:  # a tournament on the board: its one period
            spec = await self.window_of(window_name)
            try:
                return Board(self.keys, definition, spec.resolve(period_name, at), scope)
            except ValueError as exc:
                raise BadPeriod(str(exc)) from None
        try:
            boards.window_of(definition, window_name)
        except ValueError as exc:
            raise BadRequest(str(exc)) from None
        try:
            found = boards.resolve(definition, window_name, period_name, at)
        except ValueError as exc:
            raise BadPeriod(str(exc)) from None
        return Board(self.keys, definition, found, scope)

    async def _fcall_ro(self, name: str, keys: list[str], *args: str | int) -> Any:
        with _library_errors():
            return await with_library(self.redis, keys[0], lambda: self.redis.fcall_ro(name, len(keys), *keys, *args))

    async def top(
        self, window_name: str, scope: str = "global", n: int = 10, *, at: int | None = None, period: str | None = None
    ) -> BoardEntries:
        """lb_top: the first ``n`` entries of the board's current period (or the one at ``at``,
        or the one ``period`` names)."""
        defined = await self.defined_board(window_name, scope, at, period)
        if defined is not None:
            return defined.top(await self._defined_read(defined.top_call(n)))
        key, found = await self._board(window_name, scope, at, period)
        flat = await self._fcall_ro("lb_top", [key, self.keys.profiles], n)
        mode = self.config.rank_mode_for(window_name)
        return self._shown(BoardEntries(found, _entries(found, mode, 1, 1, flat), mode))

    def _shown(self, read: BoardEntries) -> BoardEntries:
        """A game board's read with the stored default's display hint: its column, and each
        entry's points as its one key value (what a page formats by a column)."""
        if not self.boards.columns:
            return read
        entries = [replace(e, keys=(e.score,)) for e in read.entries]
        return replace(read, entries=entries, columns=self.boards.columns)

    async def _defined_read(self, call: tuple[str, list[str], list[str | int]]) -> Any:
        name, keys, args = call
        return await self._fcall_ro(name, keys, *args)

    async def tops(
        self, boards: Sequence[tuple[str, str]], n: int = 10, *, at: int | None = None
    ) -> list[BoardEntries]:
        """``top()`` of several boards, ``(window, scope)`` each, in one pipelined round trip:
        for the publisher, whose tick may find hundreds of boards changed (a fraction of the
        client's CPU per board of one call each, measured in docs/operations.md). A defined
        board's top is its definition's ``top_n``."""
        found: list[Board | tuple[str, Period]] = []
        commands: list[Command] = []
        for window_name, scope in boards:
            defined = await self.defined_board(window_name, scope, at)
            if defined is not None:
                name, keys, args = defined.top_call(defined.definition.top_n)
                commands.append(("FCALL_RO", name, len(keys), *keys, *args))
                found.append(defined)
                continue
            key, period = await self._board(window_name, scope, at)
            commands.append(("FCALL_RO", "lb_top", 2, key, self.keys.profiles, n))
            found.append((window_name, period))
        with _library_errors():
            replies = (
                await with_library(self.redis, commands, lambda: execute_packed(self.redis, *commands))
                if commands
                else []
            )
        out = []
        for board, flat in zip(found, replies, strict=True):
            if isinstance(board, Board):
                out.append(board.top(flat))
                continue
            window_name, period = board
            mode = self.config.rank_mode_for(window_name)
            out.append(self._shown(BoardEntries(period, _entries(period, mode, 1, 1, flat), mode)))
        return out

    async def around(
        self,
        player: str,
        window_name: str,
        scope: str = "global",
        k: int = 5,
        *,
        at: int | None = None,
        period: str | None = None,
    ) -> BoardEntries:
        """lb_around: the entries ``k`` above and below ``player`` (none when unranked)."""
        defined = await self.defined_board(window_name, scope, at, period)
        if defined is not None:
            return defined.around(await self._defined_read(defined.around_call(player, k)))
        key, found = await self._board(window_name, scope, at, period)
        mode, w = self.config.rank_mode_for(window_name), found.window
        keys = [key, self.keys.profiles, self.keys.points(w.name, found.label, scope)]
        flat = await self._fcall_ro("lb_around", keys, player, k, mode, w.shift)
        if not flat:
            return BoardEntries(found, [], mode)
        first_ordinal, size = int(flat[0]), int(flat[3])
        entries = _entries(found, mode, first_ordinal, int(flat[1]), flat[4:])
        # the percentile's position: ordinal in ordinal mode, else the competition rank
        positions = assign_ranks(
            ORDINAL if mode == ORDINAL else COMPETITION, first_ordinal, int(flat[2]), [e.score for e in entries]
        )
        entries = [replace(e, top_percent=top_percent(pos, size)) for e, pos in zip(entries, positions, strict=True)]
        return self._shown(BoardEntries(found, entries, mode, size))

    async def ranks(
        self,
        players: Sequence[str],
        window_name: str,
        scope: str = "global",
        *,
        at: int | None = None,
        period: str | None = None,
        profiles: bool = False,
        deep_from: int = 0,
    ) -> Ranks:
        """lb_ranks: board size and each player's standing, in the order given; with
        ``profiles``, each standing carries the player's profile too (a friends list), read by
        one HMGET in the same round trip (own-rank pushes leave it out: they show no names). A
        player whose rank is beyond ``deep_from`` (0: nobody) may get an approximate rank from
        the board's histogram (``approx``), rounded to three significant digits."""
        defined = await self.defined_board(window_name, scope, at, period)
        if defined is not None:
            flat = await self._defined_read(defined.ranks_call(players))
            joined = await self.redis.hmget(self.keys.profiles, list(players)) if profiles and players else None
            return defined.ranks(players, flat, joined or [None] * len(players), deep_from)
        key, found = await self._board(window_name, scope, at, period)
        mode, w = self.config.rank_mode_for(window_name), found.window
        keys = [key, self.keys.points(w.name, found.label, scope), self.keys.histogram(w.name, found.label, scope)]
        args: list[str | int] = [mode, w.shift, deep_from, *players]
        if profiles and players:
            commands: list[Command] = [
                ("FCALL_RO", "lb_ranks", len(keys), *keys, *args),
                ("HMGET", self.keys.profiles, *players),
            ]
            with _library_errors():
                flat, joined = await with_library(self.redis, key, lambda: execute_packed(self.redis, *commands))
        else:
            flat, joined = await self._fcall_ro("lb_ranks", keys, *args), [None] * len(players)
        size = int(flat[0])
        rows = zip(players, flat[1::4], flat[2::4], flat[3::4], flat[4::4], joined, strict=True)
        standings = [
            _standing(p, size, w.unpack, r, s, pos, approx, stored_profile(f)) for p, r, s, pos, approx, f in rows
        ]
        return Ranks(found, size, standings, mode)

    async def rank(
        self,
        player: str,
        window_name: str,
        scope: str = "global",
        *,
        at: int | None = None,
        period: str | None = None,
        deep_from: int = 0,
    ) -> Standing:
        ranks = await self.ranks([player], window_name, scope, at=at, period=period, deep_from=deep_from)
        return ranks.standings[0]

    async def rebuild_rank_index(
        self, window_name: str, scope: str = "global", *, at: int | None = None, period: str | None = None
    ) -> int:
        """lb_rank_rebuild: rebuild the board's histogram, and in dense mode its distinct points,
        from the board: for boards written before they had them, after the window's mode changed
        to dense, and after a rebuild from the durable log wrote its members. O(N) in one atomic
        call: seconds on a board of a million members, so call it on a client made with
        ``connect(url, socket_timeout=None)``. ``period`` names a past one as reads do. Returns
        the member count."""
        key, found = await self._board(window_name, scope, at, period)
        w, mode = found.window, self.config.rank_mode_for(window_name)
        keys = [key, self.keys.points(w.name, found.label, scope), self.keys.histogram(w.name, found.label, scope)]
        reply = await _execute(self.redis, ("FCALL", "lb_rank_rebuild", len(keys), *keys, w.shift, mode))
        return int(reply[0])


def _entries(period: Period, mode: str, first_ordinal: int, first_rank: int, flat: Sequence[Any]) -> list[Entry]:
    unpack = period.window.unpack
    points = [unpack(flat[j + 1]) for j in range(0, len(flat), 3)]
    ranks = assign_ranks(mode, first_ordinal, first_rank, points)
    return [
        Entry(rank, flat[j], p, stored_profile(flat[j + 2]))
        for rank, p, j in zip(ranks, points, range(0, len(flat), 3), strict=True)
    ]


def _standing(
    player: str, size: int, unpack: Any, rank: Any, score: Any, position: Any, approx: Any, profile: Any
) -> Standing:
    if rank is None:
        return Standing(player, None, None, profile)
    deep = int(approx) == 1
    shown = round_rank(int(rank)) if deep else int(rank)
    # an estimate can overshoot the board's size by its rounding: the percentile stays in range
    percent = top_percent(min(int(position), size), size)
    return Standing(player, shown, unpack(score), profile, top_percent=percent, approx=deep)
