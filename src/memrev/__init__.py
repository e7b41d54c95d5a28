"""memrev: versioned, path-keyed memory for AI agents."""

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
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
    PurgedContent,
    ReadOnlyRevision,
    ReadOnlyStore,
    RevisionNotFound,
    SchemaTooNew,
    StoreClosed,
    StoreFull,
    TransientConflict,
    UnknownBackend,
    WriteConflict,
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
    "PurgedContent",
    "ReadOnlyRevision",
    "ReadOnlyStore",
    "RevisionNotFound",
    "SchemaTooNew",
    "StoreClosed",
    "StoreFull",
    "TransientConflict",
    "UnknownBackend",
    "WriteConflict",
]

# The classes load on first use (PEP 562): ``VersionedStore`` is an AutoGen
# ``Memory``, and importing autogen_core (pydantic, PIL, opentelemetry) costs
# more than the rest of memrev together. ``import memrev`` (the CLI, a script
# catching ``memrev.StoreClosed``) pays for it only when it uses the class.
_LAZY = {
    "Commit": "repo",
    "FileChange": "repo",
    "Store": "store",
    "VersionedStore": "versioned_store",
}

__all__ += list(_LAZY)

# Submodules reachable as attributes, also loaded on first use: the README's
# ``memrev.ag2.provenance(...)`` works after a bare ``import memrev`` without
# making ``import memrev`` load ag2.
_LAZY_MODULES = ("ag2",)


# Where each module lived before the code moved into folders (one folder per
# layer, docs/design.md): ``import memrev.tiered`` and ``from memrev.ops import
# ANY_HEAD`` keep working, and give the very same module object as the new path.
_MOVED = {
    "adopt": "folders.adopt",
    "autogen_memory": "frameworks.memory",
    "blobs": "repo.blobs",
    "browse": "history.browse",
    "bundles": "maintenance.bundles",
    "cache": "repo.cache",
    "files": "folders.read",
    "fsck": "maintenance.fsck",
    "gc": "maintenance.gc",
    "groupcommit": "repo.groupcommit",
    "history_tools": "frameworks.history_tools",
    "indexes": "repo.indexes",
    "itemlog": "frameworks.items",
    "ops": "repo.ops",
    "pickaxe": "history.pickaxe",
    "revisions": "repo.revisions",
    "tiered": "frameworks.tiered",
    "worktree": "folders.worktree",
}


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``memrev.<old name>`` of :data:`_MOVED` as the module at its new path."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        prefix, _, old = fullname.partition(".")
        if prefix != __name__ or old not in _MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Any:
        module = importlib.import_module(f"{__name__}.{_MOVED[spec.name.partition('.')[2]]}")
        spec.loader_state = module.__spec__  # the import system sets __spec__ to the alias's: put it back
        return module

    def exec_module(self, module: Any) -> None:
        module.__spec__ = module.__spec__.loader_state


sys.meta_path.append(_MovedModules())


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
    from .repo import Commit as Commit
    from .repo import FileChange as FileChange
    from .store import Store as Store
    from .versioned_store import VersionedStore as VersionedStore
