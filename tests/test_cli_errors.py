"""The CLI's errors (issue 8 items 10, 14, 16, 17, 18, 19): one clear line and
exit 1 for memrev's own failures, never a store or a branch made by accident,
never a file outside the store followed, replaced or blocked on."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import memrev
from memrev import Store, VersionedStore
from memrev.cli import main
from memrev.errors import InvalidContent
from memrev.repo.ops import ANY_HEAD, AnyHead, Write
from memrev.store.reads import Reader

SRC = str(Path(memrev.__file__).resolve().parents[1])  # the memrev under test, for child processes


def cli(store, *args):
    return CliRunner().invoke(main, ["--store", str(store), *args])


def failed(result, *words: str) -> str:
    """The one-line error of a command that must exit 1; returns it."""
    assert result.exit_code == 1, (result.exit_code, result.output, result.exception)
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit), result.exception
    err = result.stderr.strip()
    assert err.startswith("Error: ") and "\n" not in err and "Traceback" not in result.output, err
    for w in words:
        assert w in err, err
    return err


def _listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.fixture
def store(tmp_path):
    path = tmp_path / "state"

    async def build():
        async with VersionedStore(path, author="tester") as s:
            await s.write("/memory/working.md", "# Working\n- likes tea\n")
            await s.write("/memory/working.md", "# Working\n- likes coffee\n")
            exp = await s.branch("exp")
            await exp.write("/exp.md", "experiment\n")
            exp.close()

    asyncio.run(build())
    return path


def _state(path) -> tuple[dict, list]:
    async def read():
        async with VersionedStore(path, create=False) as s:
            return await s.branches(), [c.id for c in await s.log()]

    return asyncio.run(read())


# ----------------------------------------------------------------- item 14: no store, no branch by accident

READ_COMMANDS = [
    ["log"], ["log", "/memory"], ["show"], ["diff"], ["cat", "/a.md"], ["ls"], ["history", "/a.md"],
    ["blame", "/a.md"], ["fsck"], ["fsck", "--repair"], ["branch"], ["branch", "new"], ["branch", "-d", "x"],
    ["tag"], ["tag", "v1"], ["gc"], ["restore", "/a.md", "--rev", "HEAD~1"], ["revert", "HEAD"],
    ["merge", "exp"], ["export", "out.bundle"],
]


@pytest.mark.parametrize("args", READ_COMMANDS, ids=" ".join)
def test_commands_never_create_a_store(tmp_path, monkeypatch, args):
    monkeypatch.chdir(tmp_path)
    for where in (tmp_path, tmp_path / "typo"):
        failed(cli(where, *args), f"no memrev store at {where}")
        assert _listing(tmp_path) == [], f"{args} created {_listing(tmp_path)}"


def test_no_store_in_a_disk_knowledge_store_folder(tmp_path):
    from ag2.knowledge import DiskKnowledgeStore

    asyncio.run(DiskKnowledgeStore(tmp_path).write("/memory/working.md", "# Working\n"))
    before = _listing(tmp_path)
    failed(cli(tmp_path, "log"), "no memrev store at")
    failed(CliRunner().invoke(main, ["log"], env={"MEMREV_STORE": str(tmp_path)}), "no memrev store at")
    assert _listing(tmp_path) == before


@pytest.mark.parametrize(
    "args",
    [["log"], ["show"], ["cat", "/memory/working.md"], ["ls"], ["history", "/memory/working.md"], ["diff"],
     ["restore", "/memory/working.md", "--rev", "main~1"], ["revert", "main"], ["tag", "t"], ["branch", "b"]],
    ids=" ".join,
)
def test_a_missing_branch_is_named_and_never_created(store, args):
    before = _state(store)
    failed(cli(store, "--branch", "mian", *args), "branch 'mian' does not exist", "main")
    assert _state(store) == before


def test_merge_into_a_missing_branch_and_import_dir_onto_one(store, tmp_path):
    before = _state(store)
    failed(cli(store, "merge", "exp", "--into", "mian"), "branch 'mian' does not exist")
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "a.md").write_text("A\n")
    failed(cli(store, "--branch", "mian", "import-dir", str(folder)), "branch 'mian' does not exist")
    assert _state(store) == before
    # Into a new, empty store the first commit makes the branch, as before.
    fresh = tmp_path / "fresh"
    assert cli(fresh, "--branch", "journal", "import-dir", str(folder)).exit_code == 0
    assert set(_state(fresh)[0]) == {"journal"}


# ----------------------------------------------------------------- item 19: a missing path


@pytest.mark.parametrize("command", ["cat", "ls", "log", "history", "blame"])
def test_a_missing_path_is_one_line_and_exit_1(store, command):
    failed(cli(store, command, "/nope"), "/nope")


def test_existing_and_deleted_paths_still_answer(store):
    async def delete():
        async with VersionedStore(store) as s:
            await s.write("/gone.md", "bye\n")
            await s.delete("/gone.md")

    asyncio.run(delete())
    assert len(json.loads(cli(store, "log", "/gone.md", "--json").output)) == 2
    assert [v["size"] for v in json.loads(cli(store, "history", "/gone.md", "--json").output)] == [None, 4]
    assert cli(store, "ls", "/memory").output.split() == ["working.md"]
    assert cli(store, "ls", "/").exit_code == 0


# ----------------------------------------------------------------- item 16: a file path as the store


def test_a_backup_file_is_a_store(store, tmp_path):
    backup = tmp_path / "backup.db"
    with sqlite3.connect(store / "memrev.db") as src, sqlite3.connect(backup) as dst:
        src.backup(dst)
    result = cli(backup, "fsck")
    assert result.exit_code == 0 and result.output.strip() == "ok"
    assert cli(backup, "cat", "/memory/working.md").output == "# Working\n- likes coffee\n"
    notes = tmp_path / "notes.txt"
    notes.write_text("hello\n")
    failed(cli(notes, "fsck"), f"{notes} is not a memrev store")
    failed(cli(f"sqlite:///{notes}", "log"), f"{notes} is not a memrev store")
    assert "//" not in failed(cli(f"sqlite:///{notes}", "log"))


# ----------------------------------------------------------------- item 17: no traceback, and no bug hidden


def test_a_bug_is_not_dressed_as_a_user_error(store, monkeypatch):
    async def broken(self, *a, **k):
        raise KeyError("a bug in memrev")

    def broken_read(self, *a, **k):
        raise KeyError("a bug in memrev")

    monkeypatch.setattr(Store, "blame", broken)  # a command that opens a Store
    result = cli(store, "blame", "/memory/working.md")
    assert isinstance(result.exception, KeyError), "a KeyError from a bug became a one-line user error"
    monkeypatch.setattr(Reader, "log", broken_read)  # a read-only command opens a Reader
    result = cli(store, "log")
    assert isinstance(result.exception, KeyError), "a KeyError from a bug became a one-line user error"


def test_resolve_file_that_cannot_be_read(store, tmp_path):
    result = cli(store, "merge", "exp", "--resolve", f"/exp.md={tmp_path / 'missing.txt'}")
    assert result.exit_code == 2 and "cannot read" in result.output and "Traceback" not in result.output


def _special_files(folder: Path) -> dict[str, Path]:
    outside = folder / "outside.txt"
    outside.write_text("outside\n")
    made = {"symlink": folder / "link.bundle", "fifo": folder / "pipe.bundle", "folder": folder / "dir.bundle"}
    made["symlink"].symlink_to(outside)
    os.mkfifo(made["fifo"])
    made["folder"].mkdir()
    if os.geteuid() == 0:  # a character device like /dev/null, inside the test's folder
        made["device"] = folder / "null.bundle"
        os.mknod(made["device"], 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    return made


def test_export_replaces_only_a_regular_file(store, tmp_path):
    targets = tmp_path / "targets"
    targets.mkdir()
    for kind, target in _special_files(targets).items():
        mode = os.lstat(target).st_mode
        failed(cli(store, "export", str(target)), "not a regular file")
        assert os.lstat(target).st_mode == mode, f"the {kind} was replaced"
    assert (targets / "outside.txt").read_text() == "outside\n"
    assert os.readlink(targets / "link.bundle") == str(targets / "outside.txt")
    regular = targets / "backup.memrev"
    regular.write_text("old backup\n")
    assert cli(store, "export", str(regular)).exit_code == 0
    assert regular.read_bytes() != b"old backup\n"
    assert not [p for p in targets.iterdir() if p.name.endswith(".tmp")], "a temporary file was left behind"


# ----------------------------------------------------------------- item 17: merge, revert, restore recompute


def _with_a_concurrent_commit(monkeypatch, location) -> list[str]:
    """The first commit that expects a head finds another writer moved the branch first."""
    from memrev.repo.repository import Repository

    real = Repository.commit
    injected: list[str] = []

    def commit(self, branch, ops, **kw):
        if not isinstance(kw.get("expect_head", ANY_HEAD), AnyHead) and not injected:
            injected.append("moving")

            async def other():
                async with VersionedStore(location, author="other") as s:
                    await s.write("/other.md", "written meanwhile\n")
                    injected.append(await s.head())

            import threading

            # Another handle commits from a thread of its own (its own event loop and connection).
            t = threading.Thread(target=lambda: asyncio.run(other()))
            t.start()
            t.join()
        return real(self, branch, ops, **kw)

    monkeypatch.setattr(Repository, "commit", commit)
    return injected


@pytest.mark.parametrize(
    "args",
    [["merge", "exp"], ["revert", "HEAD"], ["restore", "/memory/working.md", "--rev", "HEAD~1"]],
    ids=" ".join,
)
def test_a_moved_branch_is_recomputed_not_an_error(store, monkeypatch, args):
    injected = _with_a_concurrent_commit(monkeypatch, store)
    result = cli(store, *args)
    assert result.exit_code == 0, result.output
    moved = injected[1]
    head = json.loads(cli(store, "show", "--json").output)
    assert head["parents"][0] == moved, "the command did not build on the concurrent commit"
    assert cli(store, "cat", "/other.md").output == "written meanwhile\n"
    assert cli(store, "fsck").output.strip() == "ok"


# ----------------------------------------------------------------- item 10: import-dir reads regular files only


def _hostile_folder(root: Path, outside: Path) -> None:
    (root / "memory").mkdir(parents=True)
    (root / "memory" / "working.md").write_text("# Working\n")
    (outside / "secret.txt").write_text("outside the folder\n")
    (outside / "dir").mkdir()
    (outside / "dir" / "x.md").write_text("outside too\n")
    (root / "secret.md").symlink_to(outside / "secret.txt")
    (root / "linked-dir").symlink_to(outside / "dir")
    (root / "dangling").symlink_to(outside / "nothing")
    os.mkfifo(root / "memory" / "pipe")


def test_import_dir_skips_links_and_fifos_without_hanging(tmp_path):
    folder, outside = tmp_path / "folder", tmp_path / "outside"
    outside.mkdir()
    _hostile_folder(folder, outside)
    env = {**os.environ, "PYTHONPATH": SRC}
    # A child process with a timeout: before the fix, opening the FIFO blocked forever.
    proc = subprocess.run(
        [sys.executable, "-m", "memrev.cli", "--store", str(tmp_path / "store"), "import-dir", str(folder)],
        capture_output=True, text=True, timeout=60, env=env,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"imported {folder}: commit ")
    for name, why in [("/dangling", "symbolic link"), ("/linked-dir", "symbolic link"),
                      ("/memory/pipe", "FIFO"), ("/secret.md", "symbolic link")]:
        assert f"skipped {name}: {why}" in proc.stderr
    assert json.loads(cli(tmp_path / "store", "ls", "/", "--json").output) == ["memory/"]
    log = json.loads(cli(tmp_path / "store", "log", "--json").output)
    assert log[0]["paths"] == ["/memory/working.md"]
    assert len(log[0]["meta"]["skipped"]) == 4


def test_import_dir_api_reports_what_it_skipped(tmp_path):
    folder, outside = tmp_path / "folder", tmp_path / "outside"
    outside.mkdir()
    _hostile_folder(folder, outside)

    async def run():
        async with VersionedStore(tmp_path / "store") as s:
            done = await s.import_dir(folder)
            return done, await s.read("/secret.md")

    done, secret = asyncio.run(run())
    assert secret is None
    assert done.files == ("/memory/working.md",) and len(done.commit) == 40
    assert [p for p, _ in done.skipped] == ["/dangling", "/linked-dir", "/memory/pipe", "/secret.md"]


def test_a_fifo_or_link_swapped_in_after_the_listing_is_not_read(tmp_path):
    from memrev.folders.read import _read_regular

    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "link").symlink_to("/etc/hostname")
    assert _read_regular(str(tmp_path / "pipe")) == "FIFO"  # returns at once: O_NONBLOCK, then fstat
    assert _read_regular(str(tmp_path / "link")).startswith("symbolic link")


# ----------------------------------------------------------------- item 18: ag2's words for path traversal


@pytest.mark.parametrize("path", ["../etc/passwd", "/../../etc/passwd", "/memory/../../x"])
def test_path_traversal_says_so_like_ag2(tmp_path, path):
    from ag2.knowledge import DiskKnowledgeStore

    async def run():
        disk = DiskKnowledgeStore(tmp_path / "disk")
        with pytest.raises(ValueError, match="Path traversal"):
            await disk.write(path, "x")
        async with VersionedStore(tmp_path / "store") as s:
            for call in (s.write(path, "x"), s.read(path), s.append(path, "x"), s.delete(path), s.list(path),
                         s.exists(path), s.read_range(path, 0)):
                with pytest.raises(ValueError, match="Path traversal") as e:
                    await call
                assert isinstance(e.value, memrev.InvalidPath)

    asyncio.run(run())
    assert failed(cli(tmp_path / "store", "cat", path), "Path traversal")


# ----------------------------------------------------------------- item 17: control characters are shown, not obeyed


def test_control_characters_in_messages_and_authors_are_escaped_on_display(tmp_path):
    evil_message, evil_author = "clear\x1b[2J\x07 screen\nsecond line", "\x1b]0;title\x07bob"

    async def build():
        with pytest.raises(InvalidContent):  # a new author with control characters is refused
            VersionedStore(tmp_path, author=evil_author)
        async with VersionedStore(tmp_path) as s:
            with pytest.raises(InvalidContent):  # new messages with control characters are refused
                await s.write("/a.md", "one\n", message=evil_message)
            # ...but a store written before that rule (or by another tool) may hold them
            for text in (b"one\n", b"one\ntwo\n"):
                s.repo.commit(s.branch_name, [Write("/a.md", text)], author=evil_author, message=evil_message)

    asyncio.run(build())
    outputs = [
        cli(tmp_path, *args).output
        for args in (["log"], ["log", "--oneline"], ["log", "--graph"], ["show"], ["history", "/a.md"], ["blame", "/a.md"])
    ]
    for out in outputs:
        assert "\x1b" not in out and "\x07" not in out, out
        assert "\\x1b" in out
    oneline = cli(tmp_path, "log", "--oneline").output.splitlines()
    assert len(oneline) == 2 and all(line.endswith("screen\\nsecond line") for line in oneline)
    doc = json.loads(cli(tmp_path, "log", "--json").output)
    assert doc[0]["message"] == evil_message and doc[0]["author"] == evil_author  # JSON keeps the exact text
    err = failed(cli(tmp_path, "show", "no\x1b[2Jsuch"))
    assert "\x1b" not in err and "\\x1b" in err


def test_skipped_names_that_are_not_utf8_or_hold_control_characters_are_reported_safely(tmp_path):
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "ok.md").write_text("ok\n")
    os.symlink("/etc/hostname", os.fsencode(folder) + b"/bad\xff")
    os.symlink("/etc/hostname", folder / "esc\x1b[2J")
    result = cli(tmp_path / "store", "import-dir", str(folder))
    assert result.exit_code == 0, result.output
    assert "skipped /bad\\xff: symbolic link" in result.stderr and "\x1b" not in result.stderr
    meta = json.loads(cli(tmp_path / "store", "log", "--json").output)[0]["meta"]
    assert meta["skipped"] == ["/bad\\xff: symbolic link (not followed)", "/esc\x1b[2J: symbolic link (not followed)"]


@pytest.mark.parametrize("days", ["nan", "-1"])
def test_gc_with_a_safety_window_that_means_nothing_is_an_error_and_collects_nothing(store, days):
    refs_before, log_before = _state(store)
    got = cli(store, "gc", "--keep-days", days)
    assert got.exit_code == 2 and "not a number of days, 0 or more" in got.output, got.output  # a usage error
    assert "Traceback" not in got.output
    assert _state(store) == (refs_before, log_before)
