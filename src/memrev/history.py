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
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, BinaryIO

import zstandard

from . import errors
from .backends.base import BlobRow, HeadRow
from .core import blame as blame_mod
from .core import trees
from .core.objects import (
    APPEND,
    EMPTY_TREE_ID,
    ID_BYTES,
    CommitData,
    blob_id,
    commit_id,
    get_varint,
    put_varint,
    tree_id,
)
from .core.paths import is_under, split
from .core.textmerge import merge_file
from .repo import Commit, Repository, branch_ref

# Numbered-item collections (AutoGen memory items): files that are only ever
# added, named by a zero-padded number. Two branches adding item N is not a
# conflict: a merge keeps both, renumbering the merged side's item. Adapters
# register the layouts they write; a pattern has groups ``dir``, ``n``, ``ext``.
_COLLECTIONS: list[re.Pattern[str]] = []


def register_collection(pattern: str) -> None:
    compiled = re.compile(pattern)
    if not {"dir", "n", "ext"} <= set(compiled.groupindex):
        raise ValueError("a collection pattern needs the groups dir, n and ext")
    if all(p.pattern != pattern for p in _COLLECTIONS):
        _COLLECTIONS.append(compiled)


def _collection_match(path: str) -> re.Match[str] | None:
    for pattern in _COLLECTIONS:
        m = pattern.fullmatch(path)
        if m:
            return m
    return None


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
        repo.backend.set_ref_if_equals(f"{DELETED_PREFIX}{name}@{int(time.time())}", None, target)
        repo.backend.delete_ref(branch_ref(name))
        repo.backend.head_clear(name)


def create_tag(repo: Repository, name: str, at: bytes) -> None:
    _check_ref_name(name)
    with repo.backend.write():
        if not repo.backend.set_ref_if_equals(TAG_PREFIX + name, None, at):
            raise errors.MemrevError(f"tag {name!r} already exists")


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


def _entry_bytes(repo: Repository, root: bytes, path: str) -> tuple[bytes | None, Any]:
    entry = trees.lookup(repo, root, split(path))
    return (None, None) if entry is None else (repo.content(entry.oid), entry)


def merge(
    repo: Repository,
    branch: str,
    source: bytes,
    *,
    author: str,
    strategy: str | None = None,
    resolutions: dict[str, str | None] | None = None,
    message: str | None = None,
    source_name: str | None = None,
) -> MergeResult:
    """Merge commit ``source`` into ``branch`` as one commit with two parents.

    Conflicts raise :class:`~memrev.errors.MergeConflict` and write nothing,
    unless ``strategy`` (``"ours"``/``"theirs"``) or ``resolutions`` (path →
    content, ``None`` to delete) settle them.
    """
    if strategy not in (None, "ours", "theirs"):
        raise ValueError("strategy must be 'ours' or 'theirs'")
    ours = repo.head(branch)
    if ours is not None and (ours == source or is_ancestor(repo, source, ours)):
        return MergeResult(None, "up-to-date", ())
    base = merge_base(repo, ours, source) if ours is not None else None
    base_root, our_root, their_root = repo.root(base), repo.root(ours), repo.root(source)
    ours_changed = {p for p, _, _ in trees.diff(repo, base_root, our_root)}
    ops: list[tuple] = []
    conflicts: list[Conflict] = []
    resolutions = resolutions or {}
    taken: dict[str, set[int]] = {}  # collection dir -> numbers in use on either side or allocated
    for path, _old, new in trees.diff(repo, base_root, their_root):
        item = _collection_match(path) if new is not None and path in ours_changed else None
        if item is not None and trees.lookup(repo, base_root, split(path)) is None:
            o, _ = _entry_bytes(repo, our_root, path)
            if o is not None and o != repo.content(new.oid):
                ops.append(("set", _renumber(repo, item, (our_root, their_root), taken), new.oid, new.size))
                continue
        if path in resolutions:
            continue
        if path not in ours_changed:
            ops.append(("set", path, new.oid, new.size) if new else ("delete", path))
            continue
        b, _ = _entry_bytes(repo, base_root, path)
        o, _ = _entry_bytes(repo, our_root, path)
        t, _ = _entry_bytes(repo, their_root, path)
        result = merge_file(b, o, t, path)
        if result.conflict is None:
            ops.append(("write", path, result.content) if result.content is not None else ("delete", path))
        elif strategy is not None:
            pick = o if strategy == "ours" else t
            ops.append(("write", path, pick) if pick is not None else ("delete", path))
        else:
            conflicts.append(Conflict(path, result.conflict, result.marked))
    if conflicts:
        raise errors.MergeConflict(
            f"merge has {len(conflicts)} conflict(s): {', '.join(c.path for c in conflicts)}", conflicts
        )
    for path, content in resolutions.items():
        ops.append(("write", path, content.encode("utf-8")) if content is not None else ("delete", path))
    name = source_name or source.hex()[:10]
    result = repo.commit(
        branch,
        ops,
        author=author,
        message=message or f"merge {name} into {branch}",
        meta={"merge": {"source": name}},
        merge_parent=source,
        expect_head=ours,
    )
    return MergeResult(result.id.hex() if result.id else None, "merged", tuple(result.paths))


