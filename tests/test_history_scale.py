"""History queries that do not grow with the store (issue 14).

Speed is counted as work, never timed: rows and objects read through a
counting wrapper around the backend. Each fast path is also checked against
a brute-force oracle over random histories (hypothesis).
"""

from __future__ import annotations

import os
import tempfile
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memrev import VersionedStore

pytestmark = pytest.mark.anyio

SETTINGS = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


class Counting:
    """Counts calls to a backend's methods (the backend is the only way to the data)."""

    def __init__(self, store: VersionedStore) -> None:
        self.backend = store.repo.backend
        self.calls: Counter[str] = Counter()
        self._saved: dict[str, object] = {}

    def __enter__(self) -> Counter[str]:
        for name in ("get_blob", "get_tree", "get_commit", "commit_at", "commits_at", "lineage_pieces"):
            original = getattr(self.backend, name)
            self._saved[name] = original

            def counted(*args, _name=name, _original=original):
                self.calls[_name] += 1
                out = _original(*args)
                if _name == "commits_at":
                    self.calls["commit rows"] += len(out)
                return out

            setattr(self.backend, name, counted)
        return self.calls

    def __exit__(self, *exc) -> None:
        for name in self._saved:
            delattr(self.backend, name)  # the class's method shows through again


class FreshStore:
    """A new store for one hypothesis example: a SQLite folder, or a memory:// store
    (the backend contract's defaults, e.g. ``change_rows``)."""

    def __init__(self, kind: str = "sqlite") -> None:
        self.kind = kind
        self.tmp = tempfile.TemporaryDirectory(prefix="memrev-scale-")

    async def __aenter__(self) -> VersionedStore:
        name = os.path.basename(self.tmp.name)
        where = f"memory://{name}" if self.kind == "memory" else os.path.join(self.tmp.name, "store")
        self.store = VersionedStore(where)
        return self.store

    async def __aexit__(self, *exc) -> None:
        self.store.close()
        if self.kind == "memory":
            from memrev.backends import memory

            memory.drop(os.path.basename(self.tmp.name))
        self.tmp.cleanup()


# --------------------------------------------------------------------------
# list() inside a transaction
# --------------------------------------------------------------------------


async def test_list_in_a_transaction_reads_no_file_and_one_directory(tmp_path):
    store = VersionedStore(tmp_path / "s")
    try:
        async with store.transaction("many files"):
            for d in range(30):
                for f in range(10):
                    await store.write(f"/d{d}/f{f}.md", f"{d}/{f}")
        store.repo.forget()  # nothing cached: every node listed below is read
        async with store.transaction("one more"):
            await store.write("/new.md", "n")
            await store.delete("/d3")
            with Counting(store) as calls:
                names = await store.list("/")
        assert names == sorted([f"d{d}/" for d in range(30) if d != 3] + ["new.md"])
        assert calls["get_blob"] == 0 and calls["lineage_pieces"] == 0
        # the root node alone: a walk of the store would read all 31 directory nodes
        assert calls["get_tree"] <= 1, calls
    finally:
        store.close()


async def test_list_in_a_transaction_walks_only_a_directory_it_deleted_inside(tmp_path):
    store = VersionedStore(tmp_path / "s")
    try:
        async with store.transaction("files"):
            for f in range(5):
                await store.write(f"/a/f{f}", "x")
                await store.write(f"/b/f{f}", "x")
        async with store.transaction("empty /a file by file, touch /b"):
            for f in range(5):
                await store.delete(f"/a/f{f}")
            await store.delete("/b/f0")
            assert await store.list("/") == ["b/"]
            assert await store.list("/a") == []
            assert await store.list("/b") == [f"f{f}" for f in range(1, 5)]
            await store.write("/a/back", "y")
            assert await store.list("/") == ["a/", "b/"]
        assert await store.list("/") == ["a/", "b/"]
    finally:
        store.close()


