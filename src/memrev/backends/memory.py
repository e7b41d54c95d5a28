"""In-memory backend: ``memory://NAME``, one database per name for the life of the process.

For tests and throwaway stores: nothing is written to disk, and everything is
gone when the process ends. Like SQLite's shared-cache memory databases, every
handle opened on the same name shares one database, so two handles (two
``VersionedStore`` objects, a branch handle, a second thread) see each other's
commits and ``on_change`` works between them. A database lives until
:func:`drop` forgets its name (closing every handle does not: a store closed
and opened again finds its history, as it would in a file).

Transactions are snapshots. The database holds one immutable-by-convention
:class:`_State`; ``write()`` takes the database's writer lock (one writer at
a time, so ``lock_ref`` is a plain read), works on a copy whose tables are
copied on first change, and publishes it by swapping one reference. Readers
on other handles keep reading the published state: they never see
uncommitted rows and are never blocked. ``durability`` is accepted and
ignored; there is nothing to make durable. A commit copies each table it
changes (a dict copy, linear in the rows of that table): fine for tests and
scratch stores, not meant for large ones.
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_left, bisect_right
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

from ..errors import MemrevError, NoStore, TransientConflict
from .base import BackendBase, BlobRow, ChangeRow, ChangeRowLike, CommitRow, HeadRow

SCHEME = "memory://"
_WAIT_FOR_WRITER_S = 60.0  # as SQLite's busy timeout: then TransientConflict


@dataclass(slots=True)
class _State:
    """One committed version of a database. A transaction copies a table before changing it."""

    blobs: dict[bytes, BlobRow] = field(default_factory=dict)
    runs: dict[bytes, dict[int, bytes]] = field(default_factory=dict)  # lineage -> start -> blob id
    trees: dict[bytes, bytes] = field(default_factory=dict)
    commits: dict[bytes, tuple[int, bytes]] = field(default_factory=dict)  # id -> (seq, data)
    parents: dict[bytes, bytes] = field(default_factory=dict)  # id -> first parent (put_commit's)
    by_seq: dict[int, bytes] = field(default_factory=dict)  # seq -> id, insertion (= seq) order
    next_seq: int = 1
    refs: dict[str, bytes] = field(default_factory=dict)
    head: dict[str, dict[str, HeadRow]] = field(default_factory=dict)  # branch -> path -> row
    changes: dict[str, dict[int, tuple[int | None, int | None]]] = field(default_factory=dict)  # path -> seq -> prevs
    paths: dict[int, tuple[str, ...]] = field(default_factory=dict)  # seq -> paths changed


class _Database:
    def __init__(self) -> None:
        self.state = _State()
        self.writer = threading.Lock()  # one write transaction at a time, across handles
        self.changed = threading.Condition()  # notified when a commit moved or deleted a ref
        self.ref_version = 0  # counts those commits; wait_for_change compares it


_DATABASES: dict[str, _Database] = {}
_DATABASES_LOCK = threading.Lock()


def drop(name: str) -> None:
    """Forget the database ``memory://name`` (open handles keep the state they read last)."""
    with _DATABASES_LOCK:
        _DATABASES.pop(name, None)


def _database(name: str, create: bool) -> _Database:
    with _DATABASES_LOCK:
        db = _DATABASES.get(name)
        if db is None:
            if not create:
                raise NoStore(f"no memrev store at {SCHEME}{name}")
            db = _DATABASES[name] = _Database()
        return db


class _Txn:
    """The state a write transaction builds: a shallow copy, tables copied on first change."""

    def __init__(self, base: _State) -> None:
        self.state = replace(base)
        self._copied: set[Any] = set()

    def table(self, name: str) -> dict:
        if name not in self._copied:
            self._copied.add(name)
            setattr(self.state, name, dict(getattr(self.state, name)))
        return getattr(self.state, name)

    def inner(self, name: str, key: Any) -> dict:
        """The writable dict at ``state.<name>[key]`` (created empty when absent)."""
        outer = self.table(name)
        if (name, key) not in self._copied or key not in outer:  # absent: also after a clear
            self._copied.add((name, key))
            outer[key] = dict(outer.get(key, {}))
        return outer[key]


