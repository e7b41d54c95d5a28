"""store.at(REV) is also an AutoGen Memory: answers as of REV, refuses mutations, writes nothing."""

import pytest
from autogen_agentchat.agents import AssistantAgent
from autogen_core.memory import Memory, MemoryContent, MemoryMimeType
from autogen_core.model_context import UnboundedChatCompletionContext
from autogen_ext.models.replay import ReplayChatCompletionClient

import memrev
from memrev import VersionedStore

pytestmark = pytest.mark.anyio


def text(s: str) -> MemoryContent:
    return MemoryContent(content=s, mime_type=MemoryMimeType.TEXT)


async def test_revision_view_is_a_read_only_memory(tmp_path):
    async with VersionedStore(tmp_path) as store:
        await store.add(text("likes tea"))
        await store.memory("user").add(text("lives in Oslo"))
        await store.write("/memory/working.md", "# v1\n")
        past = await store.resolve("HEAD")
        await store.add(text("likes coffee now"))
        await store.clear()

        view = store.at(past)
        assert isinstance(view, Memory)
        assert [c.content for c in (await view.query()).results] == ["likes tea"]
        assert [c.content for c in (await view.memory("user").query()).results] == ["lives in Oslo"]
        assert await view.read("/memory/working.md") == "# v1\n"

        ctx = UnboundedChatCompletionContext()
        result = await view.update_context(ctx)
        assert [m.content for m in await ctx.get_messages()] == [
            "\nRelevant memory content (in chronological order):\n1. likes tea\n"
        ]
        assert [c.content for c in result.memories.results] == ["likes tea"]

        log_before = [c.id for c in await store.log()]
        for call in (
            lambda: view.add(text("x")),
            lambda: view.clear(),
            lambda: view.memory("user").add(text("x")),
            lambda: view.memory("user").delete(1),
            lambda: view.write("/a", "b"),
            lambda: view.append("/a", "b"),
            lambda: view.delete("/memory"),
        ):
            with pytest.raises(memrev.ReadOnlyRevision):
                await call()
        assert [c.id for c in await store.log()] == log_before
        assert (await store.query()).results == []  # the head is untouched by the view


async def test_assistant_agent_replays_against_a_past_memory(tmp_path):
    async with VersionedStore(tmp_path) as store:
        await store.add(text("the user is vegetarian"))
        past = await store.resolve("HEAD")
        await store.clear()
        client = ReplayChatCompletionClient(["noted"])
        agent = AssistantAgent("chef", model_client=client, memory=[store.at(past)])
        result = await agent.run(task="what should I cook?")
        assert result.messages[-1].content == "noted"
        sent = client.create_calls[0]["messages"]
        assert any("1. the user is vegetarian" in str(m.content) for m in sent)
