"""Which board a name means (pure). Every board belongs to a definition: the game's own boards
are the definition ``default`` kept per scope (``global``, ``region:<r>``, ``mode:<m>``, as the
slips name them), every other definition is its home board, named ``board:<id>``, and, when it
is kept per region or mode (its ``scopes``), one board per value a slip names:
``board:<id>:region:<r>``, ``board:<id>:mode:<m>``. Keys, channels and
replies name a board by its scope (keys.py), so nothing a user sees changes; what a board keeps
(windows, top N, rank mode, display) is read from its definition alike.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence

from ..errors import InvalidSubmission
from ..keys import GLOBAL_SCOPE, SCOPE_KINDS, check_name, defined_of, defined_scope, scope_in, scope_label
from .definition import DEFAULT_ID, Definition

# A board as it is published and watched: (window, scope), whose current period a channel carries
# (the publisher's records, a gateway's subscriptions).
LiveBoard = tuple[str, str]


def definition_of(scope: str) -> str:
    """The id of the definition a board's scope belongs to: ``board:tower`` and
    ``board:tower:region:eu`` are ``tower``'s, ``global``, ``region:eu`` and ``mode:duo`` the
    game's ``default``."""
    return defined_of(scope) or DEFAULT_ID


def home_scope(definition_id: str) -> str:
    """The scope of a definition's board that exists as soon as it is defined (``global`` for
    the game's ``default``, whose other scopes exist once a slip names them; ``board:<id>``)."""
    return GLOBAL_SCOPE if definition_id == DEFAULT_ID else defined_scope(definition_id)


def home_of(scope: str) -> str:
    """The home scope of the definition ``scope`` belongs to: ``global`` for the game's,
    ``board:<id>`` for a defined board's (its scopes' periods are its home's)."""
    return home_scope(definition_of(scope))


def board_scopes(definition: Definition, region: str | None, mode: str | None) -> list[str]:
    """The boards a slip to a defined board writes: its home (``board:<id>``) and, for each
    region or mode value it names, that value's board (``board:<id>:region:<r>``), its home
    first. InvalidSubmission(scope_not_kept) for a value of a kind the board is not kept per:
    nothing of such a slip is written (it would be lost from the board it names), and
    invalid_scope for a value not of the scope values' rule."""
    out = [home_scope(definition.id)]
    for kind, value in zip(SCOPE_KINDS, (region, mode), strict=True):
        if value is None:
            continue
        if kind not in definition.scopes:
            raise InvalidSubmission("scope_not_kept", f"board {definition.id} is not kept per {kind}"[:120])
        try:
            check_name(kind, value)
        except ValueError as exc:
            raise InvalidSubmission("invalid_scope", str(exc)[:120]) from None
        out.append(defined_scope(definition.id, kind, value))
    return out


def keeps(definition: Definition, scope: str) -> bool:
    """Whether ``scope``, a name of one of ``definition``'s boards (``board:<id>`` or
    ``board:<id>:region:<r>``), is a board it keeps: its home, or a scope of a kind it is kept
    per (``board:tower:region:eu`` of a board kept per mode only is no board)."""
    named = scope_in(scope)
    return named is None or named[0] in definition.scopes


def listed(scope: str, listing: Collection[str]) -> bool:
    """Whether a gateway's listing (``LB_GW_BOARDS``: ``region:eu``, ``mode:duo``) offers
    ``scope``: one of the game's boards it names, or a defined board's scope of a value it
    names (a region listed is offered on every board kept per region)."""
    named = scope_in(scope)
    return (scope_label(*named) if named else scope) in listing


def on_offer(definition_id: str, kinds: Collection[str], listing: Sequence[str], named: Iterable[str]) -> list[str]:
    """The scopes' boards of a definition kept per ``kinds`` a page may offer beside its home,
    for the game's ``default`` and any board alike: those of the values the gateway lists
    (``listing``, in its order), then those slips named (``named``: this definition's members of
    the scopes set), sorted."""
    game = definition_id == DEFAULT_ID
    out: list[str] = []
    for label in listing:
        kind, _, value = label.partition(":")
        if kind in kinds:
            out.append(label if game else defined_scope(definition_id, kind, value))
    seen = set(out)
    out += sorted(s for s in named if s not in seen and _kind(s) in kinds)
    return out


def _kind(scope: str) -> str:
    """``region`` of ``region:eu`` and of ``board:tower:region:eu``."""
    named = scope_in(scope)
    return named[0] if named else scope.partition(":")[0]
