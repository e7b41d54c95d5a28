"""Blame, restore, revert and read-only revision views (issue 4).

Blame attributes every line to the commit that last changed it, through
successive edits and across merges; restore brings a file or a directory back
as of a revision; revert undoes one commit (and reverting the revert undoes
the undo); ``store.at(REV)`` is a read-only ``KnowledgeStore`` frozen at REV.
"""

from __future__ import annotations

import pytest

import memrev
from memrev import VersionedStore

pytestmark = pytest.mark.anyio

WM = "/memory/working.md"


async def snapshot(store, rev: str | None = None) -> dict[str, str]:
    out: dict[str, str] = {}

    async def walk(folder: str) -> None:
        for name in await store.list(folder, rev=rev):
            path = folder.rstrip("/") + "/" + name.rstrip("/")
            if name.endswith("/"):
                await walk(path)
            else:
                out[path] = await store.read(path, rev=rev)

    await walk("/")
    return out


async def head(store: VersionedStore) -> str:
    return await store.resolve("HEAD")


async def ids(store: VersionedStore, path: str | None = None) -> list[str]:
    return [c.id for c in await store.log(path)]


@pytest.fixture
async def store(store_location):
    s = VersionedStore(store_location, author="agent")
    try:
        yield s
    finally:
        s.close()


def owners(blame) -> list[tuple[int, str, str]]:
    return [(b.number, b.text, b.commit.id) for b in blame]


# --------------------------------------------------------------------------- blame


async def test_blame_through_successive_edits(store):
    await store.write(WM, "# Working\n- name: Dana\n- likes tea\n", message="turn 1")
    t1 = await head(store)
    await store.write("/unrelated.md", "noise\n", message="noise")
    await store.write(WM, "# Working\n- name: Dana\n- likes coffee\n- lives in Oslo\n", message="turn 2")
    t2 = await head(store)
    await store.write(WM, "# Working\n- name: Dana\n- vegetarian\n- likes coffee\n- lives in Oslo\n", message="turn 3")
    t3 = await head(store)
    await store.write(WM, "# Working\n- vegetarian\n- likes coffee\n- lives in Bergen\n", message="turn 4")
    t4 = await head(store)

    blame = await store.blame(WM)
    assert owners(blame) == [
        (1, "# Working", t1),
        (2, "- vegetarian", t3),
        (3, "- likes coffee", t2),
        (4, "- lives in Bergen", t4),
    ]
    by_id = {b.commit.id: b.commit for b in blame}
    assert by_id[t3].message == "turn 3" and by_id[t3].author == "agent"
    assert by_id[t1].time <= by_id[t2].time <= by_id[t3].time <= by_id[t4].time
    assert WM in by_id[t2].paths

    # As of an older revision, blame answers for that version of the file.
    assert owners(await store.blame(WM, rev=t2)) == [
        (1, "# Working", t1),
        (2, "- name: Dana", t1),
        (3, "- likes coffee", t2),
        (4, "- lives in Oslo", t2),
    ]
    assert owners(await store.blame(WM, rev="HEAD~1")) == owners(await store.blame(WM, rev=t3))
    assert [b.text for b in await store.blame(WM, rev=t1)] == ["# Working", "- name: Dana", "- likes tea"]
    assert {b.commit.id for b in await store.blame(WM, rev=t1)} == {t1}


async def test_blame_and_log_as_of_a_past_revision_ignore_other_branches(store):
    await store.write(WM, "seed line\n", message="seed")
    seed = await head(store)
    exp = await store.branch("exp")
    try:
        await exp.write(WM, "exp line\n", message="exp edit")
    finally:
        exp.close()
    await store.write("/b.md", "b\n", message="main b")
    main_b = await head(store)
    await store.write("/c.md", "c\n", message="main c")
    # On main, the file never changed after "seed", whatever happened on exp.
    for rev in (main_b, "HEAD~1", "HEAD"):
        assert await store.read(WM, rev=rev) == "seed line\n"
        assert owners(await store.blame(WM, rev=rev)) == [(1, "seed line", seed)], rev
        assert await ids_at(store, WM, rev) == [seed], rev
    assert [c.id for c in await store.at(main_b).log(WM)] == [seed]
    # And on exp, its own edit.
    assert [b.text for b in await store.blame(WM, rev="exp")] == ["exp line"]


