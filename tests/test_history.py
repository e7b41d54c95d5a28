"""History: commits, revisions, time travel, diff and per-path log.

Every write/append/delete that changes something is exactly one commit; an
identical rewrite or deleting a missing path is none. ``transaction()`` makes
one commit for everything inside it. Any revision (full id, 7+ hex prefix,
branch, ``HEAD``, ``REV~n``) answers read/list/exists/read_range as of that
commit.
"""

from __future__ import annotations

import dataclasses
import re
import tempfile
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from ag2.knowledge import MemoryKnowledgeStore
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memrev import VersionedStore

pytestmark = pytest.mark.anyio

HEX40 = re.compile(r"^[0-9a-f]{40}$")


class _Store:
    def __init__(self, **kwargs: Any) -> None:
        self._kwargs = kwargs

    async def __aenter__(self) -> VersionedStore:
        self._tmp = tempfile.TemporaryDirectory(prefix="memrev-hist-")
        self._store = VersionedStore(self._tmp.name, **self._kwargs)
        return self._store

    async def __aexit__(self, *exc: Any) -> None:
        self._store.close()
        self._tmp.cleanup()


async def _head(store: VersionedStore) -> str:
    return (await store.log(limit=1))[0].id


def _ids(commits) -> list[str]:
    return [c.id for c in commits]


# --------------------------------------------------------------------------
# Commit records
# --------------------------------------------------------------------------


async def test_log_is_newest_first_with_all_fields():
    t0 = datetime.now(timezone.utc) - timedelta(seconds=2)
    async with _Store(author="alice") as s:
        await s.write("/a", "1", message="first", meta={"k": 1, "tags": ["x", "y"], "nested": {"z": None}})
        await s.write("/b", "2")
        assert await s.append("/a", "x") == 1
        await s.delete("/b", message="drop b")
        t1 = datetime.now(timezone.utc) + timedelta(seconds=2)

        log = await s.log()
        assert len(log) == 4
        newest, third, second, first = log
        for c in log:
            assert HEX40.match(c.id), c.id
            assert isinstance(c.parents, tuple)
            assert isinstance(c.time, datetime)
            assert c.time.tzinfo is not None, "Commit.time must be timezone-aware"
            assert c.time.utcoffset() == timedelta(0), "Commit.time must be UTC"
            assert t0 <= c.time <= t1, (c.time, t0, t1)
            assert c.author == "alice"
            assert isinstance(c.message, str)
            assert isinstance(c.meta, dict)
            assert isinstance(c.paths, tuple)
        assert len(set(_ids(log))) == 4
        # parents: a single first-parent chain, root has none
        assert first.parents == ()
        assert second.parents == (first.id,)
        assert third.parents == (second.id,)
        assert newest.parents == (third.id,)
        # newest first
        assert newest.time >= third.time >= second.time >= first.time
        # message/meta/paths
        assert first.message == "first"
        assert first.meta == {"k": 1, "tags": ["x", "y"], "nested": {"z": None}}
        assert second.meta == {}
        assert newest.message == "drop b"
        assert first.paths == ("/a",)
        assert second.paths == ("/b",)
        assert third.paths == ("/a",)
        assert newest.paths == ("/b",)
        # frozen
        with pytest.raises(dataclasses.FrozenInstanceError):
            newest.message = "changed"  # type: ignore[misc]
        # show / resolve agree with log
        for c in log:
            assert await s.show(c.id) == c
            assert await s.show(c.id[:7]) == c
            assert await s.resolve(c.id) == c.id
            assert await s.resolve(c.id[:7]) == c.id
            assert await s.resolve(c.id[:13]) == c.id
        assert await s.resolve("HEAD") == newest.id
        assert await s.resolve("main") == newest.id
        assert (await s.show("HEAD")).id == newest.id


async def test_default_author_and_message():
    async with _Store() as s:
        await s.write("/a", "1")
        c = (await s.log())[0]
        assert c.author == "memrev"
        assert isinstance(c.message, str)
        assert c.meta == {}


