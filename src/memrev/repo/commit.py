"""The commit engine: operations in, one commit out, inside one backend write
transaction (or one savepoint of a group). Either all of a commit is stored
(its blobs, tree nodes, record, head and change rows, the moved branch) or none."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from .. import errors
from ..backends.base import CommitWrite, HeadRow
from ..core import trees
from ..core.objects import EMPTY_TREE_ID, CommitData, Entry, commit_id, decode_tree, tree_id
from ..core.paths import ancestors, directory_keys, is_under, split
from .blobs import Version
from .model import CommitRequest, CommitResult
from .ops import ANY_HEAD, OP_TYPES, AnyHead, Append, Expect, Op, SetEntry, Write
from .reading import Reading
from .retry import ATTEMPTS, backoff_delay
from .revisions import branch_ref

__all__ = ["CommitEngine"]

# What one request of a group may fail with on its own: memrev's errors (a moved
# branch, a collected revision, a bad offset) and bad operations. Anything else
# (a database error) fails the whole transaction and every request in it.
_REQUEST_ERRORS = (errors.MemrevError, ValueError, TypeError, KeyError)


class CommitEngine(Reading):
    """``commit`` and ``commit_group``: how a commit is computed and written."""

    def commit(
        self,
        branch: str,
        ops: Sequence[Op],
        *,
        author: str,
        message: str | None = None,
        meta: dict[str, Any] | None = None,
        merge_parent: bytes | None = None,
        expect_head: bytes | None | AnyHead = ANY_HEAD,
        blob_sources: Sequence[bytes] | None = None,
        wait: bool = True,
    ) -> CommitResult:
        """Apply ``ops`` as one commit on ``branch``.

        ``ops`` are :mod:`memrev.repo.ops` records: ``Write``, ``Append`` (with an
        ``offset``: only if the file is that many bytes long, else
        ``ConcurrentUpdate``), ``Delete`` and ``SetEntry`` (point a path at an
        existing blob: restore, merge). ``merge_parent`` makes a merge commit;
        its per-path history joins the other side's. ``expect_head`` (when not
        ``ANY_HEAD``) refuses to commit if the branch moved since the caller
        computed ``ops`` (``ConcurrentUpdate``). ``blob_sources``: the commits whose
        trees every ``set`` blob was taken from; they are checked (still
        stored, not collected by gc meanwhile) instead of each blob.
        ``wait=False`` (local backends only) makes one attempt that raises
        ``TransientConflict`` at once, without waiting or retrying, when
        another writer holds the lock.
        """
        _check_request(ops, expect_head)  # before the write lock is taken: nothing is written
        r = CommitRequest(branch, ops, author, message, meta, merge_parent, expect_head, blob_sources)
        if not wait:
            return self._commit_once(r, wait=False)
        for attempt in range(ATTEMPTS):
            try:
                return self._commit_once(r)
            except errors.TransientConflict as e:
                if attempt == ATTEMPTS - 1:
                    raise
                if not isinstance(e, errors.HeadMoved):  # a stale guessed head is no contention to wait out
                    time.sleep(backoff_delay(attempt))
        raise AssertionError("unreachable")

    def _commit_once(self, r: CommitRequest, wait: bool = True) -> CommitResult:
        try:
            with self.backend.write() if wait else self.backend.write(wait=False):
                result = self._apply(r)
        except BaseException:
            self.blobs.rolled_back()
            raise
        return _settled(result)

    def commit_group(self, requests: Sequence[CommitRequest]) -> list[CommitResult | Exception]:
        """Group commit: each request becomes its own commit, all in ONE backend transaction.

        The requests are applied in order, each inside a savepoint, so each
        gets its own commit id and its own compare-and-swap of its branch
        head (on one branch the second request's parent is the first one's
        commit, exactly as if they had come one after the other). A request
        that fails (``ConcurrentUpdate``, a gc'd revision, bad ops) is rolled
        back to its savepoint and its exception is its outcome; the others
        still commit. Nothing is returned until the one transaction holding
        them all is committed, so every caller is acknowledged only when its
        commit is durable. A failure of the transaction itself (the lock
        not taken after 8 tries, disk full at COMMIT) is raised: no request
        was committed. The ``expect_head``, ``merge_parent`` and
        ``blob_sources`` of ``commit`` are honoured per request.
        """
        if len(requests) == 1 or not self.backend.savepoints:
            return [self._commit_alone(r) for r in requests]
        # A network backend learns each commit's number with COMMIT (one round trip for
        # the group): the commits are cached once it is committed, and meanwhile the next
        # request builds on the previous one's record (_unsettled). A local backend knows
        # the number at once and settles each commit inside its savepoint.
        defer = not self.backend.local
        for attempt in range(ATTEMPTS):
            self._unsettled = {} if defer else None
            try:
                with self.backend.write():
                    results = [self._commit_saved(r, settle=not defer) for r in requests]
                for result in results:
                    if isinstance(result, CommitResult):
                        _settled(result)
                return results
            except BaseException as e:
                self.blobs.rolled_back()
                if (
                    defer
                    and isinstance(e, errors.MemrevError)
                    and not isinstance(e, errors.TransientConflict)
                    and not getattr(e, "outcome_unknown", False)  # COMMIT sent, answer lost: maybe committed
                ):
                    # The server refused a statement of the group (at COMMIT, or with a later
                    # request's read), which may be one request's alone (disk full on its
                    # rows): nothing was committed; again with each request sent in its own
                    # savepoint, so only the request that fails gets the error.
                    defer = False
                    continue
                if not isinstance(e, errors.TransientConflict):
                    raise
                if attempt == ATTEMPTS - 1:
                    raise
                if not isinstance(e, errors.HeadMoved):
                    time.sleep(backoff_delay(attempt))
            finally:
                self._unsettled = None
        raise AssertionError("unreachable")

    def _commit_alone(self, r: CommitRequest) -> CommitResult | Exception:
        """One request in a transaction of its own (no savepoint needed)."""
        try:
            return self.commit(
                r.branch, r.ops, author=r.author, message=r.message, meta=r.meta, merge_parent=r.merge_parent,
                expect_head=r.expect_head, blob_sources=r.blob_sources,
            )
        except _REQUEST_ERRORS as e:
            return e

    def _commit_saved(self, r: CommitRequest, *, settle: bool = True) -> CommitResult | Exception:
        """One request of a group, inside its own savepoint; its exception is its outcome.
        ``settle=False``: the caller settles the result once the group is committed."""
        try:
            _check_request(r.ops, r.expect_head)
            with self.backend.savepoint():
                result = self._apply(r)
                # Inside the savepoint: the next request may build on this commit. (A
                # backend that queues the writes sends them with a later statement; an
                # error of the server there fails the whole group, as it would here.)
                return _settled(result) if settle else result
        except _REQUEST_ERRORS as e:
            self.blobs.rolled_back()
            if isinstance(e, errors.HeadMoved):  # the group was computed on a stale head: all again
                raise
            return e

    def _apply(self, r: CommitRequest) -> CommitResult:
        """One commit inside a write transaction (or savepoint) the caller holds, in four
        steps: choose the head, stage the versions, diff and update the tree, write the records.

        When it fails the caller rolls back and calls ``blobs.rolled_back()``:
        the blob rows remembered meanwhile are gone, and an append piece rolled
        back must not be taken for stored by the next append of the same bytes.
        """
        branch, ops, merge_parent = r.branch, r.ops, r.merge_parent
        ref = branch_ref(branch)
        head, parent_tree = self._choose_head(ref, branch, ops, r.expect_head)
        self._check_expected(branch, head, parent_tree, [op for op in ops if isinstance(op, Expect)])
        staging = self._stage(parent_tree, ops)
        changed = staging.changes()
        if not changed and merge_parent is None:
            return CommitResult(None, head, [], staging.offsets)
        self._check_still_stored(changed, merge_parent, {op.path for op in ops if isinstance(op, SetEntry)}, r.blob_sources)
        new_tree = self._update_tree(parent_tree, staging.tree_changes(changed))
        paths = sorted(changed)
        record = CommitData(
            tree=new_tree,
            parents=tuple(p for p in (head, merge_parent) if p),
            time_us=time.time_ns() // 1000,
            author=r.author,
            message=r.message or _default_message(ops, paths),
            meta=r.meta or {},
        )
        oid, settle = self._write_records(ref, branch, head, record, changed, merge_parent)
        return CommitResult(oid, head, paths, staging.offsets, settle)

    def _choose_head(
        self, ref: str, branch: str, ops: Sequence[Op], expect_head: bytes | None | AnyHead
    ) -> tuple[bytes | None, bytes]:
        """Step 1: the head the commit is computed on, and its root tree."""
        # A commit that may fail on what the head holds (expect_head, a staged append's
        # offset) needs the real head first; any other may be computed on the head the
        # backend saw last, which write_commit's compare-and-swap verifies (HeadMoved).
        self.backend.prefetch_paths(ref, [op.path for op in ops])
        head = self.backend.lock_ref(ref) if _head_decides(ops, expect_head) else self.backend.guess_ref(ref)
        if not isinstance(expect_head, AnyHead) and head != expect_head:
            raise errors.ConcurrentUpdate(f"branch {branch} moved; compute the change again")
        unsettled = self._unsettled
        if head is None:
            return head, EMPTY_TREE_ID
        if unsettled is not None and head in unsettled:  # the previous commit of this group
            return head, unsettled[head].tree
        return head, self.commit_data(head)[1].tree

    def _check_expected(self, branch: str, head: bytes | None, parent_tree: bytes, expects: list[Expect]) -> None:
        """Step 1b: every ``Expect`` holds on the locked head, or ``WriteConflict`` before
        anything is staged. A path's version is the commit that last changed it on the
        branch's first-parent line (its head row); a path not there now is ``absent``."""
        for op in expects:
            here = trees.lookup(self, parent_tree, split(op.path))
            actual: bytes | None = None
            if here is not None and head is not None:
                # the head row, written by every commit before this one in the transaction too
                # (a group's requests; on PostgreSQL the read sends what is queued first)
                seq = self._path_prev(branch, op.path, head)
                found = None if seq is None else self.backend.commit_at(seq)
                actual = found[0] if found is not None else None
                if actual is None:  # no head row (an index being rebuilt): the walk answers
                    last = self.last_change(op.path, head)
                    actual = None if last is None else self.commit_ids_at([last])[last]
            if actual != op.version:
                want = "absent" if op.version is None else op.version.hex()
                now = "absent" if actual is None else actual.hex()
                raise errors.WriteConflict(
                    f"conflict: {op.path} is at {now}, not {want}; nothing was written", op.path, want, now
                )

    def _stage(self, parent_tree: bytes, ops: Sequence[Op]) -> _Staging:
        """Step 2: each operation's new version of its path, stored as a blob (full, delta
        or append piece) or marked deleted; ``_Staging.changes`` keeps the real changes."""
        staging = _Staging(self, parent_tree)
        staged, current = staging.staged, staging.current
        for op in ops:
            path = op.path
            if isinstance(op, Write):
                new = self.blobs.store_version(current(path), op.data)
                if new is not None:
                    staged[path] = new
            elif isinstance(op, Append):
                cur = current(path)
                staging.offsets.append(cur.size if cur else 0)
                if op.offset is not None and op.offset != staging.offsets[-1]:  # staged in a transaction at that offset
                    raise errors.ConcurrentUpdate(
                        f"{path} changed since the transaction appended to it at byte {op.offset}; nothing was written"
                    )
                if cur is None:  # creates the file, even an empty one, as ag2's stores do
                    staged[path] = self.blobs.store_full(op.data)
                elif op.data:
                    staged[path] = self.blobs.store_append(cur.blob, op.data)
            elif isinstance(op, SetEntry):
                staged[path] = Version(op.oid, op.size)
            elif isinstance(op, Expect):
                continue  # a condition, checked before anything was staged (_check_expected)
            else:  # Delete
                for p in [p for p in staged if is_under(p, path)]:
                    staged[p] = None
                under = trees.find_dir(self, parent_tree, split(path))
                doomed = [p for p, _ in trees.walk(self, under, "" if path == "/" else path)] if under else []
                if path != "/":
                    doomed.append(path)
                for p in doomed:
                    if p not in staged:
                        staged[p] = None
        return staging

    def _write_records(
        self,
        ref: str,
        branch: str,
        head: bytes | None,
        record: CommitData,
        changed: dict[str, Version | None],
        merge_parent: bytes | None,
    ) -> tuple[bytes, Callable[[], None]]:
        """Step 4: the commit record, its head and change rows, the moved branch
        (``write_commit``); returns the commit's id and what settles the commit once
        its number is known."""
        data = record.encode()
        oid = commit_id(data)
        if self._unsettled is not None:
            self._unsettled[oid] = record
        folders = sorted(directory_keys(changed))
        # Where the first parent's history of each path ends, read before write_commit
        # replaces the head rows it reads; a backend that looks it up itself
        # (computes_links: PostgreSQL, in its one statement) gets none.
        links = {} if self.backend.computes_links else self._links(branch, head, changed, folders)
        seq_of = self.backend.write_commit(
            CommitWrite(
                ref=ref,
                branch=branch,
                old=head,
                id=oid,
                data=data,
                rows=[HeadRow(p, n.blob if n else None, n.size if n else 0, 0) for p, n in changed.items()]
                + [HeadRow(key, None, 0, 0) for key in folders],
                prev2={p: self.last_change(p, merge_parent) for p in [*changed, *folders]} if merge_parent else {},
                links=links,
            )
        )

        def settle() -> None:
            # The next commit on top of this one need not read these back (the key is
            # this commit's id). The number may be known only once the transaction
            # ended (one round trip on PostgreSQL); a group settles each commit before
            # the next (Repository._commit_saved).
            seq = seq_of()
            self._commits.put(oid, (seq, record))
            for key in (*changed, *folders):
                self._folder_seqs.put((key, oid), seq)

        return oid, settle

    def _check_still_stored(
        self,
        changed: dict[str, Version | None],
        merge_parent: bytes | None,
        set_paths: set[str],
        blob_sources: Sequence[bytes] | None,
    ) -> None:
        """Refuse a commit that would name an object gc removed after the caller read it.

        ``set`` operations (restore, merge) and a merge parent name objects the
        caller found before this transaction; gc may have collected them since.
        gc runs under the exclusive lock, so once this transaction holds its
        lock the stored set cannot shrink, and gc removes a commit together
        with everything only it reaches: a source commit still stored vouches
        for every blob of its tree. So the check is one lookup per source
        commit (``blob_sources``), or, without them, one per ``set`` blob that
        changes a path; blobs this transaction wrote need none.
        """
        for source in dict.fromkeys((*(blob_sources or ()), *([merge_parent] if merge_parent else []))):
            if self.backend.get_commit(source) is None:
                raise errors.RevisionNotFound(
                    f"commit {source.hex()} was removed by gc before this commit could use it; nothing was written"
                )
        if blob_sources is not None:
            return
        for path in sorted(set_paths & changed.keys()):
            new = changed[path]
            blob = None if new is None else new.blob
            if blob is not None and self.backend.get_blob(blob) is None:
                raise errors.RevisionNotFound(
                    f"{path}: blob {blob.hex()} was removed by gc before this commit could use it; "
                    "nothing was written"
                )

    def _links(
        self, branch: str, head: bytes | None, changed: dict[str, Version | None], folders: list[str]
    ) -> dict[str, int | None]:
        """``CommitWrite.links``: the previous change of each changed path and directory key
        on the branch's first-parent line (``_path_prev``, ``_folder_prev``)."""
        links = {path: self._path_prev(branch, path, head) for path in changed}
        links.update((key, self._folder_prev(branch, key, head)) for key in folders)
        return links

    def _path_prev(self, branch: str, path: str, head: bytes | None) -> int | None:
        """The previous change of a file path on the branch: noted by the commit that made
        ``head`` (see ``_folder_prev``), else its head row (a tombstone too)."""
        known = self._folder_seqs.get((path, head))
        if known is not None:
            return known
        row = self.backend.head_get(branch, path)
        return None if row is None else row.seq

    def _folder_prev(self, branch: str, key: str, head: bytes | None) -> int | None:
        """The previous change under a directory on the branch: its head row, or (a branch
        indexed before directory keys, a directory new to the branch) the per-path lookup.

        The answer is a fact about commit ``head`` (the last change of ``key`` on its
        first-parent line, what fsck checks), so it never goes stale: the commit that
        made ``head`` here remembers it and the next commit skips the read.
        """
        known = self._folder_seqs.get((key, head))
        if known is not None:
            return known
        row = self.backend.head_get(branch, key)
        if row is not None:
            return row.seq
        return None if head is None else self.last_change(key, head)

    def put_tree(self, data: bytes, node: tuple[str, Any] | None = None) -> bytes:
        """Store a tree node; ``node``: its decoded form, as ``decode_tree(data)`` gives it
        (``trees.dir_set`` has it: the node is cached without decoding what was just encoded)."""
        oid = tree_id(data)
        if oid != EMPTY_TREE_ID:
            if self._new_trees is None:
                self.backend.put_tree(oid, data)
            else:
                self._new_trees.append((oid, data))
            self._trees.put(oid, decode_tree(data) if node is None else node)
        return oid

    def _update_tree(self, root: bytes, changes: dict[tuple[str, ...], Entry | None]) -> bytes:
        """``trees.update`` with the new nodes stored in one statement (a commit makes one per level)."""
        self._new_trees = []
        try:
            new_root = trees.update(self, root, changes)
            if self._new_trees:
                self.backend.put_trees(self._new_trees)
        finally:
            self._new_trees = None
        return new_root


def _head_decides(ops: Sequence[Op], expect_head: bytes | None | AnyHead) -> bool:
    """Whether the commit may fail on what the branch head holds, so it must be computed
    on the locked head rather than a guessed one (a stale guess would fail it wrongly)."""
    return not isinstance(expect_head, AnyHead) or any(
        isinstance(op, Expect) or (isinstance(op, Append) and op.offset is not None) for op in ops
    )


def _settled(result: CommitResult) -> CommitResult:
    if result.settle is not None:
        result.settle()
        result.settle = None
    return result


def _check_request(ops: Iterable[Op], expect_head: object) -> None:
    """Typed records only, and no bool for ``expect_head`` (``False`` once meant any head)."""
    for op in ops:
        if not isinstance(op, OP_TYPES):
            raise TypeError(f"ops are memrev.repo.ops records (Write, Append, Delete, SetEntry, Expect), not {op!r}")
    if not (expect_head is None or isinstance(expect_head, (bytes, AnyHead))):
        raise TypeError(f"expect_head is a commit id (bytes), None or ANY_HEAD, not {expect_head!r}")


def _default_message(ops: Iterable[Op], paths: list[str]) -> str:
    kinds = sorted({op.kind for op in ops if not isinstance(op, Expect)})
    what = paths[0] if len(paths) == 1 else f"{len(paths)} paths"
    return f"{'+'.join(kinds)} {what}"


class _Staging:
    """The versions a commit's operations staged, over the parent tree they apply to."""

    def __init__(self, repo: Reading, parent_tree: bytes) -> None:
        self._repo = repo
        self._parent_tree = parent_tree
        self.staged: dict[str, Version | None] = {}
        self.offsets: list[int] = []  # each append's offset, in order (the store's transactions check them)
        self._found: dict[str, Version | None] = {}  # live() of each path asked, asked again by changes()

    def live(self, path: str) -> Version | None:
        # What the file is, from the hash-verified tree; the head index
        # is consulted only for history links (``seq``), never for content.
        if path not in self._found:
            entry = trees.lookup(self._repo, self._parent_tree, split(path))
            self._found[path] = None if entry is None else Version(entry.oid, entry.size)
        return self._found[path]

    def current(self, path: str) -> Version | None:
        return self.staged[path] if path in self.staged else self.live(path)

    def changes(self) -> dict[str, Version | None]:
        """Step 3a: the staged paths whose version differs from the parent tree's."""
        changed: dict[str, Version | None] = {}
        for path, new in self.staged.items():
            was = self.live(path)
            if (new is None and was is None) or (new is not None and was is not None and new.blob == was.blob):
                continue
            changed[path] = new
        return changed

    def tree_changes(self, changed: dict[str, Version | None]) -> dict[tuple[str, ...], Entry | None]:
        """Step 3b: the tree entries to update for ``changed``."""
        tree_changes = {
            tuple(split(p)): (None if new is None else Entry("f", new.blob, new.size)) for p, new in changed.items()
        }
        # A file written back unchanged below a directory deleted in this commit
        # (delete /c, write /c/d as it was) is no change of its own, but the tree
        # update empties the directory first: it is put back there.
        emptied = {p for p, new in changed.items() if new is None}
        for p, new in self.staged.items():
            if new is not None and p not in changed and any(a in emptied for a in ancestors(p)):
                tree_changes[tuple(split(p))] = Entry("f", new.blob, new.size)
        return tree_changes
