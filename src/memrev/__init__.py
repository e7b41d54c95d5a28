"""memrev: versioned, path-keyed memory for AI agents."""

from .errors import (
    AmbiguousRevision,
    ConcurrentUpdate,
    IntegrityError,
    InvalidBundle,
    InvalidContent,
    InvalidMergeKind,
    InvalidPath,
    MergeConflict,
    MemrevError,
    NotAMemrevStore,
    ReadOnlyRevision,
    RevisionNotFound,
    SchemaTooNew,
    StoreClosed,
    TransientConflict,
)

__all__ = [
    "AmbiguousRevision",
    "ConcurrentUpdate",
    "IntegrityError",
    "InvalidBundle",
    "InvalidContent",
    "InvalidMergeKind",
    "InvalidPath",
    "MergeConflict",
    "MemrevError",
    "NotAMemrevStore",
    "ReadOnlyRevision",
    "RevisionNotFound",
    "SchemaTooNew",
    "StoreClosed",
    "TransientConflict",
]

from .repo import Commit, FileChange  # noqa: E402
from .store import VersionedStore  # noqa: E402

__all__ += ["Commit", "FileChange", "VersionedStore"]