PATHS = ["/a", "/a/x", "/a/y/z", "/b/c", "/b/d/e", "/b/d/f", "/c", "/c/d"]
DIRS = ["/", "/a", "/a/y", "/b", "/b/d", "/c", "/nothing"]
file_op = st.one_of(
    st.tuples(st.just("write"), st.sampled_from(PATHS), st.sampled_from(["1", "2"])),
    st.tuples(st.just("delete"), st.sampled_from([*PATHS, "/b/d", "/", "/a/y"])),
)


async def _apply(store: VersionedStore, steps) -> None:
    for name, path, *rest in steps:
        if name == "write":
            await store.write(path, rest[0])
        else:
            await store.delete(path)


@pytest.mark.slow  # measured >= 0.3 s: kept out of the quick loop
@pytest.mark.parametrize("kind", ["sqlite", "memory"])
@SETTINGS
@given(before=st.lists(file_op, max_size=8), staged=st.lists(file_op, min_size=1, max_size=6))
async def test_list_in_a_transaction_equals_the_listing_after_commit(kind, before, staged):
    async with FreshStore(kind) as store:
        await _apply(store, before)
        async with store.transaction("staged"):
            await _apply(store, staged)
            inside = {d: await store.list(d) for d in DIRS}
        after = {d: await store.list(d) for d in DIRS}
        assert inside == after


# --------------------------------------------------------------------------
# blame: incremental walk equals the whole-graph computation
# --------------------------------------------------------------------------

version_lines = st.lists(st.sampled_from(["a\n", "b\n", "c\n", "d\n", "e\n"]), max_size=8)


@st.composite
def version_graphs(draw):
    """Versions 0..n of one file; each names up to two earlier versions as parents."""
    n = draw(st.integers(1, 12))
    versions = {}
    for key in range(n):
        parents = draw(st.lists(st.integers(0, key - 1), max_size=2, unique=True)) if key else []
        versions[key] = (draw(version_lines), parents)
    return versions


@pytest.mark.slow  # measured >= 0.3 s: kept out of the quick loop
@settings(max_examples=300, deadline=None)
@given(version_graphs())
def test_incremental_blame_equals_whole_graph_blame(versions):
    from memrev.core.blame import blame, blame_walk

    target = max(versions)
    reached = {}
    todo = [target]
    while todo:  # the versions the whole-graph blame is given: those reachable from the target
        key = todo.pop()
        if key not in reached:
            reached[key] = versions[key]
            todo += versions[key][1]
    read = Counter()

    def lines_of(key):
        read[key] += 1
        return versions[key][0]

    assert blame_walk(target, lines_of, lambda k: versions[k][1]) == blame(reached, target)
    assert set(read) <= set(reached)


# --------------------------------------------------------------------------
# log of a directory: the directory key's walk
# --------------------------------------------------------------------------


def _brute_dir_log(log, folder):
    """The oracle: every commit of the whole log that changed something under ``folder``."""
    return [c.id for c in log if any(p == folder or p.startswith(folder + "/") for p in c.paths)]


async def test_log_of_a_directory_reads_only_the_commits_it_returns(tmp_path):
    store = VersionedStore(tmp_path / "s")
    try:
        for i in range(300):
            folder = "/dir" if i % 30 == 0 else f"/other/o{i % 7}"
            await store.write(f"{folder}/f{i % 3}.md", f"v{i}")
        whole = await store.log()
        store.repo.forget()
        with Counting(store) as calls:
            ids = [c.id for c in await store.log("/dir")]
        assert ids == _brute_dir_log(whole, "/dir") and len(ids) == 10
        # the 10 commits it returns (one batch read), not the 300 of the store
        assert calls["get_commit"] + calls["commit_at"] <= 2, calls
        assert calls["commits_at"] <= 1, calls
        store.repo.forget()
        with Counting(store) as calls:
            page = await store.log_page("/dir", limit=4)
        assert [c.id for c in page.commits] == ids[:4]
        assert calls["get_commit"] + calls["commit_at"] + calls["commits_at"] <= 6, calls
        rest = await store.log_page("/dir", limit=100, cursor=page.cursor)
        assert [c.id for c in rest.commits] == ids[4:] and rest.cursor is None
    finally:
        store.close()


