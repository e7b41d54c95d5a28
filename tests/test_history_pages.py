"""Cold history reads on SQLite (issue 14): what the first ``resolve('HEAD~n')`` and
``log(path)`` of a fresh process read, counted (statements, query plans, objects kept
alive), never timed.

* ``HEAD~n`` walks (seq, parent_seq) pairs in the covering index ``commits_first_parents``
  (schema 3), ~270 to a page, not whole commit rows (~30 to a page): a cold walk of
  5,000 steps read ~170 pages one at a time. A store of schema 2 gets the index when
  opened, and answers the same.
* A path's whole log is one statement whose rows are used as they come: the log of a
  file with many versions keeps one object per commit (its ``Commit``) and no more, so
  it sets off a few young-generation collections instead of dozens (each tenth of them
  a collection of the middle generation, and those lead to a full collection, ~20 ms
  in a process with a large heap).
"""

from __future__ import annotations

import gc
import sqlite3

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import FreshStore, apply_steps, step_lists
from memrev import VersionedStore, errors
from memrev.backends import folder_store_file
from memrev.backends import sqlite as sqlite_backend
from memrev.repo.repository import Repository

pytestmark = pytest.mark.anyio


async def _history(folder, n: int) -> VersionedStore:
    """``n`` commits on main, a side branch merged in the middle (a first-parent line
    that is not every commit)."""
    store = VersionedStore(folder)
    for i in range(n):
        await store.write(f"/a/f{i % 4}.md", f"v{i}\n")
        if i == n // 2:
            side = await store.branch("side")
            await side.write("/side.md", "side\n")
            await side.write("/side.md", "side 2\n")
            await store.merge("side")
            side.close()
    return store


def _first_parents(store: VersionedStore) -> list[str]:
    """HEAD, HEAD~1, ... by reading each commit's first parent: the reference answer."""
    repo = Repository(store.repo.backend)
    out = [repo.head("main")]
    while True:
        parents = repo.commit_data(out[-1])[1].parents
        if not parents:
            return [o.hex() for o in out]
        out.append(parents[0])


def _walk_plan(store: VersionedStore, rev: str) -> str:
    """The query plan of the statement ``resolve(rev)`` runs for its ``~`` steps."""
    (walk,) = [s for s in _statements(store, rev) if "RECURSIVE" in s]
    return " | ".join(r[3] for r in store.repo.backend._conn.execute("EXPLAIN QUERY PLAN " + walk))


async def test_head_n_walks_the_covering_index_not_the_commit_rows(tmp_path):
    store = await _history(tmp_path / "s", 40)
    try:
        plan = _walk_plan(store, "HEAD~30")
        assert "COVERING INDEX commits_first_parents" in plan, plan
        assert "SEARCH c USING INTEGER PRIMARY KEY" not in plan, plan  # no commit row read per step
        line = _first_parents(store)
        assert [await store.resolve(f"HEAD~{k}") for k in range(len(line))] == line
    finally:
        store.close()


def _statements(store: VersionedStore, rev: str) -> list[str]:
    conn = store.repo.backend._conn
    seen: list[str] = []
    conn.set_trace_callback(seen.append)
    try:
        store.resolve_now(rev)
    finally:
        conn.set_trace_callback(None)
    return seen


async def test_head_n_along_a_linear_run_is_counted_not_walked(tmp_path):
    """Each commit of (seq - n, seq] made on the one numbered before it: the answer is
    commit seq - n, found by one range count over the index instead of n searches."""
    store = VersionedStore(tmp_path / "s")
    try:
        for i in range(30):
            await store.write(f"/f{i % 3}.md", f"v{i}\n")
        line = _first_parents(store)
        seen = _statements(store, "HEAD~20")
        assert not [s for s in seen if "RECURSIVE" in s], seen
        (count,) = [s for s in seen if "count(*)" in s]
        plan = " | ".join(r[3] for r in store.repo.backend._conn.execute("EXPLAIN QUERY PLAN " + count))
        assert "COVERING INDEX commits_first_parents" in plan, plan
        assert [await store.resolve(f"HEAD~{k}") for k in range(len(line))] == line
        with pytest.raises(errors.RevisionNotFound):
            await store.resolve(f"HEAD~{len(line)}")
        side = await store.branch("side", at="HEAD~10")  # commits of another line in the run
        await side.write("/side.md", "s\n")
        side.close()
        await store.write("/f0.md", "after\n")
        line = _first_parents(store)
        assert [await store.resolve(f"HEAD~{k}") for k in range(len(line))] == line
        assert [s for s in _statements(store, "HEAD~5") if "RECURSIVE" in s]  # the run is broken: walked
    finally:
        store.close()


