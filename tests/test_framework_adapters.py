"""Issue 20, items 22-24 and 33: the framework adapters, round three.

22: the ag2 provenance plugin under both ``ag2`` and ``autogen.beta`` (the
``autogen`` 0.14 package), each with real agents driven by its own scripted
offline model; 24: ``provenance()`` validates its arguments; 33: a read-only
revision view tells how to run an agent on past memory.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import math

import pytest

import memrev.ag2
from memrev import VersionedStore, errors

pytestmark = pytest.mark.anyio

DIET_PATH = "/memory/diet.md"
QUESTIONS = ("I am planning a trip.", "I am vegetarian.", "Book a table.")


def framework(name: str):
    """(Agent, KnowledgeConfig, ToolCallEvent, TestConfig, LOG_PREFIX) of package ``name``."""
    pkg = importlib.import_module(name)
    events = importlib.import_module(f"{name}.events")
    testing = importlib.import_module(f"{name}.testing")
    knowledge = importlib.import_module(f"{name}.knowledge")
    return pkg.Agent, pkg.KnowledgeConfig, events.ToolCallEvent, testing.TestConfig, knowledge.LOG_PREFIX


def scripted(test_config, *turns):
    """A ``TestConfig`` whose script is consumed across ``create()`` calls (one client for every ask)."""

    class Scripted(test_config):
        def __init__(self, *t) -> None:
            super().__init__(*t)
            self._client = super().create()

        def create(self):
            return self._client

    return Scripted(*turns)


@pytest.mark.slow  # 0.9 s in the quick loop: imports ag2 and autogen.beta
def test_both_packages_import_side_by_side():
    import ag2
    import autogen.beta

    assert ag2.Agent is not autogen.beta.Agent
    assert memrev.ag2.provenance  # one plugin for both


@pytest.mark.parametrize("package", ["ag2", "autogen.beta"])
@pytest.mark.slow  # real agents of two frameworks
async def test_plugin_numbers_turns_under_either_package(tmp_path, package):
    Agent, KnowledgeConfig, ToolCallEvent, TestConfig, log_prefix = framework(package)
    async with VersionedStore(tmp_path / "s") as store:

        async def remember_diet(diet: str) -> str:
            """Record the user's diet."""
            await store.write(DIET_PATH, f"diet: {diet}\n")
            return "saved"

        model = scripted(
            TestConfig,
            "Noted.",
            ToolCallEvent("remember_diet", arguments=json.dumps({"diet": "vegetarian"}), id="call-d2"),
            "Saved your diet.",
            "Booked.",
        )
        agent = Agent(
            "concierge",
            "You are a travel concierge.",
            config=model,
            tools=[remember_diet],
            knowledge=KnowledgeConfig(store=store),
            plugins=[memrev.ag2.provenance(store, agent="concierge")],
        )
        reply = await agent.ask(QUESTIONS[0])
        for q in QUESTIONS[1:]:
            reply = await reply.ask(q)
        session = str(reply.context.stream.id)
        turn = {"agent": "concierge", "framework": "ag2", "session": session}
        by_path: dict[str, list] = {}
        for c in reversed(await store.log()):
            for p in c.paths:
                by_path.setdefault(p, []).append(c)
        (diet,) = by_path[DIET_PATH]
        assert memrev.provenance.of(diet.meta) == {**turn, "turn": 2, "tool": "remember_diet", "tool_call_id": "call-d2"}
        log_path = f"{log_prefix}{session}.jsonl"
        assert [memrev.provenance.of(c.meta)["turn"] for c in by_path[log_path]] == [1, 2, 3]
        # why leads from the diet line to turn 2's user message, not turn 1's.
        answer = await store.why(DIET_PATH, 1)
        assert answer.provenance["turn"] == 2
        joined = "\n".join(answer.events)
        assert QUESTIONS[1] in joined and QUESTIONS[0] not in joined


@pytest.mark.slow  # real agents of two frameworks
async def test_store_is_an_autogen_beta_knowledge_store(tmp_path):
    from autogen.beta import Agent, KnowledgeConfig
    from autogen.beta.events import ToolCallEvent
    from autogen.beta.knowledge import KnowledgeStore
    from autogen.beta.testing import TestConfig

    async with VersionedStore(tmp_path / "s") as store:
        assert isinstance(store, KnowledgeStore)
        write = ToolCallEvent(
            "knowledge", arguments=json.dumps({"action": "write", "path": "/notes/a.md", "content": "hello\n"})
        )
        agent = Agent("a", "Take notes.", config=scripted(TestConfig, write, "Done."), knowledge=KnowledgeConfig(store=store))
        await agent.ask("Note hello.")
        assert await store.read("/notes/a.md") == "hello\n"
        assert [c for c in await store.log("/notes/a.md")]


# ---------------------------------------------------------------- item 24


class Text(str):
    pass


