"""The framework-free async face: ``Store`` (the AG2 ``KnowledgeStore`` plus
history, transactions and ``on_change``) and ``RevisionView`` (a read-only
store at one revision). No agent framework is imported here.

``store.py`` is the face (``Store``); ``opening.py`` how a handle opens,
``run.py`` where its work runs, ``txn.py`` its transactions and planned
commits, ``notify.py`` change notification, ``work.py`` the repository work of
each method, ``views.py`` ``RevisionView``; ``reads.py`` the CLI's read-only
commands without an event loop.

``Store`` and ``RevisionView`` load on first use (PEP 562): importing
``memrev.store.work`` or ``memrev.store.reads`` does not import asyncio.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .store import RevisionView, Store

__all__ = ["RevisionView", "Store"]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from . import store as face

    value = getattr(face, name)
    globals()[name] = value
    return value
