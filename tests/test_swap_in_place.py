"""The one-line swap of the README, as a new user does it (issue 9, the scenario).

A real AG2 ``Agent`` (scripted offline models) runs two turns on
``DiskKnowledgeStore(folder)``; the line is swapped to ``VersionedStore(folder)``
and it runs two more; then to ``VersionedStore(folder, worktree=True)`` and two
more. Nothing of the first turns may be lost, ``log`` must start with the
adoption commit, and in working-tree mode the plain files must be the head.
Run with ``-s`` to see the ``memrev log`` of the folder.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from ag2 import Agent, KnowledgeConfig
from ag2.aggregate import AggregateTrigger, WorkingMemoryAggregate
from ag2.knowledge import WORKING_MEMORY_PATH, DiskKnowledgeStore
from ag2.policies import EpisodicMemoryPolicy, WorkingMemoryPolicy
from ag2.testing import TrackingConfig
from click.testing import CliRunner

from memrev import VersionedStore
from memrev.cli import main as cli
from memrev.folders.adopt import ADOPT_AUTHOR
from memrev.folders.worktree import OUTSIDE_AUTHOR
from test_ag2_agent import ARTIFACT, ARTIFACT_PATH, ScriptedConfig, knowledge_call

pytestmark = pytest.mark.anyio


def working_memory(turn: int) -> str:
    return f"# Working memory\n\n## User\n- Name: Dana\n- Turns so far: {turn}\n"


async def run_turns(store, first_turn: int, *, tool_write: bool = False) -> TrackingConfig:
    """Two ``ask`` calls of a real Agent on ``store``; returns the tracked model (for its prompts)."""
    script = [f"reply {first_turn}"]
    if tool_write:
        script.append(knowledge_call("write", ARTIFACT_PATH, ARTIFACT))
    script.append(f"reply {first_turn + 1}")
    model = TrackingConfig(ScriptedConfig(*script))
    aggregator = TrackingConfig(ScriptedConfig(working_memory(first_turn), working_memory(first_turn + 1)))
    agent = Agent(
        "concierge",
        "You are a travel concierge.",
        config=model,
        knowledge=KnowledgeConfig(
            store=store,
            aggregate=WorkingMemoryAggregate(config=aggregator),
            aggregate_trigger=AggregateTrigger(on_end=True),
        ),
        assembly=[WorkingMemoryPolicy(), EpisodicMemoryPolicy()],
    )
    for turn in (first_turn, first_turn + 1):
        reply = await agent.ask(f"question {turn}")
        assert reply.body == f"reply {turn}"
    return model


def plain_files(folder: Path) -> dict[str, str]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        if Path(dirpath) == folder:
            dirnames[:] = [d for d in dirnames if d != ".memrev"]
            filenames = [f for f in filenames if not f.startswith("memrev.db")]
        for name in filenames:
            full = Path(dirpath) / name
            out["/" + str(full.relative_to(folder))] = full.read_text()
    return out


async def store_files(store) -> dict[str, str]:
    out = {}
    stack = ["/"]
    while stack:
        path = stack.pop()
        for name in await store.list(path):
            child = path.rstrip("/") + "/" + name.rstrip("/")
            if name.endswith("/"):
                stack.append(child)
            else:
                out[child] = await store.read(child)
    return out


async def test_swap_disk_store_for_versioned_store_in_place(tmp_path):
    folder = tmp_path / "state"

    # 1. Two turns on ag2's own DiskKnowledgeStore.
    await run_turns(DiskKnowledgeStore(folder), 1, tool_write=True)
    before = plain_files(folder)
    assert before[WORKING_MEMORY_PATH] == working_memory(2)
    assert before[ARTIFACT_PATH] == ARTIFACT
    assert any(p.startswith("/log/") and p.endswith(".jsonl") for p in before)

    # 2. The one-line swap: the same folder, now VersionedStore.
    store = VersionedStore(folder)
    try:
        adopted = (await store.log())[-1]
        assert adopted.author == ADOPT_AUTHOR and adopted.meta["adopted_from"] == str(folder)
        assert set(adopted.paths) == set(before)
        model = await run_turns(store, 3)
        # The agent remembered: the working memory of turn 2 is in the prompt of turn 3.
        assert f"## Working Memory\n\n{working_memory(2)}" in model.calls[0].prompt
        log = await store.log()
        assert log[-1].id == adopted.id  # the log starts with the adoption commit
        for path, text in before.items():  # nothing of the first turns is lost
            assert await store.read(path, rev=adopted.id) == text
            if path != WORKING_MEMORY_PATH and "/log/" not in path:
                assert await store.read(path) == text
        assert await store.read(WORKING_MEMORY_PATH) == working_memory(4)
        assert len(await store.log(WORKING_MEMORY_PATH)) == 3  # adopted + turns 3 and 4
    finally:
        store.close()
    assert plain_files(folder) == before  # without a working tree the old files are left as they were

    # 3. The same folder with a working tree: the files catch up with the head and stay there.
    store = VersionedStore(folder, worktree=True)
    try:
        assert plain_files(folder) == await store_files(store)
        model = await run_turns(store, 5)
        assert f"## Working Memory\n\n{working_memory(4)}" in model.calls[0].prompt
        head = await store_files(store)
        assert plain_files(folder) == head
        assert head[WORKING_MEMORY_PATH] == working_memory(6)
        # ag2's DiskKnowledgeStore reading the folder sees what the store holds.
        disk = DiskKnowledgeStore(folder)
        for path, text in head.items():
            assert await disk.read(path) == text
        log = await store.log()
        assert log[-1].id == adopted.id
        assert not [c for c in log if c.author == OUTSIDE_AUTHOR]  # no spurious outside edits
        assert len(await store.log(WORKING_MEMORY_PATH)) == 5
        assert await store.fsck() == []
    finally:
        store.close()

    # The CLI runs its own event loop: give it a thread of its own.
    result = await asyncio.to_thread(CliRunner().invoke, cli, ["--store", str(folder), "log", "--oneline"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[-1].endswith(f"adopt {len(before)} files from folder {folder}")
    print("\n$ memrev --store state log --oneline\n" + result.output.replace(str(tmp_path) + "/", ""))
