"""The repository: blobs, trees, commits and refs over one backend.

Synchronous and framework-free; ``VersionedStore`` is the async face over it.
Every mutation is one call to :meth:`Repository.commit`, which runs in one
backend write transaction: read the branch head, store new blobs and tree
nodes, record the commit, update the derived indexes, and move the branch
with a compare-and-swap. Either all of it is committed or none of it.
"""

from __future__ import annotations

import heapq
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import zstandard

from . import errors
from .backends.base import Backend, BlobRow, HeadRow
from .cache import LRU
from .core import delta, textdiff, trees
from .core.objects import (
    APPEND,
    DELTA,
    EMPTY_TREE,
    EMPTY_TREE_ID,
    FULL,
    MAX_BLOB_SIZE,
    CommitData,
    Entry,
    blob_id,
    check_commit,
    check_tree,
    commit_id,
    decode_tree,
    tree_id,
)
from .core.paths import is_under, split

# A blob is rebuilt from at most this many stored representations; past it
# the next version is stored whole. Bounds the cost of reading any revision.
MAX_DEPTH = 32
# Below this size a delta is not worth its bookkeeping.
MIN_DELTA_SIZE = 128
_MAX_PAYLOAD = 1 << 32  # no representation is larger; a frame saying so is damaged
# A revision is a name followed by steps; names (refs, ids) never hold ~ or ^.
_REV_OP = re.compile(r"[~^]")
_REV_STEPS = re.compile(r"(?:[~^][0-9]*)+")
# A run of bare steps, then optionally one numbered step (``~3``, ``^2``); or a trailing bare run.
_REV_TOKEN = re.compile(r"([~^]*)([~^])([0-9]+)|([~^]+)")
# More first-parent steps than any history holds; also bounds int() of the digits.
MAX_REV_STEPS = 1 << 40
_HEX = re.compile(r"^[0-9a-f]{7,40}$")


def branch_ref(branch: str) -> str:
    return f"refs/heads/{branch}"


def parse_revision(rev: str) -> tuple[str, list[tuple[str, int]]]:
    """``(name, steps)`` of a revision, in one pass over it.

    Each step is ``("~", n)`` (n first-parent steps; consecutive ones are
    summed, ``^`` and ``^1`` count as one) or ``("^", n)`` (the n-th parent, n >= 2).
    """
    first = _REV_OP.search(rev)
    start = len(rev) if first is None else first.start()
    name, suffix = rev[:start], rev[start:]
    if not name:
        raise errors.RevisionNotFound(f"{_shorten(rev)}: not a revision (a branch, tag or commit id comes before ~ or ^)")
    if suffix and not _REV_STEPS.fullmatch(suffix):
        raise errors.RevisionNotFound(f"{_shorten(rev)}: not a revision (after ~ or ^ only digits may follow)")
    steps: list[tuple[str, int]] = []
    walk = 0
    for m in _REV_TOKEN.finditer(suffix):  # one match per numbered step, plus a trailing run
        bare, op, digits = m.group(1) or m.group(4) or "", m.group(2), m.group(3)
        walk = min(walk + len(bare), MAX_REV_STEPS + 1)  # each bare ~ or ^ is one first-parent step
        if op is None:
            continue
        n = MAX_REV_STEPS + 1 if len(digits) > 13 else int(digits)
        if op == "~" or n == 1:
            walk = min(walk + n, MAX_REV_STEPS + 1)
        elif n >= 2:
            if walk:
                steps.append(("~", walk))
                walk = 0
            steps.append(("^", n))
        # "^0" is the commit itself: no step
    if walk:
        steps.append(("~", walk))
    return name, steps


def _shorten(rev: str) -> str:
    """A revision as an error message shows it: long ones cut in the middle."""
    return rev if len(rev) <= 60 else f"{rev[:40]}...{rev[-12:]}"


@dataclass(frozen=True, slots=True)
class Commit:
    """One commit as the history API returns it."""

    id: str
    parents: tuple[str, ...]
    time: datetime
    author: str
    message: str
    meta: dict[str, Any]
    paths: tuple[str, ...]

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
    ops: Sequence[tuple]
    author: str
    message: str | None = None
    meta: dict[str, Any] | None = None
    merge_parent: bytes | None = None
    expect_head: bytes | None | bool = False
    blob_sources: Sequence[bytes] | None = None


@dataclass(slots=True)
class CommitResult:
    id: bytes | None  # None: nothing changed, no commit
    parent: bytes | None = None
    paths: list[str] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)


