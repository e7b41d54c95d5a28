"""The working tree's scan of the folder: what it sees as changed, what it skips, what it commits."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from memrev import VersionedStore, adopt
from memrev.worktree import OUTSIDE_AUTHOR

pytestmark = pytest.mark.anyio


def _edit_in_place_keeping_mtime(path: Path, text: str) -> None:
    """Same size, same inode, and the mtime set back: only the ctime tells."""
    st = path.stat()
    assert len(text.encode()) == st.st_size
    with open(path, "r+b") as f:
        f.write(text.encode())
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_mtime_ns == st.st_mtime_ns and path.stat().st_ino == st.st_ino


@pytest.mark.parametrize("racy_ns", [0, 2_000_000_000])
async def test_a_same_size_edit_that_restores_the_mtime_is_committed(tmp_path, monkeypatch, racy_ns):
    """racy_ns 0: only the ctime can tell; the default: the racy-clean rule also reads the file again."""
    monkeypatch.setattr(adopt, "RACY_NS", racy_ns, raising=False)
    folder = tmp_path / "wt"
    store = VersionedStore(folder, worktree=True)
    await store.write("/a.md", "version one\n")
    store.close()
    _edit_in_place_keeping_mtime(folder / "a.md", "VERSION ONE\n")
    store = VersionedStore(folder)  # the reconcile at open
    try:
        assert await store.read("/a.md") == "VERSION ONE\n"
        outside = [c for c in await store.log() if c.author == OUTSIDE_AUTHOR]
        assert len(outside) == 1 and outside[0].paths == ("/a.md",)
        # And with the store open: memrev's next write of the path does not destroy the edit unseen.
        _edit_in_place_keeping_mtime(folder / "a.md", "version 2!!\n")
        await store.write("/a.md", "memrev's own\n")
        versions = [await store.read("/a.md", rev=c.id) for c in await store.log(path="/a.md")]
        assert set(versions[:2]) == {"memrev's own\n", "version 2!!\n"}
        assert (folder / "a.md").read_text() == await store.read("/a.md")
    finally:
        store.close()


async def _head(store: VersionedStore, path: str = "/") -> dict[str, str]:
    out = {}
    for name in await store.list(path):
        child = path.rstrip("/") + "/" + name.rstrip("/")
        out.update(await _head(store, child) if name.endswith("/") else {child: await store.read(child)})
    return out


@pytest.mark.parametrize("replace", ["file by directory", "directory by file", "file by symlink", "directory by symlink"])
async def test_a_path_replaced_by_another_kind_commits_the_removal(tmp_path, replace):
    folder = tmp_path / "wt"
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "sub").mkdir(parents=True)
    (elsewhere / "sub" / "b.md").write_text("outside the folder\n")
    store = VersionedStore(folder, worktree=True)
    await store.write("/keep.md", "kept\n")
    await store.write("/a" if "file by" in replace else "/a/old.md", "the old text\n")
    store.close()
    target = folder / "a"
    if replace.startswith("file"):
        target.unlink()
    else:
        (target / "old.md").unlink()
        target.rmdir()
    if replace.endswith("by directory"):
        target.mkdir()
        (target / "b.md").write_text("new under the directory\n")
        want = {"/keep.md": "kept\n", "/a/b.md": "new under the directory\n"}
    elif replace.endswith("by file"):
        target.write_text("a file now\n")
        want = {"/keep.md": "kept\n", "/a": "a file now\n"}
    else:
        target.symlink_to(elsewhere / "sub")
        want = {"/keep.md": "kept\n"}
    store = VersionedStore(folder)
    try:
        assert await _head(store) == want  # HEAD no longer serves the removed text
        assert all("the old text" not in text for text in want.values())
        if "symlink" in replace:
            assert (elsewhere / "sub" / "b.md").read_text() == "outside the folder\n" and target.is_symlink()
    finally:
        store.close()


def test_a_skipped_file_is_warned_of_once_not_at_every_command(tmp_path, caplog):
    import asyncio
    import logging

    from click.testing import CliRunner

    from memrev.cli import main as cli

    folder = tmp_path / "wt"

    async def setup() -> None:
        store = VersionedStore(folder, worktree=True)
        await store.write("/m.md", "one\n")
        store.close()

    asyncio.run(setup())
    (folder / "pic.bin").write_bytes(b"\xff\x00binary")
    (folder / "link.md").symlink_to(folder / "m.md")

    def warnings_of(args: list[str]) -> list[str]:
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="memrev"):
            result = CliRunner().invoke(cli, ["--store", str(folder), *args])
        assert result.exit_code == 0, result.output
        return [r.getMessage() for r in caplog.records if "leaving" in r.getMessage()]

    first = warnings_of(["log"])
    assert len(first) == 2 and any("/pic.bin" in m for m in first) and any("/link.md" in m for m in first)
    for args in (["log"], ["history", "/m.md"], ["ls", "/"]):
        assert warnings_of(args) == []
    # Gone and back: skipped anew, so warned anew.
    (folder / "pic.bin").unlink()
    assert warnings_of(["log"]) == []
    (folder / "pic.bin").write_bytes(b"\xff\x00binary again")
    again = warnings_of(["log"])
    assert len(again) == 1 and "/pic.bin" in again[0]
