"""History operations over a :class:`~memrev.repo.Repository`: branches, tags,
merge, revert, restore, blame, bundles, reindex and gc.

Free functions over a repository, in the manner of dulwich's porcelain: each
one reads what it needs and ends in at most one ``Repository.commit`` (or one
backend write transaction), so each is atomic on its own.
"""

from __future__ import annotations

import hashlib
import heapq
import io
import json
import os
import re
import stat
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

import zstandard

from . import errors
from .backends.base import BlobRow, HeadRow
from .core import blame as blame_mod
from .core import delta, trees
from .core.mergekinds import COLLECTION, MergeKinds, check_kind, compile_pattern
from .core.objects import (
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
from .core.paths import is_under, split
from .core.textmerge import merge_file
from .repo import MAX_DEPTH, Commit, Repository, branch_ref

DELETED_PREFIX = "refs/deleted/"
TAG_PREFIX = "refs/tags/"
HEAD_PREFIX = "refs/heads/"


# ================================================================ branches and tags


def branches(repo: Repository) -> dict[str, str]:
    return {name[len(HEAD_PREFIX) :]: oid.hex() for name, oid in repo.backend.list_refs(HEAD_PREFIX).items()}


def tags(repo: Repository) -> dict[str, str]:
    return {name[len(TAG_PREFIX) :]: oid.hex() for name, oid in repo.backend.list_refs(TAG_PREFIX).items()}


_REF_NAME = re.compile(r"[A-Za-z0-9._@+-]+(/[A-Za-z0-9._@+-]+)*")


def _check_ref_name(name: str) -> None:
    """Branch and tag names: path-like, no ``..``, nothing a revision parser reads (``~ ^ :``)."""
    if not _REF_NAME.fullmatch(name) or name == "HEAD" or name.startswith("-") or ".." in name or name.endswith(".lock"):
        raise errors.InvalidPath(f"not a valid branch or tag name: {name!r}")


def create_branch(repo: Repository, name: str, at: bytes, *, source_branch: str | None = None) -> None:
    """Start branch ``name`` at commit ``at``, with its own head index."""
    _check_ref_name(name)
    with repo.backend.write():
        _require_stored_commit(repo, at)
        if not repo.backend.set_ref_if_equals(branch_ref(name), None, at):
            raise errors.MemrevError(f"branch {name!r} already exists")
        _index_branch(repo, name, at, source_branch)


def _index_branch(repo: Repository, name: str, at: bytes, source_branch: str | None) -> None:
    """Fill the head index of ``name`` as of commit ``at`` (inside a write transaction)."""
    repo.backend.head_clear(name)
    if source_branch is not None and repo.backend.get_ref(branch_ref(source_branch)) == at:
        repo.backend.head_put(name, repo.backend.head_all(source_branch))
        return
    seq = repo.commit_data(at)[0]
    rows = [
        HeadRow(path, entry.oid, entry.size, repo.last_change(path, at) or seq)
        for path, entry in trees.walk(repo, repo.root(at))
    ]
    repo.backend.head_put(name, rows)


def delete_branch(repo: Repository, name: str) -> None:
    """Remove a branch. Its commits stay reachable for ``gc``'s safety window."""
    with repo.backend.write():
        target = repo.backend.lock_ref(branch_ref(name))
        if target is None:
            raise errors.RevisionNotFound(f"no branch {name!r}")
        _keep_deleted_tip(repo, name, target)
        repo.backend.delete_ref(branch_ref(name))
        repo.backend.head_clear(name)


def _keep_deleted_tip(repo: Repository, name: str, target: bytes) -> str:
    """Record a deleted branch's tip as ``refs/deleted/<name>@<seconds>.<µs>-<tip>[-<n>]``.

    The name must be new: two deletions of one branch name within a second
    (or a microsecond) each keep their own tip for gc's window, so the time is
    in microseconds, the tip's id is in the name, and an existing ref is never
    overwritten (a counter settles a repeat of the same tip in one microsecond).
    """
    now_us = time.time_ns() // 1000
    stem = f"{DELETED_PREFIX}{name}@{now_us // 1_000_000}.{now_us % 1_000_000:06d}-{target.hex()[:12]}"
    ref, n = stem, 1
    while not repo.backend.set_ref_if_equals(ref, None, target):
        n += 1
        ref = f"{stem}-{n}"
    return ref


def _deleted_at(ref: str) -> float | None:
    """When a ``refs/deleted/`` ref was made (seconds), or ``None`` if its name says nothing.

    Reads both ``<name>@<seconds>`` (older stores) and
    ``<name>@<seconds>.<µs>-<tip>``.
    """
    stamp = ref.rsplit("@", 1)[-1].split("-", 1)[0]
    return float(stamp) if re.fullmatch(r"[0-9]+(\.[0-9]{1,6})?", stamp) else None


def create_tag(repo: Repository, name: str, at: bytes) -> None:
    _check_ref_name(name)
    with repo.backend.write():
        _require_stored_commit(repo, at)
        if not repo.backend.set_ref_if_equals(TAG_PREFIX + name, None, at):
            raise errors.MemrevError(f"tag {name!r} already exists")


def _require_stored_commit(repo: Repository, at: bytes) -> None:
    """Inside the write transaction: ``at`` (resolved before it) must still be stored.

    gc may have collected it between the caller resolving the revision and this
    transaction taking the lock; a ref to it would point nowhere.
    """
    if repo.backend.get_commit(at) is None:
        raise errors.RevisionNotFound(f"commit {at.hex()} does not exist (gc removed it); nothing was written")


# ================================================================ ancestry


def merge_base(repo: Repository, a: bytes, b: bytes) -> bytes | None:
    """The newest common ancestor of two commits (commit numbers are topological)."""
    if a == b:
        return a
    flags: dict[bytes, int] = {a: 1, b: 2}
    heap = [(-repo.commit_data(a)[0], a), (-repo.commit_data(b)[0], b)]
    heapq.heapify(heap)
    popped: set[bytes] = set()
    while heap:
        _, c = heapq.heappop(heap)
        if c in popped:
            continue
        popped.add(c)
        if flags[c] == 3:
            return c
        for p in repo.commit_data(c)[1].parents:
            new = flags.get(p, 0) | flags[c]
            if new != flags.get(p):
                flags[p] = new
                heapq.heappush(heap, (-repo.commit_data(p)[0], p))
    return None


def is_ancestor(repo: Repository, a: bytes, b: bytes) -> bool:
    return repo.is_ancestor(a, b)


# ================================================================ merge, revert, restore


@dataclass(frozen=True, slots=True)
class Conflict:
    path: str
    kind: str  # "content" | "modify/delete" | "add/add" | "binary"
    marked: str | None  # the text with conflict markers, when there is one


@dataclass(frozen=True, slots=True)
class MergeResult:
    commit: str | None  # the merge commit, None when there was nothing to merge
    status: str  # "merged" | "up-to-date"
    paths: tuple[str, ...]


# ================================================================ declared merge kinds

# Where a branch keeps its merge-kind declarations: a file in its own tree, as
# git keeps merge attributes in .gitattributes, so they are versioned, travel
# in bundles, and every handle, process and the CLI reads the same ones.
KINDS_PATH = "/.memrev-merge-kinds.json"


def declared_kinds(repo: Repository, commit: bytes | None) -> list[tuple[str, str]]:
    """The (pattern, kind) declarations at ``commit``, first match first."""
    entry = repo.entry_at(commit, KINDS_PATH)
    return parse_declarations(None if entry is None else repo.content(entry.oid))


def parse_declarations(data: bytes | None) -> list[tuple[str, str]]:
    """The (pattern, kind) pairs of a declarations file (``None``: there is none)."""
    if data is None:
        return []
    try:
        table = json.loads(data)
    except ValueError as e:  # not UTF-8, not JSON
        raise errors.InvalidMergeKind(f"{KINDS_PATH} is not a valid merge-kind table: {e}") from None
    if not isinstance(table, dict):
        raise errors.InvalidMergeKind(f"{KINDS_PATH} is not a valid merge-kind table: not a JSON object")
    try:
        for pattern, kind in table.items():
            compile_pattern(pattern)
            check_kind(kind)
    except errors.InvalidMergeKind as e:
        raise errors.InvalidMergeKind(f"{KINDS_PATH} is not a valid merge-kind table: {e}") from None
    return list(table.items())


def merge_kinds(repo: Repository, commit: bytes | None) -> MergeKinds:
    """The table a merge onto ``commit`` uses: its declarations, the store defaults, memrev's own."""
    return MergeKinds.for_store(declared_kinds(repo, commit))


def with_declaration(declared: list[tuple[str, str]], pattern: str, kind: str) -> str:
    """The declarations file with ``pattern`` declared ``kind``, first (it wins over older ones)."""
    compile_pattern(pattern)
    check_kind(kind)
    table = {pattern: kind, **{p: k for p, k in declared if p != pattern}}
    return json.dumps(table, indent=2) + "\n"


def _entry_bytes(repo: Repository, root: bytes, path: str) -> tuple[bytes | None, Any]:
    entry = trees.lookup(repo, root, split(path))
    return (None, None) if entry is None else (repo.content(entry.oid), entry)


def merge(
    repo: Repository,
    branch: str,
    source: bytes,
    *,
    author: str,
    kinds: MergeKinds,
    strategy: str | None = None,
    resolutions: dict[str, str | None] | None = None,
    message: str | None = None,
    source_name: str | None = None,
) -> MergeResult:
    """Merge commit ``source`` into ``branch`` as one commit with two parents.

    Files both sides changed merge by their declared kind (``kinds``, see
    ``core/mergekinds.py``; the store passes its table). Conflicts raise
    :class:`~memrev.errors.MergeConflict` and write nothing, unless
    ``strategy`` (``"ours"``/``"theirs"``) or ``resolutions`` (path →
    content, ``None`` to delete) settle them.
    """
    if strategy not in (None, "ours", "theirs"):
        raise ValueError("strategy must be 'ours' or 'theirs'")
    ours = repo.head(branch)
    if ours is not None and (ours == source or is_ancestor(repo, source, ours)):
        return MergeResult(None, "up-to-date", ())
    base = merge_base(repo, ours, source) if ours is not None else None
    roots = (repo.root(base), repo.root(ours), repo.root(source))
    ops, conflicts = _merge_trees(repo, roots, kinds, strategy, set(resolutions or ()))
    if conflicts:
        raise errors.MergeConflict(
            f"merge has {len(conflicts)} conflict(s): {', '.join(c.path for c in conflicts)}", conflicts
        )
    for path, content in (resolutions or {}).items():
        ops.append(("write", path, content.encode("utf-8")) if content is not None else ("delete", path))
    name = source_name or source.hex()[:10]
    committed = repo.commit(
        branch,
        ops,
        author=author,
        message=message or f"merge {name} into {branch}",
        meta={"merge": {"source": name}},
        merge_parent=source,
        expect_head=ours,
        blob_sources=(source,),  # every set blob is from theirs' tree
    )
    return MergeResult(committed.id.hex() if committed.id else None, "merged", tuple(committed.paths))


def _merge_trees(
    repo: Repository, roots: tuple[bytes, bytes, bytes], kinds: MergeKinds, strategy: str | None, resolved: set[str]
) -> tuple[list[tuple], list[Conflict]]:
    """The operations that bring theirs' changes onto ours, and the conflicts left."""
    base_root, our_root, their_root = roots
    ours_changed = {p for p, _, _ in trees.diff(repo, base_root, our_root)}
    ops: list[tuple] = []
    conflicts: list[Conflict] = []
    taken: dict[str, set[int]] = {}  # collection folder -> numbers in use on either side or allocated
    for path, _old, new in trees.diff(repo, base_root, their_root):
        if path in resolved:
            continue
        if path not in ours_changed:
            ops.append(("set", path, new.oid, new.size) if new else ("delete", path))
            continue
        kind = kinds.kind_of(path)
        b, o, t = (_entry_bytes(repo, root, path)[0] for root in roots)
        if kind == COLLECTION and new is not None and b is None and o is not None and o != t:
            renamed = _renumber(repo, kinds, path, (our_root, their_root), taken)
            if renamed is not None:  # both sides added this name: theirs gets a free one
                ops.append(("set", renamed, new.oid, new.size))
                continue
        merged = merge_file(b, o, t, kind)
        if merged.conflict is None:
            ops.append(("write", path, merged.content) if merged.content is not None else ("delete", path))
        elif strategy is not None:
            pick = o if strategy == "ours" else t
            ops.append(("write", path, pick) if pick is not None else ("delete", path))
        else:
            conflicts.append(Conflict(path, merged.conflict, merged.marked))
    return ops, conflicts


_NUMBERED = re.compile(r"(?P<n>[0-9]+)(?P<ext>(\.[^/]*)?)")


def _renumber(
    repo: Repository, kinds: MergeKinds, path: str, roots: tuple[bytes, ...], taken: dict[str, set[int]]
) -> str | None:
    """A free name in ``path``'s collection: one past the highest number used on either side.

    ``None`` when the name is not a number, or the new name would leave the
    declared collection (the merge then reports the add/add conflict).
    """
    folder, name = path.rsplit("/", 1)
    numbered = _NUMBERED.fullmatch(name)
    if numbered is None:
        return None
    if folder not in taken:
        used: set[int] = set()
        for root in roots:
            for other in trees.list_names(repo, root, split(folder or "/")):
                m = _NUMBERED.fullmatch(other)
                if m is not None and kinds.kind_of(f"{folder}/{other}") == COLLECTION:
                    used.add(int(m.group("n")))
        taken[folder] = used
    n = max(taken[folder], default=0) + 1
    renamed = f"{folder}/{n:0{len(numbered.group('n'))}d}{numbered.group('ext')}"
    if kinds.kind_of(renamed) != COLLECTION:
        return None
    taken[folder].add(n)
    return renamed


def revert(repo: Repository, branch: str, target: bytes, *, author: str, kinds: MergeKinds) -> str | None:
    """A new commit on ``branch`` undoing what commit ``target`` changed (files merge by ``kinds``)."""
    _, c = repo.commit_data(target)
    before = repo.root(c.parents[0]) if c.parents else EMPTY_TREE_ID
    head = repo.head(branch)
    now = repo.root(head)
    ops: list[tuple] = []
    conflicts: list[Conflict] = []
    for path, _old, _new in trees.diff(repo, before, c.tree):
        b, _ = _entry_bytes(repo, c.tree, path)
        o, _ = _entry_bytes(repo, now, path)
        t, _ = _entry_bytes(repo, before, path)
        merged = merge_file(b, o, t, kinds.kind_of(path))
        if merged.conflict:
            conflicts.append(Conflict(path, merged.conflict, merged.marked))
        elif merged.content != o:
            ops.append(("write", path, merged.content) if merged.content is not None else ("delete", path))
    if conflicts:
        raise errors.MergeConflict(
            f"revert has {len(conflicts)} conflict(s): {', '.join(x.path for x in conflicts)}", conflicts
        )
    if not ops:
        return None
    committed = repo.commit(
        branch,
        ops,
        author=author,
        message=f"revert {target.hex()[:10]}: {c.message}",
        meta={"revert": target.hex()},
        expect_head=head,
    )
    return committed.id.hex() if committed.id else None


def restore(
    repo: Repository, branch: str, path: str, rev: bytes, *, author: str, meta: dict[str, Any] | None = None
) -> str | None:
    """Make ``path`` (a file, or everything under a directory) what it was at ``rev``, as a new commit."""
    then, head = repo.root(rev), repo.head(branch)
    now = repo.root(head)
    ops: list[tuple] = []
    for p, _old, new in trees.diff(repo, now, then):
        if is_under(p, path):
            ops.append(("set", p, new.oid, new.size) if new else ("delete", p))
    if not ops:
        return None
    result = repo.commit(
        branch,
        ops,
        author=author,
        message=f"restore {path} to {rev.hex()[:10]}",
        meta={**(meta or {}), "restore": {"path": path, "rev": rev.hex()}},
        expect_head=head,
        blob_sources=(rev,),
    )
    return result.id.hex() if result.id else None


# ================================================================ blame


@dataclass(frozen=True, slots=True)
class BlameLine:
    number: int  # 1-based
    text: str
    commit: Commit


def blame(repo: Repository, path: str, start_seq: int | None) -> list[BlameLine]:
    """Attribute each line of ``path`` to the commit that last changed it.

    Reads only the versions of ``path`` (the per-path index), never the
    commits that did not touch it.
    """
    if start_seq is None:
        return []
    versions: dict[int, tuple[list[str], list[int]]] = {}
    todo, seen = [start_seq], set()
    while todo:
        seq = todo.pop()
        if seq in seen:
            continue
        seen.add(seq)
        row = repo.backend.commit_at(seq)
        if row is None:
            raise errors.IntegrityError(f"change index names missing commit #{seq}")
        data, _ = _entry_bytes(repo, repo.root(row[0]), path)
        if data is None:  # a deletion: what came before it does not carry over
            versions[seq] = ([], [])
            continue
        links = [s for s in (repo.backend.change_prev(path, seq) or ()) if s is not None]
        versions[seq] = (data.decode("utf-8", errors="replace").splitlines(keepends=True), links)
        todo.extend(links)
    owners = blame_mod.blame(versions, start_seq)
    infos: dict[int, Commit] = {}
    out = []
    for i, (line, seq) in enumerate(zip(versions[start_seq][0], owners, strict=True), 1):
        if seq not in infos:
            infos[seq] = repo.commit_info(repo.backend.commit_at(seq)[0])
        out.append(BlameLine(i, line.rstrip("\n"), infos[seq]))
    return out


# ================================================================ bundles

BUNDLE_MAGIC = b"MEMREV-BUNDLE 1\n"
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

Progress = Callable[[str, int], None]  # (what is being counted, how many so far)


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
    commits, tree_ids, bases = _reachable_objects(repo, list(refs.values()), progress)
    hasher = hashlib.blake2b(b"bundle\0", digest_size=ID_BYTES)
    raw = io.BytesIO()
    header = json.dumps({"refs": {k: v.hex() for k, v in refs.items()}}, sort_keys=True).encode() + b"\n"
    raw.write(header)
    for n, oid in enumerate(_blob_order(bases), 1):
        row = repo.backend.get_blob(oid)
        _record(raw, _REC_BLOB, row.id, row.kind.encode(), row.base or b"", repo._payload(row))
        _tick(progress, "blobs written", n)
    for oid in sorted(tree_ids):
        _record(raw, _REC_TREE, oid, repo.backend.get_tree(oid))
    for _seq, oid in sorted((commits[c], c) for c in commits):
        _record(raw, _REC_COMMIT, oid, repo.backend.get_commit(oid)[1])
    body = raw.getvalue()
    hasher.update(body)
    _record(raw, _REC_END, hasher.digest())
    out.write(BUNDLE_MAGIC)
    out.write(zstandard.ZstdCompressor(level=6, write_checksum=True).compress(raw.getvalue()))
    return len(commits) + len(tree_ids) + len(bases)


def _tick(progress: Progress | None, what: str, n: int) -> None:
    if progress is not None and n % 1000 == 0:
        progress(what, n)


def _reachable(
    repo: Repository, tips: Iterable[bytes], progress: Progress | None = None
) -> tuple[set[bytes], set[bytes], set[bytes]]:
    """Commits, trees and blobs (with everything needed to rebuild them) reachable from ``tips``."""
    commits, tree_ids, bases = _reachable_objects(repo, tips, progress)
    return set(commits), tree_ids, set(bases)


def _reachable_objects(
    repo: Repository, tips: Iterable[bytes], progress: Progress | None = None
) -> tuple[dict[bytes, int], set[bytes], dict[bytes, bytes | None]]:
    """``_reachable`` as maps: commit -> number, blob -> its base. Each object is visited once."""
    commits: dict[bytes, int] = {}
    roots: set[bytes] = set()
    todo = list(tips)
    while todo:
        c = todo.pop()
        if c in commits:
            continue
        seq, data = repo.commit_data(c)
        commits[c] = seq
        roots.add(data.tree)
        todo.extend(data.parents)
        _tick(progress, "commits walked", len(commits))
    tree_ids: set[bytes] = set()
    blob_ids: set[bytes] = set()
    stack = list(roots)
    while stack:
        t = stack.pop()
        if t in tree_ids or t == EMPTY_TREE_ID:
            continue
        tree_ids.add(t)
        kind, body = repo.tree(t)
        if kind == "H":
            stack.extend(body[1].values())
            continue
        for entry in body.values():
            if entry.kind == "d":
                stack.append(entry.oid)
            else:
                blob_ids.add(entry.oid)
    return commits, tree_ids, _with_bases(repo, blob_ids, progress)


def _with_bases(repo: Repository, blob_ids: set[bytes], progress: Progress | None = None) -> dict[bytes, bytes | None]:
    """Blobs plus everything needed to rebuild them, each mapped to its base.

    Following ``base`` is enough: an append piece's base is the piece before
    it in its run, so the whole run is reached one row at a time. (Fetching
    the run's pieces for every version of it made gc and export quadratic in
    the length of an append run.)
    """
    out: dict[bytes, bytes | None] = {}
    todo = list(blob_ids)
    while todo:
        oid = todo.pop()
        if oid in out:
            continue
        row = repo._blob_row(oid)
        out[oid] = row.base
        if row.base is not None:
            todo.append(row.base)
        _tick(progress, "blobs walked", len(out))
    return out


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
            _check_ref_name(ref[len(kind) :])
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
        self.blobs[oid] = _BundleBlob(k, base or None, self.repo._packer.pack(payload), len(payload), size)

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
                blob.size = delta.output_size(self.repo._packer.unpack(blob.packed), base_size)
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
    except errors.IntegrityError:
        repo.forget()  # rolled back: nothing cached from it may survive
        raise


def _write_bundle(repo: Repository, incoming: _Incoming, refs: dict[str, bytes]) -> dict[str, str]:
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
            _index_commit(repo, seq, c)
    return _import_refs(repo, refs)


def _import_refs(repo: Repository, refs: dict[str, bytes]) -> dict[str, str]:
    imported: dict[str, str] = {}
    for ref, target in refs.items():
        if repo.backend.get_commit(target) is None:
            raise errors.InvalidBundle(f"bundle ref {ref} points to commit {target.hex()}, which it does not hold")
        current = repo.backend.get_ref(ref)
        name = ref
        if current is not None and current != target:
            if ref.startswith(HEAD_PREFIX) and is_ancestor(repo, current, target):
                repo.backend.set_ref_if_equals(ref, current, target)
                _index_branch(repo, ref[len(HEAD_PREFIX) :], target, None)
                imported[name] = target.hex()
                continue
            name = ref + "-imported"
            if repo.backend.get_ref(name) is not None:
                raise errors.MemrevError(f"{ref} diverged here and {name} exists too; delete it first")
        if repo.backend.get_ref(name) is None:
            repo.backend.set_ref_if_equals(name, None, target)
            if name.startswith(HEAD_PREFIX):
                _index_branch(repo, name[len(HEAD_PREFIX) :], target, None)
        imported[name] = target.hex()
    return imported


def _insert_blob(repo: Repository, oid: bytes, blob: _BundleBlob) -> None:
    """Store a verified blob, recomputing its representation metadata locally;
    a chain deeper than reading allows (``MAX_DEPTH``) is refused."""
    if blob.kind == FULL:
        row = BlobRow(oid, FULL, None, None, 0, blob.size, 0, blob.packed)
    else:
        b = repo.backend.get_blob(blob.base)
        if blob.kind == DELTA:
            row = BlobRow(oid, DELTA, blob.base, None, 0, blob.size, b.depth + 1, blob.packed)
        else:
            extend = b.kind == APPEND and not repo.backend.lineage_has(b.lineage, b.size)
            lineage, depth = (b.lineage, b.depth) if extend else (oid, b.depth + 1)
            row = BlobRow(oid, APPEND, blob.base, lineage, b.size, blob.size, depth, blob.packed)
    if row.depth > MAX_DEPTH:
        raise errors.InvalidBundle(f"blob {oid.hex()} is rebuilt from more than {MAX_DEPTH} bases")
    repo.backend.put_blob(row)


def _index_commit(repo: Repository, seq: int, c: CommitData) -> None:
    """Per-path change rows for a commit added without ``Repository.commit`` (import, reindex)."""
    first = repo.root(c.parents[0]) if c.parents else EMPTY_TREE_ID
    rows = []
    for path, _old, _new in trees.diff(repo, first, c.tree):
        prev = repo.last_change(path, c.parents[0]) if c.parents else None
        prev2 = repo.last_change(path, c.parents[1]) if len(c.parents) > 1 else None
        rows.append((path, seq, prev, prev2))
    repo.backend.change_put(rows)


# ================================================================ gc


def gc(repo: Repository, *, keep_seconds: float = 14 * 86400, progress: Progress | None = None) -> dict[str, int]:
    """Delete objects no branch, tag or recently deleted branch can reach.

    A deleted branch is kept (as ``refs/deleted/<name>@<time>``) for
    ``keep_seconds`` before its commits become collectable. Runs in one
    write transaction, so it never races a commit.
    """
    removed = {"commits": 0, "trees": 0, "blobs": 0, "refs": 0}
    now = time.time()
    with repo.backend.write(exclusive=True):
        for name in repo.backend.list_refs(DELETED_PREFIX):
            deleted_at = _deleted_at(name)
            if deleted_at is not None and now - deleted_at > keep_seconds:
                repo.backend.delete_ref(name)
                removed["refs"] += 1
        tips = list(repo.backend.list_refs("refs/").values())
        commits, tree_ids, blob_ids = _reachable(repo, tips, progress)
        removed["commits"] = repo.backend.delete_unreachable("commits", commits)
        removed["trees"] = repo.backend.delete_unreachable("trees", tree_ids)
        removed["blobs"] = repo.backend.delete_unreachable("blobs", blob_ids)
    repo.forget()
    return removed
