"""Branches, tags and three-way merge (issue 4).

A branch starts at any revision and has its own head; a handle on it reads
and commits there while main goes on. ``merge`` is one commit with two
parents, merges by kind of content (diff3 for text, both sides' lines for
logs that only grew), and on a conflict writes nothing and reports each
conflicted path with its kind and the text with conflict markers.
"""

from __future__ import annotations

import pytest

import memrev
from memrev import VersionedStore

pytestmark = pytest.mark.anyio

BASE_TEXT = "alpha\nbravo\ncharlie\ndelta\necho\nfoxtrot\ngolf\n"


# --------------------------------------------------------------------------- helpers


async def snapshot(store, rev: str | None = None) -> dict[str, str]:
    """Every file of the tree (path -> content) at ``rev`` (default: the handle's head)."""
    out: dict[str, str] = {}

    async def walk(folder: str) -> None:
        for name in await store.list(folder, rev=rev):
            path = folder.rstrip("/") + "/" + name.rstrip("/")
            if name.endswith("/"):
                await walk(path)
            else:
                text = await store.read(path, rev=rev)
                assert text is not None, path
                out[path] = text

    await walk("/")
    return out


async def head(store: VersionedStore) -> str:
    return await store.resolve("HEAD")


async def ids(store: VersionedStore, path: str | None = None, rev: str | None = None) -> list[str]:
    return [c.id for c in await store.log(path, rev=rev)]


@pytest.fixture
async def store(store_location):
    s = VersionedStore(store_location, author="main-agent")
    try:
        yield s
    finally:
        s.close()


async def fork(store: VersionedStore, name: str = "exp", at: str = "HEAD") -> VersionedStore:
    return await store.branch(name, at=at)


async def assert_sound(store: VersionedStore) -> None:
    assert await store.fsck() == []


# --------------------------------------------------------------------------- branches


async def test_branch_at_past_revision_has_its_own_head(store):
    await store.write("/notes.md", "v1\n", message="one")
    rev1 = await head(store)
    await store.write("/notes.md", "v2\n", message="two")
    await store.write("/other.md", "o\n", message="three")
    main_ids = await ids(store)

    exp = await store.branch("experiment", at=rev1)
    try:
        # The branch handle sees the past revision as its head, main is untouched.
        assert await exp.resolve("HEAD") == rev1
        assert await exp.read("/notes.md") == "v1\n"
        assert await exp.read("/other.md") is None
        assert await exp.list("/") == ["notes.md"]
        assert await ids(exp) == [rev1]
        assert await store.read("/notes.md") == "v2\n"
        assert await store.branches() == {"main": main_ids[0], "experiment": rev1}

        # Commits on the branch move only the branch.
        await exp.write("/notes.md", "v1\nbranch line\n", message="b1")
        await exp.append("/exp.log", "x\n")
        assert await store.read("/notes.md") == "v2\n"
        assert await store.exists("/exp.log") is False
        assert await ids(store) == main_ids
        exp_log = await exp.log()
        assert [c.message for c in exp_log] == ["append /exp.log", "b1", "one"]
        assert exp_log[1].parents == (rev1,)
        assert (await store.branches())["experiment"] == exp_log[0].id
        # "experiment" resolves from main's handle too, and reads as of it work.
        assert await store.resolve("experiment") == exp_log[0].id
        assert await store.read("/notes.md", rev="experiment") == "v1\nbranch line\n"
        assert await store.read("/notes.md", rev="experiment~2") == "v1\n"
    finally:
        exp.close()
    await assert_sound(store)


