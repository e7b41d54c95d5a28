"""Reachability and garbage collection.

``reachable_objects`` walks everything branches, tags and recently deleted
branches can reach (each object read once, in batches: linear in the store); ``gc``
deletes the rest in one exclusive write transaction. Bundles use the same
walk to decide what to export.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable

from .. import errors
from ..backends.base import Backend
from ..core.objects import EMPTY_TREE_ID, CommitData, commit_id, tree_children, tree_id
from ..errors import IntegrityError
from ..repo.repository import Repository
from ..repo.revisions import DELETED_PREFIX, deleted_at

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


# Ids read per statement while walking: statements stay O(objects / BATCH),
# and a batch stays under SQLite's limit on bound parameters.
BATCH = 500


def reachable_objects(
    repo: Repository, tips: Iterable[bytes], progress: Progress | None = None
) -> tuple[dict[bytes, int], set[bytes], dict[bytes, bytes | None]]:
    """``reachable`` as maps: commit -> number, blob -> its base.

    Each object is read once and never by a statement of its own: commits in
    one newest-first scan, trees and blob bases a level at a time, ``BATCH``
    ids per statement. (One point query per object, plus the repository's
    caches churning, was most of gc's time: 68,000 statements at 10,000
    commits.) The walk bypasses the repository's caches, which it would only
    flush.
    """
    commits, roots = reachable_commits(repo, tips, progress)
    tree_ids, blob_ids = reachable_trees(repo.backend, roots, progress)
    return commits, tree_ids, with_bases(repo, blob_ids, progress)


def reachable_commits(
    repo: Repository, tips: Iterable[bytes], progress: Progress | None = None
) -> tuple[dict[bytes, int], set[bytes]]:
    """Commit -> number for every commit reachable from ``tips``, and their root trees.

    A commit's parents are stored before it (lower numbers), so one scan from
    the newest commit down meets every reachable commit after some child (or
    a tip) asked for it; the scan stops once nothing more is wanted. A parent
    numbered above its child (memrev never stores one, but gc must not
    depend on it) is still wanted after the scan and is walked one read at a
    time, as is a tip that does not exist (``RevisionNotFound``, as before).
    """
    commits: dict[bytes, int] = {}
    roots: set[bytes] = set()
    wanted = set(tips)
    if wanted:
        for seq, oid, data in repo.backend.iter_commits_newest_first():
            if oid not in wanted:
                continue
            wanted.discard(oid)
            record = _verified_commit(oid, data)
            commits[oid] = seq
            roots.add(record.tree)
            wanted.update(p for p in record.parents if p not in commits)
            tick(progress, "commits walked", len(commits))
            if not wanted:
                break
    todo = list(wanted)
    while todo:
        oid = todo.pop()
        if oid in commits:
            continue
        seq, record = repo.commit_data(oid)
        commits[oid] = seq
        roots.add(record.tree)
        todo.extend(record.parents)
        tick(progress, "commits walked", len(commits))
    return commits, roots


def _verified_commit(oid: bytes, data: bytes) -> CommitData:
    if commit_id(data) != oid:
        raise IntegrityError(f"commit {oid.hex()} does not match its hash")
    try:
        return CommitData.decode(data)
    except ValueError as e:
        raise IntegrityError(f"commit {oid.hex()}: {e}") from None


def reachable_trees(backend: Backend, roots: Iterable[bytes], progress: Progress | None = None) -> tuple[set[bytes], set[bytes]]:
    """The trees under ``roots`` and the blobs they name, read a level at a time.

    A tree already seen is not read again, so a subtree shared by many
    commits costs one read however many commits share it. Each level is read
    in id order: its batches then sweep the table once instead of jumping
    about it (random lookups in a table larger than SQLite's page cache made
    reads at 100,000 commits cost twice as much per tree as at 10,000).
    """
    tree_ids = {t for t in roots if t != EMPTY_TREE_ID}
    blob_ids: set[bytes] = set()
    level = sorted(tree_ids)
    while level:
        below: set[bytes] = set()
        for i in range(0, len(level), BATCH):
            part = level[i : i + BATCH]
            found = backend.get_trees(part)
            named: list[bytes] = []
            for oid in part:
                subtrees, blobs = _children(oid, found.get(oid))
                named += subtrees
                blob_ids.update(blobs)
            below.update(named)
        below -= tree_ids
        below.discard(EMPTY_TREE_ID)
        tree_ids |= below
        level = sorted(below)
    return tree_ids, blob_ids


def _children(oid: bytes, data: bytes | None) -> tuple[list[bytes], list[bytes]]:
    """``(subtrees, blobs)`` a stored tree names, after checking its hash."""
    if data is None:
        raise IntegrityError(f"tree {oid.hex()} is missing")
    if tree_id(data) != oid:
        raise IntegrityError(f"tree {oid.hex()} does not match its hash")
    try:
        return tree_children(data)
    except ValueError as e:
        raise IntegrityError(f"tree {oid.hex()}: {e}") from None


def with_bases(repo: Repository, blob_ids: set[bytes], progress: Progress | None = None) -> dict[bytes, bytes | None]:
    """Blobs plus everything needed to rebuild them, each mapped to its base.

    Following ``base`` is enough: an append piece's base is the piece before
    it in its run, so the whole run is reached one row at a time. (Fetching
    the run's pieces for every version of it made gc and export quadratic in
    the length of an append run.) Bases are read a level at a time, ``BATCH``
    ids per statement.
    """
    out: dict[bytes, bytes | None] = {}
    queued = set(blob_ids)
    level = sorted(blob_ids)  # in id order, as in reachable_trees
    while level:
        below: list[bytes] = []
        for i in range(0, len(level), BATCH):
            part = level[i : i + BATCH]
            found = repo.backend.blob_bases(part)
            for oid in part:
                if oid not in found:
                    raise IntegrityError(f"blob {oid.hex()} is missing")
                base = out[oid] = found[oid]
                if base is not None and base not in queued:
                    queued.add(base)
                    below.append(base)
                tick(progress, "blobs walked", len(out))
        level = sorted(below)
    return out


def check_keep_seconds(keep_seconds: object) -> None:
    """A safety window is a number of seconds, 0 or more (``inf``: keep deleted branches
    for ever). NaN compared false with every age, so it kept everything silently, and a
    negative window acted as 0."""
    if isinstance(keep_seconds, bool) or not isinstance(keep_seconds, (int, float)):
        raise errors.InvalidArgument(f"keep_seconds must be a number of seconds, not {type(keep_seconds).__name__}")
    if math.isnan(keep_seconds) or keep_seconds < 0:
        raise errors.InvalidArgument(f"keep_seconds must be 0 or more, not {keep_seconds!r}; nothing was collected")


def gc(repo: Repository, *, keep_seconds: float = 14 * 86400, progress: Progress | None = None) -> dict[str, int]:
    """Delete objects no branch, tag or recently deleted branch can reach.

    A deleted branch is kept (as ``refs/deleted/<name>@<time>``) for
    ``keep_seconds`` before its commits become collectable. Runs in one
    write transaction, so it never races a commit.
    """
    check_keep_seconds(keep_seconds)
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
