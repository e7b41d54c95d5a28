"""The derived indexes: per-path change rows and each branch's head index.

``Repository.commit`` maintains both as it commits. Commits that arrive any
other way (a bundle import) are indexed here, and ``reindex`` rebuilds both
from the hash-verified objects.
"""

from __future__ import annotations

from ..backends.base import HeadRow
from ..core import trees
from ..core.objects import EMPTY_TREE_ID, CommitData
from ..core.paths import directory_keys
from .repository import DIRECTORY_KEYS, Repository
from .revisions import HEAD_PREFIX, branch_ref


def index_commit(repo: Repository, seq: int, c: CommitData) -> None:
    """Per-path change rows for a commit added without ``Repository.commit`` (import, reindex)."""
    first = repo.root(c.parents[0]) if c.parents else EMPTY_TREE_ID
    rows = []
    changed = [path for path, _old, _new in trees.diff(repo, first, c.tree)]
    for path in [*changed, *sorted(directory_keys(changed))]:
        prev = repo.last_change(path, c.parents[0]) if c.parents else None
        prev2 = repo.last_change(path, c.parents[1]) if len(c.parents) > 1 else None
        rows.append((path, seq, prev, prev2))
    repo.backend.change_put(rows)


def index_branch(repo: Repository, name: str, at: bytes, source_branch: str | None) -> None:
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
    # Directory keys of the folders there now; one emptied since is found by
    # the next commit under it through the per-path lookup (Repository._folder_prev).
    for key in sorted(directory_keys(r.path for r in rows)):
        last = repo.last_change(key, at)
        if last is not None:
            rows.append(HeadRow(key, None, 0, last))
    repo.backend.head_put(name, rows)


def reindex(repo: Repository) -> None:
    """Rebuild the derived indexes (per-path change index, head index of every
    branch, each commit's first-parent link) from the hash-verified objects, in
    one write transaction."""
    with repo.backend.write(exclusive=True):
        rebuild(repo)
    repo.forget()


def rebuild(repo: Repository) -> None:
    """``reindex`` inside a write transaction the caller holds (a purge rewrites history
    and rebuilds the indexes in the one transaction)."""
    repo.backend.clear_indexes()
    links = dict(repo.backend.first_parent_numbers())
    for seq, oid, _data in list(repo.backend.iter_commits()):
        c = repo.commit_data(oid)[1]
        index_commit(repo, seq, c)
        parent = repo.commit_data(c.parents[0])[0] if c.parents else None
        if links.get(seq) != parent:  # the first-parent link HEAD~n follows, which fsck checks
            repo.backend.relink_first_parent(seq, c.parents[0] if c.parents else None, parent)
    for name, target in repo.backend.list_refs(HEAD_PREFIX).items():
        index_branch(repo, name[len(HEAD_PREFIX) :], target, None)
    repo.backend.set_index_fresh(DIRECTORY_KEYS)
