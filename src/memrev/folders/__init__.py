"""memrev and plain folders: ``read.py`` (the one bounded, link-safe folder
reader), ``adopt.py`` (a ``DiskKnowledgeStore`` folder taken into history),
``worktree.py`` (the working tree: files on disk kept in step with a branch),
with its parts ``worktree_safety.py`` (the lock, memrev's own directories),
``worktree_db.py`` (its bookkeeping database), ``worktree_scan.py`` (outside
edits to commits), ``worktree_write.py`` (the head's files written out) and
``worktree_merge.py`` (the divergence check, the merge by kind)."""
