"""``memrev.autogen.TieredMemory``: chat context -> short-term -> long-term, versioned.

Summaries come from AutoGen's ``ReplayChatCompletionClient`` (offline),
subclassed here only to keep what it was asked to summarise. Covered:
exact promotion boundaries, chat-context compression, query/clear, the two
tools, one commit per promotion whose diff shows what the summary dropped,
config round trip, restart persistence, two processes adding at once, a
real ``AssistantAgent``, and the example.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import anyio
import pytest
from autogen_agentchat.agents import AssistantAgent
from autogen_core import CancellationToken, FunctionCall
from autogen_core.memory import Memory, MemoryContent, MemoryMimeType
from autogen_core.model_context import UnboundedChatCompletionContext
from autogen_core.models import AssistantMessage, CreateResult, RequestUsage, SystemMessage, UserMessage
from autogen_ext.models.replay import ReplayChatCompletionClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memrev import VersionedStore, errors
from memrev.autogen import InvalidMemoryContent, TieredMemory
from memrev.frameworks.tiered import InvalidTierSettings, kept_count

pytestmark = pytest.mark.anyio
ROOT = Path(__file__).resolve().parents[1]


class RecordingReplay(ReplayChatCompletionClient):
    """The replay client, keeping the prompts it was sent."""

    def __init__(self, replies, **kwargs):
        super().__init__(replies, **kwargs)
        self.prompts: list[str] = []
        self.calls: list[list] = []

    async def create(self, messages, **kwargs):
        self.prompts.append(messages[-1].content if messages else "")
        self.calls.append(list(messages))
        return await super().create(messages, **kwargs)


def text(s: str) -> MemoryContent:
    return MemoryContent(content=s, mime_type=MemoryMimeType.TEXT)


def summaries(n: int) -> list[str]:
    return [f"summary {i}" for i in range(1, n + 1)]


async def tier_ids(memory: TieredMemory) -> tuple[list[int], list[int]]:
    return [i.id for i in await memory.short_term.items()], [i.id for i in await memory.long_term.items()]


# ------------------------------------------------------------------ the overflow rule


@pytest.mark.parametrize(
    ("capacity", "ratio", "kept"), [(4, 0.5, 2), (10, 0.8, 8), (3, 0.0, 0), (3, 1.0, 3), (100, 0.29, 29), (7, 0.5, 3)]
)
def test_kept_count_is_floor_of_capacity_times_ratio(capacity, ratio, kept):
    assert kept_count(capacity, ratio) == kept


async def test_fifth_add_keeps_two_and_moves_three(tmp_path):
    async with VersionedStore(tmp_path / "s") as store:
        client = RecordingReplay(summaries(5))
        memory = TieredMemory(store, "mea", client, short_term_capacity=4, keep_ratio=0.5)
        for i in range(1, 5):
            await memory.add(text(f"fact {i}"))
        assert await tier_ids(memory) == ([1, 2, 3, 4], [])  # at capacity: nothing moves
        assert client.prompts == []
        await memory.add(text("fact 5"))
        assert await tier_ids(memory) == ([4, 5], [1])
        assert client.prompts == ["1. fact 1\n2. fact 2\n3. fact 3"]
        summary = (await memory.long_term.items())[0].content
        assert summary.content == "summary 1"
        assert summary.metadata == {"summary_of": {"tier": "short-term", "items": [1, 2, 3]}}
        for i in range(6, 9):  # 4,5,6,7 is at capacity; the 8th moves 4,5,6
            await memory.add(text(f"fact {i}"))
        assert await tier_ids(memory) == ([7, 8], [1, 2])
        assert client.prompts[-1] == "1. fact 4\n2. fact 5\n3. fact 6"


def reference_tiers(adds: int, capacity: int, ratio: float) -> tuple[list[int], list[list[int]]]:
    """The overflow rule written out plainly: short-term ids, and the ids each long-term summary replaced."""
    short: list[int] = []
    long: list[list[int]] = []
    for n in range(1, adds + 1):
        short.append(n)
        if len(short) > capacity:
            keep = kept_count(capacity, ratio)
            long.append(short[: len(short) - keep])
            short = short[len(short) - keep :]
    return short, long


_names = iter(range(10**6))


@pytest.mark.slow  # 1.1 s in the quick loop: hypothesis, 25 memories with up to 14 adds each
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(adds=st.integers(0, 14), capacity=st.integers(1, 5), ratio=st.sampled_from([0.0, 0.2, 0.5, 0.8, 1.0]))
def test_overflow_rule_matches_the_reference(shared_store, adds, capacity, ratio):
    async def run():
        memory = TieredMemory(shared_store, f"m{next(_names)}", ReplayChatCompletionClient(summaries(adds)),
                              short_term_capacity=capacity, keep_ratio=ratio)
        for i in range(adds):
            await memory.add(text(f"fact {i + 1}"))
        short = [e.id for e in await memory.short_term.items()]
        long = [e.content.metadata["summary_of"]["items"] for e in await memory.long_term.items()]
        promotions = [c for c in await memory.log() if c.meta["autogen"]["op"] == "promote"]
        return short, long, len(promotions)

    short, long, promotions = asyncio.run(run())
    assert (short, long) == reference_tiers(adds, capacity, ratio)
    assert promotions == len(long)  # one commit per promotion


@pytest.fixture(scope="module")
def shared_store(tmp_path_factory):
    store = VersionedStore(tmp_path_factory.mktemp("tiers") / "state")
    yield store
    store.close()


async def test_each_promotion_is_one_commit_whose_diff_shows_what_moved(tmp_path):
    async with VersionedStore(tmp_path / "s") as store:
        memory = TieredMemory(store, "mea", ReplayChatCompletionClient(summaries(3)), short_term_capacity=4, keep_ratio=0.5)
        for i in range(1, 6):
            await memory.add(text(f"fact {i}"))
        log = await memory.log()
        assert [c.message for c in log[:2]] == [
            "tiered memory 'mea': promote short-term entries 1-3 to long-term entry 1 (summary)",
            "tiered memory 'mea': add short-term entry 5",
        ]
        promotion = log[0]
        assert promotion.meta["autogen"]["items"] == [1, 2, 3]
        changes = {c.path: c for c in await store.diff(f"{promotion.id}~1", promotion.id)}
        short, long = "/autogen/mea/short-term/items", "/autogen/mea/long-term"
        assert sorted(changes) == sorted(
            [f"{short}/00000000000{i}.json" for i in (1, 2, 3)] + [f"{long}/items/000000000001.json", f"{long}/last-id"]
        )
        # the originals are readable just before the promotion
        before = await memory.short_term.items(rev=f"{promotion.id}~1")
        assert [i.content.content for i in before] == [f"fact {i}" for i in range(1, 6)]


async def test_chat_context_compression(tmp_path):
    async with VersionedStore(tmp_path / "s") as store:
        memory = TieredMemory(store, "mea", RecordingReplay(summaries(2)), context_capacity=10, short_term_capacity=10)
        await memory.save_to_long_term("The user's dog is called Biscuit.")
        context = UnboundedChatCompletionContext()
        chat = []
        for i in range(6):
            chat += [UserMessage(content=f"question {i}", source="user"), AssistantMessage(content=f"answer {i}", source="bot")]
        chat.append(UserMessage(content="What is my dog called?", source="user"))
        for m in chat:
            await context.add_message(m)

        result = await memory.update_context(context)

        # 13 > 10: the newest floor(10 * 0.8) = 8 stay, the 5 older become one short-term entry
        messages = await context.get_messages()
        assert messages[:-1] == chat[5:]
        assert isinstance(messages[-1], SystemMessage)
        assert messages[-1].content == (
            "\nShort-term memory (in chronological order):\n1. summary 1\n\n"
            "Long-term memory matching the last user message:\n1. The user's dog is called Biscuit.\n"
        )
        assert [c.content for c in result.memories.results] == ["summary 1", "The user's dog is called Biscuit."]
        assert memory._model_client.prompts[0].startswith("1. UserMessage (user): question 0\n2. AssistantMessage (bot): answer 0")
        entry = (await memory.short_term.items())[0]
        archive = entry.content.metadata["summary_of"]["archive"]
        assert entry.content.metadata["summary_of"]["messages"] == 5
        assert [m["content"] for m in json.loads(await store.read(archive))] == [m.content for m in chat[:5]]
        assert (await memory.log())[0].message == "tiered memory 'mea': promote 5 chat messages to short-term entry 1 (summary)"

        # again: the old memory message is replaced, 9 messages fit, nothing is promoted
        await memory.update_context(context)
        messages = await context.get_messages()
        assert messages[:-1] == chat[5:] and isinstance(messages[-1], SystemMessage)
        assert len(await memory.short_term.items()) == 1


async def test_chat_compression_cascades_into_long_term(tmp_path):
    async with VersionedStore(tmp_path / "s") as store:
        memory = TieredMemory(store, "mea", ReplayChatCompletionClient(summaries(4)),
                              context_capacity=2, short_term_capacity=2, keep_ratio=0.5)
        for i in range(1, 3):
            await memory.add(text(f"fact {i}"))
        context = UnboundedChatCompletionContext()
        for i in range(3):
            await context.add_message(UserMessage(content=f"message {i}", source="user"))
        await memory.update_context(context)
        # chat: 3 > 2 keeps 1, two go to short-term entry 3; short-term: 3 > 2 keeps 1, moves 1 and 2
        assert await tier_ids(memory) == ([3], [1])
        assert [m.content for m in (await context.get_messages())[:-1]] == ["message 2"]


async def test_query_and_clear(tmp_path):
    async with VersionedStore(tmp_path / "s") as store:
        memory = TieredMemory(store, "mea", ReplayChatCompletionClient([]))
        await memory.save_to_long_term("Dana lives in Lisbon")
        await memory.add(text("Dana is vegetarian"))
        await memory.add(text("Dana likes Lisbon in June"))
        everything = await memory.query()
        assert [c.content for c in everything.results] == [
            "Dana is vegetarian", "Dana likes Lisbon in June", "Dana lives in Lisbon",
        ]
        ranked = await memory.query("Lisbon")
        assert [c.content for c in ranked.results] == ["Dana likes Lisbon in June", "Dana lives in Lisbon"]
        assert all("score" in c.metadata for c in ranked.results)
        await memory.clear()
        assert (await memory.query()).results == []
        assert (await memory.log())[0].message == "tiered memory 'mea': clear 2 short-term and 1 long-term entries"
        assert len(await memory.short_term.items(rev="HEAD~1")) == 2  # cleared, not lost
        await memory.clear()  # nothing left: no commit
        assert (await memory.log())[0].message.startswith("tiered memory 'mea': clear")
        assert len(await memory.log()) == 4


async def test_tools(tmp_path):
    async with VersionedStore(tmp_path / "s") as store:
        memory = TieredMemory(store, "mea", ReplayChatCompletionClient([]))
        lookup, save = memory.tools()
        assert (lookup.name, save.name) == ("lookup_from_long_term_memory", "save_to_long_term_memory")
        token = CancellationToken()
        assert await save.run_json({"content": "Passport number ends in 42"}, token) == "Saved to long-term memory as entry 1."
        assert await lookup.run_json({"hint": "passport"}, token) == "1. Passport number ends in 42"
        assert await lookup.run_json({"hint": "weather"}, token) == "Nothing in long-term memory matches."
        assert await memory.short_term.items() == []


async def test_bad_input_is_refused_with_nothing_written(tmp_path):
    async with VersionedStore(tmp_path / "s") as store:
        client = ReplayChatCompletionClient([])
        for kwargs in ({"short_term_capacity": 0}, {"context_capacity": 1.5}, {"keep_ratio": 1.2}, {"k": 0}, {"keep_ratio": True}):
            with pytest.raises(InvalidTierSettings):
                TieredMemory(store, "mea", client, **kwargs)
        memory = TieredMemory(store, "mea", client)
        with pytest.raises(InvalidMemoryContent):
            await memory.add("not a MemoryContent")
        with pytest.raises(errors.InvalidContent):
            await memory.save_to_long_term(b"bytes")
        with pytest.raises(TypeError):
            TieredMemory(store, "mea", "not a client")
        assert await store.log() == []


async def test_update_context_with_empty_tiers_adds_nothing(tmp_path):
    async with VersionedStore(tmp_path / "s") as store:
        memory = TieredMemory(store, "mea", ReplayChatCompletionClient([]))
        context = UnboundedChatCompletionContext()
        await context.add_message(UserMessage(content="hello", source="user"))
        result = await memory.update_context(context)
        assert result.memories.results == []
        assert [m.content for m in await context.get_messages()] == ["hello"]
        assert await store.log() == []


async def test_an_assistant_agent_holding_it_can_be_dumped(tmp_path):
    async with VersionedStore(tmp_path / "s") as store:
        memory = TieredMemory(store, "mea", ReplayChatCompletionClient(["s"]), k=2)
        agent = AssistantAgent("concierge", model_client=ReplayChatCompletionClient(["hi"]), memory=[memory])
        dumped = agent.dump_component()
        assert dumped.config["memory"][0]["provider"] == "memrev.autogen.TieredMemory"
        loaded = AssistantAgent.load_component(dumped)
        assert isinstance(loaded._memory[0], TieredMemory) and loaded._memory[0].k == 2
        await loaded._memory[0].close()


async def test_config_round_trip(tmp_path):
    async with VersionedStore(tmp_path / "s") as store:
        memory = TieredMemory(store, "mea", ReplayChatCompletionClient(["s"]), short_term_capacity=4, keep_ratio=0.5, k=2)
        await memory.add(text("fact 1"))
        config = memory.dump_component()
        assert config.provider == "memrev.autogen.TieredMemory"
        loaded = Memory.load_component(config)
        try:
            assert isinstance(loaded, TieredMemory)
            assert (loaded.short_term_capacity, loaded.keep_ratio, loaded.k, loaded.context_capacity) == (4, 0.5, 2, 10)
            assert [c.content for c in (await loaded.query()).results] == ["fact 1"]
            assert loaded.dump_component() == config
        finally:
            await loaded.close()
        assert (await memory.query()).results  # closing the loaded copy leaves this store open


@pytest.mark.slow  # measured >= 0.3 s: kept out of the quick loop
async def test_restart_keeps_every_tier(tmp_path):
    location = tmp_path / "s"
    store = VersionedStore(location)
    memory = TieredMemory(store, "mea", ReplayChatCompletionClient(summaries(1)), short_term_capacity=2, keep_ratio=0.5)
    for i in range(1, 4):
        await memory.add(text(f"fact {i}"))
    store.close()
    code = textwrap.dedent(
        f"""
        import asyncio
        from autogen_ext.models.replay import ReplayChatCompletionClient
        from memrev import VersionedStore
        from memrev.autogen import TieredMemory
        async def main():
            async with VersionedStore({str(location)!r}) as store:
                m = TieredMemory(store, "mea", ReplayChatCompletionClient([]))
                print([c.content for c in (await m.query()).results])
        asyncio.run(main())
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['fact 3', 'summary 1']"


