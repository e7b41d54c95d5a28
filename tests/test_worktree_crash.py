"""kill -9 at random instants while a working-tree store commits (issue 9).

The crash campaign of tests/test_reliability.py, on folders whose working
tree is on (the mode is persisted, so the child's plain ``VersionedStore(folder)``
keeps the files): after every kill the reopened store must hold every
acknowledged write (plus or minus the one in flight), fsck clean, with no
commit by the outside author (a crash leftover of memrev's own file write is
not an outside edit), and the plain files must be the head.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from memrev import VersionedStore
from memrev.folders.worktree import OUTSIDE_AUTHOR
from test_reliability import _crash_campaign
from test_worktree import disk_files, head_files

pytestmark = pytest.mark.anyio


async def _worktree_problems(store: VersionedStore) -> list[str]:
    problems = []
    if not store.worktree:
        problems.append("the working tree is off after reopening")
    outside = [c for c in await store.log() if c.author == OUTSIDE_AUTHOR]
    if outside:
        problems.append(f"{len(outside)} spurious outside commits, e.g. {outside[0].message!r} {outside[0].paths[:3]}")
    files, head = disk_files(Path(store.location)), await head_files(store)
    if files != head:
        diff = sorted(p for p in set(files) | set(head) if files.get(p) != head.get(p))
        problems.append(f"plain files differ from the head at {diff[:5]}")
    return problems


@pytest.mark.slow
async def test_crash_worktree_kill_9_at_random_instants(tmp_path: Path):
    counter = iter(range(1000))

    def new_location() -> tuple[str, str]:
        folder = tmp_path / f"wt{next(counter)}"
        VersionedStore(folder, worktree=True).close()  # the child opens it plainly: the mode is persisted
        return str(folder), str(folder)

    await _crash_campaign("SQLite working tree", new_location, trials=20, chain=4, check=_worktree_problems)
