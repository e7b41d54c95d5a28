"""memrev: versioned, path-keyed memory for AI agents."""

import importlib
from typing import TYPE_CHECKING, Any

from .errors import (
    AmbiguousRevision,
    ConcurrentUpdate,
    IntegrityError,
    InvalidBundle,
    InvalidContent,
    InvalidMergeKind,
    InvalidPath,
    MemrevError,
    MergeConflict,
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

# The classes load on first use (PEP 562): ``VersionedStore`` is an AutoGen
# ``Memory``, and importing autogen_core (pydantic, PIL, opentelemetry) costs
# more than the rest of memrev together. ``import memrev`` (the CLI, a script
# catching ``memrev.StoreClosed``) pays for it only when it uses the class.
_LAZY = {
    "Commit": "repo",
    "FileChange": "repo",
    "Store": "store",
    "VersionedStore": "autogen",
}

__all__ += list(_LAZY)

# Submodules reachable as attributes, also loaded on first use: the README's
# ``memrev.ag2.provenance(...)`` works after a bare ``import memrev`` without
# making ``import memrev`` load ag2.
_LAZY_MODULES = ("ag2",)


def __getattr__(name: str) -> Any:
    if name in _LAZY_MODULES:
        return importlib.import_module(f".{name}", __name__)  # the import binds it in globals()
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY) | set(_LAZY_MODULES))


if TYPE_CHECKING:
    from .autogen import VersionedStore as VersionedStore
    from .repo import Commit as Commit
    from .repo import FileChange as FileChange
    from .store import Store as Store
