"""gc linear in the store (issue 14): each object read once, in batches.

gc used to read every commit, tree and blob row with a statement of its own
(and copy the keep set into a temporary table in hash order), so a
100,000-commit store took ~700,000 statements. Now commits come from one
newest-first scan and trees and blob bases a level at a time, ``BATCH`` ids
per statement; SQLite deletes by scanning each table's keys a page at a
time. These tests count work (statements, ids read), never time; the timings
are in bench/run.py (``hgc``).

Correctness is checked against a point-by-point walk written here (the old
algorithm), with ``BATCH`` made small so that small stores take many batches
and levels, on SQLite, the in-memory backend and PostgreSQL.
"""

from __future__ import annotations

import random
import tracemalloc
from pathlib import Path

import pytest

from memrev.backends import open_backend
from memrev.core.objects import EMPTY_TREE_ID
from memrev.errors import IntegrityError
from memrev.history import create_branch, delete_branch
from memrev.maintenance import gc as gc_mod
from memrev.maintenance.fsck import fsck
from memrev.repo.ops import Append, Write
from memrev.repo.repository import Repository


def _build(location: str, commits: int) -> Repository:
    """``commits`` commits on main over spread-out files, an append run, rewrites
    (deltas) and a merge, plus a branch that is then deleted (its objects are garbage
    once its safety window is over)."""
    repo = Repository(open_backend(location))
    rng = random.Random(commits)
    for i in range(commits):
        if i % 3 == 0:
            op = Append("/log/run.jsonl", f'{{"turn": {i}}}\n'.encode())
        else:
            body = "".join(f"line {rng.randrange(10**6)}\n" for _ in range(20)).encode()
            op = Write(f"/d{i % 7}/s{i % 5}/f{i % 40}.md", body)
        repo.commit("main", [op], author="t")
    main = repo.head("main")
    create_branch(repo, "side", main)
    for i in range(6):
        repo.commit("side", [Write(f"/side/f{i}.md", f"side {i}\n".encode() * 30)], author="t")
    repo.commit("main", [Write("/merged.md", b"merged\n")], author="t", merge_parent=repo.head("side"))
    create_branch(repo, "scratch", repo.head("main"))
    for i in range(8):
        repo.commit("scratch", [Write(f"/scratch/only{i}.md", f"only on scratch {i}\n".encode() * 40)], author="t")
    delete_branch(repo, "scratch")
    return repo


def _point_walk(repo: Repository, tips: list[bytes]) -> tuple[dict[bytes, int], set[bytes], dict[bytes, bytes | None]]:
    """What is reachable, one read per object through the repository (gc's walk before issue 14)."""
    commits: dict[bytes, int] = {}
    todo = list(tips)
    roots = set()
    while todo:
        c = todo.pop()
        if c not in commits:
            seq, data = repo.commit_data(c)
            commits[c] = seq
            roots.add(data.tree)
            todo.extend(data.parents)
    trees: set[bytes] = set()
    blobs: dict[bytes, bytes | None] = {}
    stack = list(roots)
    while stack:
        t = stack.pop()
        if t in trees or t == EMPTY_TREE_ID:
            continue
        trees.add(t)
        kind, body = repo.tree(t)
        if kind == "H":
            stack.extend(body[1].values())
            continue
        for entry in body.values():
            if entry.kind == "d":
                stack.append(entry.oid)
            else:
                oid: bytes | None = entry.oid
                while oid is not None and oid not in blobs:
                    blobs[oid] = repo.blobs.row(oid).base
                    oid = blobs[oid]
    return commits, trees, blobs


def _stored(repo: Repository) -> tuple[set[bytes], set[bytes], set[bytes]]:
    b = repo.backend
    return {oid for _s, oid, _d in b.iter_commits()}, {oid for oid, _d in b.iter_trees()}, set(b.iter_blob_ids())


@pytest.fixture(params=["sqlite", "memory", pytest.param("postgres", marks=pytest.mark.slow)])  # slow: >= 0.3 s
def location(request, tmp_path):
    if request.param == "sqlite":
        yield str(tmp_path / "store")
    elif request.param == "memory":
        from memrev.backends import memory

        name = f"gc-scale-{tmp_path.name}-{id(tmp_path)}"
        yield f"memory://{name}"
        memory.drop(name)
    else:
        yield request.getfixturevalue("pg_url")