dir_op = st.one_of(
    st.tuples(st.just("write"), st.sampled_from(PATHS), st.sampled_from(["1", "2", "3"])),
    st.tuples(st.just("delete"), st.sampled_from([*PATHS, "/b/d", "/a/y"])),
)
FOLDERS = ["/a", "/a/y", "/b", "/b/d", "/c"]


@pytest.mark.slow  # measured >= 0.3 s: kept out of the quick loop
@pytest.mark.parametrize("kind", ["sqlite", "memory"])
@SETTINGS
@given(steps=st.lists(dir_op, min_size=1, max_size=14), limit=st.integers(1, 4))
async def test_log_of_a_directory_equals_the_filtered_whole_log(kind, steps, limit):
    async with FreshStore(kind) as store:
        await _apply(store, steps)
        whole = await store.log()
        for folder in FOLDERS:
            want = _brute_dir_log(whole, folder)
            if any(folder in c.paths for c in whole):
                continue  # once a file: log(folder) may be the file's log (tests/test_history.py)
            assert [c.id for c in await store.log(folder)] == want, folder
            assert [c.id for c in await store.log(folder, limit=limit)] == want[:limit], folder
            paged, cursor = [], None
            while True:
                page = await store.log_page(folder, limit=limit, cursor=cursor)
                paged += [c.id for c in page.commits]
                if page.cursor is None:
                    break
                cursor = page.cursor
            assert paged == want, folder


async def test_blame_reads_each_version_once_and_stops_when_every_line_is_placed(tmp_path):
    store = VersionedStore(tmp_path / "s")
    try:
        for i in range(40):
            await store.write("/notes.md", "".join(f"line {j} v{i}\n" for j in range(i % 5 + 1)) + "kept\n")
        await store.write("/notes.md", "all new\nkept\n")  # only "kept" needs older versions
        store.repo.forget()
        with Counting(store) as calls:
            lines = await store.blame("/notes.md")
        log = await store.log("/notes.md")
        assert [b.commit.id for b in lines] == [log[0].id, log[-1].id]
        # "kept" came with the first version: every version is read, each once
        # (41 commit rows, and the 2 commits named in the answer)
        assert calls["commit rows"] == 41 + 2 and calls["commit_at"] == 0, calls
        assert calls["get_commit"] <= 1, calls  # the revision blamed at (HEAD), looked up by id
        assert 41 <= calls["get_tree"] <= 41 * 2, calls  # one or two tree nodes per version read

        await store.write("/notes.md", "rewritten\n")  # nothing survives: no older version is read
        store.repo.forget()
        with Counting(store) as calls:
            lines = await store.blame("/notes.md")
        assert [b.text for b in lines] == ["rewritten"]
        assert calls["get_tree"] <= 2 * 2, calls  # this version and the one it is compared with
    finally:
        store.close()


async def test_a_file_written_over_a_deleted_directory_does_not_bring_back_its_files(tmp_path):
    # found by the differential above: the transaction's view kept one entry per
    # path, so writing the file /a after deleting /a forgot that /a/ was deleted
    store = VersionedStore(tmp_path / "s")
    try:
        await store.write("/a/y/z", "1")
        async with store.transaction("x"):
            await store.delete("/a")
            await store.write("/a", "2")
            assert await store.read("/a/y/z") is None
            assert await store.list("/a") == [] and await store.exists("/a/y") is False
            assert await store.read("/a") == "2"
        assert await store.read("/a/y/z") is None and await store.list("/a") == []
    finally:
        store.close()


async def test_a_file_written_back_unchanged_under_a_deleted_directory_stays(tmp_path):
    # found by the differential above: the commit dropped /c/d, because writing it
    # back with its old content is no change, and deleting /c emptied /c/ first
    store = VersionedStore(tmp_path / "s")
    try:
        await store.write("/c/d", "1")
        await store.write("/c", "2")
        async with store.transaction("x"):
            await store.delete("/")
            await store.write("/c/d", "1")
        assert await store.list("/") == ["c/"] and await store.read("/c/d") == "1"
        assert await store.read("/c") is None
        assert (await store.log(limit=1))[0].paths == ("/c",)  # /c/d did not change
        assert await store.fsck() == []
    finally:
        store.close()


