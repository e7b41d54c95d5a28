"""Real agents on a ``VersionedStore`` used as AutoGen memory, all offline.

* An ``AssistantAgent(memory=[store.memory("user")])`` driven by
  ``ReplayChatCompletionClient``: the model is sent the memory
  ``SystemMessage`` (exactly what a ``ListMemory`` agent sends), a
  ``MemoryQueryEvent`` is emitted, and ``save_state``/``load_state`` and
  ``dump_component``/``load_component`` work.
* One store used at once by an AG2 ``Agent`` (scripted ``TestConfig``,
  ``WorkingMemoryAggregate``) and an AutoGen ``AssistantAgent``: one history,
  the two kinds of commits interleaved; a new process sees everything.
* ``examples/shared_history.py`` runs and prints that history.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from ag2 import Agent, KnowledgeConfig
from ag2.aggregate import AggregateTrigger, WorkingMemoryAggregate
from ag2.events import ToolCallEvent
from ag2.knowledge import WORKING_MEMORY_PATH
from ag2.policies import WorkingMemoryPolicy
from ag2.testing import TestConfig, TrackingConfig
from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.messages import MemoryQueryEvent, TextMessage
from autogen_core.memory import ListMemory, Memory, MemoryContent, MemoryMimeType
from autogen_core.models import SystemMessage, UserMessage
from autogen_ext.models.replay import ReplayChatCompletionClient

from memrev import VersionedStore
from memrev.autogen import VersionedMemory

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "shared_history.py"

ITEMS = [
    MemoryContent(content="The user is vegetarian", mime_type=MemoryMimeType.TEXT, metadata={"source": "chat"}),
    MemoryContent(content={"city": "Lisbon", "dates": ["14 June", "16 June"]}, mime_type=MemoryMimeType.JSON),
]
MEMORY_TEXT = (
    "\nRelevant memory content (in chronological order):\n"
    "1. The user is vegetarian\n"
    "2. {'city': 'Lisbon', 'dates': ['14 June', '16 June']}\n"
)


def memory_messages(messages) -> list[SystemMessage]:
    return [m for m in messages if isinstance(m, SystemMessage) and "Relevant memory content" in m.content]


async def run_agent(memory: Memory, replies: list[str], task: str):
    client = ReplayChatCompletionClient(replies)
    agent = AssistantAgent("chef", model_client=client, memory=[memory], system_message="You are a chef.")
    result = await agent.run(task=task)
    return agent, client, result


async def test_assistant_agent_with_versioned_memory(tmp_path):
    store = VersionedStore(tmp_path / "state")
    try:
        memory = store.memory("user")
        for item in ITEMS:
            await memory.add(item)

        agent, client, result = await run_agent(memory, ["Try a chickpea curry."], "What should I cook tonight?")

        # a MemoryQueryEvent with exactly the stored items, then the reply
        events = [m for m in result.messages if isinstance(m, MemoryQueryEvent)]
        assert len(events) == 1
        assert events[0].source == "chef"
        assert events[0].content == ITEMS
        assert isinstance(result.messages[-1], TextMessage)
        assert result.messages[-1].content == "Try a chickpea curry."

        # what the model was sent: the system prompt, the task, then the memory message
        (call,) = client.create_calls
        sent = list(call["messages"])
        assert sent == [
            SystemMessage(content="You are a chef."),
            UserMessage(content="What should I cook tonight?", source="user"),
            SystemMessage(content=MEMORY_TEXT),
        ]

        # exactly what an agent with a ListMemory holding the same items sends
        _, oracle_client, oracle_result = await run_agent(
            ListMemory(memory_contents=list(ITEMS)), ["Try a chickpea curry."], "What should I cook tonight?"
        )
        assert list(oracle_client.create_calls[0]["messages"]) == sent
        assert [type(m) for m in oracle_result.messages] == [type(m) for m in result.messages]

        # --- save_state / dump_component -> a new agent on the same store ---
        state = await agent.save_state()
        assert memory_messages(await agent.model_context.get_messages()) == [SystemMessage(content=MEMORY_TEXT)]
        config = agent.dump_component()
        (memory_config,) = config.config["memory"]
        assert memory_config["provider"] == "memrev.autogen.VersionedMemory"
        assert memory_config["config"]["name"] == "user"
        assert memory_config["config"]["location"] == str((tmp_path / "state").resolve())

        loaded = AssistantAgent.load_component(json.loads(config.model_dump_json()))
        loaded_memory = loaded._memory[0]  # noqa: SLF001 - AssistantAgent has no public accessor
        try:
            assert isinstance(loaded_memory, VersionedMemory)
            assert loaded_memory.store is not store
            await loaded.load_state(state)
            assert await loaded.save_state() == state
            assert await loaded.model_context.get_messages() == await agent.model_context.get_messages()
            assert loaded.dump_component() == config

            # an item added through the original store reaches the loaded agent's model
            await memory.add(MemoryContent(content="Allergic to peanuts", mime_type="text/plain"))
            result2 = await loaded.run(task="And tomorrow?")
            (event,) = [m for m in result2.messages if isinstance(m, MemoryQueryEvent)]
            assert [c.content for c in event.content] == [ITEMS[0].content, ITEMS[1].content, "Allergic to peanuts"]
            latest = memory_messages(await loaded.model_context.get_messages())[-1]
            assert latest.content.endswith("3. Allergic to peanuts\n")
        finally:
            await loaded_memory.close()

        # the commits the memory made, in the store's one history
        assert [c.message for c in await store.log()] == [
            "memory 'user': add item 3 (text/plain)",
            "memory 'user': add item 2 (application/json)",
            "memory 'user': add item 1 (text/plain)",
        ]
    finally:
        store.close()


async def test_store_itself_as_agent_memory(tmp_path):
    async with VersionedStore(tmp_path / "state") as store:
        await store.add(ITEMS[0])
        agent, client, result = await run_agent(store, ["Noted."], "Hi")
        (event,) = [m for m in result.messages if isinstance(m, MemoryQueryEvent)]
        assert event.content == [ITEMS[0]]
        assert memory_messages(client.create_calls[0]["messages"]) == [
            SystemMessage(content="\nRelevant memory content (in chronological order):\n1. The user is vegetarian\n")
        ]
        (memory_config,) = agent.dump_component().config["memory"]
        assert memory_config["config"]["name"] == "default"
        loaded = AssistantAgent.load_component(agent.dump_component())
        try:
            assert await loaded._memory[0].query() == await store.query()  # noqa: SLF001
        finally:
            await loaded._memory[0].close()  # noqa: SLF001


async def test_empty_memory_sends_nothing_and_emits_no_event(tmp_path):
    async with VersionedStore(tmp_path / "state") as store:
        _, client, result = await run_agent(store.memory("nobody"), ["Hello!"], "Hi")
        assert not any(isinstance(m, MemoryQueryEvent) for m in result.messages)
        assert memory_messages(client.create_calls[0]["messages"]) == []


# --------------------------------------------------------------------------
# AG2 and AutoGen on one store
# --------------------------------------------------------------------------

FIRST_ITEM = "/autogen/user/items/000000000001.json"
WM1 = "# Working memory\n\n## User\n- Name: Dana\n- Visiting Lisbon 14-16 June\n"
WM2 = WM1 + "- Vegetarian (noted by the chef)\n"


class ScriptedConfig(TestConfig):
    """One client for the whole script: ag2 calls ``create()`` per ask (see test_ag2_agent.py)."""

    def __init__(self, *turns) -> None:
        super().__init__(*turns)
        self._client = super().create()

    def create(self):
        return self._client


REOPEN = textwrap.dedent(
    """
    import asyncio, json, sys
    from memrev import VersionedStore

    async def main():
        async with VersionedStore(sys.argv[1]) as store:
            items = (await store.memory("user").query()).results
            print(json.dumps({
                "items": [[i.content, i.mime_type if isinstance(i.mime_type, str) else i.mime_type.name, i.metadata]
                          for i in items],
                "working": await store.read(sys.argv[2]),
                "log": [c.id for c in await store.log()],
            }))

    asyncio.run(main())
    """
)


@pytest.mark.slow  # measured >= 0.3 s: kept out of the quick loop
async def test_ag2_and_autogen_agents_share_one_store(tmp_path):
    state = tmp_path / "state"
    store = VersionedStore(state)
    try:
        model = TrackingConfig(
            ScriptedConfig(
                "Welcome, Dana!",
                ToolCallEvent("knowledge", arguments=json.dumps({"action": "read", "path": FIRST_ITEM})),
                "You are vegetarian, noted.",
            )
        )
        concierge = Agent(
            "concierge",
            "You are a travel concierge.",
            config=model,
            knowledge=KnowledgeConfig(
                store=store,
                aggregate=WorkingMemoryAggregate(config=ScriptedConfig(WM1, WM2)),
                aggregate_trigger=AggregateTrigger(on_end=True),
            ),
            assembly=[WorkingMemoryPolicy()],
        )
        prefs = store.memory("user")
        chef_client = ReplayChatCompletionClient(["Curry tonight.", "Salad tomorrow."])
        chef = AssistantAgent("chef", model_client=chef_client, memory=[prefs])

        # interleave: AG2 ask, AutoGen add + run, AG2 ask, AutoGen add + run
        assert (await concierge.ask("Hi, I'm Dana, in Lisbon 14-16 June.")).body == "Welcome, Dana!"
        await prefs.add(MemoryContent(content="Dana is vegetarian", mime_type=MemoryMimeType.TEXT))
        first = await chef.run(task="Dinner idea?")
        assert (await concierge.ask("What did the chef note about me?")).body == "You are vegetarian, noted."
        await prefs.add(MemoryContent(content={"allergies": ["peanuts"]}, mime_type=MemoryMimeType.JSON))
        second = await chef.run(task="And tomorrow?")

        # each side saw the other's writes
        assert [len(m.content) for m in first.messages if isinstance(m, MemoryQueryEvent)] == [1]
        assert [len(m.content) for m in second.messages if isinstance(m, MemoryQueryEvent)] == [2]
        assert memory_messages(chef_client.create_calls[1]["messages"])[-1].content.endswith(
            "1. Dana is vegetarian\n2. {'allergies': ['peanuts']}\n"
        )
        # what the AG2 model got back from `knowledge read` of the AutoGen item
        (tool_result,) = model.mock.call_args_list[2].args[0].results
        read_back = "".join(str(getattr(part, "content", part)) for part in tool_result.result.parts)
        assert json.loads(read_back)["content"] == "Dana is vegetarian"
        assert f"## Working Memory\n\n{WM1}" in model.calls[1].prompt

        # one history, both kinds of commits interleaved
        log = list(reversed(await store.log()))  # oldest first
        kinds = ["autogen" if "autogen" in c.meta else "ag2" for c in log]
        assert kinds.count("autogen") == 2
        first_add = kinds.index("autogen")
        second_add = len(kinds) - 1 - kinds[::-1].index("autogen")
        assert "ag2" in kinds[:first_add] and "ag2" in kinds[first_add + 1 : second_add]
        assert log[first_add].message == "memory 'user': add item 1 (text/plain)"
        assert log[second_add].message == "memory 'user': add item 2 (application/json)"
        wm = [i for i, c in enumerate(log) if WORKING_MEMORY_PATH in c.paths]
        assert len(wm) == 2 and wm[0] < first_add < wm[1] < second_add
        assert [c.id for c in await store.log(WORKING_MEMORY_PATH)] == [log[wm[1]].id, log[wm[0]].id]
        assert [c.id for c in await prefs.log()] == [log[second_add].id, log[first_add].id]
        assert len({c.id for c in log}) == len(log)
        # each side is readable as of the other's commits
        assert (await prefs.query(rev=log[wm[1]].id)).results[0].content == "Dana is vegetarian"
        assert await store.read(WORKING_MEMORY_PATH, rev=log[first_add].id) == WM1
        log_ids = [c.id for c in await store.log()]
    finally:
        store.close()

    # a new process reopening the folder sees all items and the AG2 files
    proc = subprocess.run(
        [sys.executable, "-c", REOPEN, str(state), WORKING_MEMORY_PATH],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout)
    assert seen["items"] == [["Dana is vegetarian", "TEXT", None], [{"allergies": ["peanuts"]}, "JSON", None]]
    assert seen["working"] == WM2
    assert seen["log"] == log_ids


@pytest.mark.slow
def test_example_runs_offline_and_prints_the_shared_history(tmp_path):
    state = tmp_path / "demo"
    for _ in range(2):  # repeatable: the second run wipes the first one's store
        proc = subprocess.run(
            [sys.executable, str(EXAMPLE), str(state)], capture_output=True, text=True, timeout=60, cwd=tmp_path
        )
        assert proc.returncode == 0, proc.stderr
        out = proc.stdout
        assert "[AG2 concierge]  Welcome, Dana!" in out
        assert "[AutoGen chef]   Tonight: a spicy chickpea and spinach curry." in out
        assert "1. Dana is vegetarian" in out
        history = out.split("Shared history, newest first:", 1)[1].split("Explore it yourself", 1)[0]
        rows = [line.split(None, 2) for line in history.strip().splitlines()]
        assert all(len(r[0]) == 7 for r in rows)
        sides = [r[1] for r in rows]
        assert sides.count("AutoGen") == 2 and "AG2" in sides[: sides.index("AutoGen")]
        assert sides[-1] == "AG2"  # the bootstrap came first
        assert "memory 'user': add item 1 (text/plain)" in history
        assert "write /memory/working.md" in history
        assert f"memrev --store {state} log /autogen/user" in out
    # a folder that is not a memrev store is never wiped
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "keep.txt").write_text("keep")
    proc = subprocess.run([sys.executable, str(EXAMPLE), str(precious)], capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and (precious / "keep.txt").read_text() == "keep"
