"""Provenance from a real AG2 ``Agent`` (issue 11): the ``memrev.ag2`` plugin.

Offline: models scripted with ``ag2.testing.TestConfig`` (shared helpers from
``test_ag2_agent``). One session of three turns calls the ``knowledge`` tool
and a tool of the agent's own, with ``WorkingMemoryAggregate`` and
``EventLogWriter``; every commit must say which agent, session, turn and tool
made it, and ``why`` must lead from a working-memory line to the turn's
event-log entries.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from ag2 import Agent, KnowledgeConfig
from ag2.aggregate import AggregateTrigger, WorkingMemoryAggregate
from ag2.events import ToolCallEvent
from ag2.knowledge import LOG_PREFIX, WORKING_MEMORY_PATH

import memrev.ag2
from memrev import VersionedStore
from test_ag2_agent import (
    ARTIFACT,
    ARTIFACT_PATH,
    QUESTIONS,
    REPLIES,
    VERSIONS,
    ScriptedConfig,
)

pytestmark = pytest.mark.anyio

DIET_PATH = "/memory/diet.md"


def call(name: str, call_id: str, **arguments) -> ToolCallEvent:
    return ToolCallEvent(name, arguments=json.dumps(arguments), id=call_id)


def diet_tool(store: VersionedStore):
    async def remember_diet(diet: str) -> str:
        """Record the user's diet."""
        await store.write(DIET_PATH, f"diet: {diet}\n")
        return "saved"

    return remember_diet


def make_agent(store: VersionedStore, name: str, model, aggregator, **plugin_options) -> Agent:
    return Agent(
        name,
        "You are a travel concierge.",
        config=model,
        tools=[diet_tool(store)],
        knowledge=KnowledgeConfig(
            store=store,
            aggregate=WorkingMemoryAggregate(config=aggregator),
            aggregate_trigger=AggregateTrigger(on_end=True),
        ),
        plugins=[memrev.ag2.provenance(store, agent=name, **plugin_options)],
    )


def record(c) -> dict:
    return memrev.provenance.of(c.meta)


async def commits_by_path(store: VersionedStore) -> dict[str, list]:
    out: dict[str, list] = {}
    for c in reversed(await store.log()):
        for p in c.paths:
            out.setdefault(p, []).append(c)
    return out


async def test_three_turns_every_commit_carries_agent_session_turn_and_tool(tmp_path):
    async with VersionedStore(tmp_path / "s") as store:
        model = ScriptedConfig(
            call("knowledge", "call-k1", action="write", path=ARTIFACT_PATH, content=ARTIFACT),
            REPLIES[0],
            call("remember_diet", "call-d2", diet="vegetarian"),
            REPLIES[1],
            REPLIES[2],
        )
        agent = make_agent(store, "concierge", model, ScriptedConfig(*VERSIONS))
        reply = await agent.ask(QUESTIONS[0])
        for q in QUESTIONS[1:]:
            reply = await reply.ask(q)  # the same session (stream), turns 2 and 3
        session = str(reply.context.stream.id)
        log_path = f"{LOG_PREFIX}{session}.jsonl"

        turn = {"agent": "concierge", "framework": "ag2", "session": session}
        by_path = await commits_by_path(store)
        # Bootstrap happens before any turn: no provenance, no turn.
        assert record(by_path["/.initialized"][0]) == {}
        assert record(by_path["/SKILL.md"][0]) == {}
        (artifact,) = by_path[ARTIFACT_PATH]
        assert record(artifact) == {**turn, "turn": 1, "tool": "knowledge", "tool_call_id": "call-k1"}
        (diet,) = by_path[DIET_PATH]
        assert record(diet) == {**turn, "turn": 2, "tool": "remember_diet", "tool_call_id": "call-d2"}
        # Aggregation runs inside the turn (the plugin wraps the knowledge middleware).
        assert [record(c) for c in by_path[WORKING_MEMORY_PATH]] == [{**turn, "turn": n} for n in (1, 2, 3)]
        # EventLogWriter writes after the turn returned: attributed to the stream's latest turn.
        assert [record(c) for c in by_path[log_path]] == [{**turn, "turn": n} for n in (1, 2, 3)]

        # why: "- Vegetarian" came in with working memory v2, in turn 2 ...
        lines = (await store.read(WORKING_MEMORY_PATH)).splitlines()
        answer = await store.why(WORKING_MEMORY_PATH, lines.index("- Vegetarian") + 1)
        assert answer.text == "- Vegetarian"
        assert answer.provenance == {**turn, "turn": 2}
        assert "+- Vegetarian\n" in answer.hunk
        # ... and the turn's event-log entries hold the message that led to it.
        assert answer.event_log == log_path
        assert answer.event_commit is not None and record(answer.event_commit)["turn"] == 2
        entries = [json.loads(e) for e in answer.events]
        assert entries and all("type" in e for e in entries)
        joined = "\n".join(answer.events)
        assert QUESTIONS[1] in joined and REPLIES[1] in joined
        assert QUESTIONS[0] not in joined  # turn 1's entries were appended by turn 1's commit

        # The tool filter and pickaxe find the diet tool's commit.
        assert [c.id for c in await store.log(tool="remember_diet")] == [diet.id]
        assert await store.log(WORKING_MEMORY_PATH, contains="Vegetarian", limit=1) == [by_path[WORKING_MEMORY_PATH][1]]


