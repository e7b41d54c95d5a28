"""The repository: blobs, trees, commits and refs over one backend.

Synchronous and framework-free; ``VersionedStore`` is the async face over it.
Every mutation is one call to :meth:`Repository.commit`, which runs in one
backend write transaction: read the branch head, store new blobs and tree
nodes, record the commit, update the derived indexes, and move the branch
with a compare-and-swap. Either all of it is committed or none of it.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import FrozenInstanceError, dataclass, field
from datetime import datetime, timezone
from typing import Any

from .. import errors
from ..backends.base import Backend, CommitWrite, HeadRow
from ..core import textdiff, trees
from ..core.objects import (
    EMPTY_TREE,
    EMPTY_TREE_ID,
    ID_BYTES,
    CommitData,
    Entry,
    commit_fields,
    commit_id,
    decode_tree,
    tree_id,
)
from ..core.paths import ancestors, directory_keys, is_directory_key, is_under, split
from .blobs import BlobStore
from .cache import LRU
from .ops import ANY_HEAD, OP_TYPES, AnyHead, Append, Op, SetEntry, Write
from .revisions import Resolver, branch_ref

# The stale-index marker (backends' migration 2) of the change index's directory keys.
DIRECTORY_KEYS = "directory-keys"


class Commit:
    """One commit as the history API returns it (shared between calls: read it, do not change it).

    Fields: ``id`` (hex), ``parents`` (hex ids), ``time`` (UTC ``datetime``),
    ``author``, ``message``, ``meta`` (the JSON object), ``paths`` (the files it
    changed, sorted). Read-only, compared by value like a frozen dataclass.

    A path's log builds thousands of these and a caller often reads a few
    fields of a few of them, so one made from a stored record (``from_record``)
    keeps the record, already checked against its hash, and decodes it on the
    first read of a field other than ``id``: building one costs a few hundred
    nanoseconds instead of the ~20 µs of decoding it (issue 14: a first
    ``log(path)`` of 5,000 versions spent ~90 ms decoding).
    """

    __slots__ = ("id", "_seq", "_record", "_changed", "_fields")
    id: str
    _seq: int | None
    _record: bytes | None
    _changed: str | Iterable[str] | None  # a str: the one file it changed (a path's log builds thousands)
    _fields: tuple[Any, ...] | None

    _NAMES = ("id", "parents", "time", "author", "message", "meta", "paths")
    __match_args__ = _NAMES  # as the frozen dataclass it was: ``case Commit(id, parents)``

    def __init__(
        self,
        id: str,
        parents: tuple[str, ...],
        time: datetime,
        author: str,
        message: str,
        meta: dict[str, Any],
        paths: tuple[str, ...],
    ) -> None:
        _set = object.__setattr__
        _set(self, "id", id)
        _set(self, "_seq", None)
        _set(self, "_record", None)
        _set(self, "_changed", None)
        _set(self, "_fields", (parents, time, author, message, meta, paths))

    @classmethod
    def from_record(cls, oid: bytes, seq: int, record: bytes, changed: str | Iterable[str]) -> Commit:
        """Commit number ``seq`` from its stored bytes (verified against ``oid`` by the
        caller) and the keys the change index holds for it (or, as a ``str``, the one
        file it changed); decoded when first read."""
        self = _new(cls)
        _set_id(self, oid.hex())
        _set_seq(self, seq)
        _set_record(self, record)
        _set_changed(self, changed)
        _set_fields(self, None)
        return self

    def _decoded(self) -> tuple[Any, ...]:
        # Read the change keys before the fields: a decode by another thread sets the
        # fields before dropping the keys, so keys gone means fields there (two threads
        # reading one shared Commit at once both decode it; neither sees keys dropped).
        changed = self._changed
        fields = self._fields
        if fields is None:
            try:
                parents, time_us, author, message, meta = commit_fields(self._record)
            except ValueError as e:
                raise errors.IntegrityError(f"commit {self.id}: {e}") from None
            when = datetime.fromtimestamp(time_us / 1e6, tz=timezone.utc)  # as CommitData.time
            files = (changed,) if changed.__class__ is str else _file_paths(changed)  # type: ignore[arg-type]
            fields = (parents, when, author, message, meta, files)
            object.__setattr__(self, "_fields", fields)
            object.__setattr__(self, "_changed", None)
        return fields

    @property
    def parents(self) -> tuple[str, ...]:
        return self._decoded()[0]

    @property
    def time(self) -> datetime:
        return self._decoded()[1]

    @property
    def author(self) -> str:
        return self._decoded()[2]

    @property
    def message(self) -> str:
        return self._decoded()[3]

    @property
    def meta(self) -> dict[str, Any]:
        return self._decoded()[4]

    @property
    def paths(self) -> tuple[str, ...]:
        return self._decoded()[5]

    def _stored(self) -> tuple[int, bytes] | None:
        """``(number, record)`` of a commit made by ``from_record`` (the record checked
        against its hash), else ``None``: the repository decodes it or takes its root
        tree id from it instead of reading the commit again."""
        return None if self._record is None else (self._seq, self._record)

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def _values(self) -> tuple[Any, ...]:
        return (self.id, *self._decoded())

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self is other or self._values() == other._values()

    __hash__ = None  # type: ignore[assignment]  # as a frozen dataclass holding a dict: unhashable

    def __repr__(self) -> str:
        return "Commit(" + ", ".join(f"{n}={v!r}" for n, v in zip(self._NAMES, self._values(), strict=True)) + ")"

    def __reduce__(self) -> tuple[Any, ...]:
        return (Commit, self._values())

    def to_json(self) -> dict[str, Any]:
        """The shape of ``memrev log --json`` (and the viewer's ``/api/`` pages)."""
        return {
            "id": self.id,
            "parents": list(self.parents),
            "time": self.time.isoformat(),
            "author": self.author,
            "message": self.message,
            "meta": self.meta,
            "paths": list(self.paths),
        }


@dataclass(frozen=True)
class _CommitFields:
    """``Commit``'s fields as the frozen dataclass it was before it decoded lazily declared
    them: given to ``Commit`` so ``dataclasses.fields``/``asdict``/``replace`` still work
    on it (callers used them; its own methods need none of this)."""

    id: str
    parents: tuple[str, ...]
    time: datetime
    author: str
    message: str
    meta: dict[str, Any]
    paths: tuple[str, ...]


for _name in ("__dataclass_fields__", "__dataclass_params__"):
    setattr(Commit, _name, getattr(_CommitFields, _name))
del _name

# ``from_record`` sets the slots through their descriptors: a path's log builds thousands
# of commits, and this is a third of the cost of ``object.__setattr__`` by name.
_new = object.__new__
_set_id, _set_seq, _set_record, _set_changed, _set_fields = (
    Commit.__dict__[name].__set__ for name in Commit.__slots__
)


def _file_paths(changed: Iterable[str]) -> tuple[str, ...]:
    """The files among a commit's change keys (directory keys left out), sorted."""
    return tuple(sorted(p for p in changed if not is_directory_key(p)))


@dataclass(frozen=True, slots=True)
class FileChange:
    """One file that differs between two revisions."""

    path: str
    status: str  # "added" | "modified" | "deleted"
    old: str | None
    new: str | None
    diff: str

    def to_json(self) -> dict[str, Any]:
        """The shape of ``memrev diff --json``."""
        return {"path": self.path, "status": self.status, "diff": self.diff}


# What one request of a group may fail with on its own: memrev's errors (a moved
# branch, a collected revision, a bad offset) and bad operations. Anything else
# (a database error) fails the whole transaction and every request in it.
_REQUEST_ERRORS = (errors.MemrevError, ValueError, TypeError, KeyError)


@dataclass(slots=True)
class CommitRequest:
    """One caller's commit in a group (``Repository.commit_group``); the arguments of ``commit``."""

    branch: str
    ops: Sequence[Op]
    author: str
    message: str | None = None
    meta: dict[str, Any] | None = None
    merge_parent: bytes | None = None
    expect_head: bytes | None | AnyHead = ANY_HEAD
    blob_sources: Sequence[bytes] | None = None


@dataclass(slots=True)
class CommitResult:
    id: bytes | None  # None: nothing changed, no commit
    parent: bytes | None = None
    paths: list[str] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)
    # Caches the new commit once its transaction committed (Repository._apply).
    settle: Callable[[], None] | None = field(default=None, repr=False, compare=False)


