"""The working tree (issue 9, item 2): the folder keeps the branch head as plain files.

Real folders, real outside edits (plain file calls, and ag2's DiskKnowledgeStore
in another process), the real watcher (watchdog, else polling).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from memrev import VersionedStore, errors
from memrev.cli import main as cli
from memrev.folders.worktree import OUTSIDE_AUTHOR
from memrev.repo.ops import Write
from worktree_helpers import eventually

pytestmark = pytest.mark.anyio

SRC = str(Path(__file__).resolve().parents[1] / "src")


def disk_files(folder: Path) -> dict[str, str]:
    """The plain files of a working tree as memrev paths (memrev's own files left out)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = [d for d in dirnames if not (Path(dirpath) == folder and d == ".memrev")]
        for name in filenames:
            full = Path(dirpath) / name
            if Path(dirpath) == folder and name.startswith("memrev.db"):
                continue
            out["/" + str(full.relative_to(folder))] = full.read_text()
    return out


async def head_files(store: VersionedStore, path: str = "/") -> dict[str, str]:
    out = {}
    for name in await store.list(path):
        child = path.rstrip("/") + "/" + name.rstrip("/")
        if name.endswith("/"):
            out.update(await head_files(store, child))
        else:
            out[child] = await store.read(child)
    return out


class Recorder:
    def __init__(self) -> None:
        self.paths: list[str] = []

    async def __call__(self, path: str) -> None:
        self.paths.append(path)


@pytest.mark.slow  # 0.5-0.6 s in the quick loop: every kind of commit, each checked against the folder
async def test_every_kind_of_commit_updates_the_files(tmp_path):
    folder = tmp_path / "wt"
    store = VersionedStore(folder, worktree=True)
    try:
        assert store.worktree and (folder / ".memrev" / "memrev.db").exists()
        assert not (folder / "memrev.db").exists()

        async def check():
            assert disk_files(folder) == await head_files(store)

        await store.write("/memory/working.md", "v1\n")
        await check()
        await store.append("/log/a.jsonl", '{"n": 1}\n')
        await store.append("/log/a.jsonl", '{"n": 2}\n')
        await check()
        first = await store.head()
        async with store.transaction("two at once"):
            await store.write("/memory/working.md", "v2\n")
            await store.write("/notes/deep/x.md", "x")
        await check()
        await store.delete("/notes")
        await check()
        assert not (folder / "notes").exists()  # emptied directories are pruned, as DiskKnowledgeStore does
        await store.restore("/memory/working.md", first)
        assert (folder / "memory" / "working.md").read_text() == "v1\n"
        await check()
        await store.revert("HEAD")
        await check()

        feature = await store.branch("feature")
        await feature.write("/feature.md", "only on the branch")
        assert not (folder / "feature.md").exists()  # another branch's handle never touches the files
        assert not feature.worktree
        feature.close()
        await store.merge("feature")
        assert (folder / "feature.md").read_text() == "only on the branch"
        await check()

        bundle = tmp_path / "b.bundle"
        other = VersionedStore(tmp_path / "other")
        await other.write("/from-bundle.md", "hello")
        await other.export_bundle(bundle)
        other.close()
        await store.delete("/")
        await check()
        assert disk_files(folder) == {}

        assert ".memrev/" not in await store.list("/")
        assert all(c.author != OUTSIDE_AUTHOR for c in await store.log())
        assert await store.fsck() == []
    finally:
        store.close()


@pytest.mark.slow
async def test_outside_edit_create_delete_rename_become_commits(tmp_path):
    folder = tmp_path / "wt"
    store = VersionedStore(folder, worktree=True, poll_interval=0.05)
    rec = Recorder()
    try:
        await store.write("/memory/working.md", "v1\n")
        await store.write("/notes/a.md", "a\n")
        await store.on_change("/", rec)
        seen = len(await store.log())

        async def outside_commit():
            log = await store.log()
            return log[0] if len(log) > seen and log[0].author == OUTSIDE_AUTHOR else None

        async def step(action, paths: list[str]) -> None:
            nonlocal seen
            rec.paths.clear()
            action()
            commit = await eventually(outside_commit, f"an outside commit for {paths}")
            assert sorted(commit.paths) == sorted(paths)
            assert commit.meta["outside"] is True
            await eventually(lambda: _true(Counter(rec.paths) == Counter(paths)), f"on_change for {paths}")
            seen = len(await store.log())
            assert disk_files(folder) == await head_files(store)
            rec.paths.clear()

        await step(lambda: (folder / "memory" / "working.md").write_text("edited in an editor\n"), ["/memory/working.md"])
        assert await store.read("/memory/working.md") == "edited in an editor\n"
        await step(lambda: (folder / "notes" / "new.md").write_text("created\n"), ["/notes/new.md"])
        await step(lambda: (folder / "notes" / "a.md").unlink(), ["/notes/a.md"])
        assert await store.read("/notes/a.md") is None
        await step(lambda: os.rename(folder / "notes" / "new.md", folder / "renamed.md"), ["/notes/new.md", "/renamed.md"])
        assert await store.read("/renamed.md") == "created\n"

        # ag2's own DiskKnowledgeStore, in another process, writing into the folder.
        script = textwrap.dedent(
            """
            import asyncio, sys
            from ag2.knowledge import DiskKnowledgeStore
            asyncio.run(DiskKnowledgeStore(sys.argv[1]).write("/log/agent.jsonl", '{"from": "disk store"}\\n'))
            """
        )
        await step(lambda: subprocess.run([sys.executable, "-c", script, str(folder)], check=True), ["/log/agent.jsonl"])

        # Once each: nothing more arrives (several watcher and poll rounds later).
        await asyncio.sleep(0.5)
        assert rec.paths == []
        assert len(await store.log()) == seen
        assert await store.fsck() == []
    finally:
        store.close()


async def _true(value):
    return value


async def test_edits_made_while_closed_become_commits_at_next_open(tmp_path):
    folder = tmp_path / "wt"
    store = VersionedStore(folder, worktree=True)
    await store.write("/a.md", "a\n")
    await store.write("/b.md", "b\n")
    await store.write("/c.md", "c\n")
    store.close()
    (folder / "a.md").write_text("edited while closed\n")
    (folder / "b.md").unlink()
    (folder / "d.md").write_text("created while closed\n")
    (folder / "pic.bin").write_bytes(b"\xff\x00binary")
    store = VersionedStore(folder)  # the mode is persisted: no worktree=True needed
    try:
        assert store.worktree
        outside = [c for c in await store.log() if c.author == OUTSIDE_AUTHOR]
        assert len(outside) == 1 and set(outside[0].paths) == {"/a.md", "/b.md", "/d.md"}
        assert await head_files(store) == {"/a.md": "edited while closed\n", "/c.md": "c\n", "/d.md": "created while closed\n"}
        assert (folder / "pic.bin").read_bytes() == b"\xff\x00binary"  # never content, never touched
    finally:
        store.close()


async def test_turning_the_tree_on_for_a_store_used_without_it(tmp_path):
    folder = tmp_path / "state"
    folder.mkdir()
    for name in "abc":
        (folder / f"{name}.md").write_text(f"{name} as adopted\n")
    store = VersionedStore(folder)  # adopts; no working tree
    await store.write("/a.md", "a changed through memrev\n")
    await store.write("/e.md", "e only in the database\n")
    store.close()
    assert (folder / "a.md").read_text() == "a as adopted\n"  # stale: the tree was off
    (folder / "b.md").write_text("b edited by hand since\n")  # differs from head and from what memrev knew
    (folder / "d.md").write_text("d created by hand\n")
    (folder / "c.md").rename(folder / "c-renamed.md")  # c is gone: a deletion (and a creation)
    store = VersionedStore(folder, worktree=True)
    try:
        log = await store.log()
        outside = [c for c in log if c.author == OUTSIDE_AUTHOR]
        assert len(outside) == 1 and outside[0].paths == ("/b.md", "/c-renamed.md", "/c.md", "/d.md")
        assert disk_files(folder) == await head_files(store) == {
            "/a.md": "a changed through memrev\n",
            "/b.md": "b edited by hand since\n",
            "/c-renamed.md": "c as adopted\n",
            "/d.md": "d created by hand\n",
            "/e.md": "e only in the database\n",
        }
        assert (folder / "memrev.db").exists()  # the existing store stays where it was
    finally:
        store.close()

    # Turning it off leaves the files as they are; later commits no longer touch them.
    store = VersionedStore(folder, worktree=False)
    try:
        assert not store.worktree
        await store.write("/a.md", "after the tree was turned off\n")
        assert (folder / "a.md").read_text() == "a changed through memrev\n"
    finally:
        store.close()
    assert not VersionedStore(folder).worktree


def test_the_cli_updates_the_files_too(tmp_path):
    folder = tmp_path / "wt"

    async def setup() -> str:
        store = VersionedStore(folder, worktree=True)
        await store.write("/m.md", "one\n")
        first = await store.head()
        await store.write("/m.md", "two\n")
        store.close()
        return first

    first = asyncio.run(setup())
    result = CliRunner().invoke(cli, ["--store", str(folder), "restore", "/m.md", "--rev", first])
    assert result.exit_code == 0, result.output
    assert (folder / "m.md").read_text() == "one\n"


@pytest.mark.slow  # measured >= 0.3 s: kept out of the quick loop
async def test_a_file_and_a_directory_of_the_same_name(tmp_path):
    """A store may hold /a and /a/b; a folder cannot: the database keeps both, the folder what fits."""
    folder = tmp_path / "wt"
    store = VersionedStore(folder, worktree=True)
    try:
        await store.write("/a", "file a")
        await store.write("/a/b", "file a/b")
        assert await store.read("/a/b") == "file a/b"
        assert (folder / "a").read_text() == "file a"
        await store.delete("/a")
        assert disk_files(folder) == {}
        await store.write("/x/y", "y")
        await store.write("/x", "x")  # blocked by the directory x/
        await store.delete("/x/y")  # the directory goes; the blocked file takes its place
        assert disk_files(folder) == {"/x": "x"} == await head_files(store)
        assert all(c.author != OUTSIDE_AUTHOR for c in await store.log())
    finally:
        store.close()


async def test_a_dot_segment_never_lands_on_another_file(tmp_path):
    """/a/./b is a path of its own in a store (``.`` is a name, as in ag2's); in a folder it is /a/b.
    It once was written over /a/b on disk, and the next open committed that as an outside edit of
    /a/./b: the acknowledged "two" was read back as "one". The folder shows /a/b; /a/./b stays in the store."""
    folder = tmp_path / "wt"
    store = VersionedStore(folder, worktree=True)
    try:
        await store.write("/a/b", "one")
        await store.write("/a/./b", "two")
        await store.delete("/a/./c")  # a removal with a '.' segment never unlinks /a/c
        await store.write("/a/c", "c")
        await store.delete("/a/./c")
        assert disk_files(folder) == {"/a/b": "one", "/a/c": "c"}
    finally:
        store.close()
    store = VersionedStore(folder, worktree=True)
    try:
        assert (await store.read("/a/b"), await store.read("/a/./b")) == ("one", "two")
        assert all(c.author != OUTSIDE_AUTHOR for c in await store.log())
    finally:
        store.close()


async def test_working_tree_options(tmp_path):
    with pytest.raises(ValueError):
        VersionedStore(f"sqlite:///{tmp_path}/x.db", worktree=True)
    folder = tmp_path / "wt"
    VersionedStore(folder, worktree=True).close()
    with pytest.raises(errors.MemrevError, match="follows branch 'main'"):
        VersionedStore(folder, branch="other", worktree=True)
    other = VersionedStore(folder, branch="other")
    assert not other.worktree
    other.close()
    with pytest.raises(errors.NoStore):
        VersionedStore(tmp_path / "nothing", create=False)
    assert not (tmp_path / "nothing").exists()


@pytest.mark.slow  # measured >= 0.3 s: kept out of the quick loop
async def test_a_crash_leftover_of_memrev_is_not_an_outside_edit(tmp_path, monkeypatch):
    """Killed after renaming its file into place, before recording it; meanwhile the head moved on.

    The file on disk is then neither what memrev last recorded nor the head;
    only the intent journal tells it from an outside edit. Without it the
    reconcile would commit the stale version as an "outside" revert.
    """
    from memrev.folders import worktree

    folder = tmp_path / "wt"
    store = VersionedStore(folder, worktree=True)
    try:
        await store.write("/f.md", "v0\n")
        real_record = worktree.WorkTree._record

        def killed_before_recording(self, rows):
            rows = list(rows)
            if [r for r in rows if r[0] == "/f.md" and r[1] is not None]:
                raise RuntimeError("killed")  # the file is renamed into place; nothing more happens
            return real_record(self, rows)

        monkeypatch.setattr(worktree.WorkTree, "_record", killed_before_recording)
        await store.write("/f.md", "v1\n")  # committed; the file is v1; the manifest still says v0
        monkeypatch.setattr(worktree.WorkTree, "_record", real_record)
        assert (folder / "f.md").read_text() == "v1\n"
        # Another process commits v2 (its own file update has not happened yet).
        store.repo.commit("main", [Write("/f.md", b"v2\n")], author="another process")
        store._worktree.reconcile()
        assert (folder / "f.md").read_text() == "v2\n"
        assert await store.read("/f.md") == "v2\n"
        assert [c.author for c in await store.log()] == ["another process", "memrev", "memrev"]
    finally:
        store.close()


@pytest.mark.slow
async def test_without_watchdog_outside_edits_are_found_by_polling(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "watchdog.observers", None)  # as if watchdog were not installed
    folder = tmp_path / "wt"
    store = VersionedStore(folder, worktree=True, poll_interval=0.05)
    rec = Recorder()
    try:
        assert store._worktree._watcher._observer is None
        await store.write("/a.md", "a\n")
        await store.on_change("/", rec)
        (folder / "a.md").write_text("edited\n")

        async def committed():
            return (await store.log())[0].author == OUTSIDE_AUTHOR and rec.paths == ["/a.md"]

        await eventually(committed, "the polled outside edit")
        assert await store.read("/a.md") == "edited\n"
    finally:
        store.close()


WRITER = textwrap.dedent(
    """
    import asyncio, sys, time
    from pathlib import Path
    from memrev import VersionedStore

    folder, me, go = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    print("ready", flush=True)
    while not go.exists():
        time.sleep(0.001)

    async def main():
        store = VersionedStore(folder)  # the working tree is on: remembered in the folder
        try:
            for i in range(40):
                await store.write("/shared/working.md", f"{me} wrote version {i}\\n")
                await store.append("/log/all.jsonl", f'{{"by": "{me}", "n": {i}}}\\n')
                await store.write(f"/own/{me}/{i % 5}.md", f"{me} {i}\\n")
                if i % 10 == 9:
                    await store.delete(f"/own/{me}")
        finally:
            store.close()

    asyncio.run(main())
    """
)


@pytest.mark.slow
def test_two_processes_committing_into_one_working_tree(tmp_path):
    """Each process brings the files to the *current* head under the tree's lock, so neither
    puts an older version over a newer one, and neither takes the other's files for outside edits."""
    folder = tmp_path / "wt"
    VersionedStore(folder, worktree=True).close()
    go = tmp_path / "go"
    env = {**os.environ, "PYTHONPATH": SRC}
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(folder), name, str(go)], stdout=subprocess.PIPE, text=True, env=env)
        for name in ("p1", "p2")
    ]
    for p in procs:
        assert p.stdout.readline() == "ready\n"
    go.touch()
    for p in procs:
        p.communicate(timeout=300)
        assert p.returncode == 0

    async def check():
        store = VersionedStore(folder)
        try:
            log = await store.log()
            assert not [c for c in log if c.author == OUTSIDE_AUTHOR]
            assert disk_files(folder) == await head_files(store)
            lines = (await store.read("/log/all.jsonl")).splitlines()
            assert len(lines) == 80  # every append of both processes
            assert await store.fsck() == []
        finally:
            store.close()

    asyncio.run(check())