async def test_per_path_log_on_a_branch(store):
    await store.write("/p.md", "1\n", message="m1")
    fork_at = await head(store)
    await store.write("/p.md", "2\n", message="m2")
    exp = await fork(store, at=fork_at)
    try:
        await exp.write("/p.md", "1b\n", message="b1")
        await exp.write("/q.md", "q\n", message="bq")
        await exp.write("/p.md", "1bb\n", message="b2")
        # Each handle's per-path log follows its own branch.
        assert [c.message for c in await exp.log("/p.md")] == ["b2", "b1", "m1"]
        assert [c.message for c in await store.log("/p.md")] == ["m2", "m1"]
        assert [c.message for c in await exp.log("/q.md")] == ["bq"]
        assert await store.log("/q.md") == []
        assert [c.message for c in await store.log("/p.md", rev="exp")] == ["b2", "b1", "m1"]
        hist = await exp.history("/p.md")
        assert [(c.message, size) for c, size in hist] == [("b2", 4), ("b1", 3), ("m1", 2)]
        assert [c.message for c in await exp.log("/p.md", limit=1)] == ["b2"]
    finally:
        exp.close()


async def test_branch_at_past_revision_ignores_other_branches_changes(store):
    """The new branch's per-path history is its own ancestry, not whatever changed last anywhere."""
    await store.write("/p.md", "seed\n", message="seed")
    seed = await head(store)
    other = await fork(store, "other")
    try:
        await other.write("/p.md", "other\n", message="other edit")
    finally:
        other.close()
    await store.write("/q.md", "q\n", message="main q")
    main_q = await head(store)
    await store.write("/r.md", "r\n", message="main r")

    late = await store.branch("late", at=main_q)
    try:
        assert await late.read("/p.md") == "seed\n"
        assert [c.id for c in await late.log("/p.md")] == [seed]
        assert [(b.text, b.commit.id) for b in await late.blame("/p.md")] == [("seed", seed)]
        await late.write("/p.md", "seed\nlate\n", message="late edit")
        assert [c.message for c in await late.log("/p.md")] == ["late edit", "seed"]
        assert [b.commit.message for b in await late.blame("/p.md")] == ["seed", "late edit"]
    finally:
        late.close()
    await assert_sound(store)


async def test_merge_keeps_the_sources_file_history_when_it_committed_elsewhere_last(store):
    await store.write("/wm.md", "a\nb\nc\nd\ne\n", message="t1")
    exp = await fork(store)
    try:
        await exp.write("/wm.md", "a\nb\nc\nd\nE-exp\n", message="b1")
        b1 = await exp.resolve("HEAD")
        await store.write("/wm.md", "A-main\nb\nc\nd\ne\n", message="m1")
        await exp.write("/other.md", "o\n", message="b2 elsewhere")
        result = await store.merge("exp")
        assert await store.read("/wm.md") == "A-main\nb\nc\nd\nE-exp\n"
        assert [c.message for c in await store.log("/wm.md")] == ["merge exp into main", "m1", "b1", "t1"]
        assert [b.commit.id for b in await store.blame("/wm.md")][-1] == b1
        assert result.paths == ("/other.md", "/wm.md")
    finally:
        exp.close()


async def test_per_path_log_of_a_revision_is_the_same_from_every_handle(store):
    """A path deleted on both sides (exp re-created and deleted it again), merged: the
    per-path log of main's head must not depend on the handle asking."""
    await store.write("/a.md", "alpha\n", message="seed")
    await store.delete("/a.md", message="main del")
    exp = await fork(store)
    try:
        await exp.write("/a.md", "", message="exp write")
        await exp.delete("/a.md", message="exp del")
        await store.merge("exp", strategy="ours")
        assert await store.exists("/a.md") is False
        from_main = [c.id for c in await store.log("/a.md")]
        assert [c.id for c in await exp.log("/a.md", rev="main")] == from_main
        assert [c.id for c in await store.at("main").log("/a.md")] == from_main
        other = await exp.branch("other", at="main")
        try:
            assert [c.id for c in await other.log("/a.md")] == from_main
        finally:
            other.close()
    finally:
        exp.close()