def _renumber(repo: Repository, item: re.Match[str], roots: tuple[bytes, ...], taken: dict[str, set[int]]) -> str:
    """A free path in the item's collection: one past the highest number used on either side."""
    folder = item.group("dir")
    if folder not in taken:
        used: set[int] = set()
        for root in roots:
            for name in trees.list_names(repo, root, split(folder)):
                m = _collection_match(f"{folder}/{name}")
                if m is not None:
                    used.add(int(m.group("n")))
        taken[folder] = used
    n = max(taken[folder], default=0) + 1
    taken[folder].add(n)
    return f"{folder}/{n:0{len(item.group('n'))}d}{item.group('ext')}"


def revert(repo: Repository, branch: str, target: bytes, *, author: str) -> str | None:
    """A new commit on ``branch`` undoing what commit ``target`` changed."""
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
        result = merge_file(b, o, t, path)
        if result.conflict:
            conflicts.append(Conflict(path, result.conflict, result.marked))
        elif result.content != o:
            ops.append(("write", path, result.content) if result.content is not None else ("delete", path))
    if conflicts:
        raise errors.MergeConflict(
            f"revert has {len(conflicts)} conflict(s): {', '.join(x.path for x in conflicts)}", conflicts
        )
    if not ops:
        return None
    result = repo.commit(
        branch,
        ops,
        author=author,
        message=f"revert {target.hex()[:10]}: {c.message}",
        meta={"revert": target.hex()},
        expect_head=head,
    )
    return result.id.hex() if result.id else None


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


def _record(out: BinaryIO, kind: bytes, *fields: bytes) -> bytes:
    buf = bytearray(kind)
    for f in fields:
        put_varint(buf, len(f))
        buf += f
    out.write(bytes(buf))
    return bytes(buf)


def export_bundle(repo: Repository, out: BinaryIO, refs: dict[str, bytes]) -> int:
    """Write every object reachable from ``refs`` and the refs themselves; returns the object count.

    Format: ``MEMREV-BUNDLE 1\\n``, then one zstd frame holding a JSON header
    line (the refs) and records (blobs and trees before the commits that use
    them, commits parents first), closed by a BLAKE2b digest of everything
    before it, so truncation or tampering is detected before anything is
    imported.
    """
    commits, tree_ids, blob_ids = _reachable(repo, list(refs.values()))
    hasher = hashlib.blake2b(b"bundle\0", digest_size=ID_BYTES)
    raw = io.BytesIO()
    header = json.dumps({"refs": {k: v.hex() for k, v in refs.items()}}, sort_keys=True).encode() + b"\n"
    raw.write(header)
    for oid in _blob_order(repo, blob_ids):
        row = repo.backend.get_blob(oid)
        raw_payload = repo._packer.unpack(row.data)
        _record(raw, _REC_BLOB, row.id, row.kind.encode(), row.base or b"", raw_payload)
    for oid in sorted(tree_ids):
        _record(raw, _REC_TREE, oid, repo.backend.get_tree(oid))
    for seq, oid in sorted((repo.commit_data(c)[0], c) for c in commits):
        _record(raw, _REC_COMMIT, oid, repo.backend.get_commit(oid)[1])
    body = raw.getvalue()
    hasher.update(body)
    _record(raw, _REC_END, hasher.digest())
    out.write(BUNDLE_MAGIC)
    out.write(zstandard.ZstdCompressor(level=6, write_checksum=True).compress(raw.getvalue()))
    return len(commits) + len(tree_ids) + len(blob_ids)


def _reachable(repo: Repository, tips: Iterable[bytes]) -> tuple[set[bytes], set[bytes], set[bytes]]:
    commits: set[bytes] = set()
    todo = [t for t in tips]
    while todo:
        c = todo.pop()
        if c in commits:
            continue
        commits.add(c)
        todo.extend(repo.commit_data(c)[1].parents)
    tree_ids: set[bytes] = set()
    blob_ids: set[bytes] = set()
    stack = [repo.root(c) for c in commits]
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
    return commits, tree_ids, _with_bases(repo, blob_ids)