async def ids_at(store, path, rev):
    return [c.id for c in await store.log(path, rev=rev)]


async def test_blame_appends_and_restored_lines(store):
    await store.append("/log/s.jsonl", '{"n": 1}\n')
    a1 = await head(store)
    await store.append("/log/s.jsonl", '{"n": 2}\n')
    a2 = await head(store)
    await store.append("/log/s.jsonl", '{"n": 3}\n')
    a3 = await head(store)
    assert [b.commit.id for b in await store.blame("/log/s.jsonl")] == [a1, a2, a3]

    # A line removed and later written back is a new line of the later commit.
    await store.write("/f.md", "keep\ngone\n")
    f1 = await head(store)
    await store.write("/f.md", "keep\n")
    await store.write("/f.md", "keep\ngone\n")
    f3 = await head(store)
    assert owners(await store.blame("/f.md")) == [(1, "keep", f1), (2, "gone", f3)]


async def test_blame_after_delete_and_recreate(store):
    await store.write("/f.md", "old\nsame\n")
    await store.delete("/f.md")
    await store.write("/f.md", "same\nnew\n")
    recreated = await head(store)
    # History before the deletion does not carry over.
    assert owners(await store.blame("/f.md")) == [(1, "same", recreated), (2, "new", recreated)]


async def test_blame_missing_path_raises(store):
    await store.write("/f.md", "x\n")
    with pytest.raises(memrev.RevisionNotFound):
        await store.blame("/nope.md")
    with pytest.raises(memrev.RevisionNotFound):
        await store.blame("/f.md", rev="no-such-rev")
    await store.delete("/f.md")
    with pytest.raises(memrev.RevisionNotFound):
        await store.blame("/f.md")


@pytest.mark.parametrize("order", ["main-newer", "branch-newer", "branch-commits-elsewhere-last"])
async def test_blame_across_a_merge(store, order):
    base = "# Plan\nday 1: arrive\nday 2: museum\nday 3: beach\nday 4: leave\n"
    await store.write(WM, base, message="t1")
    t1 = await head(store)
    exp = await store.branch("exp")
    try:

        async def main_side() -> list[str]:
            await store.write(WM, base.replace("day 1: arrive", "day 1: arrive by train"), message="m1")
            m1 = await head(store)
            await store.write(WM, base.replace("day 1: arrive", "day 1: arrive by train").replace(
                "# Plan", "# Lisbon plan"), message="m2")
            return [m1, await head(store)]

        async def exp_side() -> list[str]:
            await exp.write(WM, base.replace("day 3: beach", "day 3: surf lesson"), message="b1")
            b1 = await exp.resolve("HEAD")
            await exp.write(WM, base.replace("day 3: beach", "day 3: surf lesson") + "day 5: extra\n", message="b2")
            return [b1, await exp.resolve("HEAD")]

        if order == "branch-newer":
            m1, m2 = await main_side()
            b1, b2 = await exp_side()
        else:
            b1, b2 = await exp_side()
            m1, m2 = await main_side()
        if order == "branch-commits-elsewhere-last":
            # exp's newest commit is younger than main's edits of the file but
            # does not touch it: the file's history on exp is still b2, b1, t1.
            await exp.write("/exp-note.md", "note\n", message="b3")

        merged = await store.merge("exp")
        text = await store.read(WM)
        assert text == (
            "# Lisbon plan\nday 1: arrive by train\nday 2: museum\nday 3: surf lesson\nday 4: leave\nday 5: extra\n"
        )
        assert owners(await store.blame(WM)) == [
            (1, "# Lisbon plan", m2),
            (2, "day 1: arrive by train", m1),
            (3, "day 2: museum", t1),
            (4, "day 3: surf lesson", b1),
            (5, "day 4: leave", t1),
            (6, "day 5: extra", b2),
        ]
        # A later edit on top of the merge takes over only its own line.
        await store.write(WM, text.replace("day 2: museum", "day 2: tram 28"), message="after merge")
        after = await head(store)
        assert [b.commit.id for b in await store.blame(WM)] == [m2, m1, after, b1, t1, b2]
        # Blame as of the merge commit is unchanged by the later edit.
        assert [b.commit.id for b in await store.blame(WM, rev=merged.commit)] == [m2, m1, t1, b1, t1, b2]
        # The per-path log of the file includes both sides.
        assert {m1, m2, b1, b2, t1, merged.commit} <= set(await ids(store, WM))
    finally:
        exp.close()


