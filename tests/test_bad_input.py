"""Bad input is refused with memrev's own errors, and refusing writes nothing.

Paths with control characters, ``..`` segments or of the wrong type raise
``memrev.InvalidPath`` (a ``ValueError``); content that is not ``str`` raises
``memrev.InvalidContent`` (a ``TypeError``); a revision naming no commit
raises ``memrev.RevisionNotFound`` (a ``KeyError``); a location holding
something that is not a memrev store raises ``memrev.NotAMemrevStore`` and
one written by a newer schema ``memrev.SchemaTooNew``. A failed
``transaction()`` commits nothing.
"""

from __future__ import annotations

import os
import sqlite3
import tempfile
from pathlib import Path

import pytest

import memrev
from memrev import VersionedStore

pytestmark = pytest.mark.anyio


BAD_PATHS = [
    "\x00",
    "/a\x00b",
    "/notes\x00.md",
    "\n",
    "/a\nb",
    "/a/b\n",
    "\r",
    "/tab\there",
    "/esc\x1b[31m",
    "\x7f",
    "/del\x7f",
    "/\x01",
    "/a\x85b",  # C1 controls are control characters too (Unicode category Cc)
    "/csi\x9b31m",
    "/..",
    "..",
    "/a/../b",
    "a/..",
    "../etc/passwd",
    "/a/b/../../keep",
    "/a//..//keep",
    "/a/../",
    None,
    123,
    1.5,
    b"/bytes",
    ["/a"],
    ("/a",),
    {"path": "/a"},
]

BAD_CONTENT = [b"bytes", bytearray(b"x"), None, 0, 42, 1.0, ["x"], {"a": 1}, object()]


def _ids(values):
    return [repr(v)[:30] for v in values]


class _Seeded:
    """A store with known content, and helpers to check nothing changed."""

    async def __aenter__(self) -> _Seeded:
        self._tmp = tempfile.TemporaryDirectory(prefix="memrev-bad-")
        self.store = VersionedStore(self._tmp.name)
        await self.store.write("/keep", "kept")
        await self.store.write("/a/b", "ab")
        await self.store.append("/log", "line 1\n")
        self.notes: list[str] = []

        async def cb(path: str) -> None:
            self.notes.append(path)

        self.sub = await self.store.on_change("/", cb)
        self.before = await self._snapshot()
        return self

    async def _snapshot(self):
        s = self.store
        log = await s.log()
        return (
            len(log),
            log[0].id,
            await s.list("/"),
            await s.list("/a"),
            await s.read("/keep"),
            await s.read("/a/b"),
            await s.read("/log"),
        )

    async def assert_unchanged(self, what: str) -> None:
        after = await self._snapshot()
        assert after == self.before, f"{what} changed the store: {self.before} -> {after}"
        assert self.notes == [], f"{what} notified on_change subscribers: {self.notes}"

    async def __aexit__(self, *exc) -> None:
        try:
            await self.sub.close()
        finally:
            self.store.close()
            self._tmp.cleanup()


# --------------------------------------------------------------------------
# Invalid paths
# --------------------------------------------------------------------------


@pytest.mark.parametrize("path", BAD_PATHS, ids=_ids(BAD_PATHS))
@pytest.mark.parametrize("method", ["write", "append", "delete"])
async def test_invalid_path_on_mutation_raises_and_writes_nothing(method, path):
    async with _Seeded() as s:
        args = {"write": (path, "content"), "append": (path, "content"), "delete": (path,)}[method]
        with pytest.raises(memrev.InvalidPath) as ei:
            await getattr(s.store, method)(*args)
        assert isinstance(ei.value, ValueError)
        assert isinstance(ei.value, memrev.MemrevError)
        await s.assert_unchanged(f"{method}{args!r}")


