"""``Store``: an AG2 ``KnowledgeStore`` whose every mutation is a commit.

The async face of the synchronous :class:`~memrev.repo.Repository`, free of
every agent framework: this module imports no AutoGen, ag2 or OpenAI Agents
code, so the CLI and ``import memrev`` stay fast. The public
``memrev.VersionedStore`` (``memrev/autogen.py``) is this class plus AutoGen's
``Memory`` interface. Where each piece of repository work runs is decided in
one place, :meth:`Store._run`: work that cannot wait (a read of a local SQLite
file, a commit that got the write lock without waiting) runs on the event
loop, because a hop to a thread costs more than it does; anything that can
wait (a lock held by another process, the network, retry backoff, whole-store
work) runs in the handle's worker thread, so the agent's event loop keeps
running. See docs/design.md, "The async layer".
"""

from __future__ import annotations

import asyncio
import builtins
import collections
import contextlib
import contextvars
import functools
import io
import logging
import os
import re
import threading
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Generator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from .. import errors, history, provenance
from ..backends import Backend, is_url, open_backend
from ..core import trees
from ..core.objects import check_new_commit_text
from ..core.paths import ancestors, is_own, is_under, normalize, split
from ..folders import adopt
from ..folders import worktree as _worktree
from ..folders.read import FolderImport, read_regular_files, replace_file
from ..history import browse, pickaxe
from ..maintenance import bundles
from ..maintenance import fsck as fsck_mod
from ..maintenance import gc as gc_mod
from ..repo import indexes, revisions
from ..repo.groupcommit import CommitQueue, Pending
from ..repo.ops import ANY_HEAD, AnyHead, Append, Delete, Op, Write
from ..repo.repository import Commit, CommitRequest, CommitResult, FileChange, Repository

if TYPE_CHECKING:
    from typing_extensions import Self  # typing.Self is Python 3.11+; memrev supports 3.10

log = logging.getLogger("memrev")
_T = TypeVar("_T")
_FULL_ID = re.compile(r"^[0-9a-fA-F]{40}$")
# True in the tasks that deliver changes to subscribers (and in tasks they
# spawn): a write made by a subscriber does not wait for its own delivery,
# which is queued behind the callback making it.
_DELIVERING: contextvars.ContextVar[bool] = contextvars.ContextVar("memrev_delivering", default=False)

ChangeCallback = Callable[[str], Awaitable[None]]

# Handles on the same store in this process, so a commit through one reaches
# the others' subscribers at once instead of at their next poll.
_SIBLINGS: dict[str, weakref.WeakSet[Store]] = {}


class Closed:
    """What ``close()`` returns: nothing to use, but awaitable.

    ``Store.close()`` is synchronous (the AG2 side calls it that way),
    while AutoGen's ``Memory.close()`` is awaited. Returning this object lets
    ``store.close()`` and ``await store.close()`` both work, without the
    "coroutine was never awaited" warning a coroutine would give.
    """

    __slots__ = ()

    def __await__(self) -> Generator[Any, None, None]:
        return iter(())  # type: ignore[return-value]

    def __repr__(self) -> str:
        return "<memrev: closed>"


CLOSED = Closed()


class _SharedBackend:
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
    """Commit metadata is refused before anything is staged: a str message
    without control characters, a JSON object of meta (the same check bundles
    get), each within its size limit (``memrev.core.objects.MAX_MESSAGE_BYTES``, ``MAX_META_BYTES``)."""
    check_new_commit_text(None, message, meta)


class _Transaction:
    """Mutations staged by the task that opened it; ``ops`` become one commit on exit.

    Only ``owner`` may stage into it, and only until it is ``closed``: a task
    it spawned commits on its own, and nothing can join a transaction that
    has finished (its ops were already committed or dropped).
    """

    def __init__(self, owner: asyncio.Task, message: str | None, meta: dict[str, Any] | None) -> None:
        self.owner = owner
        self.message = message
        self.meta = meta
        self.closed = False
        self.ops: list[Op] = []
        self.view: dict[str, bytes | None] = {}  # path -> content after the staged ops; None: deleted
        # Paths whose everything-below a staged delete removed. Kept apart from
        # ``view``: writing the file /a after deleting /a brings back the file,
        # not what was under /a/.
        self.cut: set[str] = set()


class _Subscription:
    def __init__(self, store: Store, prefix: str, callback: ChangeCallback) -> None:
        self._store, self.prefix, self.callback = store, prefix, callback

    async def close(self) -> None:
        self._store._unsubscribe(self)


class _Batch:
    """Changes claimed for delivery: the paths between commits ``base`` and ``upto``, then ``paths``."""

    def __init__(self, base: bytes | None, upto: bytes | None, paths: list[str]) -> None:
        self.base, self.upto, self.paths = base, upto, paths
        self.delivered = asyncio.get_running_loop().create_future()


def _current_task() -> asyncio.Task | None:
    try:
        return asyncio.current_task()
    except RuntimeError:  # no running event loop: no task, so no transaction
        return None


def _fresh_context() -> contextvars.Context:
    """A context holding nothing of the caller's (transactions, provenance), marked as delivery."""
    ctx = contextvars.Context()
    ctx.run(_DELIVERING.set, True)
    return ctx