async def test_delete_branch(store):
    await store.write("/a.md", "a\n")
    exp = await fork(store)
    await exp.write("/b.md", "b\n")
    exp_head = await exp.resolve("HEAD")
    exp.close()
    assert set(await store.branches()) == {"main", "exp"}

    await store.delete_branch("exp")
    assert await store.branches() == {"main": await head(store)}
    with pytest.raises(memrev.RevisionNotFound):
        await store.resolve("exp")
    with pytest.raises(memrev.RevisionNotFound):
        await store.delete_branch("exp")
    # Its commits stay readable by id until gc's safety window has passed.
    assert await store.read("/b.md", rev=exp_head) == "b\n"
    # The handle's own branch cannot be deleted.
    with pytest.raises(memrev.MemrevError):
        await store.delete_branch("main")
    assert "main" in await store.branches()
    # The name can be reused afterwards, starting afresh.
    again = await fork(store)
    try:
        assert await again.read("/b.md") is None
        assert await again.read("/a.md") == "a\n"
    finally:
        again.close()
    await assert_sound(store)


async def test_branch_names_are_checked_and_unique(store):
    await store.write("/a.md", "a\n")
    (await fork(store)).close()
    with pytest.raises(memrev.MemrevError):
        await store.branch("exp")
    for bad in ("", "HEAD", "has space", "a~1", "x:y", "-opt", "a..b"):
        with pytest.raises(memrev.InvalidPath):
            await store.branch(bad)
    with pytest.raises(memrev.RevisionNotFound):
        await store.branch("later", at="no-such-rev")
    assert set(await store.branches()) == {"main", "exp"}


async def test_tags(store):
    await store.write("/a.md", "one\n", message="first")
    first = await head(store)
    await store.write("/a.md", "two\n", message="second")
    second = await head(store)

    assert await store.tag("v1", first) == first
    assert await store.tag("v2") == second
    assert await store.tag("v1-prefix", first[:12]) == first
    assert await store.tags() == {"v1": first, "v2": second, "v1-prefix": first}
    # Tags are revisions: resolvable, readable, with ~n, and they do not move.
    assert await store.resolve("v1") == first
    assert await store.read("/a.md", rev="v1") == "one\n"
    assert await store.resolve("v2~1") == first
    await store.write("/a.md", "three\n")
    assert await store.resolve("v2") == second
    assert await store.read("/a.md", rev="v2") == "two\n"
    with pytest.raises(memrev.MemrevError):
        await store.tag("v1", second)
    assert (await store.tags())["v1"] == first
    with pytest.raises(memrev.InvalidPath):
        await store.tag("bad name")
    # A tag is not a branch.
    assert set(await store.branches()) == {"main"}


async def test_constructor_branch_and_branch_method_side_by_side(tmp_path):
    loc = tmp_path / "shared"
    main = VersionedStore(loc, author="main-agent")
    try:
        await main.write("/memory/working.md", "# WM\n- start\n", message="turn 1")
        turn1 = await head(main)
        await main.write("/memory/working.md", "# WM\n- start\n- main 2\n", message="turn 2")

        created = await main.branch("experiment", at=turn1)
        opened = VersionedStore(loc, branch="experiment", author="exp-agent")
        try:
            # Both handles on "experiment" see the same head, the branch's own.
            assert await opened.resolve("HEAD") == turn1 == await created.resolve("HEAD")
            assert await opened.read("/memory/working.md") == "# WM\n- start\n"

            # Interleave commits on main and on the branch.
            await opened.write("/memory/working.md", "# WM\n- start\n- exp 1\n", message="exp 1")
            await main.write("/memory/working.md", "# WM\n- start\n- main 3\n", message="turn 3")
            await created.append("/log/exp.jsonl", '{"turn": 2}\n')
            await main.append("/log/main.jsonl", '{"turn": 4}\n')

            # A commit through one handle is seen by the other handle on that branch.
            assert await created.read("/memory/working.md") == "# WM\n- start\n- exp 1\n"
            assert await opened.read("/log/exp.jsonl") == '{"turn": 2}\n'
            assert await opened.resolve("HEAD") == await created.resolve("HEAD")
            # Neither branch sees the other's commits.
            assert await main.read("/memory/working.md") == "# WM\n- start\n- main 3\n"
            assert await main.exists("/log/exp.jsonl") is False
            assert await opened.exists("/log/main.jsonl") is False
            exp_log = await opened.log()
            assert [c.message for c in exp_log] == ["append /log/exp.jsonl", "exp 1", "turn 1"]
            # store.branch() returns a handle with the same options (author) as the one it was called on.
            assert [c.author for c in exp_log[:2]] == ["main-agent", "exp-agent"]
            assert [c.message for c in await main.log()] == [
                "append /log/main.jsonl", "turn 3", "turn 2", "turn 1",
            ]
            assert [c.message for c in await opened.log("/memory/working.md")] == ["exp 1", "turn 1"]
        finally:
            created.close()
            opened.close()
        assert await main.fsck() == []
    finally:
        main.close()


