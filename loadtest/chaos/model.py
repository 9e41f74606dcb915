"""The independent expectation of a chaos run (pure: no I/O, none of the library's code paths).

Every submission a fault sends is an ``incr`` of ``4**slot`` points for its player, and each
player's slots are distinct. A board member's points are then a base-4 number whose digit ``j``
says how many times the submission of slot ``j`` was applied: 0 is a lost submission, 2 or more
one applied twice. Carries cannot hide a double apply while a digit stays below 4, and every id
is sent at most 3 times (the original and up to two replays), so the decoding is exact::

    model = Model()
    sub = model.new("p1")            # slot 0 of p1: 1 point
    model.sent(sub); model.acked(sub)
    verdict = check(model, {"global/alltime": {"p1": 1}})
    verdict.lost == 0 and verdict.twice == 0

The score packing (points × 2^shift + a tie remainder) is undone here too, by plain integer
arithmetic on the shift each window documents, not by ``leaderboard.windows``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

BASE = 4
MAX_SLOT = 12  # 4**12 = 16,777,216 points: below the all-time board's largest points (2**27 - 1)
MAX_SENDS = BASE - 1  # an id sent more often could carry into the next digit
SHIFTS = {"daily": 17, "weekly": 20, "monthly": 22, "alltime": 26}  # docs: leaderboard/windows.py table


@dataclass(slots=True)
class Slip:
    """One submission as the chaos run made it."""

    id: str
    player: str
    slot: int
    region: str | None = None
    ts_ms: int = 0  # set at the first send; a replay carries the same (its idempotency bucket)
    sends: int = 0  # times handed to the queue (replays included)
    acked: bool = False  # the queue (or gateway) confirmed at least one send
    refused: int = 0  # sends refused before they reached Redis (connection refused, backlog full)
    unknown: int = 0  # sends whose outcome the caller could not learn (a timeout): may be applied
    acked_at: float = 0.0  # wall time of the first confirmation

    @property
    def points(self) -> int:
        return int(BASE**self.slot)


@dataclass(slots=True)
class Model:
    slips: dict[str, Slip] = field(default_factory=dict)
    slots: dict[str, int] = field(default_factory=dict)  # next free slot per player

    def new(self, player: str, *, region: str | None = None, slot: int | None = None) -> Slip:
        """A fresh submission for ``player`` (its next slot, or ``slot``: a marker's)."""
        if slot is None:
            slot = self.slots.get(player, 0)
            self.slots[player] = slot + 1
        if slot > MAX_SLOT:
            raise ValueError(f"player {player} has no free slot left")
        slip = Slip(f"c-{player}-{slot}", player, slot, region)
        if slip.id in self.slips:
            raise ValueError(f"slot {slot} of {player} was used already")
        self.slips[slip.id] = slip
        return slip

    def sent(self, slip: Slip) -> None:
        if slip.sends >= MAX_SENDS:
            raise ValueError(f"{slip.id} sent {MAX_SENDS} times already: a digit could carry")
        slip.sends += 1

    def acked(self, slip: Slip, at: float = 0.0) -> None:
        if not slip.acked:
            slip.acked, slip.acked_at = True, at

    def refused(self, slip: Slip) -> None:
        slip.refused += 1

    def unknown(self, slip: Slip) -> None:
        slip.unknown += 1

    def boards(self) -> dict[str, dict[str, int]]:
        """Scope → player → points if every confirmed slip was applied exactly once."""
        out: dict[str, dict[str, int]] = {}
        for slip in self.slips.values():
            if not slip.acked:
                continue
            for scope in ("global", *([f"region:{slip.region}"] if slip.region else [])):
                board = out.setdefault(scope, {})
                board[slip.player] = board.get(slip.player, 0) + slip.points
        return out


def unpack(score: float | int | str, window: str) -> int:
    """Points of a packed board score (the integer part above the window's shift)."""
    shift: int = SHIFTS[window]
    return int(float(score)) >> shift


@dataclass(slots=True)
class Verdict:
    """What one board comparison found; ``problems`` names the first few differences."""

    sent: int = 0  # distinct submissions sent at least once
    sends: int = 0  # every send, replays included
    replays: int = 0  # sends of an id sent before
    acked: int = 0  # distinct submissions the queue confirmed
    refused_sends: int = 0  # sends refused before they reached Redis
    unknown_sends: int = 0  # sends that timed out: outcome unknown to the caller
    never_acked: int = 0  # sent, never confirmed (every send refused): must not be applied either
    applied: int = 0  # confirmed submissions found applied exactly once
    duplicates_refused: int = 0  # replays that changed nothing
    lost: int = 0  # confirmed, not applied
    twice: int = 0  # applied more than once
    unconfirmed_applied: int = 0  # applied after a timed-out send (allowed: a retry is deduplicated)
    refused_applied: int = 0  # applied although every send was refused: must be 0
    strangers: int = 0  # board members no slip explains
    boards: int = 0
    problems: list[str] = field(default_factory=list)
    lost_ids: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.lost == 0 and self.twice == 0 and self.strangers == 0 and self.refused_applied == 0

    def note(self, text: str) -> None:
        if len(self.problems) < 20:
            self.problems.append(text)


def check(model: Model, boards: Mapping[str, Mapping[str, int]]) -> Verdict:
    """Compare read boards (``"<scope>/<window>"`` → player → points) with the model.

    A slip is lost if any board of its scopes lacks it, applied twice if any holds it more than
    once; each slip is counted once however many boards disagree."""
    v = Verdict(boards=len(boards))
    by_player: dict[str, dict[int, Slip]] = {}
    for slip in model.slips.values():
        by_player.setdefault(slip.player, {})[slip.slot] = slip
        if slip.sends:
            v.sent += 1
            v.sends += slip.sends
            v.replays += slip.sends - 1
            v.refused_sends += slip.refused
            v.unknown_sends += slip.unknown
            v.acked += slip.acked
            v.never_acked += not slip.acked
    counts: dict[str, list[int]] = {sid: [] for sid in model.slips}  # applied count per board
    for name in sorted(boards):
        scope = name.rpartition("/")[0]
        members = boards[name]
        for player, points in members.items():
            digits, rest = _digits(points)
            slips = by_player.get(player, {})
            strange = rest or not slips or any(d and slot not in slips for slot, d in enumerate(digits))
            if strange:
                v.strangers += 1
                v.note(f"{name}: {player} holds {points} points, which no sent submission explains")
        for player, slips in by_player.items():
            digits, _ = _digits(members.get(player, 0))
            for slot, slip in slips.items():
                if scope == "global" or scope == f"region:{slip.region}":
                    counts[slip.id].append(digits[slot])
    for sid, seen in counts.items():
        slip = model.slips[sid]
        if not seen:
            continue
        if slip.acked and min(seen) == 0:
            v.lost += 1
            v.lost_ids.append(sid)
            v.note(f"{sid} confirmed but missing from {seen.count(0)} of {len(seen)} boards")
        elif max(seen) > 1:
            v.twice += 1
            v.note(f"{sid} applied {max(seen)} times")
        elif min(seen) == 1:
            if slip.acked:
                v.applied += 1
            elif slip.unknown:
                v.unconfirmed_applied += 1
            else:
                v.refused_applied += 1
                v.note(f"{sid} applied although every send was refused")
            v.duplicates_refused += max(0, slip.sends - slip.refused - 1)
    return v


def _digits(points: int) -> tuple[list[int], int]:
    """Base-4 digits of ``points`` up to MAX_SLOT, and what lies above them."""
    digits = []
    for _ in range(MAX_SLOT + 1):
        points, d = divmod(points, BASE)
        digits.append(d)
    return digits, points
