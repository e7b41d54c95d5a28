"""Adoption (issue 9, item 1): a folder of plain files and no store becomes the first commit.

Real folders with real symlinks, FIFOs and binary files; two real processes
adopting the same folder at once.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from memrev import VersionedStore, errors
from memrev.cli import main as cli
from memrev.folders import adopt

pytestmark = pytest.mark.anyio

SRC = str(Path(__file__).resolve().parents[1] / "src")


def _disk_state(folder: Path) -> dict[str, tuple]:
    """Every entry under ``folder`` with its type, content hash and mtime (links not followed)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in dirnames + filenames:
            full = Path(dirpath) / name
            st = full.lstat()
            rel = str(full.relative_to(folder))
            if full.is_symlink():
                out[rel] = ("link", os.readlink(full))
            elif full.is_file():
                out[rel] = ("file", hashlib.sha256(full.read_bytes()).hexdigest(), st.st_mtime_ns, st.st_mode)
            else:
                out[rel] = ("other", st.st_mode)
    return out


def _disk_store_folder(root: Path) -> Path:
    """What ag2's DiskKnowledgeStore leaves behind, plus things adoption must skip."""
    folder = root / "state"
    (folder / "memory").mkdir(parents=True)
    (folder / "log").mkdir()
    (folder / "memory" / "working.md").write_text("# Working memory\n- Dana\n")
    (folder / "log" / "concierge.jsonl").write_text('{"turn": 1, "t": "é日😀"}\n')
    (folder / "artifacts").mkdir()
    (folder / "artifacts" / "empty.md").write_text("")
    (folder / "avatar.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff\xfe")
    secret = root / "outside-secret.txt"
    secret.write_text("never adopt me")
    (folder / "link-out").symlink_to(secret)
    (folder / "dir-link").symlink_to(root)  # a directory link: never walked
    os.mkfifo(folder / "pipe")
    return folder


async def test_adoption_makes_one_first_commit_and_changes_nothing_on_disk(tmp_path, caplog):
    folder = _disk_store_folder(tmp_path)
    before = _disk_state(folder)
    with caplog.at_level(logging.WARNING, logger="memrev"):
        store = VersionedStore(folder)
    try:
        log = await store.log()
        assert len(log) == 1
        first = log[0]
        assert first.author == adopt.ADOPT_AUTHOR
        assert "adopt" in first.message and str(folder) in first.message
        assert first.meta["adopted_from"] == str(folder)
        assert set(first.paths) == {"/memory/working.md", "/log/concierge.jsonl", "/artifacts/empty.md"}
        assert await store.read("/memory/working.md") == "# Working memory\n- Dana\n"
        assert await store.read("/log/concierge.jsonl") == '{"turn": 1, "t": "é日😀"}\n'
        assert await store.read("/artifacts/empty.md") == ""
        assert await store.list("/") == ["artifacts/", "log/", "memory/"]
        skipped = {s["path"]: s["reason"] for s in first.meta["skipped"]}
        assert skipped == {
            "/avatar.png": "not UTF-8 text (binary)",
            "/link-out": "symbolic link (not followed)",
            "/dir-link": "symbolic link (not followed)",
            "/pipe": "FIFO",
        }
        assert first.meta["skipped_count"] == 4
        warned = " ".join(r.getMessage() for r in caplog.records)
        for name in skipped:
            assert name in warned
        assert await store.read("/link-out") is None
    finally:
        store.close()
    after = _disk_state(folder)
    # Only memrev's own store file appeared; everything that was there is as it was.
    assert {k: v for k, v in after.items() if not k.startswith("memrev.db")} == before
    assert await _reopen_log_length(folder) == 1


async def _reopen_log_length(folder: Path) -> int:
    store = VersionedStore(folder)
    try:
        return len(await store.log())
    finally:
        store.close()


async def test_socket_and_bad_names_are_skipped(tmp_path):
    folder = tmp_path / "f"
    folder.mkdir()
    (folder / "ok.md").write_text("ok")
    (folder / "bell\x07.md").write_text("a control character cannot be a memrev path")
    (folder / os.fsdecode(b"latin-\xe9.md")).write_text("an undecodable name")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(folder / "s.sock"))
    try:
        store = VersionedStore(folder)
        try:
            (first,) = await store.log()
            reasons = {s["path"]: s["reason"] for s in first.meta["skipped"]}
            assert reasons["/s.sock"] == "socket"
            assert reasons["/bell\\x07.md"] == "name memrev cannot store as a path"
            assert reasons["/latin-\\xe9.md"] == "name memrev cannot store as a path"
            assert len(reasons) == 3
            assert await store.list("/") == ["ok.md"]
        finally:
            store.close()
    finally:
        sock.close()


async def test_an_existing_store_is_never_adopted_again(tmp_path):
    folder = tmp_path / "f"
    store = VersionedStore(folder)
    await store.write("/a.md", "through memrev")
    store.close()
    (folder / "later.md").write_text("put there by hand")
    store = VersionedStore(folder)
    try:
        assert [c.message for c in await store.log()] == ["write /a.md"]
        assert await store.read("/later.md") is None
    finally:
        store.close()


async def test_an_empty_folder_gets_an_empty_store(tmp_path):
    store = VersionedStore(tmp_path / "new")
    try:
        assert await store.log() == []
    finally:
        store.close()


