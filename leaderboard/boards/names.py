"""Which board a name means (pure). Every board belongs to a definition: the game's own boards
are the definition ``default`` kept per scope (``global``, ``region:<r>``, ``mode:<m>``, as the
slips name them), every other definition is one board, named ``board:<id>``. Keys, channels and
replies name a board by its scope (keys.py), so nothing a user sees changes; what a board keeps
(windows, top N, rank mode, display) is read from its definition alike.
"""

from __future__ import annotations

from ..keys import DEFINED, GLOBAL_SCOPE, defined_of, scope_label
from .definition import DEFAULT_ID

# A board as it is published and watched: (window, scope), whose current period a channel carries
# (the publisher's records, a gateway's subscriptions).
LiveBoard = tuple[str, str]


def definition_of(scope: str) -> str:
    """The id of the definition a board's scope belongs to: ``board:tower`` is ``tower``'s,
    ``global``, ``region:eu`` and ``mode:duo`` the game's ``default``."""
    return defined_of(scope) or DEFAULT_ID


def home_scope(definition_id: str) -> str:
    """The scope of a definition's board that exists as soon as it is defined (``global`` for
    the game's ``default``, whose other scopes exist once a slip names them; ``board:<id>``)."""
    return GLOBAL_SCOPE if definition_id == DEFAULT_ID else scope_label(DEFINED, definition_id)


def home_of(scope: str) -> str:
    """The home scope of the definition ``scope`` belongs to: ``global`` for the game's, the
    scope itself for a defined board's (one board: its scope is its home)."""
    return GLOBAL_SCOPE if definition_of(scope) == DEFAULT_ID else scope