async def test_two_agents_on_one_store_are_told_apart(tmp_path):
    async with VersionedStore(tmp_path / "s") as store:
        a = make_agent(store, "concierge", ScriptedConfig(REPLIES[0]), ScriptedConfig(VERSIONS[0]))
        b = make_agent(
            store,
            "planner",
            ScriptedConfig(call("remember_diet", "call-b", diet="vegan"), "ok"),
            ScriptedConfig(VERSIONS[1]),
        )
        ra = await a.ask(QUESTIONS[0])
        rb = await b.ask(QUESTIONS[1])
        sa, sb = str(ra.context.stream.id), str(rb.context.stream.id)
        assert [c.meta["session"] for c in await store.log(agent="concierge")] == [sa, sa]
        planner = await store.log(agent="planner")
        assert {c.meta["session"] for c in planner} == {sb}
        assert {p for c in planner for p in c.paths} == {DIET_PATH, WORKING_MEMORY_PATH, f"{LOG_PREFIX}{sb}.jsonl"}
        assert [c.meta["tool_call_id"] for c in await store.log(DIET_PATH)] == ["call-b"]


async def test_two_concurrent_turns_never_mix_their_fields(tmp_path):
    """Both agents' tools are inside their turns at the same time, interleaving writes."""
    async with VersionedStore(tmp_path / "s") as store:
        await store.write("/.initialized", "x")  # no bootstrap race between the two agents
        both_inside = asyncio.Barrier(2)

        def tool_for(name: str):
            async def note(text: str) -> str:
                """Write two notes."""
                await store.write(f"/notes/{name}-1.md", text)
                await both_inside.wait()
                await store.write(f"/notes/{name}-2.md", text)
                return "done"

            return note

        agents = []
        for name in ("alpha", "beta"):
            agent = Agent(
                name,
                "Take notes.",
                config=ScriptedConfig(call("note", f"call-{name}", text=name), "ok"),
                tools=[tool_for(name)],
                knowledge=KnowledgeConfig(store=store),
                plugins=[memrev.ag2.provenance(store, agent=name)],
            )
            agents.append(agent)
        replies = await asyncio.gather(*(a.ask("note it") for a in agents))
        for name, reply in zip(("alpha", "beta"), replies):
            session = str(reply.context.stream.id)
            for n in (1, 2):
                (c,) = await store.log(f"/notes/{name}-{n}.md")
                assert record(c) == {
                    "agent": name,
                    "framework": "ag2",
                    "session": session,
                    "turn": 1,
                    "tool": "note",
                    "tool_call_id": f"call-{name}",
                }


async def test_agent_history_tools_read_a_past_version_and_restore_it(tmp_path):
    async with VersionedStore(tmp_path / "s") as store:
        await store.write(DIET_PATH, "diet: vegetarian\n", message="v1")
        await store.write(DIET_PATH, "diet: omnivore\n", message="v2")
        v1 = (await store.log(DIET_PATH))[1].id
        model = ScriptedConfig(
            call("read_memory_version", "call-r", path=DIET_PATH, versions_back=1),
            call("restore_memory_version", "call-s", path=DIET_PATH, rev=v1),
            "Restored your diet note.",
        )
        agent = Agent(
            "concierge",
            "Keep memory right.",
            config=model,
            knowledge=KnowledgeConfig(store=store),
            plugins=[memrev.ag2.provenance(store, agent="concierge", history_tools=True)],
        )
        reply = await agent.ask("My diet note is wrong, put back the old one.")
        assert reply.body == "Restored your diet note."
        history = await reply.context.stream.history.get_events()
        results = [str(e) for e in history if type(e).__name__ == "ToolResultsEvent"]
        assert any("diet: vegetarian" in r for r in results)
        assert await store.read(DIET_PATH) == "diet: vegetarian\n"
        restore, *older = await store.log(DIET_PATH)
        assert [c.message for c in older] == ["v2", "v1"]  # history kept
        assert restore.meta["restore"] == {"path": DIET_PATH, "rev": v1}
        assert record(restore) == {
            "agent": "concierge",
            "framework": "ag2",
            "session": str(reply.context.stream.id),
            "turn": 1,
            "tool": "restore_memory_version",
            "tool_call_id": "call-s",
        }


def test_event_log_layout_names_the_stream():
    assert memrev.ag2.event_log_stream(f"{LOG_PREFIX}abc-1.jsonl") == "abc-1"
    assert memrev.ag2.event_log_stream(f"{LOG_PREFIX}abc-1.dropped-3.jsonl") == "abc-1"
    assert memrev.ag2.event_log_stream(f"{LOG_PREFIX}SKILL.md") is None
    assert memrev.ag2.event_log_stream(f"{LOG_PREFIX}a/b.jsonl") is None
    assert memrev.ag2.event_log_stream("/memory/abc.jsonl") is None
    with pytest.raises(TypeError):
        memrev.ag2.provenance(object(), agent="")
