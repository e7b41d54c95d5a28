"""One set of input limits on every backend: the same input gets the same answer
on SQLite, PostgreSQL and ``memory://`` (docs/api.md, "Limits").

Each name, path and piece of commit metadata a caller hands memrev either works
on all three, or is refused on all three with the same typed error, raised
before anything is written (the refs, the head and the log are compared
before and after). What reaches a database key or index is what matters:
branch and tag names (``refs.name``, ``head.branch``), paths (``head.path``,
``changes.path``), revision names looked up in ``refs``; and what a bundle must
carry back in (author, message, meta).
"""

from __future__ import annotations

import itertools
import json
import os
import random
import string

import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

from memrev import errors
from memrev.backends import memory as memory_backend
from memrev.cli import main as cli_main
from memrev.core.objects import MAX_AUTHOR_BYTES, MAX_MESSAGE_BYTES, MAX_META_BYTES
from memrev.core.paths import MAX_PATH_BYTES
from memrev.repo.revisions import MAX_REF_NAME_BYTES
from memrev.store.store import Store
from memrev.viewer import create_app

pytestmark = pytest.mark.anyio

_names = itertools.count()


@pytest.fixture(params=["sqlite", "postgres", "memory"])
def location(request, tmp_path):
    """A fresh store location on each backend memrev ships."""
    if request.param == "sqlite":
        yield str(tmp_path / "store")
    elif request.param == "postgres":
        server = request.getfixturevalue("pg_server")
        url = server.create_database("limits")
        yield url
        server.drop_database(url)
    else:
        name = f"limits-{os.getpid()}-{next(_names)}"
        yield f"memory://{name}"
        memory_backend.drop(name)


def name_of(n: int, seed: int = 0) -> str:
    """A ref name of ``n`` bytes that no backend compresses (random letters and digits)."""
    r = random.Random(n * 1000 + seed)
    return "".join(r.choice(string.ascii_letters + string.digits) for _ in range(n))


async def state(store: Store) -> tuple:
    """Everything a refused call must leave as it was: every ref, and the log of this branch."""
    refs = store.repo.backend.list_refs("")
    log = [c.id for c in await store.log()] if await store.head() else []
    return refs, log


async def started(location: str) -> Store:
    s = Store(location)
    await s.write("/a.md", "one\n")
    return s


# ------------------------------------------------------------------ branch and tag names


async def test_a_name_of_the_limit_works_everywhere_it_is_used(location):
    """255 bytes: create, tag, open a handle on it, commit there with the longest path,
    merge from it by name, delete it (its ``refs/deleted/`` name is about 50 bytes longer)."""
    name, tag = name_of(MAX_REF_NAME_BYTES), name_of(MAX_REF_NAME_BYTES, 1)
    deep = "/" + name_of(MAX_PATH_BYTES - 1, 2)
    s = await started(location)
    try:
        other = await s.branch(name)
        await other.write(deep, "deep\n")  # head index row: (255-byte branch, 1,024-byte path)
        await other.close()
        on = Store(location, branch=name)
        assert await on.read(deep) == "deep\n"
        await on.close()
        assert (await s.merge(name)).status == "merged"
        assert await s.read(deep) == "deep\n"
        assert await s.tag(tag, name) == (await s.branches())[name]
        assert await s.resolve(tag) == await s.resolve(name)
        await s.delete_branch(name)
        assert name not in await s.branches()
        deleted = s.repo.backend.list_refs("refs/deleted/")
        assert len(deleted) == 1 and next(iter(deleted)).startswith(f"refs/deleted/{name}@")
        assert await s.fsck() == []
    finally:
        await s.close()


