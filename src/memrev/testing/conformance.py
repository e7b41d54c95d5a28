"""The backend conformance suite: run memrev's contract tests against any backend.

Every memrev backend (SQLite, PostgreSQL, yours) must pass these tests. They
check the narrow backend interface of :mod:`memrev.backends.base` directly,
and everything built on it through :class:`memrev.VersionedStore`: the
KnowledgeStore semantics against ag2's ``MemoryKnowledgeStore``, history
(log, diff, revisions, transactions, branches, merge, blame, gc), the AutoGen
memory against ``ListMemory``, and two handles committing to one store.

Needs ``pytest``, ``hypothesis`` and ``anyio`` (anyio's pytest plugin runs the
async tests; it registers itself when anyio is installed). Importing
``memrev`` never imports this module; only a test module that imports it does.

Running it against a backend
----------------------------

Register your backend for a URL scheme (:func:`memrev.backends.register`),
subclass :class:`BackendConformance` in one of *your* test modules, under a
name pytest collects (``Test...``), and say how to make a fresh, empty store
location for each test; that is all::

    # tests/test_mybackend_conformance.py
    import memrev.backends
    from memrev.testing.conformance import BackendConformance
    from mypackage.memrev_backend import MyBackend

    memrev.backends.register("mydb", MyBackend.from_url)  # from_url(url, *, durability, create)


    class TestMyBackend(BackendConformance):
        def make_location(self, tmp_path):
            return f"mydb://{tmp_path}/store"       # fresh and empty per call

then ``python -m pytest tests/test_mybackend_conformance.py``. The class's
tests are collected only from a module that subclasses it like this (the
base class's name does not start with ``Test``).

Hooks (override what you need):

* ``make_location(tmp_path) -> str``: a location string for a new, empty
  store (a folder, ``sqlite:///...``, a URL naming a new database). Called
  once per test; ``drop_location(location)`` runs after the test (default:
  nothing).
* ``memrev_location``: the pytest fixture that calls the two hooks above.
  Override the fixture instead when making a location needs other fixtures,
  e.g. a database server::

      @pytest.fixture
      def memrev_location(self, my_server):
          url = my_server.create_database()
          yield url
          my_server.drop_database(url)

* ``open_backend(location, *, durability)``: opens a backend on a location
  for the tests of the primitives. The default is
  :func:`memrev.backends.open_backend`, the function ``VersionedStore`` uses:
  folders, and URLs of every registered scheme. The suite opens every store
  by its location, as a user would, so a scheme must be registered, not only
  known to this hook.

A location must accept several handles at once, from several threads: the
suite opens two backends (or stores) on one location to check locking,
isolation and concurrent commits. A backend subclasses
:class:`memrev.backends.base.BackendBase` and implements its abstract
methods (the primitives); the other methods have defaults built on them.

Selecting and deepening: test names start with the area they check
(``test_backend_*``, ``test_knowledge_*``, ``test_history_*``,
``test_memory_*``, ``test_concurrency_*``), so ``-k test_backend_`` runs the
primitive contracts only. The random differential test runs
``MEMREV_CONFORMANCE_EXAMPLES`` examples (default 20). For detailed assertion
messages, call ``pytest.register_assert_rewrite("memrev.testing.conformance")`` in
your ``conftest.py`` (or before importing this module). ``docs/backends.md``
describes each primitive's contract.
"""

from __future__ import annotations

import itertools
import json
import os
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .. import errors
from ..autogen import VersionedStore
from ..backends import open_backend as _default_open_backend
from ..backends.base import Backend, BlobRow, CommitWrite, HeadRow
from ..repo.ops import Delete, Write
from ..repo.repository import Repository

__all__ = ["BackendConformance"]

EXAMPLES = int(os.environ.get("MEMREV_CONFORMANCE_EXAMPLES", "20"))
_names = itertools.count()


def _oid(tag: str, n: int = 0) -> bytes:
    """A 20-byte id, readable in failure messages."""
    raw = f"{tag}{n}".encode()
    return (raw + b"\x00" * 20)[:20]


def _fresh_branch(stem: str) -> str:
    return f"{stem}{os.getpid()}x{next(_names)}"


def _in_thread(fn) -> tuple[threading.Thread, list]:
    """Start ``fn`` in a thread; the list receives its result or exception."""
    out: list = []

    def run() -> None:
        try:
            out.append(fn())
        except BaseException as e:  # noqa: BLE001 - reported to the test
            out.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


def _joined(t: threading.Thread, out: list, what: str, timeout: float = 60.0) -> Any:
    t.join(timeout)
    assert not t.is_alive(), f"{what}: still blocked after {timeout} s"
    assert len(out) == 1, f"{what}: no result"
    if isinstance(out[0], BaseException):
        raise out[0]
    return out[0]


# ---------------------------------------------------------------- differential harness


async def _outcome(fn, *args) -> tuple[str, Any]:
    try:
        return ("returned", await fn(*args))
    except Exception as e:  # noqa: BLE001 - compared by type
        return ("raised", e)


def _same(oracle: tuple[str, Any], mine: tuple[str, Any]) -> bool:
    if oracle[0] == "raised" or mine[0] == "raised":
        return oracle[0] == mine[0] == "raised" and isinstance(mine[1], type(oracle[1]))
    return type(oracle[1]) is type(mine[1]) and oracle[1] == mine[1]


class _Recorder:
    def __init__(self) -> None:
        self.paths: list[str] = []

    async def __call__(self, path: str) -> None:
        self.paths.append(path)

    def take(self) -> Counter:
        c = Counter(self.paths)
        self.paths.clear()
        return c


class _Pair:
    """ag2's MemoryKnowledgeStore and a VersionedStore, driven in lock step."""

    def __init__(self, store: VersionedStore) -> None:
        from ag2.knowledge import MemoryKnowledgeStore

        self.oracle = MemoryKnowledgeStore()
        self.mine = store
        self.subs: list[tuple[str, _Recorder, _Recorder, Any, Any]] = []
        self.trace: list[str] = []

    def _history(self) -> str:
        return "\n  history:\n    " + "\n    ".join(self.trace)

    async def run(self, op: tuple) -> Any:
        name, *args = op
        if name == "subscribe":
            o_rec, m_rec = _Recorder(), _Recorder()
            subs = (await self.oracle.on_change(args[0], o_rec), await self.mine.on_change(args[0], m_rec))
            self.subs.append((args[0], o_rec, m_rec, *subs))
            self.trace.append(f"on_change({args[0]!r})")
            return None
        if name == "unsubscribe":
            if self.subs:
                prefix, _, _, o_sub, m_sub = self.subs.pop(args[0] % len(self.subs))
                await o_sub.close()
                await m_sub.close()
                self.trace.append(f"close subscription on {prefix!r}")
            return None
        o = await _outcome(getattr(self.oracle, name), *args)
        m = await _outcome(getattr(self.mine, name), *args)
        self.trace.append(f"{name}{tuple(args)!r}: oracle {o[0]} {o[1]!r}, memrev {m[0]} {m[1]!r}")
        assert _same(o, m), f"{name}{tuple(args)!r}: oracle {o[0]} {o[1]!r} but memrev {m[0]} {m[1]!r}" + self._history()
        for prefix, o_rec, m_rec, _, _ in self.subs:
            o_notes, m_notes = o_rec.take(), m_rec.take()
            assert o_notes == m_notes, (
                f"after {name}{tuple(args)!r}: on_change({prefix!r}) oracle got {sorted(o_notes.elements())} "
                f"but memrev got {sorted(m_notes.elements())}" + self._history()
            )
        return o[1]

    async def close(self) -> None:
        while self.subs:
            await self.run(("unsubscribe", 0))

    async def compare_trees(self) -> None:
        o_tree, m_tree = await _walk(self.oracle), await _walk(self.mine)
        assert m_tree == o_tree, f"final trees differ: oracle {o_tree!r}, memrev {m_tree!r}" + self._history()


