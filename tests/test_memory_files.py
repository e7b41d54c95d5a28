"""``memrev.frameworks.memory_files``: the file commands Claude's memory tool and ``memrev mcp`` share.

Every mutating command is one commit; every refused one writes nothing (the log
does not grow); a caller's ``expected`` version or prefix is checked under the
commit's lock; two tasks editing one file never lose an edit; paths stay inside
the root; and a path is never both a file and a folder.
"""

from __future__ import annotations

import asyncio

import pytest

from memrev import errors
from memrev.frameworks.memory_files import ATTEMPTS, DirView, Edit, FileView, MemoryFiles, lines_kept, numbered
from memrev.store import Store

pytestmark = pytest.mark.anyio


@pytest.fixture
async def store(store_location):
    async with Store(store_location) as s:
        yield s


@pytest.fixture
def files(store) -> MemoryFiles:
    return MemoryFiles(store, root="/memories")


async def commits(store: Store) -> int:
    return len(await store.log())


async def refused(store: Store, error: type[Exception], work, match: str | None = None) -> Exception:
    """``work`` (a coroutine) fails with ``error`` and adds no commit."""
    before = await commits(store)
    with pytest.raises(error, match=match) as caught:
        await work
    assert await commits(store) == before, "a refused command wrote something"
    return caught.value


# ------------------------------------------------------------ happy paths


async def test_create_view_and_its_commit(store, files) -> None:
    made = await files.create("/memories/notes.md", "one\ntwo\n", message="memory create")
    assert isinstance(made, Edit) and made.path == "/memories/notes.md"
    assert made.version == await store.head() and await commits(store) == 1
    assert (await store.log())[0].message == "memory create"
    shown = await files.view("/memories/notes.md")
    assert isinstance(shown, FileView)
    assert (shown.lines, shown.first, shown.total, shown.version) == (["one", "two", ""], 1, 3, made.version)
    part = await files.view("/memories/notes.md", view_range=[2, -1])
    assert isinstance(part, FileView) and (part.lines, part.first) == (["two", ""], 2)
    assert numbered(part.lines, part.first) == "     2\ttwo\n     3\t"


async def test_view_of_a_folder_lists_two_levels_with_sizes(store, files) -> None:
    await files.create("/memories/a.md", "12345")
    await files.create("/memories/d/b.md", "xy")
    await files.create("/memories/d/e/deep.md", "abc")
    await files.create("/memories/d/e/f/deeper.md", "abcd")
    shown = await files.view("/memories")
    assert isinstance(shown, DirView) and shown.version == await store.head()
    assert [(e.path, e.size) for e in shown.entries] == [
        ("/memories/a.md", 5), ("/memories/d/", 9), ("/memories/d/b.md", 2), ("/memories/d/e/", 7)]
    assert shown.size == 14


async def test_the_root_views_as_an_empty_folder(store, files) -> None:
    empty = await files.view("/memories")
    assert isinstance(empty, DirView) and empty.entries == [] and empty.size == 0
    await store.write("/elsewhere.md", "not in the root\n")  # a store with commits, nothing under the root
    empty = await files.view("/memories/")
    assert isinstance(empty, DirView) and empty.entries == []
    await files.create("/memories/x.md", "x")
    await files.delete("/memories/x.md")
    assert (await files.view("/memories")).entries == []  # type: ignore[union-attr]


async def test_str_replace_and_insert_edit_in_one_commit_each(store, files) -> None:
    await files.create("/memories/n.md", "alpha\nbeta\ngamma\n")
    edit = await files.str_replace("/memories/n.md", "beta", "BETA")
    assert (edit.content, edit.line, edit.version) == ("alpha\nBETA\ngamma\n", 1, await store.head())
    edit = await files.insert("/memories/n.md", 0, "top\n")
    assert edit.content == "top\nalpha\nBETA\ngamma\n" and await commits(store) == 3
    edit = await files.insert("/memories/n.md", 4, "end")
    assert await store.read("/memories/n.md") == "top\nalpha\nBETA\ngamma\nend\n"
    await files.create("/memories/crlf.md", "a\r\nb")
    await files.insert("/memories/crlf.md", 1, "mid")
    assert await store.read("/memories/crlf.md") == "a\r\nmid\nb\n"  # CR kept, as Claude's tool keeps it
    assert lines_kept("a\r\nb\n") == ["a\r", "b"]


