"""History operations over a :class:`~memrev.repo.Repository`: branches, tags,
merge, revert, restore and blame (bundles, gc, fsck and the indexes have
their own modules).

Free functions over a repository, in the manner of dulwich's porcelain: each
one reads what it needs and ends in at most one ``Repository.commit`` (or one
backend write transaction), so each is atomic on its own.
"""

from __future__ import annotations

import bisect
import heapq
import json
import re
import time
from dataclasses import dataclass
from typing import Any

from .. import errors
from ..core import blame as blame_mod
from ..core import trees
from ..core.mergekinds import COLLECTION, MergeKinds, check_kind, compile_pattern
from ..core.objects import (
    APPEND,
    EMPTY_TREE_ID,
)
from ..core.paths import MERGE_KINDS_PATH, is_under, split
from ..core.textmerge import merge_file
from ..repo.indexes import index_branch
from ..repo.ops import Op, SetEntry, set_or_delete, write_or_delete
from ..repo.repository import Commit, Repository
from ..repo.revisions import DELETED_PREFIX, HEAD_PREFIX, TAG_PREFIX, branch_ref, check_ref_name

# ================================================================ branches and tags


def branches(repo: Repository) -> dict[str, str]:
    return {name[len(HEAD_PREFIX) :]: oid.hex() for name, oid in repo.backend.list_refs(HEAD_PREFIX).items()}


def tags(repo: Repository) -> dict[str, str]:
    return {name[len(TAG_PREFIX) :]: oid.hex() for name, oid in repo.backend.list_refs(TAG_PREFIX).items()}


def create_branch(repo: Repository, name: str, at: bytes, *, source_branch: str | None = None) -> None:
    """Start branch ``name`` at commit ``at``, with its own head index."""
    check_ref_name(name)
    with repo.backend.write():
        _require_stored_commit(repo, at)
        if not repo.backend.set_ref_if_equals(branch_ref(name), None, at):
            raise errors.MemrevError(f"branch {name!r} already exists")
        index_branch(repo, name, at, source_branch)


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