# --------------------------------------------------------------------------- merge: clean


async def _diverge(store: VersionedStore, *, branch_last: bool) -> VersionedStore:
    """main and exp both change different lines of /doc.md after a common base.

    ``branch_last`` decides which side committed most recently (merge-base
    must not depend on that).
    """
    await store.write("/doc.md", BASE_TEXT, message="base")
    exp = await fork(store)
    main_edit = BASE_TEXT.replace("bravo\n", "BRAVO (main)\n")
    exp_edit = BASE_TEXT.replace("foxtrot\n", "FOXTROT (exp)\n")
    if branch_last:
        await store.write("/doc.md", main_edit, message="main edit")
        await exp.write("/doc.md", exp_edit, message="exp edit")
    else:
        await exp.write("/doc.md", exp_edit, message="exp edit")
        await store.write("/doc.md", main_edit, message="main edit")
    return exp


@pytest.mark.parametrize("branch_last", [False, True], ids=["main-newer", "branch-newer"])
async def test_clean_merge_is_one_commit_with_two_parents(store, branch_last):
    exp = await _diverge(store, branch_last=branch_last)
    try:
        ours, theirs = await head(store), await exp.resolve("HEAD")
        before = await ids(store)

        result = await store.merge("exp")

        assert result.status == "merged"
        assert result.paths == ("/doc.md",)
        merged = await store.show("HEAD")
        assert merged.id == result.commit
        assert merged.parents == (ours, theirs)
        assert merged.author == "main-agent"
        assert merged.message == "merge exp into main"
        assert merged.paths == ("/doc.md",)
        after = await ids(store)
        assert after[0] == merged.id
        assert set(after) == {merged.id, theirs, *before}
        assert len(await ids(store)) == len(before) + 2
        assert await store.read("/doc.md") == BASE_TEXT.replace("bravo\n", "BRAVO (main)\n").replace(
            "foxtrot\n", "FOXTROT (exp)\n"
        )
        # The source branch does not move; the per-path log joins both sides.
        assert await exp.resolve("HEAD") == theirs
        assert await exp.read("/doc.md") == BASE_TEXT.replace("foxtrot\n", "FOXTROT (exp)\n")
        assert [c.message for c in await store.log("/doc.md")][0] == "merge exp into main"
        assert {c.message for c in await store.log("/doc.md")} == {
            "merge exp into main", "main edit", "exp edit", "base",
        }
        # HEAD~1 is the first parent (ours).
        assert await store.resolve("HEAD~1") == ours
        await assert_sound(store)
    finally:
        exp.close()


async def test_merge_with_custom_message_and_other_direction(store):
    exp = await _diverge(store, branch_last=False)
    try:
        main_head = await head(store)
        exp_head = await exp.resolve("HEAD")
        # main into exp this time.
        result = await exp.merge("main", message="bring main in")
        c = await exp.show("HEAD")
        assert c.id == result.commit and c.message == "bring main in"
        assert c.parents == (exp_head, main_head)
        assert c.meta.get("merge", {}).get("source") == "main"
        assert await head(store) == main_head
        assert "BRAVO (main)" in await exp.read("/doc.md") and "FOXTROT (exp)" in await exp.read("/doc.md")
        await assert_sound(store)
    finally:
        exp.close()