@pytest.mark.parametrize("settle", ["strategy", "resolution"])
async def test_blame_after_a_merge_that_kept_our_side_reads_our_file(store, settle):
    """A merge that kept our version of a file the other side also changed: blame at any
    later revision, from any handle, must describe the file as it is there."""
    await store.write(WM, "one\ntwo\n", message="seed")
    seed = await head(store)
    exp = await store.branch("exp")
    try:
        await store.write(WM, "one\ntwo main\n", message="main edit")
        main_edit = await head(store)
        await exp.write(WM, "one\ntwo exp\n", message="exp edit")
        if settle == "strategy":
            merged = await store.merge("exp", strategy="ours")
        else:
            merged = await store.merge("exp", resolutions={WM: "one\ntwo main\n"})
        await store.write("/elsewhere.md", "x\n", message="later, elsewhere")
        assert await store.read(WM) == "one\ntwo main\n"
        expected = [(1, "one", seed), (2, "two main", main_edit)]
        assert owners(await store.blame(WM)) == expected
        assert owners(await store.blame(WM, rev="HEAD~1")) == expected
        assert owners(await store.blame(WM, rev=merged.commit)) == expected
        assert owners(await exp.blame(WM, rev="main")) == expected
        # The per-path log answers the same whoever asks, and has our edit.
        mine = await ids(store, WM)
        assert [c.id for c in await store.log(WM, rev="HEAD~1")] == mine
        assert [c.id for c in await exp.log(WM, rev="main")] == mine
        assert [c.id for c in await store.at(merged.commit).log(WM)] == mine
        assert {main_edit, seed} <= set(mine)
    finally:
        exp.close()


async def test_blame_of_resolved_conflict_line_belongs_to_the_merge(store):
    await store.write(WM, "a\nb\nc\n")
    base = await head(store)
    exp = await store.branch("exp")
    try:
        await exp.write(WM, "a\nB-exp\nc\n")
        await store.write(WM, "a\nB-main\nc\n")
        result = await store.merge("exp", resolutions={WM: "a\nB-both\nc\n"})
        assert owners(await store.blame(WM)) == [(1, "a", base), (2, "B-both", result.commit), (3, "c", base)]
    finally:
        exp.close()


# --------------------------------------------------------------------------- restore


async def test_restore_a_file(store):
    await store.write(WM, "v1\n", message="one")
    v1 = await head(store)
    await store.write("/other.md", "other 1\n")
    await store.write(WM, "v2\n", message="two")
    await store.write("/other.md", "other 2\n")
    before = await ids(store)

    new = await store.restore(WM, v1)

    assert new == await head(store)
    assert await ids(store) == [new, *before]
    assert await store.read(WM) == "v1\n"
    assert await store.read("/other.md") == "other 2\n"  # only the path is restored
    c = await store.show(new)
    assert c.paths == (WM,) and c.parents == (before[0],)
    # History is kept: the version being replaced is still readable.
    assert await store.read(WM, rev="HEAD~1") == "v2\n"
    assert [c.message for c in await store.log(WM)][1:] == ["two", "one"]
    # Restoring again changes nothing and makes no commit.
    assert await store.restore(WM, v1) is None
    assert await ids(store) == [new, *before]
    assert await store.fsck() == []


async def test_restore_a_deleted_file_and_to_before_it_existed(store):
    await store.write("/keep.md", "k\n")
    empty_of_f = await head(store)
    await store.write("/f.md", "f\n")
    had_f = await head(store)
    await store.delete("/f.md")
    assert await store.restore("/f.md", had_f)
    assert await store.read("/f.md") == "f\n"
    # Restoring to a revision where the path did not exist deletes it.
    assert await store.restore("/f.md", empty_of_f)
    assert await store.exists("/f.md") is False
    assert await store.read("/keep.md") == "k\n"
    with pytest.raises(memrev.RevisionNotFound):
        await store.restore("/f.md", "no-such-rev")