def create_tag(repo: Repository, name: str, at: bytes) -> None:
    check_ref_name(name)
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
KINDS_PATH = MERGE_KINDS_PATH  # one of core.paths.OWN_FILES: hidden from the agent's listings


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
        ops.append(write_or_delete(path, None if content is None else content.encode("utf-8")))
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
) -> tuple[list[Op], list[Conflict]]:
    """The operations that bring theirs' changes onto ours, and the conflicts left."""
    base_root, our_root, their_root = roots
    ours_changed = {p for p, _, _ in trees.diff(repo, base_root, our_root)}
    ops: list[Op] = []
    conflicts: list[Conflict] = []
    taken: dict[str, set[int]] = {}  # collection folder -> numbers in use on either side or allocated
    for path, _old, new in trees.diff(repo, base_root, their_root):
        if path in resolved:
            continue
        if path not in ours_changed:
            ops.append(set_or_delete(path, new))
            continue
        kind = kinds.kind_of(path)
        b, o, t = (_entry_bytes(repo, root, path)[0] for root in roots)
        if kind == COLLECTION and new is not None and b is None and o is not None and o != t:
            renamed = _renumber(repo, kinds, path, (our_root, their_root), taken)
            if renamed is not None:  # both sides added this name: theirs gets a free one
                ops.append(SetEntry(renamed, new.oid, new.size))
                continue
        merged = merge_file(b, o, t, kind)
        if merged.conflict is None:
            ops.append(write_or_delete(path, merged.content))
        elif strategy is not None:
            pick = o if strategy == "ours" else t
            ops.append(write_or_delete(path, pick))
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
    ops: list[Op] = []
    conflicts: list[Conflict] = []
    for path, _old, _new in trees.diff(repo, before, c.tree):
        b, _ = _entry_bytes(repo, c.tree, path)
        o, _ = _entry_bytes(repo, now, path)
        t, _ = _entry_bytes(repo, before, path)
        merged = merge_file(b, o, t, kinds.kind_of(path))
        if merged.conflict:
            conflicts.append(Conflict(path, merged.conflict, merged.marked))
        elif merged.content != o:
            ops.append(write_or_delete(path, merged.content))
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
    ops: list[Op] = []
    for p, _old, new in trees.diff(repo, now, then):
        if is_under(p, path):
            ops.append(set_or_delete(p, new))
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
    commits that did not touch it, newest first and only as far back as a
    line still needs (``blame_walk``).
    """
    if start_seq is None:
        return []
    versions = _Versions(repo, path, start_seq)
    lines = versions.lines(start_seq)
    bottom, kept, appended = _append_chain(repo, versions, start_seq, lines)
    below = lines[:kept]
    owners = blame_mod.blame_walk(bottom, lambda s: below if s == bottom else versions.lines(s), versions.parents)
    owners += appended
    infos = dict(zip(sorted(set(owners)), repo.commits_at(sorted(set(owners))), strict=True))
    return [BlameLine(i, line.rstrip("\n"), infos[seq]) for i, (line, seq) in enumerate(zip(lines, owners, strict=True), 1)]


def _append_chain(repo: Repository, versions: _Versions, start: int, lines: list[str]) -> tuple[int, int, list[int]]:
    """Peel the appends off the top of ``path``'s history without rebuilding them.

    While a version has one parent version and is an append piece on the parent's
    blob cut at the end of a line ending in ``\\n``, the parent's lines are the first
    lines of this version, and the line diff ``blame_walk`` makes hands every one of
    them down unchanged (a prefix matches itself): the lines after the cut belong
    to this version. Returns the version where the walk must go on, how many of
    ``lines`` it holds, and the owners of the lines after them. An append that
    continues a last line without a newline stops the chain there: the line diff
    decides that line (and what follows) as before.
    """
    if "\ufffd" in "".join(lines):  # maybe undecodable bytes: byte offsets of lines are not known
        return start, len(lines), []
    line_ends: dict[int, int] = {}  # byte offset just after a line ending in "\n" -> lines up to it
    at = 0
    for i, line in enumerate(lines, 1):
        at += len(line.encode("utf-8", "surrogatepass"))
        if line.endswith("\n"):
            line_ends[at] = i
    segments: list[list[int]] = []  # owners of appended lines, newest first
    seq, kept = start, len(lines)
    oid = versions.blob(seq)
    while oid is not None:
        parents = versions.parents(seq)
        if len(parents) != 1:
            break
        row = repo.blobs.row(oid)
        cut = line_ends.get(row.start)
        parent_oid = versions.blob(parents[0])
        if row.kind != APPEND or parent_oid is None or row.base != parent_oid or cut is None:
            break
        segments.append([seq] * (kept - cut))
        seq, kept, oid = parents[0], cut, parent_oid
    return seq, kept, [owner for segment in reversed(segments) for owner in segment]


class _Versions:
    """The versions of one path by commit number, read on demand for ``blame_walk``.

    The path's change links come in one range read; commits are read in
    batches of the next ``_BATCH`` versions down the path's history (a walk
    that goes on reads them anyway; one that stops early wastes at most a batch).
    """

    _BATCH = 64

    def __init__(self, repo: Repository, path: str, start: int) -> None:
        self.repo = repo
        self.path = path
        rows = repo.backend.change_rows(path, start)
        self.links = {seq: [s for s in (prev, prev2) if s is not None] for seq, prev, prev2 in rows}
        self.order = sorted(self.links, reverse=True)
        self.ids: dict[int, bytes] = {}
        self.deleted: set[int] = set()

    def _load(self, seq: int) -> None:
        if seq not in self.ids:
            at = bisect.bisect_left(self.order, -seq, key=lambda s: -s)
            self.ids.update(self.repo.commit_ids_at(self.order[at : at + self._BATCH] or [seq]))
        if seq not in self.ids:  # a damaged index names a commit that is not stored
            raise errors.IntegrityError(f"change index names missing commit #{seq}")

    def blob(self, seq: int) -> bytes | None:
        """The blob of the path at change ``seq`` (``None``: deleted there), not read."""
        self._load(seq)
        entry = trees.lookup(self.repo, self.repo.root(self.ids[seq]), split(self.path))
        return None if entry is None else entry.oid

    def lines(self, seq: int) -> list[str]:
        self._load(seq)
        data, _ = _entry_bytes(self.repo, self.repo.root(self.ids[seq]), self.path)
        if data is None:  # a deletion: what came before it does not carry over
            self.deleted.add(seq)
            return []
        return data.decode("utf-8", errors="replace").splitlines(keepends=True)

    def parents(self, seq: int) -> list[int]:
        found = [] if seq in self.deleted else self.links.get(seq, [])
        if any(p >= seq for p in found):  # blame_walk goes to older changes only: a loop would never end
            raise errors.IntegrityError(f"change index of {self.path} links change #{seq} to a later change")
        return found
