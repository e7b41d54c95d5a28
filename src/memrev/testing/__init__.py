"""Helpers for testing memrev and backends written for it; not used by memrev itself.

* :mod:`memrev.testing.pgserver`: ``PgServer``, a throwaway PostgreSQL server
  on loopback (initdb + pg_ctl in a temporary folder);
* :mod:`memrev.testing.fixtures`: a pytest plugin with the fixtures
  ``pg_server`` (one server per test session), ``pg_url`` (a fresh database
  per test) and ``pg_module_url`` (one per module); enable it with
  ``pytest_plugins = ["memrev.testing.fixtures"]`` in your top ``conftest.py``;
* :mod:`memrev.testing.conformance`: ``BackendConformance``, the contract
  tests every backend must pass (docs/backends.md), a package with a module per
  area (primitives, knowledge store, history, memory, concurrency), and
  ``OraclePair``, its differential harness against ag2's ``MemoryKnowledgeStore``.

The submodules need the test tools (``pytest``, ``hypothesis``, ``anyio``:
``pip install 'memrev[test]'``); this package imports none of them, and
importing ``memrev`` never imports this package.
"""
