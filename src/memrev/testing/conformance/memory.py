"""The AutoGen memory, against autogen_core's ``ListMemory``."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ...versioned_store import VersionedStore
from .base import ConformanceBase


def _canon(item: Any) -> tuple:
    mime = item.mime_type
    return (type(item.content).__name__, item.content, str(getattr(mime, "value", mime)),
            json.dumps(item.metadata, sort_keys=True))


class MemoryContracts(ConformanceBase):
    """``test_memory_*``: the AutoGen memory against ``ListMemory`` (a mixin of ``BackendConformance``)."""

    @pytest.mark.anyio
    async def test_memory_matches_list_memory(self, memrev_location: str):
        from autogen_core.memory import ListMemory, MemoryContent, MemoryMimeType
        from autogen_core.model_context import UnboundedChatCompletionContext

        text, js = MemoryMimeType.TEXT, MemoryMimeType.JSON
        steps: list[Any] = [
            MemoryContent(content="likes tea", mime_type=text),
            MemoryContent(content={"city": "Lyon", "n": [1, 2]}, mime_type=js, metadata={"src": "chat"}),
            "check",
            MemoryContent(content="é 日本 😀", mime_type=text),
            "check",
            "clear",
            "check",
            MemoryContent(content="after clear", mime_type=text, metadata={"k": 1}),
            "check",
        ]
        async with VersionedStore(memrev_location) as store:
            for mine in (store.memory("conformance"), store):  # a named memory, and the store's default one
                oracle = ListMemory()
                checkpoints = []
                for step in steps:
                    if step == "clear":
                        await oracle.clear()
                        await mine.clear()
                    elif step == "check":
                        o, m = await oracle.query("q"), await mine.query("q")
                        assert [_canon(i) for i in m.results] == [_canon(i) for i in o.results]
                        o_ctx, m_ctx = UnboundedChatCompletionContext(), UnboundedChatCompletionContext()
                        o_res, m_res = await oracle.update_context(o_ctx), await mine.update_context(m_ctx)
                        assert await m_ctx.get_messages() == await o_ctx.get_messages()
                        assert [_canon(i) for i in m_res.memories.results] == [
                            _canon(i) for i in o_res.memories.results]
                        checkpoints.append((await store.resolve("HEAD"), [_canon(i) for i in o.results]))
                    else:
                        await oracle.add(step)
                        await mine.add(step)
                named = mine if mine is not store else store.memory()
                for rev, expected in checkpoints:  # each state stays readable at its revision
                    assert [_canon(i) for i in (await named.at(rev).query()).results] == expected
            assert await store.fsck() == []