async def test_merge_where_only_the_branch_changed_equals_the_branch(store):
    await store.write("/doc.md", BASE_TEXT, message="base")
    await store.write("/keep.md", "keep\n")
    await store.append("/events.jsonl", '{"n": 0}\n')
    exp = await fork(store)
    try:
        ours = await head(store)
        await exp.write("/doc.md", BASE_TEXT.replace("charlie", "CHARLIE"), message="exp 1")
        await exp.append("/events.jsonl", '{"n": 1}\n')
        await exp.write("/new/file.md", "new\n")
        await exp.delete("/keep.md")
        theirs = await exp.resolve("HEAD")
        expected = await snapshot(exp)

        result = await store.merge("exp")

        assert result.status == "merged"
        assert await snapshot(store) == expected
        assert await store.diff("HEAD", "exp") == []
        c = await store.show("HEAD")
        assert c.parents == (ours, theirs)
        assert set(c.paths) == {"/doc.md", "/events.jsonl", "/new/file.md", "/keep.md"}
        await assert_sound(store)
    finally:
        exp.close()


async def test_merge_where_only_main_changed_is_up_to_date(store):
    await store.write("/doc.md", BASE_TEXT)
    exp = await fork(store)
    exp.close()
    await store.write("/doc.md", BASE_TEXT + "more\n")
    before_ids, before_tree = await ids(store), await snapshot(store)

    result = await store.merge("exp")

    assert result.status == "up-to-date" and result.commit is None and result.paths == ()
    assert await ids(store) == before_ids
    assert await snapshot(store) == before_tree
    await assert_sound(store)


@pytest.mark.parametrize("branch_last", [False, True], ids=["main-newer", "branch-newer"])
async def test_jsonl_appended_on_both_sides_keeps_both_sides_lines(store, branch_last):
    base = '{"turn": 1, "who": "base"}\n'
    await store.append("/log/events.jsonl", base)
    exp = await fork(store)
    try:
        main_lines = ['{"turn": 2, "who": "main"}\n', '{"turn": 3, "who": "main"}\n']
        exp_lines = ['{"turn": 2, "who": "exp"}\n']
        sides = [(store, main_lines), (exp, exp_lines)]
        if not branch_last:
            sides.reverse()
        for handle, lines in sides:
            for line in lines:
                await handle.append("/log/events.jsonl", line)

        await store.merge("exp")

        merged = await store.read("/log/events.jsonl")
        assert merged == base + "".join(main_lines) + "".join(exp_lines)
        assert len(merged.splitlines()) == 4
        await assert_sound(store)
    finally:
        exp.close()


async def test_log_created_on_both_sides_keeps_both(store):
    await store.write("/a.md", "a\n")
    exp = await fork(store)
    try:
        await exp.append("/log/s.jsonl", '{"exp": 1}\n')
        await store.append("/log/s.jsonl", '{"main": 1}\n')
        await store.merge("exp")
        text = await store.read("/log/s.jsonl")
        assert sorted(text.splitlines()) == ['{"exp": 1}', '{"main": 1}']
        assert text.startswith('{"main": 1}\n')
        await assert_sound(store)
    finally:
        exp.close()


async def test_independent_text_edits_merge_with_diff3(store):
    original = "".join(f"line {i}\n" for i in range(1, 13))
    await store.write("/memory/working.md", original, message="base")
    exp = await fork(store)
    try:
        ours = original.replace("line 2\n", "line 2 (main)\n").replace("line 5\n", "")
        theirs = (
            original.replace("line 9\n", "line 9 (exp)\n").replace("line 12\n", "line 12\nline 13 (exp)\n")
        )
        await exp.write("/memory/working.md", theirs, message="exp")
        await store.write("/memory/working.md", ours, message="main")
        await store.merge("exp")
        expected = (
            "line 1\nline 2 (main)\nline 3\nline 4\nline 6\nline 7\nline 8\nline 9 (exp)\n"
            "line 10\nline 11\nline 12\nline 13 (exp)\n"
        )
        assert await store.read("/memory/working.md") == expected
        await assert_sound(store)
    finally:
        exp.close()