async def test_log_reflects_commits_by_another_handle_with_its_author():
    with tempfile.TemporaryDirectory() as d:
        a = VersionedStore(d, author="alice")
        b = VersionedStore(d, author="bob")
        try:
            await a.write("/x", "1")
            await b.write("/y", "2")
            await a.write("/x", "3")
            log = await a.log()
            assert [c.author for c in log] == ["alice", "bob", "alice"]
            assert await b.read("/x") == "3"
            assert _ids(await b.log()) == _ids(log)
        finally:
            a.close()
            b.close()


async def test_one_commit_per_change_and_none_for_noops():
    async with _Store() as s:
        counts = []

        async def n() -> int:
            counts.append(len(await s.log()))
            return counts[-1]

        assert await n() == 0
        await s.write("/a", "same")
        assert await n() == 1
        await s.write("/a", "same")  # identical rewrite: no commit
        await s.write("a/", "same")  # same path spelled differently
        assert await n() == 1
        await s.write("/a", "changed")
        assert await n() == 2
        await s.delete("/missing")  # no-op
        await s.delete("/missing/dir/")
        assert await n() == 2
        await s.write("/e", "")  # empty file is a change (missing -> "")
        assert await n() == 3
        await s.write("/e", "")
        assert await n() == 3
        await s.append("/a", "+")
        assert await n() == 4
        await s.append("/log", "1")
        await s.append("/log", "2")
        assert await n() == 6
        for f in ["/dir/z", "/dir/sub/y", "/dir/x"]:
            await s.write(f, f)
        assert await n() == 9
        await s.delete("/dir")  # one tombstone commit for the whole directory
        assert await n() == 10
        c = (await s.log())[0]
        assert c.paths == ("/dir/sub/y", "/dir/x", "/dir/z")
        await s.delete("/dir")
        assert await n() == 10
        # delete of a path that is both a file and a directory
        await s.write("/fd", "file")
        await s.write("/fd/child", "child")
        await s.delete("/fd")
        c = (await s.log())[0]
        assert c.paths == ("/fd", "/fd/child")
        assert await n() == 13


async def test_delete_keeps_history():
    async with _Store() as s:
        await s.write("/doc", "version 1")
        await s.append("/doc", " + more")
        before = await _head(s)
        await s.write("/dir/a", "A")
        await s.delete("/doc")
        before_dir_delete = await _head(s)
        await s.delete("/dir")
        assert await s.read("/doc") is None
        assert await s.exists("/doc") is False
        assert await s.read("/doc", rev=before) == "version 1 + more"
        assert await s.exists("/doc", rev=before) is True
        assert await s.read_range("/doc", 9, None, rev=before) == " + more"
        assert await s.read("/dir/a", rev=before_dir_delete) == "A"
        assert await s.list("/", rev=before_dir_delete) == ["dir/"]
        assert await s.list("/") == []
        # the deletion itself is in the path's log
        doc_log = await s.log("/doc")
        assert len(doc_log) == 3
        assert doc_log[0].paths == ("/doc",)
        # and re-creating the path starts from scratch
        await s.write("/doc", "new")
        assert await s.read("/doc") == "new"
        assert await s.append("/doc", "!") == 3
        assert await s.read("/doc", rev=before) == "version 1 + more"


async def test_transaction_groups_into_one_commit():
    async with _Store(author="tx-author") as s:
        await s.write("/old", "o")
        await s.write("/log", "L0\n")
        await s.write("/unchanged", "u")
        notes: list[str] = []

        async def cb(path: str) -> None:
            notes.append(path)

        sub = await s.on_change("/", cb)
        n0 = len(await s.log())
        async with s.transaction(message="batch", meta={"n": 3}):
            await s.write("/t/2", "two")
            await s.write("/t/1", "one")
            await s.append("/log", "L1\n")
            await s.delete("/old")
            await s.write("/unchanged", "u")  # identical: not a changed path
        log = await s.log()
        assert len(log) == n0 + 1, f"transaction made {len(log) - n0} commits"
        c = log[0]
        assert c.message == "batch"
        assert c.meta == {"n": 3}
        assert c.author == "tx-author"
        assert c.paths == ("/log", "/old", "/t/1", "/t/2")
        assert c.parents == (log[1].id,)
        assert await s.read("/t/1") == "one"
        assert await s.read("/log") == "L0\nL1\n"
        assert await s.read("/old") is None
        assert await s.read("/old", rev="HEAD~1") == "o"
        assert await s.read("/t/1", rev="HEAD~1") is None
        diff = await s.diff("HEAD~1", "HEAD")
        assert [(f.path, f.status) for f in diff] == [
            ("/log", "modified"),
            ("/old", "deleted"),
            ("/t/1", "added"),
            ("/t/2", "added"),
        ]
        assert {"/log", "/old", "/t/1", "/t/2"} <= set(notes), notes
        await sub.close()