async def test_restore_a_directory(store):
    await store.write("/memory/working.md", "wm 1\n")
    await store.write("/memory/facts/a.md", "a 1\n")
    await store.write("/memory/facts/b.md", "b 1\n")
    await store.write("/artifacts/x.md", "x 1\n")
    then = await head(store)
    then_tree = await snapshot(store)

    await store.write("/memory/working.md", "wm 2\n")
    await store.delete("/memory/facts/b.md")
    await store.write("/memory/facts/c.md", "c (new)\n")
    await store.write("/memory/deep/d.md", "d (new)\n")
    await store.write("/artifacts/x.md", "x 2\n")
    before = await ids(store)

    new = await store.restore("/memory", then)

    assert new is not None and await ids(store) == [new, *before]
    now = await snapshot(store)
    assert {p: t for p, t in now.items() if p.startswith("/memory/")} == {
        p: t for p, t in then_tree.items() if p.startswith("/memory/")
    }
    assert now["/artifacts/x.md"] == "x 2\n"  # outside the directory: untouched
    assert await store.exists("/memory/deep") is False
    assert set((await store.show(new)).paths) == {
        "/memory/working.md", "/memory/facts/b.md", "/memory/facts/c.md", "/memory/deep/d.md",
    }
    assert await store.restore("/memory/", then) is None  # trailing slash, nothing left to do
    # Restoring the root brings back the whole tree.
    assert await store.restore("/", then)
    assert await snapshot(store) == then_tree
    assert await store.fsck() == []


# --------------------------------------------------------------------------- revert


async def test_revert_a_commit_and_revert_the_revert(store):
    await store.write(WM, "a\nb\nc\nd\ne\n", message="base")
    await store.write(WM, "a\nB\nc\nd\ne\n", message="edit b")
    target = await head(store)
    await store.write(WM, "a\nB\nc\nd\nE\n", message="edit e")
    await store.write("/new.md", "n\n", message="add new")
    tree_before = await snapshot(store)
    before = await ids(store)

    r1 = await store.revert(target)

    assert r1 == await head(store) and await ids(store) == [r1, *before]
    assert await store.read(WM) == "a\nb\nc\nd\nE\n"  # only that commit's change is undone
    assert await store.read("/new.md") == "n\n"
    c = await store.show(r1)
    assert c.paths == (WM,)
    assert c.meta.get("revert") == target
    assert target[:10] in c.message and "edit b" in c.message

    r2 = await store.revert(r1)
    assert r2 is not None and r2 != r1
    assert await snapshot(store) == tree_before
    assert await ids(store) == [r2, r1, *before]
    assert await store.fsck() == []


async def test_revert_of_file_additions_and_deletions(store):
    await store.write("/keep.md", "k\n")
    await store.write("/gone.md", "g\n")
    async with store.transaction(message="mixed"):
        await store.write("/added.md", "added\n")
        await store.delete("/gone.md")
    mixed = await head(store)
    tree_after = await snapshot(store)

    undo = await store.revert(mixed)
    assert await snapshot(store) == {"/keep.md": "k\n", "/gone.md": "g\n"}
    assert set((await store.show(undo)).paths) == {"/added.md", "/gone.md"}
    await store.revert(undo)
    assert await snapshot(store) == tree_after


async def test_revert_of_the_last_commit_restores_its_parent_tree(store):
    await store.write("/a.md", "1\n")
    await store.append("/l.jsonl", "x\n")
    parent_tree = await snapshot(store)
    await store.append("/l.jsonl", "y\n")
    await store.write("/a.md", "2\n")
    await store.revert("HEAD")
    assert await store.read("/a.md") == "1\n"
    await store.revert("HEAD~2")  # the append of "y"
    assert await snapshot(store) == parent_tree


async def test_revert_of_an_append_removes_exactly_its_lines(store):
    await store.append("/log.jsonl", '{"n": 1}\n')
    await store.append("/log.jsonl", '{"n": 2}\n{"n": 3}\n')
    appended = await head(store)
    await store.write("/other.md", "later, elsewhere\n")
    undo = await store.revert(appended)
    assert await store.read("/log.jsonl") == '{"n": 1}\n'
    assert (await store.show(undo)).paths == ("/log.jsonl",)
    assert await store.read("/other.md") == "later, elsewhere\n"
    await store.revert(undo)
    assert await store.read("/log.jsonl") == '{"n": 1}\n{"n": 2}\n{"n": 3}\n'