async def test_files_touched_by_one_side_only_are_taken_from_it(store):
    await store.write("/both.md", BASE_TEXT)
    await store.write("/mine.md", "mine\n")
    await store.write("/theirs.md", "theirs\n")
    exp = await fork(store)
    try:
        await exp.write("/theirs.md", "theirs changed\n")
        await exp.delete("/mine.md")
        await exp.write("/exp-only.md", "x\n")
        await store.write("/both.md", BASE_TEXT.replace("golf", "GOLF"))
        await store.write("/main-only.md", "y\n")
        await store.merge("exp")
        assert await snapshot(store) == {
            "/both.md": BASE_TEXT.replace("golf", "GOLF"),
            "/theirs.md": "theirs changed\n",
            "/exp-only.md": "x\n",
            "/main-only.md": "y\n",
        }
        await assert_sound(store)
    finally:
        exp.close()


# --------------------------------------------------------------------------- merge: conflicts


async def _conflicting(store: VersionedStore) -> VersionedStore:
    await store.write("/memory/working.md", BASE_TEXT, message="base")
    await store.write("/other.md", "other\n")
    exp = await fork(store)
    await exp.write("/memory/working.md", BASE_TEXT.replace("delta", "delta (exp)"), message="exp")
    await exp.write("/exp-only.md", "exp\n")
    await store.write("/memory/working.md", BASE_TEXT.replace("delta", "delta (main)"), message="main")
    return exp


async def test_overlapping_edits_conflict_and_write_nothing(store):
    exp = await _conflicting(store)
    try:
        before_ids = await ids(store)
        before_wm_log = await ids(store, "/memory/working.md")
        before_tree = await snapshot(store)
        before_branches = await store.branches()

        with pytest.raises(memrev.MergeConflict) as info:
            await store.merge("exp")

        err = info.value
        assert isinstance(err, memrev.MemrevError)
        assert len(err.conflicts) == 1
        (c,) = err.conflicts
        assert c.path == "/memory/working.md"
        assert c.kind == "content"
        assert "/memory/working.md" in str(err)
        marked = c.marked
        assert marked.count("<<<<<<<") == 1 and marked.count("=======") == 1 and marked.count(">>>>>>>") == 1
        assert "delta (main)" in marked and "delta (exp)" in marked
        assert marked.index("<<<<<<<") < marked.index("delta (main)") < marked.index("=======")
        assert marked.index("=======") < marked.index("delta (exp)") < marked.index(">>>>>>>")
        # The non-conflicting lines are there, once, outside the markers.
        assert marked.startswith("alpha\nbravo\ncharlie\n") and marked.endswith("echo\nfoxtrot\ngolf\n")

        # Nothing written: log, per-path log, content, refs, and the file only exp added.
        assert await ids(store) == before_ids
        assert await ids(store, "/memory/working.md") == before_wm_log
        assert await snapshot(store) == before_tree
        assert await store.branches() == before_branches
        assert await store.exists("/exp-only.md") is False
        await assert_sound(store)
    finally:
        exp.close()


@pytest.mark.parametrize("deleted_on", ["ours", "theirs"])
async def test_modify_delete_is_a_conflict(store, deleted_on):
    await store.write("/notes/plan.md", BASE_TEXT)
    await store.write("/other.md", "o\n")
    exp = await fork(store)
    try:
        deleter, modifier = (store, exp) if deleted_on == "ours" else (exp, store)
        await modifier.write("/notes/plan.md", BASE_TEXT + "hotel\n")
        await deleter.delete("/notes/plan.md")
        await exp.write("/exp.md", "e\n")
        before_ids, before_tree = await ids(store), await snapshot(store)

        with pytest.raises(memrev.MergeConflict) as info:
            await store.merge("exp")

        assert [(c.path, c.kind) for c in info.value.conflicts] == [("/notes/plan.md", "modify/delete")]
        assert await ids(store) == before_ids
        assert await snapshot(store) == before_tree
        await assert_sound(store)
    finally:
        exp.close()


