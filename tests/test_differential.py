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
from typing import Any

import pytest
from ag2.knowledge import MemoryKnowledgeStore
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memrev import VersionedStore
from memrev.testing.conformance.oracle import OraclePair, outcome, same_outcome, walk_tree

pytestmark = pytest.mark.anyio


# --------------------------------------------------------------------------
# Harness: the conformance suite's oracle pair (memrev.testing.conformance),
# which runs every call on both stores and compares results, exception types
# and the on_change notifications each subscription received.
# --------------------------------------------------------------------------


class _Stores:
    """``async with _Stores() as pair`` gives a fresh oracle + fresh memrev store."""

    mode: dict[str, Any] = {}  # set per run of this module by ``store_mode``

    def __init__(self, **kwargs: Any) -> None:
        self._kwargs = kwargs

    async def __aenter__(self) -> OraclePair:
        self._tmp = tempfile.TemporaryDirectory(prefix="memrev-diff-")
        self._store = VersionedStore(self._tmp.name, **{**self.mode, **self._kwargs})
        self._pair = OraclePair(self._store)
        return self._pair

    async def __aexit__(self, *exc: Any) -> None:
        try:
            await self._pair.close()
        finally:
            self._store.close()
            self._tmp.cleanup()


# The whole contract again with a working tree (issue 9): the folder's plain files must
# not change what the store answers.
STORE_MODES = {"plain": {}, "worktree": {"worktree": True}}


# With a working tree every test takes longer (files on disk, their watcher): out of the quick loop.
@pytest.fixture(scope="module", params=["plain", pytest.param("worktree", marks=pytest.mark.slow)], autouse=True)
def store_mode(request):
    _Stores.mode = STORE_MODES[request.param]
    yield request.param
    _Stores.mode = {}


# --------------------------------------------------------------------------
# Example-based tests, one group per method
# --------------------------------------------------------------------------


async def test_write_and_read_roundtrip_and_normalisation():
    async with _Stores() as p:
        await p.run(("read", "/missing"))
        await p.run(("write", "/notes.md", "hello"))
        await p.run(("read", "/notes.md"))
        # every spelling of the same path is the same key
        for spelling in ["notes.md", "//notes.md", "/notes.md/", "notes.md//", "///notes.md///"]:
            assert await p.run(("read", spelling)) == "hello"
        await p.run(("write", "a//b///c/", "deep"))
        for spelling in ["/a/b/c", "a/b/c", "/a//b/c", "a/b/c/"]:
            assert await p.run(("read", spelling)) == "deep"
        # overwrite, empty content is a file (not a missing one), non-ASCII text
        await p.run(("write", "/notes.md", ""))
        assert await p.run(("read", "/notes.md")) == ""
        assert await p.run(("exists", "/notes.md")) is True
        await p.run(("write", "/notes.md", "é 日本 😀\nline 2\r\n"))
        await p.run(("read", "/notes.md"))
        # a directory is not a file
        await p.run(("read", "/a"))
        await p.run(("read", "/a/b"))
        await p.run(("read", "/"))
        await p.compare_trees()


async def test_write_identical_content_behaves_like_a_write():
    async with _Stores() as p:
        await p.run(("subscribe", "/"))
        await p.run(("write", "/x", "same"))
        # identical rewrite: no commit in memrev, but to a KnowledgeStore user it
        # is still a write (the oracle notifies again)
        await p.run(("write", "/x", "same"))
        await p.run(("write", "x/", "same"))
        await p.run(("read", "/x"))
        await p.run(("write", "/e", ""))
        await p.run(("write", "/e", ""))
        await p.run(("read", "/e"))
        await p.compare_trees()


async def test_list():
    async with _Stores() as p:
        await p.run(("list", "/"))
        await p.run(("list", ""))
        await p.run(("list", "/nothing/here"))
        files = ["/b.txt", "/a.txt", "/dir/x", "/dir/y/z", "/dir/y/w", "/dir2/q", "/é/1", "/日本/2", "/A", "/_/u", "/%/v"]
        for f in files:
            await p.run(("write", f, f))
        for path in ["/", "", "//", "/dir", "dir", "/dir/", "dir//", "/dir/y", "/dir2", "/di", "/dir/x", "/é", "/_", "/%", "/nothing"]:
            await p.run(("list", path))
        await p.compare_trees()


async def test_file_and_directory_with_the_same_name():
    async with _Stores() as p:
        await p.run(("subscribe", "/a"))
        await p.run(("write", "/a", "file a"))
        await p.run(("write", "/a/b", "file a/b"))
        await p.run(("write", "/ab", "file ab"))
        await p.run(("write", "/a-", "file a-"))
        for path in ["/", "/a", "/a/", "/ab"]:
            await p.run(("list", path))
        for path in ["/a", "/a/b", "/ab", "/a-"]:
            await p.run(("read", path))
            await p.run(("exists", path))
        # deleting "/a" deletes the file /a and everything under /a/ but not /ab, /a-
        await p.run(("delete", "/a"))
        for path in ["/a", "/a/b", "/ab", "/a-"]:
            await p.run(("read", path))
            await p.run(("exists", path))
        await p.run(("list", "/"))
        # and the other way round: write the file back over a directory
        await p.run(("write", "/a/b/c", "c"))
        await p.run(("write", "/a", "back"))
        await p.run(("delete", "/a/b"))
        await p.run(("list", "/a"))
        await p.run(("read", "/a"))
        await p.compare_trees()


