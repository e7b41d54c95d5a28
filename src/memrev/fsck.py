"""fsck: verify every object against its id, every reference, and the derived indexes.

Reads the whole store through a fresh repository (nothing cached from before,
nothing cached after) and reports problems as sentences; a store too damaged
to read is reported, not raised.
"""

from __future__ import annotations

import zstandard

from . import errors
from .backends.base import Backend, BlobRow
from .blobs import MAX_DEPTH
from .core import delta, trees
from .core.objects import DELTA, EMPTY_TREE_ID, FULL, APPEND, MAX_BLOB_SIZE, CommitData, Entry, check_commit, check_tree, commit_id, tree_id
from .repo import Repository


def fsck(repo: Repository) -> list[str]:
    """The problems found in ``repo``'s store (empty: the store is sound)."""
    try:
        return _Fsck(repo.backend).run()
    except errors.IntegrityError as e:
        return [str(e)]


class _Fsck:
    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.repo = Repository(backend, cache_bytes=16 << 20)

    def run(self) -> list[str]:
        """Verify every object against its id, every reference, and the derived indexes.

        Returns the problems found (empty: the store is sound). Rebuilds every
        blob, so it reads the whole store; nothing is cached from it.
        """
        problems: list[str] = []

        def note(problem: str | None) -> None:
            if problem:
                problems.append(problem)

        # Each stored representation is checked on its own (hash, base, sizes):
        # O(stored bytes), where rebuilding every version of a long append run
        # would be quadratic. Branch heads are rebuilt in full below.
        for oid in self.backend.iter_blob_ids():
            note(_problem(self._check_blob, oid))
        for oid, data in self.backend.iter_trees():
            if tree_id(data) != oid:
                problems.append(f"tree {oid.hex()} does not match its hash")
                continue
            try:
                check_tree(data, trees.check_name)
            except ValueError as e:
                problems.append(f"tree {oid.hex()}: {e}")
                continue
            for entry in self._tree_entries(oid):
                if entry.kind == "f" and self.backend.get_blob(entry.oid) is None:
                    problems.append(f"tree {oid.hex()} names missing blob {entry.oid.hex()}")
                elif entry.kind == "d" and self.backend.get_tree(entry.oid) is None:
                    problems.append(f"tree {oid.hex()} names missing tree {entry.oid.hex()}")
        indexed_paths = self.backend.paths_at
        shapes = trees.TreeChecker(self.repo, _SizeLookup(self.backend))
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
            note(_problem(self.repo.tree, c.tree))
            shape = _problem(shapes.check_root, c.tree)
            if shape:  # a malformed tree is not walked further (it may nest without end)
                problems.append(f"commit {oid.hex()}: {shape}")
                malformed.add(oid)
                continue
            note(_problem(self._check_changes, seq, oid, c, indexed_paths))
        note(_problem(self._check_links))
        for name, target in self.backend.list_refs("refs/").items():
            if self.backend.get_commit(target) is None:
                problems.append(f"ref {name} points to missing commit {target.hex()}")
                continue
            if name.startswith("refs/heads/") and target not in malformed:
                note(_problem(self._check_head_index, name[len("refs/heads/") :], target))
        return problems

    def _check_blob(self, oid: bytes) -> None:
        row = self.backend.get_blob(oid)
        if row is None:
            raise errors.IntegrityError(f"blob {oid.hex()} is missing")
        raw = self.repo.blobs.payload(row)
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
        parent = self.repo.root(c.parents[0]) if c.parents else EMPTY_TREE_ID
        actual = sorted(p for p, _, _ in trees.diff(self.repo, parent, c.tree))
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
            parents = self.repo.commit_data(row[0])[1].parents
            want = self.repo.last_change(path, parents[0]) if parents else None
            want2 = self.repo.last_change(path, parents[1]) if len(parents) > 1 and prev2 is not None else prev2
            if (prev, prev2) != (want, want2):
                bad.append(f"{path}@{row[0].hex()[:10]}")
        if bad:
            raise errors.IntegrityError(f"per-path history links are wrong at {len(bad)} changes, e.g. {bad[:3]}")

    def _tree_entries(self, oid: bytes) -> list[Entry]:
        kind, body = self.repo.tree(oid)
        return list(body.values()) if kind == "T" else [Entry("d", child) for child in body[1].values()]

    def _check_head_index(self, branch: str, commit: bytes) -> None:
        in_tree = {path: (e.oid, e.size) for path, e in trees.walk(self.repo, self.repo.root(commit))}
        for path, (oid, _size) in in_tree.items():  # the current files, rebuilt in full
            self.repo.content(oid)
        indexed = {r.path: (r.blob, r.size) for r in self.backend.head_rows(branch)}
        if in_tree != indexed:
            missing = sorted(set(in_tree) ^ set(indexed) | {p for p in in_tree if indexed.get(p) != in_tree[p]})
            raise errors.IntegrityError(
                f"head index of branch {branch} disagrees with its tree at {len(missing)} paths, e.g. {missing[:3]}"
            )


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


def _problem(check, *args) -> str | None:
    try:
        check(*args)
    except (errors.MemrevError, ValueError, KeyError, IndexError, zstandard.ZstdError) as e:
        return str(e.args[0]) if isinstance(e, KeyError) and e.args else str(e) or type(e).__name__
    return None