async def test_transaction_appends_return_offsets_within_the_transaction():
    async with _Store() as s:
        await s.append("/log", "ab")
        async with s.transaction():
            assert await s.append("/log", "é") == 2
            assert await s.append("/log", "c") == 4
        assert await s.read("/log") == "abéc"
        assert await s.read_range("/log", 2, 4) == "é"
        assert len(await s.log()) == 2


async def test_empty_transaction_makes_no_commit():
    async with _Store() as s:
        await s.write("/a", "1")
        async with s.transaction(message="nothing"):
            pass
        async with s.transaction(message="noop write"):
            await s.write("/a", "1")
        assert len(await s.log()) == 1


# --------------------------------------------------------------------------
# Revisions
# --------------------------------------------------------------------------


async def _four_commits(s: VersionedStore) -> list[str]:
    await s.write("/f", "v1")
    c1 = await _head(s)
    await s.write("/f", "v2 é")
    await s.write("/d/x", "x")
    await s.write("/d/y", "y")
    c2 = await _head(s)
    await s.append("/f", "+日本")
    c3 = await _head(s)
    await s.delete("/d")
    c4 = await _head(s)
    return [c1, c2, c3, c4]


async def test_reads_at_revisions():
    async with _Store() as s:
        c1, c2, c3, c4 = await _four_commits(s)
        log = await s.log()
        assert len(log) == 6
        assert _ids(log)[0] == c4 and _ids(log)[1] == c3 and _ids(log)[2] == c2 and _ids(log)[5] == c1
        for rev in [c1, c1[:7], c1[:8], c1[:20], "HEAD~5", "main~5", c2 + "~3", c1[:7] + "~0"]:
            assert await s.read("/f", rev=rev) == "v1", rev
            assert await s.list("/", rev=rev) == ["f"], rev
            assert await s.exists("/d", rev=rev) is False, rev
            assert await s.read_range("/f", 1, None, rev=rev) == "1", rev
        for rev in [c2, c2[:7], "HEAD~2", "main~2", c3 + "~1", c4 + "~2"]:
            assert await s.read("/f", rev=rev) == "v2 é", rev
            assert await s.list("/", rev=rev) == ["d/", "f"], rev
            assert await s.list("/d", rev=rev) == ["x", "y"], rev
            assert await s.exists("/d", rev=rev) is True, rev
            assert await s.exists("/d/y", rev=rev) is True, rev
            assert await s.read("/d/y", rev=rev) == "y", rev
            assert await s.read_range("/f", 3, 5, rev=rev) == "é", rev
            with pytest.raises(UnicodeDecodeError):
                await s.read_range("/f", 3, 4, rev=rev)
        for rev in [c3, "HEAD~1", "main~1"]:
            assert await s.read("/f", rev=rev) == "v2 é+日本", rev
            assert await s.read_range("/f", len("v2 é+".encode()), None, rev=rev) == "日本"
            assert await s.exists("/d/x", rev=rev) is True
        for rev in [c4, c4[:7], "HEAD", "main", "HEAD~0", "main~0", None]:
            assert await s.read("/f", rev=rev) == "v2 é+日本", rev
            assert await s.list("/", rev=rev) == ["f"], rev
            assert await s.exists("/d", rev=rev) is False, rev
            assert await s.read("/d/x", rev=rev) is None, rev
            assert await s.read_range("/d/x", 0, None, rev=rev) == "", rev
        # resolve: every spelling gives the full id
        assert await s.resolve("HEAD~5") == c1
        assert await s.resolve("HEAD~2") == c2
        assert await s.resolve(c2[:7]) == c2
        assert await s.resolve(c4 + "~5") == c1
        assert await s.resolve(c4 + "~3") == _ids(log)[3]
        # log from a past revision
        assert _ids(await s.log(rev="HEAD~1")) == _ids(log)[1:]
        assert _ids(await s.log(rev=c2, limit=2)) == _ids(log)[2:4]
        assert _ids(await s.log("/f", rev=c2)) == [_ids(log)[4], c1]
        assert _ids(await s.log("/f")) == [c3, _ids(log)[4], c1]


