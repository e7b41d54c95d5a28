"""``VersionedStore``: an AG2 ``KnowledgeStore`` whose every mutation is a commit.

The async methods call the synchronous :class:`~memrev.repo.Repository`
inline: an indexed SQLite read or a small WAL commit takes tens of
microseconds, less than a hop to a worker thread would, and ag2's own
``DiskKnowledgeStore`` does its file I/O the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import os
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from . import errors
from .backends import open_backend
from .core import trees
from .core.paths import is_under, normalize
from .repo import Commit, FileChange, Repository

ChangeCallback = Callable[[str], Awaitable[None]]

# Handles on the same store in this process, so a commit through one reaches
# the others' subscribers at once instead of at their next poll.
_SIBLINGS: dict[str, weakref.WeakSet[VersionedStore]] = {}


def _encode(content: object) -> bytes:
    if not isinstance(content, str):
        raise errors.InvalidContent(f"content must be str, not {type(content).__name__}")
    try:
        return content.encode("utf-8")
    except UnicodeEncodeError as e:
        raise errors.InvalidContent(f"content is not valid Unicode text: {e.reason} at {e.start}") from None


def _check_meta(message: object, meta: object) -> None:
    """Commit metadata is refused before anything is staged: a str message, a JSON object of meta."""
    if message is not None and not isinstance(message, str):
        raise errors.InvalidContent(f"message must be str, not {type(message).__name__}")
    if meta is None:
        return
    if not isinstance(meta, dict) or not all(isinstance(k, str) for k in meta):
        raise errors.InvalidContent("meta must be a dict with str keys")
    try:
        json.dumps(meta, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise errors.InvalidContent(f"meta must be JSON-serializable: {e}") from None


class _Transaction:
    """Mutations staged by one task; ``ops`` become one commit on exit."""

    def __init__(self, store: VersionedStore, message: str | None, meta: dict[str, Any] | None) -> None:
        self.store = store
        self.message = message
        self.meta = meta
        self.ops: list[tuple] = []
        self.view: dict[str, bytes | None] = {}  # path -> content after the staged ops; None: deleted


class _Subscription:
    def __init__(self, store: VersionedStore, prefix: str, callback: ChangeCallback) -> None:
        self._store, self.prefix, self.callback = store, prefix, callback

    async def close(self) -> None:
        self._store._unsubscribe(self)


class VersionedStore:
    """A versioned, path-keyed knowledge store (see ``docs/api.md``)."""

    def __init__(
        self,
        location: str | os.PathLike[str],
        *,
        branch: str = "main",
        author: str = "memrev",
        durability: str = "normal",
        poll_interval: float = 1.0,
    ) -> None:
        if durability not in ("normal", "full"):
            raise ValueError("durability must be 'normal' or 'full'")
        self._location = os.fspath(location)
        self._repo = Repository(open_backend(self._location, durability=durability))
        self._branch = branch
        self._author = author
        self._poll_interval = poll_interval
        self._closed = False
        self._txn: contextvars.ContextVar[_Transaction | None] = contextvars.ContextVar("memrev_txn", default=None)
        self._subs: list[_Subscription] = []
        self._seen: bytes | None = None
        self._poller: asyncio.Task[None] | None = None
        self._key = os.path.realpath(self._location) + "#" + branch
        _SIBLINGS.setdefault(self._key, weakref.WeakSet()).add(self)

    @property
    def branch(self) -> str:
        return self._branch

    @property
    def repo(self) -> Repository:
        return self._live()

    def _live(self) -> Repository:
        if self._closed:
            raise errors.StoreClosed("this VersionedStore is closed")
        return self._repo

    # ------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Release the database connection and stop change polling. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._poller is not None:
            self._poller.cancel()
            self._poller = None
        self._subs.clear()
        self._repo.backend.close()

    async def __aenter__(self) -> VersionedStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ revisions

    def _commit_for(self, rev: str | None) -> bytes | None:
        repo = self._live()
        return repo.head(self._branch) if rev is None else repo.resolve(rev, self._branch)

    async def resolve(self, rev: str) -> str:
        return self._live().resolve(rev, self._branch).hex()

    # ------------------------------------------------------------ reading

    def _bytes(self, path: str, rev: str | None) -> bytes | None:
        txn = self._txn.get()
        if rev is None and txn is not None and path in txn.view:
            return txn.view[path]
        repo = self._live()
        if rev is None:
            if txn is not None and any(is_under(path, p) for p, v in txn.view.items() if v is None):
                return None
            row = repo.head_entry(self._branch, path)
            return None if row is None else repo.content(row.blob)
        entry = repo.entry_at(repo.resolve(rev, self._branch), path)
        return None if entry is None else repo.content(entry.oid)

    async def read(self, path: str, *, rev: str | None = None) -> str | None:
        data = self._bytes(normalize(path), rev)
        return None if data is None else data.decode("utf-8")

    async def list(self, path: str = "/", *, rev: str | None = None) -> list[str]:
        norm = normalize(path)
        txn = self._txn.get()
        if rev is None and txn is not None and txn.view:
            return self._txn_list(txn, norm)
        return self._live().list_at(self._commit_for(rev), norm)

    def _txn_list(self, txn: _Transaction, path: str) -> list[str]:
        repo = self._live()
        prefix = path.rstrip("/") + "/"
        files = {r.path for r in repo.backend.head_under(self._branch, path)}
        files = {f for f in files if self._bytes(f, None) is not None}
        files |= {p for p, v in txn.view.items() if v is not None and p.startswith(prefix)}
        names = set()
        for f in files:
            rest = f[len(prefix) :]
            names.add(rest.split("/")[0] + "/" if "/" in rest else rest)
        return sorted(names)

    async def exists(self, path: str, *, rev: str | None = None) -> bool:
        norm = normalize(path)
        if self._bytes(norm, rev) is not None:
            return True
        txn = self._txn.get()
        if rev is None and txn is not None and txn.view:
            return bool(self._txn_list(txn, norm))
        repo = self._live()
        if rev is None:
            return repo.backend.head_any_under(self._branch, norm)
        return repo.dir_exists_at(self._commit_for(rev), norm) if norm != "/" else bool(
            repo.list_at(self._commit_for(rev), "/")
        )

    async def read_range(self, path: str, start: int, end: int | None = None, *, rev: str | None = None) -> str:
        norm = normalize(path)
        repo = self._live()
        if rev is None and self._txn.get() is None:
            row = repo.head_entry(self._branch, norm)
            if row is None:
                return ""
            stop = row.size if end is None else min(end, row.size)
            if start >= stop:
                return ""
            return repo.content_range(row.blob, start, stop).decode("utf-8", errors="strict")
        data = self._bytes(norm, rev)
        if data is None:
            return ""
        stop = len(data) if end is None else min(end, len(data))
        return "" if start >= stop else data[start:stop].decode("utf-8", errors="strict")

    # ------------------------------------------------------------ writing

    async def write(self, path: str, content: str, *, message: str | None = None, meta: dict | None = None) -> None:
        norm, data = normalize(path), _encode(content)
        _check_meta(message, meta)
        await self._mutate(("write", norm, data), message, meta)

    async def append(self, path: str, content: str) -> int:
        norm, data = normalize(path), _encode(content)
        offsets = await self._mutate(("append", norm, data), None, None)
        return offsets[0]

    async def delete(self, path: str, *, message: str | None = None) -> None:
        norm = normalize(path)
        _check_meta(message, None)
        await self._mutate(("delete", norm), message, None)

    async def _mutate(self, op: tuple, message: str | None, meta: dict | None) -> list[int]:
        repo = self._live()
        txn = self._txn.get()
        if txn is not None:
            return [self._stage(txn, op)]
        result = repo.commit(self._branch, [op], author=self._author, message=message, meta=meta)
        if result.id is not None:
            await self._after_commit(result.parent, result.id, result.paths)
        elif op[0] != "delete":
            # No commit (same content, empty append), but ag2's stores report every
            # write and append to subscribers; so does this one.
            await self._dispatch([op[1]])
        return result.offsets

    def _stage(self, txn: _Transaction, op: tuple) -> int:
        kind, path = op[0], op[1]
        offset = 0
        if kind == "write":
            txn.view[path] = op[2]
        elif kind == "append":
            current = self._bytes(path, None) or b""
            offset = len(current)
            txn.view[path] = current + op[2]
        else:
            for p in [p for p in txn.view if is_under(p, path)]:
                txn.view[p] = None
            txn.view[path] = None
        txn.ops.append(op)
        return offset

    @contextlib.asynccontextmanager
    async def transaction(self, message: str | None = None, meta: dict | None = None) -> AsyncIterator[VersionedStore]:
        """Group the mutations made inside (by this task) into one commit, all or nothing."""
        if self._txn.get() is not None:
            raise RuntimeError("transactions do not nest")
        _check_meta(message, meta)
        self._live()
        txn = _Transaction(self, message, meta)
        token = self._txn.set(txn)
        try:
            yield self
        finally:
            self._txn.reset(token)
        if txn.ops:
            result = self._live().commit(self._branch, txn.ops, author=self._author, message=message, meta=meta)
            if result.id is not None:
                await self._after_commit(result.parent, result.id, result.paths)

    # ------------------------------------------------------------ change notification

    async def on_change(self, path: str, callback: ChangeCallback) -> _Subscription:
        self._live()
        sub = _Subscription(self, normalize(path), callback)
        self._subs.append(sub)
        if self._poller is None:
            self._seen = self._repo.head(self._branch)
            self._poller = asyncio.get_running_loop().create_task(self._poll(), name="memrev-poll")
        return sub

    def _unsubscribe(self, sub: _Subscription) -> None:
        with contextlib.suppress(ValueError):
            self._subs.remove(sub)
        if not self._subs and self._poller is not None:
            self._poller.cancel()
            self._poller = None

    async def _after_commit(self, parent: bytes | None, new: bytes, paths: list[str]) -> None:
        for store in list(_SIBLINGS.get(self._key, ())):
            if store._subs and not store._closed:
                missed: list[str] = []
                if store._seen != parent:
                    # Another process committed since this handle last looked: hand
                    # those changes over now, so the poller never sees ours again.
                    repo = store._repo
                    missed = [p for p, _, _ in trees.diff(repo, repo.root(store._seen), repo.root(parent))]
                store._seen = new
                await store._dispatch(missed + paths)

    async def _dispatch(self, paths: list[str]) -> None:
        for path in paths:
            for sub in list(self._subs):
                if is_under(path, sub.prefix):
                    try:
                        await sub.callback(path)
                    except Exception:  # a subscriber's failure must not undo or block a commit
                        pass

    async def _poll(self) -> None:
        """Find commits made by other processes: one ref read per interval, a tree diff on change."""
        wait = getattr(self._repo.backend, "wait_for_change", None)  # pushed (LISTEN/NOTIFY), not polled
        while not self._closed:
            if wait is None:
                await asyncio.sleep(self._poll_interval)
            else:
                await asyncio.to_thread(wait, self._poll_interval)
            if self._closed:
                return
            repo = self._repo
            head = repo.head(self._branch)
            if head == self._seen:
                continue
            old, self._seen = self._seen, head
            paths = [p for p, _, _ in trees.diff(repo, repo.root(old), repo.root(head))]
            await self._dispatch(paths)

    # ------------------------------------------------------------ history

    async def log(self, path: str | None = None, *, limit: int | None = None, rev: str | None = None) -> list[Commit]:
        repo = self._live()
        start = self._commit_for(rev)
        if start is None:
            return []
        if path is None or normalize(path) == "/":
            return repo.log(start, limit)
        norm = normalize(path)
        if repo.entry_at(start, norm) is None and repo.dir_exists_at(start, norm):
            return [c for c in repo.log(start) if any(is_under(p, norm) for p in c.paths)][:limit]
        return repo.path_log(norm, repo.path_start(norm, start, self._branch), limit)

    async def fsck(self) -> list[str]:
        """Verify every object, reference and derived index; returns the problems found."""
        return self._live().fsck()

    async def show(self, rev: str = "HEAD") -> Commit:
        repo = self._live()
        return repo.commit_info(repo.resolve(rev, self._branch))

    async def diff(self, rev_a: str, rev_b: str, path: str | None = None) -> list[FileChange]:
        repo = self._live()
        a, b = repo.resolve(rev_a, self._branch), repo.resolve(rev_b, self._branch)
        return repo.diff(a, b, None if path is None else normalize(path))
