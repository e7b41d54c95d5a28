"""The working tree's safety, round three continued (issue 20, items 12 and 2): memrev's own stored
files stay out of the agent's view, and a file memrev could not store is never destroyed by memrev.
Real stores, real folders, real binary files and links, ag2's real knowledge tool."""

from __future__ import annotations

import os

import pytest

from memrev import VersionedStore, errors
from memrev.core.paths import MERGE_KINDS_PATH, OWN_FILES
from memrev.folders import worktree_scan
from worktree_helpers import open_tree, run_cli

pytestmark = pytest.mark.anyio


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


# ------------------------------------------------------------------ item 2

BINARY = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\xff"
NOTES = {"/notes.md": "memrev's text\n"}  # the file every tree below starts with


async def test_a_binary_file_in_the_way_is_never_overwritten_or_removed(tmp_path):
    """Item 2: a binary file the user put over a stored path: write, append, delete (of it and of
    its folder) and restore refuse with UnstorableFileInTheWay naming it; nothing is committed and
    the bytes stay on disk."""
    folder = tmp_path / "wt"
    store = await open_tree(folder, NOTES, poll_interval=3600)
    try:
        await store.write("/d/inner.md", "inner\n")
        first = await store.head()
        (folder / "notes.md").write_bytes(BINARY)
        (folder / "d" / "inner.md").write_bytes(BINARY)
        head = await store.head()
        attempts = [
            (store.write("/notes.md", "new"), "/notes.md"),
            (store.append("/notes.md", "more"), "/notes.md"),
            (store.delete("/notes.md"), "/notes.md"),
            (store.delete("/d"), "/d/inner.md"),
            (store.restore("/d", first), "/d/inner.md"),
        ]
        for attempt, in_the_way in attempts:
            with pytest.raises(errors.UnstorableFileInTheWay) as caught:
                await attempt
            assert list(caught.value.paths) == [in_the_way]
            assert in_the_way in str(caught.value)
        with pytest.raises(errors.UnstorableFileInTheWay):
            async with store.transaction("two"):
                await store.write("/ok.md", "fine")
                await store.write("/notes.md", "new")
        assert await store.head() == head  # nothing committed
        assert await store.read("/notes.md") == "memrev's text\n"
        assert (folder / "notes.md").read_bytes() == BINARY
        assert (folder / "d" / "inner.md").read_bytes() == BINARY
        assert not (folder / "ok.md").exists()
        await store.write("/other.md", "other")  # other paths still work
        assert (folder / "other.md").read_text() == "other" and (folder / "notes.md").read_bytes() == BINARY
    finally:
        store.close()


async def test_a_symlink_in_the_way_is_never_replaced(tmp_path):
    """Item 2: a symbolic link at a path memrev is asked to write is refused; link and target stay."""
    folder = tmp_path / "wt"
    store = await open_tree(folder, NOTES, poll_interval=3600)
    try:
        target = tmp_path / "elsewhere.txt"
        target.write_text("the user's")
        os.symlink(target, folder / "link.md")
        with pytest.raises(errors.UnstorableFileInTheWay, match="link.md"):
            await store.write("/link.md", "memrev's")
        assert os.path.islink(folder / "link.md") and target.read_text() == "the user's"
        assert await store.read("/link.md") is None
    finally:
        store.close()


async def test_an_oversize_file_in_the_way_is_never_overwritten(tmp_path, monkeypatch):
    """Item 2: a text file over the size limit (set low here) is not stored, so not overwritten."""
    folder = tmp_path / "wt"
    store = await open_tree(folder, NOTES, poll_interval=3600)
    try:
        monkeypatch.setattr(worktree_scan, "MAX_FILE_BYTES", 64)  # where the scan reads the limit
        big = "x" * 100 + "\n"
        (folder / "big.md").write_text(big)
        with pytest.raises(errors.UnstorableFileInTheWay, match="big.md"):
            await store.write("/big.md", "small")
        assert (folder / "big.md").read_text() == big and await store.read("/big.md") is None
    finally:
        store.close()


@pytest.mark.slow  # several commits and syncs
async def test_a_commit_made_elsewhere_leaves_the_unstorable_file_and_waits(tmp_path):
    """Item 2: revert is refused too; a commit the pre-check cannot see (another handle or process)
    is made, but the write-out leaves the binary file alone; once the user moves it, the head's file
    is placed."""
    folder = tmp_path / "wt"
    store = await open_tree(folder, NOTES, poll_interval=3600)
    try:
        await store.write("/notes.md", "second\n")
        second = await store.head()
        (folder / "notes.md").write_bytes(BINARY)
        assert second is not None
        with pytest.raises(errors.UnstorableFileInTheWay, match="notes.md"):
            await store.revert(second)
        assert await store.head() == second
        async with VersionedStore(folder / ".memrev" / "memrev.db") as elsewhere:  # the database, not the folder
            assert not elsewhere.worktree
            await elsewhere.revert(second)
        await store.write("/other.md", "y")  # this handle's next sync sees the other's commit
        assert await store.read("/notes.md") == "memrev's text\n"
        assert (folder / "notes.md").read_bytes() == BINARY
        os.rename(folder / "notes.md", tmp_path / "moved.png")
        await store.write("/other.md", "x")  # any sync retries the waiting file
        assert (folder / "notes.md").read_text() == "memrev's text\n"
        assert await store.read("/notes.md") == "memrev's text\n"
        assert (tmp_path / "moved.png").read_bytes() == BINARY
    finally:
        store.close()


@pytest.mark.slow  # the CLI
async def test_the_cli_restore_refuses_in_one_line(tmp_path):
    """Item 2: `memrev restore` over a binary file in the folder: one line naming it, exit 1, no commit."""
    folder = tmp_path / "wt"
    store = await open_tree(folder, NOTES, poll_interval=3600)
    first = await store.head()
    await store.write("/notes.md", "second\n")
    head = await store.head()
    store.close()
    assert first is not None
    (folder / "notes.md").write_bytes(BINARY)
    result = await run_cli("--store", str(folder), "restore", "/notes.md", "--rev", first)
    assert result.exit_code == 1 and "/notes.md" in result.output and "cannot store" in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert (folder / "notes.md").read_bytes() == BINARY
    async with VersionedStore(folder) as again:
        assert await again.head() == head
