"""The repository: the synchronous, framework-free heart of memrev.

Everything that turns operations into commits and reads them back lives here:
``repository.py`` (``Repository``: commits, trees, reading, per-path walks),
``ops.py`` (the typed operations a commit is made of), ``blobs.py`` (how
versions are stored), ``revisions.py`` (ref names, revision parsing),
``indexes.py`` (the derived indexes), ``groupcommit.py`` (the commit queue) and
``cache.py`` (the bounded caches).
"""

from .repository import Commit, CommitRequest, CommitResult, FileChange, Repository

__all__ = ["Commit", "CommitRequest", "CommitResult", "FileChange", "Repository"]
