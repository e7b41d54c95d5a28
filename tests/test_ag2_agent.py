"""End to end: a real AG2 ``Agent`` whose knowledge store is ``memrev.VersionedStore``.

Everything runs offline: the agent's model and the working-memory aggregation
model are scripted with ``ag2.testing.TestConfig``. Three ``ask`` calls (one of
which makes the model call the ``knowledge`` tool) must leave a history that
``log``/``diff``/``read(rev=...)`` can explain, and that a second process
reopening the folder sees identically.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from ag2 import Agent, KnowledgeConfig
from ag2.aggregate import AggregateTrigger, WorkingMemoryAggregate
from ag2.events import ToolCallEvent
from ag2.knowledge import LOG_PREFIX, WORKING_MEMORY_PATH, EventLogWriter
from ag2.policies import EpisodicMemoryPolicy, WorkingMemoryPolicy
from ag2.testing import TestConfig, TrackingConfig

from memrev import VersionedStore

pytestmark = pytest.mark.anyio

AGENT_NAME = "concierge"
SKILL_PATHS = ("/SKILL.md", "/log/SKILL.md", "/artifacts/SKILL.md", "/memory/SKILL.md")
ARTIFACT_PATH = "/artifacts/lisbon-restaurants.md"
ARTIFACT = "# Vegetarian in Lisbon\n\n- Ao 26 Vegan Food Project\n- Jardim das Cerejas\n- Organi Chiado\n"

QUESTIONS = (
    "Hi, I'm Dana. Please keep your answers short.",
    "I'm vegetarian. Save me a shortlist of restaurants for my Lisbon weekend.",
    "Trip is booked for 14-16 June. From now on, give me detailed answers with sources.",
)
REPLIES = (
    "Noted, Dana. Short answers from now on.",
    f"Saved 3 vegetarian places to {ARTIFACT_PATH}.",
    "Great, enjoy Lisbon! I'll give detailed answers with sources from now on.",
)

# What the aggregation model returns after each ask: the new /memory/working.md.
WM1 = """\
# Working memory

## User
- Name: Dana
- Prefers short answers

## Open tasks
- Plan a weekend trip to Lisbon
"""
WM2 = """\
# Working memory

## User
- Name: Dana
- Prefers short answers
- Vegetarian

## Open tasks
- Plan a weekend trip to Lisbon
- Restaurant shortlist: /artifacts/lisbon-restaurants.md
"""
WM3 = """\
# Working memory

## User
- Name: Dana
- Prefers detailed answers with sources
- Vegetarian

## Open tasks
- Restaurant shortlist: /artifacts/lisbon-restaurants.md

