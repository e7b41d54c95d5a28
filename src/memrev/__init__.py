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
    NoStore,
    NotAMemrevStore,
    NotARegularFile,
    ReadOnlyRevision,
    ReadOnlyStore,
    RevisionNotFound,
    SchemaTooNew,
    StoreClosed,
    StoreFull,
    TransientConflict,
    UnknownBackend,
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
    "NoStore",
    "NotAMemrevStore",
    "NotARegularFile",
    "ReadOnlyRevision",
    "ReadOnlyStore",
    "RevisionNotFound",
    "SchemaTooNew",
    "StoreClosed",
    "StoreFull",
    "TransientConflict",
    "UnknownBackend",
]

from .repo import Commit, FileChange  # noqa: E402
from .store import VersionedStore  # noqa: E402

__all__ += ["Commit", "FileChange", "VersionedStore"]
