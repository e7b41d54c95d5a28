"""The working tree's safety (issue 20, items 1, 2, 5, 7, 8, 10, 12): memrev's own folders,
the user's files, opening and branches. Real folders, real links, the real CLI."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from memrev import VersionedStore, errors
from memrev.cli import main as cli

pytestmark = pytest.mark.anyio


async def run_cli(*args: str):
    """The real CLI, in a thread: it runs its own event loop."""
    return await asyncio.to_thread(CliRunner().invoke, cli, list(args))


def victims(tmp_path: Path) -> Path:
    victim = tmp_path / "victim"
    victim.mkdir()
    for i in range(3):
        (victim / f"precious-{i}.txt").write_text(f"keep me {i}")
    return victim


def assert_survived(victim: Path) -> None:
    assert sorted(p.name for p in victim.iterdir()) == [f"precious-{i}.txt" for i in range(3)]


@pytest.mark.slow
@pytest.mark.parametrize("planted", ["tmp", "meta"])
async def test_a_link_planted_in_memrevs_own_folder_is_refused_and_never_followed(tmp_path, planted):
    """Item 1: a symlink at .memrev/tmp (or at .memrev) is refused; the files it points at survive
    the open, a reconcile and the read-only `memrev log`."""
    folder = tmp_path / "wt"
    store = VersionedStore(folder, worktree=True)
    await store.write("/a.md", "a")
    store.close()
    victim = victims(tmp_path)
    if planted == "tmp":
        os.rmdir(folder / ".memrev" / "tmp")
        os.symlink(victim, folder / ".memrev" / "tmp")
    else:
        os.rename(folder / ".memrev", tmp_path / "moved")
        for f in (tmp_path / "moved").iterdir():
            if f.is_file():
                os.rename(f, victim / f.name)
        os.symlink(victim, folder / ".memrev")
    before = sorted(p.name for p in victim.iterdir())
    with pytest.raises(errors.UnsafeWorkTree, match="not a directory"):
        VersionedStore(folder, worktree=True)
    result = await run_cli("--store", str(folder), "log")
    assert result.exit_code == 1 and "not a directory" in result.output
    assert sorted(p.name for p in victim.iterdir()) == before
    assert (victim / "precious-0.txt").read_text() == "keep me 0"


@pytest.mark.slow
async def test_tmp_cleanup_still_removes_memrevs_own_leftovers(tmp_path):
    """Item 1: the cleanup of a crashed write's temporary files still works, through the descriptor."""
    folder = tmp_path / "wt"
    store = VersionedStore(folder, worktree=True)
    await store.write("/a.md", "a")
    store.close()
    (folder / ".memrev" / "tmp" / "w-leftover").write_text("half a write")
    store = VersionedStore(folder, worktree=True)
    try:
        assert list((folder / ".memrev" / "tmp").iterdir()) == []
        await store.write("/a.md", "b")
        assert (folder / "a.md").read_text() == "b"
    finally:
        store.close()


async def test_the_branch_the_working_tree_follows_cannot_be_deleted(tmp_path):
    """Item 8: neither another branch's handle nor `memrev --branch feature branch -d main` deletes
    the branch the folder follows; the folder keeps its files."""
    folder = tmp_path / "wt"
    store = VersionedStore(folder, worktree=True)
    await store.write("/a.md", "a")
    feature = await store.branch("feature")
    with pytest.raises(errors.BranchInUse, match="working tree"):
        await feature.delete_branch("main")
    with pytest.raises(errors.BranchInUse, match="this handle"):
        await store.delete_branch("main")
    feature.close()
    store.close()
    result = await run_cli("--store", str(folder), "--branch", "feature", "branch", "-d", "main")
    assert result.exit_code == 1 and "working tree" in result.output
    store = VersionedStore(folder)
    try:
        assert "main" in await store.branches()
        assert (folder / "a.md").read_text() == "a"
        assert await store.read("/a.md") == "a"
        await store.delete_branch("feature")  # a branch nothing follows still goes
        assert "feature" not in await store.branches()
    finally:
        store.close()
