"""An AG2 agent and an AutoGen agent sharing one memrev store, and one history.

Runs offline: the AG2 "LLM" is scripted with ``ag2.testing.TestConfig`` and the
AutoGen one with ``autogen_ext.models.replay.ReplayChatCompletionClient``.

* The AG2 concierge keeps its files in the store (``KnowledgeConfig(store=store)``):
  working memory, event logs, skills.
* The AutoGen chef gets ``memory=[store.memory("user")]``: every ``add()`` is a
  commit writing ``/autogen/user/items/<id>.json``.
* The concierge then reads one of the chef's memory items with its
  ``knowledge`` tool: it is just a file in the same tree.

    python examples/shared_history.py [STATE_DIR]     # default: a new temporary folder

An existing STATE_DIR is wiped first (only if it is an old memrev store).
"""

from __future__ import annotations

import asyncio
import json
import shlex
import shutil
import sys
import tempfile
import textwrap
from pathlib import Path

from ag2 import Agent, KnowledgeConfig
from ag2.aggregate import AggregateTrigger, WorkingMemoryAggregate
from ag2.events import ToolCallEvent
from ag2.policies import WorkingMemoryPolicy
from ag2.testing import TestConfig
from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.messages import MemoryQueryEvent
from autogen_core.memory import MemoryContent, MemoryMimeType
from autogen_core.models import SystemMessage
from autogen_ext.models.replay import ReplayChatCompletionClient

from memrev import VersionedStore

FIRST_ITEM = "/autogen/user/items/000000000001.json"

WORKING_MEMORY = [
    "# Working memory\n\n## User\n- Name: Dana\n- Visiting Lisbon 14-16 June\n",
    "# Working memory\n\n## User\n- Name: Dana\n- Visiting Lisbon 14-16 June\n- Vegetarian (noted by the chef)\n",
]


class Script(TestConfig):
    """A ``TestConfig`` that keeps its place: AG2 calls ``create()`` for every ask."""

    def __init__(self, *turns) -> None:
        super().__init__(*turns)
        self._client = super().create()

    def create(self):
        return self._client


def prepare(state_dir: Path) -> None:
    if state_dir.exists():
        if not state_dir.is_dir() or (any(state_dir.iterdir()) and not (state_dir / "memrev.db").exists()):
            sys.exit(f"refusing to wipe {state_dir}: it exists and is not a memrev store")
        shutil.rmtree(state_dir)


async def main(state_dir: Path) -> None:
    async with VersionedStore(state_dir, author="demo") as store:
        concierge = Agent(
            "concierge",
            "You are a travel concierge.",
            config=Script(
                "Welcome, Dana! Lisbon in June is lovely.",
                ToolCallEvent("knowledge", arguments=json.dumps({"action": "read", "path": FIRST_ITEM})),
                "The chef noted that you are vegetarian; I'll book restaurants accordingly.",
            ),
            knowledge=KnowledgeConfig(
                store=store,
                aggregate=WorkingMemoryAggregate(config=Script(*WORKING_MEMORY)),
                aggregate_trigger=AggregateTrigger(on_end=True),
            ),
            assembly=[WorkingMemoryPolicy()],
        )
        prefs = store.memory("user")
        chef = AssistantAgent(
            "chef",
            model_client=ReplayChatCompletionClient(["Tonight: a spicy chickpea and spinach curry."]),
            memory=[prefs],
            system_message="You are a home chef.",
        )

        print(f"One store, two frameworks: VersionedStore({str(state_dir)!r})\n")
        reply = await concierge.ask("Hi, I'm Dana. I'm in Lisbon from 14 to 16 June.")
        print(f"[AG2 concierge]  {reply.body}")

        await prefs.add(MemoryContent(content="Dana is vegetarian", mime_type=MemoryMimeType.TEXT))
        likes = {"likes": ["spicy food"], "kitchen": "small"}
        await prefs.add(MemoryContent(content=likes, mime_type="application/json"))
        print("[app]            added 2 items to the AutoGen memory 'user'")

        result = await chef.run(task="What should Dana cook tonight?")
        seen = next(m for m in result.messages if isinstance(m, MemoryQueryEvent))
        print(f"[AutoGen chef]   {result.messages[-1].content}")
        memory_message = next(m for m in await chef.model_context.get_messages() if isinstance(m, SystemMessage))
        print(f"                 (a MemoryQueryEvent with {len(seen.content)} items; the model was sent:)")
        print(textwrap.indent(memory_message.content.strip("\n"), " " * 19))

        reply = await concierge.ask("Anything I should know about restaurants?")
        print(f"[AG2 concierge]  {reply.body}   (read {FIRST_ITEM} with its knowledge tool)")

        print("\nShared history, newest first:")
        for commit in await store.log():
            side = "AutoGen" if "autogen" in commit.meta else "AG2"
            print(f"  {commit.id[:7]}  {side:<7}  {commit.message}")

    print(f"\nExplore it yourself:  memrev --store {shlex.quote(str(state_dir))} log /autogen/user")


if __name__ == "__main__":
    if len(sys.argv) > 2:
        sys.exit(f"usage: {sys.argv[0]} [STATE_DIR]")
    if len(sys.argv) == 2:
        target = Path(sys.argv[1])
        prepare(target)
    else:
        target = Path(tempfile.mkdtemp(prefix="memrev-shared-")) / "state"
    asyncio.run(main(target))
