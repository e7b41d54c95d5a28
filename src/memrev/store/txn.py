"""Writes of a store handle: transactions, commits, and planned commits with ``expect_head``.

A mutation outside a transaction is one commit (:meth:`Writer.commit`: on the
loop when it cannot wait, else queued for the worker's group commit). Inside
``transaction()`` it is staged by the task that opened it, and reads of that
task see what it staged. :meth:`Writer.commit_planned` is the one place that
plans a change from the head it read, commits it with ``expect_head`` and plans
again when another writer moved the branch meanwhile (the adapters' item
folders, ``VersionedMemory.add`` and ``declare_kind`` all go through it).
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from .. import errors, provenance
from ..core import trees
from ..core.objects import check_new_commit_text
from ..core.paths import ancestors, is_under, normalize, split
from ..repo.groupcommit import CommitQueue, Pending
from ..repo.ops import ANY_HEAD, AnyHead, Append, Delete, Expect, Op, Write
from ..repo.repository import CommitRequest, CommitResult, Repository
from . import work
from .notify import Batch, Notifier, changed_paths, deliver
from .run import Runner, current_task

_T = TypeVar("_T")
PlannedOp = Write | Delete  # what a planned change holds: memrev.repo.ops records, staged with the store's checks
ATTEMPTS = 100


def encode_text(content: object) -> bytes:
    """Content as the store holds it: a ``str`` of valid Unicode, as UTF-8 bytes."""
    if not isinstance(content, str):
        raise errors.InvalidContent(f"content must be str, not {type(content).__name__}")
    try:
        return content.encode("utf-8")
    except UnicodeEncodeError as e:
        raise errors.InvalidContent(f"content is not valid Unicode text: {e.reason} at {e.start}") from None


FULL_VERSION = re.compile(r"[0-9a-fA-F]{40}")


def expectation(path: str, expected: object) -> Expect | None:
    """The condition ``expected=`` puts on a write, append or delete of ``path``: ``None`` (no
    condition), ``"absent"``, or a version (a full commit id, as ``read_versioned`` gives).
    Anything else is ``InvalidArgument``, before anything is written."""
    if expected is None:
        return None
    if expected == "absent":
        return Expect(path, None)
    if isinstance(expected, str) and FULL_VERSION.fullmatch(expected):
        return Expect(path, bytes.fromhex(expected))
    raise errors.InvalidArgument(
        f"expected= is a version from read_versioned (a 40-digit commit id) or 'absent', not {str(expected)[:60]!r}"
    )


def file_path(path: object) -> str:
    norm = normalize(path)
    if norm == "/":
        raise errors.InvalidPath(f"{path!r} names the root directory, which cannot hold content")
    return norm


def check_meta(message: object, meta: object) -> None:
    """Commit metadata is refused before anything is staged: a str message
    without control characters, a JSON object of meta (the same check bundles
    get), each within its size limit (``memrev.core.objects.MAX_MESSAGE_BYTES``, ``MAX_META_BYTES``)."""
    check_new_commit_text(None, message, meta)


class Transaction:
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


@dataclass
class Change:
    """One planned commit: what it does, and what the caller gets back once it is made."""

    message: str
    meta: dict[str, Any] | None
    ops: list[PlannedOp] = field(default_factory=list)
    result: Any = None


class Writer:
    """The transactions and commits of one handle.

    ``owner`` is the handle (provenance is looked up by it, and
    ``transaction()`` yields it); ``refuse_unstorable`` and ``sync_files`` are
    its working tree's checks before and after a commit.
    """

    def __init__(
        self,
        owner: Any,
        runner: Runner,
        notifier: Notifier,
        *,
        branch: str,
        author: str,
        queue: CommitQueue,
        inline_commits: bool,
        refuse_unstorable: Callable[[builtins.list[str]], Awaitable[None]],
        sync_files: Callable[[], Awaitable[None]],
    ) -> None:
        self._owner, self._runner, self._notifier = owner, runner, notifier
        self._branch, self._author, self._queue = branch, author, queue
        # A commit may run on the loop only when it cannot wait: a local
        # backend, the write lock free, no fsync per commit (durability="full").
        self._inline_commits = inline_commits
        self._refuse_unstorable, self._sync_files = refuse_unstorable, sync_files
        self._txns: dict[asyncio.Task, Transaction] = {}

    def own(self) -> Transaction | None:
        """The open transaction of the running task; tasks it spawned have none."""
        txn = self._txns.get(current_task())  # type: ignore[arg-type]
        return None if txn is None or txn.closed else txn

    # ------------------------------------------------------------ reads that see the transaction

    async def read_bytes(self, path: str, rev: str | None) -> bytes | None:
        txn = self.own()
        if rev is None and txn is not None:
            if path in txn.view:
                return txn.view[path]
            if any(a in txn.cut for a in ancestors(path)):
                return None
        repo, branch = self._runner.repo, self._branch
        return await self._runner.read(lambda: work.file_bytes(repo, branch, path, rev), rev)

    async def txn_list(self, txn: Transaction, path: str) -> builtins.list[str]:
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
            repo = self._runner.repo
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

        names = set(await self._runner.read(committed_names))
        for p, v in txn.view.items():
            if v is not None and p.startswith(prefix):
                rest = p[len(prefix) :]
                names.add(rest.split("/")[0] + "/" if "/" in rest else rest)
        return sorted(names)

    # ------------------------------------------------------------ mutations

    async def mutate(self, op: Op, message: str | None, meta: dict | None, *, expect: Expect | None = None) -> builtins.list[int]:
        self._runner.live()
        txn = self.own()
        if txn is not None:
            if expect is not None:
                txn.ops.append(expect)  # checked with the transaction's other conditions, at its commit
            return [await self._stage(txn, op)]
        result = await self.commit_ops([op] if expect is None else [expect, op], message, meta)
        return result.offsets

    async def commit_ops(
        self, ops: builtins.list[Op], message: str | None, meta: dict | None, *, expect_head: bytes | None | AnyHead = ANY_HEAD
    ) -> CommitResult:
        """One commit of ``ops`` outside any transaction, with this task's provenance."""
        if self.own() is not None:
            raise errors.InvalidArgument("commit_ops makes a commit of its own: call it outside a transaction")
        changed = [op.path for op in ops if not isinstance(op, Expect)]
        meta = provenance.commit_meta(self._owner, changed, meta)  # task-local: before any hop to the worker
        result = await self.commit(ops, message=message, meta=meta, expect_head=expect_head)
        unsaid = [op.path for op in ops if isinstance(op, (Write, Append))]
        if result.id is None and unsaid:
            # No commit (same content, empty append), but ag2's stores report every
            # write and append to subscribers; so does this one.
            await deliver(self._notifier.announce_paths(unsaid))
        return result

    async def _stage(self, txn: Transaction, op: Op) -> int:
        path = op.path
        offset = 0
        if isinstance(op, Append):
            current = await self.read_bytes(path, None) or b""
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

    async def apply(self, ops: Iterable[PlannedOp]) -> None:
        """Stage or commit planned ops one by one with the checks ``write``/``delete`` give
        (path, transaction); a ``Write``'s content stays the bytes it holds (UTF-8 text)."""
        for op in ops:
            if isinstance(op, Write):
                await self.mutate(Write(file_path(op.path), op.data), None, None)
            else:
                await self.mutate(Delete(normalize(op.path)), None, None)

    async def commit(
        self, ops: builtins.list[Op], *, message: str | None = None, meta: dict | None = None,
        expect_head: bytes | None | AnyHead = ANY_HEAD,
    ) -> CommitResult:
        """One commit of ``ops``; subscribers hear of it even if the caller is cancelled meanwhile."""
        deliveries: list[Batch] = []
        await self._refuse_unstorable([op.path for op in ops])
        repo, branch = self._runner.repo, self._branch

        def attempt_inline() -> tuple[CommitResult, int]:
            result = repo.commit(
                branch, ops, author=self._author, message=message, meta=meta,
                expect_head=expect_head, wait=False,
            )
            return result, (repo.commit_data(result.id)[0] if result.id else 0)

        def committed(outcome: tuple[CommitResult, int]) -> None:
            result, seq = outcome
            if result.id is not None:
                deliveries.extend(self._notifier.announce(result.parent, result.id, seq, result.paths))

        # A commit that goes to the worker (it has to wait, or never runs inline) joins
        # the queue first: the ones waiting there share one transaction (groupcommit.py),
        # each still its own commit.
        request = CommitRequest(branch, ops, self._author, message, meta, expect_head=expect_head)
        queued: list[Pending] = []

        def grouped() -> tuple[CommitResult, int]:
            result = self._queue.run(repo, queued[0])
            if result is None:  # dropped: its caller was cancelled before a worker took it
                return CommitResult(None), 0
            return result, (repo.commit_data(result.id)[0] if result.id else 0)

        result, _ = await self._runner.run(
            grouped,
            inline=attempt_inline if self._inline_commits else None,
            on_done=committed,
            before_submit=lambda: queued.append(self._queue.add(request)),
            drop=lambda: self._queue.drop(queued[0]),
        )
        if result.id is not None:
            await self._sync_files()
        await deliver(deliveries)
        return result

    async def commit_by(self, history_work: Callable[[], tuple[_T, bytes | None]]) -> _T:
        """Run history work that returns (its answer, the commit it made on this branch or None); announce that commit."""
        deliveries: list[Batch] = []
        repo = self._runner.repo

        def run() -> tuple[_T, tuple[bytes | None, bytes, int, list[str]] | None]:
            value, new = history_work()
            if new is None:
                return value, None
            seq, data = repo.commit_data(new)
            parent = data.parents[0] if data.parents else None
            return value, (parent, new, seq, changed_paths(repo, parent, new))

        def committed(outcome: tuple[_T, tuple[bytes | None, bytes, int, list[str]] | None]) -> None:
            if outcome[1] is not None:
                deliveries.extend(self._notifier.announce(*outcome[1]))

        value, made = await self._runner.run(run, on_done=committed)
        if made is not None:
            await self._sync_files()
        await deliver(deliveries)
        return value

    # ------------------------------------------------------------ transactions

    @contextlib.asynccontextmanager
    async def transaction(
        self, message: str | None = None, meta: dict | None = None, *, expect_head: str | None | AnyHead = ANY_HEAD
    ) -> AsyncIterator[Any]:
        """The body of ``Store.transaction`` (its docstring says what it does); yields the handle."""
        owner = current_task()
        if owner is None:
            raise RuntimeError("transaction() needs a running asyncio task")
        if self.own() is not None:
            raise RuntimeError("transactions do not nest")
        if not (expect_head is None or isinstance(expect_head, (str, AnyHead))):
            # False once meant "any head"; a bool now is a mistake, not a condition that always fails.
            raise TypeError(f"expect_head is a commit id, None or ANY_HEAD, not {expect_head!r}")
        check_meta(message, meta)
        self._runner.live()
        txn = Transaction(owner, message, meta)
        self._txns[owner] = txn
        try:
            yield self._owner
        finally:
            txn.closed = True
            del self._txns[owner]
        if txn.ops:
            expected = bytes.fromhex(expect_head) if isinstance(expect_head, str) else expect_head
            meta = provenance.commit_meta(self._owner, [op.path for op in txn.ops], meta)
            await self.commit(txn.ops, message=message, meta=meta, expect_head=expected)

    async def commit_planned(self, plan: Callable[[], Awaitable[Change | None]], give_up: str) -> Any:
        """Make the commit ``plan()`` describes, planned from the head it is committed on.

        ``plan`` reads the store at its head and returns a :class:`Change`, or
        ``None`` when there is nothing to commit (then ``None`` is returned).
        Inside the caller's open transaction the ops join that transaction.
        If another writer moves the branch between the plan and the commit,
        the plan is made again, up to ``ATTEMPTS`` times; then
        ``ConcurrentUpdate(give_up)``.
        """
        repo, branch = self._runner.repo, self._branch
        for _attempt in range(ATTEMPTS):
            head = None if self.own() is not None else await self._runner.read(lambda: repo.head(branch))
            change = await plan()
            if change is None:
                return None
            if self.own() is not None:
                await self.apply(change.ops)
                return change.result
            try:
                expect = None if head is None else head.hex()
                async with self.transaction(message=change.message, meta=change.meta, expect_head=expect):
                    await self.apply(change.ops)
                return change.result
            except errors.ConcurrentUpdate:
                await asyncio.sleep(0)
        raise errors.ConcurrentUpdate(give_up)


def _file_left(repo: Repository, root: bytes, folder: str, gone: Callable[[str], bool]) -> bool:
    """Some committed file under ``folder`` is not deleted; stops at the first one found."""
    node = trees.find_dir(repo, root, split(folder))
    return node is not None and any(not gone(p) for p, _ in trees.walk(repo, node, folder))
