"""The backend conformance suite: run memrev's contract tests against any backend.

Every memrev backend (SQLite, PostgreSQL, yours) must pass these tests. They
check the narrow backend interface of :mod:`memrev.backends.base` directly,
and everything built on it through :class:`memrev.VersionedStore`: the
KnowledgeStore semantics against ag2's ``MemoryKnowledgeStore``, history
(log, diff, revisions, transactions, branches, merge, blame, gc), the AutoGen
memory against ``ListMemory``, and two handles committing to one store.

Needs ``pytest``, ``hypothesis`` and ``anyio`` (anyio's pytest plugin runs the
async tests; it registers itself when anyio is installed). Importing
``memrev`` never imports this package; only a test module that imports it does.

Running it against a backend
----------------------------

Register your backend for a URL scheme (:func:`memrev.backends.register`),
subclass :class:`BackendConformance` in one of *your* test modules, under a
name pytest collects (``Test...``), and say how to make a fresh, empty store
location for each test; that is all::

    # tests/test_mybackend_conformance.py
    import memrev.backends
    from memrev.testing.conformance import BackendConformance
    from mypackage.memrev_backend import MyBackend

    memrev.backends.register("mydb", MyBackend.from_url)  # from_url(url, *, durability, create)


    class TestMyBackend(BackendConformance):
        def make_location(self, tmp_path):
            return f"mydb://{tmp_path}/store"       # fresh and empty per call

then ``python -m pytest tests/test_mybackend_conformance.py``. The class's
tests are collected only from a module that subclasses it like this (the
base class's name does not start with ``Test``).

Hooks (override what you need):

* ``make_location(tmp_path) -> str``: a location string for a new, empty
  store (a folder, ``sqlite:///...``, a URL naming a new database). Called
  once per test; ``drop_location(location)`` runs after the test (default:
  nothing).
* ``memrev_location``: the pytest fixture that calls the two hooks above.
  Override the fixture instead when making a location needs other fixtures,
  e.g. a database server::

      @pytest.fixture
      def memrev_location(self, my_server):
          url = my_server.create_database()
          yield url
          my_server.drop_database(url)

* ``open_backend(location, *, durability)``: opens a backend on a location
  for the tests of the primitives. The default is
  :func:`memrev.backends.open_backend`, the function ``VersionedStore`` uses:
  folders, and URLs of every registered scheme. The suite opens every store
  by its location, as a user would, so a scheme must be registered, not only
  known to this hook.

A location must accept several handles at once, from several threads: the
suite opens two backends (or stores) on one location to check locking,
isolation and concurrent commits. A backend subclasses
:class:`memrev.backends.base.BackendBase` and implements its abstract
methods (the primitives); the other methods have defaults built on them.

Selecting and deepening: test names start with the area they check
(``test_backend_*``, ``test_knowledge_*``, ``test_history_*``,
``test_memory_*``, ``test_concurrency_*``), so ``-k test_backend_`` runs the
primitive contracts only. The random differential test runs
``MEMREV_CONFORMANCE_EXAMPLES`` examples (default 20). For detailed assertion
messages, call ``pytest.register_assert_rewrite("memrev.testing.conformance")`` in
your ``conftest.py`` (or before importing this package; it covers the modules
of the areas below). ``docs/backends.md`` describes each primitive's contract.

The package, by area (each module holds one mixin of :class:`BackendConformance`):

* :mod:`.base`: ``ConformanceBase``, the hooks and fixtures above, and the small
  helpers the areas share (``make_oid``, ``fresh_branch``, ``in_thread``, ``joined``);
* :mod:`.primitives`: ``test_backend_*``, the objects, refs and indexes of a backend;
* :mod:`.knowledge`: ``test_knowledge_*``, the AG2 KnowledgeStore contract;
* :mod:`.history`: ``test_history_*``;
* :mod:`.memory`: ``test_memory_*``, the AutoGen memory;
* :mod:`.concurrency`: ``test_concurrency_*``;
* :mod:`.oracle`: ``OraclePair``, ag2's ``MemoryKnowledgeStore`` and a store driven in
  lock step (the differential harness the knowledge tests use; memrev's own
  tests use it too), with ``outcome``, ``same_outcome`` and ``walk_tree``.
"""

from __future__ import annotations

from .base import ConformanceBase
from .concurrency import ConcurrencyContracts
from .history import HistoryContracts
from .knowledge import KnowledgeStoreContracts
from .memory import MemoryContracts
from .oracle import OraclePair
from .primitives import PrimitiveContracts

__all__ = [
    "BackendConformance",
    "ConcurrencyContracts",
    "ConformanceBase",
    "HistoryContracts",
    "KnowledgeStoreContracts",
    "MemoryContracts",
    "OraclePair",
    "PrimitiveContracts",
]


# pytest collects a class's tests base by base in reverse MRO order: the areas are
# listed last-first so that the tests run primitives, knowledge store, history,
# memory, concurrency, as they did when the suite was one module.
class BackendConformance(
    ConcurrencyContracts, MemoryContracts, HistoryContracts, KnowledgeStoreContracts, PrimitiveContracts
):
    """Base class of the conformance suite; subclass it as ``Test<YourBackend>``.

    Override ``make_location`` (or the ``memrev_location`` fixture); a backend
    of your own is registered for its URL scheme. See the package docstring.
    """
