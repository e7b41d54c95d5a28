"""Bundles: every object reachable from some refs, in one verifiable file.

``export_bundle`` writes them; ``import_bundle`` reads a bundle as untrusted
bytes (sizes bounded before anything is expanded, every object checked for
structure and hash) and adds it in one write transaction, or nothing.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO, TypeVar

import zstandard

from .. import errors
from ..backends.base import BlobRow
from ..core import delta, trees
from ..core.objects import (
    APPEND,
    DELTA,
    EMPTY_TREE_ID,
    FULL,
    ID_BYTES,
    MAX_BLOB_SIZE,
    CommitData,
    blob_id,
    check_commit,
    check_tree,
    commit_id,
    put_varint,
    tree_id,
)
from ..repo.blobs import MAX_DEPTH
from ..repo.indexes import index_branch, index_commit
from ..repo.repository import Repository
from ..repo.revisions import HEAD_PREFIX, MAX_REF_NAME_BYTES, TAG_PREFIX, check_ref_name
from .gc import Progress, reachable_objects, tick

BUNDLE_MAGIC = b"MEMREV-BUNDLE 1\n"
_T = TypeVar("_T")
_REC_BLOB, _REC_TREE, _REC_COMMIT, _REC_END = b"B", b"T", b"C", b"E"

# Limits on reading a bundle (docs/design.md, "Untrusted bytes"). A bundle is
# read a little at a time and refused as soon as it exceeds one of them, so a
# hostile file costs bounded memory and time before anything is written.
MAX_BUNDLE_BYTES = 4 << 30  # the file itself
MAX_BUNDLE_RAW = 4 << 30  # what its zstd frame decompresses to
_MAX_HEADER = 16 << 20  # the JSON line naming the refs
_MAX_TREE_RECORD = 1 << 20  # a legitimate node is at most 32 names of 1 KB
_MAX_COMMIT_RECORD = 16 << 20  # message and meta
_FEED = 2048  # compressed bytes per step: one step expands to at most ~64 MiB
_FIELD_LIMITS = {  # per record kind: the most bytes each field may hold
    _REC_BLOB: (ID_BYTES, 1, ID_BYTES, MAX_BLOB_SIZE + 64),
    _REC_TREE: (ID_BYTES, _MAX_TREE_RECORD),
    _REC_COMMIT: (ID_BYTES, _MAX_COMMIT_RECORD),
    _REC_END: (ID_BYTES,),
}

def _record(out: BinaryIO, kind: bytes, *fields: bytes) -> bytes:
    buf = bytearray(kind)
    for f in fields:
        put_varint(buf, len(f))
        buf += f
    out.write(bytes(buf))
    return bytes(buf)


def export_bundle(repo: Repository, out: BinaryIO, refs: dict[str, bytes], progress: Progress | None = None) -> int:
    """Write every object reachable from ``refs`` and the refs themselves; returns the object count.

    Format: ``MEMREV-BUNDLE 1\\n``, then one zstd frame holding a JSON header
    line (the refs) and records (blobs and trees before the commits that use
    them, commits parents first), closed by a BLAKE2b digest of everything
    before it, so truncation or tampering is detected before anything is
    imported. Linear in the objects written: each is read once.
    """
    commits, tree_ids, bases = reachable_objects(repo, list(refs.values()), progress)
    hasher = hashlib.blake2b(b"bundle\0", digest_size=ID_BYTES)
    raw = io.BytesIO()
    header = json.dumps({"refs": {k: v.hex() for k, v in refs.items()}}, sort_keys=True).encode() + b"\n"
    raw.write(header)
    for n, oid in enumerate(_blob_order(bases), 1):
        row = _stored(repo.backend.get_blob(oid), "blob", oid)
        _record(raw, _REC_BLOB, row.id, row.kind.encode(), row.base or b"", repo.blobs.payload(row))
        tick(progress, "blobs written", n)
    for oid in sorted(tree_ids):
        _record(raw, _REC_TREE, oid, _stored(repo.backend.get_tree(oid), "tree", oid))
    for _seq, oid in sorted((commits[c], c) for c in commits):
        _record(raw, _REC_COMMIT, oid, _stored(repo.backend.get_commit(oid), "commit", oid)[1])
    body = raw.getvalue()
    hasher.update(body)
    _record(raw, _REC_END, hasher.digest())
    out.write(BUNDLE_MAGIC)
    out.write(zstandard.ZstdCompressor(level=6, write_checksum=True).compress(raw.getvalue()))
    return len(commits) + len(tree_ids) + len(bases)


def _blob_order(bases: dict[bytes, bytes | None]) -> list[bytes]:
    """Bases before the blobs built on them (bases outside ``bases`` are taken as present)."""
    order: list[bytes] = []
    placed: set[bytes] = set()
    for start in sorted(bases):
        chain = []
        oid: bytes | None = start
        while oid is not None and oid in bases and oid not in placed:
            chain.append(oid)
            placed.add(oid)  # ids cover their base, so a chain cannot loop; this guards anyway
            oid = bases[oid]
        order.extend(reversed(chain))
    return order


def open_bundle(file: str | os.PathLike[str]) -> BinaryIO:
    """Open a bundle file for :func:`import_bundle`: a regular file of at most ``MAX_BUNDLE_BYTES``
    (``/dev/zero``, a FIFO or a directory is refused with one line, not read)."""
    # Non-blocking open: a FIFO must not wait for a writer before it is refused.
    fd = os.open(file, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_BUNDLE_BYTES:
        os.close(fd)
        what = "is not a regular file" if not stat.S_ISREG(st.st_mode) else f"is larger than {MAX_BUNDLE_BYTES} bytes"
        raise errors.InvalidBundle(f"{os.fspath(file)} {what}; not a memrev bundle")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


class _BundleReader:
    """The decompressed bytes of a bundle, fed in small steps with a cap on the
    total, hashed as they are handed out (for the end record's digest)."""

    def __init__(self, fh: BinaryIO) -> None:
        self._fh = fh
        self._z = zstandard.ZstdDecompressor().decompressobj()
        self._buf = bytearray()
        self._pos = 0
        self._total = 0
        self.hasher = hashlib.blake2b(b"bundle\0", digest_size=ID_BYTES)

    def _feed(self) -> bytes | None:
        """Decompress one more step; ``None`` once the input or the frame has ended."""
        if self._z.eof:
            return None
        chunk = self._fh.read(_FEED)
        if not chunk:
            return None
        try:
            out = self._z.decompress(chunk)
        except zstandard.ZstdError as e:
            raise errors.InvalidBundle(f"bundle is truncated or corrupt: {e}") from None
        self._total += len(out)
        if self._total > MAX_BUNDLE_RAW:
            raise errors.InvalidBundle(f"bundle expands to more than {MAX_BUNDLE_RAW} bytes")
        return out

    def _fill(self, n: int) -> None:
        while len(self._buf) - self._pos < n:
            if self._pos > 1 << 20:
                del self._buf[: self._pos]
                self._pos = 0
            out = self._feed()
            if out is None:
                raise errors.InvalidBundle("bundle is truncated")
            self._buf += out

    def take(self, n: int, hashed: bool = True) -> bytes:
        self._fill(n)
        out = bytes(self._buf[self._pos : self._pos + n])
        self._pos += n
        if hashed:
            self.hasher.update(out)
        return out

    def varint(self) -> int:
        shift = result = 0
        while True:
            b = self.take(1)[0]
            result |= (b & 0x7F) << shift
            if b < 0x80:
                return result
            shift += 7
            if shift > 63:
                raise errors.InvalidBundle("bundle is corrupt: oversized length")

    def line(self, limit: int) -> bytes:
        out = bytearray()
        while not out.endswith(b"\n"):
            if len(out) >= limit:
                raise errors.InvalidBundle("bundle has no readable header")
            out += self.take(1)
        return bytes(out[:-1])

    def finish(self) -> None:
        """Nothing may follow the end record: not in the frame, not after it."""
        while (out := self._feed()) is not None:
            if out:
                raise errors.InvalidBundle("bundle has trailing data after its end")
        if len(self._buf) > self._pos:
            raise errors.InvalidBundle("bundle has trailing data after its end")
        if not self._z.eof:
            raise errors.InvalidBundle("bundle is truncated")
        if self._z.unused_data or self._fh.read(1):
            raise errors.InvalidBundle("bundle has trailing data after its end")


def _read_records(fh: BinaryIO) -> tuple[dict[str, bytes], Iterator[tuple[bytes, list[bytes]]]]:
    """The refs of a bundle and its records, one at a time (so a caller can keep
    them compactly), every field within its limit; the digest is checked when
    the last record has been read, before the iterator ends."""
    if fh.read(len(BUNDLE_MAGIC)) != BUNDLE_MAGIC:
        raise errors.InvalidBundle("not a memrev bundle (bad magic)")
    reader = _BundleReader(fh)
    refs = _read_refs(reader.line(_MAX_HEADER))
    return refs, _records(reader)


def _records(reader: _BundleReader) -> Iterator[tuple[bytes, list[bytes]]]:
    while True:
        kind = reader.take(1, hashed=False)
        if kind not in _FIELD_LIMITS:
            raise errors.InvalidBundle(f"bundle is corrupt: unknown record type {kind!r}")
        digest = reader.hasher.digest() if kind == _REC_END else None
        reader.hasher.update(kind)
        fields = []
        for limit in _FIELD_LIMITS[kind]:
            n = reader.varint()
            if n > limit:
                raise errors.InvalidBundle(f"bundle record {kind.decode()} holds a field over its limit of {limit} bytes")
            fields.append(reader.take(n))
        if kind == _REC_END:
            if fields[0] != digest:
                raise errors.InvalidBundle("bundle checksum does not match: it was altered or truncated")
            reader.finish()
            return
        yield kind, fields


def _read_refs(line: bytes) -> dict[str, bytes]:
    try:
        header = json.loads(line)
        refs = {str(k): bytes.fromhex(v) for k, v in header["refs"].items()}
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise errors.InvalidBundle(f"bundle header is unreadable: {e}") from None
    for ref, target in refs.items():
        kind = next((p for p in (HEAD_PREFIX, TAG_PREFIX) if ref.startswith(p)), None)
        try:
            if kind is None or len(target) != ID_BYTES:
                raise errors.InvalidPath(ref)
            check_ref_name(ref[len(kind) :])
        except errors.InvalidPath:
            raise errors.InvalidBundle(f"bundle names an invalid ref {ref!r}") from None
    return refs


@dataclass(slots=True)
class _BundleBlob:
    kind: str
    base: bytes | None
    packed: bytes  # the payload, packed as the store keeps it (memory follows the compressed size)
    raw_size: int  # the payload's own length
    size: int = -1  # the version's size, once its base's size is known


class _Incoming:
    """A bundle's objects, each hash-verified, then checked for structure
    against themselves and the store (docs/design.md, "Untrusted bytes")."""

    def __init__(self, repo: Repository, records: Iterable[tuple[bytes, list[bytes]]]) -> None:
        self.repo = repo
        self.blobs: dict[bytes, _BundleBlob] = {}
        self.trees: dict[bytes, tuple[bytes, tuple[str, Any]]] = {}
        self.commits: list[tuple[bytes, CommitData, bytes]] = []
        self.used: set[bytes] = set()  # bundle blobs a tree names
        for kind, f in records:
            if kind == _REC_BLOB:
                self._add_blob(*f)
            elif kind == _REC_TREE:
                self._add_tree(*f)
            else:
                self._add_commit(*f)

    def _add_blob(self, oid: bytes, kind: bytes, base: bytes, payload: bytes) -> None:
        k = kind.decode("latin-1")
        if k not in (FULL, DELTA, APPEND) or (k == FULL) != (base == b"") or len(base) not in (0, ID_BYTES):
            raise errors.InvalidBundle(f"blob {oid.hex()} has an invalid kind or base")
        if blob_id(k, payload, base or None) != oid:
            raise errors.InvalidBundle(f"blob {oid.hex()} does not match its hash")
        if k != DELTA and len(payload) > MAX_BLOB_SIZE:
            raise errors.InvalidBundle(f"blob {oid.hex()} is larger than the limit of {MAX_BLOB_SIZE} bytes")
        size = len(payload) if k == FULL else -1
        self.blobs[oid] = _BundleBlob(k, base or None, self.repo.blobs.packer.pack(payload), len(payload), size)

    def _add_tree(self, oid: bytes, data: bytes) -> None:
        if tree_id(data) != oid:
            raise errors.InvalidBundle(f"tree {oid.hex()} does not match its hash")
        try:
            self.trees[oid] = (data, check_tree(data, trees.check_name))
        except ValueError as e:
            raise errors.InvalidBundle(f"tree {oid.hex()}: {e}") from None

    def _add_commit(self, oid: bytes, data: bytes) -> None:
        if commit_id(data) != oid:
            raise errors.InvalidBundle(f"commit {oid.hex()} does not match its hash")
        try:
            self.commits.append((oid, check_commit(data), data))
        except (ValueError, errors.InvalidContent) as e:
            raise errors.InvalidBundle(f"commit {oid.hex()}: {e}") from None

    # ------------------------------------------------------------ checks against the store

    def tree(self, oid: bytes) -> tuple[str, Any]:
        """``TreeSource`` over the bundle's trees and the store's."""
        if oid in self.trees:
            return self.trees[oid][1]
        if oid != EMPTY_TREE_ID and self.repo.backend.get_tree(oid) is None:
            raise errors.InvalidBundle(f"the bundle names tree {oid.hex()}, which is missing")
        return self.repo.tree(oid)

    def blob_size(self, oid: bytes) -> int | None:
        if oid in self.blobs:
            self.used.add(oid)
            return self.blobs[oid].size
        row = self.repo.backend.get_blob(oid)
        return None if row is None else row.size

    def check(self) -> list[bytes]:
        """Everything but depth (known only while inserting); returns the blobs in insertion order."""
        order = _blob_order({oid: b.base for oid, b in self.blobs.items()})
        for oid in order:
            self._size_blob(oid, self.blobs[oid])
        checker = trees.TreeChecker(self, self.blob_size)
        for oid, c, _data in self.commits:
            try:
                checker.check_root(c.tree)
            except ValueError as e:
                raise errors.InvalidBundle(f"commit {oid.hex()}: {e}") from None
        self._check_all_used(checker)
        return order

    def _size_blob(self, oid: bytes, blob: _BundleBlob) -> None:
        if blob.kind == FULL:
            return
        assert blob.base is not None  # a delta or append names its base (_add_blob checked)
        if blob.base in self.blobs:
            base_size = self.blobs[blob.base].size
        else:
            row = self.repo.backend.get_blob(blob.base)
            if row is None:
                raise errors.InvalidBundle(f"blob {oid.hex()} needs base {blob.base.hex()}, which is missing")
            base_size = row.size
        if blob.kind == APPEND:
            blob.size = base_size + blob.raw_size
        else:
            try:
                blob.size = delta.output_size(self.repo.blobs.packer.unpack(blob.packed), base_size)
            except ValueError as e:
                raise errors.InvalidBundle(f"blob {oid.hex()}: {e}") from None
        if blob.size > MAX_BLOB_SIZE:
            raise errors.InvalidBundle(f"blob {oid.hex()} is larger than the limit of {MAX_BLOB_SIZE} bytes")

    def _check_all_used(self, checker: trees.TreeChecker) -> None:
        """A bundle holds what its commits reach and nothing else: an object no
        commit uses would be written unchecked."""
        reached = checker.nodes()
        stray_tree = next((t for t in self.trees if t not in reached), None)
        if stray_tree is not None:
            raise errors.InvalidBundle(f"tree {stray_tree.hex()} is used by no commit of the bundle")
        needed = set(self.used)
        todo = list(self.used)
        while todo:
            base = self.blobs[todo.pop()].base
            if base in self.blobs and base not in needed:
                needed.add(base)
                todo.append(base)
        stray_blob = next((b for b in self.blobs if b not in needed), None)
        if stray_blob is not None:
            raise errors.InvalidBundle(f"blob {stray_blob.hex()} is used by no commit of the bundle")


def import_bundle(repo: Repository, source: bytes | BinaryIO) -> dict[str, str]:
    """Verify every object of a bundle, then add them and its refs in one transaction.

    Every object is checked for structure as well as its hash (names, sizes,
    split-node buckets, delta chains, commit metadata; docs/design.md) and
    anything wrong raises ``InvalidBundle`` with nothing written. A branch
    that exists here is moved only if the bundle's head descends from it (a
    fast-forward); otherwise the bundle's head is imported as
    ``<branch>-imported``. Returns ``{ref: commit id}`` as imported.
    """
    fh = io.BytesIO(source) if isinstance(source, (bytes, bytearray)) else source
    refs, records = _read_records(fh)
    incoming = _Incoming(repo, records)  # read and hash-checked before the write lock is taken
    try:
        with repo.backend.write():
            return _write_bundle(repo, incoming, refs)
    except BaseException:  # a refused ref too (InvalidPath, MemrevError), after the objects went in
        repo.forget()  # rolled back: nothing cached from it may survive
        raise


def _write_bundle(repo: Repository, incoming: _Incoming, refs: dict[str, bytes]) -> dict[str, str]:
    _refuse_purged(repo, incoming, refs)
    for oid in incoming.check():
        if repo.backend.get_blob(oid) is None:
            _insert_blob(repo, oid, incoming.blobs[oid])
    for oid, (data, _decoded) in incoming.trees.items():
        repo.backend.put_tree(oid, data)
    for oid, c, data in incoming.commits:
        for p in c.parents:
            if repo.backend.get_commit(p) is None:
                raise errors.InvalidBundle(f"commit {oid.hex()} needs parent {p.hex()}, which is missing")
        if repo.backend.get_commit(oid) is None:
            seq = repo.backend.put_commit(oid, c.parents[0] if c.parents else None, data)
            index_commit(repo, seq, c)
    return _import_refs(repo, refs)


def _refuse_purged(repo: Repository, incoming: _Incoming, refs: dict[str, bytes]) -> None:
    """``PurgedContent`` when the bundle holds a commit a purge of this store rewrote or
    dropped (a bundle exported before the purge): importing it would bring the purged
    content back. The check is by commit id against the purge records' id maps, inside
    the import's write transaction, so a purge committed meanwhile is seen. A commit the
    purge left as it was holds nothing purged, and passes."""
    repo.fresh()
    known = repo.purge_map()
    if not known:
        return
    ids = {oid.hex() for oid, _c, _data in incoming.commits} | {t.hex() for t in refs.values()}
    hits = sorted(i for i in ids if i in known)
    if hits:
        raise errors.PurgedContent(
            f"this bundle holds {len(hits)} commit(s) a purge of this store rewrote or removed (e.g. {hits[0][:12]});"
            " importing it would bring purged content back, so nothing was imported (export it again after the purge)",
            tuple(hits),
        )


def _import_refs(repo: Repository, refs: dict[str, bytes]) -> dict[str, str]:
    imported: dict[str, str] = {}
    for ref, target in refs.items():
        if repo.backend.get_commit(target) is None:
            raise errors.InvalidBundle(f"bundle ref {ref} points to commit {target.hex()}, which it does not hold")
        current = repo.backend.get_ref(ref)
        name = ref
        if current is not None and current != target:
            if ref.startswith(HEAD_PREFIX) and repo.is_ancestor(current, target):
                repo.backend.set_ref_if_equals(ref, current, target)
                index_branch(repo, ref[len(HEAD_PREFIX) :], target, None)
                imported[name] = target.hex()
                continue
            name = ref + "-imported"
            kind = HEAD_PREFIX if ref.startswith(HEAD_PREFIX) else TAG_PREFIX
            if len(name) - len(kind) > MAX_REF_NAME_BYTES:  # a name no handle could open or delete
                raise errors.InvalidPath(
                    f"{ref} diverged here, and {name} would be longer than {MAX_REF_NAME_BYTES} bytes;"
                    " rename or delete the branch here first (nothing was imported)"
                )
            if repo.backend.get_ref(name) is not None:
                raise errors.MemrevError(f"{ref} diverged here and {name} exists too; delete it first")
        if repo.backend.get_ref(name) is None:
            repo.backend.set_ref_if_equals(name, None, target)
            if name.startswith(HEAD_PREFIX):
                index_branch(repo, name[len(HEAD_PREFIX) :], target, None)
        imported[name] = target.hex()
    return imported


def _stored(found: _T | None, kind: str, oid: bytes) -> _T:
    """An object the walk found reachable must be stored; if it is not, the store is damaged."""
    if found is None:
        raise errors.IntegrityError(f"{kind} {oid.hex()} is reachable but missing: run `memrev fsck`")
    return found


def _insert_blob(repo: Repository, oid: bytes, blob: _BundleBlob) -> None:
    """Store a verified blob, recomputing its representation metadata locally;
    a chain deeper than reading allows (``MAX_DEPTH``) is refused."""
    if blob.kind == FULL:
        row = BlobRow(oid, FULL, None, None, 0, blob.size, 0, blob.packed)
    else:
        assert blob.base is not None  # a delta or append names its base (_add_blob checked)
        b = _stored(repo.backend.get_blob(blob.base), "blob", blob.base)  # present: _size_blob checked
        if blob.kind == DELTA:
            row = BlobRow(oid, DELTA, blob.base, None, 0, blob.size, b.depth + 1, blob.packed)
        else:
            extend = b.kind == APPEND and b.lineage is not None and not repo.backend.lineage_has(b.lineage, b.size)
            lineage, depth = (b.lineage, b.depth) if extend else (oid, b.depth + 1)
            row = BlobRow(oid, APPEND, blob.base, lineage, b.size, blob.size, depth, blob.packed)
    if row.depth > MAX_DEPTH:
        raise errors.InvalidBundle(f"blob {oid.hex()} is rebuilt from more than {MAX_DEPTH} bases")
    repo.backend.put_blob(row)
