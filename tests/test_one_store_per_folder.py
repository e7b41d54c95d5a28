"""One folder, one store (issue 20, item 7): processes opening one new folder at once, one of
them with ``worktree=True``, make one store between them, decided under a lock. Real processes
released together by a shared barrier file, real SQLite files."""

from __future__ import annotations

import asyncio

import pytest

from helpers import spawn
from memrev import VersionedStore

pytestmark = pytest.mark.anyio

CHILD = """
    import asyncio, os, sys, time
    from memrev import VersionedStore

    folder, barrier, mode, name = sys.argv[1:]
    print("ready", flush=True)
    while not os.path.exists(barrier):  # released together with the other process
        time.sleep(0.0005)

    async def main():
        store = VersionedStore(folder, worktree={"1": True, "0": False, "-": None}[mode])
        try:
            await store.write(f"/{name}.md", f"written by {name}\\n")
        finally:
            store.close()

    asyncio.run(main())
"""


def _trial(tmp_path, i: int, other: str):
    folder = tmp_path / f"f{i}"
    barrier = tmp_path / f"go{i}"
    procs = [spawn(CHILD, str(folder), str(barrier), "1", "tree"), spawn(CHILD, str(folder), str(barrier), other, "plain")]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    barrier.touch()
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    return folder


@pytest.mark.slow
async def test_two_processes_opening_one_new_folder_make_one_store(tmp_path):
    for i in range(10):
        folder = await asyncio.to_thread(_trial, tmp_path, i, "0" if i % 2 else "-")
        stores = [p for p in (folder / ".memrev" / "memrev.db", folder / "memrev.db") if p.exists()]
        assert len(stores) == 1, f"trial {i}: {stores}"
        for _ in range(2):  # every later open sees both writes
            store = VersionedStore(folder)
            try:
                assert await store.read("/tree.md") == "written by tree\n", f"trial {i}"
                assert await store.read("/plain.md") == "written by plain\n", f"trial {i}"
            finally:
                store.close()
