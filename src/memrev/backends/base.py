"""The backend contract: primitives in three groups, and accelerators built on them.

A backend stores rows; it knows nothing of trees, deltas or revisions. The
contract is written the way dulwich writes its object store and refs
container, one class per kind of thing stored:

* :class:`Transactions`: ``write()``, ``read_snapshot()``, ``close()``;
  optional ``savepoint()`` and ``wait_for_change()``;
* :class:`ObjectStore`: blobs, trees and commits, get and put (ids are
  content hashes), and the whole-store scans gc and fsck use;
* :class:`RefStore`: get, compare-and-swap, delete, list, lock;
* :class:`IndexStore`: the derived indexes (head rows, change rows, stale
  markers, clear);
* :class:`Accelerators`: batched reads, paged scans, one-statement history
  reads and ``write_commit`` in one round trip, each with a default written
  in terms of the primitives; a backend overrides one only to be faster,
  never to change what it returns.

:class:`BackendBase` is all of them, with the capability flags
(``local``, ``savepoints``, ``notifies``, ``computes_links``) that the layers
above read instead of guessing. Subclass it to write a backend: implement
the abstract methods (docs/backends.md has a complete toy backend).
``Backend`` is the same type under the name the rest of memrev annotates
with. Every row crossing the contract is a named type: the dataclasses
``BlobRow``, ``HeadRow``, ``CommitWrite`` and the ``NamedTuple`` rows
(``CommitRow``, ``ChangeRow``, ``ChangeLink``, ``ChangeCommit``,
``PathLogRow``, ``FirstParentNumber``), which unpack like the tuples they are.

Rules that hold for every method (docs/design.md, "Backend contract"):

* **Transactions.** Every mutating call happens inside ``with
  backend.write():``, one transaction: all of it is committed when the block
  exits normally, none of it when the block raises. Inside the block the
  handle reads its own writes; other handles see none of them until the
  commit and are not blocked from reading meanwhile.
* **Absent means ``None``.** A lookup of something that does not exist
  returns ``None`` (or an empty list or dict), never raises.
* **Errors are memrev's.** A transaction the database refuses for now raises
  :class:`~memrev.errors.TransientConflict` (``Repository.commit`` retries
  it); a database refusing writes for good raises
  :class:`~memrev.errors.ReadOnlyStore` or :class:`~memrev.errors.StoreFull`;
  damage raises :class:`~memrev.errors.IntegrityError`. Nothing is written
  by a call that raised.
* **Threads.** One handle may be called from several threads (the store's
  event loop, its worker thread, ``wait_for_change`` in another thread): a
  backend serializes the calls on one connection itself. Calls between
  ``write()``'s enter and exit come from the thread that entered it.
* **Ids and numbers.** Every id is 20 ``bytes``; every number an ``int``
  that may exceed 32 bits.

This module is over 600 lines because it is the whole contract in one
place: each method's docstring is its specification, and the defaults are
the reference semantics the conformance suite holds every backend to.
"""

from __future__ import annotations

import os
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import replace

from ..core.objects import CommitData
from ..errors import ConcurrentUpdate
from .rows import (  # the rows of the contract, importable from here as before
    BlobRow,
    ChangeCommit,
    ChangeLink,
    ChangeLinkLike,
    ChangeRow,
    ChangeRowLike,
    CommitRow,
    CommitWrite,
    FirstParentNumber,
    HeadRow,
    PathLogRow,
    PathLogRowLike,
)

# ================================================================ transactions


