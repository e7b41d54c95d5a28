"""fsck: verify every object against its id, every reference, and the derived indexes.

Reads the whole store through a fresh repository (nothing cached from before,
nothing cached after) and reports problems as sentences; a store too damaged
to read is reported, not raised.
"""

from __future__ import annotations

import itertools
from typing import Any

import zstandard

from . import errors
from .backends.base import Backend, BlobRow
from .blobs import MAX_DEPTH
from .cache import LRU
from .core import delta, trees
from .core.objects import (
    APPEND,
    DELTA,
    EMPTY_TREE,
    EMPTY_TREE_ID,
    FULL,
    MAX_BLOB_SIZE,
    CommitData,
    Entry,
    check_commit,
    check_tree,
    commit_id,
    decode_tree,
    tree_id,
)
from .core.paths import directory_keys, is_directory_key
from .repo import TREE_CACHE_BYTES, Repository, decoded_tree_bytes

# Commits checked per page: their trees are walked together, a level at a time,
# each level's nodes read in one statement; a level's nodes must fit the
# decoded-tree cache (TREE_CACHE_BYTES) until that level is walked.
COMMIT_PAGE = 256


def fsck(repo: Repository) -> list[str]:
    """The problems found in ``repo``'s store (empty: the store is sound)."""
    try:
        return _Fsck(repo.backend).run()
    except errors.IntegrityError as e:
        return [str(e)]