class _ShuffledScan:
    """A backend whose newest-first scan is out of order: parents met before children."""

    def __init__(self, inner) -> None:
        self._inner = inner

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def iter_commits_newest_first(self):
        rows = list(self._inner.iter_commits_newest_first())
        random.Random(3).shuffle(rows)
        return iter(rows)


@pytest.mark.parametrize("shuffled", [False, True])
def test_batched_walk_finds_what_a_point_by_point_walk_finds(location, monkeypatch, shuffled):
    monkeypatch.setattr(gc_mod, "BATCH", 7)  # many batches and levels in a small store
    repo = _build(location, 90)
    try:
        tips = list(repo.backend.list_refs("refs/").values())
        expected = _point_walk(repo, tips)
        repo.forget()
        if shuffled:
            repo.backend = _ShuffledScan(repo.backend)
        assert gc_mod.reachable_objects(repo, tips) == expected
    finally:
        repo.backend.close()


def test_gc_keeps_every_reachable_object_and_removes_the_rest(location, monkeypatch):
    monkeypatch.setattr(gc_mod, "BATCH", 7)
    repo = _build(location, 90)
    try:
        before = _stored(repo)
        kept_refs = [t for n, t in repo.backend.list_refs("refs/").items() if not n.startswith("refs/deleted/")]
        commits, trees, blobs = _point_walk(repo, kept_refs)
        assert len(before[0]) > len(commits)  # the deleted branch left garbage of every kind
        assert len(before[1]) > len(trees) and len(before[2]) > len(blobs)
        removed = gc_mod.gc(repo, keep_seconds=0)
        assert _stored(repo) == (set(commits), trees, set(blobs))
        assert removed == {
            "commits": len(before[0]) - len(commits),
            "trees": len(before[1]) - len(trees),
            "blobs": len(before[2]) - len(blobs),
            "refs": 1,
        }
        assert fsck(repo) == []
        assert repo.content(repo.entry_at(repo.head("main"), "/merged.md").oid) == b"merged\n"
        assert gc_mod.gc(repo, keep_seconds=0) == {"commits": 0, "trees": 0, "blobs": 0, "refs": 0}
    finally:
        repo.backend.close()


# ------------------------------------------------------------ work counted


def _gc_work(folder: Path, commits: int) -> tuple[int, int, int]:
    """(SQL statements gc ran, ids it asked trees and blob bases for, objects stored)."""
    _build(str(folder), commits).backend.close()
    repo = Repository(open_backend(str(folder), create=False))
    statements = 0
    asked: list[bytes] = []

    def count(_sql: str) -> None:
        nonlocal statements
        statements += 1

    for name in ("get_trees", "blob_bases"):  # the batch reads; each id must be asked for once
        read = getattr(repo.backend, name, None)
        if read is None:
            continue
        setattr(repo.backend, name, lambda ids, read=read: asked.extend(ids) or read(ids))
    try:
        objects = sum(len(s) for s in _stored(repo))
        repo.backend._conn.set_trace_callback(count)
        gc_mod.gc(repo, keep_seconds=0)
        repo.backend._conn.set_trace_callback(None)
    finally:
        repo.backend.close()
    assert len(asked) == len(set(asked)), "an object was read twice"
    return statements, len(asked), objects


@pytest.mark.slow  # builds two stores (1,350 commits)
def test_gc_reads_each_object_once_in_batches(tmp_path: Path):
    """Statements grow with objects / BATCH (before: one or more per object). The
    append run's bases form a chain, one level (one statement) per piece; the
    spread-out files' objects are read BATCH at a time."""
    small = _gc_work(tmp_path / "small", 150)
    large = _gc_work(tmp_path / "large", 1200)
    assert large[2] >= 6 * small[2]
    assert large[0] <= large[2] / 4, large  # before: > 1 statement per object
    assert large[0] - small[0] <= (large[2] - small[2]) / 4, (small, large)