async def test_revision_reads_are_stable_after_later_writes():
    async with _Store() as s:
        await s.write("/p", "a")
        r = await _head(s)
        for i in range(20):
            await s.write("/p", f"a{i}" * (i + 1))
            await s.append("/q", f"{i}\n")
        assert await s.read("/p", rev=r) == "a"
        assert await s.read("/q", rev=r) is None
        assert await s.read("/q") == "".join(f"{i}\n" for i in range(20))


async def test_many_versions_of_a_large_document():
    """Stored as deltas or not, every past version reads back exactly."""
    import random

    rng = random.Random(1234)
    words = ["alpha", "beta", "gamma", "δέλτα", "日本語", "😀", "\n"]
    doc = [rng.choice(words) for _ in range(4000)]
    versions: list[str] = []
    async with _Store() as s:
        for _ in range(40):
            for _ in range(rng.randrange(1, 20)):
                k = rng.randrange(len(doc))
                op = rng.random()
                if op < 0.4:
                    doc[k] = rng.choice(words)
                elif op < 0.7:
                    doc.insert(k, rng.choice(words))
                else:
                    del doc[k]
            text = " ".join(doc)
            await s.write("/big.md", text)
            versions.append(text)
            if rng.random() < 0.3:
                await s.write("/other", str(len(versions)))
        ids = _ids(await s.log("/big.md"))[::-1]
        assert len(ids) == len(versions)
        order = list(range(len(versions)))
        rng.shuffle(order)
        for i in order:
            assert await s.read("/big.md", rev=ids[i]) == versions[i], i
        for i in order[:10]:
            data = versions[i].encode()
            for start, end in [(0, 100), (len(data) // 2, None), (len(data) - 50, len(data) + 10)]:
                try:
                    expected: Any = data[start:end].decode("utf-8", errors="strict")
                except UnicodeDecodeError:
                    expected = UnicodeDecodeError
                if expected is UnicodeDecodeError:
                    with pytest.raises(UnicodeDecodeError):
                        await s.read_range("/big.md", start, end, rev=ids[i])
                else:
                    assert await s.read_range("/big.md", start, end, rev=ids[i]) == expected
        changes = await s.diff(ids[3], ids[4])
        assert [(c.path, c.status, c.old, c.new) for c in changes if c.path == "/big.md"] == [
            ("/big.md", "modified", versions[3], versions[4])
        ]


async def test_long_append_history():
    """Every revision of an append-only log is the prefix that existed then."""
    async with _Store() as s:
        lines = [f"{i:04d} {'é' * (i % 5)}{'日' * (i % 3)}\n" for i in range(400)]
        offsets = [await s.append("/wal", line) for line in lines]
        ids = _ids(await s.log())[::-1]
        assert len(ids) == 400
        for k in [0, 1, 2, 31, 32, 33, 100, 255, 256, 257, 398, 399]:
            prefix = "".join(lines[: k + 1])
            assert await s.read("/wal", rev=ids[k]) == prefix, k
            assert await s.read("/wal", rev=f"HEAD~{399 - k}") == prefix, k
            b = lines[k].encode()
            assert await s.read_range("/wal", offsets[k], offsets[k] + len(b), rev=ids[k]) == lines[k]
            assert await s.read_range("/wal", offsets[k], None, rev=ids[k]) == lines[k]
            # bytes appended later do not exist at that revision
            assert await s.read_range("/wal", offsets[k] + len(b), None, rev=ids[k]) == ""
        assert await s.read_range("/wal", offsets[10], offsets[300]) == "".join(lines[10:300])
        # an overwrite then more appends: old revisions still read the old run
        await s.write("/wal", "reset\n")
        assert await s.append("/wal", "x") == 6
        assert await s.read("/wal", rev=ids[-1]) == "".join(lines)
        assert await s.read("/wal") == "reset\nx"
        d = await s.diff(ids[0], ids[1])
        assert [(c.path, c.status, c.old, c.new) for c in d] == [("/wal", "modified", lines[0], lines[0] + lines[1])]


# --------------------------------------------------------------------------
# diff
# --------------------------------------------------------------------------


def _assert_headers(change, path: str) -> None:
    text = change.diff
    assert isinstance(text, str) and text, f"empty diff text for {path}"
    lines = text.splitlines()
    bare = path.lstrip("/")
    a_forms = {f"--- a/{bare}", f"--- a{path}", f"--- a/{path}"}
    b_forms = {f"+++ b/{bare}", f"+++ b{path}", f"+++ b/{path}"}

    def has(forms, extra=()):
        return any(ln.rstrip().split("\t")[0] in forms | set(extra) for ln in lines)

    dev_null_a = ("--- /dev/null",) if change.status == "added" else ()
    dev_null_b = ("+++ /dev/null",) if change.status == "deleted" else ()
    assert has(a_forms, dev_null_a), f"no '--- a/PATH' header in diff of {path}:\n{text}"
    assert has(b_forms, dev_null_b), f"no '+++ b/PATH' header in diff of {path}:\n{text}"
    assert any(ln.startswith("@@") for ln in lines), f"no hunk header in diff of {path}:\n{text}"


async def test_diff_statuses_texts_and_unified_diff():
    async with _Store() as s:
        await s.write("/keep", "same\n")
        await s.write("/mod", "line 1\nline 2\nline 3\n")
        await s.write("/gone", "bye\n")
        a = await _head(s)
        await s.write("/mod", "line 1\nline TWO\nline 3\n")
        await s.delete("/gone")
        await s.write("/new/file", "hello\n")
        await s.write("/keep", "changed\n")
        await s.write("/keep", "same\n")  # back to the original: not in the diff
        b = await _head(s)

        changes = await s.diff(a, b)
        assert [(c.path, c.status) for c in changes] == [
            ("/gone", "deleted"),
            ("/mod", "modified"),
            ("/new/file", "added"),
        ]
        by = {c.path: c for c in changes}
        assert by["/gone"].old == "bye\n" and by["/gone"].new is None
        assert by["/new/file"].old is None and by["/new/file"].new == "hello\n"
        assert by["/mod"].old == "line 1\nline 2\nline 3\n"
        assert by["/mod"].new == "line 1\nline TWO\nline 3\n"
        for c in changes:
            _assert_headers(c, c.path)
        mod_lines = by["/mod"].diff.splitlines()
        assert "-line 2" in mod_lines and "+line TWO" in mod_lines
        assert " line 1" in mod_lines and " line 3" in mod_lines  # context
        assert "+hello" in by["/new/file"].diff.splitlines()
        assert "-bye" in by["/gone"].diff.splitlines()
        with pytest.raises(dataclasses.FrozenInstanceError):
            changes[0].status = "x"  # type: ignore[misc]

        # reversed: added <-> deleted, old <-> new
        rev = await s.diff(b, a)
        assert [(c.path, c.status) for c in rev] == [
            ("/gone", "added"),
            ("/mod", "modified"),
            ("/new/file", "deleted"),
        ]
        assert {c.path: (c.old, c.new) for c in rev} == {c.path: (c.new, c.old) for c in changes}

        # the same revision, and any spelling of it
        assert await s.diff(a, a) == []
        assert await s.diff("HEAD", b) == []
        assert [c.path for c in await s.diff(a[:7], "HEAD")] == ["/gone", "/mod", "/new/file"]

        # a path filter
        only = await s.diff(a, b, path="/mod")
        assert [(c.path, c.status) for c in only] == [("/mod", "modified")]
        assert await s.diff(a, b, path="/keep") == []


async def test_diff_of_empty_and_unicode_content():
    async with _Store() as s:
        await s.write("/e", "")
        a = await _head(s)
        await s.write("/e", "日本 😀")
        await s.write("/z", "")
        b = await _head(s)
        changes = await s.diff(a, b)
        assert [(c.path, c.status, c.old, c.new) for c in changes] == [
            ("/e", "modified", "", "日本 😀"),
            ("/z", "added", None, ""),
        ]
        assert "+日本 😀" in changes[0].diff


async def test_diff_and_commit_paths_are_sorted_by_path():
    """Sorted as strings, whatever the tree layout: a file and a directory of the
    same name, names that sort between "a" and "a/" ("a-", "a.b"), and a
    directory big enough to be stored hash-split."""
    async with _Store() as s:
        big = [f"/big/f{i:03d}" for i in range(70)]
        async with s.transaction():
            for p in reversed(big):
                await s.write(p, "0")
        assert (await s.log())[0].paths == tuple(sorted(big))
        a = await _head(s)
        odd = ["/a", "/a/x", "/a-", "/a.b/y", "/a0"]
        async with s.transaction():
            for p in big[::3]:
                await s.write(p, "1")
            for p in odd:
                await s.write(p, p)
        b = await _head(s)
        expected = sorted(big[::3] + odd)
        assert list((await s.log())[0].paths) == expected
        assert [c.path for c in await s.diff(a, b)] == expected
        assert [c.path for c in await s.diff(b, a)] == expected
        await s.delete("/a")  # the file /a and /a/x, not /a-, /a.b, /a0
        assert (await s.log())[0].paths == ("/a", "/a/x")
        assert [(c.path, c.status) for c in await s.diff(b, "HEAD")] == [("/a", "deleted"), ("/a/x", "deleted")]
        await s.delete("/big")
        assert (await s.log())[0].paths == tuple(sorted(big))
        assert [c.path for c in await s.diff(a, "HEAD")] == sorted(big + ["/a-", "/a.b/y", "/a0"])
        assert await s.list("/") == ["a-", "a.b/", "a0"]
        assert await s.list("/", rev=b) == ["a", "a-", "a.b/", "a/", "a0", "big/"]
        assert await s.list("/big", rev=b) == sorted(p.rsplit("/", 1)[1] for p in big)


# --------------------------------------------------------------------------
# log(path)
# --------------------------------------------------------------------------


async def test_log_of_a_path():
    async with _Store() as s:
        await s.write("/a", "1")
        await s.write("/b", "1")
        await s.write("/a", "2")
        await s.write("/ab", "1")  # shares a prefix with /a but is another path
        await s.write("/a/child", "1")  # below /a
        await s.append("/a", "3")
        await s.write("/b", "2")
        await s.delete("/a")  # deletes /a and /a/child
        log = await s.log()
        assert len(log) == 8
        a_log = await s.log("/a")
        exact = [c.id for c in log if "/a" in c.paths]
        under = [c.id for c in log if any(p == "/a" or p.startswith("/a/") for p in c.paths)]
        # "/a" is a file and a directory: whether the commit that only touched
        # /a/child counts is not pinned down; /ab must never count
        assert _ids(a_log) in (exact, under), (_ids(a_log), exact, under)
        assert len(exact) == 4 and len(under) == 5
        times = [c.time for c in a_log]
        assert times == sorted(times, reverse=True)
        # spelled differently
        assert _ids(await s.log("a/")) == _ids(a_log)
        assert _ids(await s.log("/a", limit=2)) == _ids(a_log)[:2]
        assert _ids(await s.log("/a", limit=1)) == _ids(a_log)[:1]
        assert _ids(await s.log("/b")) == [c.id for c in log if "/b" in c.paths]
        assert len(await s.log("/b")) == 2
        assert _ids(await s.log("/ab")) == [log[4].id]
        assert _ids(await s.log("/a/child")) == [log[0].id, log[3].id]
        assert await s.log("/never") == []
        assert len(await s.log(limit=3)) == 3
        assert _ids(await s.log(limit=3)) == _ids(log)[:3]


# --------------------------------------------------------------------------
# Random histories against a model
# --------------------------------------------------------------------------

_P = st.sampled_from(["/a", "/b", "/a/b", "/a/a", "/ab", "/b/a/b"])
_C = st.sampled_from(["", "x", "y", "é", "日本😀", "x\ny\n"])
_hop = st.one_of(
    st.tuples(st.just("write"), _P, _C),
    st.tuples(st.just("write"), _P, _C),
    st.tuples(st.just("append"), _P, _C),
    st.tuples(st.just("delete"), st.sampled_from(["/a", "/b", "/a/b", "/ab", "/nope", "/"])),
)


def _apply(model: dict[str, str], op: tuple) -> dict[str, str]:
    m = dict(model)
    name, path, *rest = op
    if name == "write":
        m[path] = rest[0]
    elif name == "append":
        m[path] = m.get(path, "") + rest[0]
    else:
        prefix = path.rstrip("/") + "/"
        for k in [k for k in m if k == path or k.startswith(prefix)]:
            del m[k]
    return m


def _changed(a: dict[str, str], b: dict[str, str]) -> list[str]:
    return sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))


