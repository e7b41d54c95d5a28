"""memrev quickstart: an AG2 agent whose memory has a history.

Runs fully offline: the "LLM" is scripted with ``ag2.testing.TestConfig``.
Over three conversations a cooking assistant learns what its user likes; after
each one AG2's ``WorkingMemoryAggregate`` rewrites ``/memory/working.md``, and
because the knowledge store is a ``memrev.VersionedStore`` every rewrite is a
commit you can list, read back and diff. The ``memrev.ag2.provenance`` plugin
records on every commit which agent, conversation (session), turn and tool
made it, so ``why`` can answer where a line of memory came from.

    python examples/quickstart.py [STATE_DIR]     # default: ./.quickstart-state

STATE_DIR is wiped at start, so the demo is repeatable.
"""

from __future__ import annotations

import asyncio
import json
import shlex
import shutil
import sys
import textwrap
from pathlib import Path

from ag2 import Agent, KnowledgeConfig
from ag2.aggregate import AggregateTrigger, WorkingMemoryAggregate
from ag2.events import ToolCallEvent
from ag2.knowledge import WORKING_MEMORY_PATH
from ag2.policies import EpisodicMemoryPolicy, WorkingMemoryPolicy
from ag2.testing import TestConfig

import memrev.ag2
from memrev import VersionedStore

DEFAULT_STATE_DIR = ".quickstart-state"

# --------------------------------------------------------------------------
# The script: what the user says, what the "model" answers, and what the
# aggregation "model" decides the working memory should be after each chat.
# --------------------------------------------------------------------------

PLAN_PATH = "/artifacts/meal-plan.md"
PLAN = """\
# This week (for two, <= 30 min)
- Mon: Spicy chickpea curry
- Tue: Chili tofu noodles
- Wed: Black bean tacos with jalapenos
"""

CHATS = [
    (
        "Hi! I'm Sam. I cook for two on weeknights, 30 minutes max.",
        ["Got it, Sam: quick weeknight dinners for two."],
    ),
    (
        "We don't eat pork and we love spicy food. Can you save a plan for this week?",
        [
            ToolCallEvent(
                "knowledge",
                arguments=json.dumps({"action": "write", "path": PLAN_PATH, "content": PLAN}),
            ),
            f"Done: three spicy, pork-free dinners saved to {PLAN_PATH}.",
        ],
    ),
    (
        "News: my partner went vegetarian, so no meat at all. And we eat out on Thursdays.",
        ["Noted: vegetarian from now on, and no cooking on Thursdays."],
    ),
]

WORKING_MEMORY = [
    """\
# Working memory

## About the user
- Name: Sam
- Cooks for two on weeknights
- 30 minutes max per meal
""",
    """\
# Working memory

## About the user
- Name: Sam
- Cooks for two on weeknights
- 30 minutes max per meal

## Preferences
- No pork
- Loves spicy food

## Notes
- This week's plan: /artifacts/meal-plan.md
""",
    """\
# Working memory

## About the user
- Name: Sam
- Cooks for two on weeknights, eats out on Thursdays
- 30 minutes max per meal

## Preferences
- Vegetarian (partner too): no meat at all
- Loves spicy food

## Notes
- This week's plan: /artifacts/meal-plan.md
""",
]


class Script(TestConfig):
    """A ``TestConfig`` that keeps its place in the script across calls.

    AG2 creates a fresh model client for every ``ask`` and every aggregation,
    and a plain ``TestConfig`` client replays its script from the top. Sharing
    one client lets a single script cover the whole session.
    """

    def __init__(self, *turns) -> None:
        super().__init__(*turns)
        self._client = super().create()

    def create(self):
        return self._client


def prepare(state_dir: Path) -> None:
    """Wipe ``state_dir`` — but never a folder that is not an old memrev store."""
    if state_dir.exists():
        if not state_dir.is_dir() or (any(state_dir.iterdir()) and not (state_dir / "memrev.db").exists()):
            sys.exit(f"refusing to wipe {state_dir}: it exists and is not a memrev store")
        shutil.rmtree(state_dir)