@pytest.mark.slow  # builds a 1,500-commit store
def test_gc_statements_per_spread_object_are_few(tmp_path: Path):
    """Without an append run (whose pieces are read one level each), a store of
    spread-out files is read in a few statements per BATCH objects."""
    repo = Repository(open_backend(str(tmp_path / "s")))
    for i in range(1500):
        repo.commit("main", [Write(f"/d{i % 30}/s{i % 11}/f{i}.md", f"{i}\n".encode())], author="t")
    objects = sum(len(s) for s in _stored(repo))
    statements = 0

    def count(_sql: str) -> None:
        nonlocal statements
        statements += 1

    try:
        repo.forget()
        repo.backend._conn.set_trace_callback(count)
        gc_mod.gc(repo)
        repo.backend._conn.set_trace_callback(None)
    finally:
        repo.backend.close()
    assert statements <= 30 + 10 * objects / 500, (statements, objects)  # 500: gc.BATCH


def _peak_per_object(folder: Path, commits: int) -> float:
    _build(str(folder), commits).backend.close()
    repo = Repository(open_backend(str(folder), create=False))
    try:
        objects = sum(len(s) for s in _stored(repo))
        tracemalloc.start()
        try:
            gc_mod.gc(repo, keep_seconds=0)
            return tracemalloc.get_traced_memory()[1] / objects
        finally:
            tracemalloc.stop()
    finally:
        repo.backend.close()


@pytest.mark.slow  # builds two stores of a few hundred commits
def test_gc_memory_per_object_does_not_grow_with_the_store(tmp_path: Path):
    """gc holds the reachable ids (a few hundred bytes each) and one batch of rows:
    no cache filled and flushed, no copy of every id for a statement. Peak memory
    per stored object stays the same as the store grows 4x."""
    small = _peak_per_object(tmp_path / "small", 300)
    large = _peak_per_object(tmp_path / "large", 1200)
    assert large <= small * 1.15, (small, large)
    assert large <= 600, large


# ------------------------------------------------------------ damage stops gc


def _one_tree_rewritten(folder: Path, make_bad) -> tuple[Repository, tuple]:
    repo = _build(str(folder), 30)
    before = _stored(repo)
    root = repo.root(repo.head("main"))
    (data,) = repo.backend.get_trees([root]).values()
    repo.backend._conn.execute("UPDATE trees SET data = ? WHERE id = ?", (make_bad(data), root))
    repo.backend._conn.commit()
    repo.forget()
    return repo, before


@pytest.mark.parametrize(
    "make_bad, error",
    [
        (lambda data: data[:-3], "does not match its hash"),  # damaged bytes
        (lambda data: data + b"!", "does not match its hash"),
    ],
)
def test_gc_refuses_a_damaged_tree_and_deletes_nothing(tmp_path: Path, make_bad, error):
    repo, before = _one_tree_rewritten(tmp_path / "s", make_bad)
    try:
        with pytest.raises(IntegrityError, match=error):
            gc_mod.gc(repo, keep_seconds=0)
        assert _stored(repo) == before
    finally:
        repo.backend.close()


def test_tree_children_refuses_malformed_trees():
    """Every child id is read whole or the tree is refused: a malformed tree whose hash
    matches (a store filled by hand) must not hide a subtree from gc's walk."""
    from memrev.core.objects import Entry, encode_leaf, encode_split, tree_children

    leaf = encode_leaf({("a.md", "f"): Entry("f", b"\x01" * 20, 5), ("dir", "d"): Entry("d", b"\x02" * 20, 0)})
    split = encode_split(1, {3: b"\x03" * 20, 9: b"\x04" * 20})
    assert tree_children(leaf) == ([b"\x02" * 20], [b"\x01" * 20])
    assert tree_children(split) == ([b"\x03" * 20, b"\x04" * 20], [])
    for data in (leaf, split):
        for cut in range(1, len(data)):
            try:
                subtrees, blobs = tree_children(data[:cut])
            except ValueError:
                continue
            assert all(len(oid) == 20 for oid in subtrees + blobs), cut
    with pytest.raises(ValueError):
        tree_children(b"X" + leaf[1:])
