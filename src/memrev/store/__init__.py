"""The framework-free async face: ``Store`` (the AG2 ``KnowledgeStore`` plus
history, transactions and ``on_change``) and ``RevisionView`` (a read-only
store at one revision). No agent framework is imported here."""

from .store import RevisionView, Store

__all__ = ["RevisionView", "Store"]
