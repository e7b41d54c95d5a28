"""Pickaxe (issue 11): ``log(contains=...)`` is git's ``-S``, ``log(matching=...)`` git's ``-G``.

The hypothesis tests compare the indexed search with a brute-force scan that
reads every version of every path through ``read(rev=...)``.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import FreshStore, apply_steps, step_lists
from memrev import VersionedStore, errors

pytestmark = pytest.mark.anyio

PATHS = ["/a.md", "/d/b.md", "/d/e/c.md"]
WORDS = ["pork", "vegetarian", "tea", "pork pork", "coffee"]
ops = step_lists(PATHS, WORDS, max_lines=4)
needle = st.sampled_from(["pork", "vegetarian", "tea\n", "o"])

SETTINGS = settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


async def brute_force(store: VersionedStore, needle_text: str, paths: list[str]) -> list[str]:
    """Every commit reachable from HEAD where the count of ``needle_text`` in some path differs from its first parent."""
    out = []
    for c in await store.log():
        parent = c.parents[0] if c.parents else None
        for p in paths:
            new = await store.read(p, rev=c.id) or ""
            old = (await store.read(p, rev=parent) or "") if parent else ""
            if old.count(needle_text) != new.count(needle_text):
                out.append(c.id)
                break
    return out


@pytest.mark.slow
@SETTINGS
@given(base=ops, ours=ops, theirs=ops, word=needle, strategy=st.sampled_from(["ours", "theirs"]))
async def test_store_wide_pickaxe_equals_brute_force_with_merges(base, ours, theirs, word, strategy):
    async with FreshStore() as store:
        await store.write("/a.md", "seed\n")
        await apply_steps(store, base)
        side = await store.branch("side")
        try:
            await apply_steps(side, theirs)
            await apply_steps(store, ours)
            await store.merge("side", strategy=strategy)
        finally:
            side.close()
        found = [c.id for c in await store.log(contains=word)]
        assert found == await brute_force(store, word, PATHS)


@pytest.mark.slow
@SETTINGS
@given(steps=ops, word=needle, path=st.sampled_from(PATHS))
async def test_per_path_pickaxe_equals_brute_force(steps, word, path):
    async with FreshStore() as store:
        await store.write("/a.md", "seed\n")
        await apply_steps(store, steps)
        found = [c.id for c in await store.log(path, contains=word)]
        assert found == await brute_force(store, word, [path])


@pytest.mark.slow
@SETTINGS
@given(steps=ops, word=needle)
async def test_directory_pickaxe_equals_brute_force_over_files_under_it(steps, word):
    async with FreshStore() as store:
        await store.write("/d/b.md", "seed\n")
        await apply_steps(store, steps)
        found = [c.id for c in await store.log("/d", contains=word)]
        assert found == await brute_force(store, word, ["/d/b.md", "/d/e/c.md"])


async def test_pickaxe_finds_when_memory_learned_and_forgot(tmp_path):
    async with VersionedStore(tmp_path / "s") as store:
        await store.write("/memory/working.md", "likes tea\n", message="t1")
        await store.write("/memory/working.md", "likes tea\nvegetarian\n", message="learn")
        await store.write("/memory/working.md", "likes coffee\nvegetarian\n", message="unrelated")
        await store.write("/notes.md", "vegetarian friends\n", message="elsewhere")
        await store.write("/memory/working.md", "likes coffee\n", message="forget")
        msgs = [c.message for c in await store.log("/memory/working.md", contains="vegetarian")]
        assert msgs == ["forget", "learn"]
        assert [c.message for c in await store.log(contains="vegetarian")] == ["forget", "elsewhere", "learn"]
        assert [c.message for c in await store.log(contains="vegetarian", limit=1)] == ["forget"]


async def test_matching_is_gits_dash_g_lines_added_or_removed(tmp_path):
    async with VersionedStore(tmp_path / "s") as store:
        await store.write("/m.md", "a\nvegetarian since 2020\n", message="add")
        # The count of "vegetarian" stays the same, but a matching line changes: -G sees it, -S does not.
        await store.write("/m.md", "a\nvegetarian since 2021\n", message="edit")
        await store.write("/m.md", "b\nvegetarian since 2021\n", message="other line")
        assert [c.message for c in await store.log("/m.md", matching=r"veg\w+ since")] == ["edit", "add"]
        assert [c.message for c in await store.log("/m.md", contains="vegetarian")] == ["add"]
        both = await store.log("/m.md", contains="vegetarian", matching="since")
        assert [c.message for c in both] == ["add"]


async def test_metadata_filters(tmp_path):
    async with VersionedStore(tmp_path / "s") as store:
        await store.write("/x", "1", meta={"agent": "planner", "tool": "knowledge"}, message="p1")
        await store.write("/x", "2", meta={"agent": "writer"}, message="w1")
        await store.write("/y", "3", meta={"agent": "planner"}, message="p2")
        assert [c.message for c in await store.log(agent="planner")] == ["p2", "p1"]
        assert [c.message for c in await store.log("/x", agent="planner")] == ["p1"]
        assert [c.message for c in await store.log(tool="knowledge")] == ["p1"]
        now = datetime.now(timezone.utc)
        assert len(await store.log(since=now - timedelta(hours=1))) == 3
        assert await store.log(since=now + timedelta(hours=1)) == []
        assert await store.log(until=now - timedelta(hours=1)) == []
        naive_future = (now + timedelta(hours=1)).replace(tzinfo=None)
        assert len(await store.log(until=naive_future)) == 3


async def test_bad_patterns_are_typed_errors(tmp_path):
    async with VersionedStore(tmp_path / "s") as store:
        await store.write("/x", "1")
        with pytest.raises(errors.InvalidPattern):
            await store.log(matching="(unclosed")
        with pytest.raises(errors.InvalidPattern):
            await store.log(contains="")
        assert isinstance(errors.InvalidPattern("x"), ValueError)


async def test_log_of_a_deleted_directory_lists_its_commits(tmp_path):
    """Regression: a directory gone at HEAD has no change rows of its own, and its log came back empty."""
    async with VersionedStore(tmp_path / "s") as store:
        await store.write("/d/a.md", "pork\n", message="add")
        await store.write("/x.md", "x", message="elsewhere")
        await store.delete("/d", message="drop")
        assert [c.message for c in await store.log("/d")] == ["drop", "add"]
        assert [c.message for c in await store.log("/d", contains="pork")] == ["drop", "add"]
        assert await store.log("/never") == []


@pytest.mark.slow
@SETTINGS
@given(steps=ops, word=st.sampled_from(["pork", "tea", "^coffee$"]), path=st.sampled_from(PATHS))
async def test_matching_agrees_with_line_counts(steps, word, path):
    """-G against a scan of every version: whatever line diff is chosen, a commit that changes how
    many lines match must be found, and one where neither side has a matching line must not."""
    import re

    pattern = re.compile(word)
    async with FreshStore() as store:
        await store.write("/a.md", "seed\n")
        await apply_steps(store, steps)
        found = {c.id for c in await store.log(path, matching=word)}
        for c in await store.log():
            parent = c.parents[0] if c.parents else None
            new = (await store.read(path, rev=c.id) or "").splitlines()
            old = ((await store.read(path, rev=parent) or "") if parent else "").splitlines()
            old_hits, new_hits = [x for x in old if pattern.search(x)], [x for x in new if pattern.search(x)]
            if sorted(old_hits) != sorted(new_hits):
                assert c.id in found
            if not old_hits and not new_hits:
                assert c.id not in found