@pytest.mark.parametrize(
    "fields",
    [
        {"turn": 10**5000},
        {"turn": 1 << 63},
        {"turn": 0},
        {"turn": True},
        {"turn": math.nan},
        {"turn": 2.0},
        {"turn": "2"},
        {"agent": 7},
        {"agent": math.inf},
        {"agent": Text("a")},
        {"session": "x" * ((64 << 10) + 1)},
        {"tool": "\ud800"},
        {"bogus": "x"},
    ],
    ids=lambda f: next(iter(f)),
)
async def test_provenance_refuses_bad_fields_at_the_call_and_writes_nothing(tmp_path, fields):
    async with VersionedStore(tmp_path / "s") as store:
        await store.write("/a.md", "a\n")
        before = await store.log()
        with pytest.raises(errors.InvalidContent):
            async with store.provenance(**fields):
                await store.write("/a.md", "b\n")
        with pytest.raises(errors.InvalidContent):
            memrev.provenance.check_fields({1: "x"})  # a mapping may hold non-str keys
        assert await store.log() == before
        assert await store.read("/a.md") == "a\n"


async def test_provenance_largest_turn_is_stored_and_read_back(tmp_path):
    async with VersionedStore(tmp_path / "s") as store:
        async with store.provenance(turn=memrev.provenance.MAX_TURN, agent="a" * (64 << 10)):
            await store.write("/a.md", "a\n")
        (c,) = await store.log("/a.md")
        assert c.meta["turn"] == memrev.provenance.MAX_TURN


# ---------------------------------------------------------------- item 33


@pytest.mark.slow  # real agents of two frameworks
async def test_read_only_view_says_how_to_run_an_agent_on_past_memory(tmp_path):
    from ag2 import Agent, KnowledgeConfig
    from ag2.events import ToolCallEvent
    from ag2.testing import TestConfig

    async with VersionedStore(tmp_path / "s") as store:
        await store.write("/memory/diet.md", "vegetarian\n")
        await store.write("/memory/diet.md", "vegan\n")
        past = store.at("HEAD~1")
        with pytest.raises(errors.ReadOnlyRevision) as raised:
            await past.write("/memory/diet.md", "x\n")
        assert f"store.branch(NAME, at={past.commit!r})" in str(raised.value)
        with pytest.raises(errors.ReadOnlyRevision) as raised:
            await store.memory("notes").at("HEAD").clear()
        assert "store.branch(NAME, at=" in str(raised.value)
        # What the message says works: an agent on a branch started at that revision.
        replay = await store.branch("replay", at=past.commit)
        write = ToolCallEvent(
            "knowledge", arguments=json.dumps({"action": "write", "path": "/memory/diet.md", "content": "pescatarian\n"})
        )
        agent = Agent("a", "Keep notes.", config=scripted(TestConfig, write, "Done."), knowledge=KnowledgeConfig(store=replay))
        await agent.ask("I eat fish now.")
        assert await replay.read("/memory/diet.md") == "pescatarian\n"
        assert [c.id for c in await replay.log("/memory/diet.md")][1] == past.commit
        assert await store.read("/memory/diet.md") == "vegan\n"


async def test_read_only_session_view_says_how_to_fork(tmp_path):
    from memrev.openai_agents import VersionedSession

    async with VersionedStore(tmp_path / "s") as store:
        session = VersionedSession(store, "chat")
        await session.add_items([{"role": "user", "content": "hi"}])
        with pytest.raises(errors.ReadOnlyRevision) as raised:
            await session.at("HEAD").add_items([{"role": "user", "content": "x"}])
        assert "session.branch(NAME)" in str(raised.value)


# ---------------------------------------------------------------- item 23


def _tiered_imports():
    from autogen_core.memory import MemoryContent, MemoryMimeType
    from autogen_core.model_context import UnboundedChatCompletionContext
    from autogen_core.models import AssistantMessage, UserMessage
    from autogen_ext.models.replay import ReplayChatCompletionClient

    return MemoryContent, MemoryMimeType, UnboundedChatCompletionContext, AssistantMessage, UserMessage, ReplayChatCompletionClient


def scripted_summarizer(*actions):
    """A real AutoGen replay client whose Nth ``create`` does ``actions[N]``: a str is the summary,
    ``"raise"`` raises, an ``asyncio.Event`` hangs until it is set (it never is)."""
    ReplayChatCompletionClient = _tiered_imports()[-1]

    class Summarizer(ReplayChatCompletionClient):
        def __init__(self) -> None:
            super().__init__([a for a in actions if isinstance(a, str) and a != "raise"])
            self.calls = 0
            self.started = asyncio.Event()

        async def create(self, messages, **kwargs):
            action = actions[self.calls]
            self.calls += 1
            if action == "raise":
                raise RuntimeError("model unavailable")
            if isinstance(action, asyncio.Event):
                self.started.set()
                await action.wait()
            return await super().create(messages, **kwargs)

    return Summarizer()


