"""Turning the working tree on over a folder adopted earlier, when the stale files and the
branch both changed since the adoption (issue 20 item 10).

Before: the stale copy was committed over memrev's own commits as an outside edit (an
append log lost memrev's appends at HEAD). Now the two sides merge by the path's declared
kind with the adoption's version as base; when they do not merge, ``WorkTreeDiverged``
names the paths and nothing is written.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from memrev import VersionedStore, errors
from memrev.folders.worktree import OUTSIDE_AUTHOR

pytestmark = pytest.mark.anyio


def _files(folder: Path) -> dict[str, str]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = [d for d in dirnames if d != ".memrev"]
        for name in filenames:
            if name.startswith("memrev.db"):
                continue
            p = Path(dirpath) / name
            out["/" + p.relative_to(folder).as_posix()] = p.read_text()
    return out


async def _adopted(tmp_path: Path, files: dict[str, str], kinds: dict[str, str] | None = None) -> Path:
    folder = tmp_path / "state"
    folder.mkdir()
    for name, text in files.items():
        (folder / name.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        (folder / name.lstrip("/")).write_text(text)
    store = VersionedStore(folder)  # adopts; the tree is off
    try:
        for pattern, kind in (kinds or {}).items():
            await store.declare_kind(pattern, kind)
    finally:
        store.close()
    return folder


async def test_an_append_log_changed_on_both_sides_keeps_memrevs_appends(tmp_path):
    folder = await _adopted(tmp_path, {"/events.log": "one\n"}, {"/events.log": "append-log"})
    store = VersionedStore(folder)
    await store.append("/events.log", "two (memrev)\n")
    store.close()
    with open(folder / "events.log", "a") as f:  # the stale copy, appended to by hand
        f.write("three (by hand)\n")

    store = VersionedStore(folder, worktree=True)
    try:
        head = await store.read("/events.log")
        assert head == "one\ntwo (memrev)\nthree (by hand)\n"  # was "one\nthree (by hand)\n"
        assert (folder / "events.log").read_text() == head
        [outside] = [c for c in await store.log() if c.author == OUTSIDE_AUTHOR]
        assert outside.paths == ("/events.log",)
    finally:
        store.close()


async def test_text_changed_in_different_lines_merges(tmp_path):
    folder = await _adopted(tmp_path, {"/notes.md": "a\nb\nc\nd\ne\n"})
    store = VersionedStore(folder)
    await store.write("/notes.md", "A (memrev)\nb\nc\nd\ne\n")
    store.close()
    (folder / "notes.md").write_text("a\nb\nc\nd\nE (by hand)\n")

    store = VersionedStore(folder, worktree=True)
    try:
        assert await store.read("/notes.md") == "A (memrev)\nb\nc\nd\nE (by hand)\n"
        assert _files(folder)["/notes.md"] == "A (memrev)\nb\nc\nd\nE (by hand)\n"
    finally:
        store.close()


async def test_sides_that_do_not_merge_are_refused_naming_them_and_nothing_is_written(tmp_path):
    folder = await _adopted(tmp_path, {"/notes.md": "a\n", "/other.md": "x\n", "/log.md": "1\n"})
    store = VersionedStore(folder)
    await store.write("/notes.md", "a changed by memrev\n")
    await store.append("/log.md", "2\n")  # text kind: both sides appending conflicts
    head_before = (await store.log())[0].id
    store.close()
    (folder / "notes.md").write_text("a changed by hand\n")
    (folder / "log.md").write_text("1\nby hand\n")
    (folder / "other.md").write_text("y by hand\n")  # changed on disk only: no divergence
    disk_before = _files(folder)

    with pytest.raises(errors.WorkTreeDiverged) as caught:
        VersionedStore(folder, worktree=True)
    assert caught.value.paths == ("/log.md", "/notes.md")
    assert "/notes.md" in str(caught.value) and "nothing was written" in str(caught.value)
    assert _files(folder) == disk_before  # no file touched

    store = VersionedStore(folder)  # the tree is still off, the branch as it was
    try:
        assert not store.worktree
        assert (await store.log())[0].id == head_before
        assert await store.read("/notes.md") == "a changed by memrev\n"
    finally:
        store.close()

    # The person settles it (keeps memrev's version of one, their own of the other): it opens.
    (folder / "notes.md").write_text("a changed by memrev\n")
    (folder / "log.md").write_text("1\n")  # the stale copy: the head's version replaces it
    store = VersionedStore(folder, worktree=True)
    try:
        assert await store.read("/log.md") == "1\n2\n"
        assert await store.read("/other.md") == "y by hand\n"
        files = _files(folder)
        assert {p: files[p] for p in ("/notes.md", "/log.md", "/other.md")} == {
            "/notes.md": "a changed by memrev\n", "/log.md": "1\n2\n", "/other.md": "y by hand\n"}
    finally:
        store.close()


def test_a_link_planted_at_the_worktree_lock_is_refused_and_creates_nothing(tmp_path):
    """A sibling of item 1: ``.memrev/worktree.lock`` was opened with O_CREAT through a link,
    creating an empty file wherever the link pointed."""
    folder = tmp_path / "state"
    (folder / ".memrev").mkdir(parents=True)
    (folder / "a.md").write_text("a\n")
    target = tmp_path / "elsewhere" / "created-by-memrev"
    target.parent.mkdir()
    os.symlink(target, folder / ".memrev" / "worktree.lock")
    with pytest.raises(errors.UnsafeWorkTree, match="worktree.lock"):
        VersionedStore(folder, worktree=True)
    assert not target.exists()
