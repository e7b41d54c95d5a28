"""How a store handle is opened: its backend (or the one it shares), an adopted
folder, its working tree.

``Store`` opens with :func:`open_repository`, and so do the CLI's read-only
commands (``memrev.store.reads``), which run without an event loop: this
module imports no asyncio, so ``memrev log`` does not pay for it at start
(issue 26).
"""

from __future__ import annotations

import os
import threading

from .. import errors
from ..backends import Backend, is_url, open_backend
from ..folders import adopt
from ..folders import worktree as _worktree
from ..repo import revisions
from ..repo.repository import Repository


class SharedBackend:
    """A backend passed in with ``backend=``, shared by the handles ``on_branch`` opens from it.

    The handles share its one connection, so they share one lock (work of one
    never runs inline while another's holds the connection), and the last of
    them to close closes the backend.
    """

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.lock = threading.Lock()
        self._handles = 0
        self._count = threading.Lock()

    def join(self) -> None:
        with self._count:
            self._handles += 1

    def leave(self) -> bool:
        """One handle closed; True when it was the last (the caller closes the backend)."""
        with self._count:
            self._handles -= 1
            return self._handles == 0


def shared_backend(
    location: str | os.PathLike[str] | None, backend: Backend | SharedBackend | None, worktree: bool | None
) -> SharedBackend | None:
    """Exactly one of ``location`` and ``backend``; a passed-in backend has no folder."""
    if (location is None) == (backend is None):
        raise TypeError("a store takes exactly one of location and backend=")
    if backend is None:
        return None
    if worktree:
        raise ValueError("a working tree needs a folder location, not backend=")
    return backend if isinstance(backend, SharedBackend) else SharedBackend(backend)


def open_repository(
    location: str, shared: SharedBackend | None, *, branch: str, durability: str, create: bool,
    worktree: bool | None, poll_interval: float,
) -> tuple[Repository, _worktree.WorkTree | None]:
    """A handle's repository (its backend opened, or the shared one joined; a folder with
    files and no history adopted) and the working tree it takes, if it keeps one."""
    tree_branch = tree_branch_after_open(location, shared, worktree, branch)
    if shared is not None:
        shared.join()
        repo = Repository(shared.backend)
    else:
        repo = Repository(open_backend(location, durability=durability, create=create, worktree=bool(worktree)))
    is_folder = shared is None and not is_url(location) and os.path.isdir(location)
    if create and is_folder and not repo.backend.list_refs(revisions.HEAD_PREFIX):
        # A folder that holds files but no history: its files become the first commit.
        adopt.adopt(repo, location, branch)
    was_following = None
    if worktree is not None and shared is None:
        was_following = _worktree.persisted_branch(location)
        _worktree.set_mode(location, branch if worktree else None)
    tree = None
    if tree_branch == branch:
        try:
            tree = _worktree.acquire(location, branch, durability, poll_interval)
        except errors.WorkTreeDiverged:
            _worktree.set_mode(location, was_following)  # refused: the mode stays as it was
            repo.backend.close()
            raise
        except BaseException:
            repo.backend.close()
            raise
    return repo, tree


def tree_branch_after_open(location: str, shared: SharedBackend | None, worktree: bool | None, branch: str) -> str | None:
    """The branch the folder's working tree follows after this open, ``None`` if it has none."""
    if shared is not None:
        return None
    if is_url(location):
        if worktree:
            raise ValueError("a working tree needs a folder location, not a database URL")
        return None
    persisted = _worktree.persisted_branch(location)
    if worktree and persisted not in (None, branch):
        raise errors.MemrevError(
            f"the working tree of {location} follows branch {persisted!r}; "
            f"open it with worktree=False first to make it follow {branch!r}"
        )
    if worktree is None:
        return persisted
    return branch if worktree else None
