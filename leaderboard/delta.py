"""Snapshot deltas (pure): a board's snapshot as a change to the one before it, and back.

A top 10 changes a little each tick: a player's score, a few ranks moved by one. A ``delta``
message carries the ``base`` version it applies to (the new one is the next, ``base + 1``, in
the base's period), ``dt`` (the new ``ts`` minus the base's) and its entries each as one of:

* an integer ``k``: entry ``k`` of the base (0-based), unchanged but for its ``rank``, which is
  its place in this list (1-based);
* ``[k, score]``: the same with this ``score``;
* ``{"@": k, ...fields}``: the same with those fields replaced, ``rank`` too when it is not the
  place (ties in competition and dense mode), and ``"-"``: a list of field names it no longer has;
* any other object: a new entry, as a snapshot carries it.

Every other field (board, window, period, mode, columns) is the base's: when one of them
changes (a new period, a definition's new columns), or versions were skipped, there is no
delta: the snapshot goes whole.
docs/protocol.md ("Snapshot deltas") is the contract; measured against a byte delta (Fossil's)
on the demo's traffic in docs/benchmarks.md::

    message = encode(previous_payload, payload)  # None: send the full snapshot
    snapshot = apply(held_snapshot, orjson.loads(message))  # raises Mismatch when it does not fit
"""

from __future__ import annotations

from typing import Any

import orjson

from . import messages as m

Message = dict[str, Any]

# the fields a delta carries itself: the rest must be the base's
_OWN = ("type", "version", "ts", "entries")
_WHERE = ("board", "window")  # what a delta names to find the snapshot it applies to


class Mismatch(ValueError):
    """The delta does not apply to the snapshot held (another base, another board or period, an
    index out of range): the client asks for the full snapshot (``resync``)."""


def _at(old: Message, place: int) -> Message:
    """Base entry ``old`` at ``place`` (0-based) of the new entries: its rank is the place's."""
    return {**old, "rank": place + 1} if "rank" in old else dict(old)


def _entry(index: int, old: Message, new: Message) -> int | list[Any] | Message:
    if old == new:
        return index
    if old.keys() == new.keys() and all(v == new[k] for k, v in old.items() if k != "score"):
        return [index, new["score"]]
    change: Message = {"@": index}
    change.update((name, value) for name, value in new.items() if old.get(name, change) != value)
    gone = [name for name in old if name not in new]
    if gone:
        change["-"] = gone
    return change


def diff(base: Message, new: Message, full_every: int = 0) -> m.Delta | None:
    """The delta taking ``base`` (a snapshot) to ``new`` (the next one of the same board), or
    None when only a full snapshot can say it (other fields than the entries changed, a version
    other than the base's next, a base without a version) or ``new``'s version is a multiple of
    ``full_every`` (> 0: every K-th version goes whole, so a client that applied a wrong delta
    unseen is right again within K ticks)."""
    base_version, version = base.get("version"), new.get("version")
    if not isinstance(base_version, int) or version != base_version + 1:
        return None
    base_ts, ts = base.get("ts"), new.get("ts")
    if not isinstance(base_ts, int) or not isinstance(ts, int):
        return None
    if full_every > 0 and version % full_every == 0:
        return None
    if {k: v for k, v in base.items() if k not in _OWN} != {k: v for k, v in new.items() if k not in _OWN}:
        return None
    old_entries, entries = base.get("entries"), new.get("entries")
    if not isinstance(old_entries, list) or not isinstance(entries, list):
        return None
    at = {e.get("player"): i for i, e in enumerate(old_entries) if isinstance(e, dict)}
    out: list[m.DeltaItem] = []
    for place, entry in enumerate(entries):
        i = at.get(entry.get("player")) if isinstance(entry, dict) else None
        out.append(entry if i is None else _entry(i, _at(old_entries[i], place), entry))
    return {"type": "delta", "board": new["board"], "window": new["window"], "base": base_version,
            "dt": ts - base_ts, "entries": out}  # fmt: skip


def encode(base: bytes, new: bytes, full_every: int = 0) -> bytes | None:
    """``diff`` of two snapshot payloads, as the message's bytes (None: no delta, or one no
    smaller than the snapshot itself)."""
    try:
        delta = diff(orjson.loads(base), orjson.loads(new), full_every)
    except (orjson.JSONDecodeError, AttributeError, KeyError):
        return None
    if delta is None:
        return None
    payload = orjson.dumps(delta)
    return payload if len(payload) < len(new) else None


def apply(held: Message, delta: Message) -> Message:
    """The snapshot ``delta`` makes of ``held``; raises ``Mismatch`` unless ``held`` is its base
    (same board and window, ``version`` = the delta's ``base``)."""
    for name in _WHERE:
        if held.get(name) != delta.get(name):
            raise Mismatch(f"the delta is for another {name}")
    version, base_version, ts, dt = held.get("version"), delta.get("base"), held.get("ts"), delta.get("dt")
    if not isinstance(version, int) or isinstance(base_version, bool) or version != base_version:
        raise Mismatch(f"the delta applies to version {base_version}, not {version}")
    if not isinstance(ts, int) or isinstance(dt, bool) or not isinstance(dt, int):
        raise Mismatch("ts and dt must be integers")
    base = held.get("entries")
    items = delta.get("entries")
    if not isinstance(base, list) or not isinstance(items, list):
        raise Mismatch("entries must be lists")
    entries: list[Any] = []
    for place, item in enumerate(items):
        if isinstance(item, dict) and "@" not in item:
            entries.append(item)
            continue
        if isinstance(item, int) and not isinstance(item, bool):
            k = item
        elif isinstance(item, list) and len(item) == 2:
            k = item[0]
        elif isinstance(item, dict):
            k = item["@"]
        else:
            raise Mismatch("an entry must be an index, an [index, score] pair or an object")
        if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k < len(base) or not isinstance(base[k], dict):
            raise Mismatch("an entry's index is out of range")
        entry = _at(base[k], place)
        if isinstance(item, list):
            entry["score"] = item[1]
        elif isinstance(item, dict):
            entry = {name: value for name, value in entry.items() if name not in item.get("-", ())}
            entry.update((name, value) for name, value in item.items() if name not in ("@", "-"))
        entries.append(entry)
    return {**held, "version": version + 1, "ts": ts + dt, "entries": entries}


def follow(held: Message | None, message: Message) -> Message | None:
    """What a client holds after ``message``, a ``snapshot`` or a ``delta`` of the board whose
    snapshot it holds (``held``; None: none yet): the new snapshot, or None when the message is
    a delta of a version held already (a duplicate: ignored). Raises ``Mismatch`` when a delta
    does not fit: the client asks for the full snapshot (``resync``) and ignores deltas until
    it comes."""
    if message.get("type") != "delta":
        return message
    if held is None:
        raise Mismatch("no snapshot held")
    version, base = held.get("version"), message.get("base")
    if isinstance(version, int) and isinstance(base, int) and base < version:
        return None
    return apply(held, message)