async def test_delete():
    async with _Stores() as p:
        await p.run(("subscribe", "/"))
        await p.run(("delete", "/missing"))  # no-op
        await p.run(("delete", "/missing/deeper/"))
        for f in ["/d/1", "/d/2", "/d/sub/3", "/d/sub/deeper/4", "/dx", "/keep"]:
            await p.run(("write", f, "x"))
        await p.run(("delete", "/d/1"))
        await p.run(("list", "/d"))
        await p.run(("delete", "d/sub/"))  # whole directory, trailing slash
        await p.run(("list", "/d"))
        await p.run(("exists", "/d/sub"))
        await p.run(("delete", "/d"))
        await p.run(("exists", "/d"))
        await p.run(("exists", "/dx"))
        await p.run(("delete", "/d"))  # again: no-op
        await p.run(("write", "/d/again", "y"))
        await p.run(("read", "/d/again"))
        await p.compare_trees()


async def test_large_directory():
    """More entries than fit one tree node: listing, prefixes and deletes still match."""
    async with _Stores() as p:
        await p.run(("subscribe", "/big/f01"))
        await p.run(("subscribe", "/big"))
        for i in range(80):
            await p.run(("write", f"/big/f{i:02d}", str(i)))
        await p.run(("write", "/big/f01/sub", "s"))
        await p.run(("write", "/big-", "dash"))
        for path in ["/", "/big", "/big/f01", "/big/f0"]:
            await p.run(("list", path))
            await p.run(("exists", path))
        for i in range(0, 80, 7):
            await p.run(("append", f"/big/f{i:02d}", "+"))
            await p.run(("delete", f"/big/f{i + 1:02d}"))
        await p.run(("list", "/big"))
        await p.compare_trees()
        await p.run(("delete", "/big"))
        await p.run(("list", "/"))
        await p.compare_trees()


async def test_unicode_paths_are_not_normalised():
    """NFC and NFD spellings are different keys, as in the oracle."""
    async with _Stores() as p:
        await p.run(("write", "/\u00e9", "composed"))
        await p.run(("write", "/e\u0301", "decomposed"))
        await p.run(("write", "/\u00e9/x", "under composed"))
        await p.run(("list", "/"))
        await p.run(("read", "/\u00e9"))
        await p.run(("read", "/e\u0301"))
        await p.run(("delete", "/e\u0301"))
        await p.run(("list", "/"))
        await p.run(("exists", "/\u00e9"))
        await p.compare_trees()


async def test_callbacks_that_write_back():
    """A callback may itself mutate the store (re-entrancy), as with the oracle."""
    async with _Stores() as p:
        for store in (p.oracle, p.mine):

            def make(store):
                async def echo(path: str) -> None:
                    if path.startswith("/in/"):
                        await store.append("/out/echo.log", path + "\n")

                return echo

            await store.on_change("/in", make(store))
        await p.run(("subscribe", "/"))
        await p.run(("write", "/in/a", "1"))
        await p.run(("append", "/in/b", "2"))
        await p.run(("delete", "/in"))
        await p.run(("read", "/out/echo.log"))
        await p.compare_trees()


async def test_delete_root_removes_everything():
    async with _Stores() as p:
        await p.run(("subscribe", "/"))
        for f in ["/a", "/b/c", "/b/d/e"]:
            await p.run(("write", f, "x"))
        await p.run(("delete", "/"))
        await p.run(("list", "/"))
        await p.run(("exists", "/"))
        await p.run(("exists", "/a"))
        await p.compare_trees()


async def test_exists():
    async with _Stores() as p:
        # the oracle says the root of an empty store does not exist
        for path in ["/", "", "//", "/x"]:
            await p.run(("exists", path))
        await p.run(("write", "/x/y/z", "1"))
        for path in ["/", "", "/x", "x/", "/x/y", "/x/y/z", "/x/y/z/", "/x/y/zz", "/x/yy", "/x/", "/xy"]:
            await p.run(("exists", path))
        await p.run(("delete", "/x/y/z"))
        for path in ["/", "/x", "/x/y", "/x/y/z"]:
            await p.run(("exists", path))