# Caches are bounded by their size in memory, not by count: 50,000 decoded tree
# nodes (the old bound) of a store with thousand-file directories held ~160 MB,
# 50,000 commits ~27 MB, and listings were weighed by name count, so peak memory
# grew with history. The budgets keep what recent commits and walks reuse.
TREE_CACHE_BYTES = 16 << 20
COMMIT_CACHE_BYTES = 16 << 20  # ~30,000 commits of short messages
LISTING_CACHE_BYTES = 4 << 20
TREE_BYTES_CACHE_BYTES = 4 << 20  # ~30,000 small nodes as stored


def decoded_tree_bytes(node: tuple[str, Any]) -> int:
    """About what a decoded node holds in memory (measured: ~250 B per leaf entry)."""
    kind, body = node
    return 200 + (250 * len(body) if kind == "T" else 60 * len(body[1]))


def _commit_bytes(hit: tuple[int, CommitData]) -> int:
    """About what a cached (number, decoded commit) holds (measured: ~550 B with a short message)."""
    c = hit[1]
    return 450 + len(c.message) + len(c.author) + 60 * len(c.meta)


def _stored_bytes(data: bytes) -> int:
    return 100 + len(data)


def _names_bytes(names: list[str]) -> int:
    return 64 + sum(60 + len(n) for n in names)


