"""The provenance record on commits (issue 11): ``store.provenance()``, task
safety, late attribution, and AutoGen's ``_meta`` lifting with a real
``AssistantAgent`` (``ReplayChatCompletionClient``) using memrev's history tools.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from autogen_agentchat.agents import AssistantAgent
from autogen_core import FunctionCall
from autogen_core.memory import MemoryContent, MemoryMimeType
from autogen_core.models import CreateResult, RequestUsage
from autogen_ext.models.replay import ReplayChatCompletionClient

from memrev import VersionedStore, errors, provenance
from memrev.autogen import InvalidMemoryContent, history_tools

pytestmark = pytest.mark.anyio


@pytest.fixture
async def store(tmp_path):
    s = VersionedStore(tmp_path / "s")
    yield s
    s.close()


async def head_meta(store: VersionedStore) -> dict:
    return (await store.show()).meta


async def test_fields_go_on_every_commit_made_inside(store):
    async with store.provenance(agent="concierge", session="s1", turn=2, source="test") as fields:
        assert fields == {"agent": "concierge", "session": "s1", "turn": 2, "source": "test"}
        await store.write("/a", "1")
        assert await head_meta(store) == fields
        await store.append("/a", "2")
        assert await head_meta(store) == fields
        await store.write("/b", "x")
        await store.delete("/b")
        assert await head_meta(store) == fields
        async with store.transaction(message="two files", meta={"batch": 1}):
            await store.write("/c", "c")
            await store.write("/d", "d")
        assert await head_meta(store) == {**fields, "batch": 1}
        restored = await store.restore("/a", (await store.log("/a"))[-1].id)
        assert (await store.show(restored)).meta == {**fields, "restore": {"path": "/a", "rev": (await store.log("/a"))[-1].id}}
    await store.write("/after", "no fields")
    assert await head_meta(store) == {}


async def test_explicit_meta_wins_and_inner_fields_win(store):
    async with store.provenance(agent="outer", tool="knowledge"):
        async with store.provenance(agent="inner", turn=3):
            await store.write("/a", "1", meta={"turn": 9, "note": "explicit"})
            assert await head_meta(store) == {"agent": "inner", "tool": "knowledge", "turn": 9, "note": "explicit"}
        await store.write("/a", "2")
        assert await head_meta(store) == {"agent": "outer", "tool": "knowledge"}


@pytest.mark.parametrize(
    "fields",
    [{"agnet": "typo"}, {"turn": "1"}, {"turn": 0}, {"turn": True}, {"agent": 5}, {"session": b"x"}],
)
async def test_bad_fields_are_refused_before_anything_is_written(store, fields):
    with pytest.raises(errors.InvalidContent):
        async with store.provenance(**fields):
            await store.write("/a", "never")
    assert await store.log() == []


async def test_two_concurrent_tasks_never_mix_their_fields(store):
    barrier = asyncio.Barrier(2)

    async def turn(name: str) -> None:
        async with store.provenance(agent=name, session=f"s-{name}", turn=1):
            for i in range(3):
                await store.write(f"/{name}/{i}", name)
                await barrier.wait()  # the other task writes between each of ours
                async with store.provenance(tool=f"tool-{name}", tool_call_id=f"{name}-{i}"):
                    await store.write(f"/{name}/t{i}", name)
                    await barrier.wait()

    await asyncio.gather(turn("alpha"), turn("beta"))
    for c in await store.log():
        owner = c.paths[0].split("/")[1]
        expected = {"agent": owner, "session": f"s-{owner}", "turn": 1}
        if "/t" in c.paths[0]:
            expected |= {"tool": f"tool-{owner}", "tool_call_id": f"{owner}-{c.paths[0][-1]}"}
        assert provenance.of(c.meta) == expected, c.paths


async def test_late_writes_are_attributed_to_the_streams_latest_turn(store):
    provenance.add_stream_locator(store, lambda p: p[len("/log/") : -len(".jsonl")] if p.startswith("/log/") else None)
    provenance.remember_turn(store, "s1", {"agent": "a", "session": "s1", "turn": 1})
    provenance.remember_turn(store, "s1", {"agent": "a", "session": "s1", "turn": 2})
    await store.write("/log/s1.jsonl", "{}\n")
    assert await head_meta(store) == {"agent": "a", "session": "s1", "turn": 2}
    await store.write("/log/unknown.jsonl", "{}\n")
    assert await head_meta(store) == {}
    await store.write("/memory/working.md", "x")  # no stream: nothing attributed
    assert await head_meta(store) == {}
    async with store.provenance(agent="b"):  # task-local fields come first
        await store.write("/log/s1.jsonl", "{}\n{}\n")
    assert await head_meta(store) == {"agent": "b"}


# ------------------------------------------------------------------ AutoGen


async def test_autogen_meta_is_lifted_and_the_item_keeps_its_metadata(store):
    memory = store.memory("user")
    metadata = {"_meta": {"agent": "chef", "turn": 4, "source": "chat", "thread": "t-9"}, "topic": "diet"}
    item = MemoryContent(content="The user is vegetarian", mime_type=MemoryMimeType.TEXT, metadata=metadata)
    async with store.provenance(session="sess-1", agent="ignored: the item declares its agent"):
        await memory.add(item)
    commit = await store.show()
    assert provenance.of(commit.meta) == {
        "agent": "chef",
        "framework": "autogen",
        "session": "sess-1",
        "turn": 4,
        "source": "chat",
    }
    assert commit.meta["autogen"]["memory"] == "user"
    (back,) = (await memory.query()).results
    assert back.metadata == metadata  # unknown _meta keys and other metadata untouched
    await memory.add(MemoryContent(content="plain", mime_type=MemoryMimeType.TEXT, metadata={"x": 1}))
    assert provenance.of((await store.show()).meta) == {"framework": "autogen"}


@pytest.mark.parametrize("bad", [{"_meta": "chef"}, {"_meta": {"turn": "4"}}, {"_meta": {"agent": 1}}])
async def test_bad_autogen_meta_is_refused_and_nothing_written(store, bad):
    memory = store.memory("user")
    with pytest.raises(InvalidMemoryContent):
        await memory.add(MemoryContent(content="x", mime_type=MemoryMimeType.TEXT, metadata=bad))
    assert await store.log() == []


def tool_call(call_id: str, name: str, **arguments) -> CreateResult:
    return CreateResult(
        finish_reason="function_calls",
        content=[FunctionCall(id=call_id, name=name, arguments=json.dumps(arguments))],
        usage=RequestUsage(prompt_tokens=0, completion_tokens=0),
        cached=False,
    )


async def test_assistant_agent_reads_a_past_version_and_restores_it(store):
    memory = store.memory("user")

    async def remember(fact: str) -> str:
        """Remember a fact about the user."""
        await memory.add(
            MemoryContent(content=fact, mime_type=MemoryMimeType.TEXT, metadata={"_meta": {"agent": "chef", "tool": "remember"}})
        )
        return "remembered"

    await store.write("/notes/diet.md", "vegetarian\n", message="v1")
    await store.write("/notes/diet.md", "eats pork\n", message="v2")
    v1 = (await store.log("/notes/diet.md"))[1].id
    client = ReplayChatCompletionClient(
        [
            tool_call("c1", "read_memory_version", path="/notes/diet.md", versions_back=1),
            tool_call("c2", "restore_memory_version", path="/notes/diet.md", rev=v1),
            tool_call("c3", "remember", fact="The user is vegetarian"),
            "Done.",
        ],
        model_info={"vision": False, "function_calling": True, "json_output": False, "family": "unknown", "structured_output": False},
    )
    agent = AssistantAgent(
        "chef", model_client=client, memory=[memory], tools=[*history_tools(store, agent="chef"), remember], max_tool_iterations=4
    )
    result = await agent.run(task="My diet note is wrong; fix it and remember it.")
    outputs = [str(m.content) for m in result.messages if type(m).__name__ == "ToolCallExecutionEvent"]
    assert any("vegetarian" in o for o in outputs)
    assert await store.read("/notes/diet.md") == "vegetarian\n"
    restore, *older = await store.log("/notes/diet.md")
    assert [c.message for c in older] == ["v2", "v1"]
    assert restore.meta["restore"]["rev"] == v1
    assert provenance.of(restore.meta) == {"agent": "chef", "framework": "autogen", "tool": "restore_memory_version"}
    added = await store.show()
    assert provenance.of(added.meta) == {"agent": "chef", "framework": "autogen", "tool": "remember"}
    assert [m.content for m in (await memory.query()).results] == ["The user is vegetarian"]


async def test_history_tools_list_versions_and_recent_turns(store):
    from memrev.frameworks.history_tools import make_history_tools

    memory_history, read_memory_version, recent_memory_changes, restore_memory_version = make_history_tools(store)
    await store.write("/boot.md", "no turn")
    for turn, text in ((1, "likes tea\n"), (2, "likes coffee\n"), (3, "likes coffee\nvegetarian\n")):
        async with store.provenance(agent="chef", session="s", turn=turn):
            await store.write("/memory/working.md", text)
            await store.write(f"/notes/{turn}.md", "n")
    listing = (await memory_history("/memory/working.md")).splitlines()
    assert [line.split(":")[0] for line in listing] == ["version 0", "version 1", "version 2"]
    assert "agent=chef session=s turn=3" in listing[0]
    assert (await read_memory_version("/memory/working.md", versions_back=2)).endswith("likes tea\n")
    assert "only 3 version(s)" in await read_memory_version("/memory/working.md", versions_back=3)
    assert "0 (the current version) or more" in await read_memory_version("/memory/working.md", versions_back=-1)
    last_two = await recent_memory_changes(turns=2)
    assert "+vegetarian" in last_two and "+likes coffee" in last_two and "+likes tea" not in last_two
    only_notes = await recent_memory_changes(turns=1, path="/notes")
    assert "/notes/3.md" in only_notes and "working.md" not in only_notes
    assert "Error:" in await restore_memory_version("/memory/working.md", "deadbeef00")
    assert len(await store.log()) == 7  # the tools above wrote nothing
