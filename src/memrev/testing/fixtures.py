"""pytest fixtures for a throwaway PostgreSQL server (a pytest plugin).

Enable with ``pytest_plugins = ["memrev.testing.fixtures"]`` in the top
``conftest.py``. The server is :class:`memrev.testing.pgserver.PgServer`
(initdb + pg_ctl on 127.0.0.1, no fsync: nothing here must outlive the test
run).

Fixtures: ``pg_server`` (one server per test session), ``pg_url`` (a new,
empty database per test) and ``pg_module_url`` (one per module, linguistic
collation). Where the binaries or psycopg are missing the tests that use them
skip with the reason, unless ``MEMREV_REQUIRE_POSTGRES=1``, where they fail:
memrev's CI sets it so PostgreSQL tests can never silently stop running.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from .pgserver import PgServer, unavailable_reason

__all__ = ["pg_module_url", "pg_server", "pg_url"]


def _unavailable(reason: str) -> None:
    if os.environ.get("MEMREV_REQUIRE_POSTGRES") == "1":
        pytest.fail(f"MEMREV_REQUIRE_POSTGRES=1 but {reason}", pytrace=False)
    pytest.skip(f"PostgreSQL tests skipped: {reason} (apt-get install postgresql, and pip install 'memrev[postgres]')")


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    reason = unavailable_reason()
    if reason:
        _unavailable(reason)
    server = PgServer(durable=False)
    yield server
    server.stop()


@pytest.fixture
def pg_url(pg_server: PgServer) -> Iterator[str]:
    """A fresh, empty database for one test; dropped afterwards."""
    url = pg_server.create_database()
    yield url
    pg_server.drop_database(url)


@pytest.fixture(scope="module")
def pg_module_url(pg_server: PgServer) -> Iterator[str]:
    """A fresh, empty database shared by the tests of one module; linguistic default collation."""
    url = pg_server.create_database("m", linguistic=True)
    yield url
    pg_server.drop_database(url)
