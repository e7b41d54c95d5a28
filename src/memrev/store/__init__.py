"""The framework-free async face: ``Store`` (the AG2 ``KnowledgeStore`` plus
history, transactions and ``on_change``) and ``RevisionView`` (a read-only
store at one revision). No agent framework is imported here.

``store.py`` is the face (``Store``); ``run.py`` where its work runs,
``txn.py`` its transactions and planned commits, ``notify.py`` change
notification, ``work.py`` the repository work of each method, ``views.py``
``RevisionView``.
"""

from .store import RevisionView, Store

__all__ = ["RevisionView", "Store"]
