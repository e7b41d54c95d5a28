"""Tiered memory (chat context -> short-term -> long-term) that survives a restart.

Runs offline: the agent's model and the summariser are AutoGen
``ReplayChatCompletionClient``s with scripted replies.

1. An ``AssistantAgent`` with ``memory=[TieredMemory(...)]`` and the memory's
   two tools talks with Dana long enough to overflow both tiers: old chat
   messages are summarised into short-term entries, old short-term entries
   into long-term ones, and the agent saves one fact with
   ``save_to_long_term_memory``.
2. The process ends. A new process (this script, re-run with ``--restarted``)
   opens the same store: the new agent is sent what the old one remembered.
3. It prints the diff of the last promotion: the short-term entries the
   summary replaced (``-``) and the summary (``+``). Nothing is lost; the
   originals stay readable at the revision before.

    python examples/tiered_memory.py [STATE_DIR]     # default: a new temporary folder

An existing STATE_DIR is wiped first (only if it is an old memrev store).
"""

from __future__ import annotations

import asyncio
import json
import logging
import shlex
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from autogen_agentchat.agents import AssistantAgent
from autogen_core import FunctionCall
from autogen_core.memory import MemoryContent, MemoryMimeType
from autogen_core.models import CreateResult, RequestUsage, SystemMessage
from autogen_ext.models.replay import ReplayChatCompletionClient

from memrev import VersionedStore
from memrev.autogen import TieredMemory

TOOLS_MODEL = {"vision": False, "function_calling": True, "json_output": False, "family": "unknown",
               "structured_output": False}
TIERS = {"context_capacity": 4, "short_term_capacity": 3, "keep_ratio": 0.5}

# (what Dana says, the fact the app notes with memory.add, the agent's reply)
TURNS = [
    ("Hi, I'm Dana. I land in Lisbon on 14 June.", "Dana lands in Lisbon on 14 June", "Welcome, Dana!"),
    ("I'm vegetarian.", "Dana is vegetarian", "Noted, vegetarian it is."),
    ("I'm staying in Alfama.", "Dana stays in Alfama", "Alfama is lovely."),
    ("Dinner budget is 40 euros a head.", "Dinner budget: 40 euros per person", "Got it, 40 euros."),
]
SAVE = "Remember for good: my passport number ends in 4321."
LAST_FACT = "Dana prefers a window table"
SUMMARIES = [  # in the order the memory asks for them
    "Dana introduced herself and said she is vegetarian.",  # chat messages -> short-term entry 3
    "Dana (vegetarian) lands in Lisbon on 14 June.",  # short-term entries 1-3 -> long-term entry 1
    "Dana is staying in Alfama; dinner budget about 40 euros.",  # chat messages -> short-term entry 6
    "Dana stays in Alfama; dinner budget 40 euros per person.",  # short-term entries 4-6 -> long-term entry 3
]


def save_call() -> CreateResult:
    arguments = json.dumps({"content": "Dana's passport number ends in 4321"})
    return CreateResult(finish_reason="function_calls", usage=RequestUsage(prompt_tokens=0, completion_tokens=0),
                        cached=False, content=[FunctionCall(id="call-1", name="save_to_long_term_memory", arguments=arguments)])


def prepare(state_dir: Path) -> None:
    if state_dir.exists():
        if not state_dir.is_dir() or (any(state_dir.iterdir()) and not (state_dir / "memrev.db").exists()):
            sys.exit(f"refusing to wipe {state_dir}: it exists and is not a memrev store")
        shutil.rmtree(state_dir)


async def first_session(state_dir: Path) -> None:
    async with VersionedStore(state_dir, author="demo") as store:
        memory = TieredMemory(store, "concierge", ReplayChatCompletionClient(SUMMARIES), **TIERS)
        replies = [reply for _, _, reply in TURNS] + [save_call(), "Saved: passport ends in 4321."]
        agent = AssistantAgent("concierge", model_client=ReplayChatCompletionClient(replies, model_info=TOOLS_MODEL),
                               memory=[memory], tools=memory.tools(), reflect_on_tool_use=True)
        for said, fact, _ in TURNS:
            result = await agent.run(task=said)
            await memory.add(MemoryContent(content=fact, mime_type=MemoryMimeType.TEXT))
            print(f"Dana: {said}\n  concierge: {result.messages[-1].content}")
        result = await agent.run(task=SAVE)
        print(f"Dana: {SAVE}\n  concierge: {result.messages[-1].content}   (via save_to_long_term_memory)")
        await memory.add(MemoryContent(content=LAST_FACT, mime_type=MemoryMimeType.TEXT))
        await show_tiers(memory)


async def show_tiers(memory: TieredMemory) -> None:
    for label, tier in (("short-term", memory.short_term), ("long-term", memory.long_term)):
        print(f"\n{label} entries now:")
        for item in await tier.items():
            print(f"  {item.id}. {item.content.content}")


async def after_restart(state_dir: Path) -> None:
    print("\n=== after restart: a new process, a new agent, the same store ===")
    async with VersionedStore(state_dir, author="demo") as store:
        memory = TieredMemory(store, "concierge", ReplayChatCompletionClient([]), **TIERS)
        agent = AssistantAgent("concierge", model_client=ReplayChatCompletionClient(
            ["A vegetarian dinner in Alfama under 40 euros: Tasca Vegana, 8 pm?"]), memory=[memory])
        task = "Book me a vegetarian dinner near where I'm staying, within my budget."
        result = await agent.run(task=task)
        sent = next(m for m in await agent.model_context.get_messages() if isinstance(m, SystemMessage))
        print(f"Dana: {task}\n  the model was sent:")
        print(textwrap.indent(sent.content.strip("\n"), "    "))
        print(f"  concierge: {result.messages[-1].content}")

        promotions = [c for c in await memory.log() if c.meta.get("autogen", {}).get("op") == "promote"]
        print(f"\n{len(promotions)} promotions, newest first:")
        for commit in promotions:
            print(f"  {commit.id[:7]}  {commit.message}")
        last = promotions[0]
        print(f"\nmemrev diff {last.id[:7]}~1 {last.id[:7]}   (what the last summary replaced)")
        for change in await store.diff(f"{last.id}~1", last.id):
            print(change.diff, end="" if change.diff.endswith("\n") else "\n")
    print(f"\nExplore it yourself:  memrev --store {shlex.quote(str(state_dir))} log /autogen/concierge")


if __name__ == "__main__":
    logging.disable(logging.WARNING)  # the replay client warns that it ignores tool_choice and counts tokens roughly
    args = sys.argv[1:]
    if args[:1] == ["--restarted"] and len(args) == 2:
        asyncio.run(after_restart(Path(args[1])))
        sys.exit(0)
    if len(args) > 1:
        sys.exit(f"usage: {sys.argv[0]} [STATE_DIR]")
    target = Path(args[0]) if args else Path(tempfile.mkdtemp(prefix="memrev-tiered-")) / "state"
    prepare(target)
    asyncio.run(first_session(target))
    sys.stdout.flush()
    # the restart is a real new process: nothing survives in memory, only the store
    subprocess.run([sys.executable, __file__, "--restarted", str(target)], check=True)
