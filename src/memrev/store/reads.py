"""``Reader``: a read-only store handle without an event loop, for the CLI's reads.

``memrev log``, ``show``, ``diff``, ``history``, ``cat`` and ``ls`` only read, so they need none of
what ``Store`` adds for an agent (the event loop, the worker thread,
transactions, ``on_change``); importing it cost them asyncio and the store's
async modules, about a quarter of the command's start (issue 26). A
``Reader`` opens exactly as ``Store(location, branch=branch, create=False)``
does (:func:`memrev.store.opening.open_repository`: the same backend, the same
working-tree reconcile and lock) and runs the same synchronous work
(``memrev.store.work``) on the caller's thread, as the ``Store`` would in its
worker. Nothing here imports asyncio.
"""

from __future__ import annotations

import builtins
import os
from collections.abc import Sequence
from datetime import datetime
from types import TracebackType

from .. import history
from ..core.paths import normalize
from ..folders import worktree as _worktree
from ..history import pickaxe
from ..repo import purged, revisions
from ..repo.repository import Commit, FileChange
from . import work
from .opening import open_repository


class Reader:
    """A store opened for reading only; ``close()`` (or ``with``) releases it."""

    def __init__(self, location: str | os.PathLike[str], *, branch: str = "main") -> None:
        revisions.check_ref_name(branch)  # as Store's open does, before anything is opened
        self.location = os.fspath(location)
        self.branch_name = branch
        self._repo, self._worktree = open_repository(
            self.location, None, branch=branch, durability="normal", create=False, worktree=None, poll_interval=1.0,
        )
        self._closed = False

    def close(self) -> None:
        """The working tree released and the backend closed, as ``Store.close()`` does. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._worktree is not None:
                _worktree.release(self._worktree)
                self._worktree = None
        finally:
            self._repo.backend.close()

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()

    # Each method is the one of ``Store`` with its name, outside a transaction.

    def head(self) -> str | None:
        head = self._repo.head(self.branch_name)
        return None if head is None else head.hex()

    def branches(self) -> dict[str, str]:
        return history.branches(self._repo)

    def read(self, path: str, *, rev: str | None = None) -> str | None:
        data = work.file_bytes(self._repo, self.branch_name, normalize(path), rev)
        return None if data is None else data.decode("utf-8")

    def list(self, path: str = "/", *, rev: str | None = None) -> builtins.list[str]:
        norm = normalize(path)
        return work.visible(norm, self._repo.list_at(work.commit_for(self._repo, self.branch_name, rev), norm))

    def exists(self, path: str, *, rev: str | None = None) -> bool:
        norm = normalize(path)
        if work.file_bytes(self._repo, self.branch_name, norm, rev) is not None:
            return True
        return work.exists_at(self._repo, self.branch_name, norm, rev)

    def log(
        self,
        path: str | None = None,
        *,
        limit: int | None = None,
        rev: str | None = None,
        contains: str | None = None,
        matching: str | None = None,
        agent: str | None = None,
        tool: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        ignore_case: bool = False,
    ) -> builtins.list[Commit]:
        norm = None if path is None else normalize(path)
        wanted = pickaxe.LogFilter(contains, matching, agent, tool, since, until, ignore_case)
        return work.any_log(self._repo, self.branch_name, norm, limit, rev, wanted)

    def log_all(
        self,
        *,
        limit: int | None = None,
        contains: str | None = None,
        matching: str | None = None,
        agent: str | None = None,
        tool: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        ignore_case: bool = False,
    ) -> builtins.list[Commit]:
        wanted = pickaxe.LogFilter(contains, matching, agent, tool, since, until, ignore_case)
        return work.log_all(self._repo, limit, wanted)

    def resolve(self, rev: str) -> str:
        return self._repo.resolve(rev, self.branch_name).hex()

    def last_change(self, path: str, *, rev: str | None = None) -> tuple[str | None, str]:
        return work.last_change(self._repo, self.branch_name, normalize(path), rev)

    def history(self, path: str, *, limit: int | None = None) -> builtins.list[tuple[Commit, int | None]]:
        norm = normalize(path)
        return work.with_sizes(self._repo, work.log(self._repo, self.branch_name, norm, limit, None), norm)

    def show(self, rev: str = "HEAD") -> Commit:
        return self._repo.commit_info(self._repo.resolve(rev, self.branch_name))

    def diff(self, rev_a: str | None, rev_b: str, path: str | Sequence[str] | None = None) -> builtins.list[FileChange]:
        wanted = None if path is None else [normalize(p) for p in ([path] if isinstance(path, str) else path)]
        return work.diff(self._repo, self.branch_name, rev_a, rev_b, wanted)

    def rewritten(self, rev: str) -> purged.Rewritten | None:
        return purged.rewritten(self._repo, rev)