class _Packer:
    """zstd per representation; tiny payloads stay raw (a frame costs more than it saves)."""

    def __init__(self) -> None:
        self._c = zstandard.ZstdCompressor(level=3)
        self._d = zstandard.ZstdDecompressor()

    def pack(self, raw: bytes) -> bytes:
        if len(raw) >= 96:
            z = self._c.compress(raw)
            if len(z) < len(raw):
                return b"z" + z
        return b"r" + raw

    def unpack(self, data: bytes, limit: int = _MAX_PAYLOAD) -> bytes:
        """The raw payload, at most ``limit`` bytes (what its blob row declares);
        damage is an ``IntegrityError``, never a zstd error or a huge allocation."""
        if data[:1] == b"r":
            return data[1:]
        if data[:1] == b"z":
            try:
                size = zstandard.frame_content_size(data[1:])
                if size < 0 or size > limit:
                    raise errors.IntegrityError("payload frame declares an impossible size")
                return self._d.decompress(data[1:], max_output_size=size)
            except zstandard.ZstdError as e:
                raise errors.IntegrityError(f"payload does not decompress: {e}") from None
        raise errors.IntegrityError("unknown payload encoding")


class Repository:
    def __init__(self, backend: Backend, *, cache_bytes: int = 16 << 20) -> None:
        self.backend = backend
        self._packer = _Packer()
        self._content = LRU(cache_bytes, weigh=len)
        self._trees = LRU(50_000)
        self._commits = LRU(50_000)
        self._rows = LRU(100_000)
        self._listings = LRU(4 << 20, weigh=len)  # sorted names of a directory node, by node id

    def forget(self) -> None:
        """Drop every cache (after gc removed objects they may hold)."""
        for cache in (self._content, self._trees, self._commits, self._rows, self._listings):
            cache.clear()

    # ================================================================ objects

    def tree(self, oid: bytes) -> tuple[str, Any]:
        node = self._trees.get(oid)
        if node is None:
            if oid == EMPTY_TREE_ID:
                data = EMPTY_TREE
            else:
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

    def put_tree(self, data: bytes) -> bytes:
        oid = tree_id(data)
        if oid != EMPTY_TREE_ID:
            self.backend.put_tree(oid, data)
            self._trees.put(oid, decode_tree(data))
        return oid

    def commit_data(self, oid: bytes) -> tuple[int, CommitData]:
        hit = self._commits.get(oid)
        if hit is None:
            row = self.backend.get_commit(oid)
            if row is None:
                raise errors.RevisionNotFound(f"commit {oid.hex()} does not exist")
            seq, data = row
            if commit_id(data) != oid:
                raise errors.IntegrityError(f"commit {oid.hex()} does not match its hash")
            hit = (seq, _decode_commit(oid, data))
            self._commits.put(oid, hit)
        return hit

    def _blob_row(self, oid: bytes) -> BlobRow:
        row = self._rows.get(oid)
        if row is None:
            row = self.backend.get_blob(oid)
            if row is None:
                raise errors.IntegrityError(f"blob {oid.hex()} is missing")
            self._remember(row)
        return row

    def _remember(self, row: BlobRow) -> None:
        # Representation metadata without the payload: what appends and deltas
        # need to know about their base (kind, run, size, depth).
        self._rows.put(row.id, BlobRow(row.id, row.kind, row.base, row.lineage, row.start, row.size, row.depth, b""))

    def _put_blob(self, row: BlobRow) -> None:
        self.backend.put_blob(row)
        self._remember(row)

    def _payload(self, row: BlobRow) -> bytes:
        if row.kind not in (FULL, DELTA, APPEND) or (row.kind == FULL) != (row.base is None):
            raise errors.IntegrityError(f"blob {row.id.hex()} has an invalid kind or base")
        try:
            raw = self._packer.unpack(row.data, _payload_limit(row))
        except errors.IntegrityError as e:
            raise errors.IntegrityError(f"blob {row.id.hex()}: {e}") from None
        if blob_id(row.kind, raw, row.base) != row.id:
            raise errors.IntegrityError(f"blob {row.id.hex()} does not match its hash")
        return raw

    def content(self, oid: bytes) -> bytes:
        """The bytes of a blob, rebuilt from at most ``MAX_DEPTH`` representations.

        Iterative: the chain of bases is collected first (down to a full or
        cached version), then applied upwards, so a damaged or hostile chain
        is an ``IntegrityError``, never a ``RecursionError``.
        """
        data = self._content.get(oid)
        if data is not None:
            return data
        chain: list[BlobRow] = []
        below = oid
        while data is None:
            if len(chain) > MAX_DEPTH:
                raise errors.IntegrityError(f"blob {oid.hex()} is rebuilt from more than {MAX_DEPTH} bases")
            row = self.backend.get_blob(below)
            if row is None:
                raise errors.IntegrityError(f"blob {below.hex()} is missing")
            if row.size > MAX_BLOB_SIZE:  # refused before anything is expanded
                raise errors.IntegrityError(f"blob {below.hex()} declares {row.size} bytes, over the limit of {MAX_BLOB_SIZE}")
            chain.append(row)
            if row.kind == FULL:
                break
            below = row.base if row.kind == DELTA else self._blob_row(row.lineage).base
            data = self._content.get(below)
        for row in reversed(chain):
            data = self._rebuild(row, data)
        return data

    def _rebuild(self, row: BlobRow, below: bytes | None) -> bytes:
        """One version from the content of what it is built on (``None`` for a full blob)."""
        if row.kind == FULL:
            data = self._payload(row)
        elif row.kind == DELTA:
            try:
                data = delta.apply(below, self._payload(row), row.size)
            except ValueError as e:
                raise errors.IntegrityError(f"blob {row.id.hex()}: {e}") from None
        else:
            first = self._blob_row(row.lineage)
            pieces = self.backend.lineage_pieces(row.lineage, first.start, row.size)
            data = below + b"".join(self._chain(first.base, pieces, row.id))
        if len(data) != row.size:
            raise errors.IntegrityError(f"blob {row.id.hex()} has the wrong size")
        self._content.put(row.id, data)
        return data

    def content_range(self, oid: bytes, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of a blob; for an append run, reads only the pieces needed.

        Walks down the runs below (iteratively, at most ``MAX_DEPTH`` of them),
        collecting the part of the range each run holds, top run first.
        """
        row = self._blob_row(oid)
        end = min(end, row.size)
        parts: list[bytes] = []
        for _ in range(MAX_DEPTH + 1):
            if start >= end:
                return b"".join(reversed(parts))
            if row.kind != APPEND or self._content.get(row.id) is not None:
                parts.append(self.content(row.id)[start:end])
                return b"".join(reversed(parts))
            first = self._blob_row(row.lineage)
            lo = max(start, first.start)
            if lo < end:
                parts.append(self._run_range(row, lo, end))
                end = lo
            row = self._blob_row(first.base)
        raise errors.IntegrityError(f"blob {oid.hex()} is rebuilt from more than {MAX_DEPTH} bases")

    def _run_range(self, row: BlobRow, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` held by the pieces of ``row``'s append run."""
        pieces = self.backend.lineage_pieces(row.lineage, start, end)
        if not pieces or pieces[-1].size < end:
            raise errors.IntegrityError(f"blob {row.id.hex()}: its append run ends early")
        parts = []
        for piece, raw in zip(pieces, self._chain(pieces[0].base, pieces, None), strict=True):
            lo, hi = max(start, piece.start), min(end, piece.start + len(raw))
            parts.append(raw[lo - piece.start : hi - piece.start])
        return b"".join(parts)

    def _chain(self, base: bytes | None, pieces: list[BlobRow], last: bytes | None) -> list[bytes]:
        """Payloads of consecutive append pieces, checked as a hash chain.

        Each piece's id covers its base (the piece before it), so a piece out
        of place — a damaged ``start`` column, a foreign row — breaks the
        chain and is reported instead of being read as content.
        """
        out = []
        expect, at = base, pieces[0].start if pieces else 0
        for piece in pieces:
            raw = self._payload(piece)
            if piece.base != expect or piece.start != at or piece.size != at + len(raw):
                raise errors.IntegrityError(f"blob {piece.id.hex()} is out of place in its append run")
            out.append(raw)
            expect, at = piece.id, piece.size
        if last is not None and expect != last:
            raise errors.IntegrityError(f"blob {last.hex()}: its append run does not lead to it")
        return out

    def _store_full(self, data: bytes) -> HeadRow:
        _check_blob_size(len(data))
        oid = blob_id(FULL, data)
        self._put_blob(BlobRow(oid, FULL, None, None, 0, len(data), 0, self._packer.pack(data)))
        self._content.put(oid, data)
        return HeadRow("", oid, len(data), 0)

    def _store_append(self, base_oid: bytes, suffix: bytes) -> HeadRow:
        base = self._blob_row(base_oid)
        _check_blob_size(base.size + len(suffix))
        oid = blob_id(APPEND, suffix, base_oid)
        same = self._rows.get(oid) or self.backend.get_blob(oid)
        if same is not None:
            # Another branch appended the same bytes to the same base: that piece is this
            # one (ids name base and bytes), with its run and position. Recording it again
            # under a new run would leave the run this branch extends next without it.
            return HeadRow("", oid, same.size, 0)
        if base.kind == APPEND and not self.backend.lineage_has(base.lineage, base.size):
            lineage, depth = base.lineage, base.depth  # base is the tip of its run: extend it
        else:
            lineage, depth = None, base.depth + 1  # start a new run on top of base
        if depth > MAX_DEPTH:
            return self._store_full(self.content(base_oid) + suffix)
        lineage = lineage or oid
        self._put_blob(
            BlobRow(oid, APPEND, base_oid, lineage, base.size, base.size + len(suffix), depth, self._packer.pack(suffix))
        )
        return HeadRow("", oid, base.size + len(suffix), 0)

    def _store_version(self, old: HeadRow | None, data: bytes) -> HeadRow | None:
        """Store ``data`` as the next version after ``old``; ``None`` if unchanged."""
        _check_blob_size(len(data))
        if old is None or old.blob is None:
            return self._store_full(data)
        previous = self.content(old.blob)
        if data == previous:
            return None
        if previous and data.startswith(previous):
            row = self._store_append(old.blob, data[len(previous) :])
            self._content.put(row.blob, data)  # the caller holds it anyway; the next rewrite starts here
            return row
        base = self._blob_row(old.blob)
        if base.depth < MAX_DEPTH and len(data) >= MIN_DELTA_SIZE:
            ops = delta.encode(delta.compute(previous, data))
            if len(ops) < len(data) // 2:
                oid = blob_id(DELTA, ops, old.blob)
                self._put_blob(
                    BlobRow(oid, DELTA, old.blob, None, 0, len(data), base.depth + 1, self._packer.pack(ops))
                )
                self._content.put(oid, data)
                return HeadRow("", oid, len(data), 0)
        return self._store_full(data)

    # ================================================================ commits

    def commit(
        self,
        branch: str,
        ops: Sequence[tuple],
        *,
        author: str,
        message: str | None = None,
        meta: dict[str, Any] | None = None,
        merge_parent: bytes | None = None,
        expect_head: bytes | None | bool = False,
        blob_sources: Sequence[bytes] | None = None,
        wait: bool = True,
    ) -> CommitResult:
        """Apply ``ops`` as one commit on ``branch``.

        Operations: ``("write", path, bytes)``, ``("append", path, bytes)``
        (``("append", path, bytes, offset)``: only if the file is ``offset``
        bytes long, else ``ConcurrentUpdate``), ``("delete", path)``, and
        ``("set", path, blob_id, size)`` (point a path at an existing blob:
        restore, merge). ``merge_parent`` makes a merge commit; its per-path
        history joins the other side's. ``expect_head`` (when not ``False``)
        refuses to commit if the branch moved since the caller computed
        ``ops`` (``ConcurrentUpdate``). ``blob_sources``: the commits whose
        trees every ``set`` blob was taken from; they are checked (still
        stored, not collected by gc meanwhile) instead of each blob.
        ``wait=False`` (local backends only) makes one attempt that raises
        ``TransientConflict`` at once, without waiting or retrying, when
        another writer holds the lock.
        """
        if not wait:
            return self._commit_once(
                branch, ops, author, message, meta, merge_parent, expect_head, blob_sources, wait=False
            )
        for attempt in range(8):
            try:
                return self._commit_once(
                    branch, ops, author, message, meta, merge_parent, expect_head, blob_sources
                )
            except errors.TransientConflict:
                if attempt == 7:
                    raise
                time.sleep(0.005 * 2**attempt)
        raise AssertionError("unreachable")

    def _commit_once(
        self,
        branch: str,
        ops: Sequence[tuple],
        author: str,
        message: str | None,
        meta: dict[str, Any] | None,
        merge_parent: bytes | None,
        expect_head: bytes | None | bool,
        blob_sources: Sequence[bytes] | None = None,
        wait: bool = True,
    ) -> CommitResult:
        with self.backend.write() if wait else self.backend.write(wait=False):
            return self._commit_locked(branch, ops, author, message, meta, merge_parent, expect_head, blob_sources)

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
        if len(requests) == 1 or not hasattr(self.backend, "savepoint"):
            return [self._commit_alone(r) for r in requests]
        for attempt in range(8):
            try:
                with self.backend.write():
                    return [self._commit_saved(r) for r in requests]
            except errors.TransientConflict:
                if attempt == 7:
                    raise
                time.sleep(0.005 * 2**attempt)
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

    def _commit_saved(self, r: CommitRequest) -> CommitResult | Exception:
        """One request of a group, inside its own savepoint; its exception is its outcome."""
        try:
            with self.backend.savepoint():
                return self._commit_locked(
                    r.branch, r.ops, r.author, r.message, r.meta, r.merge_parent, r.expect_head, r.blob_sources
                )
        except _REQUEST_ERRORS as e:
            return e

    def _commit_locked(
        self,
        branch: str,
        ops: Sequence[tuple],
        author: str,
        message: str | None,
        meta: dict[str, Any] | None,
        merge_parent: bytes | None,
        expect_head: bytes | None | bool,
        blob_sources: Sequence[bytes] | None,
    ) -> CommitResult:
        """One commit inside a write transaction the caller holds; on failure the
        caller rolls back (the transaction or a savepoint), so the blob rows
        remembered meanwhile are forgotten: an append piece rolled back must
        not be taken for stored by the next append of the same bytes."""
        try:
            return self._apply(branch, ops, author, message, meta, merge_parent, expect_head, blob_sources)
        except BaseException:
            self._rows.clear()
            raise

    def _apply(
        self,
        branch: str,
        ops: Sequence[tuple],
        author: str,
        message: str | None,
        meta: dict[str, Any] | None,
        merge_parent: bytes | None,
        expect_head: bytes | None | bool,
        blob_sources: Sequence[bytes] | None,
    ) -> CommitResult:
        ref = branch_ref(branch)
        head = self.backend.lock_ref(ref)
        if expect_head is not False and head != expect_head:
            raise errors.ConcurrentUpdate(f"branch {branch} moved; compute the change again")
        parent_tree = self.commit_data(head)[1].tree if head else EMPTY_TREE_ID
        staged: dict[str, HeadRow | None] = {}
        offsets: list[int] = []

        def live(path: str) -> HeadRow | None:
            # What the file is, from the hash-verified tree; the head index
            # is consulted only for history links (``seq``), never for content.
            entry = trees.lookup(self, parent_tree, split(path))
            return None if entry is None else HeadRow(path, entry.oid, entry.size, 0)

        def current(path: str) -> HeadRow | None:
            return staged[path] if path in staged else live(path)

        for op in ops:
            kind, path = op[0], op[1]
            if kind == "write":
                new = self._store_version(current(path), op[2])
                if new is not None:
                    staged[path] = new
            elif kind == "append":
                cur = current(path)
                offsets.append(cur.size if cur else 0)
                if len(op) > 3 and op[3] != offsets[-1]:  # staged in a transaction at that offset
                    raise errors.ConcurrentUpdate(
                        f"{path} changed since the transaction appended to it at byte {op[3]}; nothing was written"
                    )
                if cur is None:  # creates the file, even an empty one, as ag2's stores do
                    staged[path] = self._store_full(op[2])
                elif op[2]:
                    staged[path] = self._store_append(cur.blob, op[2])
            elif kind == "set":
                staged[path] = HeadRow("", op[2], op[3], 0)
            elif kind == "delete":
                for p in [p for p in staged if is_under(p, path)]:
                    staged[p] = None
                under = trees.find_dir(self, parent_tree, split(path))
                doomed = [p for p, _ in trees.walk(self, under, "" if path == "/" else path)] if under else []
                if path != "/":
                    doomed.append(path)
                for p in doomed:
                    if p not in staged:
                        staged[p] = None
            else:
                raise ValueError(f"unknown operation {kind!r}")

        changed: dict[str, HeadRow | None] = {}
        previous: dict[str, HeadRow | None] = {}
        for path, new in staged.items():
            was = live(path)
            if (new is None and was is None) or (new is not None and was is not None and new.blob == was.blob):
                continue
            changed[path] = new
            previous[path] = self.backend.head_get(branch, path)  # tombstones too: the history link
        if not changed and merge_parent is None:
            return CommitResult(None, head, [], offsets)
        self._check_still_stored(changed, merge_parent, {op[1] for op in ops if op[0] == "set"}, blob_sources)

        tree_changes = {
            tuple(split(p)): (None if new is None else Entry("f", new.blob, new.size)) for p, new in changed.items()
        }
        new_tree = trees.update(self, parent_tree, tree_changes)
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
        seq = self.backend.put_commit(oid, head, data)
        self._commits.put(oid, (seq, record))
        self.backend.head_put(
            branch,
            [HeadRow(p, n.blob if n else None, n.size if n else 0, seq) for p, n in changed.items()],
        )
        self.backend.change_put(
            [
                (
                    p,
                    seq,
                    previous[p].seq if previous[p] else None,
                    self.last_change(p, merge_parent) if merge_parent else None,
                )
                for p in changed
            ]
        )
        if not self.backend.set_ref_if_equals(ref, head, oid):
            raise errors.ConcurrentUpdate(f"branch {branch} moved during a locked commit")
        return CommitResult(oid, head, paths, offsets)

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

    def dir_exists_at(self, commit: bytes | None, path: str) -> bool:
        return path == "/" and commit is not None or (
            path != "/" and trees.find_dir(self, self.root(commit), split(path)) is not None
        )

    # ================================================================ revisions

    def resolve(self, rev: str, branch: str) -> bytes:
        """The commit a revision names: NAME followed by any of ``~``, ``~n`` (n
        first-parent steps), ``^`` (first parent), ``^n`` (n-th parent; ``^0``
        the commit itself), as in git. Linear in the length of ``rev``: runs of
        first-parent steps are summed and walked with one recursive query."""
        if not isinstance(rev, str) or not rev:
            raise errors.RevisionNotFound(f"not a revision: {rev!r}")
        name, steps = parse_revision(rev)
        oid = self._resolve_name(name, branch)
        for kind, n in steps:
            oid = self._step(rev, oid, kind, n)
        return oid

    def _step(self, rev: str, oid: bytes, kind: str, n: int) -> bytes:
        if kind == "~":
            if n > MAX_REV_STEPS:
                raise errors.RevisionNotFound(f"{_shorten(rev)}: more first-parent steps than any history holds")
            target = self.backend.first_parent(oid, n)
            if target is None:
                raise errors.RevisionNotFound(f"{_shorten(rev)}: history is shorter than {n} first-parent steps")
            return target
        parents = self.commit_data(oid)[1].parents
        if n > len(parents):
            raise errors.RevisionNotFound(f"{_shorten(rev)}: commit {oid.hex()[:10]} has no parent {n}")
        return parents[n - 1]

    def _resolve_name(self, name: str, branch: str) -> bytes:
        if len(name) == 40 and _HEX.match(name.lower()):  # a full id: no ref lookups needed
            oid = bytes.fromhex(name)
            if self._commits.get(oid) is not None or self.backend.get_commit(oid) is not None:
                return oid
        candidates = [branch_ref(branch)] if name == "HEAD" else [branch_ref(name), f"refs/tags/{name}", name]
        for ref in candidates:
            target = self.backend.get_ref(ref)
            if target is not None:
                return target
        if name == "HEAD":
            raise errors.RevisionNotFound(f"HEAD: branch {branch!r} has no commits yet")
        low = name.lower()
        if _HEX.match(low):
            if len(low) == 40:
                oid = bytes.fromhex(low)
                if self.backend.get_commit(oid) is not None:
                    return oid
            else:
                prefix = bytes.fromhex(low[: len(low) // 2 * 2])
                found = [c for c in self.backend.commits_with_prefix(prefix, 50) if c.hex().startswith(low)]
                if len(found) == 1:
                    return found[0]
                if len(found) > 1:
                    raise errors.AmbiguousRevision(f"{_shorten(name)}: matches {len(found)} commits")
        raise errors.RevisionNotFound(f"{_shorten(name)}: no such commit, branch or tag")

    # ================================================================ history

    def commit_info(self, oid: bytes) -> Commit:
        return self.commit_infos([oid])[0]

    def commit_infos(self, oids: list[bytes]) -> list[Commit]:
        """Commits with the paths each changed, from the change index in one query."""
        seqs = [self.commit_data(o)[0] for o in oids]
        paths = self.backend.paths_at(seqs)
        return [self._info(o, paths.get(seq, ())) for o, seq in zip(oids, seqs, strict=True)]

    def _info(self, oid: bytes, paths: Iterable[str]) -> Commit:
        _, c = self.commit_data(oid)
        return Commit(
            id=oid.hex(),
            parents=tuple(p.hex() for p in c.parents),
            time=c.time,
            author=c.author,
            message=c.message,
            meta=dict(c.meta),
            paths=tuple(sorted(paths)),
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
        return self._commits_at(self.path_versions(path, start_seq, limit))

    def path_log_page(self, path: str, frontier: list[int], limit: int) -> tuple[list[Commit], list[int]]:
        """Commits that changed ``path`` from the per-path walk's ``frontier``, and where to continue."""
        seqs, rest = self._path_walk(path, frontier, limit)
        return self._commits_at(seqs), rest

    def _commits_at(self, seqs: list[int]) -> list[Commit]:
        rows = {seq: (oid, data) for seq, oid, data in self.backend.commits_at(seqs)}
        oids = []
        for seq in seqs:
            if seq not in rows:
                raise errors.IntegrityError(f"change index names missing commit #{seq}")
            oid, data = rows[seq]
            if self._commits.get(oid) is None:
                if commit_id(data) != oid:
                    raise errors.IntegrityError(f"commit {oid.hex()} does not match its hash")
                self._commits.put(oid, (seq, _decode_commit(oid, data)))
            oids.append(oid)
        return self.commit_infos(oids)

    def path_versions(self, path: str, start_seq: int | None, limit: int | None = None) -> list[int]:
        """Commit numbers that changed ``path``, newest first, along both parents of merges."""
        if start_seq is None:
            return []
        if limit is None:
            return self.backend.change_chain(path, start_seq)
        return self._path_walk(path, [start_seq], limit)[0]

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
        """Where the per-path walk starts: the last change to ``path`` in ``commit``'s history."""
        if commit == self.head(branch):
            row = self.backend.head_get(branch, path)
            if row is not None:
                return row.seq
        return self.last_change(path, commit)

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

    def reindex(self) -> None:
        """Rebuild the derived indexes (per-path change index, head index of every
        branch) from the hash-verified objects, in one write transaction."""
        from .history import _index_branch, _index_commit  # history builds on this module

        with self.backend.write(exclusive=True):
            self.backend.clear_indexes()
            for seq, oid, data in list(self.backend.iter_commits()):
                _index_commit(self, seq, self.commit_data(oid)[1])
            for name, target in self.backend.list_refs("refs/heads/").items():
                _index_branch(self, name[len("refs/heads/") :], target, None)
        self.forget()

    def fsck(self) -> list[str]:
        """Verify everything; a store file too damaged to read is reported, not raised."""
        try:
            return self._fsck()
        except errors.IntegrityError as e:
            return [str(e)]

    def _fsck(self) -> list[str]:
        """Verify every object against its id, every reference, and the derived indexes.

        Returns the problems found (empty: the store is sound). Rebuilds every
        blob, so it reads the whole store; nothing is cached from it.
        """
        fresh = Repository(self.backend, cache_bytes=16 << 20)
        problems: list[str] = []

        def note(problem: str | None) -> None:
            if problem:
                problems.append(problem)

        # Each stored representation is checked on its own (hash, base, sizes):
        # O(stored bytes), where rebuilding every version of a long append run
        # would be quadratic. Branch heads are rebuilt in full below.
        for oid in self.backend.iter_blob_ids():
            note(_fsck_problem(fresh._check_blob, oid))
        for oid, data in self.backend.iter_trees():
            if tree_id(data) != oid:
                problems.append(f"tree {oid.hex()} does not match its hash")
                continue
            try:
                check_tree(data, trees.check_name)
            except ValueError as e:
                problems.append(f"tree {oid.hex()}: {e}")
                continue
            for entry in fresh._tree_entries(oid):
                if entry.kind == "f" and self.backend.get_blob(entry.oid) is None:
                    problems.append(f"tree {oid.hex()} names missing blob {entry.oid.hex()}")
                elif entry.kind == "d" and self.backend.get_tree(entry.oid) is None:
                    problems.append(f"tree {oid.hex()} names missing tree {entry.oid.hex()}")
        indexed_paths = self.backend.paths_at
        shapes = trees.TreeChecker(fresh, _SizeLookup(self.backend))
        malformed: set[bytes] = set()
        for seq, oid, data in self.backend.iter_commits():
            if commit_id(data) != oid:
                problems.append(f"commit {oid.hex()} does not match its hash")
                continue
            try:
                c = check_commit(data)
            except (ValueError, errors.InvalidContent) as e:
                problems.append(f"commit {oid.hex()}: {e}")
                continue
            for p in c.parents:
                if self.backend.get_commit(p) is None:
                    problems.append(f"commit {oid.hex()} names missing parent {p.hex()}")
            note(_fsck_problem(fresh.tree, c.tree))
            shape = _fsck_problem(shapes.check_root, c.tree)
            if shape:  # a malformed tree is not walked further (it may nest without end)
                problems.append(f"commit {oid.hex()}: {shape}")
                malformed.add(oid)
                continue
            note(_fsck_problem(fresh._check_changes, seq, oid, c, indexed_paths))
        note(_fsck_problem(fresh._check_links))
        for name, target in self.backend.list_refs("refs/").items():
            if self.backend.get_commit(target) is None:
                problems.append(f"ref {name} points to missing commit {target.hex()}")
                continue
            if name.startswith("refs/heads/") and target not in malformed:
                note(_fsck_problem(fresh._check_head_index, name[len("refs/heads/") :], target))
        return problems

    def _check_blob(self, oid: bytes) -> None:
        row = self.backend.get_blob(oid)
        if row is None:
            raise errors.IntegrityError(f"blob {oid.hex()} is missing")
        raw = self._payload(row)
        if row.kind == FULL:
            if len(raw) != row.size or row.depth != 0:
                raise errors.IntegrityError(f"blob {oid.hex()} has the wrong size or depth")
            return
        base = self.backend.get_blob(row.base) if row.base else None
        if base is None:
            raise errors.IntegrityError(f"blob {oid.hex()} needs base {row.base.hex() if row.base else '-'}, which is missing")
        if row.kind == DELTA:
            try:
                size = delta.output_size(raw, base.size)
            except (ValueError, IndexError):
                raise errors.IntegrityError(f"blob {oid.hex()} holds a corrupt delta") from None
            depth = base.depth + 1
        else:
            size = row.start + len(raw)
            depth = self._check_append_row(row, base)
        if size != row.size or size > MAX_BLOB_SIZE:
            raise errors.IntegrityError(f"blob {oid.hex()} has the wrong size or one over {MAX_BLOB_SIZE} bytes")
        if row.depth != depth or depth > MAX_DEPTH:
            raise errors.IntegrityError(
                f"blob {oid.hex()} records depth {row.depth}; its bases give {depth} (at most {MAX_DEPTH} allowed)"
            )

    def _check_append_row(self, row: BlobRow, base: BlobRow) -> int:
        """An append piece starts where its base ends and either starts a run
        (its own lineage) or continues its base's run; returns its depth."""
        if row.start != base.size:
            raise errors.IntegrityError(f"blob {row.id.hex()} does not continue its append run")
        if row.lineage == row.id:
            return base.depth + 1
        if base.kind != APPEND or base.lineage != row.lineage:
            raise errors.IntegrityError(f"blob {row.id.hex()} names an append run its base is not part of")
        return base.depth

    def _check_changes(self, seq: int, oid: bytes, c: CommitData, indexed_paths) -> None:
        """The change index names exactly the paths the commit changed against its first parent."""
        parent = self.root(c.parents[0]) if c.parents else EMPTY_TREE_ID
        actual = sorted(p for p, _, _ in trees.diff(self, parent, c.tree))
        if sorted(indexed_paths([seq]).get(seq, [])) != actual:
            raise errors.IntegrityError(f"change index of commit {oid.hex()} disagrees with its tree")

    def _check_links(self) -> None:
        """Each change row points at the path's previous change on each parent's line."""
        bad = []
        for path, seq, prev, prev2 in self.backend.iter_changes():
            row = self.backend.commit_at(seq)
            if row is None:
                bad.append(f"{path}@#{seq} (no such commit)")
                continue
            parents = self.commit_data(row[0])[1].parents
            want = self.last_change(path, parents[0]) if parents else None
            want2 = self.last_change(path, parents[1]) if len(parents) > 1 and prev2 is not None else prev2
            if (prev, prev2) != (want, want2):
                bad.append(f"{path}@{row[0].hex()[:10]}")
        if bad:
            raise errors.IntegrityError(f"per-path history links are wrong at {len(bad)} changes, e.g. {bad[:3]}")

    def _tree_entries(self, oid: bytes) -> list[Entry]:
        kind, body = self.tree(oid)
        return list(body.values()) if kind == "T" else [Entry("d", child) for child in body[1].values()]

    def _check_head_index(self, branch: str, commit: bytes) -> None:
        in_tree = {path: (e.oid, e.size) for path, e in trees.walk(self, self.root(commit))}
        for path, (oid, _size) in in_tree.items():  # the current files, rebuilt in full
            self.content(oid)
        indexed = {r.path: (r.blob, r.size) for r in self.backend.head_rows(branch)}
        if in_tree != indexed:
            missing = sorted(set(in_tree) ^ set(indexed) | {p for p in in_tree if indexed.get(p) != in_tree[p]})
            raise errors.IntegrityError(
                f"head index of branch {branch} disagrees with its tree at {len(missing)} paths, e.g. {missing[:3]}"
            )

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


def _check_blob_size(size: int) -> None:
    if size > MAX_BLOB_SIZE:
        raise errors.InvalidContent(f"content of {size} bytes is over the limit of {MAX_BLOB_SIZE} bytes per file")


class _SizeLookup:
    """``blob_size`` for ``TreeChecker`` over a backend, each blob fetched once."""

    def __init__(self, backend: Backend) -> None:
        self._backend = backend
        self._sizes: dict[bytes, int | None] = {}

    def __call__(self, oid: bytes) -> int | None:
        if oid not in self._sizes:
            row = self._backend.get_blob(oid)
            self._sizes[oid] = None if row is None else row.size
        return self._sizes[oid]


def _payload_limit(row: BlobRow) -> int:
    """The most bytes a representation's payload can hold, from what its row declares:
    a full blob its size, an append piece the bytes it adds, a delta (stored only
    when smaller than half its version) its version's size plus a little."""
    if row.kind == FULL:
        return row.size
    if row.kind == APPEND:
        return max(0, row.size - row.start)
    return row.size + 64


def _decode_commit(oid: bytes, data: bytes) -> CommitData:
    try:
        return CommitData.decode(data)
    except ValueError as e:
        raise errors.IntegrityError(f"commit {oid.hex()}: {e}") from None


def _fsck_problem(check, *args) -> str | None:
    try:
        check(*args)
    except (errors.MemrevError, ValueError, KeyError, IndexError, zstandard.ZstdError) as e:
        return str(e.args[0]) if isinstance(e, KeyError) and e.args else str(e) or type(e).__name__
    return None


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


def _default_message(ops: Iterable[tuple], paths: list[str]) -> str:
    kinds = sorted({op[0] for op in ops})
    what = paths[0] if len(paths) == 1 else f"{len(paths)} paths"
    return f"{'+'.join(kinds)} {what}"