class Repository:
    def __init__(self, backend: Backend, *, cache_bytes: int = 16 << 20) -> None:
        self.backend = backend
        self.blobs = BlobStore(backend, cache_bytes=cache_bytes)
        self._trees = LRU(TREE_CACHE_BYTES, weigh=decoded_tree_bytes)
        self._commits = LRU(COMMIT_CACHE_BYTES, weigh=_commit_bytes)
        self._listings = LRU(LISTING_CACHE_BYTES, weigh=_names_bytes)  # sorted names of a directory node, by node id
        self._tree_bytes = LRU(TREE_BYTES_CACHE_BYTES, weigh=_stored_bytes)  # hash-checked nodes as stored (history)
        self._infos = LRU(50_000)  # Commit (as the history API returns it) by commit id
        self._logged = LRU(4_096)  # paths whose whole log was built (its commits are in _infos)
        # (path or directory key, commit id) -> the last change of that key on the commit's
        # line: noted by the commit that made it, so the next commit on top skips the read.
        self._folder_seqs = LRU(4_096)
        self._folders_fresh = False  # every commit has its directory keys (see directory_keys_stale)
        self._new_trees: list[tuple[bytes, bytes]] | None = None  # collected by _update_tree
        # In a group whose commit numbers come only with COMMIT (commit_group on a network
        # backend): the records of its commits so far, which the next request builds on.
        self._unsettled: dict[bytes, CommitData] | None = None
        self._revisions = Resolver(backend, lambda oid: self.commit_data(oid)[1].parents, lambda oid: self._commits.get(oid) is not None)

    def forget(self) -> None:
        """Drop every cache (after gc removed objects they may hold)."""
        self.blobs.forget()
        for cache in (self._trees, self._commits, self._listings, self._infos, self._logged, self._folder_seqs, self._tree_bytes):
            cache.clear()

    # ================================================================ objects

    def tree(self, oid: bytes) -> tuple[str, Any]:
        node = self._trees.get(oid)
        if node is None:
            if oid == EMPTY_TREE_ID:
                data = EMPTY_TREE
            else:
                data = self._tree_bytes.get(oid)  # checked when history read it
                if data is None:
                    data = self.backend.get_tree(oid)
                    if data is None:
                        raise errors.IntegrityError(f"tree {oid.hex()} is missing")
                    if tree_id(data) != oid:
                        raise errors.IntegrityError(f"tree {oid.hex()} does not match its hash")
            try:
                node = decode_tree(data)
            except ValueError as e:
                raise errors.IntegrityError(f"tree {oid.hex()}: {e}") from None
            self._trees.put(oid, node)
        return node

    def tree_bytes(self, oids: Iterable[bytes]) -> dict[bytes, bytes]:
        """``{id: bytes}`` of tree nodes, each checked against its hash; those not cached
        are read in one batch (``trees.lookup_many`` asks for a level of nodes at once).
        The bytes are cached as stored, not decoded: ``history`` looks one name up in
        each node of thousands, which costs less than decoding them, and bytes are a
        tenth of a decoded node's memory (and nothing for the garbage collector)."""
        out: dict[bytes, bytes] = {EMPTY_TREE_ID: EMPTY_TREE}
        cached = self._tree_bytes
        wanted = []
        for oid in oids:
            if oid not in out:
                data = cached.get(oid)
                if data is None:
                    wanted.append(oid)
                out[oid] = data
        got = self.backend.get_trees(wanted) if wanted else {}
        for oid in wanted:
            data = got.get(oid)
            if data is None:
                raise errors.IntegrityError(f"tree {oid.hex()} is missing")
            if tree_id(data) != oid:
                raise errors.IntegrityError(f"tree {oid.hex()} does not match its hash")
            cached.put(oid, data)
            out[oid] = data
        return out

    def put_tree(self, data: bytes) -> bytes:
        oid = tree_id(data)
        if oid != EMPTY_TREE_ID:
            if self._new_trees is None:
                self.backend.put_tree(oid, data)
            else:
                self._new_trees.append((oid, data))
            self._trees.put(oid, decode_tree(data))
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

    def commit_data_at(self, seq: int) -> tuple[bytes, CommitData]:
        """Commit number ``seq``: its id and decoded record (one read; cached as ``commit_data``)."""
        row = self.backend.commit_at(seq)
        if row is None:
            raise errors.IntegrityError(f"change index names missing commit #{seq}")
        oid, data = row
        hit = self._commits.get(oid)
        if hit is None:
            if commit_id(data) != oid:
                raise errors.IntegrityError(f"commit {oid.hex()} does not match its hash")
            hit = (seq, _decode_commit(oid, data))
            self._commits.put(oid, hit)
        return oid, hit[1]

    def commit_data(self, oid: bytes) -> tuple[int, CommitData]:
        hit = self._commits.get(oid)
        if hit is None:
            row = self._stored_commit(oid) or self.backend.get_commit(oid)
            if row is None:
                raise errors.RevisionNotFound(f"commit {oid.hex()} does not exist")
            seq, data = row
            if commit_id(data) != oid:
                raise errors.IntegrityError(f"commit {oid.hex()} does not match its hash")
            hit = (seq, _decode_commit(oid, data))
            self._commits.put(oid, hit)
        return hit

    def _stored_commit(self, oid: bytes) -> tuple[int, bytes] | None:
        """The record a path's log kept undecoded (``Commit.from_record``): what follows
        a log (``history``, filters) decodes it instead of reading it again."""
        info = self._infos.get(oid)
        return None if info is None else info._stored()

    def content(self, oid: bytes) -> bytes:
        """The bytes of a blob (see :class:`~memrev.repo.blobs.BlobStore`)."""
        return self.blobs.content(oid)

    def content_range(self, oid: bytes, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of a blob, reading only the append pieces needed."""
        return self.blobs.content_range(oid, start, end)

    # ================================================================ commits

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
        if not wait:
            return self._commit_once(
                branch, ops, author, message, meta, merge_parent, expect_head, blob_sources, wait=False
            )
        for attempt in range(8):
            try:
                return self._commit_once(
                    branch, ops, author, message, meta, merge_parent, expect_head, blob_sources
                )
            except errors.TransientConflict as e:
                if attempt == 7:
                    raise
                if not isinstance(e, errors.HeadMoved):  # a stale guessed head is no contention to wait out
                    time.sleep(0.005 * 2**attempt)
        raise AssertionError("unreachable")

    def _commit_once(
        self,
        branch: str,
        ops: Sequence[Op],
        author: str,
        message: str | None,
        meta: dict[str, Any] | None,
        merge_parent: bytes | None,
        expect_head: bytes | None | AnyHead,
        blob_sources: Sequence[bytes] | None = None,
        wait: bool = True,
    ) -> CommitResult:
        try:
            with self.backend.write() if wait else self.backend.write(wait=False):
                result = self._apply(branch, ops, author, message, meta, merge_parent, expect_head, blob_sources)
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
        if len(requests) == 1 or not getattr(self.backend, "savepoints", False):
            return [self._commit_alone(r) for r in requests]
        # A network backend learns each commit's number with COMMIT (one round trip for
        # the group): the commits are cached once it is committed, and meanwhile the next
        # request builds on the previous one's record (_unsettled). A local backend knows
        # the number at once and settles each commit inside its savepoint.
        defer = not self.backend.local
        for attempt in range(8):
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
                if attempt == 7:
                    raise
                if not isinstance(e, errors.HeadMoved):
                    time.sleep(0.005 * 2**attempt)
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
                result = self._apply(
                    r.branch, r.ops, r.author, r.message, r.meta, r.merge_parent, r.expect_head, r.blob_sources
                )
                # Inside the savepoint: the next request may build on this commit. (A
                # backend that queues the writes sends them with a later statement; an
                # error of the server there fails the whole group, as it would here.)
                return _settled(result) if settle else result
        except _REQUEST_ERRORS as e:
            self.blobs.rolled_back()
            if isinstance(e, errors.HeadMoved):  # the group was computed on a stale head: all again
                raise
            return e

    def _apply(
        self,
        branch: str,
        ops: Sequence[Op],
        author: str,
        message: str | None,
        meta: dict[str, Any] | None,
        merge_parent: bytes | None,
        expect_head: bytes | None | AnyHead,
        blob_sources: Sequence[bytes] | None,
    ) -> CommitResult:
        """One commit inside a write transaction (or savepoint) the caller holds.

        When it fails the caller rolls back and calls ``blobs.rolled_back()``:
        the blob rows remembered meanwhile are gone, and an append piece rolled
        back must not be taken for stored by the next append of the same bytes.
        """
        ref = branch_ref(branch)
        # A commit that may fail on what the head holds (expect_head, a staged append's
        # offset) needs the real head first; any other may be computed on the head the
        # backend saw last, which write_commit's compare-and-swap verifies (HeadMoved).
        head = self.backend.lock_ref(ref) if _head_decides(ops, expect_head) else self.backend.guess_ref(ref)
        if not isinstance(expect_head, AnyHead) and head != expect_head:
            raise errors.ConcurrentUpdate(f"branch {branch} moved; compute the change again")
        unsettled = self._unsettled
        if head is None:
            parent_tree = EMPTY_TREE_ID
        elif unsettled is not None and head in unsettled:  # the previous commit of this group
            parent_tree = unsettled[head].tree
        else:
            parent_tree = self.commit_data(head)[1].tree
        staged: dict[str, HeadRow | None] = {}
        offsets: list[int] = []
        found: dict[str, HeadRow | None] = {}  # live() of each path asked, asked again below

        def live(path: str) -> HeadRow | None:
            # What the file is, from the hash-verified tree; the head index
            # is consulted only for history links (``seq``), never for content.
            if path not in found:
                entry = trees.lookup(self, parent_tree, split(path))
                found[path] = None if entry is None else HeadRow(path, entry.oid, entry.size, 0)
            return found[path]

        def current(path: str) -> HeadRow | None:
            return staged[path] if path in staged else live(path)

        for op in ops:
            path = op.path
            if isinstance(op, Write):
                new = self.blobs.store_version(current(path), op.data)
                if new is not None:
                    staged[path] = new
            elif isinstance(op, Append):
                cur = current(path)
                offsets.append(cur.size if cur else 0)
                if op.offset is not None and op.offset != offsets[-1]:  # staged in a transaction at that offset
                    raise errors.ConcurrentUpdate(
                        f"{path} changed since the transaction appended to it at byte {op.offset}; nothing was written"
                    )
                if cur is None:  # creates the file, even an empty one, as ag2's stores do
                    staged[path] = self.blobs.store_full(op.data)
                elif op.data:
                    staged[path] = self.blobs.store_append(cur.blob, op.data)
            elif isinstance(op, SetEntry):
                staged[path] = HeadRow("", op.oid, op.size, 0)
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

        changed: dict[str, HeadRow | None] = {}
        for path, new in staged.items():
            was = live(path)
            if (new is None and was is None) or (new is not None and was is not None and new.blob == was.blob):
                continue
            changed[path] = new
        if not changed and merge_parent is None:
            return CommitResult(None, head, [], offsets)
        self._check_still_stored(changed, merge_parent, {op.path for op in ops if isinstance(op, SetEntry)}, blob_sources)

        tree_changes = {
            tuple(split(p)): (None if new is None else Entry("f", new.blob, new.size)) for p, new in changed.items()
        }
        # A file written back unchanged below a directory deleted in this commit
        # (delete /c, write /c/d as it was) is no change of its own, but the tree
        # update empties the directory first: it is put back there.
        emptied = {p for p, new in changed.items() if new is None}
        for p, new in staged.items():
            if new is not None and p not in changed and any(a in emptied for a in ancestors(p)):
                tree_changes[tuple(split(p))] = Entry("f", new.blob, new.size)
        new_tree = self._update_tree(parent_tree, tree_changes)
        paths = sorted(changed)
        record = CommitData(
            tree=new_tree,
            parents=tuple(p for p in (head, merge_parent) if p),
            time_us=time.time_ns() // 1000,
            author=author,
            message=message or _default_message(ops, paths),
            meta=meta or {},
        )
        data = record.encode()
        oid = commit_id(data)
        if unsettled is not None:
            unsettled[oid] = record
        folders = sorted(directory_keys(changed))

        def link(path: str) -> int | None:
            # Where the first parent's history of the path ends (backends that look
            # it up themselves, PostgreSQL, never call this).
            return self._path_prev(branch, path, head) if path in changed else self._folder_prev(branch, path, head)

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
                link=link,
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

        return CommitResult(oid, head, paths, offsets, settle)

    def _check_still_stored(
        self,
        changed: dict[str, HeadRow | None],
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

    # ================================================================ reading

    def head(self, branch: str) -> bytes | None:
        return self.backend.get_ref(branch_ref(branch))

    def root(self, commit: bytes | None) -> bytes:
        return EMPTY_TREE_ID if commit is None else self.commit_data(commit)[1].tree


    def entry_at(self, commit: bytes | None, path: str) -> Entry | None:
        return trees.lookup(self, self.root(commit), split(path))

    def list_at(self, commit: bytes | None, path: str) -> list[str]:
        node = trees.find_dir(self, self.root(commit), split(path))
        if node is None:
            return []
        names = self._listings.get(node)
        if names is None:
            names = trees.list_dir(self, node)
            self._listings.put(node, names)
        return list(names)

    # Roots walked together by ``entries_at``: bounds the node bytes one batch holds.
    _ROOTS_AT_ONCE = 1000

    def entries_at(self, commits: list[Commit], path: str) -> list[Entry | None]:
        """The entry of ``path`` at each of ``commits`` (``history``): the trees of a
        thousand commits are read a level at a time, one batch per level, each node
        searched without being decoded, and the root of a commit a path's log kept
        undecoded is taken from its record."""
        roots = [self._root_of(c) for c in commits]
        segments = split(path)
        out: list[Entry | None] = []
        try:
            for i in range(0, len(roots), self._ROOTS_AT_ONCE):
                out += trees.lookup_many(self, roots[i : i + self._ROOTS_AT_ONCE], segments)
        except ValueError as e:  # a node whose bytes (matching its hash) do not read as a tree
            raise errors.IntegrityError(str(e)) from None
        return out

    def _root_of(self, c: Commit) -> bytes:
        stored = c._stored()
        if stored is None:
            return self.root(bytes.fromhex(c.id))
        return stored[1][1 : 1 + ID_BYTES]  # the record starts with b"C" and the root tree id

    def dir_exists_at(self, commit: bytes | None, path: str) -> bool:
        return path == "/" and commit is not None or (
            path != "/" and trees.find_dir(self, self.root(commit), split(path)) is not None
        )

    # ================================================================ revisions

    def resolve(self, rev: str, branch: str) -> bytes:
        """The commit a revision names (see :mod:`memrev.repo.revisions`)."""
        return self._revisions.resolve(rev, branch)

    # ================================================================ history

    def commit_info(self, oid: bytes) -> Commit:
        return self.commit_infos([oid])[0]

    def commit_infos(self, oids: list[bytes]) -> list[Commit]:
        """Commits with the paths each changed, from the change index in one query.

        A commit and its change rows never change once written (gc and reindex
        drop every cache), so each ``Commit`` is built once and kept: a log
        read again costs its walk, not one decode per commit.
        """
        # The answer is built from what was found and built here, not read back from the
        # cache: a log of more commits than it holds would evict its own first ones.
        found = {o: self._infos.get(o) for o in oids}
        missing = [o for o, info in found.items() if info is None]
        if missing:
            seqs = [self.commit_data(o)[0] for o in missing]
            paths = self.backend.paths_at(seqs)
            for o, seq in zip(missing, seqs, strict=True):
                info = found[o] = self._info(o, paths.get(seq, ()))
                self._infos.put(o, info)
        return [found[o] for o in oids]

    def _info(self, oid: bytes, paths: Iterable[str]) -> Commit:
        _, c = self.commit_data(oid)
        return Commit(
            id=oid.hex(),
            parents=tuple(p.hex() for p in c.parents),
            time=c.time,
            author=c.author,
            message=c.message,
            meta=dict(c.meta),
            paths=tuple(sorted(p for p in paths if not is_directory_key(p))),
        )

    def log(self, start: bytes, limit: int | None = None) -> list[Commit]:
        """Commits reachable from ``start``, newest first (by commit order)."""
        return self.log_page([start], limit)[0]

    def log_page(self, frontier: list[bytes], limit: int | None = None) -> tuple[list[Commit], list[bytes]]:
        """Commits reachable from ``frontier``, newest first, and the frontier to continue from.

        Commit numbers are topological, so once a commit is taken every commit
        still to come is older than it: the returned frontier alone (a few ids,
        one per open line of history) resumes the walk exactly where it stopped.
        """
        order: list[bytes] = []
        pending: dict[bytes, int] = {oid: self.commit_data(oid)[0] for oid in frontier}
        while pending and (limit is None or len(order) < limit):
            oid = max(pending, key=pending.__getitem__)
            del pending[oid]
            order.append(oid)
            for p in self.commit_data(oid)[1].parents:
                pending.setdefault(p, self.commit_data(p)[0])
        return self.commit_infos(order), sorted(pending, key=pending.__getitem__, reverse=True)

    def path_log(self, path: str, start_seq: int | None, limit: int | None = None) -> list[Commit]:
        """Commits that changed ``path``, following the per-path index only."""
        if start_seq is not None and limit is None:
            return self._whole_path_log(path, start_seq)
        return self.commits_at(self.path_versions(path, start_seq, limit))

    def _whole_path_log(self, path: str, start_seq: int) -> list[Commit]:
        """Every commit that changed ``path`` reachable from change ``start_seq``, newest first.

        One statement however long the history: the path's change rows newest
        first, each with its commit's record and the other files that commit
        changed. Links point to older changes, so one pass over the rows as they
        come finds the reachable ones, and a commit not built yet is built from
        its row there: the rows are never all held at once and nothing but the
        ``Commit`` is kept per commit (a first ``log`` of a 5,000-version file
        spent most of its time on the garbage collections its allocations set
        off). Each record is checked against its hash once and kept undecoded
        in its ``Commit`` until a field is read. Once a path's log was built,
        its commits are kept: a log of it again reads the rows without records
        and files, takes the commits from the cache and reads the few missing
        (newer ones, or evicted) by number.
        """
        records = self._logged.get(path) is None
        infos = self._infos
        file = not is_directory_key(path)
        wanted = {start_seq}  # the changes reachable from the start among those not passed yet
        out: list[Commit | None] = []
        built: list[Commit] = []
        built_ids: list[bytes] = []  # apart, not as pairs: a tuple per commit is one more object to collect
        missing: list[int] = []  # commits to read by number (rows read without records) ...
        missing_at: list[int] = []  # ... and their places in ``out``
        files: list[str] | None = None  # the files of the commit just built, while more rows may add to them
        last = None
        rows = self.backend.path_log_rows(path, start_seq, records=records)
        try:
            for seq, prev, prev2, oid, data, other in rows:
                if seq == last:  # another file the commit just read changed
                    if files is not None and other is not None:
                        files.append(other)
                    continue
                last, files = seq, None
                if seq not in wanted:
                    continue
                wanted.discard(seq)
                if prev is not None:
                    wanted.add(prev)
                if prev2 is not None:
                    wanted.add(prev2)
                if oid is None:
                    raise errors.IntegrityError(f"change index names missing commit #{seq}")
                info = infos.get(oid)
                if info is None:
                    if data is None:
                        missing.append(seq)
                        missing_at.append(len(out))
                        out.append(None)
                        continue
                    if commit_id(data) != oid:
                        raise errors.IntegrityError(f"commit {oid.hex()} does not match its hash")
                    if other is None:
                        changed: str | list[str] = path if file else []
                    elif file:
                        changed = files = [path, other]
                    else:
                        changed = files = [other]
                    info = Commit.from_record(oid, seq, data, changed)
                    built.append(info)
                    built_ids.append(oid)
                out.append(info)
        finally:
            close = getattr(rows, "close", None)
            if close is not None:
                close()
        if wanted:  # a link to a change row that is not there, or to a newer one: the general walk
            return self._linked_path_log(path, start_seq)
        for oid, info in zip(built_ids, built, strict=True):
            infos.put(oid, info)
        if missing:
            found = self._build_at(missing)
            for at, seq in zip(missing_at, missing, strict=True):
                out[at] = found[seq]
        self._logged.put(path, True)
        return out  # type: ignore[return-value]  # every None was filled

    def _linked_path_log(self, path: str, start_seq: int) -> list[Commit]:
        """``_whole_path_log`` for a change index whose links do not all lead to older
        change rows of the path (damage, or an index that names a commit it lacks a row
        for): the links followed whatever they point to, as the per-link walk does."""
        rows = self.backend.change_commits(path, start_seq)
        links = {seq: (prev, prev2) for seq, prev, prev2, _, _ in rows}
        seqs = _reachable(links, start_seq)
        ids = {seq: oid for seq, _, _, oid, _ in rows}
        strays = [seq for seq in seqs if seq not in ids]  # a link to a change row that is not there
        ids.update({seq: oid for seq, oid, _ in self.backend.commits_at(strays)})
        out: list[Commit | None] = []
        missing: list[int] = []
        for seq in seqs:
            oid = ids.get(seq)
            if oid is None:
                raise errors.IntegrityError(f"change index names missing commit #{seq}")
            info = self._infos.get(oid)
            out.append(info)
            if info is None:
                missing.append(seq)
        if missing:
            found = self._build_at(missing)
            out = [found[seq] if info is None else info for seq, info in zip(seqs, out, strict=True)]
        return out  # type: ignore[return-value]  # every None was filled

    def _build_at(self, seqs: list[int]) -> dict[int, Commit]:
        """The commits numbered ``seqs`` built from their records and change keys, read
        by number (each record checked against its hash) and kept."""
        records = {seq: (oid, data) for seq, oid, data in self.backend.commits_at(seqs)}
        paths = self.backend.paths_at(seqs)
        found: dict[int, Commit] = {}
        for seq in seqs:
            if seq not in records:
                raise errors.IntegrityError(f"change index names missing commit #{seq}")
            oid, data = records[seq]
            if commit_id(data) != oid:
                raise errors.IntegrityError(f"commit {oid.hex()} does not match its hash")
            info = found[seq] = Commit.from_record(oid, seq, data, paths.get(seq, ()))
            self._infos.put(oid, info)
        return found

    def path_log_page(self, path: str, frontier: list[int], limit: int) -> tuple[list[Commit], list[int]]:
        """Commits that changed ``path`` from the per-path walk's ``frontier``, and where to continue."""
        seqs, rest = self._path_walk(path, frontier, limit)
        return self.commits_at(seqs), rest

    def commits_at(self, seqs: list[int]) -> list[Commit]:
        """The commits numbered ``seqs``, in that order, read in one batch."""
        ids = self.commit_ids_at(seqs)
        return self.commit_infos([ids[seq] for seq in seqs])

    def commit_ids_at(self, seqs: list[int]) -> dict[int, bytes]:
        """``{number: id}`` of the commits numbered ``seqs``, read in one batch; each
        record is hash-checked, decoded and cached for ``commit_data``."""
        ids: dict[int, bytes] = {}
        for seq, oid, data in self.backend.commits_at(seqs):
            if self._commits.get(oid) is None:
                if commit_id(data) != oid:
                    raise errors.IntegrityError(f"commit {oid.hex()} does not match its hash")
                self._commits.put(oid, (seq, _decode_commit(oid, data)))
            ids[seq] = oid
        missing = next((seq for seq in seqs if seq not in ids), None)
        if missing is not None:
            raise errors.IntegrityError(f"change index names missing commit #{missing}")
        return ids

    def path_versions(self, path: str, start_seq: int | None, limit: int | None = None) -> list[int]:
        """Commit numbers that changed ``path``, newest first, along both parents of merges."""
        if start_seq is None:
            return []
        if limit is None:
            return self._whole_path_walk(path, start_seq)
        return self._path_walk(path, [start_seq], limit)[0]

    def _whole_path_walk(self, path: str, start_seq: int) -> list[int]:
        """Every change reachable from ``start_seq`` by the path's links: the rows read in
        one range read, the links followed here (a recursive query is slower)."""
        links = {seq: (prev, prev2) for seq, prev, prev2 in self.backend.change_rows(path, start_seq)}
        return _reachable(links, start_seq)

    def dir_log(self, folder: str, start: bytes, branch: str, limit: int | None = None) -> list[Commit]:
        """Commits that changed something under directory ``folder``, newest first.

        Walks the directory key's links (docs/design.md, "Directory keys"), so
        it reads the commits it returns, not the store. Until reindex has
        given older commits their directory keys, and for a path that was
        also a file once, every commit is read and filtered instead.
        """
        key = folder.rstrip("/") + "/"
        if self.directory_keys_stale() or self.path_start(folder, start, branch) is not None:
            return [c for c in self.log(start) if any(is_under(p, folder) for p in c.paths)][:limit]
        return self.path_log(key, self.path_start(key, start, branch), limit)

    def directory_keys_stale(self) -> bool:
        """Older commits lack directory keys (a store from before them, not reindexed yet).
        Once they are filled they stay so; until then another process may fill them."""
        if not self._folders_fresh:
            self._folders_fresh = DIRECTORY_KEYS not in self.backend.stale_indexes()
        return not self._folders_fresh

    def _path_walk(self, path: str, frontier: list[int], limit: int) -> tuple[list[int], list[int]]:
        # As in log_page: links point to older commits, so the heap resumes the walk exactly.
        out: list[int] = []
        heap = [-seq for seq in frontier]
        heapq.heapify(heap)
        seen: set[int] = set()
        while heap and len(out) < limit:
            seq = -heapq.heappop(heap)
            if seq in seen:
                continue
            seen.add(seq)
            out.append(seq)
            links = self.backend.change_prev(path, seq)
            for nxt in links or ():
                if nxt is not None and nxt not in seen:
                    heapq.heappush(heap, -nxt)
        return out, sorted({-s for s in heap} - seen, reverse=True)

    def path_start(self, path: str, commit: bytes, branch: str) -> int | None:
        """Where the per-path walk starts: the last change to ``path`` in ``commit``'s history.

        The head index answers only for the head it was read with: the head check and
        the row are read in one snapshot, else a commit another process makes between
        them gives ``commit`` the row of a newer one (issue 20 item 25)."""
        with self.backend.read_snapshot():
            row = self.backend.head_get(branch, path) if commit == self.head(branch) else None
        return row.seq if row is not None else self.last_change(path, commit)

    def last_change(self, path: str, commit: bytes) -> int | None:
        """The commit that last changed ``path`` as seen from ``commit``.

        A commit without a change row for ``path`` has the same file as its
        first parent (change rows are relative to the first parent), so this
        is the first commit on ``commit``'s first-parent line that changed the
        path — git's history simplification. Candidates come from the
        per-path index, newest first; one made elsewhere is skipped. Commit
        numbers are topological, so the first candidate on the line wins.
        """
        seq = self.commit_data(commit)[0]
        ancestry = _Ancestry(self, commit, first_parent=True)
        candidate = self.backend.change_before(path, seq)
        while candidate is not None:
            row = self.backend.commit_at(candidate)
            if row is not None and ancestry.contains(row[0], candidate):
                return candidate
            candidate = self.backend.change_before(path, candidate - 1)
        return None

    def is_ancestor(self, a: bytes, b: bytes) -> bool:
        """True when ``a`` is ``b`` or in its history."""
        return _Ancestry(self, b).contains(a, self.commit_data(a)[0])

    def diff(self, a: bytes | None, b: bytes | None, path: str | None = None) -> list[FileChange]:
        out: list[FileChange] = []
        for p, old, new in trees.diff(self, self.root(a), self.root(b)):
            if path is not None and not is_under(p, path):
                continue
            old_bytes = self.content(old.oid) if old else None
            new_bytes = self.content(new.oid) if new else None
            if old_bytes == new_bytes:
                continue
            out.append(_file_change(p, old_bytes, new_bytes))
        return sorted(out, key=lambda c: c.path)


class _Ancestry:
    """Membership in one commit's history, walked lazily newest first and only
    as deep as the oldest question asked (commit numbers are topological)."""

    def __init__(self, repo: Repository, tip: bytes, *, first_parent: bool = False) -> None:
        self._repo = repo
        self._first_parent = first_parent
        self._seen: set[bytes] = set()
        self._heap: list[tuple[int, bytes]] = [(-repo.commit_data(tip)[0], tip)]

    def contains(self, oid: bytes, seq: int) -> bool:
        while self._heap and -self._heap[0][0] >= seq:
            _, c = heapq.heappop(self._heap)
            if c in self._seen:
                continue
            self._seen.add(c)
            parents = self._repo.commit_data(c)[1].parents
            for p in parents[:1] if self._first_parent else parents:
                if p not in self._seen:
                    heapq.heappush(self._heap, (-self._repo.commit_data(p)[0], p))
        return oid in self._seen


def _reachable(links: dict[int, tuple[int | None, int | None]], start: int) -> list[int]:
    """The changes reachable from change ``start`` by a path's ``(prev, prev2)`` links, newest first."""
    if start not in links:
        return []
    todo, seen = [start], {start}
    while todo:
        for nxt in links.get(todo.pop(), ()):
            if nxt is not None and nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return sorted(seen, reverse=True)


def _head_decides(ops: Sequence[Op], expect_head: bytes | None | AnyHead) -> bool:
    """Whether the commit may fail on what the branch head holds, so it must be computed
    on the locked head rather than a guessed one (a stale guess would fail it wrongly)."""
    return not isinstance(expect_head, AnyHead) or any(isinstance(op, Append) and op.offset is not None for op in ops)


def _settled(result: CommitResult) -> CommitResult:
    if result.settle is not None:
        result.settle()
        result.settle = None
    return result


def _decode_commit(oid: bytes, data: bytes) -> CommitData:
    try:
        return CommitData.decode(data)
    except ValueError as e:
        raise errors.IntegrityError(f"commit {oid.hex()}: {e}") from None


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", errors="replace")


def _file_change(path: str, old: bytes | None, new: bytes | None) -> FileChange:
    status = "added" if old is None else "deleted" if new is None else "modified"
    old_t, new_t = _text(old), _text(new)
    lines = textdiff.unified(
        (old_t or "").splitlines(keepends=True),
        (new_t or "").splitlines(keepends=True),
        fromfile=f"a{path}",
        tofile=f"b{path}",
    )
    text = "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)
    return FileChange(path=path, status=status, old=old_t, new=new_t, diff=text)


def _check_request(ops: Iterable[Op], expect_head: object) -> None:
    """Typed records only, and no bool for ``expect_head`` (``False`` once meant any head)."""
    for op in ops:
        if not isinstance(op, OP_TYPES):
            raise TypeError(f"ops are memrev.repo.ops records (Write, Append, Delete, SetEntry), not {op!r}")
    if not (expect_head is None or isinstance(expect_head, (bytes, AnyHead))):
        raise TypeError(f"expect_head is a commit id (bytes), None or ANY_HEAD, not {expect_head!r}")


def _default_message(ops: Iterable[Op], paths: list[str]) -> str:
    kinds = sorted({op.kind for op in ops})
    what = paths[0] if len(paths) == 1 else f"{len(paths)} paths"
    return f"{'+'.join(kinds)} {what}"
