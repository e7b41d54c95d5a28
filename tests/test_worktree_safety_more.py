"""The working tree's safety, round three continued (issue 20, items 12 and 2): memrev's own stored
files stay out of the agent's view, and a file memrev could not store is never destroyed by memrev.
Real stores, real folders, real binary files and links, ag2's real knowledge tool."""

from __future__ import annotations

import asyncio

import pytest
from click.testing import CliRunner

from memrev import VersionedStore
from memrev.cli import main as cli
from memrev.core.paths import MERGE_KINDS_PATH, OWN_FILES

pytestmark = pytest.mark.anyio


async def run_cli(*args: str):
    """The real CLI, in a thread: it runs its own event loop."""
    return await asyncio.to_thread(CliRunner().invoke, cli, list(args))


# ------------------------------------------------------------------ item 12


async def test_merge_kinds_file_is_hidden_from_the_agents_listings(tmp_path):
    """Item 12: /.memrev-merge-kinds.json is memrev's, not the agent's: list("/") (head, inside a
    transaction, at(rev)) and exists("/") leave it out; it stays in history and `memrev ls` hides it too."""
    assert MERGE_KINDS_PATH in OWN_FILES
    async with VersionedStore(tmp_path / "s.db") as store:
        await store.declare_kind("/notes/*.log", "append-log")
        assert await store.read(MERGE_KINDS_PATH) is not None  # stored, and readable by its name
        assert await store.list("/") == []
        assert await store.exists("/") is False
        await store.write("/notes/a.log", "x\n")
        assert await store.list("/") == ["notes/"]
        assert await store.list("") == ["notes/"]
        async with store.transaction("staged"):
            await store.write("/b.md", "b")
            assert await store.list("/") == ["b.md", "notes/"]
            await store.declare_kind("/b.md", "text")  # joins the transaction's commit
            assert await store.list("/") == ["b.md", "notes/"]
        head = await store.head()
        assert head is not None
        assert await store.at(head).list("/") == ["b.md", "notes/"]
        assert await store.list("/", rev=head) == ["b.md", "notes/"]
        # the person's views of history still show the declarations
        assert any(c.path == MERGE_KINDS_PATH for c in await store.diff_from_empty(head))
        assert await store.log(MERGE_KINDS_PATH)
    result = await run_cli("--store", str(tmp_path / "s.db"), "ls", "/")
    assert result.exit_code == 0 and MERGE_KINDS_PATH[1:] not in result.output and "notes/" in result.output


async def test_merge_kinds_file_alone_is_an_empty_store_in_a_transaction(tmp_path):
    """Item 12: in a transaction that deleted everything else, the declarations do not make "/" non-empty."""
    async with VersionedStore(tmp_path / "s.db") as store:
        await store.write("/a.md", "a")
        await store.declare_kind("/x/*.log", "append-log")
        async with store.transaction("drop"):
            await store.delete("/a.md")
            await store.write("/tmp.md", "t")
            await store.delete("/tmp.md")
            assert await store.list("/") == []
            assert await store.exists("/") is False


@pytest.mark.slow  # imports ag2
async def test_merge_kinds_file_is_hidden_from_ag2s_knowledge_tool(tmp_path):
    """Item 12: the knowledge tool ag2 gives an Agent lists through the store: no declarations file."""
    from ag2.agent import _make_knowledge_tool

    async with VersionedStore(tmp_path / "s.db") as store:
        tool = _make_knowledge_tool(store)
        await store.declare_kind("/notes/*.log", "append-log")
        assert await tool.model.call(action="list", path="/") == "Empty: /"
        await store.write("/notes/a.log", "x\n")
        assert await tool.model.call(action="list", path="/") == "notes/"
        assert "append-log" in await tool.model.call(action="read", path=MERGE_KINDS_PATH)
