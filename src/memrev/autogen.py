"""AutoGen on memrev: ``VersionedStore``, the store that is also an AutoGen ``Memory`` (see ``docs/autogen.md``).

:class:`VersionedStore` is the framework-free :class:`memrev.store.Store`
plus :class:`MemoryMixin`, so the store itself is an
``autogen_core.memory.Memory`` (its memory is called ``"default"``), and
``store.memory("user")`` is a :class:`~memrev.autogen_memory.VersionedMemory`:
a named view on the same store and branch. This module is the public face of
memrev's AutoGen support: it re-exports the named memory's names
(``memrev.autogen.VersionedMemory`` is the provider that dumped component
configs name) and, on first use, ``TieredMemory`` from ``memrev.tiered``.

``memrev.store`` imports no AutoGen; ``import memrev`` loads this module only
when ``memrev.VersionedStore`` is first used.
"""

from __future__ import annotations

from typing import Any

from autogen_core import CancellationToken, Component
from autogen_core.memory import Memory, MemoryContent, MemoryQueryResult, UpdateContextResult
from autogen_core.model_context import ChatCompletionContext

from .autogen_memory import (
    DEFAULT_MEMORY,
    DEFAULT_PREFIX,
    FRAMEWORK,
    ITEM_FORMAT,
    InvalidMemoryContent,
    MemoryItem,
    MemoryItemError,
    MemoryItemNotFound,
    VersionedMemory,
    VersionedMemoryConfig,
    bm25_scores,
    decode_item,
    encode_item,
    item_name,
    lifted_provenance,
)
from .store import CLOSED, Closed, RevisionView, Store

__all__ = [
    "CLOSED",
    "DEFAULT_MEMORY",
    "DEFAULT_PREFIX",
    "FRAMEWORK",
    "ITEM_FORMAT",
    "Closed",
    "InvalidMemoryContent",
    "MemoryItem",
    "MemoryItemError",
    "MemoryItemNotFound",
    "MemoryMixin",
    "MemoryRevisionView",
    "VersionedMemory",
    "VersionedMemoryConfig",
    "VersionedStore",
    "bm25_scores",
    "decode_item",
    "encode_item",
    "history_tools",
    "item_name",
    "lifted_provenance",
]


# ------------------------------------------------------------------ the store as a Memory


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


# Memory.close is a coroutine; Store.close is synchronous and returns an awaitable
# (CLOSED), which serves both AG2 (sync) and AutoGen (awaited) callers: intended.
class VersionedStore(Store, MemoryMixin):  # type: ignore[misc]
    """A versioned, path-keyed knowledge store (see ``docs/api.md``) that is also an AutoGen ``Memory``.

    ``Store`` gives the KnowledgeStore, transactions and history; ``MemoryMixin``
    (``docs/autogen.md``) makes ``add``, ``query``, ``update_context`` and ``clear``
    act on the memory named ``"default"``; ``store.memory(name)`` gives a named one.
    ``Store`` comes first, so its ``close`` and ``delete(path)`` win over ``Memory``'s.
    The framework hooks live here, not on ``Store``, because they import
    frameworks (``ag2_plugin``: ag2; ``session``: OpenAI Agents), each only when called.
    """

    def at(self, rev: str) -> MemoryRevisionView:
        """A read-only ``KnowledgeStore`` and AutoGen ``Memory`` as of ``rev``; mutations raise ``ReadOnlyRevision``."""
        return MemoryRevisionView(self, bytes.fromhex(self._resolve_now(rev)))

    def ag2_plugin(self, agent: str, *, history_tools: bool = False) -> Any:
        """An ag2 ``Plugin`` recording provenance on this store's commits (``memrev.ag2.provenance``)."""
        from .ag2 import provenance as ag2_provenance  # ag2 is imported only by those who use it

        return ag2_provenance(self, agent=agent, history_tools=history_tools)

    def session(
        self, session_id: str, *, prefix: str = "/openai-agents/sessions", session_settings: Any = None
    ) -> Any:
        """An OpenAI Agents SDK ``Session`` on this store and branch: a
        :class:`memrev.openai_agents.VersionedSession` (``docs/openai_agents.md``).

        Needs the ``openai-agents`` extra, imported only here, so memrev itself does not.
        """
        from .openai_agents import VersionedSession

        self._live()
        return VersionedSession(self, session_id, prefix=prefix, session_settings=session_settings)


class MemoryRevisionView(RevisionView, Memory):
    """``VersionedStore.at(rev)``: a read-only ``KnowledgeStore`` and AutoGen ``Memory`` frozen at one commit.

    Hand it to an AG2 agent or an ``AssistantAgent`` to replay against a past
    memory. As a ``Memory`` it is the store's default memory as of that
    commit; ``memory(name)`` gives any named one. ``add`` and ``clear`` raise
    ``ReadOnlyRevision``.
    """

    component_type = "memory"
    _store: VersionedStore

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


def history_tools(store: VersionedStore, *, agent: str | None = None) -> list[Any]:
    """The agent history tools (``memrev.history_tools``) as AutoGen ``FunctionTool``s, for
    ``AssistantAgent(tools=...)``: read past versions, see recent changes, restore a path (a new commit).

    AutoGen has no tool-call hook, so each tool sets its own provenance (``framework``,
    ``tool``, and ``agent`` when given) around its call.
    """
    from autogen_core.tools import FunctionTool

    from .history_tools import make_history_tools, with_provenance

    return [
        FunctionTool(
            with_provenance(f, framework=FRAMEWORK, tool=f.__name__, agent=agent),
            description=(f.__doc__ or f.__name__).strip(),
        )
        for f in make_history_tools(store)
    ]

# ------------------------------------------------------------------ tiered memory, loaded on first use


def __getattr__(name: str) -> Any:
    """``memrev.autogen.TieredMemory`` lives in ``memrev.tiered``, which imports this
    module; loading it on first use keeps the two free of an import cycle."""
    if name in ("TieredMemory", "TieredMemoryConfig"):
        from . import tiered

        return getattr(tiered, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
