"""Cold history of one file (issue 14): ``log(path)``, ``history(path)`` and an old
version's read, first call on a fresh handle.

The tests count work, not time: SQL statements per call (the same for 10 and
for 150 versions), hash checks and decodes per commit record (each record
checked once when read, decoded once when a field is first read), one query
per delta chain. The fast routes must give exactly what the per-link route
gives (hypothesis, over histories with branches, merges and deletes), and
damage must still be an ``IntegrityError``.
"""

from __future__ import annotations

import contextlib
import pickle
import sqlite3

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import memrev
import memrev.repo.commit
import memrev.repo.model
import memrev.repo.pathlog
import memrev.repo.reading
from helpers import FreshStore, apply_steps, step_lists
from memrev import VersionedStore
from memrev.backends import folder_store_file
from memrev.repo.repository import Repository

pytestmark = pytest.mark.anyio

PATH = "/memory/working.md"


def version(i: int) -> str:
    """Version ``i`` of a 40-line file: one line in the middle changes, so it is stored as a delta."""
    lines = [f"line {n}: the agent's working memory, unchanged text\n" for n in range(40)]
    lines[20] = f"line 20: revision {i}\n"
    return "".join(lines)


async def build(folder, n: int) -> VersionedStore:
    """``n`` versions of PATH, with another file written in between (its commits are not PATH's)."""
    store = VersionedStore(folder)
    for i in range(n):
        await store.write(PATH, version(i))
        if i % 3 == 0:
            await store.write("/notes/other.md", f"note {i}\n")
    return store


@contextlib.contextmanager
def statements(store: VersionedStore):
    """The SQL statements the store's SQLite connection runs inside the block."""
    conn = store._repo.backend._conn
    seen: list[str] = []
    conn.set_trace_callback(seen.append)
    try:
        yield seen
    finally:
        conn.set_trace_callback(None)


def cold(store: VersionedStore) -> Repository:
    """A repository with empty caches on the store's connection (a fresh handle, as the first call sees it)."""
    return Repository(store._repo.backend)


def start_of(repo: Repository, path: str = PATH) -> int:
    return repo.path_start(path, repo.head("main"), "main")


class Counting:
    """Wraps a function the repository's modules call and counts its calls (from all of them)."""

    MODULES = (memrev.repo.model, memrev.repo.reading, memrev.repo.pathlog, memrev.repo.commit)

    def __init__(self, monkeypatch, name: str) -> None:
        self.calls = 0
        users = [m for m in self.MODULES if hasattr(m, name)]
        assert users, name
        inner = getattr(users[0], name)

        def counted(*args):
            self.calls += 1
            return inner(*args)

        for module in users:
            monkeypatch.setattr(module, name, counted)


# --------------------------------------------------------------------------- work counted


@pytest.mark.parametrize("n", [10, 150])
async def test_a_file_s_whole_log_is_one_statement_however_long(tmp_path, n):
    store = await build(tmp_path / "s", n)
    try:
        repo = cold(store)
        start = start_of(repo)
        with statements(store) as seen:
            log = repo.path_log(PATH, start)
        assert len(log) == n
        assert len(seen) == 1, seen  # the path's changes with their commits and the other files those changed
        with statements(store) as seen:
            again = repo.path_log(PATH, start)
        assert again == log and all(a is b for a, b in zip(again, log, strict=True))
        assert len(seen) == 1, seen  # built once: only the path's changes are read again
    finally:
        store.close()


async def test_each_record_is_hash_checked_once_and_decoded_once_when_first_read(tmp_path, monkeypatch):
    n = 80
    store = await build(tmp_path / "s", n)
    try:
        repo = cold(store)
        hashed, decoded = Counting(monkeypatch, "commit_id"), Counting(monkeypatch, "commit_fields")
        log = repo.path_log(PATH, start_of(repo))
        assert (hashed.calls, decoded.calls) == (n, 0)
        shown = [c.to_json() for c in log]
        assert decoded.calls == n
        assert [c.to_json() for c in log] == shown and decoded.calls == n
        repo.path_log(PATH, start_of(repo))
        assert (hashed.calls, decoded.calls) == (n, n)
        with statements(store) as seen:  # what follows a log (history, filters) does not read the commits again
            for c in log:
                repo.commit_data(bytes.fromhex(c.id))
        assert seen == []
    finally:
        store.close()


