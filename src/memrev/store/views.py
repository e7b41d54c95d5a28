"""``RevisionView``: a read-only store frozen at one commit (``store.at(rev)``)."""

from __future__ import annotations

import builtins
from typing import TYPE_CHECKING, Protocol

from .. import errors
from .notify import ChangeCallback

if TYPE_CHECKING:
    from ..repo.repository import Commit


class Readable(Protocol):
    """What a view reads through: a ``Store`` (named here without importing it, which imports this module)."""

    async def read(self, path: str, *, rev: str | None = None) -> str | None: ...
    async def list(self, path: str = "/", *, rev: str | None = None) -> builtins.list[str]: ...
    async def exists(self, path: str, *, rev: str | None = None) -> bool: ...
    async def read_range(self, path: str, start: int, end: int | None = None, *, rev: str | None = None) -> str: ...
    async def log(self, path: str | None = None, *, limit: int | None = None, rev: str | None = None) -> builtins.list[Commit]: ...


class _NoChanges:
    async def close(self) -> None:
        return None


class RevisionView:
    """A read-only ``KnowledgeStore`` frozen at one commit (``store.at(rev)``).

    Hand it to an AG2 agent to replay against a past memory: reads answer as
    of that commit, and any mutation raises ``ReadOnlyRevision`` instead of
    silently going nowhere. ``VersionedStore.at`` gives a subclass that is an
    AutoGen ``Memory`` too (``memrev.autogen.MemoryRevisionView``).
    """

    def __init__(self, store: Readable, commit: bytes) -> None:
        self._store = store
        self.commit = commit.hex()

    async def read(self, path: str) -> str | None:
        return await self._store.read(path, rev=self.commit)

    async def list(self, path: str = "/") -> builtins.list[str]:
        return await self._store.list(path, rev=self.commit)

    async def exists(self, path: str) -> bool:
        return await self._store.exists(path, rev=self.commit)

    async def read_range(self, path: str, start: int, end: int | None = None) -> str:
        return await self._store.read_range(path, start, end, rev=self.commit)

    async def log(self, path: str | None = None, *, limit: int | None = None) -> builtins.list[Commit]:
        return await self._store.log(path, limit=limit, rev=self.commit)

    async def on_change(self, path: str, callback: ChangeCallback) -> _NoChanges:
        return _NoChanges()  # a revision never changes

    def _refuse(self, what: str) -> None:
        raise errors.ReadOnlyRevision(
            f"cannot {what}: this is a read-only view of revision {self.commit[:10]}; "
            f"to run an agent on the memory of that revision, start a branch there and give the agent "
            f"that handle: await store.branch(NAME, at={self.commit!r})"
        )

    async def write(self, path: str, content: str) -> None:
        self._refuse(f"write {path}")

    async def append(self, path: str, content: str) -> int:
        self._refuse(f"append to {path}")
        return 0

    async def delete(self, path: str) -> None:
        self._refuse(f"delete {path}")