async def _chat(n: int):
    _, _, Context, AssistantMessage, UserMessage, _ = _tiered_imports()
    context = Context()
    chat = []
    for i in range(n):
        chat += [UserMessage(content=f"question {i}", source="user"), AssistantMessage(content=f"answer {i}", source="bot")]
    for m in chat:
        await context.add_message(m)
    return context, chat


async def _archives(store, memory) -> list[str]:
    return [p for p in await store.list(f"{memory.path}/chat-archive/items/")]


@pytest.mark.parametrize("failure", ["raise", "hang"])
async def test_tiered_short_term_summary_failure_after_chat_promotion_shortens_context_once(tmp_path, failure, caplog):
    from memrev.frameworks.tiered import TieredMemory

    never = asyncio.Event()
    # 1: the chat summary; 2: the short-term compression, which fails; then summaries again.
    client = scripted_summarizer("chat summary", "raise" if failure == "raise" else never, "long summary")
    async with VersionedStore(tmp_path / "s") as store:
        memory = TieredMemory(store, "m", client, context_capacity=4, short_term_capacity=1, keep_ratio=0.5,
                              summary_timeout=0.05)
        MemoryContent, MemoryMimeType, *_ = _tiered_imports()
        await store.write(f"{memory.path}/seed.md", "x\n")
        await memory.short_term.add(MemoryContent(content="older fact", mime_type=MemoryMimeType.TEXT))
        context, chat = await _chat(3)  # 6 messages > 4: the oldest 4 are promoted
        await memory.update_context(context)  # does not raise
        messages = await context.get_messages()
        assert messages[:-1] == chat[4:]  # shortened, though the short-term summary failed
        assert len(await _archives(store, memory)) == 1
        assert "not promoted" in caplog.text
        # The next call promotes no chat message again; the overflow rule is retried and succeeds.
        await memory.update_context(context)
        assert len(await _archives(store, memory)) == 1
        assert [i.content.content for i in await memory.long_term.items()] == ["long summary"]
        assert client.calls == 3


async def test_tiered_chat_promotion_is_recorded_in_its_commit_and_not_repeated(tmp_path):
    from memrev.frameworks.tiered import TieredMemory

    client = scripted_summarizer("chat summary", "second summary")
    async with VersionedStore(tmp_path / "s") as store:
        memory = TieredMemory(store, "m", client, context_capacity=4, short_term_capacity=10, keep_ratio=0.5)
        first, chat = await _chat(3)
        await memory.update_context(first)
        promotion = (await memory.log())[0]
        assert f"{memory.path}/chat-archive/promoted.json" in promotion.paths  # the record is in the same commit
        # The caller failed before it kept the shortened context (a crash, a cancel): the same
        # messages come back in a new context. They are not archived nor summarised again.
        again, _ = await _chat(3)
        await memory.update_context(again)
        assert (await again.get_messages())[:-1] == chat[4:]
        assert len(await _archives(store, memory)) == 1
        assert len(await memory.short_term.items()) == 1
        assert client.calls == 1


@pytest.mark.parametrize("failure", ["raise", "hang"])
async def test_tiered_add_returns_its_committed_entry_when_the_summary_fails(tmp_path, failure, caplog):
    from memrev.frameworks.tiered import TieredMemory

    never = asyncio.Event()
    client = scripted_summarizer("raise" if failure == "raise" else never, "summary")
    MemoryContent, MemoryMimeType, *_ = _tiered_imports()
    async with VersionedStore(tmp_path / "s") as store:
        memory = TieredMemory(store, "m", client, short_term_capacity=1, keep_ratio=0.0, summary_timeout=0.05)
        assert await memory.add(MemoryContent(content="fact 1", mime_type=MemoryMimeType.TEXT)) == 1
        entry = await memory.add(MemoryContent(content="fact 2", mime_type=MemoryMimeType.TEXT))  # compression fails
        assert entry == 2
        assert [i.id for i in await memory.short_term.items()] == [1, 2]  # committed, not promoted yet
        assert "not promoted" in caplog.text
        if failure == "hang":
            assert client.started.is_set() and not never.is_set()  # it hung, and add() still returned
        await memory.add(MemoryContent(content="fact 3", mime_type=MemoryMimeType.TEXT))  # retried: succeeds
        assert [i.content.content for i in await memory.long_term.items()] == ["summary"]
        assert await memory.short_term.items() == []


@pytest.mark.parametrize("timeout", [0, -1, math.nan, math.inf, "5", True])
def test_tiered_summary_timeout_is_validated(tmp_path, timeout):
    from memrev.frameworks.tiered import InvalidTierSettings, TieredMemory

    with pytest.raises(InvalidTierSettings):
        TieredMemory(str(tmp_path / "s"), "m", scripted_summarizer(), summary_timeout=timeout)
    assert not (tmp_path / "s").exists()