@pytest.mark.parametrize("size", [MAX_REF_NAME_BYTES + 1, 3000, 9000])
async def test_a_longer_name_is_refused_alike_before_anything_is_written(location, size):
    """Before: SQLite and memory:// took any length; PostgreSQL refused 3,000 bytes with a bare
    MemrevError from its index ("index row size ... exceeds btree version 4 maximum 2704"), and
    a handle on such a branch failed its first commit as "lost the PostgreSQL connection"."""
    name = name_of(size)
    s = await started(location)
    try:
        before = await state(s)
        calls = {
            "branch": lambda: s.branch(name),
            "tag": lambda: s.tag(name),
            "delete_branch": lambda: s.delete_branch(name),
        }
        for what, call in calls.items():
            with pytest.raises(errors.InvalidPath, match=f"at most {MAX_REF_NAME_BYTES} are allowed") as e:
                await call()
            assert f"is {size} bytes long" in str(e.value), what
        with pytest.raises(errors.InvalidPath, match=f"at most {MAX_REF_NAME_BYTES}"):
            Store(location, branch=name)
        with pytest.raises(errors.InvalidPath, match=f"at most {MAX_REF_NAME_BYTES}"):
            s.on_branch(name)
        with pytest.raises(errors.RevisionNotFound, match="no such commit, branch or tag"):
            await s.merge(name)  # a name no branch can have names nothing
        assert await state(s) == before
    finally:
        await s.close()


@pytest.mark.parametrize("bad", ["a\x00b", "a\ud800b", "a\x1bb", "caf\u00e9"])
async def test_a_name_no_ref_can_hold_is_refused_alike(location, bad):
    """Before: deleting "a\\x00b" on PostgreSQL was "PostgreSQL refused the transaction" (its text
    refuses NUL) where SQLite said RevisionNotFound; a lone surrogate was a UnicodeEncodeError on
    SQLite and PostgreSQL and RevisionNotFound on memory://."""
    s = await started(location)
    try:
        before = await state(s)
        for call in (lambda: s.branch(bad), lambda: s.tag(bad), lambda: s.delete_branch(bad)):
            with pytest.raises(errors.InvalidPath, match="not a valid branch or tag name"):
                await call()
        with pytest.raises(errors.InvalidPath):
            Store(location, branch=bad)
        assert await state(s) == before
    finally:
        await s.close()


@pytest.mark.parametrize("bad", ["a\x00b", "a\ud800b", "HEAD\x00~1", "\x7f", "a\ud800b~2"])
async def test_a_revision_naming_no_storable_ref_is_not_found_alike(location, bad):
    """Before: psycopg's DataError ("PostgreSQL text fields cannot contain NUL") on PostgreSQL, a
    UnicodeEncodeError on SQLite and PostgreSQL for a lone surrogate; RevisionNotFound elsewhere."""
    s = await started(location)
    try:
        before = await state(s)
        calls = [
            lambda: s.resolve(bad), lambda: s.read("/a.md", rev=bad), lambda: s.log(rev=bad),
            lambda: s.merge(bad), lambda: s.show(bad), lambda: s.diff(bad, "HEAD"),
            lambda: s.branch("ok", at=bad), lambda: s.tag("ok", bad), lambda: s.revert(bad),
            lambda: s.restore("/a.md", bad), lambda: s.log_page(rev=bad),
        ]
        for call in calls:
            with pytest.raises(errors.RevisionNotFound, match="no such commit, branch or tag"):
                await call()
        with pytest.raises(errors.RevisionNotFound):
            s.at(bad)
        assert await state(s) == before
    finally:
        await s.close()


async def test_a_long_revision_name_is_looked_up_and_not_found_alike(location):
    s = await started(location)
    try:
        for rev in (name_of(9000), "refs/heads/" + "\u00e9" * 3000, name_of(9000) + "~1"):
            with pytest.raises(errors.RevisionNotFound, match="no such commit, branch or tag"):
                await s.resolve(rev)
    finally:
        await s.close()


# ------------------------------------------------------------------ paths