async def test_an_edit_that_changes_nothing_makes_no_commit(store, files) -> None:
    made = await files.create("/memories/n.md", "same")
    again = await files.create("/memories/n.md", "same")
    assert again.version == made.version and await commits(store) == 1
    edit = await files.str_replace("/memories/n.md", "same", "same")
    assert edit.version == made.version and await commits(store) == 1


async def test_append_creates_and_reports_where_the_text_landed(store, files) -> None:
    first = await files.append("/memories/log.md", "héllo\n")
    second = await files.append("/memories/log.md", "more\n")
    assert (first.offset, second.offset) == (0, len("héllo\n".encode()))
    assert second.version == await store.head() and await store.read("/memories/log.md") == "héllo\nmore\n"


async def test_delete_of_a_file_and_of_a_folder_are_one_tombstone_each(store, files) -> None:
    await files.create("/memories/a.md", "a")
    await files.create("/memories/d/b.md", "b")
    await files.create("/memories/d/e/c.md", "c")
    gone = await files.delete("/memories/d")
    assert sorted(gone.paths) == ["/memories/d/b.md", "/memories/d/e/c.md"] and await commits(store) == 4
    assert await store.list("/memories") == ["a.md"]
    gone = await files.delete("/memories/a.md")
    assert gone.paths == ["/memories/a.md"] and gone.version == await store.head()
    assert await store.read("/memories/d/b.md", rev=(await store.log())[2].id) == "b"  # history keeps it


async def test_rename_of_a_file_and_of_a_folder_are_one_commit_each(store, files) -> None:
    await files.create("/memories/a.md", "a")
    await files.create("/memories/d/b.md", "b")
    await files.create("/memories/d/e/c.md", "c")
    moved = await files.rename("/memories/a.md", "/memories/z/a2.md")
    assert moved.paths == ["/memories/z/a2.md"] and await commits(store) == 4
    moved = await files.rename("/memories/d", "/memories/f")
    assert sorted(moved.paths) == ["/memories/f/b.md", "/memories/f/e/c.md"] and await commits(store) == 5
    assert await store.list("/memories") == ["f/", "z/"]
    assert await store.read("/memories/f/e/c.md") == "c"
    assert (await store.log())[0].message == "rename /memories/d -> /memories/f"


# ------------------------------------------------------------ every error, nothing written


async def test_missing_paths(store, files) -> None:
    await files.create("/memories/a.md", "a")
    await refused(store, errors.PathNotFound, files.view("/memories/nope"), "does not exist. Please provide")
    await refused(store, errors.PathNotFound, files.view("/memories/a.md/under"), "does not exist")
    await refused(store, errors.PathNotFound, files.str_replace("/memories/nope", "a", "b"), "does not exist")
    await refused(store, errors.PathNotFound, files.insert("/memories/nope", 0, "x"), "does not exist")
    await refused(store, errors.PathNotFound, files.delete("/memories/nope"), r"^The path /memories/nope does not exist$")
    await refused(store, errors.PathNotFound, files.rename("/memories/nope", "/memories/b"), "does not exist")


async def test_rename_in_an_empty_store_says_what_the_reference_says(store, files) -> None:
    await refused(store, errors.PathNotFound, files.rename("/memories/a", "/memories/b"), "does not exist")
    await refused(store, errors.PathExists, files.rename("/memories/a", "/memories"),
                  "^The destination /memories already exists$")


async def test_folders_are_not_files(store, files) -> None:
    await files.create("/memories/d/b.md", "b")
    for work in (files.str_replace("/memories/d", "b", "c"), files.insert("/memories/d", 0, "x"),
                 files.append("/memories/d", "x")):
        await refused(store, errors.PathNotFound, work, r"^The path /memories/d is not a file\.$")


async def test_str_replace_refusals(store, files) -> None:
    await files.create("/memories/n.md", "ab\nab\nc\n")
    await refused(store, errors.EditRefused, files.str_replace("/memories/n.md", "zz", "y"),
                  "^No replacement was performed, old_str `zz` did not appear verbatim in /memories/n.md.$")
    await refused(store, errors.EditRefused, files.str_replace("/memories/n.md", "ab", "y"),
                  r"Multiple occurrences of old_str `ab` in lines: 1, 2\. Please ensure it is unique$")
    await files.create("/memories/many.md", "x\n" * 30)
    e = await refused(store, errors.EditRefused, files.str_replace("/memories/many.md", "x", "y"))
    assert "in lines: 1, 2, 3," in str(e) and "20 and 10 more." in str(e)  # the message is bounded
    await refused(store, errors.InvalidContent, files.str_replace("/memories/n.md", "ab", b"bytes"))  # type: ignore[arg-type]


