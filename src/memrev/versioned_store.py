"""``VersionedStore``: the store most users open (``from memrev import VersionedStore``).

It is the framework-free :class:`memrev.store.Store` (the AG2 ``KnowledgeStore``,
transactions, history, ``on_change``) plus
:class:`memrev.frameworks.store_memory.MemoryMixin`, which makes the store an
AutoGen ``Memory``, and the hooks that import a framework when called
(``session()``: OpenAI Agents; ``ag2_plugin()``: ag2; ``langgraph()``: LangGraph). See ``docs/api.md``.
"""

from __future__ import annotations

from typing import Any

from .frameworks.store_memory import MemoryMixin, MemoryRevisionView
from .store.store import Store

__all__ = ["VersionedStore"]


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
        return MemoryRevisionView(self, bytes.fromhex(self.resolve_now(rev)))

    def ag2_plugin(self, agent: str, *, history_tools: bool = False) -> Any:
        """An ag2 ``Plugin`` recording provenance on this store's commits (``memrev.ag2.provenance``)."""
        from .ag2 import provenance as ag2_provenance  # ag2 is imported only by those who use it

        return ag2_provenance(self, agent=agent, history_tools=history_tools)

    def langgraph(self, *, index: Any = None, ttl: Any = None) -> Any:
        """LangGraph's long-term memory on this store and branch: a
        :class:`memrev.langgraph.MemrevStore` (``docs/langgraph.md``); ``index`` and ``ttl`` are
        LangGraph's ``IndexConfig`` and ``TTLConfig``. Needs the ``langgraph`` extra, imported only here."""
        from .langgraph import MemrevStore

        self._live()
        return MemrevStore(self, index=index, ttl=ttl)

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
