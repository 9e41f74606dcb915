"""How a scenario's data names events and values (pure).

A pattern is an object of dotted paths into an event and what each must be: a value (equal), or
an object of comparisons (``{"<=": 1.0}``, ``{"!=": "$gw"}``, ``{"in": [...]}``; every one must
hold)::

    {"event": "status", "status": "reconnecting", "retry_in": {"<=": 1.0}}
    {"event": "welcome", "message.gateway": {"!=": "$gw"}}

A string ``"$name"`` anywhere in a step stands for a value of the run: one the runner provides
(``$url``, ``$player``, ``$token``, ``$forged_token``, ``$rising``, ``$rival``, ``$other``) or one
an earlier step saved.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from typing import Any

Event = dict[str, Any]

MISSING = object()

_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "in": lambda got, bound: got in bound,
}


class ScenarioError(ValueError):
    """A scenario's data does not say what the runner can do (a bug in the scenario, not the client)."""


def lookup(event: Any, path: str) -> Any:
    """The value at ``path`` (``message.entries.0.player``), or MISSING."""
    value = event
    for part in path.split("."):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return MISSING
    return value


def resolve(value: Any, names: Mapping[str, Any]) -> Any:
    """``value`` with every ``"$name"`` replaced (a callable's value is called for each use)."""
    if isinstance(value, str) and value.startswith("$"):
        if value[1:] not in names:
            raise ScenarioError(f"{value} names nothing the run knows or an earlier step saved")
        found = names[value[1:]]
        return found() if callable(found) else found
    if isinstance(value, dict):
        return {k: resolve(v, names) for k, v in value.items()}
    if isinstance(value, list):
        return [resolve(v, names) for v in value]
    return value


def comparisons(want: Any) -> dict[str, Any] | None:
    if isinstance(want, dict) and want and all(k in _OPS for k in want):
        return want
    return None


def holds(got: Any, want: Any) -> bool:
    """Whether ``got`` is ``want`` (a value, or an object of comparisons)."""
    ops = comparisons(want)
    if ops is None:
        return got is not MISSING and bool(got == want)
    if got is MISSING:
        return False
    for op, bound in ops.items():
        try:
            if not _OPS[op](got, bound):
                return False
        except TypeError:  # None <= 1.0: not held
            return False
    return True


def matches(event: Event, pattern: Mapping[str, Any]) -> bool:
    return all(holds(lookup(event, path), want) for path, want in pattern.items())


def describe(pattern: Mapping[str, Any]) -> str:
    """``status status=reconnecting retry_in<=1.0``: a pattern in a failure's reason."""
    parts = [str(pattern.get("event", "any event"))]
    for path, want in pattern.items():
        if path == "event":
            continue
        ops = comparisons(want)
        parts += [f"{path}{op}{bound}" for op, bound in ops.items()] if ops else [f"{path}={want}"]
    return " ".join(parts)
