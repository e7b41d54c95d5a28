"""The working tree's scan of the folder: what it sees as changed, what it skips, what it commits."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from memrev import VersionedStore
from memrev.folders import adopt
from memrev.folders.worktree import OUTSIDE_AUTHOR
from worktree_helpers import invoke_cli, make_tree, make_tree_now

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
    monkeypatch.setattr(adopt, "RACY_NS", racy_ns)
    folder = tmp_path / "wt"
    await make_tree(folder, {"/a.md": "version one\n"})
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
    await make_tree(folder, {"/keep.md": "kept\n", "/a" if "file by" in replace else "/a/old.md": "the old text\n"})
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
    import logging

    folder = tmp_path / "wt"
    make_tree_now(folder, {"/m.md": "one\n"})
    (folder / "pic.bin").write_bytes(b"\xff\x00binary")
    (folder / "link.md").symlink_to(folder / "m.md")

    def warnings_of(args: list[str]) -> list[str]:
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="memrev"):
            result = invoke_cli(folder, *args)
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


NOBODY = 65534
SRC = str(Path(__file__).resolve().parents[1] / "src")

_UNREADABLE_CHILD = """
    import os, sys, json, asyncio, logging, time
    sys.path.insert(0, sys.argv[2])
    import memrev, memrev.cli, memrev.store.store, memrev.folders.worktree, memrev.backends.sqlite, memrev.history, getpass
    import memrev.core.textmerge, memrev.store.reads  # loaded on first use (a merge, a CLI read)
    from click.testing import CliRunner
    memrev.VersionedStore
    try:
        import watchdog.observers, watchdog.events  # the watcher's, imported before root's files are out of reach
    except ImportError:
        pass
    if os.geteuid() == 0:
        os.setgroups([]); os.setgid(%(nobody)d); os.setuid(%(nobody)d)
    folder = sys.argv[1]
    warnings = []

    class Keep(logging.Handler):
        def emit(self, record):
            if record.levelno >= logging.WARNING:
                warnings.append(record.getMessage())

    logging.getLogger("memrev").addHandler(Keep())

    async def main():
        out = {}
        store = memrev.VersionedStore(folder, poll_interval=0.05)
        try:
            out["secret"] = await store.read("/secret.md")
            out["locked"] = await store.read("/locked/x.md")
            with open(os.path.join(folder, "m.md"), "w") as f:
                f.write("edited while the store is open\\n")
            deadline = time.monotonic() + 60  # a hang guard, not a speed target
            while await store.read("/m.md") != "edited while the store is open\\n" and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            out["watched"] = await store.read("/m.md")
        finally:
            store.close()
        return out

    out = asyncio.run(main())
    result = CliRunner().invoke(memrev.cli.main, ["--store", folder, "log"])
    out["cli"] = [result.exit_code, repr(result.exception)]
    out["warnings"] = warnings
    print(json.dumps(out))
"""


@pytest.mark.slow  # a child process
def test_unreadable_entries_are_skipped_and_named_and_the_watcher_goes_on(tmp_path):
    import json
    import shutil
    import subprocess
    import sys
    import tempfile
    import textwrap

    base = Path(tempfile.mkdtemp(prefix="memrev-scan-", dir="/tmp"))  # /tmp: reachable by nobody
    folder = base / "wt"
    try:
        make_tree_now(folder, {"/secret.md": "s\n", "/locked/x.md": "x\n", "/m.md": "one\n"})
        (folder / "new000.md").write_text("never readable\n")
        if os.geteuid() == 0:
            for p in [base, *base.rglob("*")]:
                os.chown(p, NOBODY, NOBODY, follow_symlinks=False)
        base.chmod(0o755)
        (folder / "secret.md").chmod(0o000)
        (folder / "new000.md").chmod(0o000)
        (folder / "locked").chmod(0o444)
        code = textwrap.dedent(_UNREADABLE_CHILD) % {"nobody": NOBODY}
        proc = subprocess.run(
            [sys.executable, "-c", code, str(folder), SRC], capture_output=True, text=True, timeout=300
        )
        assert proc.returncode == 0, proc.stderr
        out = json.loads(proc.stdout.strip().splitlines()[-1])
        # Unreadable is not removed: HEAD keeps what it had; the watcher still commits the readable edit.
        assert out["secret"] == "s\n" and out["locked"] == "x\n"
        assert out["watched"] == "edited while the store is open\n"
        assert out["cli"] == [0, "None"]
        named = " ".join(out["warnings"])
        for path in ("/secret.md", "/new000.md", "/locked"):
            assert path in named, out["warnings"]
        assert "cannot be read" in named
    finally:
        for p in [base, *base.rglob("*")] if base.exists() else []:
            if not p.is_symlink():
                p.chmod(0o755 if p.is_dir() else 0o644)
        shutil.rmtree(base, ignore_errors=True)


_BOUNDED_CHILD = """
    import asyncio, resource, sys, threading
    # Small thread stacks: the cap bounds the heap, not the 8 MB of address space each
    # thread (store worker, watcher) would reserve ("can't start new thread" under load).
    threading.stack_size(1 << 20)
    sys.path.insert(0, sys.argv[2])
    import memrev, memrev.store.store, memrev.folders.worktree, memrev.backends.sqlite
    memrev.VersionedStore
    try:
        import watchdog.observers, watchdog.events
    except ImportError:
        pass

    def vm_bytes():
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) << 10 for line in f if line.startswith("VmSize:"))

    cap = vm_bytes() + int(sys.argv[3])
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    store = memrev.VersionedStore(sys.argv[1])  # the reconcile at open commits the dropped files

    async def count():
        return len(await store.log(path="/drop/")), len(await store.list("/drop"))

    print(*asyncio.run(count()))
    store.close()
"""


@pytest.mark.slow  # ~180 MB of dropped files, a child process
def test_a_reconcile_of_many_large_dropped_files_is_bounded_in_memory(tmp_path):
    import subprocess
    import sys
    import textwrap

    from memrev.folders import worktree

    folder = tmp_path / "wt"
    make_tree_now(folder, {"/keep.md": "kept\n"})
    (folder / "drop").mkdir()
    line = ("x" * 99 + "\n").encode()
    files = 12
    for i in range(files):  # ~15 MB each (under MAX_FILE_BYTES), ~180 MB in all, each distinct
        (folder / "drop" / f"{i:03}.md").write_bytes(line * (150_000 + i))
    total = sum(p.stat().st_size for p in (folder / "drop").iterdir())
    headroom = 4 * worktree.OUTSIDE_PIECE_BYTES  # a piece, its commit's copies and the interpreter's slack
    assert headroom < total  # holding every file at once does not fit
    env = {**os.environ, "MALLOC_ARENA_MAX": "2"}
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_BOUNDED_CHILD), str(folder), SRC, str(headroom)],
        capture_output=True, text=True, timeout=600, env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    commits, listed = map(int, proc.stdout.split())
    assert listed == files
    assert commits > 1 and commits >= total // (worktree.OUTSIDE_PIECE_BYTES + adopt.MAX_FILE_BYTES)  # in pieces
