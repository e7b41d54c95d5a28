"""``memrev.store.store.Store`` is the framework-free store; ``memrev.VersionedStore`` adds AutoGen's ``Memory``.

The split must not change what either does: handles a store opens keep its
class, a plain ``Store`` holds AutoGen memories as well (the viewer reads them
that way), and only ``VersionedStore`` is a ``Memory`` or a ``Component``.
"""

import pytest
from ag2.knowledge import KnowledgeStore
from autogen_core.memory import Memory, MemoryContent, MemoryMimeType

import memrev
from memrev import ReadOnlyRevision, Store, VersionedStore
from memrev.autogen import MemoryRevisionView, VersionedMemory
from memrev.store.store import RevisionView

pytestmark = pytest.mark.anyio


def text(s: str) -> MemoryContent:
    return MemoryContent(content=s, mime_type=MemoryMimeType.TEXT)


async def test_a_store_is_a_knowledge_store_and_not_a_memory(tmp_path):
    async with Store(tmp_path / "s") as store:
        assert isinstance(store, KnowledgeStore)
        assert not isinstance(store, Memory)
        await store.write("/a.md", "one\n")
        view = store.at("HEAD")
        assert type(view) is RevisionView and not isinstance(view, Memory)
        assert isinstance(view, KnowledgeStore)
        assert await view.read("/a.md") == "one\n"
        with pytest.raises(ReadOnlyRevision):
            await view.write("/a.md", "two\n")
        assert not hasattr(store, "session") and not hasattr(store, "ag2_plugin")


async def test_the_versioned_store_is_the_store_and_a_memory(tmp_path):
    async with VersionedStore(tmp_path / "s") as store:
        assert isinstance(store, Store) and isinstance(store, Memory) and isinstance(store, KnowledgeStore)
        await store.add(text("likes tea"))
        view = store.at("HEAD")
        assert type(view) is MemoryRevisionView and isinstance(view, RevisionView) and isinstance(view, Memory)
        assert store.dump_component().provider == "memrev.autogen.VersionedMemory"


@pytest.mark.parametrize("cls", [Store, VersionedStore])
async def test_handles_a_store_opens_keep_its_class(tmp_path, cls):
    async with cls(tmp_path / "s") as store:
        await store.write("/a.md", "one\n")
        other = store.on_branch("main")
        fork = await store.branch("fork")
        try:
            assert type(other) is cls and type(fork) is cls
            assert await fork.read("/a.md") == "one\n"
        finally:
            other.close()
            fork.close()


async def test_a_named_memory_works_on_a_plain_store(tmp_path):
    """What the viewer's memory page does: AutoGen items read through a ``Store``."""
    async with VersionedStore(tmp_path / "s") as writer:
        await writer.memory("user").add(text("lives in Oslo"))
    async with Store(tmp_path / "s") as store:
        memory = VersionedMemory(store, "user")
        assert memory.store is store
        assert [i.content.content for i in await memory.items()] == ["lives in Oslo"]
        await memory.add(text("likes tea"))
        assert [c.content for c in (await memory.query()).results] == ["lives in Oslo", "likes tea"]


async def test_a_memory_opened_from_a_location_owns_a_store(tmp_path):
    async with VersionedStore(tmp_path / "s") as store:
        await store.memory("user").add(text("lives in Oslo"))
    memory = VersionedMemory(str(tmp_path / "s"), "user", author="bob")
    try:
        assert isinstance(memory.store, Store)
        assert [c.content for c in (await memory.query()).results] == ["lives in Oslo"]
    finally:
        await memory.close()
    with pytest.raises(memrev.StoreClosed):
        await memory.store.read("/")
