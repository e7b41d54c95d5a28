"""An OpenAI Agents SDK agent whose conversation lives in a memrev store.

Runs offline: the model is a scripted ``agents.models.interface.Model``
(canned Responses-API output items), so no API key and no network. With a
real model, drop ``ScriptedModel`` and pass ``model="gpt-4.1-mini"``.

1. Two turns with a tool call, through ``Runner.run(agent, prompt, session=session)``.
2. ``session.branch("in-french")`` forks the conversation; a third turn runs on the fork.
3. The session's history, the fork, and the provenance hooks' record of the tool call.

    python examples/openai_session.py [STATE_DIR]     # default: a new temporary folder
"""

from __future__ import annotations

import asyncio
import json
import shlex
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from agents import Agent, Runner, function_tool, set_tracing_disabled
from agents.items import ModelResponse
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

from memrev import VersionedStore


class ScriptedModel(Model):
    """Returns the next scripted output for each request: a stand-in for an LLM."""

    def __init__(self, outputs: list[Any]) -> None:
        self.outputs = list(outputs)

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        return ModelResponse(output=[self.outputs.pop(0)], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


def say(text: str, n: int) -> ResponseOutputMessage:
    return ResponseOutputMessage(id=f"msg_{n}", type="message", role="assistant", status="completed",
                                 content=[ResponseOutputText(type="output_text", text=text, annotations=[])])


def call_weather(city: str, n: int) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(id=f"fc_{n}", call_id=f"call_{n}", type="function_call", name="get_weather",
                                    arguments=json.dumps({"city": city}), status="completed")


@function_tool
def get_weather(city: str) -> str:
    """Today's weather in a city."""
    return {"Lisbon": "sunny, 24 C", "Porto": "rain, 17 C"}[city]


async def main(state_dir: Path) -> None:
    set_tracing_disabled(True)
    model = ScriptedModel([
        call_weather("Lisbon", 1), say("Sunny and 24 C in Lisbon.", 1),
        call_weather("Porto", 2), say("Rain and 17 C in Porto: take an umbrella.", 2),
        say("Lisbonne : ensoleillé, 24 C. Porto : pluie, 17 C.", 3),
    ])
    agent = Agent(name="forecaster", instructions="Answer weather questions.", model=model, tools=[get_weather])
    async with VersionedStore(state_dir, author="demo") as store:
        session = store.session("trip-42")
        hooks = session.provenance_hooks()  # optional: who ran which tool, on the commit of its output
        for prompt in ("What's the weather in Lisbon?", "And in Porto?"):
            result = await Runner.run(agent, prompt, session=session, hooks=hooks)
            print(f"user: {prompt}\n  forecaster: {result.final_output}")

        fork = await session.branch("in-french")
        result = await Runner.run(agent, "Summarise both in French.", session=fork)
        print(f"user (on branch in-french): Summarise both in French.\n  forecaster: {result.final_output}")
        print(f"\nmain holds {len(await session.get_items())} items, in-french {len(await fork.get_items())}")
        fork.close()

        print("\nThe session's history on main, newest first:")
        for commit in await session.log():
            tool = f"   [{commit.meta['agent']} ran {commit.meta['tool']} -> {commit.meta['tool_output']!r}]" if "tool" in commit.meta else ""
            print(f"  {commit.id[:7]}  {commit.message}{tool}")
    folder = session.path
    print(f"\nExplore it yourself:  memrev --store {shlex.quote(str(state_dir))} log {folder}")


if __name__ == "__main__":
    if len(sys.argv) > 2:
        sys.exit(f"usage: {sys.argv[0]} [STATE_DIR]")
    target = Path(sys.argv[1]) if len(sys.argv) == 2 else Path(tempfile.mkdtemp(prefix="memrev-session-")) / "state"
    if target.exists():
        if any(target.iterdir()) and not (target / "memrev.db").exists():
            sys.exit(f"refusing to wipe {target}: it exists and is not a memrev store")
        shutil.rmtree(target)
    asyncio.run(main(target))
