"""``Store``: an AG2 ``KnowledgeStore`` whose every mutation is a commit.

The async face of the synchronous :class:`~memrev.repo.Repository`, free of
every agent framework: this package imports no AutoGen, ag2 or OpenAI Agents
code, so the CLI and ``import memrev`` stay fast. The public
``memrev.VersionedStore`` (``memrev/versioned_store.py``) is this class plus
AutoGen's ``Memory`` interface.

``Store`` is the face; each method says what it does and hands the work on:

- ``memrev.store.run``: where work runs (the event loop or the handle's worker
  thread, :meth:`Runner.run`), the shared backend, ``close()``'s result;
- ``memrev.store.txn``: transactions, commits, planned commits with ``expect_head``;
- ``memrev.store.notify``: ``on_change``, polling, delivery to subscribers;
- ``memrev.store.work``: the synchronous repository work of each method;
- ``memrev.store.views``: ``RevisionView`` (``at(rev)``).

See docs/design.md, "Async".
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import functools
import logging
import os
import threading
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from .. import errors, history, provenance
from ..backends import Backend, is_url
from ..core.objects import check_new_commit_text
from ..core.paths import normalize
from ..folders import adopt
from ..folders import worktree as _worktree
from ..folders.read import FolderImport, Limits, read_regular_files
from ..history import browse, pickaxe
from ..repo import indexes, purged, revisions
from ..repo.groupcommit import CommitQueue
from ..repo.ops import ANY_HEAD, AnyHead, Append, Delete, Expect, Op, Write
from ..repo.repository import Commit, FileChange, Repository
from . import work
from .notify import ChangeCallback, Notifier, Subscription, changed_paths, deliver
from .opening import SharedBackend, open_repository, shared_backend
from .run import CLOSED, Closed, Runner
from .txn import Change, Writer, check_meta, encode_text, expectation, file_path
from .views import RevisionView

if TYPE_CHECKING:
    from typing_extensions import Self  # typing.Self is Python 3.11+; memrev supports 3.10

    # Whole-store work is imported where it runs: a command that only reads
    # (``memrev log``) does not pay for fsck, gc, purge and bundles at start.
    from ..maintenance import gc as gc_mod
    from ..maintenance import purge as purge_mod

__all__ = ["CLOSED", "ChangeCallback", "Closed", "RevisionView", "Store"]

log = logging.getLogger("memrev")
_T = TypeVar("_T")


def _utf8(data: object) -> str:
    if not isinstance(data, bytes):
        raise errors.InvalidContent(f"an op's data is UTF-8 bytes, not {type(data).__name__}")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise errors.InvalidContent(f"an op's data is not UTF-8: {e.reason} at {e.start}") from None


class Store:
    """A versioned, path-keyed knowledge store (see ``docs/api.md``).

    Framework-free. ``memrev.VersionedStore`` (``memrev.versioned_store``) subclasses it
    to be an AutoGen ``Memory`` as well; the CLI and the viewer open a ``Store``.

    Opened on a ``location``, a handle opens its backend and closes it on
    ``close()``. Given ``backend=``, it owns that backend the same way; the
    handles ``on_branch`` opens from it share it, and the last to close closes it.
    """

    def __init__(
        self,
        location: str | os.PathLike[str] | None = None,
        *,
        backend: Backend | SharedBackend | None = None,
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
        self._shared = shared_backend(location, backend, worktree)
        self._location = repr(self._shared.backend) if self._shared is not None else os.fspath(location)  # type: ignore[arg-type]  # shared_backend: exactly one of them
        self._durability = durability
        self._repo, self._worktree = open_repository(
            self._location, self._shared, branch=branch, durability=durability, create=create,
            worktree=worktree, poll_interval=poll_interval,
        )
        # The repository's caches and its one database connection are shared
        # by the event loop (inline work) and this handle's worker thread.
        self._lock = threading.Lock() if self._shared is None else self._shared.lock
        self._runner = Runner(self._repo, self._lock, type(self).__name__)
        self._queue = CommitQueue()  # the others wait for the worker, and are committed together
        self._branch = branch
        self._author = author
        self._poll_interval = poll_interval
        where = os.path.realpath(self._location) if self._shared is None else f"backend@{id(self._shared)}"
        self._notify = Notifier(self._runner, branch, where + "#" + branch, poll_interval)
        self._txn = Writer(
            self, self._runner, self._notify, branch=branch, author=author, queue=self._queue,
            inline_commits=self._runner.local and durability == "normal",
            refuse_unstorable=self._refuse_unstorable, sync_files=self._sync_files,
        )

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
        return self._txn.own() is not None

    async def head(self) -> str | None:
        """The commit id at the tip of this handle's branch, ``None`` before the first commit."""
        head = await self._read(lambda: self._repo.head(self._branch))
        return None if head is None else head.hex()

    @property
    def repo(self) -> Repository:
        return self._live()

    def _live(self) -> Repository:
        return self._runner.live()

    async def _run(self, work: Callable[[], _T], **where: Any) -> _T:
        """Run repository work where it belongs (:meth:`memrev.store.run.Runner.run`)."""
        return await self._runner.run(work, **where)

    async def _read(self, work: Callable[[], _T], rev: str | None = None) -> _T:
        return await self._runner.read(work, rev)

    # ------------------------------------------------------------ lifecycle

    def close(self) -> Closed:
        """Release the database connection and stop change polling. Idempotent.

        Synchronous; returns an awaitable, so AutoGen's ``await memory.close()`` works too.
        Work already running in the handle's worker thread finishes first; the
        connection is closed after it, never under it.
        """
        if self._runner.closed:
            return CLOSED
        self._runner.closed = True
        self._notify.close()
        if self._worktree is not None:
            _worktree.release(self._worktree)
            self._worktree = None
        self._runner.shut(self._close_backend_now)
        return CLOSED

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
        return work.commit_for(self._repo, self._branch, rev)

    async def resolve(self, rev: str) -> str:
        return (await self._read(lambda: self._repo.resolve(rev, self._branch), rev)).hex()

    def resolve_now(self, rev: str) -> str:
        """``resolve`` for synchronous callers (``at()``): waits for the handle lock on the caller's thread."""
        self._live()
        return self._runner.locked(lambda: self._repo.resolve(rev, self._branch)).hex()

    # ------------------------------------------------------------ reading

    async def read(self, path: str, *, rev: str | None = None) -> str | None:
        data = await self._txn.read_bytes(normalize(path), rev)
        return None if data is None else data.decode("utf-8")

    async def read_versioned(self, path: str, *, rev: str | None = None) -> tuple[str | None, str | None]:
        """``(content, version)`` of ``path``, read together: the version is the id of the
        commit that last changed the path on this branch (or on ``rev``'s line); ``(None,
        None)`` when it does not exist. Hand the version back as ``expected=`` to write only
        if nobody changed the path since (``WriteConflict`` otherwise). In a transaction it
        reads what is committed: staged changes have no version yet."""
        norm = file_path(path)
        data, version = await self._read(functools.partial(work.read_versioned, self._repo, self._branch, norm, rev), rev)
        return (None if data is None else data.decode("utf-8")), version

    async def read_many(self, paths: Sequence[str], *, rev: str | None = None) -> dict[str, str | None]:
        """Several files as ``read`` gives them (``None``: absent), all at one commit (``rev``,
        default the head) and in one hop to the worker thread: a folder of thousands of
        files costs one job, not thousands. What is committed: a transaction's staged writes
        are not in it."""
        norms = [file_path(p) for p in paths]
        found = await self._run(functools.partial(work.read_many, self._repo, self._branch, norms, rev))
        return {p: None if d is None else d.decode("utf-8") for p, d in found.items()}

    async def list(self, path: str = "/", *, rev: str | None = None) -> builtins.list[str]:
        norm = normalize(path)
        txn = self._txn.own()
        if rev is None and txn is not None and txn.view:
            return work.visible(norm, await self._txn.txn_list(txn, norm))
        return work.visible(norm, await self._read(lambda: self._repo.list_at(self._commit_for(rev), norm), rev))

    async def exists(self, path: str, *, rev: str | None = None) -> bool:
        norm = normalize(path)
        if await self._txn.read_bytes(norm, rev) is not None:
            return True
        txn = self._txn.own()
        if rev is None and txn is not None and txn.view:
            return bool(work.visible(norm, await self._txn.txn_list(txn, norm)))
        return await self._read(functools.partial(work.exists_at, self._repo, self._branch, norm, rev), rev)

    async def tree(
        self, path: str = "/", *, rev: str | None = None, depth: int = 1
    ) -> builtins.list[work.TreeEntry] | None:
        """The files and folders below the folder ``path``, ``depth`` levels deep, with sizes
        (:class:`~memrev.store.work.TreeEntry`; a folder's size is every file below it), as
        committed at ``rev`` (default the head; a transaction's staged writes are not in it);
        ``None`` when ``path`` is no folder there (``"/"`` always is one)."""
        norm = normalize(path)
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
            raise errors.InvalidArgument(f"depth must be a positive int, not {depth!r}")
        listing = functools.partial(work.tree, self._repo, self._branch, norm, rev, depth)
        # one folder is a bounded read (inline when it cannot wait); deeper walks every folder below: the worker
        return await (self._read(listing, rev) if depth == 1 else self._run(listing))

    async def grep(
        self, text: str, path: str = "/", *, rev: str | None = None, ignore_case: bool = False, limit: int = 200
    ) -> work.Grep:
        """The lines holding ``text`` in the file ``path`` or the files below the folder ``path``, as
        committed at ``rev`` (default the head): :class:`~memrev.store.work.Grep` of ``GrepHit(path,
        line, text)``, at most ``limit``, reading at most 2,000 files and 32 MiB (``truncated`` says a
        bound stopped it). ``PathNotFound`` when ``path`` is neither a file nor a folder there."""
        norm = normalize(path)
        if not isinstance(text, str) or not text:
            raise errors.InvalidArgument("grep needs a non-empty str to look for")
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise errors.InvalidArgument(f"limit must be a positive int, not {limit!r:.40}")
        # in the worker, never inline on the loop: it reads up to GREP_BYTES
        found = await self._run(functools.partial(work.grep, self._repo, self._branch, norm, text, rev, ignore_case, limit))
        if found is None:
            raise errors.PathNotFound(f"{norm} is neither a file nor a folder at {rev or 'HEAD'}")
        return found

    async def read_range(self, path: str, start: int, end: int | None = None, *, rev: str | None = None) -> str:
        """Bytes ``[start, end)`` of ``path`` as text, exactly as ag2's ``MemoryKnowledgeStore`` slices them."""
        norm = normalize(path)
        if rev is None and self._txn.own() is not None:
            data = await self._txn.read_bytes(norm, rev)
            return "" if data is None else work.slice_text(data, start, end)
        return await self._read(functools.partial(work.text_range, self._repo, self._branch, norm, start, end, rev), rev)

    # ------------------------------------------------------------ writing

    async def write(
        self, path: str, content: str, *, message: str | None = None, meta: dict | None = None, expected: str | None = None
    ) -> None:
        """Make ``path`` hold ``content`` (one commit; none when it holds it already).

        ``expected``: only if the path is still at that version (``read_versioned``;
        ``"absent"``: only if it does not exist), checked under the commit's lock, so it holds
        across tasks, processes and hosts; else ``WriteConflict`` and nothing is written."""
        norm, data = file_path(path), encode_text(content)
        check_meta(message, meta)
        await self._txn.mutate(Write(norm, data), message, meta, expect=expectation(norm, expected))

    async def append(self, path: str, content: str, *, expected: str | None = None) -> int:
        """Add ``content`` at the end of ``path`` (creating it); returns the offset it landed at.
        ``expected`` as for ``write``."""
        norm, data = file_path(path), encode_text(content)
        offsets = await self._txn.mutate(Append(norm, data), None, None, expect=expectation(norm, expected))
        return offsets[0]

    async def delete(self, path: str, *, message: str | None = None, expected: str | None = None) -> None:
        """Remove ``path`` (a file, and everything under it). ``expected`` as for ``write``:
        the version of the file at ``path``."""
        norm = normalize(path)
        check_meta(message, None)
        await self._txn.mutate(Delete(norm), message, None, expect=expectation(norm, expected))

    async def commit_ops(
        self,
        ops: Sequence[Write | Append | Delete | Expect],
        *,
        message: str | None = None,
        meta: dict | None = None,
        expect_head: str | None | AnyHead = ANY_HEAD,
    ) -> work.Committed:
        """One commit of ``ops`` (``memrev.repo.ops`` records: ``Write``, ``Append``, ``Delete``, and
        ``Expect`` conditions), each path checked as ``write``/``delete`` check it, ``expect_head``
        as ``transaction`` takes it. Returns :class:`~memrev.store.work.Committed`: the new commit's
        id (``None`` when nothing changed) and each ``Append``'s offset. For callers that need the id
        of the commit they made (a version to hand back: ``docs/mcp.md``); not inside a transaction."""
        checked: builtins.list[Op] = []
        for op in ops:
            if isinstance(op, (Write, Append)):
                data = encode_text(_utf8(op.data))
                checked.append(Write(file_path(op.path), data) if isinstance(op, Write) else Append(file_path(op.path), data, op.offset))
            elif isinstance(op, Delete):
                checked.append(Delete(normalize(op.path)))
            elif isinstance(op, Expect) and (op.version is None or (isinstance(op.version, bytes) and len(op.version) == 20)):
                checked.append(Expect(normalize(op.path), op.version))
            else:
                raise errors.InvalidArgument(f"not an op commit_ops takes: {op!r:.80}")
        check_meta(message, meta)
        if not (expect_head is None or isinstance(expect_head, (str, AnyHead))):
            raise TypeError(f"expect_head is a commit id, None or ANY_HEAD, not {expect_head!r}")
        head = bytes.fromhex(expect_head) if isinstance(expect_head, str) else expect_head
        result = await self._txn.commit_ops(checked, message, meta, expect_head=head)
        return work.Committed(None if result.id is None else result.id.hex(), builtins.list(result.offsets))

    def transaction(
        self, message: str | None = None, meta: dict | None = None, *, expect_head: str | None | AnyHead = ANY_HEAD
    ) -> contextlib.AbstractAsyncContextManager[Self]:
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
        return self._txn.transaction(message, meta, expect_head=expect_head)

    async def commit_planned(self, plan: Callable[[], Awaitable[Change | None]], *, give_up: str) -> Any:
        """Commit the :class:`~memrev.store.txn.Change` ``plan()`` makes from the head, planning
        again while other writers move the branch (``memrev.store.txn.Writer.commit_planned``).
        Inside this task's open transaction its ops join that transaction."""
        return await self._txn.commit_planned(plan, give_up)

    def provenance(self, **fields: Any) -> contextlib.AbstractAsyncContextManager[dict[str, Any]]:
        """``async with store.provenance(agent=..., turn=...):`` every commit this task makes inside
        carries these fields in ``meta``; explicit ``meta`` wins (``docs/provenance.md``)."""
        return provenance.provenance(**fields)

    # ------------------------------------------------------------ change notification

    async def on_change(self, path: str, callback: ChangeCallback) -> Subscription:
        """Call ``await callback(path)`` for each changed path under ``path``, whoever commits it."""
        return await self._notify.subscribe(path, callback)

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
            log.warning("working tree %s not updated yet: %s", self._location, e)

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
        return await self._run(functools.partial(work.any_log, self._repo, self._branch, norm, limit, rev, wanted))

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
        return await self._run(functools.partial(work.log_page, self._repo, self._branch, path, limit, cursor, rev, where))

    async def find_text(self, path: str, text: str, *, rev: str | None = None) -> builtins.list[browse.TextChange]:
        """Where ``text`` appeared in and disappeared from ``path``: versions whose count of it changed, oldest first."""
        self._live()
        return await self._run(functools.partial(work.find_text, self._repo, self._branch, path, text, rev))

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
        return await self._run(functools.partial(work.log_all, self._repo, limit, wanted))

    # ------------------------------------------------------------ branches, merge, undo

    async def branch(self, name: str, *, at: str = "HEAD") -> Self:
        """Create branch ``name`` at revision ``at`` and return a handle on it (same options as this one).

        The new handle is opened in this handle's worker thread, not on the
        event loop: opening a backend may connect over the network (PostgreSQL).
        """
        revisions.check_ref_name(name)
        repo = self._repo
        await self._run(
            lambda: history.create_branch(repo, name, repo.resolve(at, self._branch), source_branch=self._branch)
        )
        return await self._runner.open_off_loop(lambda: self.on_branch(name))

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
        return (await self._run(functools.partial(work.tag, self._repo, self._branch, name, rev))).hex()

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
        check_meta(message, None)
        resolved = {normalize(p): c for p, c in (resolutions or {}).items()}
        for content in resolved.values():
            if content is not None:
                encode_text(content)
        return await self._txn.commit_by(functools.partial(
            work.merge, self._repo, self._branch, self._author, source,
            strategy=strategy, resolutions=resolved, message=message,
        ))

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

        async def plan() -> Change:
            declared = history.parse_declarations(await self._txn.read_bytes(history.KINDS_PATH, None))
            table = history.with_declaration(declared, pattern, kind)
            return Change(f"declare {pattern} as {kind} for merges", None, [Write(history.KINDS_PATH, encode_text(table))])

        await self._txn.commit_planned(plan, "the branch kept moving; the declaration was not made")

    async def merge_kinds(self, *, rev: str | None = None) -> builtins.list[tuple[str, str]]:
        """The (pattern, kind) table merges use at ``rev`` (default HEAD), first match first."""
        self._live()
        return await self._run(lambda: list(history.merge_kinds(self._repo, self._commit_for(rev)).rules))

    async def revert(self, rev: str) -> str | None:
        """A new commit undoing ``rev``; ``None`` if that changes nothing. Conflicts raise ``MergeConflict``."""
        repo, branch = self._repo, self._branch
        if self._worktree is not None and self._worktree.branch == branch:
            changed = functools.partial(changed_paths, repo)
            await self._refuse_unstorable(await self._read(functools.partial(work.revert_touches, repo, branch, rev, changed)))
        return await self._txn.commit_by(functools.partial(work.revert, repo, branch, self._author, rev))

    async def restore(self, path: str, rev: str) -> str | None:
        """Make ``path`` (file or directory) what it was at ``rev``, as a new commit."""
        norm = normalize(path)
        meta = provenance.commit_meta(self, [norm], None)  # task-local: before the hop to the worker
        await self._refuse_unstorable([norm])
        return await self._txn.commit_by(functools.partial(work.restore, self._repo, self._branch, self._author, norm, rev, meta))

    async def blame(self, path: str, *, rev: str | None = None) -> builtins.list[history.BlameLine]:
        """For each line of ``path`` at ``rev`` (default HEAD), the commit that last changed it."""
        return await self._run(functools.partial(work.blame, self._repo, self._branch, normalize(path), rev))

    async def why(
        self, path: str, line: int | None = None, *, rev: str | None = None, event_log: str = pickaxe.EVENT_LOG
    ) -> pickaxe.Why:
        """Why line ``line`` of ``path`` (default: its last change) is there: the commit, its provenance,
        the diff hunk, and the event-log lines of the same turn (``docs/provenance.md``)."""
        if line is not None and (type(line) is not int or line < 1):
            raise errors.InvalidPath(f"line must be an int >= 1, not {line!r}")
        norm = normalize(path)
        return await self._run(functools.partial(work.why, self._repo, self._branch, norm, line, rev, event_log))

    async def history(self, path: str, *, limit: int | None = None) -> builtins.list[tuple[Commit, int | None]]:
        """Every version of ``path``, newest first: (commit, size in bytes or ``None`` if deleted there)."""
        norm = normalize(path)
        repo, branch = self._repo, self._branch
        return await self._run(lambda: work.with_sizes(repo, work.log(repo, branch, norm, limit, None), norm))

    async def history_page(
        self, path: str, *, limit: int = 100, cursor: str | None = None
    ) -> tuple[builtins.list[tuple[Commit, int | None]], str | None]:
        """One page of ``history`` and the next page's cursor (see ``log_page``)."""
        norm = normalize(path)
        page = await self.log_page(norm, limit=limit, cursor=cursor)
        return await self._run(functools.partial(work.with_sizes, self._repo, page.commits, norm)), page.cursor

    def at(self, rev: str) -> RevisionView:
        """A read-only ``KnowledgeStore`` as of ``rev``; mutations raise ``ReadOnlyRevision``."""
        return RevisionView(self, bytes.fromhex(self.resolve_now(rev)))

    # ------------------------------------------------------------ bundles, maintenance

    async def export_bundle(
        self, file: str | os.PathLike[str], *, branches: builtins.list[str] | None = None, progress: gc_mod.Progress | None = None
    ) -> int:
        """Write branches (default all) and tags with every object they reach to one file.
        ``progress(what, count)`` is called every 1,000 objects on long runs."""
        return await self._run(functools.partial(work.export_bundle, self._repo, file, branches, progress))

    async def import_bundle(self, file: str | os.PathLike[str]) -> dict[str, str]:
        """Verify and import a bundle; returns the refs it set. A bad bundle raises ``InvalidBundle``."""
        return await self._txn.commit_by(functools.partial(work.import_bundle, self._repo, self._branch, file))

    async def import_dir(self, folder: str | os.PathLike[str], *, message: str | None = None) -> FolderImport:
        """Turn a ``DiskKnowledgeStore`` folder into one commit on this branch (for migration).

        Only regular files are read (``memrev.folders.read``): symbolic links are never
        followed, FIFOs, sockets and devices never read; each is named in ``skipped``.
        The read is bounded as adoption's is (``memrev.folders.adopt`` limits: a file
        over the per-file limit is skipped; more files or bytes than the folder
        limits raise ``FolderTooLarge``, and nothing is written).
        """
        root = os.path.realpath(folder)
        if not os.path.isdir(root):
            raise FileNotFoundError(f"{folder} is not a folder")
        limits = Limits(adopt.MAX_FILES, adopt.MAX_TOTAL_BYTES, adopt.MAX_FILE_BYTES)
        found, skipped = await asyncio.to_thread(read_regular_files, root, limits)  # file I/O off the loop
        files = []
        for rel, raw in found:
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError:
                raise errors.InvalidContent(f"{rel} is not UTF-8 text; nothing was imported") from None
            files.append((file_path(rel), raw))
        before = await self.head()
        meta: dict[str, Any] = {"import_dir": root}
        if skipped:
            meta["skipped"] = [f"{rel}: {why}" for rel, why in skipped[:100]]
        async with self.transaction(message=message or f"import {os.path.basename(root)}", meta=meta):
            await self._txn.apply([Write(path, data) for path, data in files])
        after = await self.head()
        return FolderImport(None if after == before else after, tuple(p for p, _ in files), tuple(skipped))

    async def gc(self, *, keep_seconds: float = 14 * 86400, progress: gc_mod.Progress | None = None) -> dict[str, int]:
        """Delete what no branch, tag or recently deleted branch reaches; returns counts removed.
        ``progress(what, count)`` is called every 1,000 objects on long runs."""
        from ..maintenance import gc as gc_mod

        gc_mod.check_keep_seconds(keep_seconds)  # before the store's write lock is asked for
        return await self._run(lambda: gc_mod.gc(self._repo, keep_seconds=keep_seconds, progress=progress))

    async def purge(
        self,
        *,
        paths: Sequence[str] | str | None = None,
        text: Sequence[str] | str | None = None,
        reason: str,
        dry_run: bool = False,
        progress: gc_mod.Progress | None = None,
    ) -> purge_mod.PurgeReport:
        """Erase what ``paths`` (patterns, as ``declare_kind``'s) and ``text`` (exact strings)
        match from every revision, ref and byte of the store, and verify it (docs/purge.md).

        Every version of a matching path is removed from history; every occurrence of a
        string is replaced by ``[purged]`` in files, commit messages, authors and ``meta``.
        The commits from the first one affected get new ids (``resolve(old)`` gives the new
        one); the purge's record is a commit on ``refs/purges``. ``dry_run``: report what
        would be rewritten and change nothing. Takes the write lock, like ``gc``. A working
        tree's files are rewritten before it returns.
        """
        from ..maintenance import purge as purge_mod

        purge_mod.Predicate(paths, text)  # bad arguments: InvalidArgument before any lock
        purge_mod.check_reason(reason)
        tree = self._worktree
        if tree is not None and not dry_run:
            await self._sync_files()  # outside edits are history first: then they are purged too

        def run() -> purge_mod.PurgeReport:
            # The folder's working tree follows the purge even when this handle keeps none
            # (opened on the store file, or worktree=False while the folder's mode is on).
            held = (
                _worktree.for_purge(self._location, self._durability, tree)
                if not dry_run and self._shared is None
                else contextlib.nullcontext(tree)
            )
            with held as t:
                guard = t.purging() if t is not None and not dry_run else contextlib.nullcontext()
                with guard:
                    return purge_mod.purge(
                        self._repo, paths=paths, text=text, reason=reason, author=self.author, dry_run=dry_run,
                        files=lambda: [] if t is None else t.owned_files(), progress=progress,
                        after_commit=None if t is None else t.follow_purge,
                    )

        report = await self._run(run)
        if not dry_run and revisions.branch_ref(self._branch) in report.refs_moved:
            # subscribers of this process hear of it now (the poller of another process at its next look)
            head, seq = await self._read(self._notify.head_and_seq)
            if head is not None:
                await deliver(self._notify.announce(head, head, seq, []))
        return report

    async def verify_purged(self, *, text: Sequence[str] | str) -> builtins.list[str]:
        """Where any of ``text`` is still found: every object memrev decodes (blobs rebuilt,
        commits, trees, refs, index rows) and every byte of the store's files (the database
        and its journals; a working tree's files and ``.memrev/``), zstd frames decompressed.
        ``[]``: nowhere (what a purge of ``text`` checks before it returns)."""
        from ..maintenance import purge as purge_mod
        from ..maintenance import purge_scan

        pred = purge_mod.Predicate(None, text)
        tree = self._worktree
        return await self._run(
            lambda: purge_scan.scan(self._repo, pred, files=[] if tree is None else tree.owned_files())
        )

    async def rewritten(self, rev: str) -> purged.Rewritten | None:
        """What a purge did to the commit id (or id prefix) ``rev``: its new id and the purge's
        record; ``None`` when no purge rewrote it (``memrev show OLD`` says so)."""
        return await self._run(lambda: purged.rewritten(self._repo, rev))

    async def reindex(self) -> None:
        """Rebuild the derived indexes from the objects (what ``fsck --repair`` does)."""
        await self._run(lambda: indexes.reindex(self._repo))

    async def fsck(self) -> builtins.list[str]:
        """Verify every object, reference and derived index; returns the problems found."""
        from ..maintenance import fsck as fsck_mod

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
        return await self._run(functools.partial(work.diff, self._repo, self._branch, rev_a, rev_b, wanted))

    async def last_change(self, path: str, *, rev: str | None = None) -> tuple[str | None, str]:
        """The two revisions of ``path``'s last change at ``rev``: ``(before, after)``.

        ``after`` is the newest commit that changed ``path``; ``before`` the
        commit of the version before it, else ``after``'s first parent
        (``None``: a root commit made the path). So ``diff(before, after,
        path)`` is what the last aggregate changed in a file, however many
        commits of other paths came since. ``RevisionNotFound`` when ``path``
        has no history.
        """
        return await self._run(functools.partial(work.last_change, self._repo, self._branch, normalize(path), rev))