async def _walk(store: Any, path: str = "/", depth: int = 0) -> dict[str, Any]:
    entries = await store.list(path)
    out: dict[str, Any] = {path + "/": entries}
    if depth > 6:
        return out
    base = path.rstrip("/")
    for entry in entries:
        child = base + "/" + entry.rstrip("/")
        if entry.endswith("/"):
            out.update(await _walk(store, child, depth + 1))
        else:
            out[child] = await store.read(child)
    return out


# Few segments so files, directories and prefixes collide, with the characters
# that break naive backends: LIKE wildcards, case, "a-"/"a." sorting before
# "a/", multi-byte UTF-8.
_SEGMENTS = ["a", "a", "a", "b", "ab", "a_", "A", "%", "a-", "a.b", "é"]


@st.composite
def _path(draw: st.DrawFn, allow_root: bool = False) -> str:
    if allow_root and draw(st.integers(0, 9)) == 0:
        return draw(st.sampled_from(["", "/", "//"]))
    segs = draw(st.lists(st.sampled_from(_SEGMENTS), min_size=1, max_size=3))
    return draw(st.sampled_from(["/", "/", "", "//"])) + "/".join(segs) + draw(st.sampled_from(["", "", "/"]))


_content = st.one_of(
    st.sampled_from(["", "x", "é", "日本", "😀", "line\n"]),
    st.text(alphabet=st.sampled_from(["x", "\n", "é", "日", "😀"]), max_size=5),
)

_op = st.one_of(
    st.tuples(st.just("write"), _path(), _content),
    st.tuples(st.just("write"), _path(), _content),
    st.tuples(st.just("append"), _path(), _content),
    st.tuples(st.just("append"), _path(), _content),
    st.tuples(st.just("delete"), _path(allow_root=True)),
    st.tuples(st.just("read"), _path(allow_root=True)),
    st.tuples(st.just("list"), _path(allow_root=True)),
    st.tuples(st.just("exists"), _path(allow_root=True)),
    st.tuples(st.just("read_range"), _path(), st.integers(-2, 12), st.one_of(st.none(), st.integers(-2, 14))),
    st.tuples(st.just("subscribe"), _path(allow_root=True)),
    st.tuples(st.just("unsubscribe"), st.integers(0, 5)),
)


# ---------------------------------------------------------------- head index oracle

# Paths that a prefix scan must tell apart: siblings that sort between "a" and
# "a/" ("a-", "a."), right after it ("a0"), LIKE wildcards, case, non-ASCII.
_HEAD_PATHS = [
    "/a", "/a/b", "/a/b/c", "/a/é", "/a-b", "/a.b", "/a0", "/a!", "/a_", "/a_/x", "/a%/y", "/aXb/u",
    "/A/z", "/ab/x", "/aB", "/é/1", "/e\u0301/2", "/日本/3", "/😀/4", "/a/😀",
]
def _canon(item: Any) -> tuple:
    mime = item.mime_type
    return (type(item.content).__name__, item.content, str(getattr(mime, "value", mime)),
            json.dumps(item.metadata, sort_keys=True))


