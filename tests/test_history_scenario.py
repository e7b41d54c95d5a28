"""The issue 4 scenario, end to end with real AG2 agents (offline, scripted).

An agent runs three turns on main; a second agent runs two turns on a branch
created from turn one; the branch is merged back with a clean diff3 (the two
agents edited different lines of ``/memory/working.md``). Blame attributes
every line of the merged working memory to the turn that wrote it, and a
bundle of the result imports into a fresh store with identical commits and a
clean fsck. A third agent is then replayed against ``store.at(turn one)``.

Models are scripted with ``ag2.testing.TestConfig`` (see ``test_ag2_agent``
for why the script must be shared across ``create()`` calls).
"""

from __future__ import annotations

import pytest
from ag2 import Agent, KnowledgeConfig
from ag2.aggregate import AggregateTrigger, WorkingMemoryAggregate
from ag2.knowledge import LOG_PREFIX, WORKING_MEMORY_PATH
from ag2.policies import WorkingMemoryPolicy
from ag2.testing import TestConfig, TrackingConfig

from memrev import VersionedStore

pytestmark = pytest.mark.anyio

WM = WORKING_MEMORY_PATH

WM1 = """\
# Working memory
## User
- Name: Dana
- Prefers short answers
## Trip
- Destination: Lisbon
- Dates: not set
## Food
- Diet: unknown
- Shortlist: none
"""
# Main, turn 2 and 3: the User and Trip sections.
WM2 = WM1.replace("- Prefers short answers", "- Prefers detailed answers with sources")
WM3 = WM2.replace("- Dates: not set", "- Dates: 14-16 June")
# Branch, turn 1 and 2: the Food section, and a new section at the end.
WMB1 = WM1.replace("- Diet: unknown", "- Diet: vegetarian")
WMB2 = WMB1.replace("- Shortlist: none", "- Shortlist: /artifacts/lisbon-restaurants.md") + (
    "## Notes\n- Explored food options on a branch\n"
)
MERGED = """\
# Working memory
## User
- Name: Dana
- Prefers detailed answers with sources
## Trip
- Destination: Lisbon
- Dates: 14-16 June
## Food
- Diet: vegetarian
- Shortlist: /artifacts/lisbon-restaurants.md
## Notes
- Explored food options on a branch
"""
# Which turn wrote each line of MERGED.
OWNERS = ["T1", "T1", "T1", "T2", "T1", "T1", "T3", "T1", "B1", "B2", "B2", "B2"]

MAIN_QUESTIONS = (
    "Hi, I'm Dana. Keep answers short. I'm planning a Lisbon weekend.",
    "Actually, give me detailed answers with sources from now on.",
    "The trip is booked for 14-16 June.",
)
MAIN_REPLIES = ("Noted, Dana.", "Detailed answers from now on.", "Booked: 14-16 June.")
BRANCH_QUESTIONS = ("I'm vegetarian.", "Save me a restaurant shortlist.")
BRANCH_REPLIES = ("Noted: vegetarian.", "Shortlist saved.")


class ScriptedConfig(TestConfig):
    """A ``TestConfig`` whose script is consumed across ``create()`` calls."""

    def __init__(self, *turns) -> None:
        super().__init__(*turns)
        self._client = super().create()

    def create(self):
        return self._client


def make_agent(name: str, store, replies, memories):
    model = TrackingConfig(ScriptedConfig(*replies))
    aggregator = TrackingConfig(ScriptedConfig(*memories))
    agent = Agent(
        name,
        "You are a travel concierge.",
        config=model,
        knowledge=KnowledgeConfig(
            store=store,
            aggregate=WorkingMemoryAggregate(config=aggregator),
            aggregate_trigger=AggregateTrigger(on_end=True),
        ),
        assembly=[WorkingMemoryPolicy()],
    )
    return agent, model, aggregator


def prompt_text(call) -> str:
    p = call.prompt
    return p if isinstance(p, str) else "\n".join(str(x) for x in p)


async def wm_commit(store: VersionedStore) -> str:
    """The commit of the newest version of working memory on this handle's branch."""
    (c,) = await store.log(WM, limit=1)
    return c.id


async def run_scenario(tmp_path, order: str):
    loc = tmp_path / "state"
    store = VersionedStore(loc, author="agent-main")
    main_agent, main_model, main_agg = make_agent("concierge", store, MAIN_REPLIES, (WM1, WM2, WM3))
    turns: dict[str, str] = {}
    branch_store = None
    branch_model = branch_agg = None

    async def main_turn(i: int) -> None:
        reply = await main_agent.ask(MAIN_QUESTIONS[i])
        assert reply.body == MAIN_REPLIES[i]
        turns[f"T{i + 1}"] = await wm_commit(store)

    async def start_branch() -> None:
        nonlocal branch_store, branch_model, branch_agg
        created = await store.branch("experiment", at=turns["turn1-head"])
        created.close()
        branch_store = VersionedStore(loc, branch="experiment", author="agent-branch")
        agent, branch_model, branch_agg = make_agent("concierge-b", branch_store, BRANCH_REPLIES, (WMB1, WMB2))
        return agent

    await main_turn(0)
    turns["turn1-head"] = await store.resolve("HEAD")
    if order == "sequential":
        await main_turn(1)
        await main_turn(2)
    branch_agent = await start_branch()
    for i in range(2):
        if order == "alternating" and i == 1:
            await main_turn(1)
        reply = await branch_agent.ask(BRANCH_QUESTIONS[i])
        assert reply.body == BRANCH_REPLIES[i]
        turns[f"B{i + 1}"] = await wm_commit(branch_store)
    if order == "interleaved":
        await main_turn(1)
    if order in ("interleaved", "alternating"):
        await main_turn(2)
    return store, branch_store, turns, (main_model, main_agg, branch_model, branch_agg)


