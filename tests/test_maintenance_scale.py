"""Maintenance that stays flat as the store grows (issue 14): fsck reads each
object once with a constant number of statements per object, its per-path link
check agrees with the history walk it replaced, and an open store's WAL stays
bounded. Work is counted (statements, rows), never timed.
"""

from __future__ import annotations

import os
import random
import sqlite3
import tracemalloc
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import memrev.repo.reading
from memrev.backends import open_backend
from memrev.history import create_branch
from memrev.maintenance.fsck import fsck
from memrev.repo.ops import Write
from memrev.repo.repository import Repository, branch_ref


class CountingBackend:
    """A real backend whose calls are counted by method name (nothing is faked)."""

    def __init__(self, backend) -> None:
        self._backend = backend
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str):
        target = getattr(self._backend, name)
        if not callable(target):
            return target

        def counted(*args, **kwargs):
            self.calls[name] += 1
            return target(*args, **kwargs)

        return counted


def _build(folder: Path, commits: int, files: int = 20) -> Repository:
    """``commits`` commits, each rewriting one of ``files`` files in 4 directories."""
    repo = Repository(open_backend(str(folder)))
    rng = random.Random(7)
    for i in range(commits):
        f = i % files
        body = "".join(f"line {rng.randrange(10**6)}\n" for _ in range(30)).encode()
        repo.commit("main", [Write(f"/d{f % 4}/f{f}.md", body)], author="t")
    return repo


def _objects(folder: Path) -> int:
    with sqlite3.connect(folder / "memrev.db") as c:
        return sum(c.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("blobs", "trees", "commits"))


def _fsck_calls(folder: Path) -> tuple[Counter[str], int]:
    counting = CountingBackend(open_backend(str(folder), create=False))
    try:
        assert fsck(Repository(counting)) == []
    finally:
        counting.close()
    return counting.calls, _objects(folder)


def test_fsck_statements_per_object_do_not_grow_with_the_store(tmp_path: Path):
    """The old fsck walked history once per change row (quadratic) and read every
    tree's children with a point query each; now each table is scanned in pages
    and a point query happens at most about once per object."""
    small_dir, large_dir = tmp_path / "small", tmp_path / "large"
    _build(small_dir, 60).backend.close()
    _build(large_dir, 240).backend.close()
    small, n_small = _fsck_calls(small_dir)
    large, n_large = _fsck_calls(large_dir)
    per_object = {name: (small[name] / n_small, large[name] / n_large) for name in small | large}
    total_small, total_large = sum(small.values()) / n_small, sum(large.values()) / n_large
    assert total_large <= total_small * 1.1 + 0.05, per_object
    assert total_large <= 2.0, per_object  # statements per object, all kinds together
    # History walks (one commit read per step) were the quadratic part: none are left.
    assert large["commit_at"] <= 3 and large["change_before"] == 0, per_object


# ------------------------------------------------------------ per-path links on branchy histories

PATHS = ["/a.md", "/d/b.md", "/d/c.md"]
step = st.one_of(
    st.tuples(st.just("write"), st.sampled_from(["main", "x", "y"]), st.sampled_from(PATHS)),
    st.tuples(st.just("merge"), st.sampled_from(["main", "x", "y"]), st.sampled_from(["main", "x", "y"])),
)


def _history(folder: Path, steps) -> Repository:
    repo = Repository(open_backend(str(folder)))
    n = 0

    def write(branch: str, path: str, merge_parent: bytes | None = None) -> None:
        nonlocal n
        n += 1
        repo.commit(branch, [Write(path, f"v{n}\n".encode())], author="t", merge_parent=merge_parent)

    write("main", "/a.md")
    for name in ("x", "y"):
        create_branch(repo, name, repo.backend.get_ref(branch_ref("main")))
    for kind, branch, arg in steps:
        if kind == "write":
            write(branch, arg)
        else:
            other = repo.backend.get_ref(branch_ref(arg))
            if other != repo.backend.get_ref(branch_ref(branch)):
                write(branch, PATHS[n % len(PATHS)], other)
    return repo


def _links_by_history_walk(repo: Repository) -> list[tuple[str, int]]:
    """One ``last_change`` history walk per change row, as reindex writes them: the oracle.

    Every second link is held to it, an ordinary commit's too (None): one there put another
    branch's change into ``log(path)`` (D28)."""
    wrong = []
    for path, seq, prev, prev2 in repo.backend.iter_changes():
        parents = repo.commit_data(repo.backend.commit_at(seq)[0])[1].parents
        want = repo.last_change(path, parents[0]) if parents else None
        want2 = repo.last_change(path, parents[1]) if len(parents) > 1 else None
        if (prev, prev2) != (want, want2):
            wrong.append((path, seq))
    return wrong


