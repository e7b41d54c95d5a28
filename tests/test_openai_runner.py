"""A real ``Runner.run`` (the SDK's own agent loop) on a memrev session, offline.

The model is scripted: a ``Model`` implemented here that returns canned
Responses-API output items (a tool call, then a message) and records what
it was sent. Two turns with a tool call, then ``branch`` and a third turn
on the fork; the session holds exactly what ``SQLiteSession`` holds for the
same run, and the provenance hooks put the agent, tool and tool output on
the commit that stored the tool's output.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from agents import Agent, ModelSettings, Runner, function_tool, set_tracing_disabled
from agents.items import ModelResponse
from agents.memory import SQLiteSession
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

from memrev import VersionedStore

pytestmark = pytest.mark.anyio
set_tracing_disabled(True)


def message(text: str, n: int) -> ResponseOutputMessage:
    return ResponseOutputMessage(
        id=f"msg_{n}", type="message", role="assistant", status="completed",
        content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
    )


def tool_call(city: str, n: int) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(
        id=f"fc_{n}", call_id=f"call_{n}", type="function_call", name="get_weather",
        arguments=json.dumps({"city": city}), status="completed",
    )


class ScriptedModel(Model):
    """Answers each ``get_response`` with the next scripted output; keeps what it was sent."""

    def __init__(self, outputs: list[list[Any]]) -> None:
        self.outputs = list(outputs)
        self.inputs: list[Any] = []

    async def get_response(self, system_instructions, input, model_settings, tools, output_schema,
                           handoffs, tracing, *, previous_response_id=None, conversation_id=None,
                           prompt=None, **kwargs) -> ModelResponse:
        self.inputs.append(json.loads(json.dumps(input, default=str)))
        return ModelResponse(output=self.outputs.pop(0), usage=Usage(), response_id=None)

    def stream_response(self, *args, **kwargs):
        raise NotImplementedError("the test runs without streaming")


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return {"Lisbon": "sunny, 24 C", "Porto": "rain, 17 C"}[city]


def script() -> list[list[Any]]:
    return [
        [tool_call("Lisbon", 1)], [message("Sunny and 24 C in Lisbon.", 1)],
        [tool_call("Porto", 2)], [message("Rainy and 17 C in Porto.", 2)],
        [message("De rien !", 3)],
    ]


def agent_with(model: ScriptedModel) -> Agent:
    return Agent(name="forecaster", instructions="Answer weather questions.", model=model,
                 tools=[get_weather], model_settings=ModelSettings())


TURNS = ["What is the weather in Lisbon?", "And in Porto?"]
FORK_TURN = "Merci, in French please."


async def run_sqlite() -> tuple[list[Any], list[Any], ScriptedModel]:
    session = SQLiteSession("trip")
    model = ScriptedModel(script())
    agent = agent_with(model)
    for prompt in TURNS:
        await Runner.run(agent, prompt, session=session)
    two_turns = await session.get_items()
    await Runner.run(agent, FORK_TURN, session=session)
    three_turns = await session.get_items()
    session.close()
    return two_turns, three_turns, model


async def test_runner_two_turns_then_a_fork_matches_sqlite_session(tmp_path):
    expected_two, expected_three, oracle_model = await run_sqlite()
    async with VersionedStore(tmp_path / "state") as store:
        session = store.session("trip")
        model = ScriptedModel(script())
        agent = agent_with(model)
        hooks = session.provenance_hooks()
        results = [await Runner.run(agent, p, session=session, hooks=hooks) for p in TURNS]
        assert [r.final_output for r in results] == ["Sunny and 24 C in Lisbon.", "Rainy and 17 C in Porto."]
        assert await session.get_items() == expected_two
        assert [i.get("type") for i in expected_two].count("function_call_output") == 2

        fork = await session.branch("in-french")
        try:
            third = await Runner.run(agent, FORK_TURN, session=fork)
            assert third.final_output == "De rien !"
            assert await fork.get_items() == expected_three
            # the model saw the whole conversation so far, as with SQLiteSession
            assert model.inputs == oracle_model.inputs
            assert await session.get_items() == expected_two  # the original is untouched
        finally:
            fork.close()

        # every add is one commit on the session's folder; the tool output's commit says who and what
        log = await session.log()
        assert all(c.message.startswith("session 'trip': add") for c in log)
        with_tools = [c for c in log if "tool" in c.meta]
        assert [(c.meta["agent"], c.meta["tool"], c.meta["tool_call_id"], c.meta["tool_output"]) for c in with_tools] == [
            ("forecaster", "get_weather", "call_2", "rain, 17 C"),
            ("forecaster", "get_weather", "call_1", "sunny, 24 C"),
        ]
        for commit in with_tools:
            stored = [json.loads(await store.read(f"{session.path}/items/{n:012d}.json", rev=commit.id))
                      for n in commit.meta["openai_agents"]["items"]]
            assert {"type": "function_call_output", "call_id": commit.meta["tool_call_id"],
                    "output": commit.meta["tool_output"]}.items() <= next(
                        i for i in stored if i.get("type") == "function_call_output").items()


async def test_without_hooks_commits_carry_no_tool_provenance(tmp_path):
    async with VersionedStore(tmp_path / "state") as store:
        session = store.session("trip")
        await Runner.run(agent_with(ScriptedModel(script())), TURNS[0], session=session)
        assert not any("tool" in c.meta for c in await session.log())


async def test_agent_hooks_record_the_same(tmp_path):
    from memrev.openai_agents import ProvenanceAgentHooks

    async with VersionedStore(tmp_path / "state") as store:
        session = store.session("trip")
        agent = agent_with(ScriptedModel(script()))
        agent.hooks = ProvenanceAgentHooks(session)
        await Runner.run(agent, TURNS[0], session=session)
        tools = [c.meta["tool"] for c in await session.log() if "tool" in c.meta]
        assert tools == ["get_weather"]


@pytest.mark.slow
def test_example_runs(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    example = Path(__file__).resolve().parents[1] / "examples" / "openai_session.py"
    out = subprocess.run([sys.executable, str(example), str(tmp_path / "state")],
                         capture_output=True, text=True, check=True, timeout=300).stdout
    assert "main holds 8 items, in-french 10" in out
    assert "[forecaster ran get_weather -> 'rain, 17 C']" in out
    assert "session 'trip-42': add 2 items (2-3)   [forecaster ran get_weather -> 'sunny, 24 C']" in out
