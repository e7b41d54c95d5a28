"""Opening a store (issue 8 items 14, 15, 16): never by accident, read-only when it
must be, a file path is the SQLite file, a full disk is ``StoreFull``.

Read-only stores are tested in a child process that cannot write: as root
(chmod does not stop root) it drops to the ``nobody`` account with
``os.setuid``; as any other user the ``chmod`` alone does it. The folders of
these tests live directly under ``/tmp`` (mode 755) because pytest's own
temporary folders are private to the user running the tests.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

import memrev
from memrev import VersionedStore

SRC = str(Path(memrev.__file__).resolve().parents[1])  # the memrev under test, for child processes
NOBODY = 65534


def _fill(location, files: dict[str, str], **kw) -> None:
    async def go():
        async with VersionedStore(location, **kw) as s:
            for path, text in files.items():
                await s.write(path, text)

    asyncio.run(go())


def _read(location, path: str, **kw) -> str | None:
    async def go():
        async with VersionedStore(location, **kw) as s:
            return await s.read(path)

    return asyncio.run(go())


def _listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


# ----------------------------------------------------------------- create=False: never a store by accident


def test_no_store_in_an_empty_or_missing_folder(tmp_path):
    with pytest.raises(memrev.NoStore, match=f"no memrev store at {tmp_path}"):
        VersionedStore(tmp_path, create=False)
    missing = tmp_path / "typo"
    with pytest.raises(memrev.NoStore, match="no memrev store at"):
        VersionedStore(missing, create=False)
    with pytest.raises(memrev.NoStore):
        VersionedStore(f"sqlite://{tmp_path}/nested/x.db", create=False)
    assert _listing(tmp_path) == [], "opening without create made files or folders"
    assert issubclass(memrev.NoStore, memrev.NotAMemrevStore)


def test_no_store_in_a_disk_knowledge_store_folder(tmp_path):
    from ag2.knowledge import DiskKnowledgeStore

    asyncio.run(DiskKnowledgeStore(tmp_path).write("/memory/working.md", "# Working\n"))
    before = _listing(tmp_path)
    with pytest.raises(memrev.NoStore):
        VersionedStore(tmp_path, create=False)
    assert _listing(tmp_path) == before


def test_an_empty_file_is_no_store_and_stays_empty(tmp_path):
    (tmp_path / "memrev.db").touch()
    with pytest.raises(memrev.NoStore):
        VersionedStore(tmp_path, create=False)
    assert (tmp_path / "memrev.db").stat().st_size == 0


def test_create_false_opens_an_existing_store_and_a_missing_branch_stays_allowed(tmp_path):
    _fill(tmp_path, {"/a.md": "A\n"})
    assert _read(tmp_path, "/a.md", create=False) == "A\n"

    async def new_branch():
        # The Python API keeps creating a branch on its first write.
        async with VersionedStore(tmp_path, branch="fresh", create=False) as s:
            await s.write("/b.md", "B\n")
            return await s.branches()

    assert set(asyncio.run(new_branch())) == {"main", "fresh"}


# ----------------------------------------------------------------- where a location's store is


def test_a_file_path_is_the_sqlite_store_itself(tmp_path):
    _fill(tmp_path / "state", {"/a.md": "A\n"})
    backup = tmp_path / "backup.db"
    with sqlite3.connect(tmp_path / "state" / "memrev.db") as src, sqlite3.connect(backup) as dst:
        src.backup(dst)
    assert _read(backup, "/a.md", create=False) == "A\n"

    async def fsck():
        async with VersionedStore(backup, create=False) as s:
            return await s.fsck()

    assert asyncio.run(fsck()) == []
    text = tmp_path / "notes.txt"
    text.write_text("not a database\n")
    with pytest.raises(memrev.NotAMemrevStore):  # before: FileExistsError from mkdir
        VersionedStore(text)
    assert text.read_text() == "not a database\n"


def test_sqlite_url_errors_show_the_path_once(tmp_path):
    from memrev.backends import locate

    text = tmp_path / "notes.txt"
    text.write_text("not a database\n")
    with pytest.raises(memrev.NotAMemrevStore) as e:
        VersionedStore(f"sqlite:///{text}")  # four slashes, SQLAlchemy's absolute form
    assert f"{text} is not a memrev store" in str(e.value) and "//" not in str(e.value)
    assert locate(f"sqlite:///{text}") == text
    assert locate(f"sqlite://{text}") == text


def test_a_working_tree_folder_keeps_its_store_in_dot_memrev(tmp_path):
    from memrev.backends import locate

    assert locate(tmp_path) == tmp_path / "memrev.db"
    assert locate(tmp_path, worktree=True) == tmp_path / ".memrev" / "memrev.db"
    # A .memrev/ folder alone (it also holds the working tree's own state) is not a store.
    (tmp_path / ".memrev").mkdir()
    assert locate(tmp_path) == tmp_path / "memrev.db"
    (tmp_path / ".memrev" / "memrev.db").touch()
    assert locate(tmp_path) == tmp_path / ".memrev" / "memrev.db"
    (tmp_path / ".memrev" / "memrev.db").unlink()
    VersionedStore(tmp_path, worktree=True).close()
    _fill(tmp_path, {"/a.md": "A\n"})
    assert (tmp_path / ".memrev" / "memrev.db").is_file() and not (tmp_path / "memrev.db").exists()


# ----------------------------------------------------------------- read-only stores


@pytest.fixture
def shared_dir():
    """A folder another account can enter (pytest's tmp_path is private to its owner)."""
    path = Path(tempfile.mkdtemp(prefix="memrev-ro-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    for p in [path, *path.rglob("*")]:
        if not p.is_symlink():
            p.chmod(0o755 if p.is_dir() else 0o644)
    shutil.rmtree(path)


def _as_reader(script: str, *args: str) -> subprocess.CompletedProcess:
    """Run ``script`` in a child that cannot write: as root it becomes ``nobody`` first."""
    prelude = f"""
        import os, sys
        sys.path.insert(0, {SRC!r})
        import asyncio, json, memrev, memrev.cli, memrev.backends.sqlite, memrev.history
        # what the CLI imports only when a command runs (nobody cannot read root's Python)
        import getpass, memrev.store.store
        from click.testing import CliRunner
        memrev.VersionedStore  # loads on first use (autogen_core): before this child can no longer read it
        if os.geteuid() == 0:
            os.setgroups([])
            os.setgid({NOBODY})
            os.setuid({NOBODY})
    """
    code = textwrap.dedent(prelude) + textwrap.dedent(script)
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc


_READER = """
    async def main(location):
        out = {}
        async with memrev.VersionedStore(location) as s:
            out["read"] = await s.read("/a.md")
            out["log"] = len(await s.log())
            out["fsck"] = await s.fsck()
            try:
                await s.write("/b.md", "B\\n")
                out["write"] = "accepted"
            except memrev.ReadOnlyStore as e:
                out["write"] = "ReadOnlyStore"
            except Exception as e:
                out["write"] = f"{type(e).__name__}: {e}"
        return out
    print(json.dumps(asyncio.run(main(sys.argv[1]))))
"""


def _digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.iterdir()}


@pytest.mark.slow  # measured >= 0.3 s: kept out of the quick loop
def test_a_read_only_folder_opens_for_reading(shared_dir):
    # No -wal/-shm can be made next to the file: SQLite's immutable mode.
    _fill(shared_dir, {"/a.md": "A\n"})
    _fill(shared_dir, {"/a.md": "A2\n"})
    (shared_dir / "memrev.db").chmod(0o444)
    shared_dir.chmod(0o555)
    before = _digest(shared_dir)
    import json

    out = json.loads(_as_reader(_READER, str(shared_dir)).stdout)
    assert out == {"read": "A2\n", "log": 2, "fsck": [], "write": "ReadOnlyStore"}
    assert _digest(shared_dir) == before, "a read-only open changed or added files"


@pytest.mark.slow  # measured >= 0.3 s: kept out of the quick loop
def test_a_write_protected_file_in_a_writable_folder_opens_for_reading(shared_dir):
    _fill(shared_dir, {"/a.md": "A\n"})
    (shared_dir / "memrev.db").chmod(0o444)
    shared_dir.chmod(0o777)
    db = hashlib.sha256((shared_dir / "memrev.db").read_bytes()).hexdigest()
    import json

    out = json.loads(_as_reader(_READER, str(shared_dir)).stdout)
    assert out == {"read": "A\n", "log": 1, "fsck": [], "write": "ReadOnlyStore"}
    assert hashlib.sha256((shared_dir / "memrev.db").read_bytes()).hexdigest() == db


@pytest.mark.slow  # measured >= 0.3 s: kept out of the quick loop
def test_a_reader_of_a_read_only_folder_sees_commits_still_in_the_wal(shared_dir):
    # A writer (this process) holds the store open, its last commits only in
    # memrev.db-wal; a reader without write permission must see them, never
    # the older state the main file alone holds (immutable mode would).
    import json

    async def scenario():
        async with VersionedStore(shared_dir) as writer:
            for i in range(3):
                await writer.write("/a.md", f"version {i}\n")
            assert (shared_dir / "memrev.db-wal").stat().st_size > 0
            shared_dir.chmod(0o555)
            try:
                proc = await asyncio.to_thread(_as_reader, _READER, str(shared_dir))
            finally:
                shared_dir.chmod(0o755)
            return json.loads(proc.stdout)

    out = asyncio.run(scenario())
    assert out == {"read": "version 2\n", "log": 3, "fsck": [], "write": "ReadOnlyStore"}


@pytest.mark.slow  # measured >= 0.3 s: kept out of the quick loop
def test_cli_on_a_read_only_store(shared_dir):
    _fill(shared_dir, {"/a.md": "A\n"})
    _fill(shared_dir, {"/a.md": "A2\n"})
    (shared_dir / "memrev.db").chmod(0o444)
    shared_dir.chmod(0o555)
    script = """
        def run(*args):
            r = CliRunner().invoke(memrev.cli.main, ["--store", sys.argv[1], *args])
            return [r.exit_code, r.output]
        print(json.dumps([run("log", "--oneline"), run("cat", "/a.md"), run("restore", "/a.md", "--rev", "HEAD~1"),
                          run("--store", sys.argv[1] + "/new", "import-dir", sys.argv[1])]))
    """
    import json

    (log, cat, restore, create) = json.loads(_as_reader(script, str(shared_dir)).stdout)
    assert log[0] == 0 and len(log[1].splitlines()) == 2
    assert cat == [0, "A2\n"]
    assert restore[0] == 1 and "read" in restore[1].lower() and "Traceback" not in restore[1]
    assert create[0] == 1 and "cannot create a store" in create[1]
    assert not (shared_dir / "new").exists()


@pytest.fixture
def read_only_mount(tmp_path):
    """A read-only bind mount of a folder: what stops even root from writing."""
    source, mount = tmp_path / "source", tmp_path / "mount"
    source.mkdir()
    mount.mkdir()
    _fill(source, {"/a.md": "A\n"})
    done = subprocess.run(["mount", "--bind", str(source), str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot bind-mount here: {done.stderr.decode().strip()}")
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(mount)], check=True, capture_output=True)
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def test_a_read_only_mount_opens_for_reading_even_as_root(read_only_mount):
    async def scenario():
        async with VersionedStore(read_only_mount, create=False) as s:
            assert await s.read("/a.md") == "A\n" and await s.fsck() == []
            with pytest.raises(memrev.ReadOnlyStore):
                await s.write("/b.md", "B\n")
            assert len(await s.log()) == 1

    asyncio.run(scenario())


# ----------------------------------------------------------------- a full disk


def _noise(n: int) -> str:
    return base64.b64encode(os.urandom(n)).decode()  # does not compress away


def test_disk_full_is_store_full_and_keeps_what_was_acknowledged(tmp_path):
    async def scenario():
        async with VersionedStore(tmp_path) as s:
            await s.write("/kept.md", "kept\n")
            await s.append("/log.md", "line 1\n")
            conn = s.repo.backend._conn  # the size limit is per connection: a disk filling up
            pages = conn.execute("PRAGMA page_count").fetchone()[0]
            conn.execute(f"PRAGMA max_page_count={pages + 4}")
            with pytest.raises(memrev.StoreFull):
                await s.write("/big.md", _noise(200_000))
            with pytest.raises(memrev.StoreFull):
                async with s.transaction():
                    await s.append("/log.md", "line 2\n")
                    await s.write("/big2.md", _noise(200_000))
            assert await s.read("/kept.md") == "kept\n" and await s.read("/log.md") == "line 1\n"
            assert await s.read("/big.md") is None and len(await s.log()) == 2
            conn.execute("PRAGMA max_page_count=1073741823")  # space again: the handle works on
            await s.write("/big.md", "fits now\n")
        async with VersionedStore(tmp_path) as s:
            assert await s.read("/kept.md") == "kept\n" and await s.read("/big.md") == "fits now\n"
            assert await s.fsck() == []

    asyncio.run(scenario())
    assert issubclass(memrev.StoreFull, OSError)


@pytest.fixture
def tiny_tmpfs():
    mount = Path(tempfile.mkdtemp(prefix="memrev-full-", dir="/tmp"))
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        mount.rmdir()
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    yield mount
    subprocess.run(["umount", str(mount)], check=True)
    mount.rmdir()


def test_a_really_full_disk(tiny_tmpfs):
    acked: dict[str, str] = {}

    async def fill():
        async with VersionedStore(tiny_tmpfs / "store") as s:
            for i in range(200):
                text = _noise(20_000)
                try:
                    await s.write(f"/f{i}.md", text)
                except memrev.StoreFull:
                    return i
                acked[f"/f{i}.md"] = text
        raise AssertionError("a 512 KB file system never filled up")

    failed_at = asyncio.run(fill())
    assert failed_at >= 1

    async def check():
        async with VersionedStore(tiny_tmpfs / "store", create=False) as s:
            for path, text in acked.items():
                assert await s.read(path) == text
            assert len(await s.log()) == len(acked)
            assert await s.fsck() == []

    asyncio.run(check())


# ----------------------------------------------------------------- PostgreSQL




def test_postgres_create_false_creates_nothing(pg_url):
    import psycopg

    with pytest.raises(memrev.NoStore, match="no memrev store at"):
        VersionedStore(pg_url, create=False)
    with psycopg.connect(pg_url) as conn:
        n = conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()").fetchone()[0]
    assert n == 0


def test_postgres_read_only_database(pg_url):
    import psycopg

    _fill(pg_url, {"/a.md": "A\n"})
    with psycopg.connect(pg_url, autocommit=True) as conn:
        db = conn.execute("SELECT current_database()").fetchone()[0]
        conn.execute(f'ALTER DATABASE "{db}" SET default_transaction_read_only = on')

    async def scenario():
        async with VersionedStore(pg_url, create=False) as s:
            assert await s.read("/a.md") == "A\n"
            with pytest.raises(memrev.ReadOnlyStore):
                await s.write("/b.md", "B\n")
            assert len(await s.log()) == 1

    try:
        asyncio.run(scenario())
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("SET default_transaction_read_only = off")
            conn.execute(f'ALTER DATABASE "{db}" SET default_transaction_read_only = off')