def _create_task_in_fresh_context(coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
    """A task that runs in :func:`_fresh_context`. Created from inside that context (the task
    copies the current one), because ``create_task(context=...)`` is Python 3.11+ and memrev
    supports 3.10."""
    return _fresh_context().run(asyncio.get_running_loop().create_task, coro, name=name)


class Store:
    """A versioned, path-keyed knowledge store (see ``docs/api.md``).

    Framework-free. ``memrev.VersionedStore`` (``memrev.autogen``) subclasses it
    to be an AutoGen ``Memory`` as well; the CLI and the viewer open a ``Store``.

    Opened on a ``location``, a handle opens its backend and closes it on
    ``close()``. Given ``backend=``, it owns that backend the same way; the
    handles ``on_branch`` opens from it share it, and the last to close closes it.
    """

    def __init__(
        self,
        location: str | os.PathLike[str] | None = None,
        *,
        backend: Backend | _SharedBackend | None = None,
        branch: str = "main",
        author: str = "memrev",
        durability: str = "normal",
        poll_interval: float = 1.0,
        create: bool = True,
        worktree: bool | None = None,
    ) -> None:
        if durability not in ("normal", "full"):
            raise ValueError("durability must be 'normal' or 'full'")
        revisions.check_ref_name(branch)
        if not isinstance(author, str):
            raise errors.InvalidContent(f"author must be str, not {type(author).__name__}")
        check_new_commit_text(author, None, None)  # every commit of this handle records it
        self._shared = self._check_backend(location, backend, worktree)
        self._location = repr(self._shared.backend) if self._shared is not None else os.fspath(location)  # type: ignore[arg-type]  # _check_backend: exactly one of them
        self._durability = durability
        self._worktree: _worktree.WorkTree | None = None
        tree_branch = self._tree_branch(worktree, branch)
        if self._shared is not None:
            self._shared.join()
            self._repo = Repository(self._shared.backend)
        else:
            self._repo = Repository(
                open_backend(self._location, durability=durability, create=create, worktree=bool(worktree))
            )
        is_folder = self._shared is None and not is_url(self._location) and os.path.isdir(self._location)
        if create and is_folder and not self._repo.backend.list_refs(revisions.HEAD_PREFIX):
            # A folder that holds files but no history: its files become the first commit.
            adopt.adopt(self._repo, self._location, branch)
        was_following = None
        if worktree is not None and self._shared is None:
            was_following = _worktree.persisted_branch(self._location)
            _worktree.set_mode(self._location, branch if worktree else None)
        if tree_branch == branch:
            try:
                self._worktree = _worktree.acquire(self._location, branch, durability, poll_interval)
            except errors.WorkTreeDiverged:
                _worktree.set_mode(self._location, was_following)  # refused: the mode stays as it was
                self._repo.backend.close()
                raise
            except BaseException:
                self._repo.backend.close()
                raise
        # The repository's caches and its one database connection are shared
        # by the event loop (inline work) and this handle's worker thread.
        self._lock = threading.Lock() if self._shared is None else self._shared.lock
        self._worker: ThreadPoolExecutor | None = None
        self._local = self._repo.backend.local is True
        # A commit may run on the loop only when it cannot wait: a local
        # backend, the write lock free, no fsync per commit (durability="full").
        self._inline_commits = self._local and durability == "normal"
        self._queue = CommitQueue()  # the others wait for the worker, and are committed together
        self._branch = branch
        self._author = author
        self._poll_interval = poll_interval
        self._closed = False
        self._txns: dict[asyncio.Task, _Transaction] = {}
        self._subs: list[_Subscription] = []
        self._seen: bytes | None = None  # changes up to this commit are claimed for delivery
        self._seen_seq = 0  # its commit number (topological: a descendant has a larger one)
        self._batches: collections.deque[_Batch] = collections.deque()
        self._deliverer: asyncio.Task[None] | None = None
        self._poller: asyncio.Task[None] | None = None
        where = os.path.realpath(self._location) if self._shared is None else f"backend@{id(self._shared)}"
        self._key = where + "#" + branch
        _SIBLINGS.setdefault(self._key, weakref.WeakSet()).add(self)

    @staticmethod
    def _check_backend(
        location: str | os.PathLike[str] | None, backend: Backend | _SharedBackend | None, worktree: bool | None
    ) -> _SharedBackend | None:
        """Exactly one of ``location`` and ``backend``; a passed-in backend has no folder."""
        if (location is None) == (backend is None):
            raise TypeError("a store takes exactly one of location and backend=")
        if backend is None:
            return None
        if worktree:
            raise ValueError("a working tree needs a folder location, not backend=")
        return backend if isinstance(backend, _SharedBackend) else _SharedBackend(backend)

    def _tree_branch(self, worktree: bool | None, branch: str) -> str | None:
        """The branch the folder's working tree follows after this open, ``None`` if it has none."""
        if self._shared is not None:
            return None
        if is_url(self._location):
            if worktree:
                raise ValueError("a working tree needs a folder location, not a database URL")
            return None
        persisted = _worktree.persisted_branch(self._location)
        if worktree and persisted not in (None, branch):
            raise errors.MemrevError(
                f"the working tree of {self._location} follows branch {persisted!r}; "
                f"open it with worktree=False first to make it follow {branch!r}"
            )
        if worktree is None:
            return persisted
        return branch if worktree else None

    @property
    def worktree(self) -> bool:
        """True when this handle keeps the folder's plain files at its branch head."""
        return self._worktree is not None

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
        return self._own_txn() is not None

    def _own_txn(self) -> _Transaction | None:
        """The open transaction of the running task; tasks it spawned have none."""
        txn = self._txns.get(_current_task())  # type: ignore[arg-type]
        return None if txn is None or txn.closed else txn

    async def head(self) -> str | None:
        """The commit id at the tip of this handle's branch, ``None`` before the first commit."""
        head = await self._read(lambda: self._repo.head(self._branch))
        return None if head is None else head.hex()

    @property
    def repo(self) -> Repository:
        return self._live()

    def _live(self) -> Repository:
        if self._closed:
            raise errors.StoreClosed(f"this {type(self).__name__} is closed")
        return self._repo

    # ------------------------------------------------------------ where repository work runs

    async def _run(
        self,
        work: Callable[[], _T],
        *,
        inline: Callable[[], _T] | None = None,
        on_done: Callable[[_T], None] | None = None,
        before_submit: Callable[[], None] | None = None,
        drop: Callable[[], bool] | None = None,
    ) -> _T:
        """Run repository work: on the event loop if it cannot wait, else in this handle's worker thread.

        The one place that decides (docs/design.md, "The async layer").
        ``inline`` is a variant that cannot wait; it runs on the loop when the
        backend is local and the handle lock is free at this instant. If it
        finds it would wait after all (``TransientConflict``: another process
        holds the write lock), ``work`` runs in the worker thread instead.
        A cancelled caller does not stop work that has started: the worker
        finishes (a commit is whole or rolled back), ``on_done`` still runs on
        the loop, and the lock is released. Work not yet started is dropped
        (``drop``, for work queued in a group commit: it says whether it
        could still take the work back; a worker may have started it as part
        of another caller's job). ``before_submit`` runs on the loop just
        before the work goes to the worker (a commit joins the group queue
        there, so the queue holds it before its job can run).
        """
        self._live()
        if inline is not None and self._local and self._lock.acquire(blocking=False):
            try:
                result = inline()
            except errors.TransientConflict:
                pass
            else:
                if on_done is not None:
                    on_done(result)
                return result
            finally:
                self._lock.release()
        loop = asyncio.get_running_loop()
        if before_submit is not None:
            before_submit()
        job = self._executor().submit(self._locked, work)
        if on_done is not None:
            job.add_done_callback(lambda f: _call_soon(loop, on_done, f))
        outcome = asyncio.wrap_future(job, loop=loop)
        try:
            return await asyncio.shield(outcome)
        except asyncio.CancelledError:
            if drop is None or drop():
                job.cancel()  # only succeeds if the work has not started
            outcome.add_done_callback(_orphaned)  # nobody awaits it now: never an unretrieved exception
            raise

    def _locked(self, work: Callable[[], _T]) -> _T:
        with self._lock:
            self._live()
            return work()

    def _executor(self) -> ThreadPoolExecutor:
        # One thread per handle, created on first use: work of one handle
        # runs in order and never occupies a thread waiting for its lock.
        if self._worker is None:
            self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="memrev")
        return self._worker

    async def _read(self, work: Callable[[], _T], rev: str | None = None) -> _T:
        """A bounded read: inline-able at the head or at a full commit id, else (``HEAD~n``, names) threaded."""
        cheap = rev is None or (len(rev) == 40 and _FULL_ID.match(rev) is not None)
        return await self._run(work, inline=work if cheap else None)

    # ------------------------------------------------------------ lifecycle

    def close(self) -> Closed:
        """Release the database connection and stop change polling. Idempotent.

        Synchronous; returns an awaitable, so AutoGen's ``await memory.close()`` works too.
        Work already running in the handle's worker thread finishes first; the
        connection is closed after it, never under it.
        """
        if self._closed:
            return CLOSED
        self._closed = True
        for task in (self._poller, self._deliverer):
            if task is not None:
                task.cancel()
        self._poller = self._deliverer = None
        self._subs.clear()
        if self._worktree is not None:
            _worktree.release(self._worktree)
            self._worktree = None
        self._batches.clear()
        if self._lock.acquire(blocking=False):
            try:
                self._close_backend_now()
            finally:
                self._lock.release()
        else:
            self._executor().submit(self._close_backend)
        if self._worker is not None:
            self._worker.shutdown(wait=False, cancel_futures=True)
        return CLOSED

    def _close_backend(self) -> None:
        with self._lock:
            self._close_backend_now()

    def _close_backend_now(self) -> None:
        """Close the backend this handle opened, or leave a passed-in one (the last handle closes it)."""
        if self._shared is None or self._shared.leave():
            self._repo.backend.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ revisions

    def _commit_for(self, rev: str | None) -> bytes | None:
        repo = self._repo
        return repo.head(self._branch) if rev is None else repo.resolve(rev, self._branch)

    async def resolve(self, rev: str) -> str:
        return (await self._read(lambda: self._repo.resolve(rev, self._branch), rev)).hex()

    def _resolve_now(self, rev: str) -> str:
        """``resolve`` for the synchronous API (``at()``): waits for the handle lock on the caller's thread."""
        self._live()
        return self._locked(lambda: self._repo.resolve(rev, self._branch)).hex()

    # ------------------------------------------------------------ reading

    async def _bytes(self, path: str, rev: str | None) -> bytes | None:
        txn = self._own_txn()
        if rev is None and txn is not None:
            if path in txn.view:
                return txn.view[path]
            if any(a in txn.cut for a in ancestors(path)):
                return None

        def work() -> bytes | None:
            repo = self._repo
            entry = repo.entry_at(self._commit_for(rev), path)
            return None if entry is None else repo.content(entry.oid)

        return await self._read(work, rev)

    async def read(self, path: str, *, rev: str | None = None) -> str | None:
        data = await self._bytes(normalize(path), rev)
        return None if data is None else data.decode("utf-8")

    async def list(self, path: str = "/", *, rev: str | None = None) -> builtins.list[str]:
        norm = normalize(path)
        txn = self._own_txn()
        if rev is None and txn is not None and txn.view:
            return _visible(norm, await self._txn_list(txn, norm))
        return _visible(norm, await self._read(lambda: self._repo.list_at(self._commit_for(rev), norm), rev))

    async def _txn_list(self, txn: _Transaction, path: str) -> builtins.list[str]:
        """The head's listing of ``path`` with the transaction's staged writes and deletes laid over it.

        Costs what the transaction staged, not what the store holds: one
        directory node is listed (no file is read), and only a subdirectory
        the transaction deleted something inside is walked, until one of its
        files is found still there.
        """
        prefix = path.rstrip("/") + "/"
        emptied = {a for d in txn.cut for a in ancestors(d)}  # directories with a deletion below them

        def gone(p: str) -> bool:  # a committed file or directory a staged delete removed (re-staged ones come below)
            return p in txn.cut or any(a in txn.cut for a in ancestors(p))

        def committed_names() -> list[str]:
            repo = self._repo
            head = repo.head(self._branch)
            if head is None or gone(path):
                return []
            root = repo.root(head)
            names = []
            for name in repo.list_at(head, path):
                full = prefix + name.rstrip("/")
                if gone(full):
                    continue
                if name.endswith("/") and full in emptied and not _file_left(repo, root, full, gone):
                    continue
                names.append(name)
            return names

        names = set(await self._read(committed_names))
        for p, v in txn.view.items():
            if v is not None and p.startswith(prefix):
                rest = p[len(prefix) :]
                names.add(rest.split("/")[0] + "/" if "/" in rest else rest)
        return sorted(names)

    async def exists(self, path: str, *, rev: str | None = None) -> bool:
        norm = normalize(path)
        if await self._bytes(norm, rev) is not None:
            return True
        txn = self._own_txn()
        if rev is None and txn is not None and txn.view:
            return bool(_visible(norm, await self._txn_list(txn, norm)))

        def work() -> bool:
            commit = self._commit_for(rev)
            if norm == "/":
                return bool(_visible(norm, self._repo.list_at(commit, "/")))
            return self._repo.dir_exists_at(commit, norm)

        return await self._read(work, rev)

    async def read_range(self, path: str, start: int, end: int | None = None, *, rev: str | None = None) -> str:
        """Bytes ``[start, end)`` of ``path`` as text, exactly as ag2's ``MemoryKnowledgeStore`` slices them."""
        norm = normalize(path)
        if rev is None and self._own_txn() is not None:
            data = await self._bytes(norm, rev)
            return "" if data is None else _slice_text(data, start, end)

        def work() -> str:
            repo = self._repo
            entry = repo.entry_at(self._commit_for(rev), norm)
            if entry is None:
                return ""
            window = _byte_window(entry.size, start, end)
            return "" if window is None else repo.content_range(entry.oid, *window).decode("utf-8", errors="strict")

        return await self._read(work, rev)

    # ------------------------------------------------------------ writing

    async def write(self, path: str, content: str, *, message: str | None = None, meta: dict | None = None) -> None:
        norm, data = _file_path(path), _encode(content)
        _check_meta(message, meta)
        await self._mutate(Write(norm, data), message, meta)

    async def append(self, path: str, content: str) -> int:
        norm, data = _file_path(path), _encode(content)
        offsets = await self._mutate(Append(norm, data), None, None)
        return offsets[0]

    async def delete(self, path: str, *, message: str | None = None) -> None:
        norm = normalize(path)
        _check_meta(message, None)
        await self._mutate(Delete(norm), message, None)

    async def _mutate(self, op: Op, message: str | None, meta: dict | None) -> builtins.list[int]:
        self._live()
        txn = self._own_txn()
        if txn is not None:
            return [await self._stage(txn, op)]
        meta = provenance.commit_meta(self, [op.path], meta)  # task-local: before any hop to the worker
        result = await self._commit([op], message=message, meta=meta)
        if result.id is None and not isinstance(op, Delete):
            # No commit (same content, empty append), but ag2's stores report every
            # write and append to subscribers; so does this one.
            await self._deliver(self._announce_paths([op.path]))
        return result.offsets

    async def _stage(self, txn: _Transaction, op: Op) -> int:
        path = op.path
        offset = 0
        if isinstance(op, Append):
            current = await self._bytes(path, None) or b""
            offset = len(current)
            txn.view[path] = current + op.data
            op = Append(path, op.data, offset)  # commits only if the file is still that long then: the offset stays true
        elif isinstance(op, Write):
            txn.view[path] = op.data
        else:
            for p in [p for p in txn.view if is_under(p, path)]:
                txn.view[p] = None
            txn.view[path] = None
            txn.cut.add(path)
        txn.ops.append(op)
        return offset

    async def _commit(
        self, ops: builtins.list[Op], *, message: str | None = None, meta: dict | None = None,
        expect_head: bytes | None | AnyHead = ANY_HEAD,
    ) -> CommitResult:
        """One commit of ``ops``; subscribers hear of it even if the caller is cancelled meanwhile."""
        deliveries: list[_Batch] = []
        await self._refuse_unstorable([op.path for op in ops])

        def attempt_inline() -> tuple[CommitResult, int]:
            result = self._repo.commit(
                self._branch, ops, author=self._author, message=message, meta=meta,
                expect_head=expect_head, wait=False,
            )
            return result, (self._repo.commit_data(result.id)[0] if result.id else 0)

        def committed(outcome: tuple[CommitResult, int]) -> None:
            result, seq = outcome
            if result.id is not None:
                deliveries.extend(self._announce(result.parent, result.id, seq, result.paths))

        # A commit that goes to the worker (it has to wait, or never runs inline) joins
        # the queue first: the ones waiting there share one transaction (groupcommit.py),
        # each still its own commit.
        request = CommitRequest(self._branch, ops, self._author, message, meta, expect_head=expect_head)
        queued: list[Pending] = []

        def grouped() -> tuple[CommitResult, int]:
            result = self._queue.run(self._repo, queued[0])
            if result is None:  # dropped: its caller was cancelled before a worker took it
                return CommitResult(None), 0
            return result, (self._repo.commit_data(result.id)[0] if result.id else 0)

        result, _ = await self._run(
            grouped,
            inline=attempt_inline if self._inline_commits else None,
            on_done=committed,
            before_submit=lambda: queued.append(self._queue.add(request)),
            drop=lambda: self._queue.drop(queued[0]),
        )
        if result.id is not None:
            await self._sync_files()
        await self._deliver(deliveries)
        return result

    async def _commit_by(self, work: Callable[[], tuple[_T, bytes | None]]) -> _T:
        """Run history work that returns (its answer, the commit it made on this branch or None); announce that commit."""
        deliveries: list[_Batch] = []

        def run() -> tuple[_T, tuple[bytes | None, bytes, int, list[str]] | None]:
            value, new = work()
            if new is None:
                return value, None
            repo = self._repo
            seq, data = repo.commit_data(new)
            parent = data.parents[0] if data.parents else None
            return value, (parent, new, seq, self._changed_paths(parent, new))

        def committed(outcome: tuple[_T, tuple[bytes | None, bytes, int, list[str]] | None]) -> None:
            if outcome[1] is not None:
                deliveries.extend(self._announce(*outcome[1]))

        value, made = await self._run(run, on_done=committed)
        if made is not None:
            await self._sync_files()
        await self._deliver(deliveries)
        return value

    @contextlib.asynccontextmanager
    async def transaction(
        self, message: str | None = None, meta: dict | None = None, *, expect_head: str | None | AnyHead = ANY_HEAD
    ) -> AsyncIterator[Store]:
        """Group the mutations made inside (by this task) into one commit, all or nothing.

        The transaction belongs to the task that opened it: a task spawned
        inside commits its own writes on their own, before or after this
        commit, never into it. With ``expect_head`` (a commit id, or ``None``
        for a branch with no commits yet) the commit is made only if the
        branch still points there; otherwise ``ConcurrentUpdate`` is raised
        and nothing is written, so a caller can recompute and retry
        (optimistic concurrency). An append inside it commits only if the
        file still ends where the append saw it (else ``ConcurrentUpdate``),
        so the offset it returned is where the bytes are.
        """
        owner = _current_task()
        if owner is None:
            raise RuntimeError("transaction() needs a running asyncio task")
        if self._own_txn() is not None:
            raise RuntimeError("transactions do not nest")
        if not (expect_head is None or isinstance(expect_head, (str, AnyHead))):
            # False once meant "any head"; a bool now is a mistake, not a condition that always fails.
            raise TypeError(f"expect_head is a commit id, None or ANY_HEAD, not {expect_head!r}")
        _check_meta(message, meta)
        self._live()
        txn = _Transaction(owner, message, meta)
        self._txns[owner] = txn
        try:
            yield self
        finally:
            txn.closed = True
            del self._txns[owner]
        if txn.ops:
            expected = bytes.fromhex(expect_head) if isinstance(expect_head, str) else expect_head
            meta = provenance.commit_meta(self, [op.path for op in txn.ops], meta)
            await self._commit(txn.ops, message=message, meta=meta, expect_head=expected)

    def provenance(self, **fields: Any) -> contextlib.AbstractAsyncContextManager[dict[str, Any]]:
        """``async with store.provenance(agent=..., turn=...):`` every commit this task makes inside
        carries these fields in ``meta``; explicit ``meta`` wins (``docs/provenance.md``)."""
        return provenance.provenance(**fields)

    # ------------------------------------------------------------ change notification

    async def on_change(self, path: str, callback: ChangeCallback) -> _Subscription:
        self._live()
        if not self._subs and self._poller is None:
            self._seen, self._seen_seq = await self._read(self._head_and_seq)
        sub = _Subscription(self, normalize(path), callback)
        self._subs.append(sub)
        if self._poller is None:
            # A clean context: the poller must never see the subscriber's
            # transaction (or anything else task-local of whoever subscribed).
            self._poller = _create_task_in_fresh_context(self._poll(), "memrev-poll")
        return sub

    def _head_and_seq(self) -> tuple[bytes | None, int]:
        head = self._repo.head(self._branch)
        return head, (0 if head is None else self._repo.commit_data(head)[0])

    def _unsubscribe(self, sub: _Subscription) -> None:
        with contextlib.suppress(ValueError):
            self._subs.remove(sub)
        if not self._subs and self._poller is not None:
            self._poller.cancel()
            self._poller = None

    def _announce(self, parent: bytes | None, new: bytes, seq: int, paths: builtins.list[str]) -> builtins.list[_Batch]:
        """A commit made through this process: claim it for every handle on this branch that has subscribers."""
        out = []
        for store in list(_SIBLINGS.get(self._key, ())):
            if store._subs and not store._closed:
                batch = store._claim(parent, new, seq, paths)
                if batch is not None:
                    out.append(batch)
        return out

    def _announce_paths(self, paths: builtins.list[str]) -> builtins.list[_Batch]:
        """Paths to report without a commit (an unchanged write): to this handle's subscribers."""
        if not self._subs:
            return []
        return [self._enqueue(_Batch(self._seen, self._seen, paths))]

    def _claim(self, parent: bytes | None, new: bytes, seq: int, paths: builtins.list[str]) -> _Batch | None:
        """Advance what this handle has delivered to ``new``, before anything is delivered.

        Runs on the loop without awaiting, so a commit is claimed exactly once
        however the poller and the writers interleave. A commit at or below the
        claimed one was covered already (a later commit or a poll reached past
        it). If others committed between the claimed commit and ``parent``,
        their paths are part of this batch.
        """
        if seq <= self._seen_seq:
            return None
        base = self._seen
        self._seen, self._seen_seq = new, seq
        return self._enqueue(_Batch(base, parent, paths))

    def _enqueue(self, batch: _Batch) -> _Batch:
        self._batches.append(batch)
        loop = asyncio.get_running_loop()
        task = self._deliverer
        if task is None or task.done() or task.get_loop() is not loop:
            # Delivery does not depend on the writer's task surviving: it has
            # its own task (clean context), one per handle, so it is serialised.
            self._deliverer = _create_task_in_fresh_context(self._deliver_batches(), "memrev-deliver")
        return batch

    async def _deliver(self, batches: builtins.list[_Batch]) -> None:
        """Wait until subscribers have heard of ``batches`` (as ag2's stores do), unless called from a subscriber.

        A subscriber that writes runs inside the delivery task, which is busy
        with it: waiting there would wait for itself.
        """
        if batches and not _DELIVERING.get():
            await asyncio.shield(asyncio.gather(*(b.delivered for b in batches)))

    async def _deliver_batches(self) -> None:
        while self._batches and not self._closed:
            batch = self._batches.popleft()
            try:
                missed: list[str] = []
                if batch.base != batch.upto:
                    missed = await self._run(functools.partial(self._changed_paths, batch.base, batch.upto))
                await self._dispatch(missed + batch.paths)
            except Exception:
                log.exception("memrev: could not deliver changes of branch %s to subscribers", self._branch)
            finally:
                if not batch.delivered.done():
                    batch.delivered.set_result(None)
        for batch in self._batches if self._closed else ():
            if not batch.delivered.done():
                batch.delivered.set_result(None)

    def _changed_paths(self, a: bytes | None, b: bytes | None) -> builtins.list[str]:
        repo = self._repo
        return [p for p, _, _ in trees.diff(repo, repo.root(a), repo.root(b))]

    async def _refuse_unstorable(self, paths: builtins.list[str]) -> None:
        """Before a commit the working tree will write out: refuse (``UnstorableFileInTheWay``,
        nothing committed) if the folder holds a file memrev could not store at one of ``paths``."""
        if self._worktree is not None and self._worktree.branch == self._branch and paths:
            await asyncio.to_thread(self._worktree.refuse_unstorable, paths)

    async def _sync_files(self) -> None:
        """Bring the working tree's files to the new head (a worker thread: it takes a file lock).

        The commit is already made and stays made; a folder that cannot be
        updated now is reconciled by the watcher or at the next open.
        """
        if self._worktree is None:
            return
        try:
            await asyncio.to_thread(self._worktree.sync)
        except Exception as e:  # noqa: BLE001 - whatever it was, the commit stands; the next reconcile retries
            logging.getLogger("memrev").warning("working tree %s not updated yet: %s", self._location, e)

    async def _dispatch(self, paths: builtins.list[str]) -> None:
        for path in paths:
            for sub in list(self._subs):
                if is_under(path, sub.prefix):
                    try:
                        await sub.callback(path)
                    except Exception:  # a subscriber's failure must not undo or block a commit
                        log.exception("memrev: on_change subscriber %r failed on %s", sub.callback, path)

    async def _poll(self) -> None:
        """Find commits made by other processes: one ref read per interval, a tree diff on change."""
        backend = self._repo.backend
        while not self._closed:
            if not backend.notifies:  # nothing wakes us: one read of the branch head per interval
                await asyncio.sleep(self._poll_interval)
            else:
                # Not the handle's worker: this blocks for a whole interval.
                await asyncio.to_thread(backend.wait_for_change, self._poll_interval)
            if self._closed:
                return
            try:
                head, seq = await self._read(self._head_and_seq)
            except Exception:  # the database is away for a moment: look again next time
                log.warning("memrev: polling branch %s failed; trying again", self._branch, exc_info=True)
                await asyncio.sleep(self._poll_interval)
                continue
            if not self._closed and seq > self._seen_seq:
                base = self._seen
                self._seen, self._seen_seq = head, seq
                self._enqueue(_Batch(base, head, []))

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
        ignore_case: bool = False,
    ) -> builtins.list[Commit]:
        """Commits newest first, of the store or of ``path``, optionally filtered (``docs/provenance.md``).

        ``contains``: the number of occurrences of that text in a file changed
        (git ``-S``; ``ignore_case=True``: ignoring case, ``-S -i``); ``matching``: a removed or added line matches that regex
        (git ``-G``); ``agent``/``tool``: provenance fields; ``since``/``until``:
        commit time. Filtering reads only the commits that touched ``path``.
        """
        norm = None if path is None else normalize(path)
        wanted = pickaxe.LogFilter(contains, matching, agent, tool, since, until, ignore_case)
        if not wanted.active:
            return await self._run(lambda: self._log(norm, limit, rev))

        def work() -> list[Commit]:
            under = None if norm is None or norm == "/" else norm
            return pickaxe.select(self._repo, self._log(norm, None, rev), under, wanted, limit)

        return await self._run(work)

    def _log(self, norm: str | None, limit: int | None, rev: str | None) -> builtins.list[Commit]:
        repo = self._repo
        start = self._commit_for(rev)
        if start is None:
            return []
        if norm is None or norm == "/":
            return repo.log(start, limit)
        seq = repo.path_start(norm, start, self._branch)
        if repo.entry_at(start, norm) is None and (seq is None or repo.dir_exists_at(start, norm)):
            # A directory, present or deleted (it has no change rows of its own as a file).
            return repo.dir_log(norm, start, self._branch, limit)
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
        self._live()

        def work() -> Any:
            repo, keep = self._repo, where
            start = self._commit_for(rev)
            norm = None if path is None or normalize(path) == "/" else normalize(path)
            first = None if start is None or norm is None else repo.path_start(norm, start, self._branch)
            if start is not None and norm is not None and repo.entry_at(start, norm) is None and (
                first is None or repo.dir_exists_at(start, norm)
            ):
                # a directory, present or deleted, as in ``log``: its directory key's walk
                # (or, as ``Repository.dir_log`` says when, the whole log filtered)
                if first is None and not repo.directory_keys_stale():
                    norm = norm + "/"
                    first = repo.path_start(norm, start, self._branch)
                else:
                    inside = browse.under(norm)
                    keep, norm = (inside if keep is None else lambda c, w=keep: inside(c) and w(c)), None
            kind = browse.WHOLE if norm is None else browse.PATH
            if cursor is not None:
                frontier = browse.decode_cursor(cursor, kind)
            elif start is None or (norm is not None and first is None):
                frontier = []  # nothing yet, or a directory that never held anything
            else:
                frontier = [start if norm is None else first]
            return browse.log_page(repo, frontier, path=norm, limit=limit, keep=keep)

        return await self._run(work)

    async def find_text(self, path: str, text: str, *, rev: str | None = None) -> builtins.list[browse.TextChange]:
        """Where ``text`` appeared in and disappeared from ``path``: versions whose count of it changed, oldest first."""
        self._live()

        def work() -> Any:
            repo = self._repo
            norm = normalize(path)
            start = self._commit_for(rev)
            return [] if start is None else browse.find_text(repo, norm, text, repo.path_start(norm, start, self._branch))

        return await self._run(work)

    async def log_all(
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
        """The commits of every branch, newest first, each once (``git log --all``); filters as ``log``'s."""
        wanted = pickaxe.LogFilter(contains, matching, agent, tool, since, until, ignore_case)

        def work() -> list[Commit]:
            repo = self._repo
            heads = [bytes.fromhex(target) for target in history.branches(repo).values()]
            commits, _ = repo.log_page(heads, None if wanted.active else limit)
            return pickaxe.select(repo, commits, None, wanted, limit) if wanted.active else commits

        return await self._run(work)

    # ------------------------------------------------------------ branches, merge, undo

    async def branch(self, name: str, *, at: str = "HEAD") -> Self:
        """Create branch ``name`` at revision ``at`` and return a handle on it (same options as this one)."""
        revisions.check_ref_name(name)
        repo = self._repo
        await self._run(
            lambda: history.create_branch(repo, name, repo.resolve(at, self._branch), source_branch=self._branch)
        )
        return self.on_branch(name)

    def on_branch(self, name: str) -> Self:
        """Another handle on the same store, reading and committing on branch ``name``
        (of this handle's class: a ``VersionedStore`` gives a ``VersionedStore``).

        On a store opened with ``backend=``, the new handle shares that backend.
        """
        where: dict[str, Any] = {"location": self._location} if self._shared is None else {"backend": self._shared}
        return type(self)(
            **where, branch=name, author=self._author, durability=self._durability,
            poll_interval=self._poll_interval,
        )

    async def branches(self) -> dict[str, str]:
        return await self._run(lambda: history.branches(self._repo))

    async def delete_branch(self, name: str) -> None:
        revisions.check_ref_name(name)  # before the branch is locked
        if name == self._branch:
            raise errors.BranchInUse(f"cannot delete {name!r}: this handle is on it")
        if self._shared is None and not is_url(self._location) and _worktree.persisted_branch(self._location) == name:
            raise errors.BranchInUse(
                f"cannot delete {name!r}: the working tree of {self._location} follows it "
                "(open the folder with worktree=False first, or keep the branch)"
            )
        await self._run(lambda: history.delete_branch(self._repo, name))

    async def tag(self, name: str, rev: str = "HEAD") -> str:
        revisions.check_ref_name(name)

        def work() -> bytes:
            target = self._repo.resolve(rev, self._branch)
            history.create_tag(self._repo, name, target)
            return target

        return (await self._run(work)).hex()

    async def tags(self) -> dict[str, str]:
        return await self._run(lambda: history.tags(self._repo))

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
        self._live()
        _check_meta(message, None)
        resolved = {normalize(p): c for p, c in (resolutions or {}).items()}
        for content in resolved.values():
            if content is not None:
                _encode(content)

        def work() -> tuple[history.MergeResult, bytes | None]:
            repo = self._repo
            result = history.merge(
                repo, self._branch, repo.resolve(source, self._branch), author=self._author,
                kinds=history.merge_kinds(repo, repo.head(self._branch)),
                strategy=strategy, resolutions=resolved, message=message, source_name=source,
            )
            return result, (bytes.fromhex(result.commit) if result.commit else None)

        return await self._commit_by(work)

    async def declare_kind(self, pattern: str, kind: str) -> None:
        """Declare how merges treat paths matching ``pattern``: ``"append-log"``,
        ``"collection"``, ``"counter"`` or ``"text"`` (docs/api.md). One commit of
        the branch's ``/.memrev-merge-kinds.json``, so every handle and process
        merges the same way; the newest declaration of a path wins."""
        bad = revisions.UNSTORABLE.search(pattern) if isinstance(pattern, str) else None
        if bad:  # no path holds one (and the commit's message could not: it was InvalidContent)
            raise errors.InvalidMergeKind(
                f"bad kind pattern {pattern[:80]!r}: a control character or lone surrogate {bad.group()!r}"
            )
        for _attempt in range(100):
            head = await self.head()
            declared = history.parse_declarations(await self._bytes(history.KINDS_PATH, None))
            table = history.with_declaration(declared, pattern, kind)
            if self.in_transaction:  # joins the caller's commit
                await self.write(history.KINDS_PATH, table)
                return
            try:
                async with self.transaction(f"declare {pattern} as {kind} for merges", expect_head=head):
                    await self.write(history.KINDS_PATH, table)
                return
            except errors.ConcurrentUpdate:  # another writer moved the branch: read the table again
                continue
        raise errors.ConcurrentUpdate("the branch kept moving; the declaration was not made")

    async def merge_kinds(self, *, rev: str | None = None) -> builtins.list[tuple[str, str]]:
        """The (pattern, kind) table merges use at ``rev`` (default HEAD), first match first."""
        self._live()
        return await self._run(lambda: list(history.merge_kinds(self._repo, self._commit_for(rev)).rules))

    async def revert(self, rev: str) -> str | None:
        """A new commit undoing ``rev``; ``None`` if that changes nothing. Conflicts raise ``MergeConflict``."""
        if self._worktree is not None and self._worktree.branch == self._branch:

            def touched() -> builtins.list[str]:  # the paths a revert of rev can change
                repo = self._repo
                target = repo.resolve(rev, self._branch)
                parents = repo.commit_data(target)[1].parents
                return self._changed_paths(parents[0] if parents else None, target)

            await self._refuse_unstorable(await self._read(touched))

        def work() -> tuple[str | None, bytes | None]:
            repo = self._repo
            new = history.revert(
                repo, self._branch, repo.resolve(rev, self._branch), author=self._author,
                kinds=history.merge_kinds(repo, repo.head(self._branch)),
            )
            return new, (bytes.fromhex(new) if new else None)

        return await self._commit_by(work)

    async def restore(self, path: str, rev: str) -> str | None:
        """Make ``path`` (file or directory) what it was at ``rev``, as a new commit."""
        norm = normalize(path)
        meta = provenance.commit_meta(self, [norm], None)  # task-local: before the hop to the worker
        await self._refuse_unstorable([norm])

        def work() -> tuple[str | None, bytes | None]:
            repo = self._repo
            new = history.restore(
                repo, self._branch, norm, repo.resolve(rev, self._branch), author=self._author, meta=meta
            )
            return new, (bytes.fromhex(new) if new else None)

        return await self._commit_by(work)

    async def blame(self, path: str, *, rev: str | None = None) -> builtins.list[history.BlameLine]:
        """For each line of ``path`` at ``rev`` (default HEAD), the commit that last changed it."""
        norm = normalize(path)

        def work() -> list[history.BlameLine]:
            repo = self._repo
            start = self._commit_for(rev)
            if start is None or repo.entry_at(start, norm) is None:
                raise errors.RevisionNotFound(f"{norm} is not a file at {rev or 'HEAD'}")
            return history.blame(repo, norm, repo.path_start(norm, start, self._branch))

        return await self._run(work)

    async def why(
        self, path: str, line: int | None = None, *, rev: str | None = None, event_log: str = pickaxe.EVENT_LOG
    ) -> pickaxe.Why:
        """Why line ``line`` of ``path`` (default: its last change) is there: the commit, its provenance,
        the diff hunk, and the event-log lines of the same turn (``docs/provenance.md``)."""
        if line is not None and (type(line) is not int or line < 1):
            raise errors.InvalidPath(f"line must be an int >= 1, not {line!r}")
        norm = normalize(path)

        def work() -> pickaxe.Why:
            repo = self._repo
            start = self._commit_for(rev)
            if start is None or repo.entry_at(start, norm) is None:
                raise errors.RevisionNotFound(f"{norm} is not a file at {rev or 'HEAD'}")
            return pickaxe.why(repo, norm, start, self._branch, line, event_log=event_log)

        return await self._run(work)

    async def history(self, path: str, *, limit: int | None = None) -> builtins.list[tuple[Commit, int | None]]:
        """Every version of ``path``, newest first: (commit, size in bytes or ``None`` if deleted there)."""
        norm = normalize(path)

        def work() -> list[tuple[Commit, int | None]]:
            commits = self._log(norm, limit, None)
            return _with_sizes(commits, self._repo.entries_at(commits, norm))

        return await self._run(work)

    async def history_page(
        self, path: str, *, limit: int = 100, cursor: str | None = None
    ) -> tuple[builtins.list[tuple[Commit, int | None]], str | None]:
        """One page of ``history`` and the next page's cursor (see ``log_page``)."""
        norm = normalize(path)
        page = await self.log_page(norm, limit=limit, cursor=cursor)

        def work() -> list[tuple[Commit, int | None]]:
            return _with_sizes(page.commits, self._repo.entries_at(page.commits, norm))

        return await self._run(work), page.cursor

    def at(self, rev: str) -> RevisionView:
        """A read-only ``KnowledgeStore`` as of ``rev``; mutations raise ``ReadOnlyRevision``."""
        return RevisionView(self, bytes.fromhex(self._resolve_now(rev)))

    # ------------------------------------------------------------ bundles, maintenance

    async def export_bundle(
        self, file: str | os.PathLike[str], *, branches: builtins.list[str] | None = None, progress: gc_mod.Progress | None = None
    ) -> int:
        """Write branches (default all) and tags with every object they reach to one file.
        ``progress(what, count)`` is called every 1,000 objects on long runs."""
        return await self._run(lambda: self._export_bundle(file, branches, progress))

    def _export_bundle(
        self, file: str | os.PathLike[str], branches: builtins.list[str] | None, progress: gc_mod.Progress | None
    ) -> int:
        repo = self._repo
        buf = io.BytesIO()
        # One snapshot from the refs to the last object: a branch another handle deletes
        # and collects (gc) meanwhile is exported whole, as it was when the export began.
        with repo.backend.read_snapshot():
            refs = repo.backend.list_refs(revisions.HEAD_PREFIX)
            if branches is not None:
                missing = [b for b in branches if revisions.HEAD_PREFIX + b not in refs]
                if missing:
                    raise errors.RevisionNotFound(f"no branch {missing[0]!r}")
                refs = {revisions.HEAD_PREFIX + b: refs[revisions.HEAD_PREFIX + b] for b in branches}
            refs.update(repo.backend.list_refs(revisions.TAG_PREFIX))
            count = bundles.export_bundle(repo, buf, refs, progress)
        replace_file(file, buf.getvalue())  # refuses to replace a link, FIFO or device
        return count

    async def import_bundle(self, file: str | os.PathLike[str]) -> dict[str, str]:
        """Verify and import a bundle; returns the refs it set. A bad bundle raises ``InvalidBundle``."""

        def work() -> tuple[dict[str, str], bytes | None]:
            before = self._repo.head(self._branch)
            with bundles.open_bundle(file) as fh:
                imported = bundles.import_bundle(self._repo, fh)
            after = self._repo.head(self._branch)
            return imported, (after if after != before else None)

        return await self._commit_by(work)

    async def import_dir(self, folder: str | os.PathLike[str], *, message: str | None = None) -> FolderImport:
        """Turn a ``DiskKnowledgeStore`` folder into one commit on this branch (for migration).

        Only regular files are read (``memrev.folders.read``): symbolic links are never
        followed, FIFOs, sockets and devices never read; each is named in ``skipped``.
        """
        root = os.path.realpath(folder)
        if not os.path.isdir(root):
            raise FileNotFoundError(f"{folder} is not a folder")
        found, skipped = await asyncio.to_thread(read_regular_files, root)  # file I/O off the loop
        files = []
        for rel, raw in found:
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise errors.InvalidContent(f"{rel} is not UTF-8 text; nothing was imported") from None
            files.append((normalize(rel), text))
        before = await self.head()
        meta: dict[str, Any] = {"import_dir": root}
        if skipped:
            meta["skipped"] = [f"{rel}: {why}" for rel, why in skipped[:100]]
        async with self.transaction(message=message or f"import {os.path.basename(root)}", meta=meta):
            for path, text in files:
                await self.write(path, text)
        after = await self.head()
        commit = None if after == before else after
        return FolderImport(commit, tuple(p for p, _ in files), tuple(skipped))

    async def gc(self, *, keep_seconds: float = 14 * 86400, progress: gc_mod.Progress | None = None) -> dict[str, int]:
        """Delete what no branch, tag or recently deleted branch reaches; returns counts removed.
        ``progress(what, count)`` is called every 1,000 objects on long runs."""
        gc_mod.check_keep_seconds(keep_seconds)  # before the store's write lock is asked for
        return await self._run(lambda: gc_mod.gc(self._repo, keep_seconds=keep_seconds, progress=progress))

    async def reindex(self) -> None:
        """Rebuild the derived indexes from the objects (what ``fsck --repair`` does)."""
        await self._run(lambda: indexes.reindex(self._repo))

    async def fsck(self) -> builtins.list[str]:
        """Verify every object, reference and derived index; returns the problems found."""
        return await self._run(lambda: fsck_mod.fsck(self._repo))

    async def show(self, rev: str = "HEAD") -> Commit:
        return await self._run(lambda: self._repo.commit_info(self._repo.resolve(rev, self._branch)))

    async def diff_from_empty(self, rev: str, path: str | None = None) -> builtins.list[FileChange]:
        """Everything at ``rev`` as additions (what a root commit introduced)."""
        return await self.diff(None, rev, path)

    async def diff(self, rev_a: str | None, rev_b: str, path: str | Sequence[str] | None = None) -> builtins.list[FileChange]:
        """What changed from ``rev_a`` to ``rev_b``, sorted by path.

        ``rev_a`` ``None``: from nothing (what a root commit introduced).
        ``path``: only changes under it, or under any of several paths.
        """
        wanted = None if path is None else [normalize(p) for p in ([path] if isinstance(path, str) else path)]

        def work() -> list[FileChange]:
            repo = self._repo
            a, b = None if rev_a is None else repo.resolve(rev_a, self._branch), repo.resolve(rev_b, self._branch)
            if wanted is None or len(wanted) == 1:
                return repo.diff(a, b, None if wanted is None else wanted[0])
            # Several paths: one filtered diff each (only their files are read), a path under two counted once.
            found = {c.path: c for w in wanted for c in repo.diff(a, b, w)}
            return [found[p] for p in sorted(found)]

        return await self._run(work)

    async def last_change(self, path: str, *, rev: str | None = None) -> tuple[str | None, str]:
        """The two revisions of ``path``'s last change at ``rev``: ``(before, after)``.

        ``after`` is the newest commit that changed ``path``; ``before`` the
        commit of the version before it, else ``after``'s first parent
        (``None``: a root commit made the path). So ``diff(before, after,
        path)`` is what the last aggregate changed in a file, however many
        commits of other paths came since. ``RevisionNotFound`` when ``path``
        has no history.
        """
        versions = await self.log(path, limit=2, rev=rev)
        if not versions:
            raise errors.RevisionNotFound(f"{normalize(path)} has no history at {rev or 'HEAD'}")
        if len(versions) == 2:
            return versions[1].id, versions[0].id
        parents = versions[0].parents
        return (parents[0] if parents else None), versions[0].id


def _file_left(repo: Repository, root: bytes, folder: str, gone: Callable[[str], bool]) -> bool:
    """Some committed file under ``folder`` is not deleted; stops at the first one found."""
    node = trees.find_dir(repo, root, split(folder))
    return node is not None and any(not gone(p) for p, _ in trees.walk(repo, node, folder))


def _with_sizes(commits: list[Commit], entries: list[Any]) -> list[tuple[Commit, int | None]]:
    """``history``'s pairs: each commit with the file's size there (``None``: deleted there)."""
    return [(c, None if e is None else e.size) for c, e in zip(commits, entries, strict=True)]


def _orphaned(outcome: asyncio.Future) -> None:
    """The end of worker work whose caller was cancelled: its failure is logged, not left unretrieved."""
    if outcome.cancelled():
        return
    e = outcome.exception()
    if e is not None and not isinstance(e, errors.StoreClosed):
        log.warning("memrev: work whose caller was cancelled failed: %r", e)


def _call_soon(loop: asyncio.AbstractEventLoop, on_done: Callable[[Any], None], job: Future) -> None:
    """Hand a finished worker job's result to ``on_done`` on the loop (from the worker thread)."""
    if job.cancelled() or job.exception() is not None:
        return
    try:
        loop.call_soon_threadsafe(on_done, job.result())
    except RuntimeError:  # the loop is closed: nobody is left to tell
        log.warning("memrev: a commit finished after its event loop closed; subscribers were not told")


def _byte_window(size: int, start: int, end: int | None) -> tuple[int, int] | None:
    """``[lo, hi)`` of a ``size``-byte file that ag2's ``MemoryKnowledgeStore.read_range`` returns; None: "".

    ag2 computes ``stop = min(end, size)``, returns "" when ``start >= stop``,
    then slices ``data[start:stop]``, so negative bounds count from the end
    as Python slices do.
    """
    stop = size if end is None else min(end, size)
    if start >= stop:
        return None
    lo, hi, _ = slice(start, stop).indices(size)
    return None if lo >= hi else (lo, hi)


def _slice_text(data: bytes, start: int, end: int | None) -> str:
    window = _byte_window(len(data), start, end)
    return "" if window is None else data[window[0] : window[1]].decode("utf-8", errors="strict")


def _visible(path: str, names: builtins.list[str]) -> builtins.list[str]:
    """A listing of ``path`` without memrev's own files (``core.paths.OWN_FILES``): the
    agent's view of its memory, as ``/.memrev`` is never in it. Reading one by name still works."""
    prefix = path.rstrip("/") + "/"
    return [n for n in names if not is_own(prefix + n)]


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

    def __init__(self, store: Store, commit: bytes) -> None:
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