def _with_bases(repo: Repository, blob_ids: set[bytes]) -> set[bytes]:
    """Blobs plus everything needed to rebuild them: delta bases and earlier pieces of append runs."""
    out: set[bytes] = set()
    todo = list(blob_ids)
    while todo:
        oid = todo.pop()
        if oid in out:
            continue
        out.add(oid)
        row = repo.backend.get_blob(oid)
        if row is None:
            raise errors.IntegrityError(f"blob {oid.hex()} is missing")
        if row.base is not None:
            todo.append(row.base)
        if row.kind == APPEND:
            todo.extend(p.id for p in repo.backend.lineage_pieces(row.lineage, 0, row.size))
    return out


def _blob_order(repo: Repository, blob_ids: set[bytes]) -> list[bytes]:
    """Bases before the blobs built on them."""
    order: list[bytes] = []
    placed: set[bytes] = set()
    for start in sorted(blob_ids):
        stack = [(start, False)]
        while stack:
            oid, ready = stack.pop()
            if oid in placed:
                continue
            base = repo.backend.get_blob(oid).base
            if ready or base is None or base in placed or base not in blob_ids:
                placed.add(oid)
                order.append(oid)
            else:
                stack.append((oid, True))
                stack.append((base, False))
    return order


def _read_records(data: bytes) -> tuple[dict[str, Any], list[tuple[bytes, list[bytes]]]]:
    if not data.startswith(BUNDLE_MAGIC):
        raise errors.InvalidBundle("not a memrev bundle (bad magic)")
    try:
        stream = zstandard.ZstdDecompressor().decompressobj()
        raw = stream.decompress(data[len(BUNDLE_MAGIC) :])
    except zstandard.ZstdError as e:
        raise errors.InvalidBundle(f"bundle is truncated or corrupt: {e}") from None
    if not stream.eof:
        raise errors.InvalidBundle("bundle is truncated")
    if stream.unused_data:
        raise errors.InvalidBundle("bundle has trailing data after its end")
    nl = raw.find(b"\n")
    if nl < 0:
        raise errors.InvalidBundle("bundle has no header")
    try:
        header = json.loads(raw[:nl])
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
    records: list[tuple[bytes, list[bytes]]] = []
    counts = {_REC_BLOB: 4, _REC_TREE: 2, _REC_COMMIT: 2, _REC_END: 1}
    pos = nl + 1
    mv = memoryview(raw)
    end_at = None
    try:
        while pos < len(raw):
            kind = raw[pos : pos + 1]
            if kind not in counts:
                raise errors.InvalidBundle(f"bundle is corrupt: unknown record type {kind!r}")
            start = pos
            pos += 1
            fields = []
            for _ in range(counts[kind]):
                n, pos = get_varint(mv, pos)
                if pos + n > len(raw):
                    raise errors.InvalidBundle("bundle is truncated")
                fields.append(bytes(mv[pos : pos + n]))
                pos += n
            if kind == _REC_END:
                end_at = start
                expected = hashlib.blake2b(b"bundle\0", digest_size=ID_BYTES)
                expected.update(raw[:start])
                if fields[0] != expected.digest() or pos != len(raw):
                    raise errors.InvalidBundle("bundle checksum does not match: it was altered or truncated")
                break
            records.append((kind, fields))
    except IndexError:
        raise errors.InvalidBundle("bundle is truncated") from None
    if end_at is None:
        raise errors.InvalidBundle("bundle is truncated (no end record)")
    return {"refs": refs}, records


