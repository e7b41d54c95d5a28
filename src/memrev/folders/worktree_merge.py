"""The working tree's divergence check and its merge by kind (a part of ``worktree.py``).

A file edited on disk while memrev's head changed it too: before the tree is first turned on over an
adopted folder, the two sides that do not merge by the path's declared kind refuse the whole turn-on
(``refuse_diverged``); later, an outside edit is merged with the head when it merges cleanly
(``merged_outside``), else committed as it is.
"""

from __future__ import annotations

from .. import errors
from ..core import trees
from ..history.kinds import merge_kinds
from ..repo.ops import Delete, Op, Write
from ..repo.repository import Repository
from .adopt import MAX_FILE_BYTES, Unreadable, is_reserved, open_folder, read_text_file


def refuse_diverged(repo: Repository, branch: str, folder: str, base: bytes) -> None:
    """Before the tree is first turned on over a folder adopted at ``base``: refuse, writing
    nothing, when a file changed on disk since the adoption and the head changed it too,
    and the two sides do not merge by the path's declared kind (``WorkTreeDiverged``).

    The stale copy would otherwise be committed over memrev's own commits as an outside
    edit; the ones that merge are merged by ``WorkTree._commit_outside``."""
    from ..core import textmerge  # merge3 loads when a file merges, not at start (issue 26)
    head = repo.head(branch)
    kinds = merge_kinds(repo, head)
    diverged = []
    with open_folder(folder) as root:
        for path, old, new in trees.diff(repo, repo.root(base), repo.root(head)):
            if is_reserved(path):
                continue
            try:
                theirs = read_text_file(root, path, MAX_FILE_BYTES)[0]
            except (FileNotFoundError, NotADirectoryError):
                theirs = None
            except (Unreadable, OSError):
                continue  # left alone and named by the scan
            base_data = None if old is None else repo.content(old.oid)
            if theirs == base_data:
                continue  # the stale copy: the head's version replaces it
            ours = None if new is None else repo.content(new.oid)
            if textmerge.merge_file(base_data, ours, theirs, kinds.kind_of(path)).conflict is not None:
                diverged.append(path)
    if diverged:
        raise errors.WorkTreeDiverged(
            f"working tree {folder}: {len(diverged)} file(s) changed both on disk since the folder was "
            f"adopted and on branch {branch} since, and do not merge: {', '.join(diverged[:10])}"
            f"{' ...' if len(diverged) > 10 else ''}; nothing was written. Make each file the version to keep "
            "(or move it aside) and open again",
            tuple(diverged),
        )


def merged_outside(repo: Repository, op: Write | Delete, path: str, synced: bytes | None, head: bytes | None) -> Op | None:
    """An outside edit of a file the head changed too since the folder showed ``synced``:
    the three-way merge by the path's declared kind when it is clean (``None``: the head
    already holds it), else the outside edit as it is (memrev's commit stays in history)."""
    base_entry = repo.entry_at(synced, path)
    head_entry = repo.entry_at(head, path)
    if base_entry == head_entry or (base_entry is not None and head_entry is not None and base_entry.oid == head_entry.oid):
        return op  # the head did not change the path since the folder showed it
    base_data = None if base_entry is None else repo.content(base_entry.oid)
    theirs = op.data if isinstance(op, Write) else None
    if theirs == base_data:
        return op
    ours = None if head_entry is None else repo.content(head_entry.oid)
    from ..core import textmerge  # merge3 loads when a file merges, not at start (issue 26)
    merged = textmerge.merge_file(base_data, ours, theirs, merge_kinds(repo, head).kind_of(path))
    if merged.conflict is not None:
        return op
    if merged.content == ours:
        return None
    return Delete(path) if merged.content is None else Write(path, merged.content)
