"""AutoGen on memrev, the public module (see ``docs/autogen.md``).

``VersionedStore`` (defined in ``memrev/versioned_store.py``) is an AutoGen
``Memory`` whose memory is called ``"default"``; ``store.memory("user")`` is a
``VersionedMemory``: a named view on the same store and branch
(``memrev/frameworks/memory.py``). This module gathers those names, the
``TieredMemory`` of ``memrev/frameworks/tiered.py`` (on first use) and
``history_tools``, the agent history tools as AutoGen ``FunctionTool``s.
``memrev.autogen.VersionedMemory`` and ``memrev.autogen.TieredMemory`` are the
providers that dumped component configs name.
"""

from __future__ import annotations

from typing import Any

from .frameworks.memory import (
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
from .frameworks.store_memory import MemoryMixin, MemoryRevisionView
from .store.store import CLOSED, Closed
from .versioned_store import VersionedStore

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


def history_tools(store: VersionedStore, *, agent: str | None = None) -> list[Any]:
    """The agent history tools (``memrev.frameworks.history_tools``) as AutoGen ``FunctionTool``s, for
    ``AssistantAgent(tools=...)``: read past versions, see recent changes, restore a path (a new commit).

    AutoGen has no tool-call hook, so each tool sets its own provenance (``framework``,
    ``tool``, and ``agent`` when given) around its call.
    """
    from autogen_core.tools import FunctionTool

    from .frameworks.history_tools import make_history_tools, with_provenance

    return [
        FunctionTool(
            with_provenance(f, framework=FRAMEWORK, tool=f.__name__, agent=agent),
            description=(f.__doc__ or f.__name__).strip(),
        )
        for f in make_history_tools(store)
    ]

# ------------------------------------------------------------------ tiered memory, loaded on first use


def __getattr__(name: str) -> Any:
    """``memrev.autogen.TieredMemory`` lives in ``memrev.frameworks.tiered``, which imports this
    module; loading it on first use keeps the two free of an import cycle."""
    if name in ("TieredMemory", "TieredMemoryConfig"):
        from .frameworks import tiered

        return getattr(tiered, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