def import_bundle(repo: Repository, data: bytes) -> dict[str, str]:
    """Verify every object of a bundle, then add them and its refs in one transaction.

    A branch that exists here is moved only if the bundle's head descends
    from it (a fast-forward); otherwise the bundle's head is imported as
    ``<branch>-imported``. Returns ``{ref: commit id}`` as imported.
    """
    header, records = _read_records(data)
    blobs: dict[bytes, tuple[str, bytes | None, bytes]] = {}
    tree_rows: dict[bytes, bytes] = {}
    commit_rows: list[tuple[bytes, CommitData, bytes]] = []
    for kind, f in records:
        if kind == _REC_BLOB:
            oid, k, base, payload = f[0], f[1].decode("ascii", "replace"), f[2] or None, f[3]
            if k not in ("F", "D", "A") or blob_id(k, payload, base) != oid:
                raise errors.InvalidBundle(f"blob {oid.hex()} does not match its hash")
            blobs[oid] = (k, base, payload)
        elif kind == _REC_TREE:
            if tree_id(f[1]) != f[0]:
                raise errors.InvalidBundle(f"tree {f[0].hex()} does not match its hash")
            tree_rows[f[0]] = f[1]
        else:
            if commit_id(f[1]) != f[0]:
                raise errors.InvalidBundle(f"commit {f[0].hex()} does not match its hash")
            try:
                commit_rows.append((f[0], CommitData.decode(f[1]), f[1]))
            except (ValueError, IndexError) as e:
                raise errors.InvalidBundle(f"commit {f[0].hex()} is unreadable: {e}") from None
    imported: dict[str, str] = {}
    with repo.backend.write():
        for oid, (k, base, payload) in blobs.items():
            if base is not None and base not in blobs and repo.backend.get_blob(base) is None:
                raise errors.InvalidBundle(f"blob {oid.hex()} needs base {base.hex()}, which is missing")
        for oid, (k, base, payload) in blobs.items():
            if repo.backend.get_blob(oid) is None:
                _insert_blob(repo, oid, k, base, payload)
        for oid, data in tree_rows.items():
            repo.backend.put_tree(oid, data)
        for oid, c, data in commit_rows:
            for p in c.parents:
                if repo.backend.get_commit(p) is None:
                    raise errors.InvalidBundle(f"commit {oid.hex()} needs parent {p.hex()}, which is missing")
            try:
                repo.tree(c.tree)
            except errors.IntegrityError:
                raise errors.InvalidBundle(f"commit {oid.hex()} names tree {c.tree.hex()}, which is missing") from None
            if repo.backend.get_commit(oid) is None:
                seq = repo.backend.put_commit(oid, c.parents[0] if c.parents else None, data)
                _index_commit(repo, seq, c)
        problems = [p for p in (_check_trees(repo, t) for t in tree_rows) if p]
        if problems:
            raise errors.InvalidBundle(problems[0])
        for ref, target in header["refs"].items():
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


def _insert_blob(repo: Repository, oid: bytes, kind: str, base: bytes | None, payload: bytes) -> None:
    """Store a verified blob, recomputing its representation metadata locally."""
    if kind == "F":
        row = BlobRow(oid, kind, None, None, 0, len(payload), 0, repo._packer.pack(payload))
    else:
        b = repo.backend.get_blob(base)
        if kind == "D":
            from .core import delta

            size = len(delta.apply(repo.content(base), payload))
            row = BlobRow(oid, kind, base, None, 0, size, b.depth + 1, repo._packer.pack(payload))
        else:
            extend = b.kind == APPEND and not repo.backend.lineage_has(b.lineage, b.size)
            row = BlobRow(
                oid,
                kind,
                base,
                b.lineage if extend else oid,
                b.size,
                b.size + len(payload),
                b.depth if extend else b.depth + 1,
                repo._packer.pack(payload),
            )
    repo.backend.put_blob(row)


def _check_trees(repo: Repository, oid: bytes) -> str | None:
    kind, body = repo.tree(oid)
    children = body[1].values() if kind == "H" else body.values()
    for child in children:
        child_oid, child_kind = (child, "d") if kind == "H" else (child.oid, child.kind)
        if child_kind == "d" and repo.backend.get_tree(child_oid) is None and child_oid != EMPTY_TREE_ID:
            return f"tree {oid.hex()} names tree {child_oid.hex()}, which is missing"
        if child_kind == "f" and repo.backend.get_blob(child_oid) is None:
            return f"tree {oid.hex()} names blob {child_oid.hex()}, which is missing"
    return None


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


def gc(repo: Repository, *, keep_seconds: float = 14 * 86400) -> dict[str, int]:
    """Delete objects no branch, tag or recently deleted branch can reach.

    A deleted branch is kept (as ``refs/deleted/<name>@<time>``) for
    ``keep_seconds`` before its commits become collectable. Runs in one
    write transaction, so it never races a commit.
    """
    removed = {"commits": 0, "trees": 0, "blobs": 0, "refs": 0}
    now = time.time()
    with repo.backend.write(exclusive=True):
        for name in repo.backend.list_refs(DELETED_PREFIX):
            stamp = name.rsplit("@", 1)[-1]
            if stamp.isdigit() and now - int(stamp) > keep_seconds:
                repo.backend.delete_ref(name)
                removed["refs"] += 1
        tips = list(repo.backend.list_refs("refs/").values())
        commits, tree_ids, blob_ids = _reachable(repo, tips)
        removed["commits"] = repo.backend.delete_unreachable("commits", commits)
        removed["trees"] = repo.backend.delete_unreachable("trees", tree_ids)
        removed["blobs"] = repo.backend.delete_unreachable("blobs", blob_ids)
    repo.forget()
    return removed
