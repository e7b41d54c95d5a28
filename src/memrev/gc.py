"""Reachability and garbage collection.

``reachable_objects`` walks everything branches, tags and recently deleted
branches can reach (each object once, linear in what it reaches); ``gc``
deletes the rest in one exclusive write transaction. Bundles use the same
walk to decide what to export.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from .core.objects import EMPTY_TREE_ID
from .repo import Repository
from .revisions import DELETED_PREFIX, deleted_at

Progress = Callable[[str, int], None]  # (what is being counted, how many so far)


def tick(progress: Progress | None, what: str, n: int) -> None:
    if progress is not None and n % 1000 == 0:
        progress(what, n)


def reachable(
    repo: Repository, tips: Iterable[bytes], progress: Progress | None = None
) -> tuple[set[bytes], set[bytes], set[bytes]]:
    """Commits, trees and blobs (with everything needed to rebuild them) reachable from ``tips``."""
    commits, tree_ids, bases = reachable_objects(repo, tips, progress)
    return set(commits), tree_ids, set(bases)


def reachable_objects(
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
        tick(progress, "commits walked", len(commits))
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
    return commits, tree_ids, with_bases(repo, blob_ids, progress)


def with_bases(repo: Repository, blob_ids: set[bytes], progress: Progress | None = None) -> dict[bytes, bytes | None]:
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
        row = repo.blobs.row(oid)
        out[oid] = row.base
        if row.base is not None:
            todo.append(row.base)
        tick(progress, "blobs walked", len(out))
    return out




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
            made = deleted_at(name)
            if made is not None and now - made > keep_seconds:
                repo.backend.delete_ref(name)
                removed["refs"] += 1
        tips = list(repo.backend.list_refs("refs/").values())
        commits, tree_ids, blob_ids = reachable(repo, tips, progress)
        removed["commits"] = repo.backend.delete_unreachable("commits", commits)
        removed["trees"] = repo.backend.delete_unreachable("trees", tree_ids)
        removed["blobs"] = repo.backend.delete_unreachable("blobs", blob_ids)
    repo.forget()
    return removed
