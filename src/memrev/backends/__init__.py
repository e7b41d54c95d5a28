"""Storage backends: narrow primitives over one database, one module each."""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import NoStore
from .base import Backend, BlobRow

STORE_FILE = "memrev.db"
# A working-tree store keeps its history here, so the folder itself holds only the plain files.
WORKTREE_DIR = ".memrev"


def is_url(location: str | os.PathLike[str]) -> bool:
    return os.fspath(location).startswith(("postgresql://", "postgres://", "sqlite://"))


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


def open_backend(
    location: str | os.PathLike[str], *, durability: str = "normal", create: bool = True, worktree: bool = False
) -> Backend:
    """A folder (``DiskKnowledgeStore`` style), ``sqlite:///path`` or ``postgresql://...``.

    With ``create=False`` a missing SQLite store raises ``NoStore`` instead of being created.
    """
    loc = os.fspath(location)
    if loc.startswith(("postgresql://", "postgres://")):
        from .postgres import PostgresBackend  # optional dependency

        return PostgresBackend(loc, durability=durability)
    if loc.startswith("sqlite://"):
        path = Path(loc[len("sqlite://") :])
    else:
        path = folder_store_file(loc, worktree=worktree)
    if not create and not path.exists():
        raise NoStore(f"no memrev store at {loc}")
    from .sqlite import SqliteBackend

    return SqliteBackend(path, durability=durability)


__all__ = ["STORE_FILE", "WORKTREE_DIR", "Backend", "BlobRow", "folder_store_file", "is_url", "open_backend"]