WRITER = textwrap.dedent(
    """
    import asyncio, os, sys, time
    from autogen_core.memory import MemoryContent, MemoryMimeType
    from autogen_ext.models.replay import ReplayChatCompletionClient
    from memrev import VersionedStore
    from memrev.autogen import TieredMemory

    async def main(location, who, count):
        async with VersionedStore(location, author=who) as store:
            memory = TieredMemory(store, "shared", ReplayChatCompletionClient([f"{who} summary {i}" for i in range(200)]),
                                  short_term_capacity=4, keep_ratio=0.5)
            open(location + "." + who + ".ready", "w").close()
            while not os.path.exists(location + ".go"):  # start together, so the adds interleave
                time.sleep(0.005)
            for i in range(count):
                await memory.add(MemoryContent(content=f"{who} fact {i}", mime_type=MemoryMimeType.TEXT))

    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
    """
)


@pytest.mark.slow
async def test_two_processes_adding_at_once_lose_nothing(tmp_path):
    location = str(tmp_path / "s")
    VersionedStore(location).close()
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, location, who, "15"], env=os.environ.copy())
               for who in ("alice", "bob")]
    while not all(os.path.exists(f"{location}.{who}.ready") for who in ("alice", "bob")):
        assert all(w.poll() is None for w in writers), "a writer died before starting"
        await anyio.sleep(0.01)
    Path(f"{location}.go").touch()
    assert [w.wait(timeout=300) for w in writers] == [0, 0]
    async with VersionedStore(location) as store:
        memory = TieredMemory(store, "shared", ReplayChatCompletionClient([]), short_term_capacity=4, keep_ratio=0.5)
        short = await memory.short_term.items()
        long = await memory.long_term.items()
        summarised = [i for e in long for i in e.content.metadata["summary_of"]["items"]]
        accounted = [e.id for e in short] + summarised
        assert sorted(accounted) == list(range(1, 31))  # every entry once: in short-term or in one summary
        assert len(short) <= 4
        # every fact each process added is in history, under the id it got
        added = {}
        for commit in await store.log():
            if commit.meta.get("autogen", {}).get("op") == "add":
                entry = commit.meta["autogen"]["entry"]
                content = json.loads(await store.read(f"/autogen/shared/short-term/items/{entry:012d}.json", rev=commit.id))
                added[entry] = content["content"]
        assert sorted(added.values()) == sorted(f"{w} fact {i}" for w in ("alice", "bob") for i in range(15))
        assert await store.fsck() == []