class _Fsck:
    """One pass over each table in key order, each object checked once.

    Objects are read by the backend's page-at-a-time scans, never by a point
    query per object; what later checks need about an object (a blob's size, a
    tree's existence, a commit's number and parents) is kept in memory as ids
    and numbers, not as decoded objects. Per-path links are checked in one walk
    of the first-parent forest (see ``_check_links``), not by walking history
    once per change row.
    """

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.repo = Repository(backend, cache_bytes=16 << 20)
        self.problems: list[str] = []
        self.blobs: dict[bytes, tuple[str, int, int, bytes | None]] = {}  # id -> (kind, size, depth, lineage)
        self.trees = VerifiedTrees(backend, self.problems)
        # commit number -> root tree of the commits whose trees passed, for their children's diffs
        # (a first parent is nearly always a recent commit; a miss reads the parent commit)
        self.roots = LRU(4096)
        self.malformed_seqs: set[int] = set()  # commits whose tree failed its checks
        self.seq_of: dict[bytes, int] = {}  # commit id -> number, for the commits that passed their checks
        self.parents: dict[int, tuple[int | None, ...]] = {}  # commit number -> its parents' numbers (None: missing)
        self.changes: dict[int, list[tuple[str, int | None, int | None]]] = {}  # number -> (path, prev, prev2)
        self.bad_blobs: set[bytes] = set()  # blobs reported already
        self.damaged: set[int] = set()  # commits reported already (their change rows are not judged again)

    def note(self, problem: str | None) -> None:
        if problem:
            self.problems.append(problem)

    def run(self) -> list[str]:
        """Every object against its id, every reference, and the derived indexes.

        Returns the problems found (empty: the store is sound). Each stored
        representation is checked on its own (hash, base, sizes): O(stored
        bytes), where rebuilding every version of a long append run would be
        quadratic. Branch heads are rebuilt in full.
        """
        for row in self.backend.iter_blobs():
            problem = _problem(self._check_blob, row)
            if problem:
                self.problems.append(problem)
                self.bad_blobs.add(row.id)
        for path, seq, prev, prev2 in self.backend.iter_changes():
            self.changes.setdefault(seq, []).append((path, prev, prev2))
        malformed = self._check_commits()
        self._check_unreached_trees()
        self.note(_problem(self._check_links))
        for name, target in self.backend.list_refs("refs/").items():
            if target not in self.seq_of and self.backend.get_commit(target) is None:
                self.problems.append(f"ref {name} points to missing commit {target.hex()}")
                continue
            if name.startswith("refs/heads/") and target not in malformed:
                self.note(_problem(self._check_head_index, name[len("refs/heads/") :], target))
        return self.problems

    # ------------------------------------------------------------ blobs

    def _check_blob(self, row: BlobRow) -> None:
        oid = row.id
        self.blobs[oid] = (row.kind, row.size, row.depth, row.lineage)
        raw = self.repo.blobs.payload(row)
        if row.kind == FULL:
            if len(raw) != row.size or row.depth != 0:
                raise errors.IntegrityError(f"blob {oid.hex()} has the wrong size or depth")
            return
        base = self._base(row.base) if row.base else None
        if base is None:
            raise errors.IntegrityError(f"blob {oid.hex()} needs base {row.base.hex() if row.base else '-'}, which is missing")
        if row.kind == DELTA:
            try:
                size = delta.output_size(raw, base[1])
            except (ValueError, IndexError):
                raise errors.IntegrityError(f"blob {oid.hex()} holds a corrupt delta") from None
            depth = base[2] + 1
        else:
            size = row.start + len(raw)
            depth = self._check_append_row(row, base)
        if size != row.size or size > MAX_BLOB_SIZE:
            raise errors.IntegrityError(f"blob {oid.hex()} has the wrong size or one over {MAX_BLOB_SIZE} bytes")
        if row.depth != depth or depth > MAX_DEPTH:
            raise errors.IntegrityError(
                f"blob {oid.hex()} records depth {row.depth}; its bases give {depth} (at most {MAX_DEPTH} allowed)"
            )

    def _base(self, oid: bytes) -> tuple[str, int, int, bytes | None] | None:
        """A base's (kind, size, depth, lineage): scanned already (SQLite scans bases
        first), else read once (a scan by id may meet a base after its versions)."""
        known = self.blobs.get(oid)
        if known is None:
            row = self.backend.get_blob(oid)
            if row is not None:
                known = self.blobs[oid] = (row.kind, row.size, row.depth, row.lineage)
        return known

    def _check_append_row(self, row: BlobRow, base: tuple[str, int, int, bytes | None]) -> int:
        """An append piece starts where its base ends and either starts a run
        (its own lineage) or continues its base's run; returns its depth."""
        kind, size, depth, lineage = base
        if row.start != size:
            raise errors.IntegrityError(f"blob {row.id.hex()} does not continue its append run")
        if row.lineage == row.id:
            return depth + 1
        if kind != APPEND or lineage != row.lineage:
            raise errors.IntegrityError(f"blob {row.id.hex()} names an append run its base is not part of")
        return depth

    def _blob_kind(self, oid: bytes) -> str | None:
        known = self.blobs.get(oid)
        return None if known is None else known[0]

    def _blob_size(self, oid: bytes) -> int | None:
        known = self.blobs.get(oid)
        return None if known is None else known[1]

    # ------------------------------------------------------------ trees

    def _check_unreached_trees(self) -> None:
        """Trees no commit reached (``VerifiedTrees`` checked the others as the
        commits first read them): each against its id and canonical form, and
        what it names must exist. Subtrees may come later in the scan."""
        all_ids: set[bytes] = set()
        later: list[tuple[bytes, bytes]] = []  # (tree, subtree not scanned yet)
        for oid, data in self.backend.iter_trees():
            all_ids.add(oid)
            if oid in self.trees.seen:
                continue
            node = self.trees.verify(oid, data)
            if node is None:
                continue
            kind, body = node
            entries = body.values() if kind == "T" else [Entry("d", child) for child in body[1].values()]
            for entry in entries:
                if entry.kind == "f" and entry.oid not in self.blobs:
                    self.problems.append(f"tree {oid.hex()} names missing blob {entry.oid.hex()}")
                elif entry.kind == "d":
                    later.append((oid, entry.oid))
        for oid, child in later:
            if child not in all_ids:
                self.problems.append(f"tree {oid.hex()} names missing tree {child.hex()}")

    # ------------------------------------------------------------ commits

    def _check_commits(self) -> set[bytes]:
        """Each commit against its id, its parents, its tree's shape and its change
        rows; returns the commits whose tree is malformed (not walked further).

        Commits are taken a page at a time: first each commit on its own (in
        order: a parent's number must be known before its children's), then
        the page's trees, each against its first parent's tree (which passed
        before: only what the commit changed is walked and checked, see
        ``trees.TreeDiffChecker``), all the page's walks a level at a time so
        each level's nodes are read in one statement; the paths that walk
        finds changed are then held against the commit's change rows."""
        shapes = trees.TreeDiffChecker(self.trees, self._blob_size, self.trees.load)
        malformed: set[bytes] = set()
        commits = self.backend.iter_commits()
        while page := list(itertools.islice(commits, COMMIT_PAGE)):
            checked = [(seq, oid, c) for seq, oid, data in page if (c := self._check_commit(seq, oid, data))]
            in_page = {seq: c.tree for seq, _, c in checked}
            olds = [self._checked_parent_root(seq, c, in_page) for seq, _, c in checked]
            walked = shapes.changed_many([(old or EMPTY_TREE_ID, c.tree) for old, (_, _, c) in zip(olds, checked)])
            for (seq, oid, c), old, changed in zip(checked, olds, walked):
                if old is not None and self.parents[seq][0] in self.malformed_seqs:  # its parent (in this page) failed
                    old, changed = None, _outcome(shapes.changed, EMPTY_TREE_ID, c.tree)
                self.note(_problem(self.trees.tree, c.tree))
                if isinstance(changed, Exception):  # a malformed tree is not walked further (it may nest without end)
                    self.problems.append(f"commit {oid.hex()}: {_describe(changed)}")
                    malformed.add(oid)
                    self.malformed_seqs.add(seq)
                    continue
                self.roots.put(seq, c.tree)
                self.note(_problem(self._check_changes, seq, oid, c, changed if old or not c.parents else None))
        return malformed

    def _checked_parent_root(self, seq: int, c: CommitData, in_page: dict[int, bytes]) -> bytes | None:
        """The first parent's tree when it passed its checks (commits are checked in
        number order, so a lower number not reported did; one in this page is
        confirmed after the walk), else ``None``: the commit's tree is then
        checked in full, not against its parent's."""
        parent = self.parents[seq][0] if c.parents else None
        if parent is None or parent >= seq or parent in self.damaged or parent in self.malformed_seqs:
            return None
        return in_page.get(parent) or self.roots.get(parent) or _outcome_or_none(self.repo.root, c.parents[0])

    def _check_commit(self, seq: int, oid: bytes, data: bytes) -> CommitData | None:
        """The commit against its id and canonical form, its parents looked up;
        ``None`` after reporting it as damaged."""
        if commit_id(data) != oid:
            self.problems.append(f"commit {oid.hex()} does not match its hash")
            self.damaged.add(seq)
            return None
        try:
            c = check_commit(data)
        except (ValueError, errors.InvalidContent) as e:
            self.problems.append(f"commit {oid.hex()}: {e}")
            self.damaged.add(seq)
            return None
        self.parents[seq] = tuple(self._parent_seq(oid, p) for p in c.parents)
        self.seq_of[oid] = seq
        return c

    def _parent_seq(self, oid: bytes, parent: bytes) -> int | None:
        """A parent's number; parents are stored first, so the scan has met it."""
        seq = self.seq_of.get(parent)
        if seq is None:
            row = self.backend.get_commit(parent)
            if row is None:
                self.problems.append(f"commit {oid.hex()} names missing parent {parent.hex()}")
                return None
            seq = row[0]
        return seq

    def _check_changes(self, seq: int, oid: bytes, c: CommitData, actual: list[str] | None) -> None:
        """The change index names exactly the paths the commit changed against its
        first parent (``actual``: those paths, when the shape check walked that diff)."""
        if actual is None:  # the tree was checked in full: diff against the parent's as it is
            parent = self.roots.get(self.parents[seq][0]) or self.repo.root(c.parents[0])
            actual = [p for p, _, _ in trees.diff(self.trees, parent, c.tree)]
        indexed = [path for path, _, _ in self.changes.get(seq, ())]
        if self.repo.directory_keys_stale():  # older commits have none yet: only the files are known
            indexed = [p for p in indexed if not is_directory_key(p)]
        else:
            actual += directory_keys(actual)
        if sorted(indexed) != sorted(actual):
            raise errors.IntegrityError(f"change index of commit {oid.hex()} disagrees with its tree")

    def _check_links(self) -> None:
        """Each change row points at the path's previous change on each parent's line.

        The previous change of a path seen from a commit is its nearest
        first-parent ancestor (itself included) with a change row for the path.
        One depth-first walk of the first-parent forest keeps, per path, the
        stack of such ancestors: on entering a commit its rows' ``prev`` must be
        the tops, then it pushes itself. A merge's ``prev2`` is asked at its
        second parent, when the walk is there. Linear in commits and change rows.
        """
        missing = [seq for seq in self.changes if seq not in self.parents and seq not in self.damaged]
        bad = [(seq, f"{path}@#{seq} (no such commit)") for seq in missing for path, _, _ in self.changes[seq]]
        asked_at: dict[int, list[tuple[str, int | None, int]]] = {}  # commit -> (path, expected prev2, merge)
        children: dict[int, list[int]] = {}
        roots = []
        for seq, parents in self.parents.items():
            first = parents[0] if parents else None
            if first is not None and first < seq and first in self.parents:
                children.setdefault(first, []).append(seq)
            else:
                roots.append(seq)
            if len(parents) > 1:
                for path, _prev, prev2 in self.changes.get(seq, ()):
                    if prev2 is None:
                        continue
                    if parents[1] in self.parents:
                        asked_at.setdefault(parents[1], []).append((path, prev2, seq))
                    else:
                        bad.append((seq, f"{path}@{self._short(seq)}"))
        stacks: dict[str, list[int]] = {}
        for root in roots:
            walk: list[tuple[int, bool]] = [(root, False)]
            while walk:
                seq, leaving = walk.pop()
                rows = self.changes.get(seq, ())
                if leaving:
                    for path, _, _ in rows:
                        stacks[path].pop()
                    continue
                for path, prev, _ in rows:
                    stack = stacks.setdefault(path, [])
                    if prev != (stack[-1] if stack else None):
                        bad.append((seq, f"{path}@{self._short(seq)}"))
                    stack.append(seq)
                for path, want, merge in asked_at.get(seq, ()):
                    stack = stacks.get(path)
                    if want != (stack[-1] if stack else None):
                        bad.append((merge, f"{path}@{self._short(merge)}"))
                walk.append((seq, True))
                walk.extend((child, False) for child in children.get(seq, ()))
        if bad:
            shown = [what for _, what in sorted(bad)[:3]]
            raise errors.IntegrityError(f"per-path history links are wrong at {len(bad)} changes, e.g. {shown}")

    def _short(self, seq: int) -> str:
        row = self.backend.commit_at(seq)
        return row[0].hex()[:10] if row else f"#{seq}"

    # ------------------------------------------------------------ branches

    def _files(self, root: bytes) -> dict[str, tuple[bytes, int]]:
        """Every file of a tree that passed its checks as ``path -> (blob, size)``,
        walked a level at a time, each level's nodes read in one statement."""
        files: dict[str, tuple[bytes, int]] = {}
        level = [(root, "")]
        while level:
            self.trees.load({node for node, _ in level})
            below = []
            for node, prefix in level:
                kind, body = self.trees.tree(node)
                if kind == "H":
                    below.extend((child, prefix) for child in body[1].values())
                    continue
                for (name, k), entry in body.items():
                    if k == "d":
                        below.append((entry.oid, f"{prefix}/{name}"))
                    else:
                        files[f"{prefix}/{name}"] = (entry.oid, entry.size)
            level = below
        return files

    def _check_head_index(self, branch: str, commit: bytes) -> None:
        in_tree = self._files(self.repo.root(commit))
        for oid, _size in in_tree.values():  # the current files, rebuilt in full
            if self._blob_kind(oid) != FULL or oid in self.bad_blobs:  # a full one's bytes passed their hash already
                self.repo.content(oid)
        indexed = {r.path: (r.blob, r.size) for r in self.backend.head_rows(branch)}
        if in_tree != indexed:
            missing = sorted(set(in_tree) ^ set(indexed) | {p for p in in_tree if indexed.get(p) != in_tree[p]})
            raise errors.IntegrityError(
                f"head index of branch {branch} disagrees with its tree at {len(missing)} paths, e.g. {missing[:3]}"
            )


