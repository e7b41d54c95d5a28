"""Merge, revert and restore: each computes the tree it wants from other commits'
trees and ends in one ``Repository.commit``, so each is atomic on its own
(free functions over a repository, in the manner of dulwich's porcelain)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .. import errors
from ..core import trees
from ..core.mergekinds import COLLECTION, MergeKinds
from ..core.objects import EMPTY_TREE_ID
from ..core.paths import is_under, split
from ..repo.ops import Op, SetEntry, set_or_delete, write_or_delete
from ..repo.repository import Repository
from .refs import is_ancestor, merge_base


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


def entry_bytes(repo: Repository, root: bytes, path: str) -> tuple[bytes | None, Any]:
    """The bytes and tree entry of ``path`` in tree ``root`` (``(None, None)``: no such file)."""
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
    from ..core import textmerge  # merge3 loads when a file merges, not at start (issue 26)
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
        b, o, t = (entry_bytes(repo, root, path)[0] for root in roots)
        if kind == COLLECTION and new is not None and b is None and o is not None and o != t:
            renamed = _renumber(repo, kinds, path, (our_root, their_root), taken)
            if renamed is not None:  # both sides added this name: theirs gets a free one
                ops.append(SetEntry(renamed, new.oid, new.size))
                continue
        merged = textmerge.merge_file(b, o, t, kind)
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
    from ..core import textmerge  # merge3 loads when a file merges, not at start (issue 26)
    _, c = repo.commit_data(target)
    before = repo.root(c.parents[0]) if c.parents else EMPTY_TREE_ID
    head = repo.head(branch)
    now = repo.root(head)
    ops: list[Op] = []
    conflicts: list[Conflict] = []
    for path, _old, _new in trees.diff(repo, before, c.tree):
        b, _ = entry_bytes(repo, c.tree, path)
        o, _ = entry_bytes(repo, now, path)
        t, _ = entry_bytes(repo, before, path)
        merged = textmerge.merge_file(b, o, t, kinds.kind_of(path))
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