class BackendConformance:
    """Base class of the conformance suite; subclass it as ``Test<YourBackend>``.

    Override ``make_location`` (or the ``memrev_location`` fixture); a backend
    of your own is registered for its URL scheme. See the module docstring.
    """

    # ================================================================ hooks

    def make_location(self, tmp_path: Path) -> str:
        """A location string for a new, empty store. Called once per test."""
        raise NotImplementedError(
            f"{type(self).__name__} must define make_location(tmp_path) or override the memrev_location fixture"
        )

    def drop_location(self, location: str) -> None:
        """Clean up after a test (drop a database, ...). Default: nothing."""

    def open_backend(self, location: str, *, durability: str = "normal") -> Backend:
        """Open the backend under test on ``location``."""
        return _default_open_backend(location, durability=durability)

    # ================================================================ fixtures

    @pytest.fixture
    def memrev_location(self, tmp_path: Path) -> Iterator[str]:
        location = self.make_location(tmp_path)
        yield location
        self.drop_location(location)

    @pytest.fixture
    def anyio_backend(self) -> str:
        return "asyncio"

    @pytest.fixture
    def memrev_backend(self, memrev_location: str) -> Iterator[Backend]:
        backend = self.open_backend(memrev_location)
        yield backend
        backend.close()

    def _second_backend(self, location: str) -> Backend:
        return self.open_backend(location)

    # ================================================================ (a) backend primitives

    def test_backend_blobs_round_trip_and_are_idempotent(self, memrev_backend: Backend, memrev_location: str):
        b = memrev_backend
        binary = bytes(range(256)) * 3
        rows = [
            BlobRow(_oid("full"), "F", None, None, 0, 5, 0, b"rhello"),
            BlobRow(_oid("delta"), "D", _oid("full"), None, 0, 9, 1, b"z" + binary),
            BlobRow(b"\x00" * 19 + b"\xff", "F", None, None, 0, 0, 0, b"r"),  # NUL bytes in the id
            BlobRow(_oid("big"), "F", None, None, 0, 1 << 20, 0, os.urandom(1 << 20)),
            BlobRow(_oid("huge"), "A", _oid("full"), _oid("huge"), 1 << 33, (1 << 33) + 5, 3, b"r12345"),  # 64-bit
        ]
        assert b.get_blob(rows[0].id) is None
        with b.write():
            for row in rows:
                b.put_blob(row)
        for row in rows:
            got = b.get_blob(row.id)
            assert got == row, f"get_blob({row.id!r}) returned {got!r:.200}, expected {row!r:.200}"
            assert type(got.data) is bytes and (got.base is None or type(got.base) is bytes)
        with b.write():  # the same row again: no error, nothing changes
            b.put_blob(rows[0])
            b.put_blob(rows[1])
        assert b.get_blob(rows[0].id) == rows[0]
        assert sorted(b.iter_blob_ids()) == sorted(r.id for r in rows)
        other = self._second_backend(memrev_location)
        try:
            assert other.get_blob(rows[1].id) == rows[1], "a committed blob is visible to another handle"
        finally:
            other.close()

    def test_backend_append_runs(self, memrev_backend: Backend):
        b = memrev_backend
        run, other_run = _oid("run"), _oid("other-run")
        base = BlobRow(_oid("base"), "F", None, None, 0, 4, 0, b"rabcd")
        pieces = [
            BlobRow(run, "A", base.id, run, 4, 7, 1, b"refg"),
            BlobRow(_oid("p2"), "A", run, run, 7, 9, 1, b"rhi"),
            BlobRow(_oid("p3"), "A", _oid("p2"), run, 9, 15, 1, b"rjklmno"),
        ]
        stranger = BlobRow(other_run, "A", base.id, other_run, 4, 6, 1, b"rXY")
        with b.write():
            b.put_blob(base)
            for row in [*pieces, stranger]:
                b.put_blob(row)
            b.put_blob(pieces[1])  # idempotent, also for append pieces
        with b.write():
            assert b.lineage_has(run, 4) and b.lineage_has(run, 7) and b.lineage_has(run, 9)
            assert not b.lineage_has(run, 5) and not b.lineage_has(run, 15) and not b.lineage_has(base.id, 0)
        assert b.lineage_has(other_run, 4)
        starts = {p.start: p for p in pieces}
        for lo, hi in [(0, 15), (4, 15), (4, 5), (5, 8), (7, 9), (8, 9), (9, 10), (6, 14), (14, 15)]:
            got = b.lineage_pieces(run, lo, hi)
            got_starts = [p.start for p in got]
            assert got_starts == sorted(got_starts), f"lineage_pieces(run, {lo}, {hi}) not in order: {got_starts}"
            assert all(p.lineage == run for p in got), f"lineage_pieces(run, {lo}, {hi}) returned another run's piece"
            assert all(p.start < hi for p in got), f"lineage_pieces(run, {lo}, {hi}) returned {got_starts}"
            needed = [s for s, p in starts.items() if s < hi and p.size > lo]
            assert set(needed) <= set(got_starts), (
                f"lineage_pieces(run, {lo}, {hi}) returned pieces starting at {got_starts}, "
                f"missing {sorted(set(needed) - set(got_starts))}"
            )
            for p in got:
                assert p == starts[p.start]

    def test_backend_append_run_clash_is_an_error(self, memrev_backend: Backend):
        """A piece whose place ``(lineage, start)`` is taken by another blob id is refused, never dropped.

        ``put_blob`` ignores a duplicate *id* (content-addressed, so it is the
        same row), but two different pieces claiming one place in a run means
        two writers extended the same run: storing neither silently would
        leave a tree naming a blob that does not exist.
        """
        b = memrev_backend
        run = _oid("run")
        base = BlobRow(_oid("base"), "F", None, None, 0, 4, 0, b"rabcd")
        piece = BlobRow(run, "A", base.id, run, 4, 7, 1, b"refg")
        clash = BlobRow(_oid("clash"), "A", base.id, run, 4, 6, 1, b"rXY")
        with b.write():
            b.put_blob(base)
            b.put_blob(piece)
        refused: BaseException | None = None
        try:
            with b.write():
                b.put_blob(clash)
        except Exception as e:  # noqa: BLE001 - any error is a refusal (PostgreSQL: ConcurrentUpdate)
            refused = e
        stored = b.get_blob(clash.id)
        assert refused is not None, (
            "put_blob of a piece whose (lineage, start) another blob already holds returned without error, "
            f"and get_blob of it now returns {stored!r}: the row was dropped silently"
        )
        assert stored is None, "a refused put_blob left its row behind"
        assert b.get_blob(piece.id) == piece and b.lineage_pieces(run, 4, 7) == [piece]
        with b.write():  # the handle is usable after the refusal
            b.put_blob(BlobRow(_oid("next"), "A", run, run, 7, 8, 1, b"rh"))
        assert [p.start for p in b.lineage_pieces(run, 4, 8)] == [4, 7]

    def test_backend_trees_round_trip_and_are_idempotent(self, memrev_backend: Backend):
        b = memrev_backend
        trees = {_oid("t1"): b"T\x00\x01tree one", _oid("t2"): bytes(range(256)), _oid("t3"): b"x" * 100_000}
        assert b.get_tree(_oid("t1")) is None
        with b.write():
            for oid, data in trees.items():
                b.put_tree(oid, data)
            b.put_tree(_oid("t1"), trees[_oid("t1")])
        for oid, data in trees.items():
            assert b.get_tree(oid) == data
            assert type(b.get_tree(oid)) is bytes
        assert dict(b.iter_trees()) == trees

    def test_backend_commits_sequence_numbers_and_first_parent(self, memrev_backend: Backend):
        b = memrev_backend
        ids = [_oid("c", i) for i in range(5)]
        with b.write():
            seqs = [b.put_commit(ids[0], None, b"data0")]
            for i in range(1, 5):
                seqs.append(b.put_commit(ids[i], ids[i - 1], f"data{i}".encode()))
            again = b.put_commit(ids[2], ids[1], b"data2")
        assert all(isinstance(s, int) and s >= 1 for s in seqs), f"commit numbers must be ints >= 1, got {seqs}"
        assert seqs == sorted(seqs) and len(set(seqs)) == 5, f"commit numbers must increase in insertion order: {seqs}"
        assert again == seqs[2], f"put_commit of an existing id returned {again}, expected its number {seqs[2]}"
        for i, oid in enumerate(ids):
            assert b.get_commit(oid) == (seqs[i], f"data{i}".encode())
            assert b.commit_at(seqs[i]) == (oid, f"data{i}".encode())
        assert b.get_commit(_oid("missing")) is None
        assert b.commit_at(max(seqs) + 1000) is None
        assert list(b.iter_commits()) == [(s, oid, f"data{i}".encode()) for i, (s, oid) in enumerate(zip(seqs, ids))]
        got = b.commits_at([seqs[3], seqs[0], max(seqs) + 1000])
        assert sorted(got) == sorted([(seqs[0], ids[0], b"data0"), (seqs[3], ids[3], b"data3")])
        assert b.commits_at([]) == []
        # first-parent walks
        assert b.first_parent(ids[4], 0) == ids[4]
        for steps in range(5):
            assert b.first_parent(ids[4], steps) == ids[4 - steps], f"first_parent(c4, {steps})"
        assert b.first_parent(ids[4], 5) is None
        assert b.first_parent(ids[4], 50) is None
        assert b.first_parent(ids[0], 1) is None

    def test_backend_commits_with_prefix(self, memrev_backend: Backend):
        b = memrev_backend
        ids = [bytes.fromhex(h + "00" * 18) for h in ("ab00", "ab01", "abff", "ac00", "aa00", "ffff", "ff00", "00ab")]
        with b.write():
            for i, oid in enumerate(ids):
                b.put_commit(oid, None, b"c%d" % i)

        def found(prefix: str, limit: int = 50) -> set[bytes]:
            got = b.commits_with_prefix(bytes.fromhex(prefix), limit)
            assert len(got) == len(set(got)) <= limit, f"commits_with_prefix({prefix}, {limit}) returned {got}"
            return set(got)

        def expected(prefix: str) -> set[bytes]:
            return {i for i in ids if i.hex().startswith(prefix)}

        for prefix in ("ab", "ab01", "ac", "aa", "ff", "ffff", "00", "01", "abff", "ab0100"):
            assert found(prefix) == expected(prefix), f"commits_with_prefix({prefix})"
        limited = found("ab", 2)
        assert len(limited) == 2 and limited <= expected("ab")

    def test_backend_refs_compare_and_swap(self, memrev_backend: Backend):
        b = memrev_backend
        A, B, C = _oid("A"), _oid("B"), _oid("C")
        name = "refs/heads/main"
        assert b.get_ref(name) is None
        with b.write():
            assert b.lock_ref(name) is None
            assert b.set_ref_if_equals(name, None, A) is True, "create-if-absent on a missing ref must succeed"
        assert b.get_ref(name) == A
        with b.write():
            assert b.set_ref_if_equals(name, None, B) is False, "create-if-absent on an existing ref must fail"
            assert b.set_ref_if_equals(name, C, B) is False, "a swap from a stale value must fail"
            assert b.get_ref(name) == A, "a failed swap changed the ref"
            assert b.lock_ref(name) == A
            assert b.set_ref_if_equals(name, A, B) is True
            assert b.get_ref(name) == B, "inside write(), the transaction sees its own ref move"
        assert b.get_ref(name) == B
        with b.write():
            assert b.set_ref_if_equals("refs/heads/other", A, C) is False, "a swap on a missing ref must fail"
        assert b.get_ref("refs/heads/other") is None

    def test_backend_refs_listing_is_literal_and_case_sensitive(self, memrev_backend: Backend):
        b = memrev_backend
        refs = {
            "refs/heads/main": _oid("1"), "refs/heads/ma_n": _oid("2"), "refs/heads/Main": _oid("3"),
            "refs/heads/m%": _oid("4"), "refs/heads/main/sub": _oid("5"), "refs/tags/v1": _oid("6"),
            "refs/headsX/y": _oid("7"), "refs/deleted/x@1": _oid("8"),
        }
        with b.write():
            for name, target in refs.items():
                assert b.set_ref_if_equals(name, None, target)
        for prefix in ("refs/", "refs/heads/", "refs/heads/m", "refs/heads/ma_", "refs/heads/ma%", "refs/heads/m%",
                       "refs/heads/M", "refs/heads/main", "refs/tags/", "refs/heads", "", "nope/", "refs/heads/_"):
            want = {n: t for n, t in refs.items() if n.startswith(prefix)}
            assert b.list_refs(prefix) == want, f"list_refs({prefix!r}) returned {sorted(b.list_refs(prefix))}"
        with b.write():
            b.delete_ref("refs/heads/ma_n")
            b.delete_ref("refs/heads/never-existed")  # no error
        assert b.get_ref("refs/heads/ma_n") is None and b.get_ref("refs/heads/main") == refs["refs/heads/main"]
        with b.write():  # a deleted ref can be created again
            assert b.set_ref_if_equals("refs/heads/ma_n", None, _oid("9"))
        assert b.get_ref("refs/heads/ma_n") == _oid("9")

    @pytest.mark.parametrize("exists", [False, True], ids=["new-ref", "existing-ref"])
    def test_backend_lock_ref_serializes_writers(self, memrev_location: str, exists: bool):
        """A second writer's ``lock_ref`` waits for the first transaction, then sees its move."""
        name, A, B, C = "refs/heads/locked", _oid("A"), _oid("B"), _oid("C")
        a, b = self._second_backend(memrev_location), self._second_backend(memrev_location)
        try:
            old = None
            if exists:
                with a.write():
                    assert a.set_ref_if_equals(name, None, A)
                old = A

            def second() -> tuple:
                with b.write():
                    seen = b.lock_ref(name)
                    return seen, b.set_ref_if_equals(name, seen, C)

            with a.write():
                assert a.lock_ref(name) == old
                t, out = _in_thread(second)
                time.sleep(0.3)
                assert out == [], f"a second writer got past lock_ref while the first held it: {out}"
                assert a.set_ref_if_equals(name, old, B)
            seen, moved = _joined(t, out, "the second writer")
            assert seen == B, f"after waiting, the second writer's lock_ref returned {seen!r}, expected {B!r}"
            assert moved is True
            assert a.get_ref(name) == C
        finally:
            a.close()
            b.close()

    def test_backend_write_is_atomic_and_isolated(self, memrev_backend: Backend, memrev_location: str):
        """An exception inside ``write()`` undoes every primitive; other handles never see uncommitted rows."""
        b = memrev_backend
        reader = self._second_backend(memrev_location)
        name = "refs/heads/main"
        try:
            with b.write():
                assert b.set_ref_if_equals(name, None, _oid("old"))
            with pytest.raises(RuntimeError, match="boom"):
                with b.write():
                    b.put_blob(BlobRow(_oid("blob"), "F", None, None, 0, 1, 0, b"rx"))
                    b.put_tree(_oid("tree"), b"tree")
                    seq = b.put_commit(_oid("commit"), None, b"commit")
                    assert b.lock_ref(name) == _oid("old")
                    assert b.set_ref_if_equals(name, _oid("old"), _oid("commit"))
                    assert b.set_ref_if_equals("refs/tags/t", None, _oid("commit"))
                    b.head_put("main", [HeadRow("/f", _oid("blob"), 1, seq)])
                    b.change_put([("/f", seq, None, None)])
                    # readers on another handle see none of it, and are not blocked
                    t, out = _in_thread(lambda: (reader.get_ref(name), reader.get_commit(_oid("commit")),
                                                 reader.head_get("main", "/f")))
                    assert _joined(t, out, "a reader during a write", 20) == (_oid("old"), None, None)
                    raise RuntimeError("boom")
            assert b.get_blob(_oid("blob")) is None
            assert b.get_tree(_oid("tree")) is None
            assert b.get_commit(_oid("commit")) is None
            assert b.get_ref(name) == _oid("old") and b.get_ref("refs/tags/t") is None
            assert b.head_get("main", "/f") is None and b.head_all("main") == []
            assert b.change_prev("/f", seq) is None and b.paths_at([seq]) == {}
            with b.write():  # the handle is usable after a rollback
                assert b.set_ref_if_equals(name, _oid("old"), _oid("new"))
            assert reader.get_ref(name) == _oid("new")
        finally:
            reader.close()

    def test_backend_exclusive_write_excludes_other_writers(self, memrev_location: str):
        a, b = self._second_backend(memrev_location), self._second_backend(memrev_location)
        try:
            def other() -> bool:
                with b.write():
                    return b.set_ref_if_equals("refs/heads/x", None, _oid("b"))

            with a.write(exclusive=True):
                t, out = _in_thread(other)
                time.sleep(0.3)
                assert out == [], "a write transaction ran while write(exclusive=True) was open"
                assert a.set_ref_if_equals("refs/heads/y", None, _oid("a"))
            assert _joined(t, out, "a writer waiting for an exclusive write") is True
            assert a.list_refs("refs/heads/") == {"refs/heads/x": _oid("b"), "refs/heads/y": _oid("a")}
        finally:
            a.close()
            b.close()

    def test_backend_head_index_rows_are_exact_per_branch(self, memrev_backend: Backend):
        b = memrev_backend
        rows = [HeadRow(p, _oid("blob", i), i + 1, 10 + i) for i, p in enumerate(_HEAD_PATHS)]
        dead = [HeadRow("/a/dead", None, 0, 40), HeadRow("/t/dead", None, 0, 41), HeadRow("/t/x/dead", None, 0, 41)]
        with b.write():
            b.head_put("main", rows + dead)
            b.head_put("other", [HeadRow("/a/other", _oid("o"), 1, 50), HeadRow("/t/y", _oid("o"), 1, 50)])
            b.head_put("main", [])  # empty batch: no-op
        by_path = {r.path: r for r in rows}
        live = set(by_path)
        for r in rows + dead:
            assert b.head_get("main", r.path) == r, f"head_get('main', {r.path!r})"
        for missing in ("/A", "/a/b/", "/a/other", "/nope", "/A/Z", "/e", "/e\u0301/1", "/\u00e9/2"):
            assert b.head_get("main", missing) is None, f"head_get('main', {missing!r}) should be None"
        assert b.head_get("other", "/a") is None
        assert sorted(b.head_all("main"), key=lambda r: r.path) == sorted(rows + dead, key=lambda r: r.path)
        assert sorted(b.head_rows("main"), key=lambda r: r.path) == sorted(rows, key=lambda r: r.path)
        # a later put replaces the row, a tombstone replaces a file and the other way round
        with b.write():
            b.head_put("main", [HeadRow("/a", _oid("new"), 99, 60), HeadRow("/a/b", None, 0, 60),
                                HeadRow("/a/dead", _oid("alive"), 5, 60)])
        assert b.head_get("main", "/a") == HeadRow("/a", _oid("new"), 99, 60)
        assert b.head_get("main", "/a/b") == HeadRow("/a/b", None, 0, 60)
        assert {r.path for r in b.head_rows("main")} == (live - {"/a/b"}) | {"/a", "/a/dead"}
        assert len(b.head_all("main")) == len(rows + dead)
        with b.write():
            b.head_clear("main")
        assert b.head_all("main") == [] and b.head_get("main", "/a") is None
        assert len(b.head_all("other")) == 2, "head_clear cleared another branch"

    def test_backend_change_index(self, memrev_backend: Backend):
        """Per-path change rows: first parent's previous change, merged side's, chains and lookups."""
        b = memrev_backend
        rows = [
            ("/x", 1, None, None), ("/x", 2, 1, None), ("/x", 3, 1, None), ("/x", 5, 2, 3),  # 5 merges 2 and 3
            ("/y", 2, None, None), ("/y", 4, 2, None), ("/X", 4, None, None), ("/x_", 6, None, None),
        ]
        with b.write():
            b.change_put(rows)
            b.change_put([])
        assert b.change_prev("/x", 5) == (2, 3)
        assert b.change_prev("/x", 2) == (1, None)
        assert b.change_prev("/x", 1) == (None, None)
        assert b.change_prev("/x", 4) is None and b.change_prev("/nope", 1) is None
        assert b.change_chain("/x", 5) == [5, 3, 2, 1]
        assert b.change_chain("/x", 3) == [3, 1]
        assert b.change_chain("/y", 4) == [4, 2]
        assert b.change_chain("/X", 4) == [4]
        assert b.change_before("/x", 4) == 3
        assert b.change_before("/x", 5) == 5
        assert b.change_before("/x", 100) == 5
        assert b.change_before("/x", 0) is None
        assert b.change_before("/nope", 100) is None
        assert b.change_before("/X", 100) == 4, "paths are case-sensitive"
        got = {k: sorted(v) for k, v in b.paths_at([2, 4, 6, 99]).items()}
        assert got == {2: ["/x", "/y"], 4: ["/X", "/y"], 6: ["/x_"]}, f"paths_at returned {got}"
        assert b.paths_at([]) == {}
        assert sorted(b.change_rows("/x", 5)) == [(1, None, None), (2, 1, None), (3, 1, None), (5, 2, 3)]
        assert sorted(b.change_rows("/x", 2)) == [(1, None, None), (2, 1, None)]
        assert b.change_rows("/x_", 5) == [] and b.change_rows("/nope", 99) == []
        with b.write():  # a row put again is replaced
            b.change_put([("/x", 5, 2, None)])
        assert b.change_prev("/x", 5) == (2, None)
        assert b.change_chain("/x", 5) == [5, 2, 1]

    def test_backend_write_commit_stores_the_commit_and_moves_the_ref(self, memrev_backend: Backend):
        """write_commit: the commit row (first parent: the old head), head and change rows with
        their history links, the ref moved; a ref no longer at the old head: ConcurrentUpdate,
        nothing written (a backend may raise it when the transaction ends)."""
        b = memrev_backend
        ref, A, B, C = "refs/heads/main", _oid("A"), _oid("B"), _oid("C")

        def link(path: str) -> int | None:  # what Repository passes: the head row's number
            row = b.head_get("main", path)
            return row.seq if row else None

        rows = [HeadRow("/d/f", _oid("b1"), 3, 0), HeadRow("/d/", None, 0, 0)]
        with b.write():
            number = b.write_commit(CommitWrite(ref, "main", None, A, b"commit A", rows, {}, link))
        seq_a = number()
        assert b.get_ref(ref) == A and b.get_commit(A) == (seq_a, b"commit A")
        assert b.head_get("main", "/d/f") == HeadRow("/d/f", _oid("b1"), 3, seq_a)
        assert b.change_prev("/d/f", seq_a) == (None, None) and b.change_prev("/d/", seq_a) == (None, None)
        rows = [HeadRow("/d/f", None, 0, 0), HeadRow("/d/", None, 0, 0), HeadRow("/e", _oid("b2"), 1, 0)]
        with b.write():
            number = b.write_commit(CommitWrite(ref, "main", A, B, b"commit B", rows, {"/e": 7}, link))
        seq_b = number()
        assert seq_b > seq_a and b.get_ref(ref) == B and b.first_parent(B, 1) == A
        assert b.head_get("main", "/d/f") == HeadRow("/d/f", None, 0, seq_b), "a deletion is a tombstone row"
        assert b.change_prev("/d/f", seq_b) == (seq_a, None) and b.change_prev("/d/", seq_b) == (seq_a, None)
        assert b.change_prev("/e", seq_b) == (None, 7), "prev2: the merged line's last change"
        commits = len(list(b.iter_commits()))
        with pytest.raises(errors.ConcurrentUpdate), b.write():
            b.write_commit(CommitWrite(ref, "main", A, C, b"commit C", [HeadRow("/e", _oid("b3"), 1, 0)], {}, link))
        assert b.get_ref(ref) == B and b.get_commit(C) is None and len(list(b.iter_commits())) == commits
        assert b.head_get("main", "/e") == HeadRow("/e", _oid("b2"), 1, seq_b)

    def test_backend_a_path_s_changes_with_their_commits(self, memrev_backend: Backend):
        """``change_commits``: a path's change rows joined to their commits (a missing one as
        ``None, None``); ``change_paths``: what each of those commits changed."""
        b = memrev_backend
        ids = [_oid("pc", i) for i in range(4)]
        with b.write():
            seqs = [b.put_commit(oid, None, b"rec%d" % i) for i, oid in enumerate(ids)]
            b.change_put([
                ("/f", seqs[0], None, None), ("/g", seqs[0], None, None), ("/f", seqs[2], seqs[0], None),
                ("/g", seqs[1], seqs[0], None), ("/f", seqs[3], seqs[2], seqs[1]), ("/d/", seqs[3], None, None),
                ("/f", seqs[3] + 50, seqs[3], None),  # names a commit that is not there
            ])
        got = sorted(b.change_commits("/f", seqs[3] + 50))
        assert got == [
            (seqs[0], None, None, ids[0], b"rec0"), (seqs[2], seqs[0], None, ids[2], b"rec2"),
            (seqs[3], seqs[2], seqs[1], ids[3], b"rec3"), (seqs[3] + 50, seqs[3], None, None, None),
        ], f"change_commits returned {got}"
        assert sorted(b.change_commits("/f", seqs[2])) == got[:2]
        assert b.change_commits("/nope", 99) == []
        paths = {k: sorted(v) for k, v in b.change_paths("/f", seqs[3]).items()}
        assert paths == {seqs[0]: ["/f", "/g"], seqs[2]: ["/f"], seqs[3]: ["/d/", "/f"]}, f"change_paths returned {paths}"
        assert b.change_paths("/nope", 99) == {}

    def test_backend_a_path_s_log_rows_newest_first_with_the_other_files(self, memrev_backend: Backend):
        """``path_log_rows``: ``change_commits`` newest first, each row with one other file
        its commit changed (directory keys left out; ``None`` if none), a commit with
        several once per file in consecutive rows; ``records=False``: ids only, once each."""
        b = memrev_backend
        ids = [_oid("pl", i) for i in range(4)]
        with b.write():
            seqs = [b.put_commit(oid, None, b"rec%d" % i) for i, oid in enumerate(ids)]
            b.change_put([
                ("/f", seqs[0], None, None), ("/g", seqs[0], None, None), ("/h", seqs[0], None, None),
                ("/d/", seqs[1], None, None), ("/d/x", seqs[1], None, None), ("/d/", seqs[2], seqs[1], None),
                ("/d/y", seqs[2], None, None), ("/f", seqs[2], seqs[0], None), ("/f", seqs[3] + 50, seqs[2], None),
            ])
        rows = b.path_log_rows("/f", seqs[3] + 50)
        got = list(rows)
        assert got == [
            (seqs[3] + 50, seqs[2], None, None, None, None),
            (seqs[2], seqs[0], None, ids[2], b"rec2", "/d/y"),
            (seqs[0], None, None, ids[0], b"rec0", "/g"), (seqs[0], None, None, ids[0], b"rec0", "/h"),
        ], f"path_log_rows returned {got}"
        assert list(b.path_log_rows("/d/", seqs[2])) == [
            (seqs[2], seqs[1], None, ids[2], b"rec2", "/d/y"), (seqs[2], seqs[1], None, ids[2], b"rec2", "/f"),
            (seqs[1], None, None, ids[1], b"rec1", "/d/x"),
        ]
        assert list(b.path_log_rows("/f", seqs[0] - 1)) == [] and list(b.path_log_rows("/nope", 99)) == []
        assert list(b.path_log_rows("/f", seqs[3] + 50, records=False)) == [
            (seqs[3] + 50, seqs[2], None, None, None, None), (seqs[2], seqs[0], None, ids[2], None, None),
            (seqs[0], None, None, ids[0], None, None),
        ], "records=False: each commit once, without its record and files"

    def test_backend_blob_chain_follows_delta_bases(self, memrev_backend: Backend):
        """``blob_chain``: a blob and its delta bases in order, at most ``limit`` rows,
        ending at a row that is not a delta or at a missing base."""
        b = memrev_backend
        full = BlobRow(_oid("bc", 0), "F", None, None, 0, 3, 0, b"rabc")
        deltas = [BlobRow(_oid("bc", i), "D", _oid("bc", i - 1), None, 0, 3, i, b"r%d" % i) for i in range(1, 5)]
        orphan = BlobRow(_oid("bc", 9), "D", _oid("bc", 8), None, 0, 3, 1, b"r9")  # its base is missing
        with b.write():
            for row in (full, *deltas, orphan):
                b.put_blob(row)
        assert b.blob_chain(deltas[3].id, 10) == [*deltas[::-1], full]
        assert b.blob_chain(deltas[3].id, 2) == deltas[:1:-1]
        assert b.blob_chain(full.id, 10) == [full]
        assert b.blob_chain(orphan.id, 10) == [orphan]
        assert b.blob_chain(_oid("bc", 7), 10) == []

    def test_backend_a_new_store_has_no_stale_index(self, memrev_backend: Backend):
        """Only a migration of a store that holds commits marks an index stale (reindex clears it)."""
        b = memrev_backend
        assert b.stale_indexes() == set()
        with b.write():
            b.set_index_fresh("directory-keys")  # clearing what is not there is harmless
        assert b.stale_indexes() == set()

    def test_backend_batches_of_many_rows(self, memrev_backend: Backend):
        b = memrev_backend
        n = 1200
        with b.write():
            seqs = [b.put_commit(_oid("m", i), None, b"%d" % i) for i in range(n)]
            b.change_put([(f"/p/{i % 7}", s, None, None) for i, s in enumerate(seqs)])
            b.head_put("main", [HeadRow(f"/p/{i:04d}", _oid("b", i), i, seqs[i]) for i in range(n)])
        assert len(b.commits_at(seqs)) == n
        assert sum(len(v) for v in b.paths_at(seqs).values()) == n
        assert len(b.head_rows("main")) == n and len(list(b.iter_commits())) == n

    def test_backend_delete_unreachable(self, memrev_backend: Backend):
        b = memrev_backend
        c = [_oid("c", i) for i in range(3)]
        t = [_oid("t", i) for i in range(3)]
        bl = [_oid("b", i) for i in range(3)]
        with b.write():
            seqs = [b.put_commit(c[0], None, b"0"), b.put_commit(c[1], c[0], b"1"), b.put_commit(c[2], c[1], b"2")]
            for i in range(3):
                b.put_tree(t[i], b"tree%d" % i)
                b.put_blob(BlobRow(bl[i], "F", None, None, 0, 1, 0, b"r%d" % i))
            b.change_put([("/f", seqs[i], seqs[i - 1] if i else None, None) for i in range(3)])
            assert b.set_ref_if_equals("refs/heads/main", None, c[1])
        with b.write(exclusive=True):
            assert b.delete_unreachable("commits", {c[0], c[1]}) == 1
            assert b.delete_unreachable("trees", {t[0]}) == 2
            assert b.delete_unreachable("blobs", {bl[1], bl[2], _oid("never-stored")}) == 1
            assert b.delete_unreachable("commits", {c[0], c[1]}) == 0
        assert b.get_commit(c[2]) is None and b.commit_at(seqs[2]) is None
        assert b.get_commit(c[1]) == (seqs[1], b"1")
        assert b.paths_at([seqs[2]]) == {}, "change rows of a deleted commit must go with it"
        assert b.change_prev("/f", seqs[1]) == (seqs[0], None)
        assert b.get_tree(t[0]) == b"tree0" and b.get_tree(t[1]) is None and b.get_tree(t[2]) is None
        assert b.get_blob(bl[0]) is None and b.get_blob(bl[1]) is not None
        assert [oid for _, oid, _ in b.iter_commits()] == [c[0], c[1]]
        assert sorted(b.iter_blob_ids()) == sorted([bl[1], bl[2]])
        assert [oid for oid, _ in b.iter_trees()] == [t[0]]

    # ================================================================ (b) KnowledgeStore semantics

    @pytest.mark.anyio
    async def test_knowledge_literal_prefixes_files_and_directories_match_oracle(self, memrev_location: str):
        async with VersionedStore(memrev_location) as store:
            pair = _Pair(store)
            ops: list[tuple] = [("subscribe", p) for p in ("/a_", "/a%", "/A", "/a", "/")]
            files = ["/ab/x", "/a_/y", "/AB/z", "/a%/w", "/a/v", "/a/b/c", "/aXb/u", "/a", "/a-b", "/a.b", "/é/1"]
            ops += [("write", f, f) for f in files]
            for path in ["/", "/a_", "/a%", "/AB", "/ab", "/a", "/A", "/a%b", "/é", "/a-", "/a/b", "/a-b"]:
                ops += [("list", path), ("exists", path), ("read", path)]
            ops += [
                ("append", "/a_/y", "2é"),
                ("append", "/new.log", "one\n"),
                ("append", "/new.log", "日本😀\n"),
                ("read_range", "/new.log", 4, None),
                ("read_range", "/new.log", 5, 7),  # cuts a character: UnicodeDecodeError on both
                ("write", "/a_/y", "2é"),  # identical content
                ("delete", "/a_"), ("delete", "/A"), ("delete", "/a"), ("delete", "/missing"),
                ("list", "/"), ("exists", "/a-b"), ("delete", "/"), ("exists", "/"), ("list", "/"),
            ]
            for op in ops:
                await pair.run(op)
            await pair.compare_trees()
            await pair.close()
            assert await store.fsck() == []

    @pytest.mark.anyio
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
    )
    @given(ops=st.lists(_op, min_size=1, max_size=25))
    async def test_knowledge_random_sequences_match_oracle(self, memrev_location: str, ops: list[tuple]):
        # A branch with no commits is an empty store: one per example.
        async with VersionedStore(memrev_location, branch=_fresh_branch("ex")) as store:
            pair = _Pair(store)
            for op in ops:
                await pair.run(op)
            await pair.compare_trees()
            await pair.close()

    # ================================================================ (c) history

    @pytest.mark.anyio
    async def test_history_log_show_diff_and_reads_at_revisions(self, memrev_location: str):
        async with VersionedStore(memrev_location, author="alice") as s:
            assert await s.log() == [] and await s.head() is None
            await s.write("/notes/a.md", "v1", message="first", meta={"k": 1, "tags": ["x"]})
            c1 = await s.resolve("HEAD")
            assert await s.append("/notes/a.md", "+more") == 2
            await s.write("/notes/b.md", "b")
            c3 = await s.resolve("HEAD")
            await s.delete("/notes/b.md", message="drop b")
            await s.write("/x", "x")
            await s.write("/x", "x")  # identical: no commit
            await s.delete("/missing")  # nothing to delete: no commit
            log = await s.log()
            assert len(log) == 5, [c.message for c in log]
            assert [c.paths for c in log] == [("/x",), ("/notes/b.md",), ("/notes/b.md",), ("/notes/a.md",),
                                              ("/notes/a.md",)]
            assert log[-1].id == c1 and log[-1].parents == () and log[-1].message == "first"
            assert log[-1].meta == {"k": 1, "tags": ["x"]} and log[-1].author == "alice"
            assert all(log[i].parents == (log[i + 1].id,) for i in range(4))
            assert log[1].message == "drop b"
            assert await s.log(limit=2) == log[:2]
            assert await s.show() == log[0] and await s.show(c1[:7]) == log[-1]
            for c in log:
                assert await s.resolve(c.id[:9]) == c.id
            assert await s.resolve("HEAD~4") == c1 and await s.resolve("main~1") == log[1].id
            # per-path and per-directory log
            assert [c.id for c in await s.log("/notes/a.md")] == [log[3].id, log[4].id]
            assert [c.id for c in await s.log("/notes")] == [c.id for c in log[1:]]
            assert [size for _, size in await s.history("/notes/b.md")] == [None, 1]
            # reads at revisions
            assert await s.read("/notes/a.md", rev=c1) == "v1"
            assert await s.read("/notes/a.md", rev="HEAD~3") == "v1+more"
            assert await s.read_range("/notes/a.md", 2, 6, rev="HEAD~3") == "+mor"
            assert await s.list("/notes", rev=c3) == ["a.md", "b.md"]
            assert await s.list("/notes") == ["a.md"]
            assert await s.exists("/notes/b.md", rev=c3) and not await s.exists("/notes/b.md")
            assert await s.read("/x", rev=c1) is None
            view = s.at(c3)
            assert await view.read("/notes/b.md") == "b" and await view.list("/") == ["notes/"]
            with pytest.raises(errors.ReadOnlyRevision):
                await view.write("/y", "y")
            for bad in ("nope", "HEAD~9", "0000000"):
                with pytest.raises(errors.RevisionNotFound):
                    await s.read("/x", rev=bad)
            # diff
            changes = await s.diff(c1, "HEAD")
            assert [(c.path, c.status) for c in changes] == [("/notes/a.md", "modified"), ("/x", "added")]
            assert changes[0].old == "v1" and changes[0].new == "v1+more" and "+v1+more" in changes[0].diff
            assert [(c.path, c.status) for c in await s.diff(c3, "HEAD~1")] == [("/notes/b.md", "deleted")]
            assert await s.diff("HEAD", "HEAD") == []
            assert [c.path for c in await s.diff_from_empty("HEAD")] == ["/notes/a.md", "/x"]
            assert await s.fsck() == []

    @pytest.mark.anyio
    async def test_history_transactions_are_atomic(self, memrev_location: str):
        async with VersionedStore(memrev_location) as s, VersionedStore(memrev_location) as other:
            await s.write("/keep", "k")
            head = await s.head()
            with pytest.raises(RuntimeError):
                async with s.transaction("doomed"):
                    await s.write("/t/a", "1")
                    await s.append("/keep", "+")
                    assert await s.read("/keep") == "k+"
                    raise RuntimeError("abandon")
            assert await s.head() == head and await s.read("/keep") == "k" and await s.read("/t/a") is None
            async with s.transaction("both", meta={"n": 3}):
                await s.write("/t/a", "1")
                await s.write("/t/b", "2")
                await s.append("/keep", "+")
                await s.delete("/t/b")
                await s.write("/t/b", "3")
                assert await s.read("/t/a") == "1" and await s.list("/t") == ["a", "b"]
                assert await other.read("/t/a") is None, "another handle saw a staged change"
            log = await other.log()
            assert len(log) == 2 and log[0].message == "both" and log[0].meta == {"n": 3}
            assert log[0].paths == ("/keep", "/t/a", "/t/b")
            assert await other.read("/t/b") == "3" and await other.read("/keep") == "k+"
            # optimistic concurrency: a stale expect_head writes nothing
            with pytest.raises(errors.ConcurrentUpdate):
                async with s.transaction(expect_head=head):
                    await s.write("/t/c", "stale")
            assert await s.read("/t/c") is None and len(await s.log()) == 2
            async with s.transaction(expect_head=await s.head()):
                await s.write("/t/c", "fresh")
            assert await other.read("/t/c") == "fresh"
            # a commit that fails inside the backend transaction leaves no trace
            backend, before = s.repo.backend, await s.head()
            commits = len(list(backend.iter_commits()))

            write_commit = backend.write_commit

            def refuse(*args: Any) -> Any:  # the whole commit handed over, then a failure
                write_commit(*args)
                raise RuntimeError("backend failure at the last step of a commit")

            backend.write_commit = refuse  # type: ignore[method-assign,assignment]
            try:
                with pytest.raises(RuntimeError, match="last step"):
                    await s.write("/t/d", "never")
            finally:
                del backend.write_commit
            assert await other.head() == before and await other.read("/t/d") is None
            assert await s.read("/t/d") is None and await s.exists("/t/d") is False
            assert len(list(backend.iter_commits())) == commits
            await s.write("/t/d", "now")
            assert await other.read("/t/d") == "now"
            assert await s.fsck() == []

    @pytest.mark.anyio
    async def test_history_the_longest_names_and_paths_memrev_takes_are_stored(self, memrev_location: str):
        """Keys of the sizes memrev lets through (docs/backends.md, "Rows"): a branch and a tag
        of ``MAX_REF_NAME_BYTES`` (its deleted ref ~50 bytes longer), a path of ``MAX_PATH_BYTES``
        in that branch's head rows and in the change index. Random text, so nothing compresses."""
        import random
        import string

        from ..core.paths import MAX_PATH_BYTES
        from ..repo.revisions import MAX_REF_NAME_BYTES

        r = random.Random(7)
        name = "".join(r.choice(string.ascii_letters + string.digits) for _ in range(MAX_REF_NAME_BYTES))
        tag = name[::-1]
        wide = "".join(chr(r.randrange(0x10000, 0x10FFFF)) for _ in range((MAX_PATH_BYTES - 4) // 4))
        path = "/d/" + wide + "x" * (MAX_PATH_BYTES - 3 - len(wide.encode()))
        assert len(path.encode()) == MAX_PATH_BYTES
        async with VersionedStore(memrev_location) as s:
            await s.write("/a", "base")
            side = await s.branch(name)
            try:
                await side.write(path, "deep")
                await side.append(path, "er")
                assert await side.read(path) == "deeper" and len(await side.history(path)) == 2
            finally:
                side.close()
            assert (await s.merge(name)).status == "merged" and await s.read(path) == "deeper"
            assert await s.tag(tag, name) == await s.resolve(name)
            assert [c.id for c in await s.log("/d")] == [c.id for c in await s.log(path)]
            await s.delete_branch(name)
            assert name not in await s.branches() and await s.resolve(tag)
            assert len(s.repo.backend.list_refs("refs/deleted/")) == 1
            await s.reindex()
            assert len(await s.history(path)) == 3 and await s.fsck() == []

    @pytest.mark.anyio
    async def test_history_branch_merge_blame_round(self, memrev_location: str):
        async with VersionedStore(memrev_location, author="alice") as s:
            await s.write("/doc", "one\ntwo\nthree\n", message="base")
            base = await s.head()
            await s.tag("v1")
            side = await s.branch("side")
            try:
                assert side.branch_name == "side" and await side.read("/doc") == "one\ntwo\nthree\n"
                await side.write("/doc", "one\ntwo\nthree (side)\n", message="side edits line 3")
                await side.write("/side-only", "s", message="side file")
                side_head = await side.head()
                await s.write("/doc", "ONE\ntwo\nthree\n", message="main edits line 1")
                await s.write("/main-only", "m", message="main file")
                assert await s.read("/side-only") is None and await side.read("/main-only") is None
                assert set(await s.branches()) == {"main", "side"}
                result = await s.merge("side")
                assert result.status == "merged" and result.commit == await s.head()
                assert await s.read("/doc") == "ONE\ntwo\nthree (side)\n"
                assert await s.read("/side-only") == "s" and await s.read("/main-only") == "m"
                merge = await s.show()
                assert len(merge.parents) == 2 and merge.parents[1] == side_head
                assert (await s.merge("side")).status == "up-to-date"
                blame = [(line.number, line.text, line.commit.message) for line in await s.blame("/doc")]
                assert blame == [(1, "ONE", "main edits line 1"), (2, "two", "base"),
                                 (3, "three (side)", "side edits line 3")], blame
                assert [c.message for c in await s.log("/doc")] == [
                    merge.message, "main edits line 1", "side edits line 3", "base"]
                # a conflict writes nothing; a strategy settles it
                await side.write("/doc", "ONE\ntwo (side)\nthree (side)\n", message="side edits line 2")
                await s.write("/doc", "ONE\ntwo (main)\nthree (side)\n", message="main edits line 2")
                before = await s.head()
                with pytest.raises(errors.MergeConflict) as info:
                    await s.merge("side")
                assert [c.path for c in info.value.conflicts] == ["/doc"]
                assert await s.head() == before and await s.read("/doc") == "ONE\ntwo (main)\nthree (side)\n"
                await s.merge("side", strategy="theirs")
                assert await s.read("/doc") == "ONE\ntwo (side)\nthree (side)\n"
                assert (await s.blame("/doc"))[1].commit.message == "side edits line 2"
            finally:
                side.close()
            # tags, revert, restore
            assert await s.resolve("v1") == base and await s.read("/doc", rev="v1") == "one\ntwo\nthree\n"
            main_file = next(c for c in await s.log() if c.message == "main file")
            await s.revert(main_file.id)
            assert await s.read("/main-only") is None
            await s.restore("/doc", "v1")
            assert await s.read("/doc") == "one\ntwo\nthree\n"
            # a deleted branch's commits go at gc
            doomed = await s.branch("doomed")
            for i in range(3):
                await doomed.write(f"/tmp/{i}", "x" * 200 + str(i))
            doomed.close()
            await s.delete_branch("doomed")
            commits_before = len(await s.log())
            removed = await s.gc(keep_seconds=0)
            assert removed["commits"] == 3 and removed["blobs"] >= 3, removed
            assert len(await s.log()) == commits_before and set(await s.branches()) == {"main", "side"}
            assert await s.fsck() == []
            assert await s.read("/side-only") == "s"

    # ================================================================ (d) AutoGen memory

    @pytest.mark.anyio
    async def test_memory_matches_list_memory(self, memrev_location: str):
        from autogen_core.memory import ListMemory, MemoryContent, MemoryMimeType
        from autogen_core.model_context import UnboundedChatCompletionContext

        text, js = MemoryMimeType.TEXT, MemoryMimeType.JSON
        steps: list[Any] = [
            MemoryContent(content="likes tea", mime_type=text),
            MemoryContent(content={"city": "Lyon", "n": [1, 2]}, mime_type=js, metadata={"src": "chat"}),
            "check",
            MemoryContent(content="é 日本 😀", mime_type=text),
            "check",
            "clear",
            "check",
            MemoryContent(content="after clear", mime_type=text, metadata={"k": 1}),
            "check",
        ]
        async with VersionedStore(memrev_location) as store:
            for mine in (store.memory("conformance"), store):  # a named memory, and the store's default one
                oracle = ListMemory()
                checkpoints = []
                for step in steps:
                    if step == "clear":
                        await oracle.clear()
                        await mine.clear()
                    elif step == "check":
                        o, m = await oracle.query("q"), await mine.query("q")
                        assert [_canon(i) for i in m.results] == [_canon(i) for i in o.results]
                        o_ctx, m_ctx = UnboundedChatCompletionContext(), UnboundedChatCompletionContext()
                        o_res, m_res = await oracle.update_context(o_ctx), await mine.update_context(m_ctx)
                        assert await m_ctx.get_messages() == await o_ctx.get_messages()
                        assert [_canon(i) for i in m_res.memories.results] == [
                            _canon(i) for i in o_res.memories.results]
                        checkpoints.append((await store.resolve("HEAD"), [_canon(i) for i in o.results]))
                    else:
                        await oracle.add(step)
                        await mine.add(step)
                named = mine if mine is not store else store.memory()
                for rev, expected in checkpoints:  # each state stays readable at its revision
                    assert [_canon(i) for i in (await named.at(rev).query()).results] == expected
            assert await store.fsck() == []

    # ================================================================ (e) concurrency

    @pytest.mark.anyio
    async def test_concurrency_two_handles_interleaved(self, memrev_location: str):
        async with (
            VersionedStore(memrev_location, author="a") as a,
            VersionedStore(memrev_location, author="b", durability="full") as b,
        ):
            offsets = []
            for i in range(6):
                h = (a, b)[i % 2]
                await h.write(f"/{h.author}/{i}", str(i))
                offsets.append(await h.append("/shared.log", f"{h.author}{i}\n"))
            expected_log = "".join(f"{'ab'[i % 2]}{i}\n" for i in range(6))
            for h in (a, b):
                assert await h.read("/shared.log") == expected_log
                assert await h.list("/") == ["a/", "b/", "shared.log"]
            assert offsets == [expected_log.index(f"{'ab'[i % 2]}{i}\n") for i in range(6)]
            log = await a.log()
            assert len(log) == 12 and [c.author for c in log] == [x for i in range(5, -1, -1) for x in "ab"[i % 2] * 2]
            assert [c.id for c in await b.log()] == [c.id for c in log]
            assert await b.fsck() == []

    @pytest.mark.anyio
    async def test_concurrency_on_change_sees_commits_made_elsewhere(self, memrev_location: str):
        """A commit made without this handle (as by another process) reaches its subscribers."""
        async with VersionedStore(memrev_location, poll_interval=0.1) as s:
            got: list[str] = []

            async def record(path: str) -> None:
                got.append(path)

            sub = await s.on_change("/", record)
            await s.write("/own", "1")
            assert got == ["/own"], "a handle's own commit is delivered before the call returns"
            elsewhere = Repository(self.open_backend(memrev_location))
            try:
                elsewhere.commit("main", [Write("/far/x", b"1"), Delete("/own")], author="elsewhere")
            finally:
                elsewhere.backend.close()
            deadline = time.monotonic() + 10
            while len(got) < 3 and time.monotonic() < deadline:
                await anyio.sleep(0.02)
            assert sorted(got[1:]) == ["/far/x", "/own"], f"on_change received {got}"
            await sub.close()
            assert await s.read("/far/x") == "1" and await s.read("/own") is None

    def test_concurrency_two_handles_in_threads(self, memrev_location: str):
        n = 15
        barrier = threading.Barrier(2)

        def worker(name: str) -> int:
            async def run() -> int:
                async with VersionedStore(memrev_location, author=name) as s:
                    barrier.wait(30)
                    for i in range(n):
                        await s.append("/log", f"{name} {i}\n")
                        if i % 5 == 0:
                            await s.write(f"/{name}/{i}", str(i))
                    return len(await s.log())

            return anyio.run(run)

        threads = [_in_thread(lambda name=name: worker(name)) for name in ("p", "q")]
        for t, out in threads:
            _joined(t, out, "a committing thread", 120)

        async def check() -> None:
            async with VersionedStore(memrev_location) as s:
                text = await s.read("/log")
                assert text is not None, "the log both threads appended to is missing"
                lines = text.splitlines()
                assert Counter(lines) == Counter(f"{w} {i}" for w in "pq" for i in range(n)), lines
                for w in "pq":
                    assert [ln for ln in lines if ln.startswith(w)] == [f"{w} {i}" for i in range(n)]
                    assert await s.list(f"/{w}") == sorted(str(i) for i in range(0, n, 5))
                log = await s.log()
                assert len(log) == 2 * (n + len(range(0, n, 5)))
                assert all(len(c.parents) == 1 for c in log[:-1]) and log[-1].parents == ()
                assert await s.fsck() == []

        anyio.run(check)