# --------------------------------------------------------------------------
# a store from before directory keys: migrated, then reindexed
# --------------------------------------------------------------------------


_TO_SCHEMA_1 = [  # what schema 1 held: no parent_seq, no stale table, no directory keys
    "DROP INDEX IF EXISTS commits_first_parents",  # SQLite's schema 3 (the column is in it)
    "ALTER TABLE commits DROP COLUMN parent_seq",
    "DROP TABLE stale",
    "DELETE FROM changes WHERE substr(path, length(path), 1) = '/'",
    "DELETE FROM head WHERE substr(path, length(path), 1) = '/'",
]


def _as_schema_1(location: str) -> None:
    if location.startswith("postgresql:"):
        import psycopg

        with psycopg.connect(location, autocommit=True) as conn:
            for sql in [*_TO_SCHEMA_1, "UPDATE memrev_schema SET version = 1"]:
                conn.execute(sql)
        return
    import sqlite3

    c = sqlite3.connect(os.path.join(location, "memrev.db"), isolation_level=None)
    for sql in [*_TO_SCHEMA_1, "PRAGMA user_version=1"]:
        c.execute(sql)
    c.close()


@pytest.fixture(params=["sqlite", "postgresql"])
def any_location(request, tmp_path):
    if request.param == "sqlite":
        yield str(tmp_path / "s")
        return
    server = request.getfixturevalue("pg_server")
    url = server.create_database("scale")
    yield url
    server.drop_database(url)


async def test_an_older_store_is_migrated_and_reads_right_before_and_after_reindex(any_location):
    folder = any_location
    store = VersionedStore(folder)
    for i in range(12):
        await store.write(f"/d{i % 2}/f{i % 3}", f"v{i}")
    whole = [c.id for c in await store.log()]
    store.close()
    _as_schema_1(folder)

    store = VersionedStore(folder)  # migrates: directory keys are stale
    try:
        assert store.repo.directory_keys_stale()
        assert await store.fsck() == []
        for i in range(12, 16):  # new commits get their keys; older ones do not yet
            await store.write(f"/d{i % 2}/f{i % 3}", f"v{i}")
        whole = [c.id for c in await store.log()]
        want = {d: [c.id for c in await store.log() if any(p.startswith(d + "/") for p in c.paths)] for d in ("/d0", "/d1")}
        assert {d: [c.id for c in await store.log(d)] for d in want} == want  # the filtered whole log meanwhile
        assert await store.resolve("HEAD~15") == whole[15]  # parent_seq filled by the migration
        assert await store.fsck() == []
        await store.reindex()
        assert not store.repo.directory_keys_stale()
        store.repo.forget()
        with Counting(store) as calls:
            assert [c.id for c in await store.log("/d0")] == want["/d0"]
        assert calls["get_commit"] <= 1, calls  # the directory key's walk, not the whole log
        assert {d: [c.id for c in (await store.log_page(d, limit=100)).commits] for d in want} == want
        assert await store.fsck() == []
    finally:
        store.close()


async def test_fsck_finds_a_missing_or_wrong_directory_key(tmp_path):
    import sqlite3

    store = VersionedStore(tmp_path / "s")
    try:
        for i in range(4):
            await store.write(f"/a/b/f{i % 2}", f"v{i}")
        assert await store.fsck() == []
        db = sqlite3.connect(tmp_path / "s" / "memrev.db", isolation_level=None)
        db.execute("UPDATE changes SET prev = NULL WHERE path = '/a/b/' AND seq = 3")
        assert any("links are wrong" in p for p in await store.fsck())
        db.execute("DELETE FROM changes WHERE path = '/a/' AND seq = 2")
        assert any("change index of commit" in p for p in await store.fsck())
        db.close()
        await store.reindex()
        assert await store.fsck() == []
    finally:
        store.close()
