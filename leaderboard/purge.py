"""Forgetting deleted board definitions once their boards hold no entries.

``lb_board_delete`` keeps a deleted definition (``lb:{g}:deletedboards``): the board's keys stay
in Redis until retention expires them, and a create of that id is checked against it
(``boards.check_recreate``) so it reads those entries as they were written. Once no key of the
board is left, the record guards nothing: ``Purger`` finds such records and ``lb_board_purge``
forgets them, after which the id is created anew with any keys.

The keys a record could still have are those of the periods retention keeps at ``now`` (and the
next one, for a slip ahead of the clock), of each of its windows, and of the tournaments still
kept (a tournament on a defined board is a window of its own): five per period (the board, its
members, metadata, distinct values and histogram), about 35 periods for a board with every
window. ``lb_board_purge`` checks them again inside the call that forgets the record.

A record found empty is forgotten only at the next pass (``PURGE_EVERY_S`` later), not at once:
a process whose registry still held the definition (it is refreshed once a tick) may have written
its first entry meanwhile, and the second check sees it::

    purger = Purger(lb)
    await purger.run(now_ms())       # the ids forgotten this pass
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, cast

from . import boards
from .errors import InvalidBoard
from .keys import defined_scope
from .windows import Period

if TYPE_CHECKING:
    from .library import Leaderboard

log = logging.getLogger(__name__)

PURGE_EVERY_S = 60.0  # how often the scorer's publisher runs a pass (the lease holder's)
RECORDS_PER_PASS = 200  # deleted records looked at per pass: a pass stays a few round trips
_MAX_PERIODS = 500  # per window: retention keeps far fewer (a daily window's 7 days: 9)


def kept_periods(definition: boards.Definition, now: int) -> Iterator[Period]:
    """Every period of the definition's own windows whose keys retention may keep at ``now``:
    the next one, the current one, and back until one has expired (alltime: its one period)."""
    season_start = definition.season.start_ms if definition.season is not None else None
    for name in definition.windows:
        period = boards.period(definition, name, now)
        if period.window.retention_s is None:
            yield period  # kept forever: alltime has one period
            continue
        yield boards.period(definition, name, period.end_ms)  # a slip up to the clock skew ahead
        for _ in range(_MAX_PERIODS):
            yield period
            if season_start is not None and name == boards.SEASON and period.start_ms <= season_start:
                break
            period = boards.period(definition, name, period.start_ms - 1)
            if period.expire_at_s * 1000 <= now:
                break


def board_keys(
    lb: Leaderboard, definition: boards.Definition, periods: Iterable[Period], scopes: Iterable[str] = ()
) -> list[str]:
    """The keys of ``definition``'s boards in ``periods``: its home's and those of ``scopes``
    (its boards kept per region or mode, ``board:<id>:region:<r>``)."""
    k, out = lb.keys, []
    names = [defined_scope(definition.id), *scopes]
    for p in periods:
        for scope in names:
            args = (p.window.name, p.label, scope)
            out += [k.board(*args), k.members(*args), k.metadata(*args), k.points(*args), k.histogram(*args)]
    return list(dict.fromkeys(out))


async def scope_boards(lb: Leaderboard, definition: boards.Definition) -> list[str]:
    """The scopes of ``definition``'s boards slips named (the scopes set, which holds at most
    LB_MAX_SCOPES): ``board:<id>:region:<r>`` ... (none for a board without ``scopes``)."""
    if not definition.scopes:
        return []
    found = [str(s) async for s in lb.redis.sscan_iter(lb.keys.scopes, match=f"{defined_scope(definition.id)}:*")]
    return sorted(s for s in found if boards.definition_of(s) == definition.id)


class Purger:
    """One game's passes over its deleted definitions (module docstring)."""

    def __init__(self, lb: Leaderboard, *, per_pass: int = RECORDS_PER_PASS) -> None:
        self.lb = lb
        self.per_pass = per_pass
        self._cursor = 0
        self._found: dict[str, str] = {}  # id -> deleted JSON found with no keys at the last pass
        self.purged = 0

    def _keys(self, definition: boards.Definition, now: int, tournaments: list[Period], scopes: list[str]) -> list[str]:
        """The keys ``definition``'s boards may still have: its own periods', and those of the
        tournaments still kept (a tournament on the board is a window of its own), of its home
        board and of its ``scopes`` slips named (``scope_boards``)."""
        periods = itertools.chain(kept_periods(definition, now), iter(tournaments))
        return board_keys(self.lb, definition, periods, scopes)

    async def run(self, now: int) -> list[str]:
        """One pass: forget the records found empty at the last pass and still empty, then look
        at the next ``per_pass`` records. The ids forgotten."""
        purged = []
        kept = [p for spec in await self.lb.tournaments.all() if (p := spec.period(0)).expire_at_s * 1000 > now]
        for board, deleted in self._found.items():
            try:
                definition = boards.parse(deleted)
            except InvalidBoard:
                continue
            scopes = await scope_boards(self.lb, definition)
            names = self._keys(definition, now, kept, scopes)
            if await self.lb.purge_board(board, deleted, names):
                purged.append(board)
                if scopes:  # no entries left on them: the scope cap no longer counts them
                    await self.lb.redis.srem(self.lb.keys.scopes, *scopes)
        self._found = {}
        r, key = self.lb.redis, self.lb.keys.deleted_boards
        cursor, chunk = await r.hscan(key, self._cursor, count=self.per_pass)
        self._cursor = int(cursor)
        for board, deleted in cast(dict[str, str], chunk).items():
            try:
                definition = boards.parse(deleted)
            except InvalidBoard:  # written by a newer version of this code: its keys unknown here
                continue
            names = self._keys(definition, now, kept, await scope_boards(self.lb, definition))
            if not names or not await r.exists(*names):
                self._found[board] = deleted
        if purged:
            self.purged += len(purged)
            log.info("boards of %s: %d deleted definitions forgotten (no entries left)", self.lb.keys.game, len(purged))
        return purged