async def test_insert_refusals(store, files) -> None:
    await files.create("/memories/n.md", "a\nb\n")
    for line in (-1, 3):
        await refused(store, errors.EditRefused, files.insert("/memories/n.md", line, "x"),
                      rf"^Invalid `insert_line` parameter: {line}\. It should be within the range \[0, 2\]\.$")
    await refused(store, errors.InvalidArgument, files.insert("/memories/n.md", "1", "x"))  # type: ignore[arg-type]
    await refused(store, errors.InvalidArgument, files.insert("/memories/n.md", True, "x"))  # type: ignore[arg-type]


async def test_view_refusals(store, files) -> None:
    await files.create("/memories/n.md", "a\nb\n")
    for bad in ([1], [1, 2, 3], ["1", 2], [1.0, 2]):
        await refused(store, errors.InvalidArgument, files.view("/memories/n.md", view_range=bad))  # type: ignore[arg-type]
    big = "\n" * 1_000_000
    await store.write("/memories/big.md", big)
    await refused(store, errors.EditRefused, files.view("/memories/big.md"), "exceeds maximum line limit of 999,999")


async def test_create_refusals(store, files) -> None:
    await files.create("/memories/n.md", "a")
    await refused(store, errors.PathExists, files.create("/memories/n.md", "b", expected="absent"),
                  "^File /memories/n.md already exists$")
    await refused(store, errors.InvalidContent, files.create("/memories/m.md", 3))  # type: ignore[arg-type]
    await refused(store, errors.InvalidArgument, files.create("/memories/m.md", "x", expected="not-a-version"))
    assert await store.read("/memories/n.md") == "a"


async def test_delete_and_rename_of_the_root_are_refused(store, files) -> None:
    await files.create("/memories/n.md", "a")
    await refused(store, errors.InvalidPath, files.delete("/memories"), "^Cannot delete the /memories directory itself$")
    await refused(store, errors.InvalidPath, files.delete("/memories/x/.."), "Cannot delete the /memories directory")
    await refused(store, errors.InvalidPath, files.rename("/memories", "/memories/x"),
                  "^Cannot rename the /memories directory itself$")
    await refused(store, errors.PathExists, files.rename("/memories/n.md", "/memories"),
                  "^The destination /memories already exists$")
    await refused(store, errors.PathExists, files.rename("/memories/n.md", "/memories/n.md"), "already exists")


async def test_the_root_itself_in_the_reference_words(store, files) -> None:
    await refused(store, errors.PathExists, files.create("/memories", "x", expected="absent"),
                  "^File /memories already exists$")
    await refused(store, errors.PathExists, files.create("/memories/", "x"), "^File /memories/ already exists$")
    await refused(store, errors.PathNotFound, files.str_replace("/memories", "a", "b"), r"^The path /memories is not a file\.$")
    await refused(store, errors.PathNotFound, files.insert("/memories", 0, "b"), r"^The path /memories is not a file\.$")
    await files.create("/memories/n.md", "a")
    await refused(store, errors.PathNotFound, files.str_replace("/memories", "a", "b"), r"is not a file\.$")
    whole = MemoryFiles(store)  # root "/": the store's own root is no file either
    await refused(store, errors.PathExists, whole.create("/", "x"), "^File / already exists$")
    await refused(store, errors.PathNotFound, whole.str_replace("/", "a", "b"), r"^The path / is not a file\.$")
    await refused(store, errors.PathNotFound, whole.append("/", "x"), r"is not a file\.$")


async def test_rename_refusals(store, files) -> None:
    await files.create("/memories/d/b.md", "b")
    await files.create("/memories/c.md", "c")
    await refused(store, errors.PathExists, files.rename("/memories/c.md", "/memories/d"), "destination /memories/d already")
    await refused(store, errors.PathExists, files.rename("/memories/d", "/memories/c.md"), "already exists")
    await refused(store, errors.EditRefused, files.rename("/memories/d", "/memories/d/inner"), "into itself")


# ------------------------------------------------------------ paths


