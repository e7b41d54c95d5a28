"""Storage backends: narrow primitives over one database, one module each."""

from __future__ import annotations

import os
from pathlib import Path

from .base import Backend, BlobRow

STORE_FILE = "memrev.db"
# A working-tree store keeps its history here, so the folder itself holds only the plain files.
WORKTREE_DIR = ".memrev"
_POSTGRES = ("postgresql://", "postgres://")
_SQLITE = "sqlite://"


def is_url(location: str | os.PathLike[str]) -> bool:
    return os.fspath(location).startswith((*_POSTGRES, _SQLITE))


def folder_store_file(folder: str | os.PathLike[str], *, worktree: bool = False) -> Path:
    """The one place that says where a folder's store file is.

    An existing store wins: ``folder/.memrev/memrev.db`` (created as a working
    tree), else ``folder/memrev.db`` (created without one; it stays there when
    the working tree is turned on later). A new store goes inside ``.memrev/``
    when it is created as a working tree, beside the files otherwise.
    """
    inside, beside = Path(folder) / WORKTREE_DIR / STORE_FILE, Path(folder) / STORE_FILE
    if inside.exists():
        return inside
    if beside.exists():
        return beside
    return inside if worktree else beside


def locate(location: str | os.PathLike[str], *, worktree: bool = False) -> str | Path:
    """Where the store named by ``location`` lives, or would be created.

    A PostgreSQL URL is returned as given. ``sqlite://PATH`` is the file
    ``PATH`` (``sqlite:///abs/x.db`` is absolute; extra leading slashes are one).
    An existing file is itself the SQLite store (``memrev --store backup.db``).
    A folder's store is where :func:`folder_store_file` says.
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
    return folder_store_file(folder, worktree=worktree)


def open_backend(
    location: str | os.PathLike[str], *, durability: str = "normal", create: bool = True, worktree: bool = False
) -> Backend:
    """The backend of a folder (``DiskKnowledgeStore`` style), an SQLite file,
    ``sqlite:///path`` or ``postgresql://...`` (see :func:`locate`).

    ``create=False`` never creates anything: without a memrev store at the
    location it raises :class:`~memrev.errors.NoStore`. ``worktree`` only says
    where a new folder store goes (inside ``.memrev/``).
    """
    where = locate(location, worktree=worktree)
    if isinstance(where, str):
        from .postgres import PostgresBackend  # optional dependency

        return PostgresBackend(where, durability=durability, create=create)
    from .sqlite import SqliteBackend

    shown = None if os.fspath(location).startswith(_SQLITE) else os.fspath(location)
    return SqliteBackend(where, durability=durability, create=create, location=shown)


__all__ = ["STORE_FILE", "WORKTREE_DIR", "Backend", "BlobRow", "folder_store_file", "is_url", "locate", "open_backend"]
