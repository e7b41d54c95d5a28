"""Two debts of the store face: ``Store.branch`` opens the new handle's backend off the event
loop, and ``import_dir`` reads a folder with adoption's bounds (``memrev.folders.adopt`` limits).

Both on real SQLite stores.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from memrev import errors
from memrev.backends import sqlite
from memrev.folders import adopt
from memrev.store import Store

pytestmark = pytest.mark.anyio


async def test_branch_opens_the_new_handle_off_the_event_loop(tmp_path, monkeypatch):
    """A backend whose open blocks (a connect over the network, here a sleep) must not stop the loop."""
    store = Store(tmp_path / "s")
    await store.write("/a.md", "a\n")
    real_init = sqlite.SqliteBackend.__init__

    def slow_init(self, *args, **kwargs):
        time.sleep(0.6)
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(sqlite.SqliteBackend, "__init__", slow_init)
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.02)
            ticks += 1

    task = asyncio.create_task(ticker())
    try:
        started = time.monotonic()
        other = await store.branch("exp")
        took = time.monotonic() - started
    finally:
        task.cancel()
    try:
        assert took >= 0.6  # the open really was slow
        assert ticks >= 10, f"the event loop stood still while the backend opened ({ticks} ticks in {took:.2f} s)"
        assert other.branch_name == "exp" and await other.read("/a.md") == "a\n"
        await other.write("/b.md", "b\n")
        assert await store.read("/b.md") is None
    finally:
        other.close()
        store.close()


async def test_a_branch_call_cancelled_while_the_handle_opens_leaks_no_handle(tmp_path, monkeypatch):
    """The caller gives up (``wait_for``) while the new handle opens in the worker thread: the
    call raises ``TimeoutError`` at once, and the handle that lands afterwards is closed, not leaked."""
    store = Store(tmp_path / "s")
    await store.write("/a.md", "a\n")
    real_init, real_close = sqlite.SqliteBackend.__init__, sqlite.SqliteBackend.close
    opened, closed = [], []

    def slow_init(self, *args, **kwargs):
        time.sleep(0.5)
        real_init(self, *args, **kwargs)
        opened.append(self)

    def counting_close(self):
        closed.append(self)
        real_close(self)

    monkeypatch.setattr(sqlite.SqliteBackend, "__init__", slow_init)
    monkeypatch.setattr(sqlite.SqliteBackend, "close", counting_close)
    try:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(store.branch("exp"), timeout=0.1)
        deadline = time.monotonic() + 30  # a hang guard, not a speed target
        while not (opened and opened[0] in closed) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        assert len(opened) == 1 and opened[0] in closed, "the handle that landed after the caller gave up was left open"
        assert "exp" in await store.branches()  # the branch was made before the open began
        assert await store.read("/a.md") == "a\n"  # this handle is untouched
    finally:
        store.close()


async def test_import_dir_over_the_adoption_limits_is_refused_and_writes_nothing(tmp_path, monkeypatch):
    folder = tmp_path / "folder"
    folder.mkdir()
    for i in range(5):
        (folder / f"{i}.md").write_text(f"note {i}\n")
    monkeypatch.setattr(adopt, "MAX_FILES", 3)
    # Adoption of that folder refuses it so ...
    with pytest.raises(errors.FolderTooLarge):
        Store(folder)
    # ... and so does import_dir, with the same error, before anything is written.
    store = Store(tmp_path / "s")
    try:
        await store.write("/kept.md", "kept\n")
        head = await store.head()
        with pytest.raises(errors.FolderTooLarge, match="nothing was written"):
            await store.import_dir(folder)
        assert await store.head() == head
        assert await store.list("/") == ["kept.md"]
    finally:
        store.close()


async def test_import_dir_total_and_per_file_bounds(tmp_path, monkeypatch):
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "small.md").write_text("small\n")
    (folder / "big.md").write_text("x" * 100)
    monkeypatch.setattr(adopt, "MAX_FILE_BYTES", 50)
    store = Store(tmp_path / "s")
    try:
        done = await store.import_dir(folder)  # a file over the per-file limit is skipped, as adoption skips it
        assert done.files == ("/small.md",)
        assert done.skipped == (("/big.md", "larger than 50 bytes"),)
        monkeypatch.setattr(adopt, "MAX_FILE_BYTES", 1000)
        monkeypatch.setattr(adopt, "MAX_TOTAL_BYTES", 50)
        head = await store.head()
        with pytest.raises(errors.FolderTooLarge):
            await store.import_dir(folder)
        assert await store.head() == head
    finally:
        store.close()
