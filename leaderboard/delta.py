"""Snapshot deltas (pure): a board's snapshot as a change to the one before it, and back.

A top 10 changes a little each tick: a player's score, a few ranks moved by one. A ``delta``
message carries the new snapshot's ``version`` and ``ts``, the ``base`` version it applies to,
and its entries each as one of:

* an integer ``k``: entry ``k`` of the base, unchanged;
* ``{"@": k, ...fields}``: entry ``k`` of the base with those fields replaced (``"-"``: a list
  of field names the entry no longer has);
* any other object: a new entry, as a snapshot carries it.

Every other field (board, window, period, mode, columns) is the base's: when one of them
changes (a new period, a definition's new columns) there is no delta, the snapshot goes whole.
docs/protocol.md ("Snapshot deltas") is the contract; measured against a byte delta (Fossil's)
on the demo's traffic in docs/benchmarks.md::

    message = encode(previous_payload, payload)  # None: send the full snapshot
    snapshot = apply(held_snapshot, orjson.loads(message))  # raises Mismatch when it does not fit
"""

from __future__ import annotations

from typing import Any

import orjson

Message = dict[str, Any]

# the fields a delta carries itself: the rest must be the base's
_OWN = ("type", "version", "ts", "entries")


class Mismatch(ValueError):
    """The delta does not apply to the snapshot held (another base, another board or period, an
    index out of range): the client asks for the full snapshot (``resync``)."""


def _entry(index: int, old: Message, new: Message) -> int | Message:
    if old == new:
        return index
    change: Message = {"@": index}
    change.update((name, value) for name, value in new.items() if old.get(name, change) != value)
    gone = [name for name in old if name not in new]
    if gone:
        change["-"] = gone
    return change


def diff(base: Message, new: Message, full_every: int = 0) -> Message | None:
    """The delta taking ``base`` (a snapshot) to ``new`` (the next one of the same board), or
    None when only a full snapshot can say it (other fields than the entries changed, an older
    or equal version, a base without a version) or ``new``'s version is a multiple of
    ``full_every`` (> 0: every K-th version goes whole, so a client that applied a wrong delta
    unseen is right again within K ticks)."""
    base_version, version = base.get("version"), new.get("version")
    if not isinstance(base_version, int) or not isinstance(version, int) or version <= base_version:
        return None
    if full_every > 0 and version % full_every == 0:
        return None
    if {k: v for k, v in base.items() if k not in _OWN} != {k: v for k, v in new.items() if k not in _OWN}:
        return None
    old_entries, entries = base.get("entries"), new.get("entries")
    if not isinstance(old_entries, list) or not isinstance(entries, list):
        return None
    at = {e.get("player"): i for i, e in enumerate(old_entries) if isinstance(e, dict)}
    out: list[int | Message] = []
    for entry in entries:
        i = at.get(entry.get("player")) if isinstance(entry, dict) else None
        out.append(entry if i is None else _entry(i, old_entries[i], entry))
    return {
        "type": "delta",
        "board": new.get("board"),
        "window": new.get("window"),
        "period": new.get("period"),
        "base": base_version,
        "version": version,
        "ts": new.get("ts"),
        "entries": out,
    }


def encode(base: bytes, new: bytes, full_every: int = 0) -> bytes | None:
    """``diff`` of two snapshot payloads, as the message's bytes (None: no delta, or one no
    smaller than the snapshot itself)."""
    try:
        delta = diff(orjson.loads(base), orjson.loads(new), full_every)
    except (orjson.JSONDecodeError, AttributeError):
        return None
    if delta is None:
        return None
    payload = orjson.dumps(delta)
    return payload if len(payload) < len(new) else None


def apply(held: Message, delta: Message) -> Message:
    """The snapshot ``delta`` makes of ``held``; raises ``Mismatch`` unless ``held`` is its base
    (same board, window and period, ``version`` = the delta's ``base``)."""
    for name in ("board", "window", "period"):
        if held.get(name) != delta.get(name):
            raise Mismatch(f"the delta is for another {name}")
    if held.get("version") != delta.get("base"):
        raise Mismatch(f"the delta applies to version {delta.get('base')}, not {held.get('version')}")
    base = held.get("entries")
    items = delta.get("entries")
    if not isinstance(base, list) or not isinstance(items, list):
        raise Mismatch("entries must be lists")
    entries: list[Any] = []
    for item in items:
        if isinstance(item, bool) or not isinstance(item, (int, dict)):
            raise Mismatch("an entry must be an index or an object")
        if isinstance(item, dict) and "@" not in item:
            entries.append(item)
            continue
        k = item if isinstance(item, int) else item["@"]
        if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k < len(base):
            raise Mismatch("an entry's index is out of range")
        if isinstance(item, int):
            entries.append(base[k])
            continue
        entry = {name: value for name, value in base[k].items() if name not in item.get("-", ())}
        entry.update((name, value) for name, value in item.items() if name not in ("@", "-"))
        entries.append(entry)
    return {**held, "version": delta["version"], "ts": delta.get("ts"), "entries": entries}


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
    version, new = held.get("version"), message.get("version")
    same_period = held.get("period") == message.get("period")
    if same_period and isinstance(version, int) and isinstance(new, int) and new <= version:
        return None
    return apply(held, message)
