"""docs/backends.md's toy backend, taken from the page itself: a third party's backend
written from the doc alone passes the conformance suite and serves a ``VersionedStore``.

The ```python block that starts with ``# toy_backend.py`` is loaded as the module
``toy_backend``, registered under ``toy://`` and run through ``BackendConformance``
(test_docs_snippets.py leaves that block to this file: it is marked ``not run`` there).
"""

from __future__ import annotations

import itertools
import os
import re
import sys
import types
from pathlib import Path

import pytest

pytest.register_assert_rewrite("memrev.testing.conformance")

from memrev import VersionedStore, backends  # noqa: E402
from memrev.backends.base import BackendBase  # noqa: E402
from memrev.testing.conformance import BackendConformance  # noqa: E402

DOC = Path(__file__).resolve().parents[1] / "docs" / "backends.md"
FIRST_LINE = "# toy_backend.py"


def toy_source() -> str:
    """The toy backend's block of docs/backends.md."""
    blocks = re.findall(r"^```python\n(.*?)^```$", DOC.read_text(), re.S | re.M)
    [code] = [b for b in blocks if b.startswith(FIRST_LINE)]
    return code


def _load() -> types.ModuleType:
    module = types.ModuleType("toy_backend")
    module.__file__ = f"{DOC}#toy_backend"
    sys.modules["toy_backend"] = module  # dataclasses and pickle look a class's module up here
    exec(compile(toy_source(), module.__file__, "exec"), module.__dict__)
    return module


toy = _load()
_names = itertools.count()


@pytest.fixture
def toy_scheme():
    backends.register("toy", toy.ToyBackend.from_url)
    yield "toy://"
    backends.unregister("toy")


def _fresh(stem: str) -> str:
    return f"toy://{stem}-{os.getpid()}-{next(_names)}"


def test_the_toy_is_the_primitives_and_nothing_else():
    """Every abstract method implemented, no default overridden: the doc's backend is the contract's minimum."""
    assert not toy.ToyBackend.__abstractmethods__
    defaults = {
        name
        for cls in BackendBase.__mro__
        if cls.__module__ == BackendBase.__module__
        for name, value in vars(cls).items()
        if callable(value) and not getattr(value, "__isabstractmethod__", False)
    }
    assert not defaults & set(vars(toy.ToyBackend)), "the toy backend must use the defaults, not override them"
    assert not toy.ToyBackend.local and not toy.ToyBackend.savepoints and not toy.ToyBackend.computes_links


class TestToyBackendConformance(BackendConformance):
    @pytest.fixture(autouse=True)
    def _registered(self, toy_scheme):
        yield

    def make_location(self, tmp_path: Path) -> str:
        return _fresh("conf")

    def drop_location(self, location: str) -> None:
        toy.STORES.pop(location.split("://", 1)[1], None)


@pytest.mark.anyio
async def test_a_versioned_store_on_the_toy_backend_round_trips(toy_scheme):
    """Write, append, read back, history, a branch merged back, a second handle, fsck and gc."""
    location = _fresh("round-trip")
    async with VersionedStore(location, author="a") as store:
        await store.write("/notes.md", "one\n")
        await store.write("/notes.md", "one\ntwo\n")
        await store.append("/log.txt", "first\n")
        await store.append("/log.txt", "second\n")
        assert await store.read("/notes.md") == "one\ntwo\n"
        assert await store.read("/log.txt") == "first\nsecond\n"
        assert len(await store.history("/notes.md")) == 2
        side = await store.branch("side")
        try:
            await side.write("/side.md", "from side\n")
            assert (await store.merge("side")).status == "merged"
        finally:
            side.close()
        assert await store.fsck() == []
        await store.gc(keep_seconds=0)
        assert await store.fsck() == []
    async with VersionedStore(location, author="b", create=False) as again:  # the handles of a name share it
        assert await again.read("/side.md") == "from side\n"
        assert len(await again.log()) == 6  # four writes, the side one, the merge
    toy.STORES.pop(location.split("://", 1)[1], None)
