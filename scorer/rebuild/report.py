"""What a rebuild tells its operator: the counts of what it restored (``Restored``, printed by
``python -m scorer rebuild``) and its progress while it runs (``Progress``)."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import TextIO


@dataclass(slots=True)
class Restored:
    folded: int = 0  # submissions restored through the fold
    board_rows: int = 0  # folded board rows read from the store (older than the raw log)
    replayed: int = 0  # submissions sent through lb_submit (the defined boards' slips among them)
    slips: int = 0  # defined boards' slips sent through lb_submit
    defined_corrections: int = 0  # corrections of defined boards replayed through lb_correct
    applied: int = 0
    duplicates: int = 0
    refused: dict[str, int] = field(default_factory=dict)  # code -> count (lb_submit or the fold)
    boards: int = 0
    entries: int = 0  # board members written by the fold
    seen_ids: int = 0  # ids written to the idempotency memory by the fold
    names: int = 0
    tournament_slips: int = 0  # not restored: slips of a tournament whose definition is not in the log
    actions: int = 0  # journaled actions folded (bans, corrections, profiles, tournaments, closes)
    journal: dict[str, int] = field(default_factory=dict)  # what they restored beyond boards, by kind
    audit: int = 0  # entries of the moderators' audit log written back (scorer/auditlog.py)
    seconds: float = 0.0

    def lines(self) -> list[str]:
        total = self.folded + self.replayed
        rate = total / self.seconds if self.seconds else 0.0
        refused = ", ".join(f"{code} {n}" for code, n in sorted(self.refused.items())) or "none"
        lines = [
            f"restored {total:,} submissions in {self.seconds:.1f} s ({rate:,.0f}/s)",
            f"  folded: {self.folded:,} submissions and {self.board_rows:,} board rows into {self.boards:,} boards, "
            f"{self.entries:,} members, {self.names:,} names, {self.seen_ids:,} ids remembered",
            f"  through lb_submit: {self.replayed:,} ({self.applied:,} applied, {self.duplicates:,} duplicates; "
            f"{self.slips:,} to defined boards; {self.defined_corrections:,} corrections of them)",
            f"  journal: {self.actions:,} actions folded; restored "
            + ", ".join(f"{n:,} {kind}" for kind, n in self.journal.items()),
            f"  audit log: {self.audit:,} entries",
            f"  refused: {refused}",
        ]
        if self.tournament_slips:
            lines.append(
                f"  not restored: {self.tournament_slips:,} tournament submissions (their tournament's definition "
                "is not in the log: create it and its entrants again)"
            )
        return lines


class Progress:
    """A progress bar on a terminal, a plain line per tenth elsewhere (logs, CI)."""

    def __init__(self, total: int, out: TextIO | None = None, *, what: str = "submissions") -> None:
        self.total = max(total, 1)
        self.out = out if out is not None else sys.stderr
        self.tty = self.out.isatty()
        self.what = what
        self.done = 0
        self.started = time.monotonic()
        self._next_tenth = 1

    def advance(self, n: int) -> None:
        self.done += n
        share = min(self.done / self.total, 1.0)
        rate = self.done / max(time.monotonic() - self.started, 1e-9)
        text = f"{share:4.0%} {self.done:,}/{self.total:,} {self.what}, {rate:,.0f}/s"
        if self.tty:
            bar = "#" * int(share * 30)
            self.out.write(f"\rrebuild [{bar:<30}] {text}")
            self.out.flush()
        elif share * 10 >= self._next_tenth:
            self._next_tenth = int(share * 10) + 1
            print(f"rebuild: {text}", file=self.out, flush=True)

    def finish(self) -> None:
        if self.tty:
            self.out.write("\n")
            self.out.flush()