async def test_paths_outside_the_root_are_refused_in_the_reference_words(store, files) -> None:
    await files.create("/memories/a.md", "a")
    cases = {
        "/other/x": "^Path must start with /memories, got: /other/x$",
        "/memoriesX/y": "^Path must start with /memories, got: /memoriesX/y$",  # a documented difference
        "memories/x": "^Path must start with /memories, got: memories/x$",
        "/memories/../x": r"^Path /memories/\.\./x would escape /memories directory$",
        "/memories/a/../../x": "would escape /memories directory",
        "/memories/..": "would escape",
    }
    for path, words in cases.items():
        await refused(store, errors.InvalidPath, files.view(path), words)
        await refused(store, errors.InvalidPath, files.create(path, "x"), words)
        await refused(store, errors.InvalidPath, files.delete(path), words)
        await refused(store, errors.InvalidPath, files.rename("/memories/a.md", path), words)
    await refused(store, errors.InvalidPath, files.create("/memories/a\x00b", "x"), "control character")
    await refused(store, errors.InvalidPath, files.create(3, "x"))  # type: ignore[arg-type]
    assert await store.list("/") == ["memories/"]


async def test_dot_segments_resolve_as_a_file_system_resolves_them(store, files) -> None:
    await files.create("/memories/a/./b.md", "one")
    await files.create("/memories/x/../c.md", "two")
    await files.create("/memories//d.md", "three")
    assert await store.list("/memories") == ["a/", "c.md", "d.md"]
    assert await store.read("/memories/a/b.md") == "one"
    assert (await files.view("/memories/a/../a/./b.md")).lines == ["one"]  # type: ignore[union-attr]
    await files.rename("/memories/./c.md", "/memories/a/../e.md")
    assert await store.list("/memories") == ["a/", "d.md", "e.md"]


async def test_the_root_can_be_the_whole_store(store) -> None:
    whole = MemoryFiles(store)
    await whole.create("/top.md", "t")
    await whole.create("/memories/x.md", "x")
    shown = await whole.view("/")
    assert isinstance(shown, DirView) and [e.path for e in shown.entries] == ["/memories/", "/memories/x.md", "/top.md"]
    assert whole.path("/../top.md") == "/top.md"  # as on a file system: the parent of / is /


# ------------------------------------------------------------ a file is never also a folder


async def test_no_file_is_created_below_a_file(store, files) -> None:
    await files.create("/memories/a", "a file")
    for work in (files.create("/memories/a/b", "x"), files.create("/memories/a/b/c", "x"),
                 files.create("/memories/a/b", "x", expected="absent"), files.append("/memories/a/b", "x")):
        await refused(store, errors.EditRefused, work, "^Cannot create /memories/a/b.*: /memories/a is a file, not a directory$")
    await files.create("/memories/c.md", "c")
    await refused(store, errors.EditRefused, files.rename("/memories/c.md", "/memories/a/c.md"), "/memories/a is a file")
    await files.create("/memories/d/e.md", "e")
    await refused(store, errors.EditRefused, files.rename("/memories/d", "/memories/a/d"), "/memories/a is a file")
    assert await store.list("/memories") == ["a", "c.md", "d/"]


async def test_no_folder_is_made_a_file(store, files) -> None:
    await files.create("/memories/a/b.md", "b")
    for work in (files.create("/memories/a", "x"), files.create("/memories/a", "x", expected="absent")):
        await refused(store, errors.PathExists, work, "^File /memories/a already exists$")
    await refused(store, errors.PathNotFound, files.append("/memories/a", "x"), "is not a file")
    await files.create("/memories/c.md", "c")
    await refused(store, errors.PathExists, files.rename("/memories/c.md", "/memories/a"), "already exists")
    assert await store.list("/memories") == ["a/", "c.md"]


async def test_above_the_root_is_guarded_too(store, files) -> None:
    await store.write("/memories", "a file where the root would be")  # the store's own API allows it
    await refused(store, errors.EditRefused, files.create("/memories/x", "x"), "/memories is a file")


@pytest.mark.parametrize("rounds", [12])
async def test_racing_a_file_and_a_folder_at_one_path_leaves_one_of_them(store, files, rounds: int) -> None:
    for n in range(rounds):
        expected = "absent" if n % 2 else None  # Claude's create: the loser is told why, never "conflict"
        results = await asyncio.gather(files.create(f"/memories/p{n}", "file", expected=expected),
                                       files.create(f"/memories/p{n}/c", "child", expected=expected),
                                       return_exceptions=True)
        assert sum(isinstance(r, Edit) for r in results) == 1, results
        assert all(isinstance(r, (Edit, errors.PathExists, errors.EditRefused)) for r in results), results
        is_file = await store.read(f"/memories/p{n}") is not None
        is_folder = await store.read(f"/memories/p{n}/c") is not None
        assert is_file != is_folder


# ------------------------------------------------------------ versions: expected, prefixes, races


