"""Hypothesis properties of the history toolkit (issue 4).

- merging a branch with itself changes nothing;
- a merge where only one side changed equals that side;
- revert of a commit followed by revert of the revert restores the tree;
- export then import into an empty store reproduces identical commit ids.

Each example runs on a fresh store in its own temporary directory.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import memrev
from helpers import FreshStore, apply_steps, ids, snapshot, step_lists
from memrev import VersionedStore

pytestmark = [pytest.mark.anyio, pytest.mark.slow]  # hypothesis, a fresh store per example

PATHS = ["/a.md", "/d/b.md", "/d/e/c.md", "/log.jsonl"]
WORDS = ["alpha", "bravo", "charlie", "delta", "echo"]
ops = step_lists(PATHS, WORDS, max_lines=5)

SETTINGS = settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


async def seed(store: VersionedStore, steps) -> None:
    """At least one commit, then the generated steps."""
    await store.write("/a.md", "alpha\nbravo\n", message="seed")
    await apply_steps(store, steps)


# --------------------------------------------------------------------------- properties


@SETTINGS
@given(steps=ops)
async def test_merging_a_branch_with_itself_changes_nothing(steps):
    async with FreshStore() as store:
        await seed(store, steps)
        before_ids, before_tree = await ids(store), await snapshot(store)
        twin = await store.branch("twin")
        try:
            for source in ("main", "HEAD", before_ids[0], "twin"):
                result = await store.merge(source)
                assert (result.status, result.commit, result.paths) == ("up-to-date", None, ()), source
            result = await twin.merge("main")
            assert (result.status, result.commit) == ("up-to-date", None)
            assert await ids(store) == before_ids
            assert await ids(twin) == before_ids
            assert await snapshot(store) == before_tree
            assert await store.fsck() == []
        finally:
            twin.close()


@SETTINGS
@given(base=ops, changes=ops, side=st.sampled_from(["branch", "main"]))
async def test_merge_where_only_one_side_changed_equals_that_side(base, changes, side):
    async with FreshStore() as store:
        await seed(store, base)
        exp = await store.branch("exp")
        try:
            fork = await store.resolve("HEAD")
            changer = exp if side == "branch" else store
            await apply_steps(changer, changes)
            expected = await snapshot(changer)
            ours, theirs = await store.resolve("HEAD"), await exp.resolve("HEAD")

            result = await store.merge("exp")

            assert await snapshot(store) == expected
            if side == "main" or theirs == fork:
                # Nothing on exp that main lacks.
                assert (result.status, result.commit) == ("up-to-date", None)
                assert await store.resolve("HEAD") == ours
            else:
                assert result.status == "merged"
                merged = await store.show("HEAD")
                assert merged.id == result.commit
                assert merged.parents == (ours, theirs)
                assert await store.diff("HEAD", "exp") == []
            assert await store.fsck() == []
        finally:
            exp.close()


@SETTINGS
@given(steps=ops, pick=st.integers(min_value=0, max_value=20))
async def test_revert_then_revert_of_the_revert_restores_the_tree(steps, pick):
    async with FreshStore() as store:
        await seed(store, steps)
        log = await store.log()
        target = log[pick % len(log)]
        tree0, ids0 = await snapshot(store), [c.id for c in log]

        try:
            first = await store.revert(target.id)
        except memrev.MergeConflict as e:
            # Refused: nothing written, and the conflicts name paths the target changed.
            assert e.conflicts and {c.path for c in e.conflicts} <= set(target.paths)
            assert await ids(store) == ids0
            assert await snapshot(store) == tree0
            return
        if first is None:
            assert await ids(store) == ids0
            assert await snapshot(store) == tree0
            return
        assert await ids(store) == [first, *ids0]
        if target.id == ids0[0]:
            # Reverting HEAD gives back its parent's tree (empty for a root commit).
            expected = await snapshot(store, target.parents[0]) if target.parents else {}
            assert await snapshot(store) == expected

        second = await store.revert(first)

        assert second is not None
        assert await snapshot(store) == tree0
        assert await ids(store) == [second, first, *ids0]
        assert await store.fsck() == []


@SETTINGS
@given(
    main_steps=ops,
    branch_steps=ops,
    later_steps=ops,
    merge=st.sampled_from([None, "ours", "theirs"]),
    tag=st.booleans(),
)
async def test_export_then_import_reproduces_identical_commit_ids(main_steps, branch_steps, later_steps, merge, tag):
    fresh = FreshStore(author="prop")
    async with fresh as store:
        tmp = fresh.tmp.name
        await seed(store, main_steps)
        if tag:
            await store.tag("t1")
        exp = await store.branch("exp")
        try:
            await apply_steps(exp, branch_steps)
            await apply_steps(store, later_steps)
            if merge is not None:
                await store.merge("exp", strategy=merge)
        finally:
            exp.close()
        bundle = os.path.join(tmp, "all.memrev")
        await store.export_bundle(bundle)

        target = VersionedStore(os.path.join(tmp, "target"))
        try:
            await target.import_bundle(bundle)
            assert await target.branches() == await store.branches()
            assert await target.tags() == await store.tags()
            for branch in await store.branches():
                log = await store.log(rev=branch)
                assert await target.log(rev=branch) == log
                assert await snapshot(target, branch) == await snapshot(store, branch)
                for path in sorted({p for c in log for p in c.paths}):
                    assert await ids(target, path, rev=branch) == await ids(store, path, rev=branch), path
            assert await target.fsck() == []
            assert await store.fsck() == []
        finally:
            target.close()