class Transactions(ABC):
    """The handle's transactions and snapshots (change notification: ``BackendBase.wait_for_change``)."""

    @abstractmethod
    def write(self, *, exclusive: bool = False, wait: bool = True) -> AbstractContextManager[None]:
        """One transaction around the block; every mutating call happens inside one.

        All or nothing: when the block raises, everything written in it is
        rolled back and the exception propagates (wrapped only into
        ``TransientConflict`` when the database refused the transaction for
        now). When it exits normally everything is committed, durable to the
        level of the ``durability`` the backend was opened with. Writers of a
        branch are serialized by ``lock_ref``; ``exclusive=True`` (gc) runs with
        no other write transaction on the store at all. ``wait=False`` (local
        backends only): ``TransientConflict`` at once when another writer
        holds the lock. Raises ``ReadOnlyStore`` on a store open for reading
        only, ``StoreFull`` when the disk is full. Not reentrant.
        """

    @abstractmethod
    def close(self) -> None:
        """Release the handle (and wake a ``wait_for_change`` in another thread). Idempotent."""

    @abstractmethod
    def read_snapshot(self) -> AbstractContextManager[None]:
        """A block whose reads all see the store as of its first read (fsck: a commit
        another process makes meanwhile must not look like damage, e.g. its tree
        naming a blob the blob scan did not meet; bundle export: a branch collected
        meanwhile is still read whole; a per-path log reads the branch head and its
        head row in one). Outside ``write()``; no writes inside.

        Required: a backend that other handles commit to must pin a moment here
        (SQLite: a read transaction; PostgreSQL: ``REPEATABLE READ``; memory: the
        published state for the calling thread). Only a backend no other handle
        ever writes to may return ``contextlib.nullcontext()``.
        """

    def savepoint(self) -> AbstractContextManager[None]:
        """Inside ``write()``: a block whose writes alone are undone when it raises, the
        transaction going on (SQL ``SAVEPOINT`` / ``ROLLBACK TO`` / ``RELEASE``).

        Optional (``savepoints = True`` says it is there): group commit puts each
        caller's commit in one, so one failing commit does not fail the others.
        """
        raise NotImplementedError("this backend has no savepoints")


# ================================================================ objects


class ObjectStore(ABC):
    """Blobs, trees and commits: put, get, and the whole-store scans (gc, fsck, export)."""

    @abstractmethod
    def get_blob(self, oid: bytes) -> BlobRow | None:
        """The row exactly as put (all eight fields), or ``None``."""

    @abstractmethod
    def put_blob(self, row: BlobRow) -> None:
        """Store the row; an existing id is a no-op (ids are content hashes).

        A row whose ``(lineage, start)`` is held by a *different* id is
        refused with an error (``TransientConflict`` where writers of
        different branches run in parallel), never silently dropped: a tree
        would then name a blob that does not exist.
        """

    @abstractmethod
    def lineage_pieces(self, lineage: bytes, lo: int, hi: int) -> list[BlobRow]:
        """The append run's pieces holding bytes in ``[lo, hi)``, ordered by ``start``.

        None starts at or after ``hi``, none is of another run; the piece
        that starts before ``lo`` and reaches into the range is included.
        """

    def lineage_has(self, lineage: bytes, start: int) -> bool:
        """Whether the append run has a piece at ``start``.

        Inside ``write()``, a backend whose writers of different branches run
        in parallel must lock the run here until the transaction ends
        (PostgreSQL overrides this), so two branches never extend one run at
        the same place. The default suits backends whose ``write()`` excludes
        every other writer.
        """
        return any(p.start == start for p in self.lineage_pieces(lineage, start, start + 1))

    def append_probe(self, oid: bytes, lineage: bytes | None, start: int) -> tuple[BlobRow | None, bool]:
        """What an append inside ``write()`` asks before it stores its piece ``oid``: the
        piece if it is stored already (another branch appended the same bytes to the
        same base), and ``lineage_has(lineage, start)`` (``False`` when ``lineage`` is
        ``None``: the base is no run's tip). A backend answering over a network asks
        both in one round trip (PostgreSQL overrides this)."""
        same = self.get_blob(oid)
        if same is not None or lineage is None:
            return same, False
        return None, self.lineage_has(lineage, start)

    @abstractmethod
    def get_tree(self, oid: bytes) -> bytes | None:
        """The tree's bytes, or ``None``."""

    @abstractmethod
    def put_tree(self, oid: bytes, data: bytes) -> None:
        """Store opaque bytes under ``oid``; an existing id is a no-op."""

    @abstractmethod
    def get_commit(self, oid: bytes) -> tuple[int, bytes] | None:
        """``(seq, data)`` of the commit, or ``None``."""

    @abstractmethod
    def commit_at(self, seq: int) -> tuple[bytes, bytes] | None:
        """``(id, data)`` of the commit numbered ``seq``, or ``None``."""

    @abstractmethod
    def put_commit(self, oid: bytes, parent: bytes | None, data: bytes) -> int:
        """Store the commit (``parent``: its first parent) and return its number ``seq``.

        Numbers are ``>= 1`` and strictly increase in the order commits are
        stored, so they are topological (a descendant has a larger one).
        An existing id stores nothing and returns that commit's number.
        """

    @abstractmethod
    def first_parent(self, oid: bytes, steps: int) -> bytes | None:
        """The commit ``steps`` links back from ``oid`` along the ``parent`` given to
        ``put_commit`` (``steps = 0``: ``oid``), or ``None`` when the history is shorter.

        A primitive, not a default: commit data is opaque to a backend, so only
        the stored ``parent`` says where the line goes.
        """

    @abstractmethod
    def iter_commits(self) -> Iterator[CommitRow]:
        """Every ``(seq, id, data)``, in ``seq`` order. May page internally."""

    @abstractmethod
    def iter_blob_ids(self) -> Iterator[bytes]:
        """Every blob id, any order."""

    @abstractmethod
    def iter_trees(self) -> Iterator[tuple[bytes, bytes]]:
        """Every ``(id, data)`` tree, any order."""

    @abstractmethod
    def delete_unreachable(self, table: str, keep: set[bytes]) -> int:
        """Delete the rows of ``table`` (``"commits"``, ``"trees"``, ``"blobs"``) whose id is not in
        ``keep``; return how many. Deleting commits also deletes their change rows.
        Inside ``write(exclusive=True)``: a commit may reuse an object that is about to go."""