class MemoryBackend(BackendBase):
    """A handle on the in-process database ``memory://name``."""

    local = True  # no call waits on a network; write(wait=False) fails at once
    notifies = True  # a commit that moves a ref wakes wait_for_change

    def __init__(self, name: str, *, durability: str = "normal", create: bool = True) -> None:
        if durability not in ("normal", "full"):
            raise ValueError("durability must be 'normal' or 'full'")
        self.name = name
        self._db = _database(name, create)
        self._lock = threading.RLock()  # this handle's calls, as one SQLite connection's
        self._txn: _Txn | None = None
        self._txn_thread: int | None = None  # other threads read the published state, as another connection would
        self._snapshot: _State | None = None  # read_snapshot()'s state, for the thread in it
        self._snapshot_thread: int | None = None
        self._closed = False
        self._seen_version = self._db.ref_version

    @classmethod
    def from_url(cls, url: str, *, durability: str = "normal", create: bool = True) -> MemoryBackend:
        if not url.startswith(SCHEME) or not url[len(SCHEME) :]:
            raise MemrevError(f"not a memory store URL (memory://NAME): {url!r}")
        return cls(url[len(SCHEME) :], durability=durability, create=create)

    def __repr__(self) -> str:
        return f"MemoryBackend({self.name!r})"

    def close(self) -> None:
        with self._db.changed:
            self._closed = True
            self._db.changed.notify_all()  # a wait_for_change of this handle returns False

    def _read(self) -> _State:
        """What this handle sees: its own transaction's state inside ``write()``, else the published one."""
        if self._closed:
            raise MemrevError(f"this handle on {SCHEME}{self.name} is closed")
        txn = self._txn
        if txn is not None and self._txn_thread == threading.get_ident():
            return txn.state
        pinned = self._snapshot
        return pinned if pinned is not None and self._snapshot_thread == threading.get_ident() else self._db.state

    @contextmanager
    def read_snapshot(self) -> Iterator[None]:
        # The published state of the block's start, for this thread's reads (fsck): a
        # commit published meanwhile must not look like damage.
        with self._lock:
            self._snapshot, self._snapshot_thread = self._read(), threading.get_ident()
            try:
                yield
            finally:
                self._snapshot = self._snapshot_thread = None

    def _w(self) -> _Txn:
        txn = self._txn
        if txn is None or self._txn_thread != threading.get_ident():
            raise MemrevError("a mutating backend call outside write() (or from another thread)")
        return txn

    @contextmanager
    def write(self, *, exclusive: bool = False, wait: bool = True) -> Iterator[None]:
        # Every transaction excludes all other writers, so exclusive needs nothing more.
        with self._lock:
            self._read()  # refuses a closed handle
            if not self._db.writer.acquire(blocking=wait, timeout=_WAIT_FOR_WRITER_S if wait else -1):
                raise TransientConflict(f"{SCHEME}{self.name} stayed locked by another writer; nothing was written")
            try:
                self._txn, self._txn_thread = (txn := _Txn(self._db.state)), threading.get_ident()
                yield
                self._publish(txn)
            finally:
                self._txn = self._txn_thread = None
                self._db.writer.release()

    def _publish(self, txn: _Txn) -> None:
        db = self._db
        with db.changed:
            moved = txn.state.refs is not db.state.refs
            db.state = txn.state  # one reference swap: readers see all of it or none
            if moved:
                db.ref_version += 1
                db.changed.notify_all()

    # ------------------------------------------------------------ objects

    def get_blob(self, oid: bytes) -> BlobRow | None:
        return self._read().blobs.get(oid)

    def put_blob(self, row: BlobRow) -> None:
        txn = self._w()
        if row.id in txn.state.blobs:
            return
        if row.lineage is not None:
            holder = txn.state.runs.get(row.lineage, {}).get(row.start)
            if holder is not None:  # a different blob at this place of the run: refuse, never drop
                raise TransientConflict(f"append run {row.lineage.hex()} already has a piece at {row.start}")
            txn.inner("runs", row.lineage)[row.start] = row.id
        txn.table("blobs")[row.id] = row

    def lineage_pieces(self, lineage: bytes, lo: int, hi: int) -> list[BlobRow]:
        state = self._read()
        run = state.runs.get(lineage, {})
        starts = sorted(run)
        first = bisect_right(starts, lo) - 1  # the piece that starts at or before lo
        chosen = starts[max(first, 0) : bisect_left(starts, hi)]
        return [state.blobs[run[s]] for s in chosen]

    def get_tree(self, oid: bytes) -> bytes | None:
        return self._read().trees.get(oid)

    def put_tree(self, oid: bytes, data: bytes) -> None:
        txn = self._w()
        if oid not in txn.state.trees:
            txn.table("trees")[oid] = data

    def get_commit(self, oid: bytes) -> tuple[int, bytes] | None:
        return self._read().commits.get(oid)

    def commit_at(self, seq: int) -> tuple[bytes, bytes] | None:
        state = self._read()
        oid = state.by_seq.get(seq)
        return None if oid is None else (oid, state.commits[oid][1])

    def put_commit(self, oid: bytes, parent: bytes | None, data: bytes) -> int:
        txn = self._w()
        found = txn.state.commits.get(oid)
        if found is not None:
            return found[0]
        seq = txn.state.next_seq
        txn.state.next_seq = seq + 1
        txn.table("commits")[oid] = (seq, data)
        txn.table("by_seq")[seq] = oid
        if parent is not None:
            txn.table("parents")[oid] = parent
        return seq

    def first_parent(self, oid: bytes, steps: int) -> bytes | None:
        parents = self._read().parents
        for _ in range(steps):
            found = parents.get(oid)
            if found is None:
                return None
            oid = found
        return oid

    # ------------------------------------------------------------ refs

    def set_ref_if_equals(self, name: str, old: bytes | None, new: bytes) -> bool:
        txn = self._w()
        if txn.state.refs.get(name) != old:
            return False
        txn.table("refs")[name] = new
        return True

    def delete_ref(self, name: str) -> None:
        txn = self._w()
        if name in txn.state.refs:
            del txn.table("refs")[name]

    def list_refs(self, prefix: str) -> dict[str, bytes]:
        return {name: target for name, target in self._read().refs.items() if name.startswith(prefix)}

    # ------------------------------------------------------------ derived indexes

    def head_get(self, branch: str, path: str) -> HeadRow | None:
        return self._read().head.get(branch, {}).get(path)

    def head_put(self, branch: str, rows: list[HeadRow]) -> None:
        if rows:
            self._w().inner("head", branch).update((r.path, r) for r in rows)

    def head_all(self, branch: str) -> list[HeadRow]:
        return list(self._read().head.get(branch, {}).values())

    def head_clear(self, branch: str) -> None:
        txn = self._w()
        if branch in txn.state.head:
            del txn.table("head")[branch]

    def change_put(self, rows: Sequence[ChangeRowLike]) -> None:
        txn = self._w()
        for path, seq, prev, prev2 in rows:
            by_seq = txn.inner("changes", path)
            if seq not in by_seq:
                paths = txn.table("paths")
                paths[seq] = (*paths.get(seq, ()), path)
            by_seq[seq] = (prev, prev2)

    def change_prev(self, path: str, seq: int) -> tuple[int | None, int | None] | None:
        return self._read().changes.get(path, {}).get(seq)

    def change_before(self, path: str, seq: int) -> int | None:
        return max((s for s in self._read().changes.get(path, {}) if s <= seq), default=None)

    def paths_at(self, seqs: list[int]) -> dict[int, list[str]]:
        paths = self._read().paths
        return {seq: list(paths[seq]) for seq in seqs if paths.get(seq)}

    def clear_indexes(self) -> None:
        txn = self._w()
        for name in ("head", "changes", "paths"):
            txn.table(name).clear()

    # ------------------------------------------------------------ scans

    def iter_commits(self) -> Iterator[CommitRow]:
        state = self._read()
        for seq in sorted(state.by_seq):
            oid = state.by_seq[seq]
            yield CommitRow(seq, oid, state.commits[oid][1])

    def iter_blob_ids(self) -> Iterator[bytes]:
        return iter(list(self._read().blobs))

    def iter_trees(self) -> Iterator[tuple[bytes, bytes]]:
        yield from list(self._read().trees.items())

    def iter_changes(self) -> Iterator[ChangeRow]:
        state = self._read()
        rows = [ChangeRow(path, seq, *prevs) for path, by_seq in state.changes.items() for seq, prevs in by_seq.items()]
        return iter(sorted(rows, key=lambda r: r.seq))

    def restack_commit(self, oid: bytes) -> int:
        txn = self._w()
        found = txn.state.commits.get(oid)
        if found is None:
            raise KeyError(oid.hex())
        old, data = found
        seq = txn.state.next_seq
        txn.state.next_seq = seq + 1
        txn.table("commits")[oid] = (seq, data)
        by_seq = txn.table("by_seq")
        del by_seq[old]
        by_seq[seq] = oid
        paths = txn.table("paths").pop(old, ())
        for path in paths:
            txn.inner("changes", path).pop(old, None)
        return seq

    def delete_unreachable(self, table: str, keep: set[bytes]) -> int:
        if table not in ("commits", "trees", "blobs"):
            raise ValueError(f"not an object table: {table!r}")
        txn = self._w()
        gone = [oid for oid in getattr(txn.state, table) if oid not in keep]
        for oid in gone:
            getattr(self, f"_forget_{table}")(txn, oid)
        return len(gone)

    def _forget_commits(self, txn: _Txn, oid: bytes) -> None:
        seq = txn.table("commits").pop(oid)[0]
        del txn.table("by_seq")[seq]
        txn.table("parents").pop(oid, None)
        for path in txn.table("paths").pop(seq, ()):
            txn.inner("changes", path).pop(seq, None)

    def _forget_trees(self, txn: _Txn, oid: bytes) -> None:
        del txn.table("trees")[oid]

    def _forget_blobs(self, txn: _Txn, oid: bytes) -> None:
        row = txn.table("blobs").pop(oid)
        if row.lineage is not None:
            txn.inner("runs", row.lineage).pop(row.start, None)

    # ------------------------------------------------------------ change notification

    def wait_for_change(self, timeout: float) -> bool:
        """True once a commit moved or deleted a ref since this handle last looked; False on timeout or close."""
        deadline = time.monotonic() + max(0.0, timeout)
        db = self._db
        with db.changed:
            while db.ref_version == self._seen_version and not self._closed:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                db.changed.wait(left)
            if self._closed:
                return False
            self._seen_version = db.ref_version
            return True