@pytest.mark.parametrize("order", ["sequential", "interleaved", "alternating"])
async def test_two_agents_branch_merge_blame_bundle(tmp_path, order):
    store, branch_store, turns, (main_model, main_agg, branch_model, branch_agg) = await run_scenario(tmp_path, order)
    fresh = None
    try:
        # --- each agent worked on its own branch's memory ------------------------
        assert await store.read(WM) == WM3
        assert await branch_store.read(WM) == WMB2
        assert [c.id for c in await store.log(WM)] == [turns["T3"], turns["T2"], turns["T1"]]
        assert [c.id for c in await branch_store.log(WM)] == [turns["B2"], turns["B1"], turns["T1"]]
        assert {c.author for c in await branch_store.log(WM, limit=2)} == {"agent-branch"}
        assert (await store.show(turns["T1"])).author == "agent-main"
        # The branch agent started from turn one's memory, never main's later ones.
        assert f"## Working Memory\n\n{WM1}" in prompt_text(branch_model.calls[0])
        assert f"## Working Memory\n\n{WMB1}" in prompt_text(branch_model.calls[1])
        assert all(WM2 not in prompt_text(c) and WM3 not in prompt_text(c) for c in branch_model.calls)
        branch_merges = [call.args[0].parts[0].content for call in branch_agg.mock.call_args_list]
        assert f"## Current Working Memory\n{WM1}" in branch_merges[0]
        assert f"## Current Working Memory\n{WMB1}" in branch_merges[1]
        main_merges = [call.args[0].parts[0].content for call in main_agg.mock.call_args_list]
        assert f"## Current Working Memory\n{WM2}" in main_merges[2]
        # Each ask left its own event log on its own branch.
        main_logs = [n for n in await store.list(LOG_PREFIX) if n.endswith(".jsonl")]
        branch_logs = [n for n in await branch_store.list(LOG_PREFIX) if n.endswith(".jsonl")]
        assert len(main_logs) == 3 and len(branch_logs) == 3  # the branch inherits turn one's
        assert len(set(main_logs) | set(branch_logs)) == 5

        # --- merge the branch back: clean diff3 ---------------------------------
        ours, theirs = await store.resolve("HEAD"), await branch_store.resolve("HEAD")
        result = await store.merge("experiment")
        assert result.status == "merged"
        merge_commit = await store.show("HEAD")
        assert merge_commit.id == result.commit
        assert merge_commit.parents == (ours, theirs)
        assert await store.read(WM) == MERGED
        assert len([n for n in await store.list(LOG_PREFIX) if n.endswith(".jsonl")]) == 5
        assert await store.fsck() == []
        assert (await store.merge("experiment")).status == "up-to-date"

        # --- blame: every line to the turn that wrote it ------------------------
        blame = await store.blame(WM)
        assert [b.text for b in blame] == MERGED.splitlines()
        assert [b.commit.id for b in blame] == [turns[o] for o in OWNERS]
        authors = ["agent-branch" if o.startswith("B") else "agent-main" for o in OWNERS]
        assert [b.commit.author for b in blame] == authors
        # The per-path log of working memory has all five turns and the merge.
        assert {c.id for c in await store.log(WM)} == {result.commit, *(turns[t] for t in ("T1", "T2", "T3", "B1", "B2"))}

        # --- a bundle of the result imports into a fresh store -------------------
        bundle = tmp_path / "result.memrev"
        await store.export_bundle(bundle)
        fresh = VersionedStore(tmp_path / "fresh")
        await fresh.import_bundle(bundle)
        assert await fresh.fsck() == []
        assert await fresh.branches() == await store.branches()
        for rev in ("main", "experiment"):
            assert [c.id for c in await fresh.log(rev=rev)] == [c.id for c in await store.log(rev=rev)]
            assert [c.id for c in await fresh.log(WM, rev=rev)] == [c.id for c in await store.log(WM, rev=rev)]
        assert await fresh.read(WM) == MERGED
        assert [(b.text, b.commit.id) for b in await fresh.blame(WM)] == [(b.text, b.commit.id) for b in blame]
    finally:
        store.close()
        branch_store.close()
        if fresh is not None:
            fresh.close()


async def test_agent_replayed_against_a_past_revision(tmp_path):
    store, branch_store, turns, _ = await run_scenario(tmp_path, "sequential")
    branch_store.close()
    try:
        before = [c.id for c in await store.log()]
        view = store.at(turns["turn1-head"])
        model = TrackingConfig(ScriptedConfig("Replayed answer."))
        replay = Agent(
            "concierge",
            "You are a travel concierge.",
            config=model,
            knowledge=KnowledgeConfig(store=view),
            assembly=[WorkingMemoryPolicy()],
        )
        reply = await replay.ask("What do you know about me?")
        assert reply.body == "Replayed answer."
        # The agent saw turn one's memory, not today's.
        assert f"## Working Memory\n\n{WM1}" in prompt_text(model.calls[0])
        assert WM3 not in prompt_text(model.calls[0])
        # Its attempt to persist an event log was refused; nothing was written.
        assert [c.id for c in await store.log()] == before
        assert await store.read(WM) == WM3
        assert await view.read(WM) == WM1
    finally:
        store.close()