# ================================================================ refs


class RefStore(ABC):
    """Named pointers to commits: ``refs/heads/<branch>``, ``refs/tags/<tag>``, ``refs/deleted/...``."""

    @abstractmethod
    def set_ref_if_equals(self, name: str, old: bytes | None, new: bytes) -> bool:
        """Compare-and-swap; ``False`` changes nothing.

        ``old=None``: create the ref if absent (``True``), ``False`` if it
        exists. Otherwise move it to ``new`` only if it points to ``old``. The
        new target is visible to the transaction at once and to other
        handles when it commits (then ``wait_for_change`` wakes).
        """

    @abstractmethod
    def delete_ref(self, name: str) -> None:
        """Remove the ref; a missing ref is no error."""

    @abstractmethod
    def list_refs(self, prefix: str) -> dict[str, bytes]:
        """``{name: target}`` of every ref whose name starts with ``prefix``,
        compared literally and case-sensitively (``_`` and ``%`` are plain characters)."""

    def get_ref(self, name: str) -> bytes | None:
        """The ref's target, or ``None``."""
        return self.list_refs(name).get(name)

    def lock_ref(self, name: str) -> bytes | None:
        """Inside ``write()``: the ref's target or ``None``, with the ref locked until the
        transaction ends, *including when it does not exist yet* (two first commits of a
        branch must not race). After waiting, another writer's ``lock_ref`` returns the
        new target and its later reads see every row this transaction committed.

        The default is ``get_ref``: right for backends whose ``write()`` already
        excludes every other writer (SQLite, memory); PostgreSQL overrides it.
        """
        return self.get_ref(name)


# ================================================================ derived indexes