@pytest.mark.parametrize("path", BAD_PATHS, ids=_ids(BAD_PATHS))
async def test_invalid_path_on_queries_raises(path):
    async with _Seeded() as s:
        st = s.store
        calls = {
            "read": lambda: st.read(path),
            "list": lambda: st.list(path),
            "exists": lambda: st.exists(path),
            "read_range": lambda: st.read_range(path, 0, None),
            "log": lambda: st.log(path),
        }
        if path is None:
            del calls["log"]  # log(None) is the whole history
        for name, call in calls.items():
            with pytest.raises(memrev.InvalidPath):
                await call()
                pytest.fail(f"{name}({path!r}) did not raise InvalidPath")
        await s.assert_unchanged("queries")


@pytest.mark.parametrize("path", BAD_PATHS, ids=_ids(BAD_PATHS))
async def test_invalid_path_on_change_raises(path):
    async with _Seeded() as s:

        async def cb(p: str) -> None:  # pragma: no cover - never called
            pass

        with pytest.raises(memrev.InvalidPath):
            sub = await s.store.on_change(path, cb)
            await sub.close()


async def test_invalid_path_inside_transaction_commits_nothing():
    async with _Seeded() as s:
        with pytest.raises(memrev.InvalidPath):
            async with s.store.transaction(message="bad"):
                await s.store.write("/t/ok", "fine")
                await s.store.write("/t/\x00", "bad")
        await s.assert_unchanged("transaction with an invalid path")
        assert await s.store.read("/t/ok") is None


async def test_valid_unusual_paths_are_accepted():
    """Only control characters and '..' are refused: these are ordinary names."""
    async with _Seeded() as s:
        for path in ["/a b", "/é/日本/😀", "/.hidden", "/a/.../b", "/..x", "/x..", "/a.b/c", "/%_*?[]"]:
            await s.store.write(path, path)
            assert await s.store.read(path) == path


# --------------------------------------------------------------------------
# Invalid content
# --------------------------------------------------------------------------


@pytest.mark.parametrize("content", BAD_CONTENT, ids=_ids(BAD_CONTENT))
@pytest.mark.parametrize("method", ["write", "append"])
@pytest.mark.parametrize("path", ["/keep", "/new/file", "/log"])
async def test_non_str_content_raises_type_error_and_writes_nothing(method, content, path):
    async with _Seeded() as s:
        with pytest.raises(TypeError) as ei:
            await getattr(s.store, method)(path, content)
        assert isinstance(ei.value, memrev.InvalidContent), f"raised {type(ei.value)!r}, not InvalidContent"
        await s.assert_unchanged(f"{method}({path!r}, {content!r})")
        assert await s.store.exists("/new") is False


@pytest.mark.parametrize("method", ["write", "append"])
async def test_unencodable_text_raises_invalid_content(method):
    """A lone surrogate cannot be stored as UTF-8: InvalidContent, nothing written."""
    async with _Seeded() as s:
        with pytest.raises(memrev.InvalidContent):
            await getattr(s.store, method)("/keep", "ok \ud800 bad")
        await s.assert_unchanged(f"{method} of a lone surrogate")


async def test_invalid_content_inside_transaction_commits_nothing():
    async with _Seeded() as s:
        with pytest.raises(TypeError):
            async with s.store.transaction(message="bad"):
                await s.store.write("/t/ok", "fine")
                await s.store.append("/log", b"bytes")
        await s.assert_unchanged("transaction with invalid content")


# --------------------------------------------------------------------------
# Unknown revisions
# --------------------------------------------------------------------------

MISSING_REVS = [
    "deadbeef00",
    "deadbeef",
    "0000000",
    "0" * 40,
    "f" * 40,
    "nosuchbranch",
    "HEAD~999",
    "main~999",
    "HEAD~3",  # the seeded store has exactly 3 commits: HEAD~2 is the first
    "nosuchbranch~1",
    "deadbeef00~1",
    "HEAD~" + "9" * 30,  # far beyond any history, and beyond 64-bit integers
    "HEAD~-1",
    "",
    "~1",
    "head",
]


