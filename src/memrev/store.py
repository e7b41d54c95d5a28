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
import io
import json
import os
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime
from typing import Any

from . import browse, errors, history, pickaxe, provenance
from autogen_core.memory import Memory

from .autogen import CLOSED, Closed, MemoryMixin
from .backends import open_backend
from .core import trees
from .core.paths import is_under, normalize, split
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


def _file_path(path: object) -> str:
    norm = normalize(path)
    if norm == "/":
        raise errors.InvalidPath(f"{path!r} names the root directory, which cannot hold content")
    return norm


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


class VersionedStore(MemoryMixin):
    """A versioned, path-keyed knowledge store (see ``docs/api.md``).

    Also an AutoGen ``Memory`` (``MemoryMixin``, ``docs/autogen.md``): ``add``, ``query``,
    ``update_context`` and ``clear`` act on the memory named ``"default"``;
    ``store.memory(name)`` gives a named one.
    """

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
        history._check_ref_name(branch)
        self._location = os.fspath(location)
        self._durability = durability
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
    def branch_name(self) -> str:
        """The branch this handle reads and commits to (``branch()`` creates branches)."""
        return self._branch

    @property
    def location(self) -> str:
        return self._location

    @property
    def author(self) -> str:
        return self._author

    @property
    def in_transaction(self) -> bool:
        """True inside ``transaction()`` opened by this task: mutations join its commit."""
        return self._txn.get() is not None

    async def head(self) -> str | None:
        """The commit id at the tip of this handle's branch, ``None`` before the first commit."""
        head = self._live().head(self._branch)
        return None if head is None else head.hex()

    @property
    def repo(self) -> Repository:
        return self._live()

    def _live(self) -> Repository:
        if self._closed:
            raise errors.StoreClosed("this VersionedStore is closed")
        return self._repo

    # ------------------------------------------------------------ lifecycle

    def close(self) -> Closed:
        """Release the database connection and stop change polling. Idempotent.

        Synchronous; returns an awaitable, so AutoGen's ``await memory.close()`` works too.
        """
        if self._closed:
            return CLOSED
        self._closed = True
        if self._poller is not None:
            self._poller.cancel()
            self._poller = None
        self._subs.clear()
        self._repo.backend.close()
        return CLOSED

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
            entry = repo.entry_at(repo.head(self._branch), path)
            return None if entry is None else repo.content(entry.oid)
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
        head = repo.head(self._branch)
        under = trees.find_dir(repo, repo.root(head), split(path)) if head else None
        files = {p for p, _ in trees.walk(repo, under, "" if path == "/" else path)} if under else set()
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
        commit = self._commit_for(rev)
        if norm == "/":
            return bool(self._live().list_at(commit, "/"))
        return self._live().dir_exists_at(commit, norm)

    async def read_range(self, path: str, start: int, end: int | None = None, *, rev: str | None = None) -> str:
        norm = normalize(path)
        repo = self._live()
        if rev is None and self._txn.get() is None:
            entry = repo.entry_at(repo.head(self._branch), norm)
            if entry is None:
                return ""
            stop = entry.size if end is None else min(end, entry.size)
            if start >= stop:
                return ""
            return repo.content_range(entry.oid, start, stop).decode("utf-8", errors="strict")
        data = self._bytes(norm, rev)
        if data is None:
            return ""
        stop = len(data) if end is None else min(end, len(data))
        return "" if start >= stop else data[start:stop].decode("utf-8", errors="strict")

    # ------------------------------------------------------------ writing

    async def write(self, path: str, content: str, *, message: str | None = None, meta: dict | None = None) -> None:
        norm, data = _file_path(path), _encode(content)
        _check_meta(message, meta)
        await self._mutate(("write", norm, data), message, meta)

    async def append(self, path: str, content: str) -> int:
        norm, data = _file_path(path), _encode(content)
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
        meta = provenance.commit_meta(self, [op[1]], meta)
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
    async def transaction(
        self, message: str | None = None, meta: dict | None = None, *, expect_head: str | None | bool = False
    ) -> AsyncIterator[VersionedStore]:
        """Group the mutations made inside (by this task) into one commit, all or nothing.

        With ``expect_head`` (a commit id, or ``None`` for a branch with no
        commits yet) the commit is made only if the branch still points there;
        otherwise ``ConcurrentUpdate`` is raised and nothing is written, so a
        caller can recompute and retry (optimistic concurrency).
        """
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
            expected = expect_head if expect_head in (False, None) else bytes.fromhex(expect_head)  # type: ignore[arg-type]
            meta = provenance.commit_meta(self, [op[1] for op in txn.ops], meta)
            result = self._live().commit(
                self._branch, txn.ops, author=self._author, message=message, meta=meta, expect_head=expected
            )
            if result.id is not None:
                await self._after_commit(result.parent, result.id, result.paths)

    def provenance(self, **fields: Any) -> contextlib.AbstractAsyncContextManager[dict[str, Any]]:
        """``async with store.provenance(agent=..., turn=...):`` every commit this task makes inside
        carries these fields in ``meta``; explicit ``meta`` wins (``docs/provenance.md``)."""
        return provenance.provenance(**fields)

    def ag2_plugin(self, agent: str, *, history_tools: bool = False) -> Any:
        """An ag2 ``Plugin`` recording provenance on this store's commits (``memrev.ag2.provenance``)."""
        from .ag2 import provenance as ag2_provenance  # ag2 is imported only by those who use it

        return ag2_provenance(self, agent=agent, history_tools=history_tools)

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
            try:
                repo = self._repo
                head = repo.head(self._branch)
                if head == self._seen:
                    continue
                paths = [p for p, _, _ in trees.diff(repo, repo.root(self._seen), repo.root(head))]
            except Exception:  # the database is away for a moment: look again next time
                await asyncio.sleep(self._poll_interval)
                continue
            self._seen = head
            await self._dispatch(paths)

    # ------------------------------------------------------------ history

    async def log(
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
    ) -> list[Commit]:
        """Commits newest first, of the store or of ``path``, optionally filtered (``docs/provenance.md``).

        ``contains``: the number of occurrences of that text in a file changed
        (git ``-S``); ``matching``: a removed or added line matches that regex
        (git ``-G``); ``agent``/``tool``: provenance fields; ``since``/``until``:
        commit time. Filtering reads only the commits that touched ``path``.
        """
        wanted = pickaxe.LogFilter(contains, matching, agent, tool, since, until)
        if wanted.active:
            norm = None if path is None or normalize(path) == "/" else normalize(path)
            candidates = await self.log(path, rev=rev)
            return pickaxe.select(self._live(), candidates, norm, wanted, limit)
        repo = self._live()
        start = self._commit_for(rev)
        if start is None:
            return []
        if path is None or normalize(path) == "/":
            return repo.log(start, limit)
        norm = normalize(path)
        seq = repo.path_start(norm, start, self._branch)
        if repo.entry_at(start, norm) is None and (seq is None or repo.dir_exists_at(start, norm)):
            # A directory, present or deleted (it has no change rows of its own as a file).
            return [c for c in repo.log(start) if any(is_under(p, norm) for p in c.paths)][:limit]
        return repo.path_log(norm, seq, limit)

    async def log_page(
        self,
        path: str | None = None,
        *,
        limit: int = 50,
        cursor: str | None = None,
        rev: str | None = None,
        where: Callable[[Commit], bool] | None = None,
    ) -> browse.Page:
        """One page of ``log``: at most ``limit`` commits (those ``where`` keeps) and the next page's cursor.

        Pass the cursor back with the same ``path`` and ``where``; ``None`` means no more.
        Never reads more than one page's worth of history (a filter: ``browse.SCAN_BUDGET``).
        """
        repo = self._live()
        start = self._commit_for(rev)
        norm = None if path is None or normalize(path) == "/" else normalize(path)
        first = None if start is None or norm is None else repo.path_start(norm, start, self._branch)
        if start is not None and norm is not None and repo.entry_at(start, norm) is None and (
            first is None or repo.dir_exists_at(start, norm)
        ):
            # a directory, present or deleted, as in ``log``: the whole log, filtered
            inside = browse.under(norm)
            where, norm = (inside if where is None else lambda c, w=where: inside(c) and w(c)), None
        kind = browse.WHOLE if norm is None else browse.PATH
        if cursor is not None:
            frontier = browse.decode_cursor(cursor, kind)
        elif start is None:
            frontier = []
        else:
            frontier = [start if norm is None else first]
        return browse.log_page(repo, frontier, path=norm, limit=limit, keep=where)

    async def find_text(self, path: str, text: str, *, rev: str | None = None) -> list[browse.TextChange]:
        """Where ``text`` appeared in and disappeared from ``path``: versions whose count of it changed, oldest first."""
        repo = self._live()
        norm = normalize(path)
        start = self._commit_for(rev)
        return [] if start is None else browse.find_text(repo, norm, text, repo.path_start(norm, start, self._branch))

    # ------------------------------------------------------------ branches, merge, undo

    async def branch(self, name: str, *, at: str = "HEAD") -> VersionedStore:
        """Create branch ``name`` at revision ``at`` and return a handle on it (same options as this one)."""
        repo = self._live()
        history.create_branch(repo, name, repo.resolve(at, self._branch), source_branch=self._branch)
        return self.on_branch(name)

    def on_branch(self, name: str) -> VersionedStore:
        """Another handle on the same store, reading and committing on branch ``name``."""
        return VersionedStore(
            self._location, branch=name, author=self._author, durability=self._durability,
            poll_interval=self._poll_interval,
        )

    async def branches(self) -> dict[str, str]:
        return history.branches(self._live())

    async def delete_branch(self, name: str) -> None:
        if name == self._branch:
            raise errors.MemrevError(f"cannot delete {name!r}: this handle is on it")
        history.delete_branch(self._live(), name)

    async def tag(self, name: str, rev: str = "HEAD") -> str:
        repo = self._live()
        target = repo.resolve(rev, self._branch)
        history.create_tag(repo, name, target)
        return target.hex()

    async def tags(self) -> dict[str, str]:
        return history.tags(self._live())

    async def merge(
        self,
        source: str,
        *,
        strategy: str | None = None,
        resolutions: dict[str, str | None] | None = None,
        message: str | None = None,
    ) -> history.MergeResult:
        """Merge revision ``source`` (usually a branch name) into this handle's branch.

        Raises :class:`~memrev.errors.MergeConflict` (nothing written) unless
        ``strategy`` ("ours"/"theirs") or ``resolutions`` settle every conflict.
        """
        repo = self._live()
        _check_meta(message, None)
        resolved = {normalize(p): c for p, c in (resolutions or {}).items()}
        for content in resolved.values():
            if content is not None:
                _encode(content)
        before = repo.head(self._branch)
        result = history.merge(
            repo, self._branch, repo.resolve(source, self._branch), author=self._author,
            strategy=strategy, resolutions=resolved, message=message, source_name=source,
        )
        if result.commit:
            await self._after_commit(before, bytes.fromhex(result.commit), list(result.paths))
        return result

    async def revert(self, rev: str) -> str | None:
        """A new commit undoing ``rev``; ``None`` if that changes nothing. Conflicts raise ``MergeConflict``."""
        repo = self._live()
        before = repo.head(self._branch)
        new = history.revert(repo, self._branch, repo.resolve(rev, self._branch), author=self._author)
        if new:
            await self._after_commit(before, bytes.fromhex(new), repo.commit_info(bytes.fromhex(new)).paths)
        return new

    async def restore(self, path: str, rev: str) -> str | None:
        """Make ``path`` (file or directory) what it was at ``rev``, as a new commit."""
        repo = self._live()
        norm = normalize(path)
        before = repo.head(self._branch)
        meta = provenance.commit_meta(self, [norm], None)
        new = history.restore(repo, self._branch, norm, repo.resolve(rev, self._branch), author=self._author, meta=meta)
        if new:
            await self._after_commit(before, bytes.fromhex(new), list(repo.commit_info(bytes.fromhex(new)).paths))
        return new

    async def blame(self, path: str, *, rev: str | None = None) -> list[history.BlameLine]:
        """For each line of ``path`` at ``rev`` (default HEAD), the commit that last changed it."""
        repo = self._live()
        norm = normalize(path)
        start = self._commit_for(rev)
        if start is None or repo.entry_at(start, norm) is None:
            raise errors.RevisionNotFound(f"{norm} is not a file at {rev or 'HEAD'}")
        return history.blame(repo, norm, repo.path_start(norm, start, self._branch))

    async def why(
        self, path: str, line: int | None = None, *, rev: str | None = None, event_log: str = pickaxe.EVENT_LOG
    ) -> pickaxe.Why:
        """Why line ``line`` of ``path`` (default: its last change) is there: the commit, its provenance,
        the diff hunk, and the event-log lines of the same turn (``docs/provenance.md``)."""
        if line is not None and (type(line) is not int or line < 1):
            raise errors.InvalidPath(f"line must be an int >= 1, not {line!r}")
        repo = self._live()
        norm = normalize(path)
        start = self._commit_for(rev)
        if start is None or repo.entry_at(start, norm) is None:
            raise errors.RevisionNotFound(f"{norm} is not a file at {rev or 'HEAD'}")
        return pickaxe.why(repo, norm, start, self._branch, line, event_log=event_log)

    async def history(self, path: str, *, limit: int | None = None) -> list[tuple[Commit, int | None]]:
        """Every version of ``path``, newest first: (commit, size in bytes or ``None`` if deleted there)."""
        norm = normalize(path)
        return self._sizes(norm, await self.log(norm, limit=limit))

    async def history_page(
        self, path: str, *, limit: int = 100, cursor: str | None = None
    ) -> tuple[list[tuple[Commit, int | None]], str | None]:
        """One page of ``history`` and the next page's cursor (see ``log_page``)."""
        norm = normalize(path)
        page = await self.log_page(norm, limit=limit, cursor=cursor)
        return self._sizes(norm, page.commits), page.cursor

    def _sizes(self, path: str, commits: list[Commit]) -> list[tuple[Commit, int | None]]:
        repo = self._live()
        out = []
        for c in commits:
            entry = repo.entry_at(bytes.fromhex(c.id), path)
            out.append((c, None if entry is None else entry.size))
        return out

    def at(self, rev: str) -> RevisionView:
        """A read-only ``KnowledgeStore`` as of ``rev``; mutations raise ``ReadOnlyRevision``."""
        repo = self._live()
        return RevisionView(self, repo.resolve(rev, self._branch))

    # ------------------------------------------------------------ bundles, maintenance

    async def export_bundle(self, file: str | os.PathLike[str], *, branches: list[str] | None = None) -> int:
        """Write branches (default all) and tags with every object they reach to one file."""
        repo = self._live()
        refs = repo.backend.list_refs(history.HEAD_PREFIX)
        if branches is not None:
            missing = [b for b in branches if history.HEAD_PREFIX + b not in refs]
            if missing:
                raise errors.RevisionNotFound(f"no branch {missing[0]!r}")
            refs = {history.HEAD_PREFIX + b: refs[history.HEAD_PREFIX + b] for b in branches}
        refs.update(repo.backend.list_refs(history.TAG_PREFIX))
        buf = io.BytesIO()
        count = history.export_bundle(repo, buf, refs)
        tmp = f"{os.fspath(file)}.tmp"
        with open(tmp, "wb") as fh:
            fh.write(buf.getvalue())
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, file)
        return count

    async def import_bundle(self, file: str | os.PathLike[str]) -> dict[str, str]:
        """Verify and import a bundle; returns the refs it set. A bad bundle raises ``InvalidBundle``."""
        repo = self._live()
        with open(file, "rb") as fh:
            data = fh.read()
        before = repo.head(self._branch)
        imported = history.import_bundle(repo, data)
        after = repo.head(self._branch)
        if after != before and after is not None:
            paths = [p for p, _, _ in trees.diff(repo, repo.root(before), repo.root(after))]
            await self._after_commit(before, after, paths)
        return imported

    async def import_dir(self, folder: str | os.PathLike[str], *, message: str | None = None) -> str | None:
        """Turn a ``DiskKnowledgeStore`` folder into one commit on this branch (for migration)."""
        root = os.path.realpath(folder)
        if not os.path.isdir(root):
            raise FileNotFoundError(f"{folder} is not a folder")
        files = []
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            for name in sorted(filenames):
                full = os.path.join(dirpath, name)
                rel = "/" + os.path.relpath(full, root).replace(os.sep, "/")
                with open(full, "rb") as fh:
                    raw = fh.read()
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError:
                    raise errors.InvalidContent(f"{rel} is not UTF-8 text; nothing was imported") from None
                files.append((normalize(rel), text))
        before = self._live().head(self._branch)
        async with self.transaction(message=message or f"import {os.path.basename(root)}", meta={"import_dir": root}):
            for path, text in files:
                await self.write(path, text)
        after = self._repo.head(self._branch)
        return None if after == before else after.hex()

    async def gc(self, *, keep_seconds: float = 14 * 86400) -> dict[str, int]:
        """Delete what no branch, tag or recently deleted branch reaches; returns counts removed."""
        return history.gc(self._live(), keep_seconds=keep_seconds)

    async def reindex(self) -> None:
        """Rebuild the derived indexes from the objects (what ``fsck --repair`` does)."""
        self._live().reindex()

    async def fsck(self) -> list[str]:
        """Verify every object, reference and derived index; returns the problems found."""
        return self._live().fsck()

    async def show(self, rev: str = "HEAD") -> Commit:
        repo = self._live()
        return repo.commit_info(repo.resolve(rev, self._branch))

    async def diff_from_empty(self, rev: str, path: str | None = None) -> list[FileChange]:
        """Everything at ``rev`` as additions (what a root commit introduced)."""
        repo = self._live()
        return repo.diff(None, repo.resolve(rev, self._branch), None if path is None else normalize(path))

    async def diff(self, rev_a: str, rev_b: str, path: str | None = None) -> list[FileChange]:
        repo = self._live()
        a, b = repo.resolve(rev_a, self._branch), repo.resolve(rev_b, self._branch)
        return repo.diff(a, b, None if path is None else normalize(path))