async def test_a_schema_2_store_gets_the_index_when_opened_and_answers_the_same(tmp_path):
    folder = tmp_path / "s"
    store = await _history(folder, 30)
    line = _first_parents(store)
    store.close()
    db = folder_store_file(str(folder))
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("DROP INDEX commits_first_parents")  # what a store made before schema 3 holds
    conn.execute("PRAGMA user_version=2")
    conn.close()

    store = VersionedStore(folder)  # migrates
    try:
        conn = store.repo.backend._conn
        assert conn.execute("PRAGMA user_version").fetchone()[0] == len(sqlite_backend.MIGRATIONS) == 3
        assert conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'commits_first_parents'").fetchone()
        assert "COVERING INDEX commits_first_parents" in _walk_plan(store, "HEAD~20")
        assert [await store.resolve(f"HEAD~{k}") for k in range(len(line))] == line
        await store.write("/after.md", "x\n")  # the index follows new commits
        assert await store.resolve(f"HEAD~{len(line)}") == line[-1]
        assert await store.fsck() == []
    finally:
        store.close()


@pytest.mark.slow  # 1.3 s in the quick loop: builds a 2,000-commit store
async def test_a_file_s_log_sets_off_a_collection_per_700_commits_not_per_100(tmp_path):
    """Young-generation collections while ``log(path)`` builds a cold log (CPython runs
    one per 700 tracked objects allocated and still alive): with one object kept per
    commit, about n / 700. Before, the log held each change row, its links, its record
    pair, its paths' rows and list as well, alive together: about n / 100."""
    n = 2000
    store = VersionedStore(tmp_path / "s")
    try:
        for i in range(n):
            await store.write("/memory/working.md", f"version {i}\n")
        repo = Repository(store.repo.backend)
        start = repo.path_start("/memory/working.md", repo.head("main"), "main")
        collections = []

        def count(phase: str, info: dict) -> None:
            if phase == "start":
                collections.append(info["generation"])

        gc.collect()
        gc.callbacks.append(count)
        try:
            log = repo.path_log("/memory/working.md", start)
        finally:
            gc.callbacks.remove(count)
        assert len(log) == n
        assert gc.get_threshold()[0] == 700
        assert len(collections) <= n // 700 + 2, collections
        assert [c.paths for c in log] == [("/memory/working.md",)] * n
    finally:
        store.close()


PATHS = ["/a.md", "/d/b.md", "/d/e/c.md"]
steps = step_lists(PATHS, ["alpha", "bravo"], max_lines=3)


@pytest.mark.slow  # hypothesis, a fresh store per example
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(before=steps, ours=steps, theirs=steps, after=steps, merge=st.booleans(), together=st.lists(st.sampled_from(PATHS), max_size=3))
async def test_the_streamed_log_of_files_and_folders_is_the_per_link_log(before, ours, theirs, after, merge, together):
    """The one-pass log (rows newest first, several rows for a commit that changed
    several files) against the per-link route, for files and folders, with commits
    of several files (a transaction, deleting /d, a merge) and branches."""
    async with FreshStore() as store:
        await store.write("/a.md", "seed\n")
        await apply_steps(store, before)
        if together:
            async with store.transaction(message="several files"):
                for i, path in enumerate(together):
                    await store.write(path, f"together {i}\n")
        side = await store.branch("side")
        try:
            await apply_steps(side, theirs)
            await apply_steps(store, ours)
            if merge:
                await store.merge("side", strategy="theirs")
            await apply_steps(store, after)
        finally:
            side.close()
        for path, key in [(p, p) for p in PATHS] + [("/d", "/d/"), ("/d/e", "/d/e/")]:
            got = [c.to_json() for c in await store.log(path)]
            repo = Repository(store.repo.backend)  # the per-link route: one change row at a time
            start = repo.path_start(key, repo.head("main"), "main")
            expected = repo.path_log(key, start, limit=10**6) if start is not None else []
            if key.endswith("/") and (start is None or repo.path_start(path, repo.head("main"), "main") is not None):
                continue  # a folder with no key of its own, or once a file: the filtered whole log answers
            assert got == [c.to_json() for c in expected], path
            whole = {c.id: c.paths for c in repo.log(repo.head("main"))}
            assert all(tuple(c["paths"]) == whole[c["id"]] for c in got), path  # every file each commit changed
