"""Fixtures every test module shares.

* ``pg_server`` / ``pg_url`` / ``pg_module_url``: the throwaway PostgreSQL
  server (one per session) from memrev's own pytest plugin;
* ``quickstart_store`` / ``hostile_store``: the viewer's stores (``viewer_stores.py``),
  built once per session;
* ``anyio_backend``: the async tests run on asyncio.

Plain helper functions (``snapshot``, ``apply_steps``, ``spawn`` ...) are in
``tests/helpers.py``.
"""

import pytest

# Plugins, not imports into each test module: a fixture imported into a module
# is a separate definition there, so a session-scoped one (a PostgreSQL server,
# a built store) was set up again by every module that imported it.
pytest_plugins = ["memrev.testing.fixtures", "viewer_stores"]


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture(params=["sqlite", "memory"])
def store_location(request, tmp_path):
    """A fresh store location on the embedded default (a folder) and on the in-memory backend,
    so a test file's scenarios also check the backend contract's defaults and the memory backend."""
    if request.param == "sqlite":
        yield tmp_path / "store"
        return
    from memrev.backends import memory

    name = f"test-{tmp_path.name}-{id(tmp_path)}"
    yield f"memory://{name}"
    memory.drop(name)