@pytest.mark.parametrize("rev", MISSING_REVS)
async def test_unknown_revision_raises_revision_not_found(rev):
    async with _Seeded() as s:
        st = s.store
        assert len(await st.log()) == 3
        calls = {
            "read": lambda: st.read("/keep", rev=rev),
            "list": lambda: st.list("/", rev=rev),
            "exists": lambda: st.exists("/keep", rev=rev),
            "read_range": lambda: st.read_range("/log", 0, None, rev=rev),
            "log": lambda: st.log(rev=rev),
            "show": lambda: st.show(rev),
            "resolve": lambda: st.resolve(rev),
            "diff(rev, HEAD)": lambda: st.diff(rev, "HEAD"),
            "diff(HEAD, rev)": lambda: st.diff("HEAD", rev),
        }
        for name, call in calls.items():
            try:
                result = await call()
            except memrev.RevisionNotFound as e:
                assert isinstance(e, KeyError)
                assert isinstance(e, memrev.MemrevError)
                assert str(e), f"{name}: empty message"
            except Exception as e:  # noqa: BLE001
                pytest.fail(f"{name} with rev={rev!r} raised {type(e).__name__}: {e}, not RevisionNotFound")
            else:
                pytest.fail(f"{name} with rev={rev!r} returned {result!r}, not RevisionNotFound")
        await s.assert_unchanged("unknown revisions")


async def test_head_of_empty_store_is_not_found():
    with tempfile.TemporaryDirectory() as d:
        store = VersionedStore(d)
        try:
            assert await store.log() == []
            for rev in ["HEAD", "main"]:
                with pytest.raises(memrev.RevisionNotFound):
                    await store.resolve(rev)
                with pytest.raises(memrev.RevisionNotFound):
                    await store.read("/x", rev=rev)
        finally:
            store.close()


async def test_short_prefix_is_not_a_revision():
    """A prefix shorter than 7 hex characters does not name a commit."""
    async with _Seeded() as s:
        full = (await s.store.log())[0].id
        with pytest.raises(memrev.RevisionNotFound):
            await s.store.read("/keep", rev=full[:4])
        assert await s.store.read("/keep", rev=full[:7]) == "kept"


# --------------------------------------------------------------------------
# Things that are not memrev stores
# --------------------------------------------------------------------------


def _open_and_use(location: str) -> None:
    """Open a store and use it; whichever step detects the problem raises."""
    import anyio

    async def go() -> None:
        store = VersionedStore(location)
        try:
            await store.read("/x")
            await store.write("/x", "y")
        finally:
            store.close()

    anyio.run(go)


def _expect_refusal(location: str, error: type[Exception]) -> Exception:
    with pytest.raises(error) as ei:
        _open_and_use(location)
    e = ei.value
    assert isinstance(e, memrev.MemrevError)
    assert not isinstance(e, sqlite3.Error), "raw sqlite3 error leaked"
    assert str(e).strip(), "empty message"
    return e


@pytest.mark.parametrize(
    "payload",
    [
        os.urandom(4096),
        os.urandom(37),
        b"hello, I am a text file\n" * 10,
        b"SQLite format 2\x00" + bytes(200),
        b"\x00" * 1024 + b"x",
    ],
    ids=["random-4k", "random-37", "text", "near-header", "zeros"],
)
@pytest.mark.parametrize("form", ["folder", "url"])
def test_non_sqlite_file_is_not_a_memrev_store(tmp_path: Path, payload: bytes, form: str):
    db = tmp_path / "memrev.db"
    db.write_bytes(payload)
    # db is absolute, so this is "sqlite:///abs/path/memrev.db"
    location = str(tmp_path) if form == "folder" else f"sqlite://{db}"
    _expect_refusal(location, memrev.NotAMemrevStore)
    assert db.read_bytes() == payload, "the foreign file was modified"