async def test_assistant_agent_with_tiered_memory_and_its_tools(tmp_path):
    async with VersionedStore(tmp_path / "s") as store:
        memory = TieredMemory(store, "concierge", ReplayChatCompletionClient(summaries(3)), context_capacity=4, keep_ratio=0.5)
        await memory.save_to_long_term("Dana is vegetarian")
        agent_client = RecordingReplay([
            CreateResult(finish_reason="function_calls", usage=RequestUsage(prompt_tokens=0, completion_tokens=0),
                         cached=False, content=[FunctionCall(id="c1", name="save_to_long_term_memory",
                                                             arguments=json.dumps({"content": "Dana flies to Lisbon on 14 June"}))]),
            "Noted: Lisbon on 14 June.",
            "Try the vegetarian bacalhau at Tasca do Chico.",
        ], model_info={"vision": False, "function_calling": True, "json_output": False, "family": "unknown",
                       "structured_output": False})
        seen = agent_client.calls
        agent = AssistantAgent("concierge", model_client=agent_client, memory=[memory], tools=memory.tools(),
                               reflect_on_tool_use=True)
        await agent.run(task="Remember that I fly to Lisbon on 14 June.")
        result = await agent.run(task="Where should a vegetarian eat in Lisbon?")
        assert result.messages[-1].content == "Try the vegetarian bacalhau at Tasca do Chico."
        long = [e.content.content for e in await memory.long_term.items()]
        assert long == ["Dana is vegetarian", "Dana flies to Lisbon on 14 June"]
        last_system = [m for m in seen[-1] if isinstance(m, SystemMessage) and "Long-term memory" in m.content]
        assert len(last_system) == 1
        assert "Dana is vegetarian" in last_system[0].content and "Lisbon on 14 June" in last_system[0].content
        # the second turn overflowed the 4-message context: a summary went to short-term
        assert len(await memory.short_term.items()) == 1
        assert any("chat messages to short-term" in c.message for c in await memory.log())


@pytest.mark.slow
def test_example_runs(tmp_path):
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "tiered_memory.py"), str(tmp_path / "example")],
        capture_output=True, text=True, check=True, timeout=300,
    ).stdout
    restarted = out[out.index("=== after restart"):]
    sent = restarted[: restarted.index("concierge:")]
    assert "1. Dana prefers a window table" in sent  # short-term, from the previous process
    assert "Dana (vegetarian) lands in Lisbon on 14 June." in sent  # long-term, matched by the question
    last = restarted[restarted.index("memrev diff"):]
    assert '-  "content": "Dana stays in Alfama",' in last  # the diff shows what the summary replaced ...
    assert '+  "content": "Dana stays in Alfama; dinner budget 40 euros per person.",' in last  # ... and the summary
