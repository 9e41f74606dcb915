"""The activity stream's entries, read back (pure: no I/O).

``lb_submit`` writes one stream entry per call, for all the submissions it applied: ``n``, then
one column per field of ``COLUMNS``, the submissions' values in the call's order joined by
newlines (no id, player or operator holds a control character). One XADD per submission was the
dearest rule of the call. The moderation functions write one entry per action, with an
``action`` field (``ban``, ``unban``, ``correct``) and no ``n``. ``submissions`` turns either
into one mapping per event, as a consumer wants them; ``events`` does so for entries as a stream
read returns them, skipping (with a warning) one that is not the library's::

    for event in activity.events(await redis.xrange(keys.activity)):
        event["player"], event["points"], event["rank"], ...

A submission's fields: ``id``, ``player``, ``points`` (a defined board's slip: ''), ``op``
('' = each board's own), ``ts`` (milliseconds), ``improved`` ('1' when any board improved),
``rank`` (its ordinal rank on its first board when within that board's top N, else '0') and
``board`` (that board as reads name a defined one, ``board:<id>``; '' for the game's own). A
call that applied no defined board's slip writes no ``board`` column (nor did an older
library): such an entry reads it as ''.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence

log = logging.getLogger("leaderboard.activity")

# lb_submit's ACTIVITY_COLUMNS, then its board column, written only by a call with a defined board's slip
COLUMNS = ("id", "player", "points", "op", "ts", "improved", "rank", "board")


def submissions(fields: Mapping[str, str]) -> list[dict[str, str]]:
    """One stream entry's events, in the order they were applied: a submission batch's
    submissions, or the one moderation action (its fields as they are)."""
    count = fields.get("n")
    if count is None:
        return [dict(fields)]
    n = int(count)
    # a call of the game's boards alone (or an older library) writes no board column: '' each
    columns = [fields.get(name, "\n" * (n - 1) if name == "board" else "").split("\n") for name in COLUMNS]
    if any(len(column) != n for column in columns):
        raise ValueError(f"activity entry of {n} submissions with columns of other lengths")
    return [dict(zip(COLUMNS, values, strict=True)) for values in zip(*columns, strict=True)]


def events(entries: Sequence[tuple[object, Mapping[str, str]]]) -> Iterator[dict[str, str]]:
    """The events of entries in the order given; an entry that is not one of the library's (a
    count its columns disagree with: written by hand) is skipped, with a warning."""
    for entry_id, fields in entries:
        try:
            yield from submissions(fields)
        except ValueError as exc:
            log.warning("activity entry %s skipped: %s", entry_id, exc)


def newest(entries: Sequence[tuple[object, Mapping[str, str]]], n: int) -> list[dict[str, str]]:
    """The newest ``n`` events of entries read newest first (XREVRANGE), newest first."""
    out: list[dict[str, str]] = []
    for entry in entries:
        out += reversed(list(events([entry])))
        if len(out) >= n:
            break
    return out[:n]