@pytest.mark.parametrize("n", [10, 150])
async def test_history_reads_a_level_of_trees_per_statement(tmp_path, n):
    store = await build(tmp_path / "s", n)
    try:
        repo = cold(store)
        log = repo.path_log(PATH, start_of(repo))
        with statements(store) as seen:
            entries = repo.entries_at(log, PATH)
        assert len(seen) == 2, seen  # the root nodes, then the /memory nodes: not one per commit
        with statements(store) as seen:  # the checked nodes are kept: again, and an old read's walk, read none
            assert repo.entries_at(log, PATH) == entries
            repo.entry_at(bytes.fromhex(log[-1].id), PATH)
        assert seen == []
        old = cold(store)
        assert entries == [old.entry_at(bytes.fromhex(c.id), PATH) for c in log]
        assert [e.size for e in entries] == [len(version(i)) for i in reversed(range(n))]
    finally:
        store.close()


async def test_an_old_version_s_delta_chain_is_read_in_one_query(tmp_path):
    n = 30
    store = await build(tmp_path / "s", n)
    try:
        log = await store.log(PATH)
        target = log[3]  # three versions back: a delta on a delta on ...
        repo = cold(store)
        entry = repo.entry_at(bytes.fromhex(target.id), PATH)
        assert repo.blobs.row(entry.oid).depth >= 10
        with statements(store) as seen:
            data = repo.content(entry.oid)
        assert data.decode() == version(n - 4)
        blob_reads = [s for s in seen if "blobs" in s]
        assert len(blob_reads) == 1 and "RECURSIVE" in blob_reads[0], seen
        assert await store.read(PATH, rev=target.id) == version(n - 4)
    finally:
        store.close()


# --------------------------------------------------------------------------- same answers


async def test_a_lazily_decoded_commit_is_the_commit(tmp_path):
    """Equal to the commit built from its decoded record, read-only, unhashable, picklable."""
    store = await build(tmp_path / "s", 3)
    try:
        lazy = cold(store).path_log(PATH, start_of(store._repo))
        eager = [cold(store).commit_info(bytes.fromhex(c.id)) for c in lazy]
        assert lazy[0].stored_record() is not None and eager[0].stored_record() is None
        assert lazy == eager and [repr(c) for c in lazy] == [repr(c) for c in eager]
        assert [c.to_json() for c in lazy] == [c.to_json() for c in eager]
        assert pickle.loads(pickle.dumps(lazy[0])) == eager[0]
        assert lazy[0] != lazy[1]
        with pytest.raises(AttributeError):
            lazy[0].message = "changed"  # type: ignore[misc]
        with pytest.raises(TypeError):
            hash(lazy[0])
    finally:
        store.close()


PATHS = ["/a.md", "/d/b.md", "/d/e/c.md"]
steps = step_lists(PATHS, ["alpha", "bravo", "charlie"], max_lines=4)


@pytest.mark.slow  # hypothesis, a fresh store per example
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(before=steps, ours=steps, theirs=steps, after=steps, merge=st.booleans())
async def test_log_and_history_match_the_per_link_route(before, ours, theirs, after, merge):
    async with FreshStore() as store:
        await store.write("/a.md", "seed\n")
        await apply_steps(store, before)
        side = await store.branch("side")
        try:
            await apply_steps(side, theirs)
            await apply_steps(store, ours)
            if merge:
                await store.merge("side", strategy="theirs")
            await apply_steps(store, after)
        finally:
            side.close()
        for path in PATHS:
            log = await store.log(path)
            history = await store.history(path)
            repo = cold(store)  # the per-link route: one change row at a time, commits decoded as read
            start = repo.path_start(path, repo.head("main"), "main")
            expected = repo.path_log(path, start, limit=10**6) if start is not None else []
            assert [c.to_json() for c in log] == [c.to_json() for c in expected], path
            sizes = []
            for c in expected:
                entry = repo.entry_at(bytes.fromhex(c.id), path)
                sizes.append(None if entry is None else entry.size)
            assert [(c.id, size) for c, size in history] == [(c.id, s) for c, s in zip(expected, sizes, strict=True)]


# --------------------------------------------------------------------------- damage


