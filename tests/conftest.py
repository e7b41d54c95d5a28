import pytest


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