@pytest.mark.parametrize("char", ["a", "\u00e9", "\u20ac", "\U0001d11e"])  # 1, 2, 3 and 4 bytes of UTF-8
async def test_a_path_of_the_limit_works_in_every_table_it_lands_in(location, char):
    """1,024 bytes of UTF-8 (the head index, the per-path change index and its directory keys,
    a 255-byte branch's head rows, merge, restore, reindex); one byte more is InvalidPath."""
    width = len(char.encode())
    body = char * ((MAX_PATH_BYTES - 4) // width)
    path = "/d/" + body + "x" * (MAX_PATH_BYTES - 3 - len(body.encode()))
    assert len(path.encode()) == MAX_PATH_BYTES
    s = await started(location)
    try:
        await s.write(path, "v1\n")
        assert await s.append(path, "v2\n") == 3
        assert await s.exists(path) and await s.read_range(path, 0, 2) == "v1"
        assert await s.list("/d") == [path[3:]]
        other = await s.branch(name_of(MAX_REF_NAME_BYTES))
        await other.write(path, "theirs\n")
        await other.close()
        await s.write("/a.md", "two\n")
        assert (await s.merge(other.branch_name)).status == "merged"
        assert await s.read(path) == "theirs\n"
        assert len(await s.history(path)) == 4  # write, append, theirs, the merge
        assert len(await s.log("/d")) == 4
        assert await s.restore(path, "HEAD~2") is not None
        assert await s.read(path) == "v1\nv2\n"
        await s.delete(path)
        assert await s.read(path) is None
        await s.reindex()
        assert len(await s.history(path)) == 6 and len(await s.log("/d")) == 6 and await s.fsck() == []
        before = await state(s)
        longer = path + "x"
        for call in (lambda: s.write(longer, "x"), lambda: s.append(longer, "x"), lambda: s.delete(longer),
                     lambda: s.read(longer), lambda: s.history(longer), lambda: s.exists(longer)):
            with pytest.raises(errors.InvalidPath, match=f"longer than {MAX_PATH_BYTES} bytes"):
                await call()
        for bad in ("/a\x00b", "/a\ud800b", "/a\x1bb"):  # PostgreSQL's text refuses NUL; UTF-8 a surrogate
            for call in (s.write(bad, "x"), s.append(bad, "x"), s.read(bad), s.log(bad), s.restore(bad, "HEAD")):
                with pytest.raises(errors.InvalidPath, match="control character or lone surrogate"):
                    await call
        assert await state(s) == before
    finally:
        await s.close()


# ------------------------------------------------------------------ author, message, meta


@pytest.mark.parametrize(
    "author, words",
    [
        ("a\x00b", "control character"),
        ("\x1b]0;title\x07bob", "control character"),
        ("a\ud800b", "lone surrogate"),
        ("a" * (MAX_AUTHOR_BYTES + 1), f"at most {MAX_AUTHOR_BYTES}"),
        ("\u00e9" * (MAX_AUTHOR_BYTES // 2 + 1), f"at most {MAX_AUTHOR_BYTES}"),
        (5, "must be str"),
        (None, "must be str"),
    ],
)
async def test_an_author_no_commit_can_record_is_refused_when_the_handle_opens(location, author, words):
    """Before: NUL and escape sequences were recorded (fsck and bundle import then refused
    those commits); a lone surrogate or a non-str failed the first commit with UnicodeEncodeError
    or AttributeError; 100 kB were taken."""
    s = await started(location)
    try:
        before = await state(s)
        with pytest.raises(errors.InvalidContent, match=words):
            Store(location, author=author)
        assert await state(s) == before
    finally:
        await s.close()


async def test_metadata_at_its_limits_exports_and_imports_on_every_backend(location, tmp_path):
    """The largest author, message and meta a commit may carry, with NUL and escapes inside
    meta (JSON escapes them), go in, come back, and survive a bundle round trip to a new store."""
    author = "\u00e9" * (MAX_AUTHOR_BYTES // 2)
    message = "m" * (MAX_MESSAGE_BYTES - 1) + "\n"
    meta = {"nul": "a\x00b", "esc\x1b": ["\x07"], "big": "x" * (MAX_META_BYTES - 200)}
    s = Store(location, author=author)
    try:
        await s.write("/a.md", "one\n", message=message, meta=meta)
        c = await s.show()
        assert (c.author, c.message, c.meta) == (author, message, meta)
        bundle = tmp_path / "all.bundle"
        await s.export_bundle(bundle)
    finally:
        await s.close()
    async with Store(tmp_path / "copy") as t:
        await t.import_bundle(bundle)
        c = await t.show("main")
        assert (c.author, c.message, c.meta) == (author, message, meta)
        assert await t.fsck() == []


@pytest.mark.parametrize(
    "message, meta, words",
    [
        ("m" * (MAX_MESSAGE_BYTES + 1), None, f"at most {MAX_MESSAGE_BYTES}"),
        ("\u20ac" * (MAX_MESSAGE_BYTES // 3 + 1), None, f"at most {MAX_MESSAGE_BYTES}"),
        (None, {"big": "x" * MAX_META_BYTES}, f"at most {MAX_META_BYTES}"),
        (None, {"k": "a\ud800b"}, "lone surrogate"),
        (None, {"a\udc80": 1}, "lone surrogate"),
        (None, {"k": {"nested": ["\ud800"]}}, "lone surrogate"),
        (None, {"k": {1: "a", "b": 2}}, "JSON-serializable"),
        ("a\ud800b", None, "lone surrogate"),
    ],
)
async def test_metadata_over_a_limit_is_refused_alike_before_anything_is_written(location, message, meta, words):
    """Before: a 20 MiB message or meta was stored on every backend and its bundle could not be
    imported anywhere (a commit record over 16 MiB); a lone surrogate in meta failed inside the
    commit with UnicodeEncodeError; mixed key types in nested meta with TypeError."""
    s = await started(location)
    try:
        before = await state(s)
        with pytest.raises(errors.InvalidContent, match=words):
            await s.write("/b.md", "x", message=message, meta=meta)
        with pytest.raises(errors.InvalidContent, match=words):
            async with s.transaction(message=message, meta=meta):
                await s.write("/b.md", "x")
        if meta is None:
            with pytest.raises(errors.InvalidContent, match=words):
                await s.delete("/a.md", message=message)
            with pytest.raises(errors.InvalidContent, match=words):
                await s.merge("main", message=message)
        assert await state(s) == before
    finally:
        await s.close()


@pytest.mark.parametrize("bad", ["/notes/a\x00*.log", "/notes/\ud800*", "/\x1b[2J/**"])
async def test_a_merge_kind_pattern_no_path_can_match_is_invalid_merge_kind_alike(location, bad):
    """Before: InvalidContent about the commit's *message* (the pattern is quoted in it) for a
    surrogate, and errors about other things for the rest ("empty segment" for NUL)."""
    s = await started(location)
    try:
        before = await state(s)
        with pytest.raises(errors.InvalidMergeKind, match="control character or lone surrogate"):
            await s.declare_kind(bad, "append-log")
        assert await state(s) == before
    finally:
        await s.close()


@pytest.mark.parametrize("value, words", [("a\ud800", "lone surrogate"), ("x" * (64 << 10) + "x", "at most 65536")])
async def test_a_provenance_field_no_commit_can_carry_is_refused_alike(location, value, words):
    """Before: a lone surrogate in ``store.provenance(agent=...)`` failed the commit inside the
    write with UnicodeEncodeError; 5 MiB were stored."""
    s = await started(location)
    try:
        before = await state(s)
        with pytest.raises(errors.InvalidContent, match=words):
            async with s.provenance(agent=value):
                await s.write("/b.md", "x")
        assert await state(s) == before
    finally:
        await s.close()


# ------------------------------------------------------------------ bundles


async def test_a_bundle_naming_a_ref_over_the_limit_is_refused_alike(location, tmp_path):
    """A bundle from a store that took a 300-byte branch name (before the limit) is InvalidBundle
    on every backend, nothing imported. Before: SQLite and memory:// imported it, PostgreSQL
    refused 3,000 bytes with a bare MemrevError."""
    bundles = {}
    for size in (300, 3000):
        async with Store(tmp_path / f"old{size}") as old:
            await old.write("/a.md", "one\n")
            head = bytes.fromhex(await old.head())
            with old.repo.backend.write():  # as an older memrev wrote it
                assert old.repo.backend.set_ref_if_equals(f"refs/heads/{name_of(size)}", None, head)
            bundles[size] = tmp_path / f"old{size}.bundle"
            await old.export_bundle(bundles[size])
    s = await started(location)
    try:
        before = await state(s)
        for bundle in bundles.values():
            with pytest.raises(errors.InvalidBundle, match="invalid ref"):
                await s.import_bundle(bundle)
        assert await state(s) == before
    finally:
        await s.close()


async def test_a_diverged_import_whose_imported_name_would_be_too_long_is_refused_alike(location, tmp_path):
    """A branch of 250 bytes that diverged here would come in as ``<name>-imported`` (259 bytes):
    a branch no handle could open or delete. Refused with InvalidPath; nothing imported."""
    name = name_of(MAX_REF_NAME_BYTES - 5)
    async with Store(tmp_path / "theirs", branch=name) as theirs:
        await theirs.write("/a.md", "theirs\n")
        await theirs.export_bundle(tmp_path / "theirs.bundle")
    s = Store(location, branch=name)
    try:
        await s.write("/a.md", "ours\n")
        before = await state(s)
        with pytest.raises(errors.InvalidPath, match=f"longer than {MAX_REF_NAME_BYTES} bytes"):
            await s.import_bundle(tmp_path / "theirs.bundle")
        assert await state(s) == before
        assert await s.read("/a.md") == "ours\n"
        assert await s.fsck() == []
    finally:
        await s.close()


# ------------------------------------------------------------------ the adapters' names


async def test_memory_names_that_cannot_fit_are_refused_when_given(location):
    """A name whose items' paths exceed MAX_PATH_BYTES: InvalidPath at construction, not at the
    first add(); the longest name that fits works on every backend."""
    from autogen_core.memory import MemoryContent, MemoryMimeType

    from memrev.autogen import VersionedMemory

    s = await started(location)
    try:
        room = MAX_PATH_BYTES - len("/autogen/") - len("/items/000000000000.json")
        mem = VersionedMemory(s, "n" * room)
        assert await mem.add(MemoryContent(content="kept", mime_type=MemoryMimeType.TEXT)) == 1
        assert [i.content.content for i in await mem.items()] == ["kept"]
        before = await state(s)
        for bad in ("n" * (room + 1), "\u00e9" * (room // 2 + 1)):
            with pytest.raises(errors.InvalidPath, match=f"at most {MAX_PATH_BYTES} are allowed"):
                VersionedMemory(s, bad)
        for bad in ("", "a/b", "..", "a\x00b", "a\ud800b"):
            with pytest.raises(errors.InvalidPath):
                VersionedMemory(s, bad)
        for item_id in ("1" * 13, "0" * 5000, 0, 10**12):
            with pytest.raises(ValueError, match="item id"):
                await mem.delete(item_id)
        with pytest.raises(errors.InvalidContent, match="lone surrogate"):  # lifted into the commit's meta
            await mem.add(MemoryContent(content="x", mime_type=MemoryMimeType.TEXT, metadata={"_meta": {"agent": "a\ud800"}}))
        assert await state(s) == before
        odd = {"nul": "a\x00b", "surrogate": "a\ud800b", "esc": "\x1b[2J"}  # kept in the item's file, escaped
        assert await mem.add(MemoryContent(content="odd\x00", mime_type=MemoryMimeType.TEXT, metadata=odd)) == 2
        assert (await mem.items())[1].content.metadata == odd
    finally:
        await s.close()


async def test_tiered_memory_names_that_cannot_fit_are_refused_when_given(location):
    from autogen_ext.models.replay import ReplayChatCompletionClient

    from memrev.autogen import TieredMemory

    s = await started(location)
    try:
        room = MAX_PATH_BYTES - len("/autogen/") - len("/chat-archive/items/000000000000.json")
        TieredMemory(s, "t" * room, ReplayChatCompletionClient([]))
        before = await state(s)
        with pytest.raises(errors.InvalidPath, match=f"at most {MAX_PATH_BYTES} are allowed"):
            TieredMemory(s, "t" * (room + 1), ReplayChatCompletionClient([]))
        assert await state(s) == before
    finally:
        await s.close()


async def test_session_ids_that_cannot_fit_are_refused_when_given(location):
    """Before: a session id of 1,000 characters made a session whose first add_items raised
    InvalidPath; one of 400 non-ASCII characters too (each is 6 to 9 bytes once percent-encoded)."""
    from memrev import VersionedStore

    s = VersionedStore(location)
    await s.write("/a.md", "one\n")
    try:
        room = MAX_PATH_BYTES - len("/openai-agents/sessions/") - len("/items/000000000000.json")
        session = s.session("s" * room)
        await session.add_items([{"role": "user", "content": "hi\x00"}])
        assert await session.get_items() == [{"role": "user", "content": "hi\x00"}]
        before = await state(s)
        for bad in ("s" * (room + 1), "\u00e9" * (room // 6 + 1)):
            with pytest.raises(errors.InvalidPath, match=f"at most {MAX_PATH_BYTES} are allowed"):
                s.session(bad)
        with pytest.raises(errors.InvalidPath, match="not valid Unicode"):
            s.session("a\ud800b")
        assert await state(s) == before
    finally:
        await s.close()


async def test_a_session_commits_meta_stays_within_the_meta_limit(location):
    """The meta limit must not refuse what a session legitimately commits: a call of more than
    1,000 items records their range instead of every id (500,000 ids were about 4 MiB), and
    the tool-call records one commit copies stop at 1 MiB of JSON (2,000 records of 2,000
    characters were 4.2 MB), counted in ``tool_calls_count``."""
    from memrev import VersionedStore
    from memrev.core.objects import check_new_commit_text
    from memrev.openai_agents import _provenance_meta

    s = VersionedStore(location)
    try:
        session = s.session("bulk")
        await session.add_items([{"role": "user", "content": f"m{i}"} for i in range(1500)])
        assert (await s.show()).meta["openai_agents"] == {"session": "bulk", "op": "add", "count": 1500, "first": 1, "last": 1500}
        await session.add_items([{"role": "user", "content": "one more"}])
        assert (await s.show()).meta["openai_agents"]["items"] == [1501]
        assert len(await session.get_items()) == 1501
        records = [{"agent": "a", "tool": "t", "tool_call_id": f"c{i}", "tool_output": "\u20ac" * 2000} for i in range(2000)]
        meta = _provenance_meta(s, "bulk", records)
        assert meta["tool_calls_count"] == 2000 and 0 < len(meta["tool_calls"]) < 2000
        assert meta["tool_calls"] == records[: len(meta["tool_calls"])]
        check_new_commit_text(None, None, meta)  # within MAX_META_BYTES
    finally:
        await s.close()


# ------------------------------------------------------------------ CLI and viewer


def _cli(location: str, *args: str):
    return CliRunner().invoke(cli_main, ["--store", location, *args])


def _failed(result, *words: str) -> str:
    assert result.exit_code == 1, (result.exit_code, result.output, result.exception)
    err = result.stderr.strip()
    assert err.startswith("Error: ") and "\n" not in err and "Traceback" not in result.output, err
    for w in words:
        assert w in err, err
    return err


def test_the_cli_refuses_long_names_alike(location):
    import asyncio

    async def build() -> None:
        s = await started(location)
        await s.close()

    asyncio.run(build())
    ok = name_of(MAX_REF_NAME_BYTES)
    assert _cli(location, "branch", ok).exit_code == 0
    assert _cli(location, "tag", ok).exit_code == 0
    assert _cli(location, "merge", ok).exit_code == 0
    assert _cli(location, "branch", "-d", ok).exit_code == 0
    before = json.loads(_cli(location, "log", "--json").output), _cli(location, "branch", "--json").output
    bad = name_of(MAX_REF_NAME_BYTES + 1)
    limit = f"at most {MAX_REF_NAME_BYTES} are allowed"
    _failed(_cli(location, "branch", bad), limit)
    _failed(_cli(location, "tag", bad), limit)
    _failed(_cli(location, "branch", "-d", bad), limit)
    _failed(_cli(location, "--branch", bad, "log"), limit)
    _failed(_cli(location, "show", "a\x00b"), "no such commit, branch or tag")
    _failed(_cli(location, "revert", "HEAD", "--author", "a\x1bb"), "author contains a control character")
    _failed(_cli(location, "revert", "HEAD", "--author", "a" * (MAX_AUTHOR_BYTES + 1)), f"at most {MAX_AUTHOR_BYTES}")
    assert (json.loads(_cli(location, "log", "--json").output), _cli(location, "branch", "--json").output) == before


def test_the_viewer_answers_unstorable_names_with_a_client_error_alike(location):
    """Before: /api/log?branch=a%00b was a 500 on PostgreSQL (psycopg's DataError), 404 elsewhere."""
    import asyncio

    async def build() -> None:
        s = await started(location)
        await s.close()

    asyncio.run(build())
    with TestClient(create_app(location), base_url="http://localhost") as c:
        for url in ("/api/log?branch=a%00b", "/api/log?branch=a%ED%A0%80b", "/api/commit/a%00b",
                    "/api/file?path=/a.md&rev=a%00b", f"/api/log?branch={name_of(9000)}"):
            r = c.get(url)
            assert r.status_code == 404 and "no such commit, branch or tag" in r.json()["error"], (url, r.text)
        r = c.get("/api/memory/" + "n" * (MAX_PATH_BYTES - 24))
        assert r.status_code == 400 and f"at most {MAX_PATH_BYTES}" in r.json()["error"], r.text
