"""The backend conformance suite (``memrev.testing.conformance``) on every backend memrev ships.

* SQLite, as a folder (``DiskKnowledgeStore`` style) and as a ``sqlite:///`` URL;
* PostgreSQL, a new database per test on the throwaway server of
  ``memrev.testing.fixtures`` (skipped with the reason where PostgreSQL or psycopg is
  missing, failed instead when ``MEMREV_REQUIRE_POSTGRES=1``). The databases
  use a linguistic default collation where the server has ICU, so a range
  scan that forgot ``COLLATE "C"`` would fail the prefix tests;
* the in-memory backend (``memory://NAME``, a new name per test);
* SQLite again behind a scheme memrev does not ship, registered for the test
  with ``memrev.backends.register``: the way a third-party backend plugs in.
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import pytest

pytest.register_assert_rewrite("memrev.testing.conformance")

from helpers import own_copy  # noqa: E402
from memrev import backends  # noqa: E402
from memrev.backends import memory  # noqa: E402
from memrev.backends.sqlite import SqliteBackend  # noqa: E402
from memrev.testing.conformance import BackendConformance  # noqa: E402


class TestSqliteFolder(BackendConformance):
    def make_location(self, tmp_path: Path) -> str:
        return str(tmp_path / "store")


class TestSqliteUrl(BackendConformance):
    def make_location(self, tmp_path: Path) -> str:
        return f"sqlite://{tmp_path}/nested/dir/memrev.db"


class TestPostgres(BackendConformance):
    @pytest.fixture
    def memrev_location(self, pg_server):
        url = pg_server.create_database("conf", linguistic=True)
        yield url
        pg_server.drop_database(url)

    # 0.7-1.0 s in the quick loop: hypothesis, a new branch on the server per example
    test_knowledge_random_sequences_match_oracle = pytest.mark.slow(
        own_copy(BackendConformance.test_knowledge_random_sequences_match_oracle)
    )


_memory_names = itertools.count()


class TestMemory(BackendConformance):
    def make_location(self, tmp_path: Path) -> str:
        return f"memory://conformance-{os.getpid()}-{next(_memory_names)}"

    def drop_location(self, location: str) -> None:
        memory.drop(location[len("memory://") :])


DEMO_SCHEME = "demo-backend://"


def _open_demo(url: str, *, durability: str = "normal", create: bool = True) -> SqliteBackend:
    assert url.startswith(DEMO_SCHEME), url
    return SqliteBackend(Path(url[len(DEMO_SCHEME) :]), durability=durability, create=create)


class TestThirdPartyScheme(BackendConformance):
    """A backend reached only through a scheme registered for the test, as a third party's would be.

    Unregistered, memrev refuses the scheme (``UnknownBackend``); it must
    never take the location for a relative folder named ``demo-backend:``.
    """

    @pytest.fixture(autouse=True)
    def _registered(self):
        backends.register("demo-backend", _open_demo)
        yield
        backends.unregister("demo-backend")
        assert not Path(DEMO_SCHEME.split("/")[0]).exists(), "a store was opened as a folder named after the scheme"

    def make_location(self, tmp_path: Path) -> str:
        return f"{DEMO_SCHEME}{tmp_path}/demo.db"