class _NoChanges:
    async def close(self) -> None:
        return None


class RevisionView(Memory):
    """A read-only ``KnowledgeStore`` and AutoGen ``Memory`` frozen at one commit (``store.at(rev)``).

    Hand it to an AG2 agent (or an ``AssistantAgent``) to replay against a
    past memory: reads answer as of that commit, and any mutation raises
    ``ReadOnlyRevision`` instead of silently going nowhere. As a ``Memory``
    it is the store's default memory as of that commit; ``memory(name)``
    gives any named one.
    """

    component_type = "memory"

    def __init__(self, store: VersionedStore, commit: bytes) -> None:
        self._store = store
        self.commit = commit.hex()

    def memory(self, name: str = "default", *, prefix: str = "/autogen") -> Memory:
        return self._store.memory(name, prefix=prefix).at(self.commit)

    async def query(self, query: Any = "", cancellation_token: Any = None, **kwargs: Any) -> Any:
        return await self.memory().query(query, cancellation_token, **kwargs)

    async def update_context(self, model_context: Any) -> Any:
        return await self.memory().update_context(model_context)

    async def add(self, content: Any, cancellation_token: Any = None) -> None:
        self._refuse("add a memory item")

    async def clear(self) -> None:
        self._refuse("clear a memory")

    async def close(self) -> None:
        return None

    async def read(self, path: str) -> str | None:
        return await self._store.read(path, rev=self.commit)

    async def list(self, path: str = "/") -> list[str]:
        return await self._store.list(path, rev=self.commit)

    async def exists(self, path: str) -> bool:
        return await self._store.exists(path, rev=self.commit)

    async def read_range(self, path: str, start: int, end: int | None = None) -> str:
        return await self._store.read_range(path, start, end, rev=self.commit)

    async def log(self, path: str | None = None, *, limit: int | None = None) -> list[Commit]:
        return await self._store.log(path, limit=limit, rev=self.commit)

    async def on_change(self, path: str, callback: ChangeCallback) -> _NoChanges:
        return _NoChanges()  # a revision never changes

    def _refuse(self, what: str) -> None:
        raise errors.ReadOnlyRevision(f"cannot {what}: this is a read-only view of revision {self.commit[:10]}")

    async def write(self, path: str, content: str) -> None:
        self._refuse(f"write {path}")

    async def append(self, path: str, content: str) -> int:
        self._refuse(f"append to {path}")
        return 0

    async def delete(self, path: str) -> None:
        self._refuse(f"delete {path}")
