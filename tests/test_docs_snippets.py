"""Every ```python block of README.md and docs/*.md runs, on a fresh copy of the quick-start store.

Each block is the body of an ``async def`` (snippets ``await``), run with the
current folder holding the quick-start store's files as in
tests/test_docs_commands.py (``.quickstart-state``, ``notes``,
``journal-state``), and with ``store`` open on ``.quickstart-state`` and
``memrev`` and ``VersionedStore`` imported. A doc whose blocks use names an
earlier paragraph introduced (a model, an agent, a ``MemoryContent``) gets
them from its entry in ``SETUP``, explicit per doc; a PostgreSQL block reads
its URL from ``$MEMREV_STORE``, set from the ``pg_url`` fixture; an OpenAI
Agents block's ``Runner.run`` runs on a scripted model. A block that
cannot run in a test (it needs a model or a network) is preceded by
``<!-- docs-snippet: not run: REASON -->``; the reason is required, and
test_few_blocks_are_marked_not_run keeps such blocks rare, in each doc.
Blocks another test runs already are listed in ``RUN_ELSEWHERE``.
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
import textwrap
import types
from pathlib import Path

import pytest

from test_docs_commands import ROOT, build_quickstart, build_workdir

DOCS = [ROOT / "README.md"] + [ROOT / "docs" / f"{name}.md" for name in (
    "api", "autogen", "backends", "claude-memory-tool", "deployment", "langgraph", "mcp", "openai_agents", "provenance", "purge")]
# (doc, the block's first line): the test that runs that block already.
RUN_ELSEWHERE = {
    ("autogen.md", 'for text in ["Dana is vegetarian", "Dana\'s favourite pizza is margherita",'):
        "test_docs_commands.py::test_autogen_md_ranked_query_example_prints_what_it_shows",
}
PG_DOCS = {"deployment.md"}  # their blocks open $MEMREV_STORE, a fresh PostgreSQL database
MARKER = re.compile(r"<!-- docs-snippet: not run: (?P<why>\S.*?) -->")


def python_blocks(text: str) -> list[tuple[int, str, str | None]]:
    """(line of the ```python fence, code, reason it is not run or None), in order."""
    lines, out, i = text.splitlines(), [], 0
    while i < len(lines):
        if lines[i].strip() != "```python":
            i += 1
            continue
        marker = MARKER.fullmatch(lines[i - 1].strip()) if i else None
        j = i + 1
        while lines[j].strip() != "```":
            j += 1
        code = textwrap.dedent("\n".join(lines[i + 1 : j]))  # a block in a list item is indented
        out.append((i + 1, code, marker["why"] if marker else None))
        i = j + 1
    return out


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory) -> Path:
    return build_quickstart(tmp_path_factory.mktemp("snippets"))


def _cases() -> list:
    return [pytest.param(doc, line, code, id=f"{doc.name}:{line}")
            for doc in DOCS for line, code, why in python_blocks(doc.read_text())
            if why is None and (doc.name, code.splitlines()[0]) not in RUN_ELSEWHERE]


def _autogen_names(store) -> dict:
    """What docs/autogen.md's blocks use from its text: scripted offline models, AutoGen's memory types."""
    from ag2.testing import TestConfig
    from autogen_core.memory import MemoryContent, MemoryMimeType
    from autogen_ext.models.replay import ReplayChatCompletionClient

    return {"ag2_model": TestConfig("Noted."), "autogen_model": ReplayChatCompletionClient(["Noted."]),
            "model_client": ReplayChatCompletionClient(["A summary."], model_info={
                "vision": False, "function_calling": True, "json_output": False, "family": "unknown",
                "structured_output": False}),
            "MemoryContent": MemoryContent, "MemoryMimeType": MemoryMimeType}


def _backends_names(store) -> dict:
    """docs/backends.md: the reader's own backend package (here sqlite under another scheme), pytest."""
    from memrev.backends import open_backend
    from memrev.testing.conformance import BackendConformance

    class MyBackend:
        @staticmethod
        def from_url(url, *, durability="normal", create=True):
            return open_backend("sqlite://" + url.split("://", 1)[1], durability=durability, create=create)

    package, module = types.ModuleType("mypackage"), types.ModuleType("mypackage.memrev_backend")
    module.MyBackend = MyBackend  # type: ignore[attr-defined]
    package.memrev_backend = module  # type: ignore[attr-defined]
    sys.modules.update({"mypackage": package, "mypackage.memrev_backend": module})
    return {"pytest": pytest, "BackendConformance": BackendConformance}


def _offline_runner() -> dict:
    """``Runner.run`` of an agent without ``model=`` on a scripted model, not the OpenAI API, and
    test_openai_runner's ``get_weather``: the README's and openai_agents.md's first blocks run as written.
    (``set_default_agent_runner`` is the SDK's own hook; ``_run`` puts the default runner back.)"""
    from agents import ModelProvider, RunConfig
    from agents.run import AgentRunner, set_default_agent_runner

    from test_openai_runner import ScriptedModel, get_weather, message, tool_call

    model = ScriptedModel([[tool_call("Lisbon", 1)], [message("Sunny and 24 C in Lisbon.", 1)],
                           [message("Il fait beau à Lisbonne.", 2)]])

    class Scripted(ModelProvider):
        def get_model(self, model_name):
            return model

    class Offline(AgentRunner):
        async def run(self, starting_agent, input, **kwargs):
            kwargs["run_config"] = RunConfig(model_provider=Scripted(), tracing_disabled=True)
            return await super().run(starting_agent, input, **kwargs)

    set_default_agent_runner(Offline())
    return {"get_weather": get_weather}