## Done
- Lisbon trip booked for 14-16 June
"""
VERSIONS = (WM1, WM2, WM3)

# Exactly the lines each aggregation removed / added (in diff order).
CHANGES = {
    (0, 1): (
        [],
        ["- Vegetarian", "- Restaurant shortlist: /artifacts/lisbon-restaurants.md"],
    ),
    (1, 2): (
        ["- Prefers short answers", "- Plan a weekend trip to Lisbon"],
        ["- Prefers detailed answers with sources", "", "## Done", "- Lisbon trip booked for 14-16 June"],
    ),
}


class ScriptedConfig(TestConfig):
    """A ``TestConfig`` whose script is consumed across ``create()`` calls.

    ``TestConfig.create()`` starts a fresh client that replays the script from
    the top, and both ``Agent`` (once per ``ask``) and ``WorkingMemoryAggregate``
    (once per aggregation) call ``create()`` every time. Sharing one client makes
    turn N of the script answer model call N, whichever ``ask`` makes it.
    """

    def __init__(self, *turns) -> None:
        super().__init__(*turns)
        self._client = super().create()

    def create(self):
        return self._client


def knowledge_call(action: str, path: str, content: str = "") -> ToolCallEvent:
    return ToolCallEvent("knowledge", arguments=json.dumps({"action": action, "path": path, "content": content}))


def diff_body(diff: str) -> tuple[list[str], list[str]]:
    """(removed, added) lines of a unified diff, headers excluded."""
    removed: list[str] = []
    added: list[str] = []
    in_hunk = False
    for line in diff.splitlines():
        if line.startswith("@@"):
            in_hunk = True
        elif in_hunk and line.startswith("-"):
            removed.append(line[1:])
        elif in_hunk and line.startswith("+"):
            added.append(line[1:])
    return removed, added


REOPEN_SCRIPT = textwrap.dedent(
    """
    import asyncio, json, sys
    from memrev import VersionedStore

    async def main():
        store = VersionedStore(sys.argv[1])
        try:
            commits = await store.log(sys.argv[2])
            print(json.dumps({
                "content": await store.read(sys.argv[2]),
                "ids": [c.id for c in commits],
                "versions": [await store.read(sys.argv[2], rev=c.id) for c in commits],
                "all_ids": [c.id for c in await store.log()],
            }))
        finally:
            store.close()

    asyncio.run(main())
    """
)


@pytest.mark.slow  # measured >= 0.3 s: kept out of the quick loop
async def test_agent_on_versioned_store(tmp_path):
    state = tmp_path / "state"
    store = VersionedStore(state)

    model = TrackingConfig(
        ScriptedConfig(
            REPLIES[0],
            knowledge_call("write", ARTIFACT_PATH, ARTIFACT),
            REPLIES[1],
            REPLIES[2],
        )
    )
    aggregator = TrackingConfig(ScriptedConfig(*VERSIONS))
    agent = Agent(
        AGENT_NAME,
        "You are a travel concierge.",
        config=model,
        knowledge=KnowledgeConfig(
            store=store,
            aggregate=WorkingMemoryAggregate(config=aggregator),
            aggregate_trigger=AggregateTrigger(on_end=True),
        ),
        assembly=[WorkingMemoryPolicy(), EpisodicMemoryPolicy()],
    )

    try:
        replies = [await agent.ask(q) for q in QUESTIONS]

        # --- the agent did what the script says ---------------------------------
        assert [r.body for r in replies] == list(REPLIES)
        assert len(model.calls) == 4  # ask 2 = tool call + final answer
        assert len(aggregator.calls) == 3  # on_end: once per ask
        # Working memory written by aggregation N is read back from the store
        # into the prompt of ask N+1 (WorkingMemoryPolicy) and into the merge
        # prompt of aggregation N+1.
        assert not any("## Working Memory" in p for p in model.calls[0].prompt)
        assert f"## Working Memory\n\n{WM1}" in model.calls[1].prompt
        assert f"## Working Memory\n\n{WM2}" in model.calls[3].prompt
        merge_prompts = [call.args[0].parts[0].content for call in aggregator.mock.call_args_list]
        assert "## Current Working Memory\n(empty)\n" in merge_prompts[0]
        assert f"## Current Working Memory\n{WM1}" in merge_prompts[1]
        assert f"## Current Working Memory\n{WM2}" in merge_prompts[2]
        for prompt, question, reply in zip(merge_prompts, QUESTIONS, REPLIES):
            assert question in prompt and reply in prompt

        # --- /memory/working.md: exactly three versions, newest first -----------
        assert await store.read(WORKING_MEMORY_PATH) == WM3
        wm_log = await store.log(WORKING_MEMORY_PATH)
        assert len(wm_log) == 3
        assert len({c.id for c in wm_log}) == 3
        for commit in wm_log:
            assert len(commit.id) == 40
            assert WORKING_MEMORY_PATH in commit.paths
            assert commit.time.tzinfo is not None
        assert [c.time for c in wm_log] == sorted((c.time for c in wm_log), reverse=True)
        oldest_first = list(reversed(wm_log))
        for commit, expected in zip(oldest_first, VERSIONS):
            assert await store.read(WORKING_MEMORY_PATH, rev=commit.id) == expected
        assert await store.log(WORKING_MEMORY_PATH, limit=1) == wm_log[:1]

        # --- diff between successive versions = exactly the aggregate's edit ----
        for (i, j), (removed, added) in CHANGES.items():
            older, newer = oldest_first[i].id, oldest_first[j].id
            changes = await store.diff(older, newer, WORKING_MEMORY_PATH)
            assert len(changes) == 1, changes
            (change,) = changes
            assert change.path == WORKING_MEMORY_PATH
            assert change.status == "modified"
            assert (change.old, change.new) == (VERSIONS[i], VERSIONS[j])
            header = change.diff.splitlines()[:2]
            assert header[0].startswith("--- a/") and header[0].endswith("memory/working.md"), header
            assert header[1].startswith("+++ b/") and header[1].endswith("memory/working.md"), header
            assert diff_body(change.diff) == (removed, added), change.diff
            assert await store.diff(older, older, WORKING_MEMORY_PATH) == []

        # --- bootstrap SKILL.md files: readable and in history ------------------
        full_log = await store.log()
        all_ids = [c.id for c in full_log]
        assert len(set(all_ids)) == len(all_ids)
        logged_paths = {p for c in full_log for p in c.paths}
        assert await store.read("/.initialized") == AGENT_NAME
        assert "/.initialized" in logged_paths
        for path in SKILL_PATHS:
            text = await store.read(path)
            assert text, path
            assert path in logged_paths
            (commit,) = await store.log(path)
            assert commit.id in all_ids
            assert await store.read(path, rev=commit.id) == text
        assert (await store.read("/SKILL.md")).startswith(f"# {AGENT_NAME} Knowledge Store")
        # The bootstrap happened before anything else: all its commits are
        # older than the first working-memory version.
        first_wm = all_ids.index(oldest_first[0].id)
        for path in ("/.initialized", *SKILL_PATHS):
            (commit,) = await store.log(path)
            assert all_ids.index(commit.id) > first_wm

        # --- /log/<stream>.jsonl: one per ask, readable, in history -------------
        stream_ids = [str(r.context.stream.id) for r in replies]
        assert len(set(stream_ids)) == 3
        assert sorted(await store.list(LOG_PREFIX)) == sorted(
            ["SKILL.md", *(f"{sid}.jsonl" for sid in stream_ids)]
        )
        for sid, question, reply in zip(stream_ids, QUESTIONS, REPLIES):
            path = f"{LOG_PREFIX}{sid}.jsonl"
            assert path in logged_paths
            (commit,) = await store.log(path)
            assert commit.id in all_ids
            raw = await store.read(path)
            assert raw and raw == await store.read(path, rev=commit.id)
            records = [json.loads(line) for line in raw.splitlines()]
            assert records and all("type" in r and "data" in r for r in records)
            assert question in raw and reply in raw
            events = await EventLogWriter(store).load(sid)
            assert len(events) == len(records)

        # --- the file the model wrote through the `knowledge` tool --------------
        assert await store.read(ARTIFACT_PATH) == ARTIFACT
        assert await store.list("/artifacts/") == ["SKILL.md", "lisbon-restaurants.md"]
        (artifact_commit,) = await store.log(ARTIFACT_PATH)
        assert artifact_commit.id in all_ids
        assert ARTIFACT_PATH in artifact_commit.paths
        assert await store.read(ARTIFACT_PATH, rev=artifact_commit.id) == ARTIFACT
        # Written during ask 2: after working-memory v1, before v2 ...
        assert all_ids.index(oldest_first[1].id) < all_ids.index(artifact_commit.id) < all_ids.index(oldest_first[0].id)
        # ... so it is not there as of v1, and the v1 -> v2 diff shows it added
        # together with ask 1's event log.
        assert await store.read(ARTIFACT_PATH, rev=oldest_first[0].id) is None
        whole = await store.diff(oldest_first[0].id, oldest_first[1].id)
        assert [(c.path, c.status) for c in whole] == [
            (ARTIFACT_PATH, "added"),
            (f"{LOG_PREFIX}{stream_ids[0]}.jsonl", "added"),
            (WORKING_MEMORY_PATH, "modified"),
        ]
        assert whole[0].old is None and whole[0].new == ARTIFACT
    finally:
        store.close()

    # --- a new process reopening the folder sees the same thing -----------------
    proc = subprocess.run(
        [sys.executable, "-c", REOPEN_SCRIPT, str(state), WORKING_MEMORY_PATH],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout)
    assert seen["content"] == WM3
    assert seen["ids"] == [c.id for c in wm_log]
    assert seen["versions"] == [WM3, WM2, WM1]
    assert seen["all_ids"] == all_ids