class IndexStore(ABC):
    """The head index (each branch's current file per path) and the change index
    (each commit that changed a path, with its history links), derived from the
    commits and kept current by every commit; ``reindex`` rebuilds them."""

    @abstractmethod
    def head_get(self, branch: str, path: str) -> HeadRow | None:
        """The head row of ``path`` on ``branch``, tombstone included, or ``None``.
        Paths compare exactly (no case folding, no Unicode normalization)."""

    @abstractmethod
    def head_put(self, branch: str, rows: list[HeadRow]) -> None:
        """Insert or replace the rows, by ``(branch, path)``; ``[]`` is a no-op."""

    @abstractmethod
    def head_all(self, branch: str) -> list[HeadRow]:
        """Every head row of ``branch``, tombstones included, any order."""

    @abstractmethod
    def head_clear(self, branch: str) -> None:
        """Delete the head rows of ``branch`` and of no other branch."""

    @abstractmethod
    def change_put(self, rows: Sequence[ChangeRowLike]) -> None:
        """Insert or replace ``(path, seq, prev, prev2)`` rows, by ``(path, seq)``.

        ``prev``: the previous change of ``path`` on the first parent's line;
        ``prev2``: on the merged line (a merge), else ``None``. Plain tuples of
        those four are accepted too.
        """

    @abstractmethod
    def change_prev(self, path: str, seq: int) -> tuple[int | None, int | None] | None:
        """``(prev, prev2)`` of the change of ``path`` at ``seq``, or ``None`` when ``seq`` did not change it."""

    @abstractmethod
    def change_before(self, path: str, seq: int) -> int | None:
        """The newest change of ``path`` numbered ``<= seq``, or ``None``."""

    @abstractmethod
    def paths_at(self, seqs: list[int]) -> dict[int, list[str]]:
        """``{seq: [paths changed]}`` for those of ``seqs`` that changed anything.
        Must handle thousands of numbers in one call."""

    @abstractmethod
    def iter_changes(self) -> Iterator[ChangeRow]:
        """Every change row, in ``seq`` order."""

    @abstractmethod
    def clear_indexes(self) -> None:
        """Delete every head and change row (``reindex`` rebuilds them). Inside ``write()``."""

    def stale_indexes(self) -> set[str]:
        """Derived indexes a schema migration added but could not fill for older commits
        (``"directory-keys"``); readers fall back until ``reindex`` fills them and calls
        ``set_index_fresh``. A backend without migrations never has any."""
        return set()

    def set_index_fresh(self, name: str) -> None:
        """``reindex`` filled index ``name``: it is no longer stale. Inside ``write()``."""
        return  # a backend without stale markers (``stale_indexes`` always empty) has nothing to clear

    def relink_first_parent(self, seq: int, parent: bytes | None, parent_seq: int | None) -> None:
        """``reindex``: commit ``seq``'s first-parent link becomes ``parent`` (number
        ``parent_seq``), its record's first parent. Inside ``write()``. The default has
        nothing to repair: a backend whose links are not stored apart from its records."""
        return


# ================================================================ accelerators