class VerifiedTrees:
    """A tree source for fsck that checks each tree the first time it is read:
    against its id and its canonical form (names included), decoded once and
    kept in a bounded cache. A damaged tree is reported once and raises
    ``IntegrityError`` to whatever reads it."""

    def __init__(self, backend: Backend, problems: list[str]) -> None:
        self._backend = backend
        self._problems = problems
        self._cache = LRU(TREE_CACHE_BYTES, weigh=decoded_tree_bytes)
        self._good_names: set[str] = set()  # names repeat in every version of a directory
        self.seen: set[bytes] = set()  # every tree read (reported if damaged)
        self._bad: dict[bytes, str] = {}

    def tree(self, oid: bytes) -> tuple[str, Any]:
        if oid == EMPTY_TREE_ID:
            return decode_tree(EMPTY_TREE)
        node = self._cache.get(oid)
        if node is None:
            if oid in self._bad:
                raise errors.IntegrityError(self._bad[oid])
            data = self._backend.get_tree(oid)
            if data is None:
                raise errors.IntegrityError(f"tree {oid.hex()} is missing")
            node = self.verify(oid, data)
            if node is None:
                raise errors.IntegrityError(self._bad[oid])
        return node

    def load(self, oids: set[bytes]) -> None:
        """Read the trees of ``oids`` not cached, in one statement (a level of a
        page of commits' walks); what is missing is left for ``tree`` to report."""
        wanted = [oid for oid in oids if oid != EMPTY_TREE_ID and oid not in self._bad and self._cache.get(oid) is None]
        if wanted:
            for oid, data in self._backend.get_trees(wanted).items():
                self.verify(oid, data)

    def verify(self, oid: bytes, data: bytes) -> tuple[str, Any] | None:
        """The decoded tree, or ``None`` after reporting it as damaged. A tree read
        again (evicted from the cache) is decoded, not hashed again: the row is the one that passed."""
        if oid in self.seen:
            node = check_tree(data, self._check_name)
            self._cache.put(oid, node)
            return node
        self.seen.add(oid)
        if tree_id(data) != oid:
            return self._damaged(oid, f"tree {oid.hex()} does not match its hash")
        try:
            node = check_tree(data, self._check_name)
        except ValueError as e:
            return self._damaged(oid, f"tree {oid.hex()}: {e}")
        self._cache.put(oid, node)
        return node

    def _damaged(self, oid: bytes, problem: str) -> None:
        self._bad[oid] = problem
        self._problems.append(problem)

    def _check_name(self, name: str) -> None:
        if name not in self._good_names:
            trees.check_name(name)
            self._good_names.add(name)


_FOUND = (errors.MemrevError, ValueError, KeyError, IndexError, zstandard.ZstdError)  # what damage raises


def _outcome(check, *args):
    """What ``check(*args)`` returns, or the damage it raised."""
    try:
        return check(*args)
    except _FOUND as e:
        return e


def _outcome_or_none(read, *args):
    """``read(*args)``, or ``None`` when it fails (the caller falls back; what failed is reported elsewhere)."""
    got = _outcome(read, *args)
    return None if isinstance(got, Exception) else got


def _describe(e: Exception) -> str:
    return str(e.args[0]) if isinstance(e, KeyError) and e.args else str(e) or type(e).__name__


def _problem(check, *args) -> str | None:
    got = _outcome(check, *args)
    return _describe(got) if isinstance(got, Exception) else None
