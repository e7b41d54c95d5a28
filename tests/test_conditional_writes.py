"""Conditional writes (issue 23, part 1): ``read_versioned`` and ``expected=`` never lose an update.

A version is the id of the commit that last changed a path on the branch. ``write``,
``append`` and ``delete`` with ``expected=`` commit only if the path is still at that
version (``"absent"``: only if it does not exist), checked under the commit's own lock,
so it holds across tasks, processes and hosts; otherwise ``WriteConflict`` and nothing is
written. Without ``expected`` nothing changes (ag2's contract).
"""

from __future__ import annotations

import asyncio
import textwrap
from pathlib import Path

import pytest

from helpers import spawn
from memrev import VersionedStore, errors

pytestmark = pytest.mark.anyio


async def test_read_versioned_gives_the_commit_that_last_changed_the_path(store_location: str) -> None:
    async with VersionedStore(store_location) as s:
        assert await s.read_versioned("/a.md") == (None, None)
        await s.write("/a.md", "one\n")
        await s.write("/b.md", "other file\n")
        content, version = await s.read_versioned("/a.md")
        assert content == "one\n" and version == (await s.log("/a.md"))[0].id
        assert version != await s.head()  # /b.md's commit came after: the version is /a.md's
        first = version
        await s.write("/a.md", "two\n")
        assert await s.read_versioned("/a.md", rev=first) == ("one\n", first)
        await s.delete("/a.md")
        assert await s.read_versioned("/a.md") == (None, None)


async def test_a_stale_version_is_a_conflict_and_nothing_is_written(store_location: str) -> None:
    async with VersionedStore(store_location) as s:
        await s.write("/plan.md", "v1\n")
        _, v1 = await s.read_versioned("/plan.md")
        await s.write("/plan.md", "v2\n", expected=v1)
        _, v2 = await s.read_versioned("/plan.md")
        head = await s.head()
        with pytest.raises(errors.WriteConflict) as caught:
            await s.write("/plan.md", "lost update\n", expected=v1)
        assert (caught.value.path, caught.value.expected, caught.value.actual) == ("/plan.md", v1, v2)
        assert str(caught.value).startswith(f"conflict: /plan.md is at {v2}, not {v1}")
        assert isinstance(caught.value, errors.MemrevError)
        assert await s.head() == head and await s.read("/plan.md") == "v2\n"
        # absent: create only
        with pytest.raises(errors.WriteConflict) as caught:
            await s.write("/plan.md", "again\n", expected="absent")
        assert caught.value.expected == "absent" and caught.value.actual == v2
        await s.write("/new.md", "made\n", expected="absent")
        with pytest.raises(errors.WriteConflict):
            await s.write("/plan.md", "x\n", expected=(await s.read_versioned("/new.md"))[1])  # another path's version
        # append and delete take it too
        offset = await s.append("/plan.md", "more\n", expected=v2)
        assert offset == 3
        with pytest.raises(errors.WriteConflict):
            await s.append("/plan.md", "more\n", expected=v2)
        with pytest.raises(errors.WriteConflict):
            await s.delete("/plan.md", expected=v2)
        _, v3 = await s.read_versioned("/plan.md")
        await s.delete("/plan.md", expected=v3)
        assert await s.read("/plan.md") is None
        with pytest.raises(errors.WriteConflict) as caught:
            await s.delete("/plan.md", expected=v3)
        assert caught.value.actual == "absent"


@pytest.mark.parametrize("bad", ["", "abc1234", "HEAD", "absent ", 42, b"x" * 20])
async def test_a_malformed_expected_is_a_typed_error(tmp_path: Path, bad: object) -> None:
    async with VersionedStore(str(tmp_path / "s")) as s:
        await s.write("/a.md", "a\n")
        head = await s.head()
        with pytest.raises(errors.InvalidArgument):
            await s.write("/a.md", "b\n", expected=bad)  # type: ignore[arg-type]
        assert await s.head() == head