async def test_add_add_with_different_content_is_a_conflict(store):
    await store.write("/a.md", "a\n")
    exp = await fork(store)
    try:
        await exp.write("/new.md", "from exp\n")
        await store.write("/new.md", "from main\n")
        before = await ids(store)
        with pytest.raises(memrev.MergeConflict) as info:
            await store.merge("exp")
        (c,) = info.value.conflicts
        assert (c.path, c.kind) == ("/new.md", "add/add")
        assert "from exp" in c.marked and "from main" in c.marked
        assert await ids(store) == before
        assert await store.read("/new.md") == "from main\n"
    finally:
        exp.close()


async def test_several_conflicts_are_all_listed(store):
    await store.write("/x.md", BASE_TEXT)
    await store.write("/y.md", BASE_TEXT)
    exp = await fork(store)
    try:
        await exp.write("/x.md", BASE_TEXT.replace("alpha", "A-exp"))
        await exp.delete("/y.md")
        await store.write("/x.md", BASE_TEXT.replace("alpha", "A-main"))
        await store.write("/y.md", BASE_TEXT.replace("golf", "G-main"))
        with pytest.raises(memrev.MergeConflict) as info:
            await store.merge("exp")
        assert sorted((c.path, c.kind) for c in info.value.conflicts) == [
            ("/x.md", "content"), ("/y.md", "modify/delete"),
        ]
    finally:
        exp.close()


@pytest.mark.parametrize("strategy", ["ours", "theirs"])
async def test_strategy_settles_conflicts(store, strategy):
    exp = await _conflicting(store)
    try:
        ours_text = await store.read("/memory/working.md")
        theirs_text = await exp.read("/memory/working.md")
        ours, theirs = await head(store), await exp.resolve("HEAD")

        result = await store.merge("exp", strategy=strategy)

        assert result.status == "merged"
        c = await store.show("HEAD")
        assert c.parents == (ours, theirs)
        assert await store.read("/memory/working.md") == (ours_text if strategy == "ours" else theirs_text)
        # Non-conflicting changes from the other side still arrive.
        assert await store.read("/exp-only.md") == "exp\n"
        await assert_sound(store)
        assert (await store.merge("exp")).status == "up-to-date"
    finally:
        exp.close()


@pytest.mark.parametrize("strategy", ["ours", "theirs"])
async def test_strategy_settles_modify_delete(store, strategy):
    await store.write("/plan.md", BASE_TEXT)
    exp = await fork(store)
    try:
        await exp.delete("/plan.md")
        await store.write("/plan.md", BASE_TEXT + "x\n")
        await store.merge("exp", strategy=strategy)
        expected = BASE_TEXT + "x\n" if strategy == "ours" else None
        assert await store.read("/plan.md") == expected
        await assert_sound(store)
    finally:
        exp.close()


async def test_resolutions_settle_conflicts(store):
    exp = await _conflicting(store)
    try:
        ours, theirs = await head(store), await exp.resolve("HEAD")
        chosen = BASE_TEXT.replace("delta", "delta (main and exp)")
        result = await store.merge("exp", resolutions={"/memory/working.md": chosen})
        assert result.status == "merged"
        assert await store.read("/memory/working.md") == chosen
        assert await store.read("/exp-only.md") == "exp\n"
        assert (await store.show("HEAD")).parents == (ours, theirs)
        await assert_sound(store)
    finally:
        exp.close()


async def test_resolution_none_deletes(store):
    await store.write("/plan.md", BASE_TEXT)
    exp = await fork(store)
    try:
        await exp.write("/plan.md", BASE_TEXT + "e\n")
        await store.delete("/plan.md")
        await store.write("/keep.md", "k\n")
        await store.merge("exp", resolutions={"plan.md": None})  # relative paths are normalized
        assert await store.read("/plan.md") is None
        assert await store.read("/keep.md") == "k\n"
        await assert_sound(store)
    finally:
        exp.close()


