"""memrev and plain folders: ``read.py`` (the one bounded, link-safe folder
reader), ``adopt.py`` (a ``DiskKnowledgeStore`` folder taken into history),
``worktree.py`` (the working tree: files on disk kept in step with a branch)."""