def indent(text: str, prefix: str = "    ") -> str:
    return textwrap.indent(text.rstrip("\n"), prefix, lambda _: True)


async def main(state_dir: Path) -> None:
    prepare(state_dir)

    async with VersionedStore(state_dir, author="cooking-assistant") as store:
        agent = Agent(
            "chef",
            "You are a friendly cooking assistant.",
            config=Script(*(turn for _, turns in CHATS for turn in turns)),
            knowledge=KnowledgeConfig(
                store=store,
                aggregate=WorkingMemoryAggregate(config=Script(*WORKING_MEMORY)),
                aggregate_trigger=AggregateTrigger(on_end=True),
            ),
            assembly=[WorkingMemoryPolicy(), EpisodicMemoryPolicy()],
            plugins=[memrev.ag2.provenance(store, agent="chef")],
        )

        print(f"memrev quickstart: an AG2 agent on VersionedStore({str(state_dir)!r})\n")
        for n, (question, _) in enumerate(CHATS, 1):
            reply = await agent.ask(question)
            print(f"[conversation {n}]")
            print(f"  Sam:  {question}")
            print(f"  chef: {reply.body}\n")

        history = await store.log(WORKING_MEMORY_PATH)  # newest first
        print(f"History of {WORKING_MEMORY_PATH} ({len(history)} versions, newest first):")
        for commit in history:
            when = commit.time.strftime("%Y-%m-%d %H:%M:%S UTC")
            print(f"  {commit.id[:7]}  {when}  {commit.message or '(no message)'}")

        oldest_first = list(reversed(history))
        for n, commit in enumerate(oldest_first, 1):
            print(f"\n--- version {n} ({commit.id[:7]}) ---")
            print(indent(await store.read(WORKING_MEMORY_PATH, rev=commit.id) or ""))

        (plan_commit, *_) = await store.log(PLAN_PATH)
        print(f"\n(The agent also saved {PLAN_PATH} with its `knowledge` tool: commit {plan_commit.id[:7]}.)")

        if len(oldest_first) >= 2:
            older, newer = oldest_first[-2], oldest_first[-1]
            print(f"\nWhat conversation {len(oldest_first)} changed ({older.id[:7]} -> {newer.id[:7]}):")
            for change in await store.diff(older.id, newer.id, WORKING_MEMORY_PATH):
                print(indent(change.diff))

        await explain(store, "Vegetarian")

    print(f"\nExplore it yourself:  memrev --store {shlex.quote(str(state_dir))} log {WORKING_MEMORY_PATH}")


async def explain(store: VersionedStore, word: str) -> None:
    """Why does the agent think the user is vegetarian? Blame the line, then read the turn that wrote it."""
    lines = (await store.read(WORKING_MEMORY_PATH) or "").splitlines()
    number = next(i for i, line in enumerate(lines, 1) if word in line)
    answer = await store.why(WORKING_MEMORY_PATH, number)
    p = answer.provenance
    print(f"\nWhy does the agent think this?  {WORKING_MEMORY_PATH}:{number}: {answer.text}")
    print(f"  written by commit {answer.commit.id[:7]}: agent {p.get('agent')}, session {p.get('session')}, turn {p.get('turn')}")
    for entry in answer.events:  # the event-log lines written in the same turn
        event = json.loads(entry)
        if event["type"].endswith(".ModelRequest"):
            said = " ".join(part.get("content", "") for part in event["data"].get("parts", []))
            print(f"  after the user said: {said!r}")


if __name__ == "__main__":
    if len(sys.argv) > 2:
        sys.exit(f"usage: {sys.argv[0]} [STATE_DIR]")
    asyncio.run(main(Path(sys.argv[1] if len(sys.argv) > 1 else DEFAULT_STATE_DIR)))