@pytest.mark.parametrize("form", ["folder", "url"])
def test_sqlite_database_of_another_app_is_not_a_memrev_store(tmp_path: Path, form: str):
    db = tmp_path / "memrev.db"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE foo(x INTEGER)")
    conn.execute("INSERT INTO foo VALUES (1), (2)")
    conn.commit()
    conn.close()
    # db is absolute, so this is "sqlite:///abs/path/memrev.db"
    location = str(tmp_path) if form == "folder" else f"sqlite://{db}"
    e = _expect_refusal(location, memrev.NotAMemrevStore)
    opened = str(tmp_path) if form == "folder" else str(db)  # the folder, or the database file the URL names
    assert f"{opened} is an SQLite database of another application" in str(e), f"unclear message: {e}"
    conn = sqlite3.connect(db)
    try:
        tables = sorted(r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'"))
        assert tables == ["foo"], f"memrev touched the other app's database: {tables}"
        assert conn.execute("SELECT count(*) FROM foo").fetchone()[0] == 2
    finally:
        conn.close()


def test_sqlite_database_with_a_foreign_application_id_is_refused(tmp_path: Path):
    db = tmp_path / "memrev.db"
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA application_id = 12345")
    conn.commit()
    conn.close()
    _expect_refusal(str(tmp_path), memrev.NotAMemrevStore)


def test_schema_too_new(tmp_path: Path):
    import anyio

    async def make() -> None:
        store = VersionedStore(str(tmp_path))
        try:
            await store.write("/x", "1")
        finally:
            store.close()

    anyio.run(make)
    db = tmp_path / "memrev.db"
    conn = sqlite3.connect(db)
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    assert version >= 1, "the store does not record its schema version in PRAGMA user_version"
    conn.execute("PRAGMA user_version = 9999")
    conn.commit()
    conn.close()
    e = _expect_refusal(str(tmp_path), memrev.SchemaTooNew)
    assert "9999" in str(e), f"message should name the found version: {e}"
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 9999, "memrev downgraded the schema version"
    finally:
        conn.close()


def test_folder_location_that_is_a_file(tmp_path: Path):
    """A location that is a regular file (not a folder, not sqlite:///) is refused cleanly."""
    f = tmp_path / "not-a-folder"
    f.write_bytes(b"data")
    e = _expect_refusal(str(f), memrev.NotAMemrevStore)
    assert f"{f} is not a memrev store" in str(e), f"unclear message: {e}"
    assert f.read_bytes() == b"data"


# --------------------------------------------------------------------------
# Failed transactions
# --------------------------------------------------------------------------


class Boom(Exception):
    pass


async def test_transaction_that_raises_commits_nothing():
    async with _Seeded() as s:
        st = s.store
        with pytest.raises(Boom):
            async with st.transaction(message="doomed", meta={"k": "v"}):
                await st.write("/t1", "x")
                await st.write("/keep", "overwritten")
                await st.append("/log", "line 2\n")
                await st.delete("/a")
                raise Boom()
        await s.assert_unchanged("a transaction that raised")
        assert await st.read("/t1") is None
        assert await st.exists("/t1") is False
        assert await st.read("/a/b") == "ab"
        # the store is still usable afterwards, and the next append continues
        # from the committed end of /log
        assert await st.append("/log", "line 2\n") == len(b"line 1\n")
        assert await st.read("/log") == "line 1\nline 2\n"
        assert len(await st.log()) == 4


async def test_transaction_that_raises_after_a_partial_append_sequence_commits_nothing():
    async with _Seeded() as s:
        st = s.store
        with pytest.raises(Boom):
            async with st.transaction():
                for i in range(5):
                    await st.append("/log", f"t{i}\n")
                raise Boom()
        await s.assert_unchanged("a transaction of appends that raised")
        assert await st.read_range("/log", 0, None) == "line 1\n"


async def test_failed_transaction_does_not_undo_other_tasks_commits():
    """A transaction stages only its own task's mutations; another task's write
    made meanwhile is committed at once and survives the transaction's failure."""
    import anyio

    async with _Seeded() as s:
        st = s.store
        inside = anyio.Event()
        other_done = anyio.Event()

        async def other_task() -> None:
            await inside.wait()
            await st.write("/other", "committed")
            other_done.set()

        async def doomed() -> None:
            with pytest.raises(Boom):
                async with st.transaction(message="doomed"):
                    await st.write("/t1", "x")
                    inside.set()
                    await other_done.wait()
                    raise Boom()

        async with anyio.create_task_group() as tg:
            tg.start_soon(other_task)
            tg.start_soon(doomed)
        assert await st.read("/other") == "committed"
        assert await st.read("/t1") is None
        log = await st.log()
        assert len(log) == s.before[0] + 1
        assert log[0].paths == ("/other",)
        assert s.notes == ["/other"]


@pytest.mark.parametrize("meta", [{"x": object()}, {"x": {1, 2}}, {"x": b"bytes"}, ["not", "a", "dict"], "str"])
@pytest.mark.parametrize("via", ["write", "transaction"])
async def test_unstorable_meta_raises_and_writes_nothing(meta, via):
    """Commit.meta is a dict of JSON-able values: anything else is refused up front."""
    async with _Seeded() as s:
        try:
            if via == "write":
                await s.store.write("/keep", "new content", meta=meta)
            else:
                async with s.store.transaction(message="m", meta=meta):
                    await s.store.write("/keep", "new content")
        except Exception as e:  # noqa: BLE001
            assert not isinstance(e, sqlite3.Error), f"raw sqlite3 error leaked: {e!r}"
        else:
            try:
                recorded = repr((await s.store.log())[0].meta)
            except Exception as e:  # noqa: BLE001
                recorded = f"unreadable: log() now raises {type(e).__name__}: {e}"
            pytest.fail(f"write(..., meta={meta!r}) was accepted; the commit's meta is {recorded}")
        await s.assert_unchanged(f"write with meta={meta!r}")


async def test_closed_store_raises_store_closed():
    with tempfile.TemporaryDirectory() as d:
        store = VersionedStore(d)
        await store.write("/a", "1")
        store.close()
        store.close()  # idempotent
        for name, call in {
            "read": lambda: store.read("/a"),
            "write": lambda: store.write("/a", "2"),
            "append": lambda: store.append("/a", "2"),
            "delete": lambda: store.delete("/a"),
            "list": lambda: store.list("/"),
            "exists": lambda: store.exists("/a"),
            "read_range": lambda: store.read_range("/a", 0),
            "log": lambda: store.log(),
        }.items():
            with pytest.raises(memrev.StoreClosed):
                await call()
                pytest.fail(f"{name} on a closed store did not raise StoreClosed")
        again = VersionedStore(d)
        try:
            assert await again.read("/a") == "1"
            assert len(await again.log()) == 1
        finally:
            again.close()


@pytest.mark.parametrize("keep", [float("nan"), -1, -0.5, "7", None, True])
async def test_a_gc_safety_window_that_means_nothing_is_refused_and_nothing_is_collected(tmp_path, keep):
    """``gc(keep_seconds=nan)`` compared false with every age and kept every deleted branch
    silently; a negative window collected them as 0 would; a str failed inside gc's transaction."""
    from memrev.errors import InvalidArgument

    store = VersionedStore(tmp_path / "s")
    try:
        await store.write("/a.md", "a\n")
        side = await store.branch("side")
        await side.write("/b.md", "only on side\n")
        side.close()
        await store.delete_branch("side")
        before = store.repo.backend.list_refs("refs/")
        with pytest.raises(InvalidArgument):
            await store.gc(keep_seconds=keep)
        assert store.repo.backend.list_refs("refs/") == before  # the deleted branch is still kept
        removed = await store.gc(keep_seconds=0)  # a window that means something collects it
        assert (removed["refs"], removed["commits"], removed["blobs"]) == (1, 1, 1), removed
    finally:
        store.close()