async def test_partial_resolutions_still_conflict_and_write_nothing(store):
    await store.write("/x.md", BASE_TEXT)
    await store.write("/y.md", BASE_TEXT)
    exp = await fork(store)
    try:
        await exp.write("/x.md", BASE_TEXT.replace("alpha", "A-exp"))
        await exp.write("/y.md", BASE_TEXT.replace("alpha", "A-exp"))
        await store.write("/x.md", BASE_TEXT.replace("alpha", "A-main"))
        await store.write("/y.md", BASE_TEXT.replace("alpha", "A-main"))
        before = await ids(store)
        with pytest.raises(memrev.MergeConflict) as info:
            await store.merge("exp", resolutions={"/x.md": "settled\n"})
        assert [c.path for c in info.value.conflicts] == ["/y.md"]
        assert await ids(store) == before
        assert await store.read("/x.md") == BASE_TEXT.replace("alpha", "A-main")
    finally:
        exp.close()


async def test_bad_merge_arguments_write_nothing(store):
    exp = await _conflicting(store)
    try:
        before = await ids(store)
        with pytest.raises(ValueError):
            await store.merge("exp", strategy="mine")
        with pytest.raises(memrev.RevisionNotFound):
            await store.merge("no-such-branch")
        with pytest.raises(memrev.InvalidContent):
            await store.merge("exp", resolutions={"/memory/working.md": b"bytes"})
        assert await ids(store) == before
    finally:
        exp.close()


# --------------------------------------------------------------------------- merge: again, itself


@pytest.mark.parametrize("branch_last", [False, True], ids=["main-newer", "branch-newer"])
async def test_merging_again_is_up_to_date(store, branch_last):
    exp = await _diverge(store, branch_last=branch_last)
    try:
        await store.merge("exp")
        after = await ids(store)
        tree = await snapshot(store)

        again = await store.merge("exp")

        assert (again.status, again.commit, again.paths) == ("up-to-date", None, ())
        assert await ids(store) == after
        assert await snapshot(store) == tree
        # A later commit on exp merges again, with the previous merge as the base.
        await exp.write("/doc.md", (await exp.read("/doc.md")).replace("golf", "GOLF (exp 2)"), message="exp 2")
        third = await store.merge("exp")
        assert third.status == "merged"
        text = await store.read("/doc.md")
        assert "BRAVO (main)" in text and "FOXTROT (exp)" in text and "GOLF (exp 2)" in text
        assert text.count("FOXTROT") == 1
        await assert_sound(store)
    finally:
        exp.close()


async def test_merging_a_branch_with_itself_changes_nothing(store):
    await store.write("/a.md", "a\n")
    await store.append("/l.jsonl", "1\n")
    before, tree = await ids(store), await snapshot(store)
    for source in ("main", "HEAD", await head(store)):
        result = await store.merge(source)
        assert (result.status, result.commit) == ("up-to-date", None)
    same = await fork(store, "same")
    same.close()
    assert (await store.merge("same")).status == "up-to-date"
    assert await ids(store) == before
    assert await snapshot(store) == tree


async def test_merge_into_branch_then_back_to_main(store):
    """exp merges main in, main merges exp: the second is clean and keeps everything."""
    exp = await _diverge(store, branch_last=False)
    try:
        await exp.merge("main")
        await exp.write("/exp2.md", "2\n")
        await store.write("/main2.md", "m\n")
        result = await store.merge("exp")
        assert result.status == "merged"
        tree = await snapshot(store)
        assert tree["/exp2.md"] == "2\n" and tree["/main2.md"] == "m\n"
        assert tree["/doc.md"].count("BRAVO (main)") == 1 and tree["/doc.md"].count("FOXTROT (exp)") == 1
        await assert_sound(store)
    finally:
        exp.close()
