"""A purge (issue 22) and the working tree: purged bytes are never left in the folder's plain
files, and never come back as "outside edit" commits.

Whichever handle purges: one that keeps the folder's working tree (it rewrites the files under
the folder lock), another process watching the same folder, or a handle with no working tree
(the next open, or the watcher, follows the purge through its record). Real folders, real
SQLite files, a real second process.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from memrev import VersionedStore
from memrev.backends import open_backend
from memrev.folders import worktree
from memrev.folders.worktree import OUTSIDE_AUTHOR
from memrev.maintenance import purge as purge_mod
from memrev.repo.repository import Repository
from worktree_helpers import eventually

pytestmark = pytest.mark.anyio

SRC = str(Path(__file__).resolve().parents[1] / "src")
SECRET = "SENTINEL-7f3a9c41e2b8"
MARKER = "[purged]"


def raw_hits(folder: Path, needle: str = SECRET) -> list[str]:
    """Every regular file under ``folder`` (``.memrev/`` and the database's journals included)
    whose raw bytes hold ``needle``."""
    out = []
    for top, _, files in os.walk(folder):
        for name in files:
            full = os.path.join(top, name)
            if os.path.isfile(full) and not os.path.islink(full) and needle.encode() in Path(full).read_bytes():
                out.append(os.path.relpath(full, folder))
    return out


def found_files(report) -> set[str]:
    """The files (by name) a purge's verification scan found the secret in; anything else it
    found (an object, the database) fails the test."""
    names = set()
    for where in report.found:
        assert where.startswith("file ") and " at byte " in where, where
        names.add(where[len("file ") : where.index(" at byte ")])
    return names


def assert_honest(report, folder: Path) -> None:
    """No working tree could rewrite the files: the report names exactly the plain files
    still holding the secret (none: verified), and nothing else."""
    hits = raw_hits(folder)
    assert report.verified == (hits == [])
    assert found_files(report) == {os.path.basename(h) for h in hits}
    assert all(not h.startswith(".memrev") for h in hits)  # the store's own files are clean


async def assert_clean(folder: Path, files: dict[str, str | None], outside: tuple[str, ...] = ()) -> None:
    """Open the folder again (its working tree reconciles at open): nothing holds the secret,
    no outside edit but ``outside`` (paths) was committed, ``files`` (``None``: absent) are on
    disk and at the head, fsck is clean."""
    store = VersionedStore(folder)
    try:
        assert store.worktree
        log = await store.log()
        assert [c.message for c in log if c.author == OUTSIDE_AUTHOR] == [f"outside edit: {p}" for p in outside]
        assert await store.log(contains=SECRET) == []
        for rel, text in files.items():
            path = folder / rel
            if text is None:
                assert not path.exists(), rel
            else:
                assert path.read_text() == text
                assert await store.read("/" + rel) == text
        assert await store.verify_purged(text=[SECRET]) == []
        assert await store.fsck() == []
    finally:
        store.close()
    assert raw_hits(folder) == []


# ---------------------------------------------------------------- the purging handle keeps the tree


async def test_purge_text_rewrites_the_plain_file_and_it_never_comes_back(tmp_path):
    folder = tmp_path / "wt"
    store = VersionedStore(folder, worktree=True)
    try:
        await store.write("/notes/a.md", f"token {SECRET} here\n")
        await store.write("/notes/a.md", f"token {SECRET} here\nsecond line\n")
        await store.write("/b.md", "nothing to see\n")
        # Edited on disk too (an outside edit that keeps the secret): history first, then purged.
        (folder / "notes" / "a.md").write_text(f"token {SECRET} here\nsecond line\nedited on disk {SECRET}\n")
        assert SECRET in (folder / "notes" / "a.md").read_text()
        report = await store.purge(text=[SECRET], reason="leaked token")
        assert report.verified and report.found == ()
        assert report.commits_rewritten >= 2
        want = f"token {MARKER} here\nsecond line\nedited on disk {MARKER}\n"
        assert (folder / "notes" / "a.md").read_text() == want
        assert await store.read("/notes/a.md") == want
        assert raw_hits(folder) == []
        assert await store.log(contains=SECRET) == []
        # The folder as the watcher sees it afterwards: nothing to commit.
        (folder / "c.md").write_text("a later outside edit\n")

        async def seen():
            return await store.exists("/c.md")

        await eventually(seen, "the later outside edit", timeout=120)
        # The disk edit made before the purge (its secret purged with the rest), and the later one.
        outside = ["outside edit: /c.md", "outside edit: /notes/a.md"]
        assert [c.message for c in await store.log() if c.author == OUTSIDE_AUTHOR] == outside
    finally:
        store.close()
    store = VersionedStore(folder)
    try:
        assert [c.message for c in await store.log() if c.author == OUTSIDE_AUTHOR] == outside
        assert await store.log(contains=SECRET) == []
        assert (folder / "notes" / "a.md").read_text() == want
        assert await store.fsck() == []
    finally:
        store.close()
    assert raw_hits(folder) == []


async def test_purge_paths_removes_the_plain_file(tmp_path):
    folder = tmp_path / "wt"
    store = VersionedStore(folder, worktree=True)
    try:
        await store.write("/keep.md", "kept\n")
        await store.write("/private/secret.md", f"{SECRET}\n")
        await store.write("/private/secret.md", f"{SECRET}\nagain\n")
        await store.write("/keep.md", "kept, edited\n")
        assert (folder / "private" / "secret.md").exists()
        report = await store.purge(paths=["/private/**"], reason="private notes")
        assert report.verified and report.versions_removed == 2
        assert not (folder / "private" / "secret.md").exists()
        assert not (folder / "private").exists()  # the directory it left empty is pruned
        assert (folder / "keep.md").read_text() == "kept, edited\n"
        assert raw_hits(folder) == []
        assert not await store.exists("/private/secret.md")
    finally:
        store.close()
    await assert_clean(folder, {"keep.md": "kept, edited\n", "private/secret.md": None})


# ---------------------------------------------------------------- a purge by a handle with no working tree


async def _three_commits(folder: Path) -> None:
    store = VersionedStore(folder, worktree=True)
    try:
        await store.write("/a.md", f"hello {SECRET}\n")
        await store.write("/a.md", f"hello {SECRET}\nmore\n")
        await store.write("/b.md", "plain\n")
    finally:
        store.close()


async def test_purge_through_the_database_file_is_followed_at_the_next_open(tmp_path):
    """The handle opened on ``.memrev/memrev.db`` keeps no working tree (the mode stays on):
    the purge holds the folder's tree for its span and rewrites the files, and the next
    open finds nothing left to follow or commit."""
    folder = tmp_path / "wt"
    await _three_commits(folder)
    other = VersionedStore(folder / ".memrev" / "memrev.db")
    try:
        assert not other.worktree
        report = await other.purge(text=[SECRET], reason="leaked")
        assert report.commits_rewritten == 3
        # the folder's tree mode is on: the purge held the folder and rewrote its files
        assert report.verified and raw_hits(folder) == []
    finally:
        other.close()
    assert_honest(report, folder)
    await assert_clean(folder, {"a.md": f"hello {MARKER}\nmore\n", "b.md": "plain\n"})


async def test_purge_by_a_handle_with_the_tree_off_is_followed_when_it_is_on_again(tmp_path):
    """``worktree=False`` turns the tree off; ``worktree=True`` later follows the purge. A file
    edited on disk meanwhile (it differs from what the manifest recorded) is an outside edit;
    the ones still as memrev left them are rewritten, never committed."""
    folder = tmp_path / "wt"
    await _three_commits(folder)
    other = VersionedStore(folder, worktree=False)
    try:
        report = await other.purge(text=[SECRET], reason="leaked")
    finally:
        other.close()
    assert_honest(report, folder)
    assert found_files(report) == {"a.md"}  # the tree is off: nothing rewrote it, and the report says so
    (folder / "b.md").write_text("plain, edited while the tree was off\n")
    store = VersionedStore(folder, worktree=True)
    try:
        assert (folder / "a.md").read_text() == f"hello {MARKER}\nmore\n"
        outside = [c for c in await store.log() if c.author == OUTSIDE_AUTHOR]
        assert [c.message for c in outside] == ["outside edit: /b.md"]
        assert await store.read("/b.md") == "plain, edited while the tree was off\n"
        assert await store.log(contains=SECRET) == []
        assert await store.verify_purged(text=[SECRET]) == []
    finally:
        store.close()
    assert raw_hits(folder) == []


async def test_a_synced_commit_the_purge_dropped_is_followed(tmp_path):
    """The files showed a commit whose every change was purged (dropped, no new id): the
    recorded files are memrev's, the purged one is removed, nothing is committed back."""
    folder = tmp_path / "wt"
    store = VersionedStore(folder, worktree=True)
    try:
        await store.write("/a.md", "one\n")
        await store.write("/secret.md", f"{SECRET}\n")  # the synced commit: dropped by the purge
    finally:
        store.close()
    # The purge engine in a process that keeps no working tree: the files are left as they were.
    repo = Repository(open_backend(folder / ".memrev" / "memrev.db"))
    try:
        report = purge_mod.purge(repo, paths=["/secret.md"], reason="dropped", author="test")
        assert report.commits_dropped == 1 and report.verified  # a paths purge: no byte scan
    finally:
        repo.backend.close()
    assert (folder / "secret.md").exists()
    await assert_clean(folder, {"a.md": "one\n", "secret.md": None})


async def test_a_tree_open_in_this_process_follows_a_purge_by_another_handle(tmp_path):
    """The tree's own repository caches the old commits: its next sync sees the purge (``fresh``)."""
    folder = tmp_path / "wt"
    store = VersionedStore(folder, worktree=True)
    try:
        await store.write("/a.md", f"hello {SECRET}\n")
        await store.write("/b.md", "plain\n")
        other = VersionedStore(folder / ".memrev" / "memrev.db")
        try:
            report = await other.purge(text=[SECRET], reason="leaked")
        finally:
            other.close()
        assert_honest(report, folder)
        await store.write("/c.md", "after\n")  # its sync brings the files to the head
        assert (folder / "a.md").read_text() == f"hello {MARKER}\n"
        assert (folder / "c.md").read_text() == "after\n"
        assert [c for c in await store.log() if c.author == OUTSIDE_AUTHOR] == []
        assert await store.verify_purged(text=[SECRET]) == []
    finally:
        store.close()
    await assert_clean(folder, {"a.md": f"hello {MARKER}\n", "b.md": "plain\n", "c.md": "after\n"})


# ---------------------------------------------------------------- a second process watching the folder


WATCHER = textwrap.dedent(
    """
    import asyncio, sys, time
    from pathlib import Path
    from memrev import VersionedStore

    folder, stop = sys.argv[1], Path(sys.argv[2])

    async def main():
        store = VersionedStore(folder, poll_interval=0.05)  # the working tree is on: remembered in the folder
        try:
            assert store.worktree
            print("ready", flush=True)
            while not stop.exists():
                await asyncio.sleep(0.02)
            await store.write("/from-watcher.md", "written after the purge\\n")  # a sync after the purge
        finally:
            store.close()
        print("done", flush=True)

    asyncio.run(main())
    """
)


def _watcher(folder: Path, stop: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": SRC}
    proc = subprocess.Popen([sys.executable, "-c", WATCHER, str(folder), str(stop)], stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    return proc


def _finish(proc: subprocess.Popen, stop: Path) -> None:
    stop.touch()
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0 and out == "done\n"


@pytest.mark.slow  # a second Python process
@pytest.mark.parametrize("purger", ["with the tree", "through the database file"])
async def test_a_second_process_watching_the_folder_never_commits_the_purged_bytes_back(tmp_path, purger):
    folder = tmp_path / "wt"
    store = VersionedStore(folder, worktree=True)
    try:
        await store.write("/a.md", f"hello {SECRET}\n")
        await store.write("/dir/b.md", f"{SECRET} b\n")
        await store.write("/c.md", "plain\n")
    finally:
        store.close()
    stop = tmp_path / "stop"
    proc = _watcher(folder, stop)
    try:
        if purger == "with the tree":
            purging = VersionedStore(folder)
            assert purging.worktree
        else:
            purging = VersionedStore(folder / ".memrev" / "memrev.db")
            assert not purging.worktree
        try:
            report = await purging.purge(text=[SECRET], reason="leaked")
            assert report.commits_rewritten >= 2
            # Found, if anywhere, only in plain files the watching process has yet to rewrite.
            assert found_files(report) <= ({"a.md", "b.md"} if purger == "through the database file" else set())
            # An outside edit elsewhere wakes the other process's watcher: it reconciles after the purge.
            (folder / "d.md").write_text("outside, after the purge\n")

            async def settled():
                return (
                    (folder / "a.md").read_text() == f"hello {MARKER}\n"
                    and (folder / "dir" / "b.md").read_text() == f"{MARKER} b\n"
                    and await purging.exists("/d.md")
                )

            await eventually(settled, "the files rewritten by whichever process and the later edit committed", timeout=120)
        finally:
            purging.close()
    finally:
        _finish(proc, stop)
    await assert_clean(
        folder,
        {"a.md": f"hello {MARKER}\n", "dir/b.md": f"{MARKER} b\n", "c.md": "plain\n", "from-watcher.md": "written after the purge\n"},
        outside=("/d.md",),
    )


@pytest.mark.slow  # a second Python process
async def test_a_second_process_watching_the_folder_follows_a_purge_at_its_next_sync(tmp_path):
    """No outside edit wakes it: the other process's next commit (its sync) follows the purge
    by a handle with no working tree, rewriting the file the purge redacted."""
    folder = tmp_path / "wt"
    store = VersionedStore(folder, worktree=True)
    try:
        await store.write("/a.md", f"hello {SECRET}\n")
        await store.write("/c.md", "plain\n")
    finally:
        store.close()
    stop = tmp_path / "stop"
    proc = _watcher(folder, stop)
    try:
        purging = VersionedStore(folder / ".memrev" / "memrev.db")
        try:
            report = await purging.purge(text=[SECRET], reason="leaked")
        finally:
            purging.close()
        assert found_files(report) <= {"a.md"}  # only the plain file the other process rewrites
    finally:
        _finish(proc, stop)  # its write after the purge, then it closes
    assert (folder / "a.md").read_text() == f"hello {MARKER}\n"
    await assert_clean(folder, {"a.md": f"hello {MARKER}\n", "c.md": "plain\n", "from-watcher.md": "written after the purge\n"})


# ---------------------------------------------------------------- for_purge: what Store.purge needs without a tree


async def test_for_purge_hands_a_handle_without_the_tree_the_folder_to_hold_and_follow(tmp_path):
    """``worktree.for_purge`` gives a purge through the store file the folder's working tree
    (mode on, not open in this process): held across the purge, its files rewritten and
    scanned before the purge returns, not at the next open."""
    folder = tmp_path / "wt"
    await _three_commits(folder)
    db = folder / ".memrev" / "memrev.db"
    assert worktree.folder_of(db) == worktree.folder_of(folder) == os.path.realpath(folder)
    with worktree.for_purge(tmp_path, "normal") as none:
        assert none is None  # no folder's store
    repo = Repository(open_backend(db))
    try:
        with worktree.for_purge(db, "normal") as tree:
            assert tree is not None and tree.folder == os.path.realpath(folder)
            with tree.purging():
                report = purge_mod.purge(
                    repo, text=[SECRET], reason="leaked", author="test", files=tree.owned_files, after_commit=tree.follow_purge
                )
        assert report.verified
    finally:
        repo.backend.close()
    assert (folder / "a.md").read_text() == f"hello {MARKER}\nmore\n"
    assert raw_hits(folder) == []
    await assert_clean(folder, {"a.md": f"hello {MARKER}\nmore\n", "b.md": "plain\n"})
    store = VersionedStore(folder)  # open in this process: that one is held, not a second
    try:
        with worktree.for_purge(db, "normal") as held:
            assert held is not None and held.users == 2 and held is worktree.acquire(folder, "main", "normal", 1.0)
            worktree.release(held)
        assert held.users == 1
    finally:
        store.close()
    VersionedStore(folder, worktree=False).close()  # the mode off: no tree to follow
    with worktree.for_purge(db, "normal") as none:
        assert none is None
