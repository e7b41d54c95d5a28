"""Differential tests: memrev's KnowledgeStore surface against ag2's oracle.

``ag2.knowledge.MemoryKnowledgeStore`` defines the semantics memrev promises
to match exactly (docs/api.md): path normalisation, implicit directories,
``list``/``delete``/``exists`` on directories, byte offsets of ``append``,
strict UTF-8 ``read_range`` and in-process ``on_change`` delivery before the
mutating call returns.

Every operation is run on both stores and the results compared: return
values, the *type* of any exception raised, and the multiset of change
notifications each subscription received during that operation.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from typing import Any

import pytest
from ag2.knowledge import MemoryKnowledgeStore
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memrev import VersionedStore

pytestmark = pytest.mark.anyio


# --------------------------------------------------------------------------
# Harness
# --------------------------------------------------------------------------


class Outcome:
    """The result of one call: a value or the type of the exception raised."""

    def __init__(self, value: Any = None, exc: BaseException | None = None) -> None:
        self.value = value
        self.exc = exc

    def __repr__(self) -> str:
        if self.exc is not None:
            return f"raised {type(self.exc).__name__}({self.exc!r})"
        return f"returned {self.value!r}"


async def _outcome(coro_fn, *args) -> Outcome:
    try:
        return Outcome(value=await coro_fn(*args))
    except Exception as e:  # noqa: BLE001 - we compare types
        return Outcome(exc=e)


def _same(oracle: Outcome, mem: Outcome) -> bool:
    if oracle.exc is not None or mem.exc is not None:
        if oracle.exc is None or mem.exc is None:
            return False
        return isinstance(mem.exc, type(oracle.exc))
    return type(oracle.value) is type(mem.value) and oracle.value == mem.value


class Recorder:
    """A change callback that records every path it is awaited with."""

    def __init__(self) -> None:
        self.paths: list[str] = []

    async def __call__(self, path: str) -> None:
        self.paths.append(path)

    def take(self) -> Counter:
        c = Counter(self.paths)
        self.paths.clear()
        return c


class Pair:
    """The oracle and a memrev store, driven in lock step."""

    def __init__(self, mem: VersionedStore) -> None:
        self.oracle = MemoryKnowledgeStore()
        self.mem = mem
        # (prefix, oracle recorder, memrev recorder, oracle sub, memrev sub)
        self.subs: list[tuple[str, Recorder, Recorder, Any, Any]] = []
        self.trace: list[str] = []

    async def call(self, name: str, *args: Any) -> Any:
        o = await _outcome(getattr(self.oracle, name), *args)
        m = await _outcome(getattr(self.mem, name), *args)
        self.trace.append(f"{name}{args!r}: oracle {o}, memrev {m}")
        assert _same(o, m), (
            f"{name}{args!r}: oracle {o} but memrev {m}\n  history:\n    " + "\n    ".join(self.trace)
        )
        self.check_notifications(f"{name}{args!r}")
        if o.exc is not None:
            return o.exc
        return o.value

    def check_notifications(self, what: str) -> None:
        for prefix, o_rec, m_rec, _, _ in self.subs:
            o_notes, m_notes = o_rec.take(), m_rec.take()
            assert o_notes == m_notes, (
                f"after {what}: on_change({prefix!r}) oracle got {sorted(o_notes.elements())} "
                f"but memrev got {sorted(m_notes.elements())} (notifications must be delivered "
                "before the mutating call returns)\n  history:\n    " + "\n    ".join(self.trace)
            )

    async def subscribe(self, prefix: str) -> None:
        o_rec, m_rec = Recorder(), Recorder()
        o_sub = await self.oracle.on_change(prefix, o_rec)
        m_sub = await self.mem.on_change(prefix, m_rec)
        self.trace.append(f"on_change({prefix!r})")
        self.subs.append((prefix, o_rec, m_rec, o_sub, m_sub))

    async def unsubscribe(self, index: int) -> None:
        if not self.subs:
            return
        prefix, _, _, o_sub, m_sub = self.subs.pop(index % len(self.subs))
        self.trace.append(f"close subscription on {prefix!r}")
        await o_sub.close()
        await m_sub.close()

    async def close_all(self) -> None:
        while self.subs:
            await self.unsubscribe(0)

    async def compare_trees(self) -> None:
        """Walk the whole tree of both stores and compare every listing and file."""
        o_tree = await _walk(self.oracle)
        m_tree = await _walk(self.mem)
        assert m_tree == o_tree, "final trees differ\n  history:\n    " + "\n    ".join(self.trace)


async def _walk(store: Any, path: str = "/", depth: int = 0) -> dict[str, Any]:
    out: dict[str, Any] = {}
    entries = await store.list(path)
    out[path + "/"] = entries
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


class _Stores:
    """``async with _Stores() as pair`` gives a fresh oracle + fresh memrev store."""

    mode: dict[str, Any] = {}  # set per run of this module by ``store_mode``

    def __init__(self, **kwargs: Any) -> None:
        self._kwargs = kwargs

    async def __aenter__(self) -> Pair:
        self._tmp = tempfile.TemporaryDirectory(prefix="memrev-diff-")
        self._store = VersionedStore(self._tmp.name, **{**self.mode, **self._kwargs})
        self._pair = Pair(self._store)
        return self._pair

    async def __aexit__(self, *exc: Any) -> None:
        try:
            await self._pair.close_all()
        finally:
            self._store.close()
            self._tmp.cleanup()


# The whole contract again with a working tree (issue 9): the folder's plain files must
# not change what the store answers.
STORE_MODES = {"plain": {}, "worktree": {"worktree": True}}


@pytest.fixture(scope="module", params=sorted(STORE_MODES), autouse=True)
def store_mode(request):
    _Stores.mode = STORE_MODES[request.param]
    yield request.param
    _Stores.mode = {}


# --------------------------------------------------------------------------
# Example-based tests, one group per method
# --------------------------------------------------------------------------


async def test_write_and_read_roundtrip_and_normalisation():
    async with _Stores() as p:
        await p.call("read", "/missing")
        await p.call("write", "/notes.md", "hello")
        await p.call("read", "/notes.md")
        # every spelling of the same path is the same key
        for spelling in ["notes.md", "//notes.md", "/notes.md/", "notes.md//", "///notes.md///"]:
            assert await p.call("read", spelling) == "hello"
        await p.call("write", "a//b///c/", "deep")
        for spelling in ["/a/b/c", "a/b/c", "/a//b/c", "a/b/c/"]:
            assert await p.call("read", spelling) == "deep"
        # overwrite, empty content is a file (not a missing one), non-ASCII text
        await p.call("write", "/notes.md", "")
        assert await p.call("read", "/notes.md") == ""
        assert await p.call("exists", "/notes.md") is True
        await p.call("write", "/notes.md", "é 日本 😀\nline 2\r\n")
        await p.call("read", "/notes.md")
        # a directory is not a file
        await p.call("read", "/a")
        await p.call("read", "/a/b")
        await p.call("read", "/")
        await p.compare_trees()


async def test_write_identical_content_behaves_like_a_write():
    async with _Stores() as p:
        await p.subscribe("/")
        await p.call("write", "/x", "same")
        # identical rewrite: no commit in memrev, but to a KnowledgeStore user it
        # is still a write (the oracle notifies again)
        await p.call("write", "/x", "same")
        await p.call("write", "x/", "same")
        await p.call("read", "/x")
        await p.call("write", "/e", "")
        await p.call("write", "/e", "")
        await p.call("read", "/e")
        await p.compare_trees()


async def test_list():
    async with _Stores() as p:
        await p.call("list", "/")
        await p.call("list", "")
        await p.call("list", "/nothing/here")
        files = ["/b.txt", "/a.txt", "/dir/x", "/dir/y/z", "/dir/y/w", "/dir2/q", "/é/1", "/日本/2", "/A", "/_/u", "/%/v"]
        for f in files:
            await p.call("write", f, f)
        for path in ["/", "", "//", "/dir", "dir", "/dir/", "dir//", "/dir/y", "/dir2", "/di", "/dir/x", "/é", "/_", "/%", "/nothing"]:
            await p.call("list", path)
        await p.compare_trees()


async def test_file_and_directory_with_the_same_name():
    async with _Stores() as p:
        await p.subscribe("/a")
        await p.call("write", "/a", "file a")
        await p.call("write", "/a/b", "file a/b")
        await p.call("write", "/ab", "file ab")
        await p.call("write", "/a-", "file a-")
        for path in ["/", "/a", "/a/", "/ab"]:
            await p.call("list", path)
        for path in ["/a", "/a/b", "/ab", "/a-"]:
            await p.call("read", path)
            await p.call("exists", path)
        # deleting "/a" deletes the file /a and everything under /a/ but not /ab, /a-
        await p.call("delete", "/a")
        for path in ["/a", "/a/b", "/ab", "/a-"]:
            await p.call("read", path)
            await p.call("exists", path)
        await p.call("list", "/")
        # and the other way round: write the file back over a directory
        await p.call("write", "/a/b/c", "c")
        await p.call("write", "/a", "back")
        await p.call("delete", "/a/b")
        await p.call("list", "/a")
        await p.call("read", "/a")
        await p.compare_trees()


async def test_prefixes_are_literal_and_case_sensitive():
    """``_``, ``%`` and case must not behave like SQL LIKE wildcards."""
    async with _Stores() as p:
        for f in ["/ab/x", "/a_/y", "/AB/z", "/a%/w", "/a/v", "/aXb/u"]:
            await p.call("write", f, f)
        await p.subscribe("/a_")
        await p.subscribe("/a%")
        await p.subscribe("/A")
        for path in ["/a_", "/a%", "/AB", "/ab", "/a", "/A", "/a%b"]:
            await p.call("list", path)
            await p.call("exists", path)
        await p.call("write", "/ab/x2", "1")
        await p.call("write", "/aB/x", "1")
        await p.call("append", "/a_/y", "2")
        await p.call("delete", "/a_")
        await p.call("delete", "/A")
        await p.call("delete", "/a%")
        await p.call("list", "/")
        await p.compare_trees()


async def test_delete():
    async with _Stores() as p:
        await p.subscribe("/")
        await p.call("delete", "/missing")  # no-op
        await p.call("delete", "/missing/deeper/")
        for f in ["/d/1", "/d/2", "/d/sub/3", "/d/sub/deeper/4", "/dx", "/keep"]:
            await p.call("write", f, "x")
        await p.call("delete", "/d/1")
        await p.call("list", "/d")
        await p.call("delete", "d/sub/")  # whole directory, trailing slash
        await p.call("list", "/d")
        await p.call("exists", "/d/sub")
        await p.call("delete", "/d")
        await p.call("exists", "/d")
        await p.call("exists", "/dx")
        await p.call("delete", "/d")  # again: no-op
        await p.call("write", "/d/again", "y")
        await p.call("read", "/d/again")
        await p.compare_trees()


async def test_large_directory():
    """More entries than fit one tree node: listing, prefixes and deletes still match."""
    async with _Stores() as p:
        await p.subscribe("/big/f01")
        await p.subscribe("/big")
        for i in range(80):
            await p.call("write", f"/big/f{i:02d}", str(i))
        await p.call("write", "/big/f01/sub", "s")
        await p.call("write", "/big-", "dash")
        for path in ["/", "/big", "/big/f01", "/big/f0"]:
            await p.call("list", path)
            await p.call("exists", path)
        for i in range(0, 80, 7):
            await p.call("append", f"/big/f{i:02d}", "+")
            await p.call("delete", f"/big/f{i + 1:02d}")
        await p.call("list", "/big")
        await p.compare_trees()
        await p.call("delete", "/big")
        await p.call("list", "/")
        await p.compare_trees()


async def test_unicode_paths_are_not_normalised():
    """NFC and NFD spellings are different keys, as in the oracle."""
    async with _Stores() as p:
        await p.call("write", "/\u00e9", "composed")
        await p.call("write", "/e\u0301", "decomposed")
        await p.call("write", "/\u00e9/x", "under composed")
        await p.call("list", "/")
        await p.call("read", "/\u00e9")
        await p.call("read", "/e\u0301")
        await p.call("delete", "/e\u0301")
        await p.call("list", "/")
        await p.call("exists", "/\u00e9")
        await p.compare_trees()


async def test_callbacks_that_write_back():
    """A callback may itself mutate the store (re-entrancy), as with the oracle."""
    async with _Stores() as p:
        for store in (p.oracle, p.mem):

            def make(store):
                async def echo(path: str) -> None:
                    if path.startswith("/in/"):
                        await store.append("/out/echo.log", path + "\n")

                return echo

            await store.on_change("/in", make(store))
        await p.subscribe("/")
        await p.call("write", "/in/a", "1")
        await p.call("append", "/in/b", "2")
        await p.call("delete", "/in")
        await p.call("read", "/out/echo.log")
        await p.compare_trees()


async def test_delete_root_removes_everything():
    async with _Stores() as p:
        await p.subscribe("/")
        for f in ["/a", "/b/c", "/b/d/e"]:
            await p.call("write", f, "x")
        await p.call("delete", "/")
        await p.call("list", "/")
        await p.call("exists", "/")
        await p.call("exists", "/a")
        await p.compare_trees()


async def test_exists():
    async with _Stores() as p:
        # the oracle says the root of an empty store does not exist
        for path in ["/", "", "//", "/x"]:
            await p.call("exists", path)
        await p.call("write", "/x/y/z", "1")
        for path in ["/", "", "/x", "x/", "/x/y", "/x/y/z", "/x/y/z/", "/x/y/zz", "/x/yy", "/x/", "/xy"]:
            await p.call("exists", path)
        await p.call("delete", "/x/y/z")
        for path in ["/", "/x", "/x/y", "/x/y/z"]:
            await p.call("exists", path)


async def test_append_offsets_are_utf8_bytes():
    async with _Stores() as p:
        await p.subscribe("/log")
        assert await p.call("append", "/log/s.jsonl", "abc\n") == 0
        assert await p.call("append", "log/s.jsonl", "é\n") == 4
        assert await p.call("append", "/log//s.jsonl/", "日本😀\n") == 7
        assert await p.call("append", "/log/s.jsonl", "") == 18
        await p.call("append", "/log/s.jsonl", "tail")
        await p.call("read", "/log/s.jsonl")
        # append after a write, append creating a file with empty content
        await p.call("write", "/w", "héllo")
        await p.call("append", "/w", " world")
        await p.call("append", "/empty", "")
        await p.call("exists", "/empty")
        await p.call("read", "/empty")
        await p.call("list", "/")
        await p.compare_trees()


async def test_concurrent_tasks_appending():
    """Like the oracle's lock: concurrent appends from many tasks never interleave
    or share an offset, and each offset reads back its own content."""
    import anyio

    with tempfile.TemporaryDirectory() as d:
        store = VersionedStore(d)
        try:
            results: list[tuple[str, int]] = []

            async def worker(w: int) -> None:
                for i in range(25):
                    line = f"w{w}-{i}-é\n"
                    results.append((line, await store.append("/c.log", line)))
                    await anyio.sleep(0)

            async with anyio.create_task_group() as tg:
                for w in range(8):
                    tg.start_soon(worker, w)
            data = (await store.read("/c.log")).encode()
            assert len({off for _, off in results}) == len(results) == 200
            for line, off in results:
                assert data[off : off + len(line.encode())] == line.encode()
                assert await store.read_range("/c.log", off, off + len(line.encode())) == line
            assert len(data) == sum(len(line.encode()) for line, _ in results)
            assert len(await store.log("/c.log")) == 200
        finally:
            store.close()


async def test_read_range():
    async with _Stores() as p:
        await p.call("write", "/f", "ab é 日本 😀 z")  # mixed 1-4 byte characters
        n = len("ab é 日本 😀 z".encode())
        for start in range(0, n + 3):
            for end in [None, *range(0, n + 3)]:
                # includes slices that cut a multi-byte character: both must
                # raise UnicodeDecodeError
                await p.call("read_range", "/f", start, end)
        await p.call("read_range", "/missing", 0, None)
        await p.call("read_range", "/missing", 0, 10)
        await p.call("read_range", "/", 0, None)
        await p.call("write", "/d/file", "x")
        await p.call("read_range", "/d", 0, None)
        await p.call("read_range", "d/file/", 0, 1)
        await p.call("write", "/empty", "")
        await p.call("read_range", "/empty", 0, None)
        await p.call("read_range", "/empty", 5, 10)


async def test_on_change_prefixes_and_close():
    async with _Stores() as p:
        await p.subscribe("/a")
        await p.subscribe("/a/")
        await p.subscribe("a/b")
        await p.subscribe("/")
        await p.subscribe("/ab")
        await p.subscribe("/a/b/c/d")  # below every write
        await p.call("write", "/a", "1")
        await p.call("write", "/a/b", "2")
        await p.call("write", "/ab", "3")
        await p.call("write", "/a/bc", "4")
        await p.call("append", "/a/b/c", "5")
        await p.call("write", "/a/b", "2")  # identical content: still notified
        await p.call("delete", "/a")  # one notification per deleted path
        await p.call("delete", "/a")  # no-op: no notifications
        await p.call("read", "/ab")
        await p.call("list", "/")
        await p.call("exists", "/ab")
        await p.call("read_range", "/ab", 0, None)
        await p.unsubscribe(3)  # "/"
        await p.call("write", "/zzz", "not watched by anyone now")
        await p.call("write", "/a/b", "x")
        await p.close_all()
        await p.call("write", "/a/b", "y")


async def test_on_change_two_callbacks_same_prefix_and_double_close():
    async with _Stores() as p:
        await p.subscribe("/p")
        await p.subscribe("/p")
        await p.call("write", "/p/x", "1")
        sub = p.subs[0]
        await p.unsubscribe(0)
        # closing twice is harmless
        await sub[3].close()
        await sub[4].close()
        await p.call("write", "/p/x", "2")


async def test_on_change_own_commits_not_redelivered_by_poller():
    """Own-process commits are delivered once, not again when the poller sees them."""
    import anyio

    async with _Stores(poll_interval=0.05) as p:
        await p.subscribe("/")
        await p.call("write", "/x", "1")
        await p.call("append", "/y", "2")
        await p.call("delete", "/x")
        await anyio.sleep(0.4)
        p.check_notifications("waiting 0.4 s with poll_interval=0.05")


# --------------------------------------------------------------------------
# Random operation sequences
# --------------------------------------------------------------------------

# A small alphabet so that files, directories and prefixes collide, with a few
# characters that break naive implementations (SQL LIKE wildcards, case
# folding, multi-byte path segments, "a-" sorting before "a/").
SEGMENTS = ["a", "a", "a", "b", "b", "ab", "ab", "a_", "A", "%", "a-", "é"]

_segment = st.sampled_from(SEGMENTS)


@st.composite
def _path(draw: st.DrawFn, allow_root: bool = False) -> str:
    if allow_root and draw(st.integers(0, 11)) == 0:
        return draw(st.sampled_from(["", "/", "//"]))
    segs = draw(st.lists(_segment, min_size=1, max_size=3))
    out = draw(st.sampled_from(["/", "/", "/", "", "//"])) + segs[0]
    for s in segs[1:]:
        out += draw(st.sampled_from(["/", "/", "/", "/", "//"])) + s
    out += draw(st.sampled_from(["", "", "", "", "/", "//"]))
    return out


_content = st.one_of(
    st.sampled_from(["", "x", "é", "日本", "😀", "line\n", "xé日😀\n"]),
    st.text(alphabet=st.sampled_from(["x", "y", "\n", "é", "日", "😀"]), max_size=5),
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
    st.tuples(
        st.just("read_range"),
        _path(),
        st.integers(-3, 14),
        st.one_of(st.none(), st.integers(-3, 16)),
    ),
    st.tuples(st.just("subscribe"), _path(allow_root=True)),
    st.tuples(st.just("unsubscribe"), st.integers(0, 7)),
)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(ops=st.lists(_op, min_size=1, max_size=40))
async def test_random_sequences_match_oracle(ops):
    async with _Stores() as p:
        for op in ops:
            name, *args = op
            if name == "subscribe":
                await p.subscribe(*args)
            elif name == "unsubscribe":
                await p.unsubscribe(*args)
            else:
                await p.call(name, *args)
        await p.compare_trees()


_chunk = st.text(alphabet=st.sampled_from(["a", "\n", "é", "日", "😀"]), max_size=6)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ops=st.lists(
        st.one_of(
            st.tuples(st.just("append"), _chunk),
            st.tuples(st.just("append"), _chunk),
            st.tuples(st.just("append"), _chunk),
            st.tuples(st.just("write"), _chunk),
            st.tuples(st.just("delete")),
        ),
        min_size=1,
        max_size=60,
    ),
    ranges=st.lists(
        st.tuples(st.integers(-5, 200), st.one_of(st.none(), st.integers(-5, 200))), max_size=25
    ),
)
async def test_random_appends_and_read_ranges(ops, ranges):
    """Long append runs (stored as pieces) read back byte-exactly, at any offsets."""
    async with _Stores() as p:
        for i, op in enumerate(ops):
            if op[0] == "append":
                await p.call("append", "/log", op[1])
            elif op[0] == "write":
                await p.call("write", "/log", op[1])
            else:
                await p.call("delete", "/log")
            if i % 10 == 9:
                await p.call("read", "/log")
        await p.call("read", "/log")
        for start, end in ranges:
            await p.call("read_range", "/log", start, end)


_handle_op = st.tuples(st.integers(0, 1), _op.filter(lambda op: op[0] not in ("subscribe", "unsubscribe")))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(ops=st.lists(_handle_op, min_size=1, max_size=30))
async def test_two_handles_on_one_folder_behave_as_one_store(ops):
    """Two VersionedStore handles on the same folder, used alternately, answer
    like one oracle: nothing stale is served from one handle's caches."""
    with tempfile.TemporaryDirectory(prefix="memrev-diff2-") as d:
        h0, h1 = VersionedStore(d), VersionedStore(d)
        try:
            oracle = MemoryKnowledgeStore()
            trace: list[str] = []
            for which, (name, *args) in ops:
                o = await _outcome(getattr(oracle, name), *args)
                m = await _outcome(getattr((h0, h1)[which], name), *args)
                trace.append(f"h{which}.{name}{args!r}: oracle {o}, memrev {m}")
                assert _same(o, m), "\n".join(trace)
            assert await _walk(h0) == await _walk(oracle)
            assert await _walk(h1) == await _walk(oracle)
        finally:
            h0.close()
            h1.close()