async def test_too_large_a_folder_is_refused_and_nothing_is_written(tmp_path, monkeypatch):
    folder = tmp_path / "f"
    folder.mkdir()
    for i in range(5):
        (folder / f"{i}.md").write_text("x" * 10)
    monkeypatch.setattr(adopt, "MAX_FILES", 3)
    with pytest.raises(errors.FolderTooLarge):
        VersionedStore(folder)
    monkeypatch.setattr(adopt, "MAX_FILES", 100)
    monkeypatch.setattr(adopt, "MAX_TOTAL_BYTES", 25)
    with pytest.raises(errors.FolderTooLarge):
        VersionedStore(folder)
    monkeypatch.setattr(adopt, "MAX_TOTAL_BYTES", 1000)
    monkeypatch.setattr(adopt, "MAX_FILE_BYTES", 5)  # each file is over it: skipped, named
    store = VersionedStore(folder)
    try:
        assert await store.log() == []  # nothing to adopt: every file was skipped
    finally:
        store.close()
    monkeypatch.setattr(adopt, "MAX_FILE_BYTES", 1 << 20)
    store = VersionedStore(folder)  # the store is still empty, so the files are adopted now
    try:
        assert len(await store.list("/")) == 5
    finally:
        store.close()


CHILD = textwrap.dedent(
    """
    import asyncio, json, sys, time
    from pathlib import Path
    from memrev import VersionedStore

    folder, go = sys.argv[1], Path(sys.argv[2])
    print("ready", flush=True)
    while not go.exists():
        time.sleep(0.001)

    async def main():
        store = VersionedStore(folder)
        try:
            print(json.dumps([[c.id, c.author] for c in await store.log()]), flush=True)
        finally:
            store.close()

    asyncio.run(main())
    """
)


@pytest.mark.slow
def test_two_processes_adopting_at_once_adopt_once(tmp_path):
    for trial in range(3):
        folder = tmp_path / f"state{trial}"
        folder.mkdir()
        for i in range(50):
            (folder / f"note-{i}.md").write_text(f"note {i}\n" * 20)
        go = tmp_path / f"go{trial}"
        env = {**os.environ, "PYTHONPATH": SRC}
        procs = [
            subprocess.Popen([sys.executable, "-c", CHILD, str(folder), str(go)], stdout=subprocess.PIPE, text=True, env=env)
            for _ in range(2)
        ]
        for p in procs:
            assert p.stdout.readline() == "ready\n"
        go.touch()
        outs = [p.communicate(timeout=120)[0] for p in procs]
        assert [p.returncode for p in procs] == [0, 0], outs
        logs = [json.loads(o.strip().splitlines()[-1]) for o in outs]
        assert logs[0] == logs[1]
        assert len(logs[0]) == 1 and logs[0][0][1] == adopt.ADOPT_AUTHOR


def test_cli_read_commands_never_adopt_and_suggest_adopt(tmp_path):
    folder = _disk_store_folder(tmp_path)
    result = CliRunner().invoke(cli, ["--store", str(folder), "log"])
    assert result.exit_code == 1
    assert f"no memrev store at {folder}" in result.output and "memrev adopt" in result.output
    assert not (folder / "memrev.db").exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    result = CliRunner().invoke(cli, ["--store", str(empty), "ls"])
    assert result.exit_code == 1 and "memrev adopt" not in result.output
    assert list(empty.iterdir()) == []

    result = CliRunner().invoke(cli, ["adopt", str(folder)])
    assert result.exit_code == 0, result.output
    assert "adopted" in result.output and "(3 files)" in result.output
    assert "skipped /pipe: FIFO" in result.output
    result = CliRunner().invoke(cli, ["--store", str(folder), "cat", "/memory/working.md"])
    assert result.output == "# Working memory\n- Dana\n"
    result = CliRunner().invoke(cli, ["adopt", str(folder)])
    assert result.exit_code == 0 and "already holds a memrev store" in result.output


async def test_adopting_straight_into_a_working_tree(tmp_path):
    folder = _disk_store_folder(tmp_path)
    before = _disk_state(folder)
    store = VersionedStore(folder, worktree=True)
    try:
        log = await store.log()
        assert [c.author for c in log] == [adopt.ADOPT_AUTHOR]  # nothing "outside": the files are the head
        assert (folder / ".memrev" / "memrev.db").exists() and not (folder / "memrev.db").exists()
        await store.write("/memory/working.md", "# Working memory\n- Dana, vegetarian\n")
        assert (folder / "memory" / "working.md").read_text() == "# Working memory\n- Dana, vegetarian\n"
    finally:
        store.close()
    after = _disk_state(folder)
    changed = {k for k in set(before) | set(after) if before.get(k) != after.get(k) and not k.startswith(".memrev")}
    assert changed == {"memory/working.md"}  # the skipped files (binary, links, FIFO) untouched


async def test_the_commit_names_a_bounded_number_of_skipped_entries(tmp_path, monkeypatch):
    folder = _disk_store_folder(tmp_path)
    monkeypatch.setattr(adopt, "MAX_NAMED_SKIPS", 2)
    store = VersionedStore(folder)
    try:
        (first,) = await store.log()
        assert len(first.meta["skipped"]) == 2 and first.meta["skipped_count"] == 4
    finally:
        store.close()
    monkeypatch.setattr(adopt, "MAX_FILES", 3)  # more entries to skip than that: refused
    other = tmp_path / "other"
    other.mkdir()
    for i in range(5):
        (other / f"{i}.bin").write_bytes(b"\xff")
    with pytest.raises(errors.FolderTooLarge):
        VersionedStore(other)
