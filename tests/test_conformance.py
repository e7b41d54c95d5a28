"""The backend conformance suite (``memrev.testing.conformance``) on every backend memrev ships.

* SQLite, as a folder (``DiskKnowledgeStore`` style) and as a ``sqlite:///`` URL;
* PostgreSQL, a new database per test on the throwaway server of
  ``memrev.testing.fixtures`` (skipped with the reason where PostgreSQL or psycopg is
  missing, failed instead when ``MEMREV_REQUIRE_POSTGRES=1``). The databases
  use a linguistic default collation where the server has ICU, so a range
  scan that forgot ``COLLATE "C"`` would fail the prefix tests;
* SQLite again behind a location scheme memrev does not know, opened by the
  suite's ``open_backend`` hook: the way a third-party backend plugs in.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.register_assert_rewrite("memrev.testing.conformance")

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


DEMO_SCHEME = "demo-backend://"


class TestThirdPartyHook(BackendConformance):
    """A backend reached only through the ``open_backend`` hook, as a third party's would be.

    memrev's own ``open_backend`` does not know the scheme: it would take the
    location for a relative folder named ``demo-backend:``, which must never
    appear.
    """

    @pytest.fixture(autouse=True)
    def _no_stray_folder(self):
        yield
        assert not Path(DEMO_SCHEME.split("/")[0]).exists(), "a store was opened without the open_backend hook"

    def make_location(self, tmp_path: Path) -> str:
        return f"{DEMO_SCHEME}{tmp_path}/demo.db"

    def open_backend(self, location: str, *, durability: str = "normal"):
        assert location.startswith(DEMO_SCHEME), location
        return SqliteBackend(Path(location[len(DEMO_SCHEME) :]), durability=durability)