class Accelerators(ObjectStore, RefStore, IndexStore):
    """Optional speed-ups, each with a default written in terms of the primitives.

    A backend that implements the primitives correctly passes the conformance
    suite with these defaults; it overrides one only to make it faster (one
    statement instead of one per row, one round trip per commit), never to
    change what it returns.
    """

    def guess_ref(self, name: str) -> bytes | None:
        """Inside ``write()``: the target to compute a commit on when the caller needs no
        lock before ``write_commit``, whose compare-and-swap then verifies it.

        A backend whose writers talk to a server over a network may answer from
        what it saw last (no round trip, no lock held while the client computes);
        when that was stale, ``write_commit`` (or the transaction's end) raises
        ``HeadMoved`` and the next attempt locks. The default locks (``lock_ref``).
        """
        return self.lock_ref(name)

    def prefetch_paths(self, ref: str, paths: Sequence[str]) -> None:
        """Inside ``write()``, before ``guess_ref``/``lock_ref`` of ``ref``: the paths the
        commit about to be computed reads. A hint only: a network backend may fetch their
        tree nodes with the ref (PostgreSQL: with its lock, one round trip for all);
        the default does nothing."""

    def write_commit(self, c: CommitWrite) -> Callable[[], int]:
        """Inside ``write()``: store commit ``c.id`` with ``c.old`` as its first parent, its head
        and change rows (``prev``: ``c.links``, ``prev2``: ``c.prev2``), and move ``c.ref``
        from ``c.old`` to it (compare-and-swap).

        Returns a function giving the new commit's number: a backend that sends the
        whole commit with the transaction's end (PostgreSQL: one round trip) knows
        it only then; calling it earlier may cost a round trip. A ref no longer at
        ``c.old`` raises ``ConcurrentUpdate`` (``HeadMoved`` when ``c.old`` was a
        ``guess_ref``), here or when the transaction ends; nothing is written.
        The default is the primitives, in this order.
        """
        seq = self.put_commit(c.id, c.old, c.data)
        self.head_put(c.branch, [replace(row, seq=seq) for row in c.rows])
        self.change_put([ChangeRow(row.path, seq, c.links.get(row.path), c.prev2.get(row.path)) for row in c.rows])
        if not self.set_ref_if_equals(c.ref, c.old, c.id):
            raise ConcurrentUpdate(f"branch {c.branch} moved during a locked commit")
        return lambda: seq

    def get_refs(self, names: Sequence[str]) -> dict[str, bytes]:
        """``{name: target}`` of those of ``names`` that exist, read together (one statement,
        one round trip): a read at a branch head asks for the branch and ``refs/purges``."""
        out = {}
        for name in names:
            target = self.get_ref(name)
            if target is not None:
                out[name] = target
        return out

    def put_trees(self, rows: list[tuple[bytes, bytes]]) -> None:
        """``put_tree`` of each ``(oid, data)``; a backend may store them in one statement."""
        for oid, data in rows:
            self.put_tree(oid, data)

    def commits_at(self, seqs: list[int]) -> list[CommitRow]:
        """``(seq, id, data)`` for those of ``seqs`` that exist, any order; ``[]`` for ``[]``."""
        out = []
        for seq in seqs:
            found = self.commit_at(seq)
            if found is not None:
                out.append(CommitRow(seq, *found))
        return out

    def blob_chain(self, oid: bytes, limit: int) -> list[BlobRow]:
        """Blob ``oid``'s row and, while a row is a delta, its base's row: at most ``limit``
        rows, ``oid`` first, ending early at a row that is not a delta or a base that is
        missing (``[]``: ``oid`` is missing). Reading an old version rebuilds it from
        such a chain; SQLite and PostgreSQL answer with one recursive query, this
        default reads a row at a time."""
        out: list[BlobRow] = []
        row = self.get_blob(oid)
        while row is not None and len(out) < limit:
            out.append(row)
            if row.kind != "D" or row.base is None:
                break
            row = self.get_blob(row.base)
        return out

    def get_trees(self, oids: list[bytes]) -> dict[bytes, bytes]:
        """``{id: bytes}`` for those of ``oids`` that exist (fsck reads a page of
        commits' new trees a level at a time, gc every reachable tree). The default reads each id;
        SQLite and PostgreSQL override it with one statement per few hundred ids."""
        found = {}
        for oid in oids:
            data = self.get_tree(oid)
            if data is not None:
                found[oid] = data
        return found

    def blob_bases(self, oids: list[bytes]) -> dict[bytes, bytes | None]:
        """``{id: base}`` for those of ``oids`` that exist (gc and export follow
        bases a batch at a time). The default reads each row; SQLite and
        PostgreSQL override it with one statement per few hundred ids."""
        found: dict[bytes, bytes | None] = {}
        for oid in oids:
            row = self.get_blob(oid)
            if row is not None:
                found[oid] = row.base
        return found

    def commits_with_prefix(self, prefix: bytes, limit: int) -> list[bytes]:
        """Up to ``limit`` distinct commit ids that start with ``prefix`` (abbreviated ids).

        The default scans every commit: resolving an abbreviated id is rare
        next to everything else a store does.
        """
        out: list[bytes] = []
        for _seq, oid, _data in self.iter_commits():
            if len(out) >= limit:
                break
            if oid.startswith(prefix):
                out.append(oid)
        return out

    # ---------------------------------------------------------- erasure (purge)

    def restack_commit(self, oid: bytes) -> int:
        """Inside ``write(exclusive=True)``: give the stored commit ``oid`` the next number, as
        if it were stored again now, and return it. A purge stores the commits it rewrites
        again; the ones it leaves as they are but made after them are restacked in the same
        pass, so numbers keep the order commits were made in (the log's order). The
        commit's change rows, and its children's first-parent numbers, are the caller's to
        rebuild (``indexes.rebuild``). The default reads the record, deletes the row (one
        pass over the table: ``delete_unreachable``) and stores it again."""
        stored = self.get_commit(oid)
        if stored is None:
            raise KeyError(oid.hex())
        keep = {row[1] for row in self.iter_commits()} - {oid}  # rows are (seq, id, data)
        self.delete_unreachable("commits", keep)
        parents = CommitData.decode(stored[1]).parents
        return self.put_commit(oid, parents[0] if parents else None, stored[1])

    def secure_delete(self, on: bool) -> None:
        """Whether what the connection deletes from now on is overwritten in place (SQLite's
        ``secure_delete``), for the span of a purge. The default has nothing to switch."""
        return

    def reclaim(self) -> None:
        """After a purge committed, outside any transaction: leave no byte of deleted rows
        in the store's files: free pages, journal frames, dead row versions (SQLite:
        ``VACUUM`` and ``wal_checkpoint(TRUNCATE)``; PostgreSQL: ``VACUUM FULL`` of the
        tables). May wait for readers to finish. The default (memory) has nothing to reclaim."""
        return

    def storage_files(self) -> list[str]:
        """The files this backend keeps the store in, as a purge's verification scans them
        byte by byte (SQLite: the database, ``-wal``, ``-shm``). ``[]``: none the client
        owns (a server's files, memory)."""
        return []

    def storage_bytes(self) -> int:
        """Bytes the store takes where it is kept (before and after a purge: bytes reclaimed)."""
        return sum(os.path.getsize(f) for f in self.storage_files() if os.path.exists(f))

    def iter_blobs(self) -> Iterator[BlobRow]:
        """Every blob row, any order (fsck); bases before the versions built on them
        where the backend can say so cheaply (SQLite: insertion order).

        The default reads each id's row; SQLite and PostgreSQL override it
        with a scan in pages, one statement per page instead of per blob.
        """
        for oid in self.iter_blob_ids():
            row = self.get_blob(oid)
            if row is not None:
                yield row

    def scan_changes(self) -> Iterator[ChangeRow]:
        """Every change row in ``seq`` order, as ``iter_changes``, read a page at a
        time where the backend can (fsck: the whole index never sits in one list).

        The default is ``iter_changes``; SQLite and PostgreSQL override it.
        """
        yield from self.iter_changes()

    def iter_commits_newest_first(self) -> Iterator[CommitRow]:
        """Every ``(seq, id, data)``, highest ``seq`` first (gc's walk: a commit's
        parents come after it, so one pass finds every reachable commit).

        The default reverses ``iter_commits`` in memory; SQLite and PostgreSQL
        override it with a scan in pages.
        """
        yield from reversed(list(self.iter_commits()))

    def first_parent_numbers(self) -> Iterator[FirstParentNumber]:
        """Every commit's ``(seq, number of the commit first_parent steps to)``, in ``seq``
        order: fsck holds it against each record's first parent (``HEAD~n`` follows these
        links, and so do PostgreSQL's server-side history lookups). The default asks
        ``first_parent`` of each commit; SQLite and PostgreSQL scan their link column."""
        for seq, oid, _data in self.iter_commits():
            parent = self.first_parent(oid, 1)
            row = None if parent is None else self.get_commit(parent)
            yield FirstParentNumber(seq, None if row is None else row[0])

    def head_rows(self, branch: str) -> list[HeadRow]:
        """The head rows of ``branch`` that hold a file (no tombstones), any order."""
        return [row for row in self.head_all(branch) if row.blob is not None]

    def scan_head(self, branch: str, tombstones: bool = False) -> Iterator[HeadRow]:
        """The head rows of ``branch`` that hold a file, as ``head_rows`` (with
        ``tombstones``: every row, as ``head_all``), read a page at a time where the
        backend can (fsck: never the whole index at once). The default is
        ``head_rows`` / ``head_all``; SQLite and PostgreSQL override it."""
        yield from self.head_all(branch) if tombstones else self.head_rows(branch)

    def change_chain(self, path: str, start: int) -> list[int]:
        """Every change of ``path`` reachable from change ``start`` through ``prev`` and
        ``prev2``, newest first, without repeats (``start`` included)."""
        seen, todo = {start}, [start]
        while todo:
            found = self.change_prev(path, todo.pop())
            for prev in found or ():
                if prev is not None and prev not in seen:
                    seen.add(prev)
                    todo.append(prev)
        return sorted(seen, reverse=True)

    def change_rows(self, path: str, upto: int) -> list[ChangeLinkLike]:
        """``(seq, prev, prev2)`` of every change of ``path`` numbered ``<= upto``, any order
        (a path's whole log and blame read its links at once; override with one range read).
        ``ChangeLink`` rows, or plain tuples of that shape."""
        out: list[ChangeLinkLike] = []
        seq = self.change_before(path, upto)
        while seq is not None:
            out.append(ChangeLink(seq, *(self.change_prev(path, seq) or (None, None))))
            seq = self.change_before(path, seq - 1)
        return out

    def change_commits(self, path: str, upto: int) -> list[ChangeCommit]:
        """``(seq, prev, prev2, id, data)`` of every change of ``path`` numbered ``<= upto``
        with its commit's id and record (``None, None`` if that commit is missing), any
        order: a path's whole log in one read. The default joins ``change_rows`` and
        ``commits_at``; SQLite and PostgreSQL answer with one statement."""
        rows = self.change_rows(path, upto)
        found = {c.seq: (c.id, c.data) for c in self.commits_at([seq for seq, _, _ in rows])}
        return [ChangeCommit(seq, prev, prev2, *found.get(seq, (None, None))) for seq, prev, prev2 in rows]

    def change_paths(self, path: str, upto: int) -> dict[int, list[str]]:
        """``{seq: keys}``: what each commit that changed ``path`` (numbered ``<= upto``)
        changed, as ``paths_at`` gives it; one statement on SQLite and PostgreSQL."""
        return self.paths_at([seq for seq, _, _ in self.change_rows(path, upto)])

    def path_log_rows(self, path: str, upto: int, *, records: bool = True) -> Iterator[PathLogRowLike]:
        """``(seq, prev, prev2, id, data, other)`` of every change of ``path`` numbered
        ``<= upto``, newest first, with its commit's id and record (``None, None`` if that
        commit is missing) and ``other``, a file other than ``path`` that the commit also
        changed (directory keys left out), or ``None``. A commit that changed several such
        files comes once per file, in consecutive rows (the first five columns the same).

        A path's whole log in one read that holds no row longer than it takes to use
        it: the caller consumes the rows at once and closes the iterator (SQLite streams
        one statement). ``records=False``: ``data`` and ``other`` are ``None`` and each
        commit comes once (a log whose commits the caller has built already).
        ``PathLogRow`` rows, or plain tuples of that shape. The default joins
        ``change_commits`` and ``change_paths``."""
        newest_first = sorted(self.change_commits(path, upto), key=lambda r: r.seq, reverse=True)
        if not records:
            for r in newest_first:
                yield PathLogRow(r.seq, r.prev, r.prev2, r.id, None, None)
            return
        paths = self.change_paths(path, upto)
        for r in newest_first:
            others = sorted(p for p in paths.get(r.seq, ()) if p != path and not p.endswith("/"))
            if not others:
                yield PathLogRow(*r, None)
            for other in others:
                yield PathLogRow(*r, other)


