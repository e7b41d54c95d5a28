"""fsck: verify every object against its id, every reference, and the derived indexes.

Reads the whole store through a fresh repository (nothing cached from before,
nothing cached after) and reports problems as sentences; a store too damaged
to read is reported, not raised. What it keeps about the whole store while it
reads (blob facts, parents' numbers, the change index, the trees reached) is
held in the compact tables of :mod:`memrev.maintenance.fsck_tables`.
"""

from __future__ import annotations

import itertools
from array import array
from collections.abc import Iterator
from typing import Any, NamedTuple

import zstandard

from .. import errors
from ..backends.base import Backend, BlobRow
from ..core import delta, trees
from ..core.objects import (
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
from ..core.paths import directory_keys, is_directory_key
from ..repo.blobs import MAX_DEPTH
from ..repo.cache import LRU
from ..repo.repository import TREE_CACHE_BYTES, Repository, decoded_tree_bytes
from .fsck_tables import BlobFacts, ChangeRows, ParentNumbers, ReachedIds

# Commits checked per page: their trees are walked together, a level at a time,
# each level's nodes read in one statement; a level's nodes must fit the
# decoded-tree cache (TREE_CACHE_BYTES) until that level is walked.
COMMIT_PAGE = 256
GOOD_NAMES = 1 << 16  # names known to pass check_name, at most
RECENT_COMMITS = 4096  # commits whose number and tree are kept for their children (a miss reads the row)


class _Forest(NamedTuple):
    """The first-parent forest of the checked commits (see ``_Fsck._check_links``)."""

    roots: list[int]  # commits whose first parent is not a checked, earlier commit
    children: ParentNumbers  # used the other way round: commit -> (its first child,)
    others: dict[int, list[int]]  # commit -> its other children
    asked_at: dict[int, list[tuple[str, int | None, int]]]  # commit -> (path, expected prev2, merge) asked there


def fsck(repo: Repository) -> list[str]:
    """The problems found in ``repo``'s store (empty: the store is sound)."""
    try:
        with repo.backend.read_snapshot():  # one moment of the store, even while others commit
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
        self.blobs = BlobFacts()  # id -> (kind, size, depth, lineage) of each blob scanned
        self.trees = VerifiedTrees(backend, self.problems)
        # commit number -> root tree of the commits whose trees passed, for their children's diffs
        # (a first parent is nearly always a recent commit; a miss reads the parent commit)
        self.roots = LRU(RECENT_COMMITS)
        self.malformed_seqs: set[int] = set()  # commits whose tree failed its checks
        # commit id -> number, for the recent commits that passed their checks (a parent is
        # nearly always recent; a miss reads the parent's row)
        self.seq_of = LRU(RECENT_COMMITS)
        self.parents = ParentNumbers()  # commit number -> its parents' numbers (None: missing)
        self.changes = ChangeRows(())
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
        self.changes = ChangeRows(self.backend.scan_changes())
        malformed = self._check_commits()
        self.note(_problem(self._check_first_parent_links))
        self._check_unreached_trees()
        refs = self.backend.list_refs("refs/")
        self.note(_problem(self._check_links, self._branch_heads(refs, malformed)))
        for name, target in refs.items():
            if self.seq_of.get(target) is None and self.backend.get_commit(target) is None:
                self.problems.append(f"ref {name} points to missing commit {target.hex()}")
                continue
            if name.startswith("refs/heads/") and target not in malformed:
                self.note(_problem(self._check_head_index, name[len("refs/heads/") :], target))
        return list(dict.fromkeys(self.problems))  # a problem two checks meet is reported once

    # ------------------------------------------------------------ blobs

    def _check_blob(self, row: BlobRow) -> None:
        oid = row.id
        self.blobs.put(row)
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
                self.blobs.put(row)
                known = self.blobs.get(oid)
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
        return self.blobs.size(oid)

    # ------------------------------------------------------------ trees

    def _check_unreached_trees(self) -> None:
        """Trees no commit reached (``VerifiedTrees`` checked the others as the
        commits read them): each against its id and canonical form, and what
        it names must exist (subtrees looked up a page per statement).

        Which trees were reached is known by an 8-byte prefix of each id
        (``ReachedIds``). That is exact when the scan meets exactly one tree per
        reached prefix; two trees sharing a prefix (by chance about
        trees² / 2⁶⁴, or crafted) make the scan check every tree instead."""
        reached = self.trees.reached
        reached.freeze()
        later: list[tuple[bytes, bytes]] = []  # (tree, subtree it names)
        hits = 0
        for oid, data in self.backend.iter_trees():
            if oid in reached:
                hits += 1
            else:
                self._check_unreached_tree(oid, data, later)
        if hits != len(reached):
            for oid, data in self.backend.iter_trees():
                if oid in reached and oid not in self.trees.bad:
                    self._check_unreached_tree(oid, data, later)
        for i in range(0, len(later), COMMIT_PAGE):
            part = later[i : i + COMMIT_PAGE]
            found = self.backend.get_trees(list({child for _, child in part}))
            self.problems.extend(f"tree {oid.hex()} names missing tree {child.hex()}" for oid, child in part if child not in found)

    def _check_unreached_tree(self, oid: bytes, data: bytes, later: list[tuple[bytes, bytes]]) -> None:
        node = self.trees.verify(oid, data)
        if node is None:
            return
        kind, body = node
        entries = body.values() if kind == "T" else [Entry("d", child) for child in body[1].values()]
        for entry in entries:
            if entry.kind == "f" and entry.oid not in self.blobs:
                self.problems.append(f"tree {oid.hex()} names missing blob {entry.oid.hex()}")
            elif entry.kind == "d" and entry.oid != EMPTY_TREE_ID:
                later.append((oid, entry.oid))

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
            if any(isinstance(w, Exception) for w in walked):
                self.trees.forget_unchecked()
            else:
                self.trees.confirm()
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
        self.seq_of.put(oid, seq)
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

    def _check_first_parent_links(self) -> None:
        """Each commit's stored first-parent link (what ``HEAD~n`` follows, apart from
        the hash-checked record) names its record's first parent (a link that
        lied once made ``HEAD~1`` another commit while fsck called the store sound)."""
        wrong = []
        for seq, linked in self.backend.first_parent_numbers():
            if seq in self.damaged or seq not in self.parents:
                continue
            parents = self.parents[seq]
            if parents and parents[0] is None:  # its parent is missing: reported already
                continue
            if linked != (parents[0] if parents else None):
                wrong.append(seq)
        if wrong:
            shown = [self._short(seq) for seq in wrong[:3]]
            raise errors.IntegrityError(
                f"first-parent links (HEAD~n) are wrong at {len(wrong)} commits, e.g. {shown}; fsck --repair rebuilds them"
            )

    def _check_changes(self, seq: int, oid: bytes, c: CommitData, actual: list[str] | None) -> None:
        """The change index names exactly the paths the commit changed against its
        first parent (``actual``: those paths, when the shape check walked that diff)."""
        if actual is None:  # the tree was checked in full: diff against the parent's as it is
            parent = self.roots.get(self.parents[seq][0]) or self.repo.root(c.parents[0])
            actual = [p for p, _, _ in trees.diff(self.trees, parent, c.tree)]
        indexed = [path for path, _, _ in self.changes.at(seq)]
        if self.repo.directory_keys_stale():  # older commits have none yet: only the files are known
            indexed = [p for p in indexed if not is_directory_key(p)]
        else:
            actual += directory_keys(actual)
        if sorted(indexed) != sorted(actual):
            raise errors.IntegrityError(f"change index of commit {oid.hex()} disagrees with its tree")

    def _branch_heads(self, refs: dict[str, bytes], malformed: set[bytes]) -> dict[int, list[str]]:
        """Commit number -> the branches whose head it is (heads whose commit passed its checks)."""
        heads: dict[int, list[str]] = {}
        for name, target in refs.items():
            if not name.startswith("refs/heads/") or target in malformed:
                continue
            seq = self.seq_of.get(target)
            if seq is None:
                row = self.backend.get_commit(target)
                seq = None if row is None else row[0]
            if seq is not None and seq not in self.damaged:
                heads.setdefault(seq, []).append(name[len("refs/heads/") :])
        return heads

    def _check_head_links(self, branch: str, top: dict[str, int]) -> None:
        """Each head-index row's commit number is its path's last change on the branch's
        first-parent line (``top`` at the branch head): ``log(path)`` at the head starts
        there, and the next commit links its change row to it. (Once only the
        rows' blobs and sizes were checked: a row naming an older change hid the
        newer versions from ``log`` while fsck called the store sound.)"""
        stale = self.repo.directory_keys_stale()  # directory keys of older commits are not indexed yet
        wrong = sorted(
            row.path
            for row in self.backend.scan_head(branch, tombstones=True)  # a page at a time, never the whole index
            if row.seq != top.get(row.path) and not (stale and is_directory_key(row.path))
        )
        if wrong:
            self.problems.append(
                f"head index of branch {branch} names the wrong last change at {len(wrong)} paths, e.g. {wrong[:3]}"
            )

    def _check_links(self, heads: dict[int, list[str]]) -> None:
        """Each change row points at the path's previous change on each parent's line,
        and each branch's head-index rows at the path's last change (``heads``: the
        branches by the number of their head commit; see ``_check_head_links``).

        The previous change of a path seen from a commit is its nearest
        first-parent ancestor (itself included) with a change row for the path.
        One depth-first walk of the first-parent forest keeps, per path, the
        stack of such ancestors: on entering a commit its rows' ``prev`` must be
        the tops, then it pushes itself. A merge's ``prev2`` is asked at its
        second parent, when the walk is there. Linear in commits and change rows.
        """
        missing = [seq for seq in self.changes.seqs() if seq not in self.parents and seq not in self.damaged]
        bad = [(seq, f"{path}@#{seq} (no such commit)") for seq in missing for path, _, _ in self.changes.at(seq)]
        forest = self._first_parent_forest(bad)
        self._walk_links(forest, heads, bad)
        if bad:
            shown = [what for _, what in sorted(bad)[:3]]
            raise errors.IntegrityError(f"per-path history links are wrong at {len(bad)} changes, e.g. {shown}")

    def _first_parent_forest(self, bad: list[tuple[int, str]]) -> _Forest:
        """The first-parent forest ``_check_links`` walks, and what its merges ask
        at their second parents; a second link where there is none goes to ``bad``."""
        asked_at: dict[int, list[tuple[str, int | None, int]]] = {}  # commit -> (path, expected prev2, merge)
        children = ParentNumbers()  # used the other way round: commit -> its first child; more in `others`
        others: dict[int, list[int]] = {}
        roots = []
        for seq, parents in self.parents.items():
            first = parents[0] if parents else None
            if first is not None and first < seq and first in self.parents:
                if first in children:
                    others.setdefault(first, []).append(seq)
                else:
                    children[first] = (seq,)
            else:
                roots.append(seq)
            # A merge's every row links to the path's last change seen from its second
            # parent (None: none there), asked when the walk is there; any other commit's
            # rows link to nothing there (a second link on one, or a merge's link
            # cut, once put other lines' changes in log(path) or left the merged ones out).
            if len(parents) > 1:
                second = parents[1]
                for path, _prev, prev2 in self.changes.at(seq):
                    if second is not None and second in self.parents:
                        asked_at.setdefault(second, []).append((path, prev2, seq))
                    elif prev2 is not None:
                        bad.append((seq, f"{path}@{self._short(seq)}"))
            else:
                bad.extend((seq, f"{path}@{self._short(seq)}") for path, _prev, prev2 in self.changes.at(seq) if prev2 is not None)
        return _Forest(roots, children, others, asked_at)

    def _walk_links(self, forest: _Forest, heads: dict[int, list[str]], bad: list[tuple[int, str]]) -> None:
        """The depth-first walk of ``_check_links``: each wrong link goes to ``bad``."""
        roots, children, others, asked_at = forest
        # Per path, the nearest change on the way down. Leaving a commit puts back what
        # its rows found on entering: their own `prev` when they were right (no copy
        # kept), the value kept in `was` when they were wrong.
        top: dict[str, int] = {}
        was: dict[tuple[int, str], int | None] = {}
        for root in roots:
            walk = array("q", [2 * root])  # 2n: enter commit n; 2n + 1: leave it (8 bytes each)
            while walk:
                step = walk.pop()
                seq = step >> 1
                if step & 1:
                    for path, prev, _ in self.changes.at(seq):
                        back = was.pop((seq, path), prev)
                        if back is None:
                            top.pop(path, None)
                        else:
                            top[path] = back
                    continue
                for path, prev, _ in self.changes.at(seq):
                    now = top.get(path)
                    if prev != now:
                        bad.append((seq, f"{path}@{self._short(seq)}"))
                        was[(seq, path)] = now
                    top[path] = seq
                for path, want, merge in asked_at.get(seq, ()):
                    if want != top.get(path):
                        bad.append((merge, f"{path}@{self._short(merge)}"))
                for branch in heads.get(seq, ()):
                    self._check_head_links(branch, top)
                walk.append(2 * seq + 1)
                if seq in children:
                    walk.extend(2 * child for child in others.get(seq, ()))
                    first_child = children[seq][0]
                    assert first_child is not None  # stored as (seq,) by _first_parent_forest
                    walk.append(2 * first_child)

    def _short(self, seq: int) -> str:
        row = self.backend.commit_at(seq)
        return row[0].hex()[:10] if row else f"#{seq}"

    # ------------------------------------------------------------ branches

    def _files(self, root: bytes) -> dict[str, Entry]:
        """Every file of a tree that passed its checks as ``path -> entry``,
        walked a level at a time, each level's nodes read in one statement
        (the head check's fallback, see ``_check_head_index``)."""
        files: dict[str, Entry] = {}
        level = [(root, "")]
        while level:
            self.trees.load({node for node, _ in level})
            below: list[tuple[bytes, str]] = []
            for node, prefix in level:
                kind, body = self.trees.tree(node)
                if kind == "H":
                    below.extend((child, prefix) for child in body[1].values())
                    continue
                for (name, k), entry in body.items():
                    if k == "d":
                        below.append((entry.oid, f"{prefix}/{name}"))
                    else:
                        files[f"{prefix}/{name}"] = entry
            level = below
        return files

    def _files_in_order(self, root: bytes) -> Iterator[tuple[str, Entry]]:
        """Every file of a tree that passed its checks as ``(path, entry)``, paths in
        increasing order (as the head index pages by path: code points, which is
        UTF-8's byte order). Depth first, a directory's entries sorted by name, a
        subdirectory's as ``name/`` (every path below it starts so); what is held
        is the open directories' entries, not every file. A directory's
        subdirectories are read a page per statement when it is opened."""
        stack = [self._sorted_dir(root, "")]
        while stack:
            top = stack[-1]
            if not top:
                stack.pop()
                continue
            _key, path, entry = top.pop()
            if entry.kind == "d":
                stack.append(self._sorted_dir(entry.oid, path))
            else:
                yield path, entry

    def _sorted_dir(self, node: bytes, prefix: str) -> list[tuple[str, str, Entry]]:
        """A directory's entries as ``(sort key, path, entry)``, the first last (popped first)."""
        entries = trees.dir_entries(self.trees, node)
        subdirs = sorted(e.oid for (_, k), e in entries.items() if k == "d")
        for i in range(0, len(subdirs), COMMIT_PAGE):
            self.trees.load(set(subdirs[i : i + COMMIT_PAGE]))
        out = [(f"{name}/" if k == "d" else name, f"{prefix}/{name}", e) for (name, k), e in entries.items()]
        out.sort(reverse=True)
        return out

    def _check_head_index(self, branch: str, commit: bytes) -> None:
        """The branch's current files rebuilt in full, and its head index naming
        exactly them (each file's blob and size): the tree walked in path order
        beside the index paged in path order, so neither is held whole."""
        root = self.repo.root(commit)
        files = self._files_in_order(root)
        wrong: list[str] = []
        last = ""
        nxt = next(files, None)
        for row in self.backend.scan_head(branch):  # a page at a time
            if row.path <= last:  # the backend pages in another order: compare as sets instead
                return self._check_head_index_whole(branch, root)
            last = row.path
            while nxt is not None and nxt[0] < row.path:  # in the tree, not in the index
                self._rebuild(nxt[1])
                wrong.append(nxt[0])
                nxt = next(files, None)
            if nxt is not None and nxt[0] == row.path:
                self._rebuild(nxt[1])
                if (nxt[1].oid, nxt[1].size) != (row.blob, row.size):
                    wrong.append(row.path)
                nxt = next(files, None)
            else:  # in the index, not in the tree
                wrong.append(row.path)
        while nxt is not None:
            self._rebuild(nxt[1])
            wrong.append(nxt[0])
            nxt = next(files, None)
        if wrong:
            raise errors.IntegrityError(
                f"head index of branch {branch} disagrees with its tree at {len(wrong)} paths, e.g. {wrong[:3]}"
            )

    def _rebuild(self, version: Entry) -> None:
        """A current file rebuilt in full (a full blob's bytes passed their hash already)."""
        if self._blob_kind(version.oid) != FULL or version.oid in self.bad_blobs:
            self.repo.content(version.oid)

    def _check_head_index_whole(self, branch: str, root: bytes) -> None:
        """``_check_head_index`` with the tree's files held as a dict (for a backend
        that does not page the head index in code-point order)."""
        in_tree = self._files(root)
        for version in in_tree.values():
            self._rebuild(version)
        missing = []
        for row in self.backend.scan_head(branch):
            entry = in_tree.pop(row.path, None)
            if entry is None or (entry.oid, entry.size) != (row.blob, row.size):
                missing.append(row.path)
        missing = sorted(missing + list(in_tree))
        if missing:
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
        self.reached = ReachedIds()  # every tree read (reported if damaged)
        self.unchecked: set[bytes] = set()  # cached from a `checked` load, this page (see `load`)
        self.bad: dict[bytes, str] = {}

    def tree(self, oid: bytes) -> tuple[str, Any]:
        if oid == EMPTY_TREE_ID:
            return decode_tree(EMPTY_TREE)
        node = self._cache.get(oid)
        if node is None:
            if oid in self.bad:
                raise errors.IntegrityError(self.bad[oid])
            data = self._backend.get_tree(oid)
            if data is None:
                raise errors.IntegrityError(f"tree {oid.hex()} is missing")
            node = self.verify(oid, data)
            if node is None:
                raise errors.IntegrityError(self.bad[oid])
        return node

    def load(self, oids: set[bytes], checked: set[bytes] | frozenset[bytes] = frozenset()) -> None:
        """Read the trees of ``oids`` and ``checked`` not cached, in one statement (a
        level of a page of commits' walks); what is missing is left for ``tree`` to
        report. ``checked``: nodes of trees that passed before (the old side of a
        diff), decoded without their checks again (hash, canonical form, names:
        about half of a re-read's cost) and noted in ``unchecked`` until
        ``confirm`` or ``forget_unchecked`` (their trees may still fail in this page)."""
        wanted = [oid for oid in oids | checked if oid != EMPTY_TREE_ID and oid not in self.bad and self._cache.get(oid) is None]
        if wanted:
            wanted.sort()  # in key order: a batch sweeps the table once (as gc found), not jumping about it
            for oid, data in self._backend.get_trees(wanted).items():
                if oid in checked and oid not in oids:
                    node = _outcome(decode_tree, data)
                    if not isinstance(node, Exception):  # else left for tree() to read and report
                        self._cache.put(oid, node)
                        self.unchecked.add(oid)
                else:
                    self.verify(oid, data)

    def confirm(self) -> None:
        """Every tree of the page passed: what was decoded unchecked was checked before."""
        self.unchecked.clear()

    def forget_unchecked(self) -> None:
        """A tree of the page failed: the nodes decoded unchecked (which may be its
        nodes, not checked before) leave the cache, so the next read checks them."""
        for oid in self.unchecked:
            self._cache.pop(oid)
        self.unchecked.clear()

    def verify(self, oid: bytes, data: bytes) -> tuple[str, Any] | None:
        """The decoded tree, or ``None`` after reporting it as damaged. A tree read
        again (evicted from the cache) is checked again: remembering each id
        checked would grow with the history, hashing a small tree is cheap."""
        self.reached.add(oid)
        if tree_id(data) != oid:
            self._damaged(oid, f"tree {oid.hex()} does not match its hash")
            return None
        try:
            node = check_tree(data, self._check_name)
        except ValueError as e:
            self._damaged(oid, f"tree {oid.hex()}: {e}")
            return None
        self._cache.put(oid, node)
        return node

    def _damaged(self, oid: bytes, problem: str) -> None:
        self.bad[oid] = problem
        self._problems.append(problem)

    def _check_name(self, name: str) -> None:
        if name not in self._good_names:
            trees.check_name(name)
            if len(self._good_names) >= GOOD_NAMES:  # bounded: a history may hold a name per path
                self._good_names.clear()
            self._good_names.add(name)


# What damage raises (OverflowError: a commit number past 64 bits, from a store written by hand).
_FOUND = (errors.MemrevError, ValueError, KeyError, IndexError, OverflowError, zstandard.ZstdError)


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