async def test_append_offsets_are_utf8_bytes():
    async with _Stores() as p:
        await p.run(("subscribe", "/log"))
        assert await p.run(("append", "/log/s.jsonl", "abc\n")) == 0
        assert await p.run(("append", "log/s.jsonl", "é\n")) == 4
        assert await p.run(("append", "/log//s.jsonl/", "日本😀\n")) == 7
        assert await p.run(("append", "/log/s.jsonl", "")) == 18
        await p.run(("append", "/log/s.jsonl", "tail"))
        await p.run(("read", "/log/s.jsonl"))
        # append after a write, append creating a file with empty content
        await p.run(("write", "/w", "héllo"))
        await p.run(("append", "/w", " world"))
        await p.run(("append", "/empty", ""))
        await p.run(("exists", "/empty"))
        await p.run(("read", "/empty"))
        await p.run(("list", "/"))
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
        await p.run(("write", "/f", "ab é 日本 😀 z"))  # mixed 1-4 byte characters
        n = len("ab é 日本 😀 z".encode())
        for start in range(0, n + 3):
            for end in [None, *range(0, n + 3)]:
                # includes slices that cut a multi-byte character: both must
                # raise UnicodeDecodeError
                await p.run(("read_range", "/f", start, end))
        await p.run(("read_range", "/missing", 0, None))
        await p.run(("read_range", "/missing", 0, 10))
        await p.run(("read_range", "/", 0, None))
        await p.run(("write", "/d/file", "x"))
        await p.run(("read_range", "/d", 0, None))
        await p.run(("read_range", "d/file/", 0, 1))
        await p.run(("write", "/empty", ""))
        await p.run(("read_range", "/empty", 0, None))
        await p.run(("read_range", "/empty", 5, 10))


async def test_on_change_prefixes_and_close():
    async with _Stores() as p:
        await p.run(("subscribe", "/a"))
        await p.run(("subscribe", "/a/"))
        await p.run(("subscribe", "a/b"))
        await p.run(("subscribe", "/"))
        await p.run(("subscribe", "/ab"))
        await p.run(("subscribe", "/a/b/c/d"))  # below every write
        await p.run(("write", "/a", "1"))
        await p.run(("write", "/a/b", "2"))
        await p.run(("write", "/ab", "3"))
        await p.run(("write", "/a/bc", "4"))
        await p.run(("append", "/a/b/c", "5"))
        await p.run(("write", "/a/b", "2"))  # identical content: still notified
        await p.run(("delete", "/a"))  # one notification per deleted path
        await p.run(("delete", "/a"))  # no-op: no notifications
        await p.run(("read", "/ab"))
        await p.run(("list", "/"))
        await p.run(("exists", "/ab"))
        await p.run(("read_range", "/ab", 0, None))
        await p.run(("unsubscribe", 3))  # "/"
        await p.run(("write", "/zzz", "not watched by anyone now"))
        await p.run(("write", "/a/b", "x"))
        await p.close()
        await p.run(("write", "/a/b", "y"))


async def test_on_change_two_callbacks_same_prefix_and_double_close():
    async with _Stores() as p:
        await p.run(("subscribe", "/p"))
        await p.run(("subscribe", "/p"))
        await p.run(("write", "/p/x", "1"))
        sub = p.subs[0]
        await p.run(("unsubscribe", 0))
        # closing twice is harmless
        await sub[3].close()
        await sub[4].close()
        await p.run(("write", "/p/x", "2"))


@pytest.mark.slow  # measured >= 0.3 s: kept out of the quick loop
async def test_on_change_own_commits_not_redelivered_by_poller():
    """Own-process commits are delivered once, not again when the poller sees them."""
    import anyio

    async with _Stores(poll_interval=0.05) as p:
        await p.run(("subscribe", "/"))
        await p.run(("write", "/x", "1"))
        await p.run(("append", "/y", "2"))
        await p.run(("delete", "/x"))
        await anyio.sleep(0.4)
        await p.run(("exists", "/x"))  # compares what each subscription got since the last call


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


@pytest.mark.slow
@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(ops=st.lists(_op, min_size=1, max_size=40))
async def test_random_sequences_match_oracle(ops):
    async with _Stores() as p:
        for op in ops:
            await p.run(op)
        await p.compare_trees()


_chunk = st.text(alphabet=st.sampled_from(["a", "\n", "é", "日", "😀"]), max_size=6)


@pytest.mark.slow
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
                await p.run(("append", "/log", op[1]))
            elif op[0] == "write":
                await p.run(("write", "/log", op[1]))
            else:
                await p.run(("delete", "/log"))
            if i % 10 == 9:
                await p.run(("read", "/log"))
        await p.run(("read", "/log"))
        for start, end in ranges:
            await p.run(("read_range", "/log", start, end))


_handle_op = st.tuples(st.integers(0, 1), _op.filter(lambda op: op[0] not in ("subscribe", "unsubscribe")))


@pytest.mark.slow
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
                o = await outcome(getattr(oracle, name), *args)
                m = await outcome(getattr((h0, h1)[which], name), *args)
                trace.append(f"h{which}.{name}{args!r}: oracle {o}, memrev {m}")
                assert same_outcome(o, m), "\n".join(trace)
            assert await walk_tree(h0) == await walk_tree(oracle)
            assert await walk_tree(h1) == await walk_tree(oracle)
        finally:
            h0.close()
            h1.close()