async def test_the_conditions_of_a_transaction_hold_together(store_location: str) -> None:
    async with VersionedStore(store_location) as s:
        await s.write("/a.md", "a1\n")
        await s.write("/b.md", "b1\n")
        _, va = await s.read_versioned("/a.md")
        _, vb = await s.read_versioned("/b.md")
        await s.write("/b.md", "b2\n")  # someone else changed /b.md
        head = await s.head()
        with pytest.raises(errors.WriteConflict) as caught:
            async with s.transaction(message="both or neither"):
                await s.write("/a.md", "a2\n", expected=va)
                await s.write("/b.md", "b3\n", expected=vb)
        assert caught.value.path == "/b.md"
        assert await s.head() == head and await s.read("/a.md") == "a1\n"
        _, vb = await s.read_versioned("/b.md")
        async with s.transaction(message="both"):
            await s.write("/a.md", "a2\n", expected=va)
            await s.write("/b.md", "b3\n", expected=vb)
        assert (await s.log())[0].message == "both"


@pytest.fixture(params=["sqlite-full", "postgresql"])
def grouped_location(request, tmp_path):
    """A store whose commits go to the worker and are grouped: SQLite with durability="full",
    PostgreSQL (whose group's commits are numbered only at COMMIT)."""
    if request.param == "postgresql":
        return request.getfixturevalue("pg_url"), "normal"
    return str(tmp_path / "s"), "full"


async def test_tasks_of_one_process_racing_on_one_version_one_wins(grouped_location) -> None:
    """Group commit (the commits of the tasks waiting share one transaction): each caller
    still gets its own check, against the requests before it in the group."""
    location, durability = grouped_location
    async with VersionedStore(location, durability=durability) as s:
        await s.write("/counter", "0")
        _, v = await s.read_versioned("/counter")
        outcomes = await asyncio.gather(*(s.write("/counter", str(i), expected=v) for i in range(1, 9)), return_exceptions=True)
        assert sum(o is None for o in outcomes) == 1
        assert all(isinstance(o, errors.WriteConflict) for o in outcomes if o is not None)
        assert len(await s.log("/counter")) == 2


INCREMENTER = textwrap.dedent(
    """
    import asyncio, sys
    from memrev import VersionedStore, errors
    async def main():
        location, n, conditional = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
        async with VersionedStore(location, author="inc") as s:
            done = 0
            while done < n:
                text, version = await s.read_versioned("/counter")
                await asyncio.sleep(0.002)  # the window another writer lands in
                try:
                    await s.write("/counter", str(int(text) + 1), expected=version if conditional else None)
                except errors.WriteConflict:
                    continue
                done += 1
        print("ok", flush=True)
    asyncio.run(main())
    """
)


async def _increments(location: str, procs: int, each: int, conditional: bool) -> tuple[int, int]:
    async with VersionedStore(location) as s:
        await s.write("/counter", "0")
        before = len(await s.log("/counter"))
    children = [spawn(INCREMENTER, location, str(each), "1" if conditional else "0") for _ in range(procs)]
    for child in children:
        out, err = child.communicate(timeout=600)
        assert child.returncode == 0 and out.strip() == "ok", err
    async with VersionedStore(location) as s:
        final = int(await s.read("/counter") or "0")
        commits = len(await s.log("/counter")) - before
        assert await s.fsck() == []
    return final, commits


@pytest.mark.slow
async def test_lost_updates_on_sqlite_processes(tmp_path: Path) -> None:
    """8 processes x 200 read-modify-write increments through expected=: the count is 1,600
    and so is the number of commits; without expected= (the control) increments are lost."""
    final, commits = await _increments(str(tmp_path / "c"), 8, 200, conditional=True)
    assert (final, commits) == (1600, 1600)
    final, commits = await _increments(str(tmp_path / "control"), 8, 50, conditional=False)
    assert final < 400  # lost updates: each writer overwrote increments it never read


@pytest.mark.slow
async def test_lost_updates_on_postgresql_processes(pg_url: str) -> None:
    final, commits = await _increments(pg_url, 8, 200, conditional=True)
    assert (final, commits) == (1600, 1600)


async def test_lost_updates_on_postgresql_quick(pg_url: str) -> None:
    """The same, small, in the quick loop: 3 processes x 20."""
    assert await _increments(pg_url, 3, 20, conditional=True) == (60, 60)