def _readme_names(store) -> dict:
    """README.md: its OpenAI Agents block on a scripted model; its TieredMemory block's model client."""
    return {**_offline_runner(), "model_client": _autogen_names(store)["model_client"]}


def _openai_names(store) -> dict:
    """docs/openai_agents.md: an agent on test_openai_runner's scripted offline model, a session, a prompt."""
    from agents import Agent, Runner, set_tracing_disabled

    from test_openai_runner import ScriptedModel, message

    set_tracing_disabled(True)
    agent = Agent(name="forecaster", instructions="Answer weather questions.",
                  model=ScriptedModel([[message("Sunny.", 1)]]))
    return {**_offline_runner(), "Runner": Runner, "agent": agent, "prompt": "What's the weather in Lisbon?",
            "session": store.session("trip-42")}


def _provenance_names(store) -> dict:
    """docs/provenance.md: the text its first block writes, AutoGen's MemoryContent."""
    from autogen_core.memory import MemoryContent

    return {"text": "- Dana is vegetarian\n", "MemoryContent": MemoryContent}


async def _api_names(store) -> dict:
    """docs/api.md: the branch ``trial`` its merge example merges."""
    await store.branch("trial")
    return {}


def _claude_memory_names(store) -> dict:
    """docs/claude-memory-tool.md: ``client``, an ``AsyncAnthropic`` whose transport answers as the
    Messages API would (test_anthropic_memory's ``ScriptedAPI``): Claude views, creates, is done."""
    from test_anthropic_memory import ScriptedAPI, message, tool_use

    api = ScriptedAPI([
        tool_use({"command": "view", "path": "/memories"}),
        tool_use({"command": "create", "path": "/memories/user.md", "file_text": "- prefers green tea\n"}),
        message([{"type": "text", "text": "Noted: you prefer green tea."}]),
    ])
    return {"client": api.client()}


SETUP = {"README.md": _readme_names, "api.md": _api_names, "autogen.md": _autogen_names, "backends.md": _backends_names,
         "claude-memory-tool.md": _claude_memory_names, "openai_agents.md": _openai_names,
         "provenance.md": _provenance_names}


async def _run(code: str, where: str, doc: str) -> None:
    from agents.run import set_default_agent_runner

    import memrev
    from memrev import VersionedStore
    from memrev.backends import unregister
    from memrev.frameworks.memory import VersionedMemory

    store = VersionedStore(".quickstart-state", create=False)
    scope = {"memrev": memrev, "VersionedStore": VersionedStore, "store": store}
    body = "async def snippet():\n" + "".join(f"    {ln}\n" for ln in code.splitlines()) + "    return locals()\n"
    opened: dict = {}
    try:
        if doc in SETUP:
            names = SETUP[doc](store)
            scope.update(await names if asyncio.iscoroutine(names) else names)
        exec(compile(body, where, "exec"), scope)
        opened = await scope["snippet"]()
    finally:
        for value in [*scope.values(), *opened.values()]:  # every store a snippet opened
            if isinstance(value, (VersionedStore, VersionedMemory)):  # a loaded memory owns its store
                value.close()
        unregister("mydb")
        set_default_agent_runner(None)
        for name in ("mypackage", "mypackage.memrev_backend"):
            sys.modules.pop(name, None)


@pytest.mark.slow
@pytest.mark.parametrize(("doc", "line", "code"), _cases())
def test_every_python_snippet_runs(doc, line, code, quickstart, tmp_path, request, monkeypatch):
    if doc.name in PG_DOCS:
        monkeypatch.setenv("MEMREV_STORE", request.getfixturevalue("pg_url"))
    work = build_workdir(tmp_path, quickstart)
    before = os.getcwd()
    os.chdir(work)
    try:
        asyncio.run(_run(code, f"{doc.name}:{line}", doc.name))
    finally:
        os.chdir(before)


def test_few_blocks_are_marked_not_run():
    blocks = [(doc, b) for doc in DOCS for b in python_blocks(doc.read_text())]
    skipped = [(doc.name, line, why) for doc, (line, _, why) in blocks if why is not None]
    assert len(blocks) >= 20
    assert len(skipped) * 4 < len(blocks), skipped
    assert all(len(why) > 10 for _, _, why in skipped)
    for doc in DOCS:  # and in each doc: at most half its blocks marked, at least one run
        mine = [why for d, (_, _, why) in blocks if d == doc]
        assert mine and sum(why is not None for why in mine) * 2 <= len(mine), doc.name
    assert all(any(d.name == name and b[1].splitlines()[0] == first for d, b in blocks)
               for name, first in RUN_ELSEWHERE), "a RUN_ELSEWHERE block is no longer in its doc"
