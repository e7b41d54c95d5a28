"""The store itself as an AutoGen ``Memory``: ``MemoryMixin`` (the store's memory
named ``"default"``) and ``MemoryRevisionView`` (a past revision as a read-only
``Memory``). ``memrev.VersionedStore`` is ``Store`` plus ``MemoryMixin``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from autogen_core import CancellationToken, Component
from autogen_core.memory import Memory, MemoryContent, MemoryQueryResult, UpdateContextResult
from autogen_core.model_context import ChatCompletionContext

from ..store.store import RevisionView, Store
from .memory import DEFAULT_MEMORY, DEFAULT_PREFIX, VersionedMemory, VersionedMemoryConfig

__all__ = ["MemoryMixin", "MemoryRevisionView"]


class MemoryMixin(Memory, Component[VersionedMemoryConfig]):
    """Makes ``VersionedStore`` an AutoGen ``Memory``: its memory named ``"default"``.

    ``add``, ``query``, ``update_context`` and ``clear`` go to
    ``self.memory()``; ``close`` is the store's own (synchronous, idempotent,
    awaitable result). ``delete`` stays the KnowledgeStore's ``delete(path)``:
    deleting one memory item is ``store.memory(name).delete(item_id)``.
    ``dump_component()`` gives a ``VersionedMemory`` config for the default
    memory; loading it opens a new handle on the same store.
    """

    component_type = "memory"
    component_version = 1
    component_provider_override = "memrev.autogen.VersionedMemory"
    component_config_schema = VersionedMemoryConfig
    component_description = VersionedMemory.component_description
    component_label = "VersionedMemory"

    def memory(self, name: str = DEFAULT_MEMORY, *, prefix: str = DEFAULT_PREFIX) -> VersionedMemory:
        """A named AutoGen memory on this store and branch (``<prefix>/<name>/``).

        A new view each call; closing a view does not close the store.
        """
        return VersionedMemory(self, name, prefix=prefix)  # type: ignore[arg-type]

    def _default_memory(self) -> VersionedMemory:
        view = self.__dict__.get("_autogen_default")
        if view is None:
            view = VersionedMemory(self, DEFAULT_MEMORY)  # type: ignore[arg-type]
            self.__dict__["_autogen_default"] = view
        return view

    async def add(  # type: ignore[override]
        self, content: MemoryContent, cancellation_token: CancellationToken | None = None
    ) -> int:
        return await self._default_memory().add(content, cancellation_token)

    async def query(
        self,
        query: str | MemoryContent = "",
        cancellation_token: CancellationToken | None = None,
        **kwargs: Any,
    ) -> MemoryQueryResult:
        return await self._default_memory().query(query, cancellation_token, **kwargs)

    async def update_context(self, model_context: ChatCompletionContext) -> UpdateContextResult:
        return await self._default_memory().update_context(model_context)

    async def clear(self) -> None:
        await self._default_memory().clear()

    def _to_config(self) -> VersionedMemoryConfig:
        return self._default_memory()._to_config()

    @classmethod
    def _from_config(cls, config: VersionedMemoryConfig) -> VersionedMemory:  # type: ignore[override]
        return VersionedMemory._from_config(config)



if TYPE_CHECKING:

    class _StoreWithMemory(Store, MemoryMixin):  # type: ignore[misc]  # what VersionedStore is, named without importing upward
        pass


class MemoryRevisionView(RevisionView, Memory):
    """``VersionedStore.at(rev)``: a read-only ``KnowledgeStore`` and AutoGen ``Memory`` frozen at one commit.

    Hand it to an AG2 agent or an ``AssistantAgent`` to replay against a past
    memory. As a ``Memory`` it is the store's default memory as of that
    commit; ``memory(name)`` gives any named one. ``add`` and ``clear`` raise
    ``ReadOnlyRevision``.
    """

    component_type = "memory"
    _store: _StoreWithMemory

    def memory(self, name: str = DEFAULT_MEMORY, *, prefix: str = DEFAULT_PREFIX) -> VersionedMemory:
        return self._store.memory(name, prefix=prefix).at(self.commit)

    async def query(self, query: Any = "", cancellation_token: Any = None, **kwargs: Any) -> Any:
        return await self.memory().query(query, cancellation_token, **kwargs)

    async def update_context(self, model_context: Any) -> Any:
        return await self.memory().update_context(model_context)

    async def add(self, content: Any, cancellation_token: Any = None) -> None:
        self._refuse("add a memory item")

    async def clear(self) -> None:
        self._refuse("clear a memory")

    async def close(self) -> None:
        return None