async def test_expected_versions_and_prefixes(store, files) -> None:
    made = await files.create("/memories/n.md", "one\n", expected="absent")
    assert made.version is not None
    await files.str_replace("/memories/n.md", "one", "two", expected=made.version)
    current = (await store.read_versioned("/memories/n.md"))[1]
    assert current is not None and current != made.version
    for stale in (made.version, made.version[:7], made.version.upper()):
        e = await refused(store, errors.WriteConflict, files.str_replace("/memories/n.md", "two", "x", expected=stale))
        assert isinstance(e, errors.WriteConflict) and (e.expected, e.actual) == (made.version, current)
        await refused(store, errors.WriteConflict, files.insert("/memories/n.md", 0, "x", expected=stale))
        await refused(store, errors.WriteConflict, files.create("/memories/n.md", "x", expected=stale))
        await refused(store, errors.WriteConflict, files.delete("/memories/n.md", expected=stale))
    await refused(store, errors.WriteConflict, files.str_replace("/memories/n.md", "two", "x", expected="absent"))
    await refused(store, errors.RevisionNotFound, files.insert("/memories/n.md", 0, "x", expected="abcdef0123"))
    await files.insert("/memories/n.md", 0, "top", expected=current[:9])
    after = (await store.read_versioned("/memories/n.md"))[1]
    assert after is not None
    await files.create("/memories/n.md", "fresh\n", expected=after[:12])
    assert await store.read("/memories/n.md") == "fresh\n"
    await files.delete("/memories/n.md", expected=(await store.read_versioned("/memories/n.md"))[1])
    assert await store.read("/memories/n.md") is None


async def test_an_ambiguous_prefix_is_refused(store, files) -> None:
    ids: dict[str, str] = {}
    n = 0
    while True:  # commits until two share their first 7 digits is too many; 1 digit less is refused by form
        n += 1
        made = await files.create("/memories/n.md", f"v{n}")
        assert made.version is not None
        if made.version[:1] in ids:
            break
        ids[made.version[:1]] = made.version
    await refused(store, errors.InvalidArgument, files.create("/memories/n.md", "x", expected=made.version[:6]))


async def test_two_tasks_racing_str_replace_never_lose_an_edit(store, files) -> None:
    await files.create("/memories/n.md", "".join(f"line {i}\n" for i in range(8)))
    before = await commits(store)
    edits = await asyncio.gather(*(files.str_replace("/memories/n.md", f"line {i}\n", f"LINE {i}\n") for i in range(8)))
    assert all(isinstance(e, Edit) for e in edits)
    assert await store.read("/memories/n.md") == "".join(f"LINE {i}\n" for i in range(8))
    assert await commits(store) == before + 8
    assert ATTEMPTS >= 8


async def test_racing_inserts_and_renames_never_lose_an_edit(store, files) -> None:
    await files.create("/memories/n.md", "")
    await files.create("/memories/d/a.md", "a")
    work = [files.insert("/memories/n.md", 0, f"i{i}") for i in range(6)]
    work += [files.rename("/memories/d", "/memories/e"), files.create("/memories/d/late.md", "late")]
    results = await asyncio.gather(*work, return_exceptions=True)
    assert all(isinstance(r, Edit) for r in results), results
    assert sorted(lines_kept(await store.read("/memories/n.md") or "")) == [f"i{i}" for i in range(6)]
    assert await store.read("/memories/e/a.md") == "a"
    # the late create landed before the rename (then it moved with the folder) or after it
    assert (await store.read("/memories/e/late.md")) or (await store.read("/memories/d/late.md")) == "late"


async def test_a_pinned_edit_is_not_retried(store, files) -> None:
    await files.create("/memories/n.md", "a b\n")
    version = (await store.read_versioned("/memories/n.md"))[1]
    first, second = await asyncio.gather(
        files.str_replace("/memories/n.md", "a", "A", expected=version),
        files.str_replace("/memories/n.md", "b", "B", expected=version), return_exceptions=True)
    outcomes = sorted(type(r).__name__ for r in (first, second))
    assert outcomes == ["Edit", "WriteConflict"], (first, second)
    assert await store.read("/memories/n.md") in ("A b\n", "a B\n")


async def test_many_tasks_creating_new_files_all_succeed(store, files) -> None:
    """A new file is committed on the head it checked (no folder may appear at its path); racing
    creators retry on the moved head, and every one lands."""
    made = await asyncio.gather(*(files.create(f"/memories/f{i}.md", f"{i}") for i in range(30)))
    assert all(isinstance(e, Edit) for e in made) and await commits(store) == 30
    assert sorted(await store.list("/memories")) == sorted(f"f{i}.md" for i in range(30))


