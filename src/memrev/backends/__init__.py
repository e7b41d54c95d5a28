"""Storage backends: narrow primitives over one database, one module each.

A location is a folder, an SQLite file, or a URL ``SCHEME://...``. A URL is
opened by the factory registered for its scheme (:func:`register`); memrev
registers its own the same way: ``sqlite://``, ``postgresql://`` (and
``postgres://``), ``memory://``. A scheme nobody registered is refused with
:class:`~memrev.errors.UnknownBackend`, never taken for a folder name.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path

from ..errors import UnknownBackend
from .base import Backend, BackendBase, BlobRow, HeadRow

STORE_FILE = "memrev.db"
# A working-tree store keeps its history here, so the folder itself holds only the plain files.
WORKTREE_DIR = ".memrev"
_SQLITE = "sqlite://"
# RFC 3986 scheme syntax; two characters at least, so "C://..." stays a Windows path.
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]+)://")

BackendFactory = Callable[..., Backend]  # factory(url, *, durability: str, create: bool) -> Backend
_FACTORIES: dict[str, BackendFactory] = {}


def register(scheme: str, factory: BackendFactory) -> None:
    """Open locations ``scheme://...`` with ``factory(url, *, durability=..., create=...)``.

    ``url`` is the whole location as given. The factory returns an open
    :class:`~memrev.backends.base.BackendBase`; with ``create=False`` it must
    create nothing and raise :class:`~memrev.errors.NoStore` when no store is
    there. Registering a scheme again replaces its factory (a test may put its
    own in for a while); the scheme is case-insensitive, as in URLs.
    """
    if not isinstance(scheme, str) or not _SCHEME.fullmatch(scheme + "://"):
        raise ValueError(f"not a URL scheme: {scheme!r} (letters, digits, '+', '-', '.'; at least two)")
    if not callable(factory):
        raise TypeError("factory must be callable: factory(url, *, durability, create) -> Backend")
    _FACTORIES[scheme.lower()] = factory


def unregister(scheme: str) -> None:
    """Forget the factory of ``scheme`` (locations with it become :class:`UnknownBackend`)."""
    _FACTORIES.pop(scheme.lower(), None)


def scheme_of(location: str | os.PathLike[str]) -> str | None:
    """The lower-cased scheme of a URL location, ``None`` for a folder or file."""
    match = _SCHEME.match(os.fspath(location))
    return None if match is None else match.group(1).lower()


def is_url(location: str | os.PathLike[str]) -> bool:
    """A location that names a database by URL, not a folder or file (no working tree, no adoption)."""
    return scheme_of(location) is not None


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

    A URL other than ``sqlite://`` is returned as given. ``sqlite://PATH`` is the file
    ``PATH`` (``sqlite:///abs/x.db`` is absolute; extra leading slashes are one).
    An existing file is itself the SQLite store (``memrev --store backup.db``).
    A folder's store is where :func:`folder_store_file` says.
    """
    loc = os.fspath(location)
    scheme = scheme_of(loc)
    if scheme not in (None, "sqlite"):
        return loc
    if scheme == "sqlite":
        path = loc[len(_SQLITE) :]
        return Path("/" + path.lstrip("/") if path.startswith("/") else path)
    folder = Path(loc)
    if folder.is_file():
        return folder
    return folder_store_file(folder, worktree=worktree)


def open_backend(
    location: str | os.PathLike[str], *, durability: str = "normal", create: bool = True, worktree: bool = False
) -> Backend:
    """The backend of a folder (``DiskKnowledgeStore`` style), an SQLite file, or a URL
    whose scheme is registered (``sqlite:///path``, ``postgresql://...``, ``memory://name``).

    ``create=False`` never creates anything: without a memrev store at the
    location it raises :class:`~memrev.errors.NoStore`. ``worktree`` only says
    where a new folder store goes (inside ``.memrev/``). An unregistered scheme
    raises :class:`~memrev.errors.UnknownBackend`, creating nothing.
    """
    loc = os.fspath(location)
    scheme = scheme_of(loc)
    if scheme is None:
        from .sqlite import SqliteBackend

        path = Path(locate(loc, worktree=worktree))
        if not create or path.is_file() or os.path.isfile(loc):
            return SqliteBackend(path, durability=durability, create=create, location=loc)
        # A new folder store: where it goes is decided, and the file made, under a lock, so
        # processes opening one new folder at once (one with worktree=True) make one store.
        with _folder_lock(loc):
            path = Path(locate(loc, worktree=worktree))
            return SqliteBackend(path, durability=durability, create=create, location=loc)
    factory = _FACTORIES.get(scheme)
    if factory is None:
        known = ", ".join(f"{s}://" for s in sorted(_FACTORIES))
        raise UnknownBackend(f"no backend is registered for {scheme}:// (known: {known}); nothing was created")
    return factory(loc, durability=durability, create=create)


@contextlib.contextmanager
def _folder_lock(folder: str) -> Iterator[None]:
    """An exclusive ``flock`` on the folder itself (made if missing), held while deciding and
    creating its store: no lock file to plant a link at, and the folder opened without
    following a link at its last component (``O_NOFOLLOW``). Without ``fcntl``, or when the
    folder cannot be made or opened, nothing is locked and the store's own errors speak."""
    try:
        import fcntl
    except ImportError:  # not POSIX
        yield
        return
    fd = None
    with contextlib.suppress(OSError):
        os.makedirs(folder, exist_ok=True)
        flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        fd = os.open(os.path.realpath(folder), flags)
    if fd is None:
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


# The built-in backends, registered as a third party's would be. Each imports
# its module only when a location needs it (psycopg is an optional dependency).


def _open_sqlite(url: str, *, durability: str = "normal", create: bool = True) -> Backend:
    from .sqlite import SqliteBackend

    return SqliteBackend(Path(locate(url)), durability=durability, create=create)


def _open_postgres(url: str, *, durability: str = "normal", create: bool = True) -> Backend:
    from .postgres import PostgresBackend  # optional dependency

    return PostgresBackend(url, durability=durability, create=create)


def _open_memory(url: str, *, durability: str = "normal", create: bool = True) -> Backend:
    from .memory import MemoryBackend

    return MemoryBackend.from_url(url, durability=durability, create=create)


register("sqlite", _open_sqlite)
register("postgresql", _open_postgres)
register("postgres", _open_postgres)
register("memory", _open_memory)

__all__ = [
    "STORE_FILE",
    "WORKTREE_DIR",
    "Backend",
    "BackendBase",
    "BackendFactory",
    "BlobRow",
    "HeadRow",
    "folder_store_file",
    "is_url",
    "locate",
    "open_backend",
    "register",
    "scheme_of",
    "unregister",
]