@pytest.mark.slow  # measured >= 0.3 s: kept out of the quick loop
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(step, min_size=1, max_size=14), pick=st.randoms(use_true_random=False))
def test_link_check_agrees_with_the_history_walk_on_branches_and_merges(tmp_path_factory, steps, pick):
    folder = tmp_path_factory.mktemp("links")
    repo = _history(folder, steps)
    try:
        assert _links_by_history_walk(repo) == []
        assert fsck(repo) == []
        rows = list(repo.backend.iter_changes())
        path, seq, _prev, _prev2 = pick.choice(rows)
        column = pick.choice(["prev", "prev2"])
        value = pick.choice([None, *sorted({r[1] for r in rows if r[1] < seq})])
        repo.backend._conn.execute(f"UPDATE changes SET {column}=? WHERE path=? AND seq=?", (value, path, seq))
        damaged = _links_by_history_walk(repo) != []
        problems = fsck(repo)
        assert damaged == any("per-path history links are wrong" in p for p in problems), (column, value, problems)
    finally:
        repo.backend.close()


# ------------------------------------------------------------ the WAL of an open store


def test_an_open_store_keeps_its_wal_a_few_mb(tmp_path: Path):
    """W1's 500 writes left a 22 MB WAL beside a 0.35 MB database while the store
    was open (checkpoints every 8,000 pages); it now stays under 5 MB throughout."""
    folder = tmp_path / "s"
    repo = Repository(open_backend(str(folder)))
    rng = random.Random(3)
    lines = [f"{rng.random():.30f}\n" for _ in range(60)]
    largest = 0
    try:
        for _ in range(500):
            for _ in range(3):
                lines[rng.randrange(len(lines))] = f"{rng.random():.30f}\n"
            repo.commit("main", [Write("/memory/working.md", "".join(lines).encode())], author="t")
            largest = max(largest, os.path.getsize(f"{folder / 'memrev.db'}-wal"))
        assert largest <= 5 << 20, f"the WAL reached {largest / 1e6:.1f} MB"
    finally:
        repo.backend.close()


# ------------------------------------------------------------ memory


def _peak_reading_every_commit(folder: Path, commits: int) -> int:
    """tracemalloc peak while every commit's tree is walked: each commit rewrites one
    of 400 files in two directories, so directories keep their size and only history grows."""
    repo = Repository(open_backend(str(folder)))
    try:
        for i in range(commits):
            repo.commit("main", [Write(f"/d{i % 2}/f{i % 400:03d}.txt", f"{i}\n".encode())], author="t")
        ids = [oid for _seq, oid, _data in repo.backend.iter_commits()]
        repo.forget()
        tracemalloc.start()
        try:
            for oid in ids:
                repo.list_at(oid, "/d0")
                repo.entry_at(oid, "/d1/f001.txt")
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    finally:
        repo.backend.close()


@pytest.mark.slow  # measured >= 0.3 s: kept out of the quick loop
def test_tree_cache_memory_does_not_grow_with_history(tmp_path: Path, monkeypatch):
    """Decoded trees and commits were cached by count (50,000 of each: ~160 MB of
    thousand-file directories, ~27 MB of commits) and listings by name count; by
    size they stay within their budgets however long the history. The budgets are
    made small here so that a short history exceeds them."""
    for budget in ("TREE_CACHE_BYTES", "COMMIT_CACHE_BYTES", "LISTING_CACHE_BYTES"):
        monkeypatch.setattr(memrev.repo.reading, budget, 256 << 10)  # where Reading reads them
    short = _peak_reading_every_commit(tmp_path / "short", 600)
    long = _peak_reading_every_commit(tmp_path / "long", 2400)
    assert long <= short * 1.25, (short, long)


def test_gc_statements_per_object_do_not_grow_with_the_store(tmp_path: Path):
    """gc reads each reachable object once (issue 14 asked for gc linear in the store)."""
    from memrev.maintenance.gc import gc

    per_object = []
    for name, commits in (("small", 60), ("large", 240)):
        _build(tmp_path / name, commits).backend.close()
        counting = CountingBackend(open_backend(str(tmp_path / name), create=False))
        try:
            gc(Repository(counting), keep_seconds=0)
        finally:
            counting.close()
        per_object.append(sum(counting.calls.values()) / _objects(tmp_path / name))
    assert per_object[1] <= per_object[0] * 1.1 + 0.05, per_object
    assert per_object[1] <= 1.5, per_object