@pytest.mark.slow
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(_hop, min_size=1, max_size=14))
async def test_random_history_time_travel(ops):
    async with _Store() as s:
        model: dict[str, str] = {}
        heads: list[tuple[str, dict[str, str]]] = []  # (commit id, state at it)
        n = 0
        for op in ops:
            new = _apply(model, op)
            changed = _changed(model, new)
            name = op[0]
            if name == "append":
                await s.append(op[1], op[2])
            else:
                await getattr(s, name)(*op[1:])
            log = await s.log()
            made = len(log) - n
            if changed:
                assert made == 1, f"{op!r} changed {changed} but made {made} commits"
                assert log[0].paths == tuple(changed), f"{op!r}: paths {log[0].paths} != {changed}"
            elif name == "append":
                # appending "" to an existing file: no change; one commit is tolerated
                assert made in (0, 1), f"{op!r} made {made} commits"
                if made:
                    assert log[0].paths in ((), (op[1],))
            else:
                assert made == 0, f"{op!r} changed nothing but made {made} commits"
            n = len(log)
            if made:
                heads.append((log[0].id, new))
            model = new

        log = await s.log()
        assert _ids(log) == [h for h, _ in reversed(heads)]
        for k, c in enumerate(log):
            assert await s.resolve(f"HEAD~{k}") == c.id
        universe = sorted({op[1] for op in ops if op[1] != "/"} | {"/a", "/b"})
        dirs = ["/", "/a", "/b", "/b/a", "/ab"]
        prev: dict[str, str] = {}
        prev_id: str | None = None
        for cid, state in heads:
            oracle = MemoryKnowledgeStore()
            oracle._data = dict(state)  # the oracle's own listing rules
            for p in universe:
                assert await s.read(p, rev=cid) == state.get(p), (cid, p)
                assert await s.exists(p, rev=cid) == await oracle.exists(p), (cid, p)
            for d in dirs:
                assert await s.list(d, rev=cid) == await oracle.list(d), (cid, d)
            if prev_id is not None:
                changes = await s.diff(prev_id, cid)
                expected = []
                for p in _changed(prev, state):
                    status = "added" if p not in prev else "deleted" if p not in state else "modified"
                    expected.append((p, status, prev.get(p), state.get(p)))
                assert [(c.path, c.status, c.old, c.new) for c in changes] == expected
            prev, prev_id = state, cid
        for p in universe:
            exact = [c.id for c in log if p in c.paths]
            under = [c.id for c in log if any(q == p or q.startswith(p + "/") for q in c.paths)]
            assert _ids(await s.log(p)) in (exact, under), p
