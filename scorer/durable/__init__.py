"""The durable score log (store.py says what it keeps): ``open_store(url)`` picks the backend
from the URL::

store = open_store("sqlite:///var/scores.db")        # embedded: one file, WAL
store = open_store("postgresql://lb@db.internal/lb")  # production
await store.open()
"""

from __future__ import annotations

from urllib.parse import urlsplit

from .fold import ActionFolder, Folder
from .records import Action, BoardRow, Compaction, Record, Slip
from .store import Store, StoreError

__all__ = [
    "Action",
    "ActionFolder",
    "BoardRow",
    "Compaction",
    "Folder",
    "Record",
    "Slip",
    "Store",
    "StoreError",
    "check_url",
    "open_store",
]

SCHEMES = ("sqlite", "postgresql", "postgres")


def check_url(url: str) -> str | None:
    """What is wrong with a store URL, or None (for the settings check)."""
    parts = urlsplit(url)
    if parts.scheme not in SCHEMES:
        return f"expected sqlite:///<path> or postgresql://..., got scheme {parts.scheme or '(none)'!r}"
    if parts.scheme == "sqlite" and not parts.path.lstrip("/"):
        return "sqlite:///<path>: the path of the database file is missing"
    return None


def open_store(url: str) -> Store:
    """The backend for ``url`` (not yet opened). ``sqlite:///var/x.db`` is relative to the
    working directory, ``sqlite:////srv/x.db`` absolute."""
    problem = check_url(url)
    if problem:
        raise StoreError(problem)
    parts = urlsplit(url)
    if parts.scheme == "sqlite":
        from .sqlite import SQLiteStore

        return SQLiteStore(parts.path[1:])
    from .postgres import PostgresStore

    return PostgresStore(url)
