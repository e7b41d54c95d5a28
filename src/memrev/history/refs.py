"""Branches and tags, and the ancestry questions a merge asks (``merge_base``,
``is_ancestor``). A deleted branch's tip is kept under a ``deleted/`` ref, so gc
does not take the commits only it reached until it expires."""

from __future__ import annotations

import heapq
import time

from .. import errors
from ..repo.indexes import index_branch
from ..repo.repository import Repository
from ..repo.revisions import DELETED_PREFIX, HEAD_PREFIX, TAG_PREFIX, branch_ref, check_ref_name


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
