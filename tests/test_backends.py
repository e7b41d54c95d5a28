"""The backend interface: registration, ``backend=``, the memory backend, and the defaults.

``_MinimalBackend`` below is written as a third party would write one: it
subclasses ``BackendBase`` and implements only the abstract primitives, with
no speed-ups. That it passes the conformance suite and a scenario of every
core operation (commit, log, history, blame, branch, merge, fsck, gc) shows
that the defaults of ``BackendBase`` are right.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

pytest.register_assert_rewrite("memrev.testing.conformance")

from helpers import own_copy  # noqa: E402
from memrev import VersionedStore, backends, errors  # noqa: E402
from memrev.backends import memory  # noqa: E402
from memrev.backends.base import BackendBase, BlobRow, HeadRow  # noqa: E402
from memrev.backends.memory import MemoryBackend  # noqa: E402
from memrev.testing.conformance import BackendConformance  # noqa: E402

_names = itertools.count()


def _fresh(stem: str) -> str:
    return f"{stem}-{os.getpid()}-{next(_names)}"


# ================================================================ a backend with the primitives only


class _Tables:
    def __init__(self) -> None:
        self.blobs: dict[bytes, BlobRow] = {}
        self.trees: dict[bytes, bytes] = {}
        self.commits: dict[bytes, tuple[int, bytes | None, bytes]] = {}  # id -> (seq, parent, data)
        self.seq = 0
        self.refs: dict[str, bytes] = {}
        self.head: dict[tuple[str, str], HeadRow] = {}
        self.changes: dict[tuple[str, int], tuple[int | None, int | None]] = {}


_MINIMAL: dict[str, tuple[threading.Lock, list[_Tables]]] = {}  # name -> (writer lock, [committed tables])


class _MinimalBackend(BackendBase):
    """Every primitive as a plain scan of Python dicts; a transaction is a deep copy."""

    local = True

    def __init__(self, url: str, *, durability: str = "normal", create: bool = True) -> None:
        name = url[len("minimal://") :]
        if name not in _MINIMAL:
            if not create:
                raise errors.NoStore(f"no store at {url}")
            _MINIMAL[name] = (threading.Lock(), [_Tables()])
        self._writer, self._box = _MINIMAL[name]
        self._txn: _Tables | None = None
        self._pinned = threading.local()  # read_snapshot: the tables a thread reads meanwhile

    @property
    def _t(self) -> _Tables:
        if self._txn is not None:
            return self._txn
        return getattr(self._pinned, "tables", None) or self._box[0]

    @contextmanager
    def read_snapshot(self) -> Iterator[None]:
        self._pinned.tables = self._box[0]  # committed tables are never changed, only replaced
        try:
            yield
        finally:
            self._pinned.tables = None

    @contextmanager
    def write(self, *, exclusive: bool = False, wait: bool = True) -> Iterator[None]:
        if not self._writer.acquire(blocking=wait):
            raise errors.TransientConflict("another writer")
        try:
            self._txn = copy.deepcopy(self._box[0])
            yield
            self._box[0] = self._txn
        finally:
            self._txn = None
            self._writer.release()

    def close(self) -> None:
        pass

    def get_blob(self, oid):
        return self._t.blobs.get(oid)

    def put_blob(self, row):
        t = self._t
        if row.id in t.blobs:
            return
        if row.lineage is not None and any(b.lineage == row.lineage and b.start == row.start for b in t.blobs.values()):
            raise errors.TransientConflict("append run clash")
        t.blobs[row.id] = row

    def lineage_pieces(self, lineage, lo, hi):
        pieces = sorted((b for b in self._t.blobs.values() if b.lineage == lineage), key=lambda b: b.start)
        floor = max((b.start for b in pieces if b.start <= lo), default=lo)
        return [b for b in pieces if floor <= b.start < hi]

    def get_tree(self, oid):
        return self._t.trees.get(oid)

    def put_tree(self, oid, data):
        self._t.trees.setdefault(oid, data)

    def get_commit(self, oid):
        found = self._t.commits.get(oid)
        return None if found is None else (found[0], found[2])

    def commit_at(self, seq):
        return next(((oid, c[2]) for oid, c in self._t.commits.items() if c[0] == seq), None)

    def put_commit(self, oid, parent, data):
        t = self._t
        if oid not in t.commits:
            t.seq += 1
            t.commits[oid] = (t.seq, parent, data)
        return t.commits[oid][0]

    def first_parent(self, oid, steps):
        for _ in range(steps):
            found = self._t.commits.get(oid)
            if found is None or found[1] is None:
                return None
            oid = found[1]
        return oid

    def set_ref_if_equals(self, name, old, new):
        if self._t.refs.get(name) != old:
            return False
        self._t.refs[name] = new
        return True

    def delete_ref(self, name):
        self._t.refs.pop(name, None)

    def list_refs(self, prefix):
        return {n: t for n, t in self._t.refs.items() if n.startswith(prefix)}

    def head_get(self, branch, path):
        return self._t.head.get((branch, path))

    def head_put(self, branch, rows):
        for r in rows:
            self._t.head[(branch, r.path)] = r

    def head_all(self, branch):
        return [r for (b, _), r in self._t.head.items() if b == branch]

    def head_clear(self, branch):
        for key in [k for k in self._t.head if k[0] == branch]:
            del self._t.head[key]

    def change_put(self, rows):
        for path, seq, prev, prev2 in rows:
            self._t.changes[(path, seq)] = (prev, prev2)

    def change_prev(self, path, seq):
        return self._t.changes.get((path, seq))

    def change_before(self, path, seq):
        return max((s for p, s in self._t.changes if p == path and s <= seq), default=None)

    def paths_at(self, seqs):
        wanted, out = set(seqs), {}
        for path, seq in self._t.changes:
            if seq in wanted:
                out.setdefault(seq, []).append(path)
        return out

    def clear_indexes(self):
        self._t.head.clear()
        self._t.changes.clear()

    def iter_commits(self):
        rows = sorted((c[0], oid, c[2]) for oid, c in self._t.commits.items())
        yield from rows

    def iter_blob_ids(self):
        return iter(list(self._t.blobs))

    def iter_trees(self):
        yield from list(self._t.trees.items())

    def iter_changes(self):
        return iter(sorted(((p, s, *prevs) for (p, s), prevs in self._t.changes.items()), key=lambda r: r[1]))

    def delete_unreachable(self, table, keep):
        rows = getattr(self._t, table)
        gone = [oid for oid in rows if oid not in keep]
        for oid in gone:
            if table == "commits":
                seq = rows[oid][0]
                for key in [k for k in self._t.changes if k[1] == seq]:
                    del self._t.changes[key]
            del rows[oid]
        return len(gone)


@pytest.fixture
def minimal_scheme():
    backends.register("minimal", _MinimalBackend)
    yield "minimal://"
    backends.unregister("minimal")


def test_minimal_backend_overrides_no_default():
    """The point of the test backend: every default of BackendBase is in use."""
    defaults = {
        n
        for cls in BackendBase.__mro__
        if cls.__module__ == BackendBase.__module__
        for n, v in vars(cls).items()
        if callable(v) and not getattr(v, "__isabstractmethod__", False)
    }
    assert defaults >= {
        "lock_ref",
        "get_ref",
        "lineage_has",
        "commits_at",
        "commits_with_prefix",
        "head_rows",
        "change_chain",
        "wait_for_change",
    }
    assert not defaults & set(vars(_MinimalBackend)), "the minimal backend must use the defaults, not override them"


class TestMinimalBackendConformance(BackendConformance):
    @pytest.fixture(autouse=True)
    def _registered(self, minimal_scheme):
        yield

    def make_location(self, tmp_path: Path) -> str:
        return f"minimal://{_fresh('conf')}"

    # 0.5-0.6 s in the quick loop: hypothesis, every operation through the defaults
    test_knowledge_random_sequences_match_oracle = pytest.mark.slow(
        own_copy(BackendConformance.test_knowledge_random_sequences_match_oracle)
    )


@pytest.mark.anyio
async def test_minimal_backend_core_scenario(minimal_scheme):
    """Commit, log, history, blame, branch, merge, revisions, fsck and gc through the defaults only."""
    async with VersionedStore(f"minimal://{_fresh('core')}", author="a") as store:
        await store.write("/notes.md", "one\ntwo\n")
        await store.write("/notes.md", "one\nTWO\n")
        await store.append("/log.txt", "first\n")
        await store.append("/log.txt", "second\n")
        assert await store.read("/log.txt") == "first\nsecond\n"
        log = await store.log()
        assert len(log) == 4 and log[0].paths == ("/log.txt",)
        assert [c.id for c, _ in await store.history("/notes.md")] == [log[2].id, log[3].id]
        blame = await store.blame("/notes.md")
        assert [(b.text, b.commit.id) for b in blame] == [("one", log[3].id), ("TWO", log[2].id)]
        assert await store.resolve("HEAD~2") == log[2].id  # first_parent
        assert await store.resolve(log[3].id[:8]) == log[3].id  # commits_with_prefix
        side = await store.branch("side")
        try:
            await side.write("/side.md", "from side\n")
            await store.write("/main.md", "from main\n")
            result = await store.merge("side")
            assert result.status == "merged"
            assert await store.read("/side.md") == "from side\n"
            assert set(await store.branches()) == {"main", "side"}
        finally:
            side.close()
        assert await store.fsck() == []
        await store.reindex()
        assert await store.fsck() == []
        await store.gc(keep_seconds=0)
        assert await store.fsck() == []
        assert await store.read("/notes.md") == "one\nTWO\n"


# ================================================================ registration


def test_builtin_schemes_are_registered_like_any_other():
    assert {"sqlite", "postgresql", "postgres", "memory"} <= set(backends._FACTORIES)


def test_unknown_scheme_is_a_typed_error_and_creates_nothing(tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(errors.UnknownBackend, match="nope://"):
        VersionedStore("nope://somewhere/store")
    with pytest.raises(errors.UnknownBackend):
        backends.open_backend("nope://x", create=True)
    assert list(tmp_path.iterdir()) == [], "an unknown scheme must not be taken for a folder"
    assert isinstance(errors.UnknownBackend("x"), errors.MemrevError)


def test_register_routes_a_scheme_to_its_factory(tmp_path: Path):
    calls = []

    def factory(url: str, *, durability: str = "normal", create: bool = True):
        calls.append((url, durability, create))
        return MemoryBackend(url.split("://", 1)[1], durability=durability, create=create)

    backends.register("Spy", factory)
    try:
        name = _fresh("spy")
        backend = backends.open_backend(f"SPY://{name}", durability="full")
        backend.close()
        assert calls == [(f"SPY://{name}", "full", True)]
        assert backends.is_url(f"spy://{name}")
    finally:
        backends.unregister("spy")
        memory.drop(name)
    with pytest.raises(errors.UnknownBackend):
        backends.open_backend(f"spy://{name}")


@pytest.mark.parametrize("scheme", ["", "1x", "x", "has space", "a/b", None])
def test_register_refuses_what_is_not_a_scheme(scheme):
    with pytest.raises(ValueError):
        backends.register(scheme, MemoryBackend.from_url)  # type: ignore[arg-type]


def test_register_refuses_a_factory_that_is_not_callable():
    with pytest.raises(TypeError):
        backends.register("fine", "not callable")  # type: ignore[arg-type]


# ================================================================ backend=


class _Counting(MemoryBackend):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.closed = 0

    def close(self) -> None:
        self.closed += 1
        super().close()


@pytest.mark.anyio
async def test_backend_argument_is_owned_by_the_store():
    name = _fresh("owned")
    backend = _Counting(name)
    try:
        store = VersionedStore(backend=backend)
        await store.write("/a.md", "x")
        side = await store.branch("side")  # shares the backend
        store.close()
        assert backend.closed == 0, "a handle that on_branch opened from it still uses the backend"
        assert await side.read("/a.md") == "x"
        side.close()
        assert backend.closed == 1, "the last handle closes a passed-in backend, once"
        async with VersionedStore(f"memory://{name}") as again:  # what was committed is there
            assert await again.read("/a.md") == "x"
    finally:
        memory.drop(name)


def test_backend_argument_excludes_a_location(tmp_path: Path):
    backend = MemoryBackend(_fresh("both"))
    with pytest.raises(TypeError):
        VersionedStore(tmp_path, backend=backend)
    with pytest.raises(TypeError):
        VersionedStore()
    with pytest.raises(ValueError, match="working tree"):
        VersionedStore(backend=backend, worktree=True)
    assert list(tmp_path.iterdir()) == []


# ================================================================ the memory backend


@pytest.mark.anyio
async def test_memory_handles_of_one_name_share_a_database_and_see_changes():
    name = _fresh("shared")
    try:
        # b is opened with backend=, so a's commits are not announced to it in-process:
        # only its poller, woken by wait_for_change long before poll_interval=30 ends, sees them.
        async with (
            VersionedStore(f"memory://{name}") as a,
            VersionedStore(backend=MemoryBackend(name), poll_interval=30) as b,
        ):
            seen: list[str] = []
            got = asyncio.Event()

            async def changed(path: str) -> None:
                seen.append(path)
                got.set()

            await b.on_change("/", changed)
            await a.write("/x.md", "hello")
            assert await b.read("/x.md") == "hello"
            await asyncio.wait_for(got.wait(), 20)
            assert seen == ["/x.md"]
        async with VersionedStore(f"memory://{_fresh('other')}") as other:
            assert await other.read("/x.md") is None, "another name is another database"
    finally:
        memory.drop(name)


def test_memory_create_false_needs_an_existing_database():
    with pytest.raises(errors.NoStore):
        VersionedStore(f"memory://{_fresh('absent')}", create=False)
    with pytest.raises(errors.MemrevError):
        backends.open_backend("memory://")


def test_memory_write_without_waiting_fails_at_once_while_another_writer_holds_it():
    name = _fresh("busy")
    a, b = MemoryBackend(name), MemoryBackend(name)
    try:
        with a.write(), pytest.raises(errors.TransientConflict), b.write(wait=False):
            pass
        with b.write(wait=False):
            assert b.set_ref_if_equals("refs/heads/x", None, b"\x01" * 20)
    finally:
        a.close()
        b.close()
        memory.drop(name)


def test_memory_wait_for_change_wakes_on_a_ref_move_and_on_close():
    name = _fresh("wake")
    a, b = MemoryBackend(name), MemoryBackend(name)
    try:
        assert b.wait_for_change(0.01) is False
        with a.write():
            a.put_tree(b"\x02" * 20, b"t")  # no ref moved: no wake
        assert b.wait_for_change(0.01) is False
        with a.write():
            a.set_ref_if_equals("refs/heads/main", None, b"\x01" * 20)
        assert b.wait_for_change(0.01) is True  # a move made while nobody waited is not lost
        assert b.wait_for_change(0.01) is False
        done: list[bool] = []
        t = threading.Thread(target=lambda: done.append(b.wait_for_change(60)))
        t.start()
        b.close()
        t.join(10)
        assert done == [False]
    finally:
        a.close()
        memory.drop(name)
