"""Every Redis key and channel name the fleet uses, built in one place.

All names of one game share the hash tag ``{game}``, so in a Redis Cluster they live in one slot
and a function can touch them all. The function library's header (lua/text.lua) describes the same
schema (tests/test_library_layout.py holds the two equal).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .windows import tournament_of

_NAME = re.compile(r"[A-Za-z0-9_-]{1,32}")

GLOBAL_SCOPE = "global"
# The span of one seen-id or refusal bucket (``seen(hour)``, ``refused(hour)``): an hour, in ms.
HOUR_MS = 3_600_000
SCOPE_KINDS = ("region", "mode")
DEFINED = "board"  # the scope kind of a defined board: ``board:<id>`` (leaderboard/boards/)
# A board of a definition kept per region or mode (its ``scopes``) is named after its home board:
# ``board:<id>:region:<r>``, ``board:<id>:mode:<m>``, in keys, channels, replies and paths alike.


def check_name(kind: str, value: str) -> str:
    """Game names and scope values become parts of keys: keep them short and plain."""
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        raise ValueError(f"{kind} must be 1-32 characters of A-Z a-z 0-9 _ -, got {value!r}")
    return value


def defined_of(scope: str) -> str | None:
    """``board:tower`` (or ``board:tower:region:eu``, one of its scopes) -> ``tower``: the
    definition of the defined board a scope names, or None."""
    kind, _, value = scope.partition(":")
    return value.partition(":")[0] if kind == DEFINED else None


def defined_scope(board_id: str, kind: str | None = None, value: str | None = None) -> str:
    """``tower`` -> ``board:tower``, its home board; with a scope kind and value, that scope's
    board: ``board:tower:region:eu``."""
    home = f"{DEFINED}:{board_id}"
    return home if kind is None else f"{home}:{kind}:{value}"


def scope_in(scope: str) -> tuple[str, str] | None:
    """The (kind, value) of the region or mode a defined board's scope names
    (``board:tower:region:eu`` -> ``("region", "eu")``), None for its home ``board:tower``."""
    kind, _, rest = scope.partition(":")
    named = rest.partition(":")[2] if kind == DEFINED else ""
    if not named:
        return None
    scope_kind, _, value = named.partition(":")
    return scope_kind, value


def scope_label(kind: str, value: str) -> str:
    """``region`` + ``eu`` -> ``region:eu``: the board name clients subscribe to."""
    return f"{kind}:{value}"


def parse_scope(board: str) -> str:
    """Validate a board name from the outside world (``global``, ``region:eu``, ``mode:duo``,
    ``board:tower``: a defined board, ``board:tower:region:eu``: one of its scopes)."""
    if board == GLOBAL_SCOPE:
        return board
    kind, _, value = board.partition(":")
    if kind not in SCOPE_KINDS and kind != DEFINED:
        raise ValueError(
            f"board must be 'global', 'region:<name>', 'mode:<name>', 'board:<id>' or 'board:<id>:region:<name>', "
            f"got {board!r}"
        )
    if kind == DEFINED:
        value, scoped, named = value.partition(":")
        if scoped:
            scope_kind, _, scope_value = named.partition(":")
            if scope_kind not in SCOPE_KINDS:
                raise ValueError(f"a defined board's scope is region:<name> or mode:<name>, got {board!r}")
            check_name(scope_kind, scope_value)
    check_name(kind, value)
    return board


@dataclass(frozen=True, slots=True)
class Keys:
    """Key names for one game."""

    game: str

    def __post_init__(self) -> None:
        check_name("game", self.game)

    @property
    def prefix(self) -> str:
        return f"lb:{{{self.game}}}"

    # --- written by the function library
    def board(self, window: str, period: str, scope: str) -> str:
        return f"{self.prefix}:board:{window}:{period}:{scope}"

    def members(self, window: str, period: str, scope: str) -> str:
        """Hash player -> member of a lex-encoded defined board (leaderboard/boards/): what
        finds a player's member, whose text is its place on the board."""
        return f"{self.prefix}:members:{window}:{period}:{scope}"

    def metadata(self, window: str, period: str, scope: str) -> str:
        """Hash player -> the metadata of the player's entry on a defined board (e.g. a replay id)."""
        return f"{self.prefix}:meta:{window}:{period}:{scope}"

    def histogram(self, window: str, period: str, scope: str) -> str:
        """Hash standing bucket -> members of the board in it (a packed score's points, a lex
        member's first key: lua/encoding.lua scoring.standing), for approximate deep ranks on
        every board; written with the board, expires with it."""
        return f"{self.prefix}:hist:{window}:{period}:{scope}"

    def points(self, window: str, period: str, scope: str) -> str:
        """Sorted set of the board's distinct points values, for dense ranks."""
        return f"{self.prefix}:points:{window}:{period}:{scope}"

    def players(self, window: str, period: str) -> str:
        """HyperLogLog of distinct players in one window period."""
        return f"{self.prefix}:players:{window}:{period}"

    def seen(self, hour: int) -> str:
        """Submission ids applied, bucketed by the hour of the submission's own timestamp."""
        return f"{self.prefix}:seen:{hour}"

    def bodies(self, hour: int) -> str:
        """Hash submission id -> "<fingerprint> <stream id>": the request body it was first filed
        with and the entry that filing appended (the HTTP API's Idempotency-Key rule: lb_enqueue
        refuses the id with another body, and does not append a retry with the same one again),
        bucketed by the hour it was filed and kept as long as a submission id is remembered."""
        return f"{self.prefix}:bodies:{hour}"

    def outcomes(self, hour: int) -> str:
        """Hash submission id -> what lb_submit decided per board (JSON), for the submissions
        that asked to keep it (``Submission.outcome``); bucketed and kept as their seen ids."""
        return f"{self.prefix}:outcomes:{hour}"

    @property
    def versions(self) -> str:
        """Hash ``<window>:<period>:<scope>`` -> top-N version, bumped when the top N changes."""
        return f"{self.prefix}:versions"

    @property
    def activity(self) -> str:
        return f"{self.prefix}:activity"

    @property
    def profiles(self) -> str:
        return f"{self.prefix}:profiles"

    @property
    def banned(self) -> str:
        """Hash player -> ban record JSON: the tombstone every submission is checked against."""
        return f"{self.prefix}:banned"

    @property
    def scopes(self) -> str:
        """Set of the scopes (``region:eu``, ``mode:duo``, a defined board's
        ``board:<id>:region:eu``) slips have named: what lb_submit counts against LB_MAX_SCOPES.
        Never expires; it holds at most that many."""
        return f"{self.prefix}:scopes"

    @property
    def board_pattern(self) -> str:
        """SCAN pattern of every board key of the game, all windows, periods and scopes."""
        return f"{self.prefix}:board:*"

    # --- channels
    @property
    def announce_channel(self) -> str:
        return f"{self.prefix}:announce"

    @property
    def replay_channel(self) -> str:
        """Where a rebuild's lb_submit calls announce (nobody listens): history is not news."""
        return f"{self.prefix}:replay"

    def snapshot_channel(self, window: str, scope: str) -> str:
        return f"{self.prefix}:snap:{window}:{scope}"

    def latest(self, window: str, scope: str) -> str:
        """The last published snapshot of a board, for clients that just connected."""
        return f"{self.prefix}:latest:{window}:{scope}"

    # --- queue and workers
    @property
    def submissions(self) -> str:
        return f"{self.prefix}:submissions"

    @property
    def dead_letters(self) -> str:
        """Stream of the slips the scorer refused: the slip's own fields (``id``, ``player``, ...)
        and ``dead.id`` (its queue entry), ``dead.code``, ``dead.message``, ``dead.at``, ``dead.by``."""
        return f"{self.prefix}:deadletters"

    @property
    def queued(self) -> str:
        """Set of the submission ids in the queue: lb_enqueue adds them, the scorer removes them
        when it acknowledges their entries (lb_status answers ``pending`` from it)."""
        return f"{self.prefix}:queued"

    def refused(self, hour: int) -> str:
        """Hash submission id -> ``"<code> <message>"`` of the slips the scorer refused in that
        hour (its clock), kept as long as a submission id is remembered (lb_status reads it)."""
        return f"{self.prefix}:refused:{hour}"

    @property
    def publish_lease(self) -> str:
        return f"{self.prefix}:publisher"

    @property
    def published(self) -> str:
        """Hash ``<window>:<scope>`` -> ``<period>:<top-N version>:<snapshot version>`` of the last
        snapshot published, so a new lease holder neither republishes unchanged boards nor forgets
        a board at rollover, and never numbers a snapshot below one already published (earlier
        releases wrote ``<period>:<top-N version>``)."""
        return f"{self.prefix}:published"

    def badges(self, player: str) -> str:
        return f"{self.prefix}:badges:{player}"

    # --- closed periods and tournaments
    @property
    def closed(self) -> str:
        """Stream of close events: one per window period, with its final top N (rewards read it)."""
        return f"{self.prefix}:closed"

    def closed_marker(self, window: str, period: str, scope: str | None = None) -> str:
        """Set (NX) in the same call that adds a period's close event: it is added once, and
        lb_submit refuses a later slip of the period (period_closed). Expires with its boards.
        A defined board (``scope`` ``board:<id>``) has its own: its periods are its own, shared
        by its scopes (``board:<id>:region:<r>``), which close together."""
        board_id = None if scope is None else defined_of(scope)
        suffix = f":{defined_scope(board_id)}" if board_id else ""
        return f"{self.prefix}:closedmark:{window}:{period}{suffix}"

    def finals(self, window: str, scope: str | None = None) -> str:
        """List of the newest close events of a window (all tournaments share one), newest first;
        a defined board (``scope`` ``board:<id>``, or one of its scopes) has its own per window."""
        board_id = None if scope is None else defined_of(scope)
        if board_id:
            return f"{self.prefix}:finals:{window}:{defined_scope(board_id)}"
        return f"{self.prefix}:finals:{'tournaments' if tournament_of(window) else window}"

    @property
    def rewards(self) -> str:
        """Hash ``<event id>|<scope>|<player>`` -> reward: the ledger of examples/rewards.py."""
        return f"{self.prefix}:rewards"

    @property
    def tournaments(self) -> str:
        """Hash tournament id -> definition JSON {"start_ms", "end_ms"}."""
        return f"{self.prefix}:tournaments"

    def entrants(self, tournament: str) -> str:
        """Set of the players entered in a tournament."""
        return f"{self.prefix}:entrants:{tournament}"

    # --- board definitions
    @property
    def boards(self) -> str:
        """Hash board id -> definition JSON (leaderboard/boards/), written by lb_board_put and
        lb_board_delete only."""
        return f"{self.prefix}:boards"

    @property
    def boards_version(self) -> str:
        """Counter bumped by every change of the boards hash: a process reads the changes after
        the version it holds when it moves (``board_changes``; one round trip per tick)."""
        return f"{self.prefix}:boardsver"

    @property
    def board_changes(self) -> str:
        """Sorted set board id -> the boards version counter at its last change (lb_board_put,
        lb_board_delete): a process reads only the definitions changed since the version it
        holds; member ``""`` is the floor below which it re-reads them all (lb_board_changes)."""
        return f"{self.prefix}:boardlog"

    @property
    def board_epoch(self) -> str:
        """String: Redis's clock (us) at the change that started the change log (lb_board_put,
        lb_board_delete; a rebuild writes its own): a process whose registry was read under
        another epoch re-reads every definition, the log's versions counting another history
        (a flushed Redis counts again from 1)."""
        return f"{self.prefix}:boardepoch"

    @property
    def deleted_boards(self) -> str:
        """Hash board id -> the definition JSON it had when deleted (lb_board_delete): its keys
        stay in Redis until they expire, so lb_board_put creates that id again only with the
        same keys, directions, bounds (boards.check_recreate); forgotten once they hold no
        entries (lb_board_purge)."""
        return f"{self.prefix}:deletedboards"

    # --- the durable log's journal
    @property
    def journal(self) -> str:
        """Stream of the changes submissions do not carry (bans, unbans, corrections, profiles,
        tournaments, entrants, closes), each appended by the function making it, and first badge
        awards (the badge worker); the scorer records them in the durable log and deletes them
        (scorer/journal.py)."""
        return f"{self.prefix}:journal"

    @property
    def audit(self) -> str:
        """Stream of the moderators' actions as the audit log shows them (leaderboard/audit.py):
        who, what, when, why, before and after. Never trimmed (moderation is rare); recorded in
        the durable log by the scorer (scorer/auditlog.py) and restored from it by a rebuild."""
        return f"{self.prefix}:audit"

    @property
    def heartbeats(self) -> str:
        """Hash process name -> JSON of its last heartbeat (when, its interval, its connections):
        the gateways of the fleet as operators see them (leaderboard/fleetview.py)."""
        return f"{self.prefix}:heartbeats"