# ------------------------------------------------------------ a root shown under another name


async def test_a_root_shown_as_another_name(store) -> None:
    ada = MemoryFiles(store, root="/agents/ada/memories", shown_as="/memories")
    made = await ada.create("/memories/user.md", "tea")
    assert made.path == "/agents/ada/memories/user.md"  # results carry store paths
    assert await store.list("/") == ["agents/"]
    shown = await ada.view("/memories")
    assert isinstance(shown, DirView) and [e.path for e in shown.entries] == ["/agents/ada/memories/user.md"]
    await refused(store, errors.InvalidPath, ada.view("/agents/ada/memories/user.md"), "^Path must start with /memories")
    await refused(store, errors.InvalidPath, ada.view("/memories/../x"), r"^Path /memories/\.\./x would escape /memories directory$")
    await refused(store, errors.InvalidPath, ada.delete("/memories/"), "^Cannot delete the /memories directory itself$")
    await refused(store, errors.InvalidPath, ada.rename("/memories", "/memories/x"), "^Cannot rename the /memories directory")
    await refused(store, errors.PathExists, ada.create("/memories", "x"), "^File /memories already exists$")
    await refused(store, errors.EditRefused, ada.create("/memories/user.md/x", "x"),
                  "^Cannot create /memories/user.md/x: /memories/user.md is a file, not a directory$")
    await ada.rename("/memories/user.md", "/memories/people/user.md")
    assert await store.read("/agents/ada/memories/people/user.md") == "tea"
    whole = MemoryFiles(store, root="/agents/bob", shown_as="/")
    await whole.create("/notes.md", "bob's")
    assert await store.read("/agents/bob/notes.md") == "bob's" and whole.path("/") == "/agents/bob"


class WriterInBetween(Store):
    """A store on which another writer commits ``path`` just before this handle's next commit
    (the store's own ``write``: ag2's contract lets a file and a folder share a name)."""

    between: tuple[str, str] | None = None
    always = False  # before every commit, not only the next one (the content numbered, so each is a change)
    writes = 0

    async def commit_ops(self, ops, **kwargs):  # type: ignore[no-untyped-def,override]
        if self.between is not None:
            path, content = self.between
            self.between = None if not self.always else self.between
            self.writes += 1
            await self.write(path, f"{content} {self.writes}")
        return await super().commit_ops(ops, **kwargs)


async def test_a_folder_above_turned_file_is_not_the_caller_s_conflict(store_location) -> None:
    async with WriterInBetween(store_location) as store:
        files = MemoryFiles(store, root="/memories")
        made = await files.create("/memories/a/b", "one")
        store.between = ("/memories/a", "a file now")
        with pytest.raises(errors.EditRefused, match="/memories/a is a file, not a directory"):
            await files.create("/memories/a/b", "two", expected=made.version)  # not WriteConflict: b is at made
        assert [c.message for c in await store.log()][0] == "write /memories/a"  # the other writer's, then nothing
        assert len(await store.log()) == 2 and await store.read("/memories/a/b") == "one"


async def test_an_edit_that_never_finds_the_file_still_gives_up_and_writes_nothing(store_location) -> None:
    async with WriterInBetween(store_location) as store:
        files = MemoryFiles(store, root="/memories")
        await files.create("/memories/n.md", "text")
        store.between, store.always = ("/memories/n.md", "text"), True
        with pytest.raises(errors.ConcurrentUpdate, match="kept changing"):
            await files.str_replace("/memories/n.md", "text", "edited")
        assert store.writes == ATTEMPTS and len(await store.log()) == 1 + ATTEMPTS  # the other writer's alone
        assert "edited" not in (await store.read("/memories/n.md") or "")


async def test_view_at_a_revision(store, files) -> None:
    first = await files.create("/memories/n.md", "one")
    await files.create("/memories/n.md", "two")
    await files.create("/memories/d/x.md", "x")
    old = await files.view("/memories/n.md", rev=first.version)
    assert isinstance(old, FileView) and old.lines == ["one"] and old.version == first.version
    then = await files.view("/memories", rev=first.version)
    assert isinstance(then, DirView) and [e.path for e in then.entries] == ["/memories/n.md"]
    await refused(store, errors.PathNotFound, files.view("/memories/d", rev=first.version), "does not exist")
