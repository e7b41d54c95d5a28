"""Storage backends: narrow primitives over one database, one module each."""

from __future__ import annotations

import os
from pathlib import Path

from .base import Backend, BlobRow

STORE_FILE = "memrev.db"


def open_backend(location: str | os.PathLike[str], *, durability: str = "normal") -> Backend:
    """A folder (``DiskKnowledgeStore`` style), ``sqlite:///path`` or ``postgresql://...``."""
    loc = os.fspath(location)
    if loc.startswith(("postgresql://", "postgres://")):
        from .postgres import PostgresBackend  # optional dependency

        return PostgresBackend(loc, durability=durability)
    if loc.startswith("sqlite://"):
        path = Path(loc[len("sqlite://") :])
    else:
        path = Path(loc) / STORE_FILE
    from .sqlite import SqliteBackend

    return SqliteBackend(path, durability=durability)


__all__ = ["Backend", "BlobRow", "open_backend"]
