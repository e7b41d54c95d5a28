"""Set-up the working-tree tests share (``test_worktree_scan.py``, ``test_own_and_unstorable_files.py``):
a folder with the working tree on and a few files committed, and the real CLI on it.

``from worktree_helpers import make_tree`` works from any test module (``tests/`` is on ``sys.path``,
as for ``helpers.py``).
"""

from __future__ import annotations

import asyncio
import os
import time

from click.testing import CliRunner, Result

from memrev import VersionedStore
from memrev.cli import main as cli


async def open_tree(folder: str | os.PathLike[str], files: dict[str, str], **options) -> VersionedStore:
    """A store on ``folder`` with the working tree on and ``files`` written, one commit each, in
    order; left open (the caller closes it). ``options``: more of ``VersionedStore``'s arguments."""
    store = VersionedStore(folder, worktree=True, **options)
    for path, text in files.items():
        await store.write(path, text)
    return store


async def make_tree(folder: str | os.PathLike[str], files: dict[str, str], **options) -> None:
    """As ``open_tree``, then closed: the folder as the next open finds it."""
    store = await open_tree(folder, files, **options)
    store.close()


def make_tree_now(folder: str | os.PathLike[str], files: dict[str, str]) -> None:
    """``make_tree`` from a test that is not async (it runs its own event loop)."""
    asyncio.run(make_tree(folder, files))


def invoke_cli(folder: str | os.PathLike[str], *args: str) -> Result:
    """The real CLI on the store in ``folder``: ``memrev --store FOLDER ARGS...``."""
    return CliRunner().invoke(cli, ["--store", str(folder), *args])


async def run_cli(*args: str) -> Result:
    """The real CLI, in a thread: it runs its own event loop."""
    return await asyncio.to_thread(CliRunner().invoke, cli, list(args))


async def eventually(check, what: str, timeout: float = 60):
    """Wait (bounded) until ``await check()`` is truthy; the bound is a hang guard, not a speed target."""
    deadline = time.monotonic() + timeout
    while True:
        result = await check()
        if result:
            return result
        assert time.monotonic() < deadline, f"never happened: {what}"
        await asyncio.sleep(0.05)
