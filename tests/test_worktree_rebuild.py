"""The working tree's bookkeeping is derived state (issue 20, item 5): a store restored from a
backup, or a damaged ``.memrev/worktree.db``, is rebuilt from the store and the folder, and
nothing the folder holds is lost. Real files, real ``VACUUM INTO``, the real CLI."""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from memrev import VersionedStore
from memrev.cli import main as cli
from memrev.folders.worktree import OUTSIDE_AUTHOR

pytestmark = pytest.mark.anyio


async def run_cli(*args: str):
    """The real CLI, in a thread: it runs its own event loop."""
    return await asyncio.to_thread(CliRunner().invoke, cli, list(args))


async def all_versions(store: VersionedStore, path: str) -> set[str | None]:
    return {await store.read(path, rev=c.id) for c in await store.log(path)}


@pytest.mark.slow
async def test_a_store_restored_from_a_backup_opens_and_keeps_the_folders_newer_content(tmp_path, caplog):
    folder = tmp_path / "wt"
    store = VersionedStore(folder, worktree=True)
    await store.write("/a.md", "one\n")
    store.close()
    backup = tmp_path / "backup.db"
    db = sqlite3.connect(folder / ".memrev" / "memrev.db")
    db.execute("VACUUM INTO ?", (str(backup),))  # as docs/deployment.md says
    db.close()
    store = VersionedStore(folder, worktree=True)
    await store.write("/a.md", "two\n")
    await store.write("/b.md", "bee\n")
    await store.write("/c.md", "sea\n")
    await store.delete("/c.md")
    store.close()
    for suffix in ("", "-wal", "-shm"):
        Path(f"{folder}/.memrev/memrev.db{suffix}").unlink(missing_ok=True)
    backup.rename(folder / ".memrev" / "memrev.db")

    caplog.set_level(logging.WARNING, logger="memrev")
    result = await run_cli("--store", str(folder), "log")  # a read command opens it
    assert result.exit_code == 0, result.output
    assert "outside edit" in result.output
    assert any("rebuilt" in r.getMessage() for r in caplog.records)
    store = VersionedStore(folder)
    try:
        assert store.worktree
        assert await store.read("/a.md") == "two\n"  # the folder's newer content is in history, at the head
        assert await store.read("/b.md") == "bee\n"
        assert {"one\n", "two\n"} <= await all_versions(store, "/a.md")
        assert (await store.log(limit=1))[0].author == OUTSIDE_AUTHOR
        await store.write("/a.md", "three\n")  # and the tree works on
        assert (folder / "a.md").read_text() == "three\n"
    finally:
        store.close()


async def _tree_with_files(folder: Path) -> None:
    store = VersionedStore(folder, worktree=True)
    for i in range(60):
        await store.write(f"/notes/{i:03}.md", f"note {i}\n" * 20)
    store.close()


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["garbage", "truncated"])
async def test_a_damaged_worktree_db_is_moved_aside_and_rebuilt(tmp_path, caplog, damage):
    folder = tmp_path / "wt"
    await _tree_with_files(folder)
    (folder / "notes" / "007.md").write_text("edited while the store was closed\n")  # must not be lost
    config = folder / ".memrev" / "worktree.db"
    assert not Path(f"{config}-wal").exists()
    if damage == "garbage":
        config.write_bytes(os.urandom(1) + b"\x00garbage" * 4096)
    else:
        data = config.read_bytes()
        config.write_bytes(data[: len(data) // 2])

    caplog.set_level(logging.WARNING, logger="memrev")
    result = await run_cli("--store", str(folder), "log", "-n", "1")
    assert result.exit_code == 0, result.output
    assert any("could not be read" in r.getMessage() for r in caplog.records)
    assert list(config.parent.glob("worktree.db.damaged-*")), "the damaged file is kept aside"
    store = VersionedStore(folder, worktree=True)
    try:
        assert await store.read("/notes/007.md") == "edited while the store was closed\n"
        assert await store.read("/notes/008.md") == "note 8\n" * 20
        await store.write("/notes/001.md", "through memrev\n")
        assert (folder / "notes" / "001.md").read_text() == "through memrev\n"
    finally:
        store.close()
    store = VersionedStore(folder)
    try:
        assert store.worktree  # the mode is on again, and stays on
    finally:
        store.close()


_READ_ONLY_CHILD = """
    import asyncio, json, os, sys
    sys.path.insert(0, sys.argv[2])
    import memrev, memrev.cli, memrev.store.store, memrev.folders.worktree, memrev.backends.sqlite, memrev.history, getpass
    from click.testing import CliRunner
    memrev.VersionedStore
    if os.geteuid() == 0:
        os.setgroups([]); os.setgid(%(nobody)d); os.setuid(%(nobody)d)
    folder = sys.argv[1]
    out = {}
    try:
        memrev.Store(folder).close()
        out["api"] = "opened"
    except Exception as e:  # what is raised is the finding
        out["api"] = [type(e).__name__, isinstance(e, memrev.MemrevError), isinstance(e, PermissionError), str(e)]
    result = CliRunner().invoke(memrev.cli.main, ["--store", folder, "log"])
    out["cli"] = [result.exit_code, result.output]
    print(json.dumps(out))
"""


@pytest.mark.slow  # a child process, as nobody
def test_a_damaged_worktree_db_in_a_read_only_memrev_folder_is_a_typed_error(tmp_path):
    """Moving the damaged manifest aside needs a writable ``.memrev/``: where it is read-only the
    open is refused with ``ReadOnlyStore`` naming the manifest and the folder (was: a bare
    ``PermissionError`` from the rename, and the CLI's ``[Errno 13]``), and nothing is changed."""
    import json
    import shutil
    import subprocess
    import sys
    import tempfile
    import textwrap

    import memrev

    nobody = 65534
    base = Path(tempfile.mkdtemp(prefix="memrev-ro-", dir="/tmp"))  # /tmp: reachable by nobody
    folder = base / "wt"
    try:
        asyncio.run(_tree_with_files(folder))
        config = folder / ".memrev" / "worktree.db"
        config.write_bytes(os.urandom(1) + b"\x00garbage" * 4096)
        for side in ("-wal", "-shm"):
            Path(f"{config}{side}").unlink(missing_ok=True)
        if os.geteuid() == 0:
            for p in [base, *base.rglob("*")]:
                os.chown(p, nobody, nobody, follow_symlinks=False)
        base.chmod(0o755)
        (folder / ".memrev").chmod(0o555)
        before = sorted(p.name for p in (folder / ".memrev").iterdir())
        code = textwrap.dedent(_READ_ONLY_CHILD) % {"nobody": nobody}
        src = str(Path(memrev.__file__).resolve().parent.parent)
        proc = subprocess.run([sys.executable, "-c", code, str(folder), src], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        out = json.loads(proc.stdout.strip().splitlines()[-1])
        name, typed, permission, message = out["api"]
        assert (name, typed, permission) == ("ReadOnlyStore", True, True), out["api"]
        assert "worktree.db" in message and ".memrev" in message and "writable" in message, message
        code_, text = out["cli"]
        assert code_ == 1 and text.count("\n") == 1 and "worktree.db" in text and "Errno" not in text, text
        assert sorted(p.name for p in (folder / ".memrev").iterdir()) == before  # nothing moved or made
    finally:
        (folder / ".memrev").chmod(0o755)
        shutil.rmtree(base, ignore_errors=True)