def damage(folder, sql: str, args: tuple) -> None:
    conn = sqlite3.connect(folder_store_file(folder))
    try:
        assert conn.execute(sql, args).rowcount == 1
        conn.commit()
    finally:
        conn.close()


def flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1 :]


async def test_a_commit_whose_bytes_were_altered_fails_log(tmp_path):
    folder = tmp_path / "s"
    store = await build(folder, 12)
    log = await store.log(PATH)
    store.close()
    oid = bytes.fromhex(log[5].id)
    record = sqlite3.connect(folder_store_file(folder)).execute("SELECT data FROM commits WHERE id=?", (oid,)).fetchone()[0]
    damage(folder, "UPDATE commits SET data=? WHERE id=?", (flip(record, len(record) - 1), oid))
    store = VersionedStore(folder, create=False)
    try:
        with pytest.raises(memrev.IntegrityError, match="does not match its hash"):
            await store.log(PATH)
    finally:
        store.close()


async def test_a_commit_the_change_index_names_but_that_is_gone_fails_log(tmp_path):
    folder = tmp_path / "s"
    store = await build(folder, 12)
    log = await store.log(PATH)
    store.close()
    damage(folder, "DELETE FROM commits WHERE id=?", (bytes.fromhex(log[4].id),))
    store = VersionedStore(folder, create=False)
    try:
        with pytest.raises(memrev.IntegrityError, match="missing commit"):
            await store.log(PATH)
    finally:
        store.close()


async def test_an_altered_tree_fails_history(tmp_path):
    folder = tmp_path / "s"
    store = await build(folder, 12)
    log = await store.log(PATH)
    root = store._repo.root(bytes.fromhex(log[6].id))  # the root node of one version: history reads it
    store.close()
    data = sqlite3.connect(folder_store_file(folder)).execute("SELECT data FROM trees WHERE id=?", (root,)).fetchone()[0]
    damage(folder, "UPDATE trees SET data=? WHERE id=?", (flip(data, len(data) - 1), root))
    store = VersionedStore(folder, create=False)
    try:
        with pytest.raises(memrev.IntegrityError, match="does not match its hash"):
            await store.history(PATH)
    finally:
        store.close()


async def test_an_altered_link_of_a_delta_chain_fails_the_old_read(tmp_path):
    folder = tmp_path / "s"
    store = await build(folder, 20)
    log = await store.log(PATH)
    repo = store._repo
    entry = repo.entry_at(bytes.fromhex(log[2].id), PATH)
    link = repo.blobs.row(repo.blobs.row(entry.oid).base)  # a delta below the version read
    assert link.kind == "D"
    store.close()
    data = sqlite3.connect(folder_store_file(folder)).execute("SELECT data FROM blobs WHERE id=?", (link.id,)).fetchone()[0]
    damage(folder, "UPDATE blobs SET data=? WHERE id=?", (flip(data, len(data) - 1), link.id))
    store = VersionedStore(folder, create=False)
    try:
        with pytest.raises(memrev.IntegrityError):
            await store.read(PATH, rev=log[2].id)
    finally:
        store.close()


# --------------------------------------------------------------------------- delta apply, one pass


@settings(max_examples=300, deadline=None)
@given(old=st.binary(max_size=400), new=st.binary(max_size=400), lines=st.booleans())
def test_apply_rebuilds_what_compute_encoded(old, new, lines):
    from memrev.core import delta

    if lines:  # line-structured text, as agents write it: copies with multi-byte offsets
        old, new = old.replace(b"\x00", b"\n") * 3, new.replace(b"\x00", b"\n") + old
    assert delta.apply(old, delta.encode(delta.compute(old, new)), len(new)) == new


@pytest.mark.slow  # 0.5-0.7 s in the quick loop: hypothesis, 500 examples
@settings(max_examples=500, deadline=None)
@given(base=st.binary(max_size=300), encoded=st.binary(max_size=60), size=st.integers(0, 400))
def test_apply_refuses_exactly_what_the_size_check_refuses(base, encoded, size):
    """The one-pass ``apply`` accepts a delta iff ``output_size`` reads it and finds ``size``."""
    from memrev.core import delta

    try:
        expected = delta.output_size(encoded, len(base))
    except ValueError:
        expected = None
    if expected == size:
        assert len(delta.apply(base, encoded, size)) == size
    else:
        with pytest.raises(ValueError):
            delta.apply(base, encoded, size)
