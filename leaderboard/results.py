"""What the function library's wrappers return: replies as frozen dataclasses (pure)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .windows import Period


@dataclass(frozen=True, slots=True)
class BoardRef:
    """One board of one period, e.g. weekly 2026-W48 region:eu."""

    window: str
    period: str
    scope: str


@dataclass(frozen=True, slots=True)
class BoardResult:
    board: BoardRef
    improved: bool
    rank: int  # 1-based, after this submission
    previous_rank: int | None  # None: the player was not on this board before
    best: int  # the player's points on this board after this submission


@dataclass(frozen=True, slots=True)
class SubmitResult:
    """``status`` is ``ok``, ``duplicate`` or ``error`` (then ``code`` and ``message`` are set).
    ``applied_us``: Redis's clock (µs) when the call ran, if asked for (``stamp=True``): the
    order in which batches from several connections were applied; 0 otherwise."""

    id: str
    status: str
    boards: tuple[BoardResult, ...] = ()
    code: str | None = None
    message: str | None = None
    applied_us: int = 0

    @property
    def improved(self) -> bool:
        return any(b.improved for b in self.boards)


# SubmitResult(id, "ok", applied_us=stamp), made the way the scorer makes one per applied slip:
# through the slots' own setters, where a frozen dataclass's __init__ looks each field up by name
# (object.__setattr__), which took twice the time.
_SLOTS = tuple(getattr(SubmitResult, f).__set__ for f in ("id", "status", "boards", "code", "message", "applied_us"))


def applied(id: str, applied_us: int = 0) -> SubmitResult:
    result = object.__new__(SubmitResult)
    set_id, set_status, set_boards, set_code, set_message, set_applied = _SLOTS
    set_id(result, id)
    set_status(result, "ok")
    set_boards(result, ())
    set_code(result, None)
    set_message(result, None)
    set_applied(result, applied_us)
    return result


@dataclass(frozen=True, slots=True)
class Entry:
    rank: int
    player: str
    score: int
    profile: Mapping[str, Any] | None = None
    top_percent: float | None = None  # set by reads around a player (leaderboard/ranking.py)
    # a defined board's key values (``score`` is the first) and the entry's metadata
    keys: tuple[int, ...] | None = None
    metadata: str | None = None

    @property
    def name(self) -> str | None:
        name = self.profile.get("name") if self.profile else None
        return name if isinstance(name, str) else None


@dataclass(frozen=True, slots=True)
class Standing:
    """A player's place on a board; ``rank``, ``score`` and ``top_percent`` are None when
    unranked. ``rank`` is in the board's rank mode; ``approx`` marks a deep rank estimated from the
    board's histogram (rounded, leaderboard/ranking.py) instead of read exactly."""

    player: str
    rank: int | None
    score: int | None
    profile: Mapping[str, Any] | None = None  # read only where asked for (friends lists)
    top_percent: float | None = None
    approx: bool = False
    keys: tuple[int, ...] | None = None  # a defined board's key values (``score`` is the first)


@dataclass(frozen=True, slots=True)
class BoardEntries:
    """Entries of one board (its top, or the slice around a player) with the period they were
    read from: whoever labels them (a snapshot, a reply) uses this period, never one computed
    again from the clock, which could name the next period at a rollover."""

    period: Period
    entries: list[Entry]
    mode: str = "ordinal"  # the rank mode of the entries' ranks
    size: int | None = None  # the board's member count, where the read took it (around)
    # a defined board's keys: name, direction and display hint each (a page formats by them)
    columns: tuple[Mapping[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class Ranks:
    """Board size and the standings of the players asked about, in the order asked."""

    period: Period
    size: int
    standings: list[Standing]
    mode: str = "ordinal"


@dataclass(frozen=True, slots=True)
class BoardStats:
    """Board size (exact) and distinct players of the window period (HyperLogLog, ~0.8%)."""

    period: Period
    size: int
    players: int


@dataclass(frozen=True, slots=True)
class Publication:
    """One snapshot for ``lb_publish``: where it goes and what the published record says: the
    board's top-N ``version`` it shows (what makes a board due) and ``sequence``, the snapshot's
    own ``version`` (the board's publish count: scorer/publisher.py)."""

    window: str
    scope: str
    period: str
    version: int
    sequence: int
    payload: bytes


@dataclass(frozen=True, slots=True)
class Correction:
    """One board of a score correction: the player's points before (None: not on the board) and
    their rank after (1-based; None: a defined board's correction took them off it). On a defined
    board ``previous`` is the first key value and ``keys`` all of them."""

    board: BoardRef
    previous: int | None
    rank: int | None
    keys: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True)
class Refiled:
    """An entry ``Leaderboard.enqueue`` did not append: its submission id was filed before with
    the same request body, so it is a retry of that filing (``stream_id``: the entry the filing
    appended, '' when its record does not say). What became of it is ``Leaderboard.status``'s."""

    stream_id: str


@dataclass(frozen=True, slots=True)
class SubmissionStatus:
    """What became of a submission (``Leaderboard.status``): ``applied``, ``pending`` (in the
    queue), ``refused`` (dead-lettered; then ``code`` and ``message`` say why) or ``unknown``
    (never received, or older than LB_IDEMPOTENCY_S)."""

    id: str
    status: str
    code: str | None = None
    message: str | None = None
    # applied, when the submission asked to keep its outcome (``Submission.outcome``): what
    # lb_submit decided per board, in the order of its boards
    boards: tuple[BoardResult, ...] = ()