async def test_revert_conflict_writes_nothing(store):
    await store.write(WM, "a\nb\nc\n")
    await store.write(WM, "a\nB\nc\n")
    target = await head(store)
    await store.write(WM, "a\nB2\nc\n")
    before, tree = await ids(store), await snapshot(store)
    with pytest.raises(memrev.MergeConflict) as info:
        await store.revert(target)
    assert [(c.path, c.kind) for c in info.value.conflicts] == [(WM, "content")]
    assert await ids(store) == before
    assert await snapshot(store) == tree


async def test_revert_that_changes_nothing_makes_no_commit(store):
    await store.write("/a.md", "1\n")
    await store.write("/a.md", "2\n")
    target = await head(store)
    await store.write("/a.md", "1\n")  # already undone by hand
    before = await ids(store)
    assert await store.revert(target) is None
    assert await ids(store) == before
    with pytest.raises(memrev.RevisionNotFound):
        await store.revert("no-such-rev")


async def test_revert_of_the_first_commit(store):
    await store.write("/first.md", "1\n")
    first = await head(store)
    await store.write("/second.md", "2\n")
    await store.revert(first)
    assert await snapshot(store) == {"/second.md": "2\n"}


# --------------------------------------------------------------------------- read-only revision views


async def test_at_is_a_read_only_view_of_a_revision(store):
    await store.write("/memory/working.md", "wm 1\n", message="one")
    await store.append("/log/s.jsonl", "line 1\n")
    rev = await head(store)
    await store.write("/memory/working.md", "wm 2\n", message="two")
    await store.write("/memory/extra.md", "extra\n")
    await store.append("/log/s.jsonl", "line 2\n")
    before_ids, before_tree = await ids(store), await snapshot(store)

    view = store.at(rev)
    assert view.commit == rev
    assert await view.read("/memory/working.md") == "wm 1\n"
    assert await view.read("/memory/extra.md") is None
    assert await view.list("/memory") == ["working.md"]
    assert await view.list("/") == ["log/", "memory/"]
    assert await view.exists("/memory/extra.md") is False
    assert await view.exists("/memory") is True
    assert await view.read_range("/log/s.jsonl", 0, 4) == "line"
    assert await view.read_range("/log/s.jsonl", 5) == "1\n"
    assert [c.id for c in await view.log()] == before_ids[-2:]
    assert [c.message for c in await view.log("/memory/working.md")] == ["one"]

    for mutation in (
        view.write("/memory/working.md", "changed\n"),
        view.write("/new.md", "new\n"),
        view.append("/log/s.jsonl", "line 3\n"),
        view.delete("/memory/working.md"),
        view.delete("/"),
    ):
        with pytest.raises(memrev.ReadOnlyRevision) as info:
            await mutation
        assert isinstance(info.value, PermissionError)
        assert rev[:10] in str(info.value)

    # Nothing was written, and the view stays frozen while the branch moves on.
    assert await ids(store) == before_ids
    assert await snapshot(store) == before_tree
    await store.write("/memory/working.md", "wm 3\n")
    assert await view.read("/memory/working.md") == "wm 1\n"
    sub = await view.on_change("/", lambda path: None)
    await sub.close()
    # Any revision spelling works; a bad one is refused up front.
    assert store.at("HEAD~2").commit == before_ids[1]
    assert (await store.at(rev[:8]).read("/memory/working.md")) == "wm 1\n"
    with pytest.raises(memrev.RevisionNotFound):
        store.at("no-such-rev")


async def test_at_a_tag_and_a_branch(store):
    await store.write("/a.md", "1\n")
    await store.tag("v1")
    exp = await store.branch("exp")
    try:
        await exp.write("/a.md", "exp\n")
        await store.write("/a.md", "2\n")
        assert await store.at("v1").read("/a.md") == "1\n"
        assert await store.at("exp").read("/a.md") == "exp\n"
        assert await exp.at("HEAD").read("/a.md") == "exp\n"
        with pytest.raises(memrev.ReadOnlyRevision):
            await store.at("exp").write("/a.md", "no\n")
        assert await exp.read("/a.md") == "exp\n"
    finally:
        exp.close()
