"""The submissions queue: game servers (and gateways, for ``server`` connections) file score
slips into a Redis Stream that the scorer consumes. The queue refuses new slips when its backlog
is full instead of trimming ones nobody has applied yet. The check and the appends are one call of
``lb_enqueue``; the backlog is what the scorer's group has not acknowledged (the stream's length
bounds it from above: acknowledgements trim below the oldest entry still waiting)::

    queue = Queue(redis, config)  # LB_BACKLOG_MAX etc. from config
    stream_id = await queue.submit(Submission("m-1", "mia", 120, now_ms()))
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import overload

from redis.exceptions import ResponseError

from . import boards
from .config import GameConfig
from .errors import CODES, InvalidBoard, InvalidSubmission
from .library import Leaderboard
from .results import Refiled
from .submission import Submission
from .transport import RedisClient, now_ms

SCORER_GROUP = "scorer"  # the scorer's consumer group on the submissions stream


class Queue:
    def __init__(
        self,
        redis: RedisClient,
        config: GameConfig,
        *,
        backlog_max: int | None = None,
        wait_replicas: int | None = None,
        wait_timeout_ms: int | None = None,
    ) -> None:
        """The queue's rules come from ``config`` (LB_BACKLOG_MAX, LB_WAIT_REPLICAS,
        LB_WAIT_TIMEOUT_MS); a keyword given here overrides its rule for this queue."""
        self.lb = Leaderboard(redis, config)
        self.config = config
        self.backlog_max = config.backlog_max if backlog_max is None else backlog_max
        # see Leaderboard.enqueue: WAIT before acknowledging
        self.wait_replicas = config.wait_replicas if wait_replicas is None else wait_replicas
        self.wait_timeout_ms = config.wait_timeout_ms if wait_timeout_ms is None else wait_timeout_ms
        self.stream = config.keys.submissions

    @overload
    async def submit(self, submission: Submission) -> str: ...
    @overload
    async def submit(self, submission: Submission, *, body: str) -> str | Refiled: ...
    async def submit(self, submission: Submission, *, body: str | None = None) -> str | Refiled:
        """``body``: a fingerprint of the request that filed it (Leaderboard.enqueue's ``bodies``):
        a retry of an earlier filing with the same one is not appended again, a Refiled instead
        of the stream id."""
        if body is None:
            [stream_id] = await self.submit_many([submission])
            return stream_id
        [filed] = await self.submit_many([submission], bodies=[body])
        return filed

    @overload
    async def submit_many(self, submissions: Sequence[Submission]) -> list[str]: ...
    @overload
    async def submit_many(self, submissions: Sequence[Submission], *, bodies: Sequence[str]) -> list[str | Refiled]: ...
    async def submit_many(
        self, submissions: Sequence[Submission], *, bodies: Sequence[str] | None = None
    ) -> list[str] | list[str | Refiled]:
        """Check the clock, the game's limits and the definitions of the boards named, then
        append every submission in one call; returns their stream ids (with ``bodies``, a
        Refiled for each retry: Leaderboard.enqueue). The rest of the rules held when each
        Submission was made.

        Raises InvalidSubmission for the first bad one (nothing is appended then) and
        BacklogFull when the stream already holds ``backlog_max`` entries; NotReplicated when
        ``wait_replicas`` replicas did not confirm them in time."""
        if not submissions:
            return []
        refused = await self.refusals(submissions)
        if refused:
            raise refused[min(refused)]
        filed = await self.lb.enqueue(
            [self._entry(sub) for sub in submissions],
            backlog_max=self.backlog_max,
            wait_replicas=self.wait_replicas,
            wait_timeout_ms=self.wait_timeout_ms,
            bodies=bodies,
        )
        if bodies is None:  # every entry appended: lb_enqueue tells retries only by their bodies
            ids = [i for i in filed if isinstance(i, str)]
            assert len(ids) == len(filed)
            return ids
        return filed

    async def refusals(self, submissions: Sequence[Submission]) -> dict[int, InvalidSubmission]:
        """What ``submit_many`` would refuse of ``submissions``, by index, every one of them (a
        batch answers each slip's code): the clock, the game's limits, the definitions of the
        boards named and the tournaments' entries. The rest of the rules held when each
        Submission was made."""
        await self.lb.boards.refresh_due()  # a stored default board changes the game's limits
        now, rules = now_ms(), self.lb.config.rules()
        refused: dict[int, InvalidSubmission] = {}
        for i, sub in enumerate(submissions):
            try:
                sub.check(now_ms=now, rules=rules)
                if sub.board:
                    await self._check_board(sub, sub.board)
                elif sub.values or sub.meta is not None or self.lb.boards.general is not None:
                    self._check_game(sub)
                if sub.tournament:
                    await self._check_entry(sub, sub.tournament)
            except InvalidSubmission as exc:
                refused[i] = exc
        return refused

    async def _check_board(self, sub: Submission, board: str) -> None:
        """A slip to a defined board: refused here, with lb_submit's codes, when the board is
        unknown or the slip does not fit its definition (key count, key bounds, metadata size, a
        region or mode of a kind it is not kept per).

        Checked against this process's registry, refreshed once a tick (and at once for a board
        it does not know yet), not by lb_enqueue reading the boards hash: the append stays one
        cheap call with no JSON decoded per slip inside Redis, and a definition that changes
        between this check and the apply is caught there anyway, since lb_submit checks every
        slip again against the definition it holds then."""
        definition = self.lb.boards.get(board)
        if definition is None:
            await self.lb.boards.refresh()  # defined a moment ago, before this process's tick
            definition = self.lb.boards.get(board)
        if definition is None:
            raise InvalidSubmission("unknown_board", f"no board {board!r}")
        boards.board_scopes(definition, sub.region, sub.mode)
        try:
            boards.parse_values(definition, sub.values)
            boards.check_metadata(definition, sub.meta)
        except InvalidBoard as exc:
            raise InvalidSubmission(exc.code, exc.message) from None

    def _entry(self, sub: Submission) -> dict[str, str]:
        """The stream entry of ``sub``. A game slip's points under a stored default of one key
        (``Definitions.general``) are filed as its key value: every slip of such a game is then
        one of key values, what it is on the game's boards (a points slip filed otherwise, by
        ``Leaderboard.enqueue``, is applied as that key all the same, and the scorer's durable
        log keeps it whole as it keeps these: scorer/durable/recorder.py, ``kept_whole``)."""
        general = self.lb.boards.general
        if general is not None and sub.board is None and not sub.values and len(general.keys) == 1:
            return replace(sub, values=(sub.points,)).fields()
        return sub.fields()

    def _check_game(self, sub: Submission) -> None:
        """A slip of the game's own boards against the game's stored default when it keeps key
        values (``Definitions.general``): its values, or its one key in ``points``, and its
        metadata; while the game takes points alone, values and metadata are refused (as
        encode_batch refuses them)."""
        general = self.lb.boards.general
        try:
            if general is None:
                if sub.values:
                    raise InvalidSubmission("wrong_key_count", "the game's boards take points, not key values")
                raise InvalidSubmission("metadata_too_large", "the game's boards keep no metadata")
            one = (sub.points,) if len(general.keys) == 1 else ()
            boards.parse_values(general, sub.values or one)
            boards.check_metadata(general, sub.meta)
        except InvalidBoard as exc:
            raise InvalidSubmission(exc.code, exc.message) from None

    async def _check_entry(self, sub: Submission, tournament: str) -> None:
        """A tournament submission: refused here, at once, if the tournament is unknown, not
        running at its time, or the player is not entered. The function library checks entry
        again when it applies it (an entry could not be withdrawn in between, but the check
        costs one SISMEMBER and keeps the library safe against writers that bypass the queue)."""
        spec = await self.lb.tournaments.get(tournament)
        if spec is None:
            raise InvalidSubmission("unknown_tournament", f"no tournament {tournament!r}")
        period = spec.period(sub.ts_ms)
        if not period.start_ms <= sub.ts_ms < period.end_ms:
            raise InvalidSubmission(
                "timestamp_outside_window", f"timestamp is outside tournament {tournament}'s start and end"
            )
        [entered] = await self.lb.tournaments.entered(tournament, [sub.player])
        if not entered:
            raise InvalidSubmission("not_entered", f"{CODES['not_entered']}: {tournament}")


async def backlog(r: RedisClient, stream: str) -> int:
    """Entries the scorer has still to apply: its group's not delivered plus pending (the stream
    may also hold acknowledged entries the next acknowledgement trims); the stream's length if
    the group cannot count (no stream or group yet, or its lag unknown)."""
    try:
        groups = await r.xinfo_groups(stream)
    except ResponseError:  # no stream yet
        groups = []
    for group in groups:
        if group["name"] == SCORER_GROUP and group.get("lag") is not None:
            return int(group["lag"]) + int(group["pending"])
    return int(await r.xlen(stream))