# ================================================================ the contract


class BackendBase(Transactions, Accelerators):
    """Subclass this to write a backend: implement the abstract methods.

    The defaults call only primitives, so a backend that implements the
    primitives correctly passes the conformance suite; override a default
    only to make it faster, never to change what it returns. The class
    attributes below are the backend's capabilities: the layers above read
    them (never ``getattr`` with a guess), and a backend sets the ones it has.
    """

    local: bool = False
    """No call waits on a network. A local backend also accepts ``write(wait=False)``
    (``TransientConflict`` at once when another writer holds the lock);
    ``VersionedStore`` runs cheap work on the event loop for it, and every call in
    a worker thread otherwise."""

    savepoints: bool = False
    """``savepoint()`` is implemented: ``Repository.commit_group`` then commits the
    waiting commits of a group in one transaction, each in its own savepoint;
    without it, each commit of a group gets a transaction of its own."""

    notifies: bool = False
    """``wait_for_change`` is woken by the database itself (PostgreSQL's NOTIFY, the
    memory backend's condition variable): ``VersionedStore`` waits on it; otherwise
    it sleeps its poll interval and reads its branch head, cheaper than the polling
    default of ``wait_for_change``."""

    computes_links: bool = False
    """``write_commit`` looks up each row's ``prev`` link itself (PostgreSQL: in the
    one statement of the commit): the repository then leaves ``CommitWrite.links``
    empty instead of reading the head rows first."""

    def wait_for_change(self, timeout: float) -> bool:
        """Block until some ref may have moved (``True``) or ``timeout`` seconds passed (``False``).

        A caller re-reads what it watches after every return, so a ``True``
        that turns out to be nothing costs one read, and a backend may return
        ``True`` whenever it cannot tell (e.g. after reconnecting). Returns
        ``False`` at once once the handle is closed. The default compares
        ``list_refs("")`` every 50 ms: correct for any backend, but a backend
        that can be woken sets ``notifies = True`` and overrides it.
        """
        deadline = time.monotonic() + max(0.0, timeout)
        before = self.list_refs("")
        while (left := deadline - time.monotonic()) > 0:
            time.sleep(min(0.05, left))
            if self.list_refs("") != before:
                return True
        return False


# The name the rest of memrev annotates with: every backend is a BackendBase.
Backend = BackendBase
