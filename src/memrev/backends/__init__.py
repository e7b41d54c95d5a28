"""Storage backends: narrow primitives over one database, one module each."""

from __future__ import annotations

import os
from pathlib import Path

from .base import Backend, BlobRow

STORE_FILE = "memrev.db"
# A folder in working-tree mode keeps its history here, out of the agent's files.
WORKTREE_DIR = ".memrev"
_POSTGRES = ("postgresql://", "postgres://")
_SQLITE = "sqlite://"


def locate(location: str | os.PathLike[str]) -> str | Path:
    """Where the store named by ``location`` lives, or would be created.

    A PostgreSQL URL is returned as given. ``sqlite://PATH`` is the file
    ``PATH`` (``sqlite:///abs/x.db`` is absolute; extra leading slashes are one).
    An existing file is itself the SQLite store (``memrev --store backup.db``).
    A folder's store is ``.memrev/memrev.db`` when the folder has ``.memrev/``
    (working-tree mode), else ``memrev.db`` in the folder.
    """
    loc = os.fspath(location)
    if loc.startswith(_POSTGRES):
        return loc
    if loc.startswith(_SQLITE):
        path = loc[len(_SQLITE) :]
        return Path("/" + path.lstrip("/") if path.startswith("/") else path)
    folder = Path(loc)
    if folder.is_file():
        return folder
    if (folder / WORKTREE_DIR).is_dir():
        return folder / WORKTREE_DIR / STORE_FILE
    return folder / STORE_FILE


def open_backend(location: str | os.PathLike[str], *, durability: str = "normal", create: bool = True) -> Backend:
    """The backend of a folder (``DiskKnowledgeStore`` style), an SQLite file,
    ``sqlite:///path`` or ``postgresql://...`` (see :func:`locate`).

    ``create=False`` never creates anything: without a memrev store at the
    location it raises :class:`~memrev.errors.NoStore`.
    """
    where = locate(location)
    if isinstance(where, str):
        from .postgres import PostgresBackend  # optional dependency

        return PostgresBackend(where, durability=durability, create=create)
    from .sqlite import SqliteBackend

    shown = None if os.fspath(location).startswith(_SQLITE) else os.fspath(location)
    return SqliteBackend(where, durability=durability, create=create, location=shown)


__all__ = ["Backend", "BlobRow", "STORE_FILE", "WORKTREE_DIR", "locate", "open_backend"]
