"""Issue 20 item 15: ``log -S`` and ``blame`` over an append log read each appended
piece once, not every version rebuilt whole (quadratic: 3,000 appends took 33 s).

Work is counted as the payload bytes the blob store unpacks (every rebuild of a
version unpacks all the pieces of its run), on a store opened cold; the answers
are checked against the per-version definitions on random append/write sequences.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import FreshStore
from memrev import VersionedStore, errors
from memrev.core import blame as blame_mod
from memrev.history.blame import Versions

pytestmark = pytest.mark.anyio

LOG = "/log.md"


async def _append_log(path, n: int) -> None:
    async with VersionedStore(path, author="t") as store:
        await store.write(LOG, "start\n")
        for i in range(n):
            await store.append(LOG, f"entry {i} tea\n" if i % 50 == 7 else f"entry {i} of the run\n")


def _count_unpacked(store: VersionedStore) -> list[int]:
    blobs = store._repo.blobs
    seen = [0]
    plain = blobs.payload

    def payload(row):
        raw = plain(row)
        seen[0] += len(raw)
        return raw

    blobs.payload = payload  # type: ignore[method-assign]
    return seen


async def _work(tmp_path, n: int, what: str) -> int:
    where = tmp_path / f"s{n}"
    await _append_log(where, n)
    async with VersionedStore(where, author="t") as store:
        seen = _count_unpacked(store)
        if what == "search":
            found = await store.log(LOG, contains="tea")
            assert len(found) == len(range(7, n, 50))
        elif what == "find":
            changes = await store.find_text(LOG, "of the run")
            assert [(t.before, t.after) for t in changes] == [(k, k + 1) for k in range(n - len(range(7, n, 50)))]
        else:
            lines = await store.blame(LOG)
            assert len(lines) == n + 1
        return seen[0]


@pytest.mark.slow
@pytest.mark.parametrize("what", ["search", "find", "blame"])
async def test_append_log_work_grows_linearly(tmp_path, what):
    small, large = await _work(tmp_path, 200, what), await _work(tmp_path, 400, what)
    assert large / small < 2.5, (small, large)


STEP = st.tuples(st.sampled_from(["append", "append", "append", "write"]), st.text("ab\né\r", max_size=6))
NEEDLES = ["a", "aa", "aba", "b\n", "é", "\r\n", "a\nb"]


async def _apply(store, steps) -> None:
    await store.write(LOG, "ab\n")
    for op, text in steps:
        if op == "write":
            await store.write(LOG, text)
        elif text:
            await store.append(LOG, text)


SETTINGS = settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)


@pytest.mark.slow
@SETTINGS
@given(steps=st.lists(STEP, max_size=12), needle=st.sampled_from(NEEDLES))
async def test_search_over_appends_equals_per_version_counts(steps, needle):
    async with FreshStore() as store:
        await _apply(store, steps)
        expect = []
        for c in await store.log(LOG):
            parent = c.parents[0] if c.parents else None
            new = await store.read(LOG, rev=c.id) or ""
            old = (await store.read(LOG, rev=parent) or "") if parent else ""
            if old.count(needle) != new.count(needle):
                expect.append((c.id, old.count(needle), new.count(needle)))
        assert [c.id for c in await store.log(LOG, contains=needle)] == [e[0] for e in expect]
        found = await store.find_text(LOG, needle)
        assert [(t.commit.id, t.before, t.after) for t in reversed(found)] == expect


def _blame_by_line_diffs(store: VersionedStore) -> list[str]:
    """The walk before item 15: every version read and line-diffed against its parent."""
    repo = store._repo
    seq = repo.path_start(LOG, store._commit_for(None), store._branch)
    versions = Versions(repo, LOG, seq)
    owners = blame_mod.blame_walk(seq, versions.lines, versions.parents)
    return [c.id for c in repo.commits_at(owners)]


@pytest.mark.slow
@SETTINGS
@given(steps=st.lists(STEP, max_size=12), branch_at=st.integers(0, 12))
async def test_blame_over_appends_equals_line_diff_blame(steps, branch_at):
    async with FreshStore() as store:
        await _apply(store, steps[:branch_at])
        other = await store.branch("other")
        try:
            await other.append(LOG, "from other\n")
        finally:
            other.close()
        await _apply_more(store, steps[branch_at:])
        try:
            await store.merge("other")
        except errors.MemrevError:  # a conflict: the history without the merge is blamed
            pass
        if await store.read(LOG) is None:
            return
        got = [line.commit.id for line in await store.blame(LOG)]
        assert got == _blame_by_line_diffs(store)


async def _apply_more(store, steps) -> None:
    for op, text in steps:
        if op == "write":
            await store.write(LOG, text)
        elif text:
            await store.append(LOG, text)
