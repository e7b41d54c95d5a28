"""The repository: blobs, trees, commits and refs over one backend.

Synchronous and framework-free; ``VersionedStore`` is the async face over it.
Every mutation is one call to :meth:`Repository.commit`, which runs in one
backend write transaction: read the branch head, store new blobs and tree
nodes, record the commit, update the derived indexes, and move the branch
with a compare-and-swap. Either all of it is committed or none of it.
"""

from __future__ import annotations

from .commit import CommitEngine
from .model import Commit, CommitRequest, CommitResult, FileChange
from .pathlog import DIRECTORY_KEYS, PathLog
from .reading import TREE_CACHE_BYTES, decoded_tree_bytes
from .revisions import branch_ref

__all__ = [
    "DIRECTORY_KEYS",
    "TREE_CACHE_BYTES",
    "Commit",
    "CommitRequest",
    "CommitResult",
    "FileChange",
    "Repository",
    "branch_ref",
    "decoded_tree_bytes",
]


class Repository(CommitEngine, PathLog):
    """One store's repository over one backend (``Repository(open_backend(location))``).

    Its parts, one module each: ``reading.py`` (trees, records, contents, the log,
    the caches), ``commit.py`` (``commit``, ``commit_group``), ``pathlog.py``
    (``path_log``, ``dir_log``, ``path_start``). The records it returns are in
    ``model.py``; how versions are stored is ``blobs.py``'s ``BlobStore``.
    """
