"""Hypothesis properties of purge (issue 22): a purge is the history that never held the content.

A random history (writes, appends and deletes of files whose lines come from a
small vocabulary holding two "secret" words, commit messages that may hold them,
maybe a branch and a merge) is purged with a random predicate (path patterns
and/or the secret strings). The oracle is the same steps replayed into a second,
fresh store with the purged content left out: the paths the patterns match are
never written (nor deleted), and each secret is replaced by ``[purged]`` in
every text written or appended, in every message and in provenance.

"Corresponding" commits: a step makes a commit in the original only when it
changes the tree. A step whose every change was purged changes nothing in the
oracle, so it makes no commit there, and the purge drops its commit. So the
purged store's log and the oracle's log hold the same commits, in the same order,
commit for commit: the same files, messages, authors and number of parents.

Also: every original commit id resolves (through the purge's map) to a commit
whose files are the original's with the predicate applied; HEAD's files are the
oracle's; ``fsck`` is clean; ``verify_purged`` finds no secret; no commit left
names a purged path; the same purge run again changes nothing.

The branch's steps and main's steps after the fork touch disjoint paths, and
each side commits a marker file no predicate matches, so the merge is a real
merge (never a fast-forward, never "up-to-date", never a conflict) in both
stores: then merging the purged sides gives the purged merge. The property compares
each branch's first-parent line in order and its whole log as a multiset; the whole
log's order across parallel lines is the two plain tests at the end (they fail: a
purge lists a rewritten commit as newer than an unchanged one made after it).
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from helpers import FreshStore, snapshot
from memrev import Store
from memrev.core.paths import normalize

pytestmark = pytest.mark.anyio

MARKER = "[purged]"
SECRETS = ["hunter2", "s3cr3t"]
WORDS = ["alpha", "bravo", "charlie", "hunter2", "xs3cr3tx", "s3cr3t"]
MAIN_PATHS = ["/a.md", "/c.md", "/p/x.md", "/p/deep/z.txt", "/q/r/y.txt", "/q", "/log.jsonl"]  # "/q": a file and a folder
MAIN_FOLDERS = ["/p", "/q"]
SIDE_PATHS = ["/b/x.md", "/b/y.txt", "/b/deep/w.md"]
SIDE_FOLDERS = ["/b", "/b/deep"]
MESSAGES = [None, "plain note", "note with hunter2", "s3cr3t and hunter2 both"]
TOOLS = [None, "grep", "grep hunter2"]  # provenance: the commit's ``meta``

# The patterns a purge may name, each with the oracle's own reading of it.
PATTERNS = {
    "/p/**": lambda p: p.startswith("/p/"),
    "/a.md": lambda p: p == "/a.md",
    "/b/*.md": lambda p: p.startswith("/b/") and p.count("/") == 2 and p.endswith(".md"),
    "/**/*.txt": lambda p: p.endswith(".txt"),
}


PAD = "a padding line long enough that an edit is stored as a delta on the version before. " * 2 + "\n"


def steps(paths: list[str], folders: list[str], max_size: int) -> st.SearchStrategy:
    line = st.lists(st.sampled_from(WORDS), min_size=1, max_size=2).map(lambda ws: " ".join(ws) + "\n")
    text = st.tuples(st.sampled_from(["", PAD]), st.lists(line, max_size=3)).map(lambda pl: pl[0] + "".join(pl[1]))
    step = st.one_of(
        st.tuples(st.just("write"), st.sampled_from(paths), text, st.sampled_from(MESSAGES), st.sampled_from(TOOLS)),
        st.tuples(st.just("append"), st.sampled_from(paths), line),
        st.tuples(st.just("delete"), st.sampled_from(paths + folders)),
    )
    return st.lists(step, max_size=max_size)


histories = st.fixed_dictionaries(
    {
        "before": steps(MAIN_PATHS, MAIN_FOLDERS, 6),
        "fork": st.booleans(),
        "side": steps(SIDE_PATHS, SIDE_FOLDERS, 3),
        "after": steps(MAIN_PATHS, MAIN_FOLDERS, 2),
        "merge": st.booleans(),
        "delete_side": st.booleans(),
    }
)
_patterns = st.lists(st.sampled_from(sorted(PATTERNS)), min_size=1, max_size=2, unique=True)
_secrets = st.lists(st.sampled_from(SECRETS), min_size=1, max_size=2, unique=True)
predicates = st.one_of(  # (patterns, secrets): at least one of them
    st.tuples(_patterns, st.just([])), st.tuples(st.just([]), _secrets), st.tuples(_patterns, _secrets)
)

SETTINGS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


class Purge:
    """The predicate as the oracle applies it."""

    def __init__(self, patterns: list[str], secrets: list[str]) -> None:
        self.patterns, self.secrets = patterns, secrets

    def path(self, path: str) -> bool:
        return any(PATTERNS[p](path) for p in self.patterns)

    def text(self, text: str | None) -> str | None:
        if text is None:
            return None
        for s in self.secrets:
            text = text.replace(s, MARKER)
        return text

    def files(self, snap: dict[str, str]) -> dict[str, str]:
        out = {}
        for p, t in snap.items():
            if not self.path(p):
                redacted = self.text(t)
                assert redacted is not None
                out[p] = redacted
        return out


async def apply(store: Store, todo, purge: Purge | None) -> None:
    """Run the steps; with ``purge``, as the oracle: purged paths untouched, secrets replaced."""
    for name, path, *rest in todo:
        if purge is not None and purge.path(path):
            continue  # a folder delete is never skipped: no pattern names a folder itself
        keep = purge.text if purge is not None else (lambda t: t)
        if name == "write":
            text, message, tool = rest
            if tool is None:
                await store.write(path, keep(text), message=keep(message))
            else:
                async with store.provenance(agent="prop", tool=keep(tool)):
                    await store.write(path, keep(text), message=keep(message))
        elif name == "append":
            await store.append(path, keep(rest[0]))
        else:
            # The message named, as a delete of a folder (or of "/q", a file and a folder) that
            # also took purged files would say "delete 2 paths" by default: a count the purge
            # does not rewrite (a message is the caller's text, only the strings are replaced).
            await store.delete(path, message=f"delete {path}")


async def build(store: Store, history, purge: Purge | None) -> list[str]:
    """The history (the oracle's with ``purge``); returns the branches it left (and the tag "t")."""
    keep = purge.text if purge is not None else (lambda t: t)
    await store.write("/seed.md", "seed alpha\n", message=keep("seed, hunter2 not yet"))
    await apply(store, history["before"], purge)
    await store.tag("t")
    if not history["fork"]:
        return ["main", "t"]
    side = await store.branch("side")
    try:
        await apply(side, history["side"], purge)
        await side.write("/b/marker", "side marker\n", message="side marker")
        await apply(store, history["after"], purge)
        await store.write("/main-marker", "main marker\n", message="main marker")
        if history["merge"]:
            result = await store.merge("side")
            assert result.status == "merged", result
    finally:
        side.close()
    if history["delete_side"]:
        await store.delete_branch("side")  # kept as refs/deleted/side@<time>: the purge rewrites it too
        (deleted,) = store.repo.backend.list_refs("refs/deleted/")
        return ["main", deleted, "t"]
    return ["main", "side", "t"]


async def commits(store: Store, branch: str) -> tuple[list[tuple], list[tuple]]:
    """The branch's first-parent line, newest first, and its whole log sorted: each commit as
    (files, message, author, meta, paths changed, number of parents). (The whole log's own order, across parallel
    lines of a merge, is checked by ``test_a_purge_keeps_the_log_order_of_a_merged_branch``.)"""
    log = await store.log(rev=branch)
    by_id = {c.id: c for c in log}
    seen = {
        c.id: (sorted((await snapshot(store, c.id)).items()), c.message, c.author, c.meta, c.paths, len(c.parents))
        for c in log
    }
    line, at = [], log[0].id if log else None
    while at is not None:
        line.append(seen[at])
        parents = by_id[at].parents
        at = parents[0] if parents else None
    return line, sorted(seen.values(), key=repr)


@pytest.mark.slow  # hypothesis, two fresh stores per example
@SETTINGS
@given(history=histories, predicate=predicates)
async def test_a_purged_history_is_the_history_that_never_held_the_content(history, predicate):
    patterns, secrets = predicate
    purge = Purge(patterns, secrets)
    async with FreshStore() as store, FreshStore() as oracle:
        branches = await build(store, history, None)
        originals = {c.id: await snapshot(store, c.id) for b in branches for c in await store.log(rev=b)}

        report = await store.purge(paths=patterns or None, text=secrets or None, reason="property")

        assert report.verified, report.found
        event(f"commits dropped: {min(report.commits_dropped, 2)}, rewritten: {min(report.commits_rewritten, 2)}")
        oracle_revs = await build(oracle, history, purge)
        assert sorted(await store.branches()) == sorted(b for b in branches if b != "t" and not b.startswith("refs/"))
        assert sorted(await store.tags()) == ["t"]
        for b, o in zip(branches, oracle_revs, strict=True):
            (got_line, got_all), (want_line, want_all) = await commits(store, b), await commits(oracle, o)
            assert got_line == want_line, b
            assert got_all == want_all, b
        assert await snapshot(store) == await snapshot(oracle)
        # the per-path history (a derived index the purge rebuilds), files and folders
        for path in [*MAIN_PATHS, *MAIN_FOLDERS, *SIDE_PATHS, *SIDE_FOLDERS]:
            for b, o in zip(branches, oracle_revs, strict=True):
                got = [(c.message, c.paths, len(c.parents)) for c in await store.log(path, rev=b)]
                want = [(c.message, c.paths, len(c.parents)) for c in await oracle.log(path, rev=o)]
                assert got == want, (path, b)
        # blame of every file at the head: each line's commit, by its message
        for path in await snapshot(oracle):
            got_blame = [(line.text, line.commit.message) for line in await store.blame(path)]
            want_blame = [(line.text, line.commit.message) for line in await oracle.blame(path)]
            assert got_blame == want_blame, path
        # every old id resolves to its commit with the predicate applied (a dropped one: to
        # the commit it was dropped onto, whose files are the same)
        for old, files in originals.items():
            new = await store.resolve(old)
            assert new == (report.id_map.get(old, old) or new)
            assert await snapshot(store, new) == purge.files(files), old
        assert await store.fsck() == []
        if secrets:
            assert await store.verify_purged(text=secrets) == []
        for b in branches:
            for c in await store.log(rev=b):
                assert not any(purge.path(normalize(p)) for p in c.paths), (c.id, c.paths)
        again = await store.purge(paths=patterns or None, text=secrets or None, reason="property, again")
        assert (again.commits_rewritten, again.commits_dropped, again.refs_moved, again.record) == (0, 0, {}, None)
        assert again.verified, again.found


async def test_a_purge_keeps_the_log_order_of_a_merged_branch():
    """A side branch's commit the purge rewrites is listed where it was: older than main's
    commit made after it, as in a store that never held the purged file."""
    async def history(store: Store, purged: bool) -> None:
        await store.write("/seed.md", "seed\n")
        side = await store.branch("side")
        try:
            if not purged:
                await side.write("/b/x.md", "to purge\n")
            await side.write("/b/marker", "side marker\n", message="side marker")
            await store.write("/main-marker", "main marker\n", message="main marker")
            assert (await store.merge("side")).status == "merged"
        finally:
            side.close()

    async with FreshStore() as store, FreshStore() as oracle:
        await history(store, False)
        before = [c.message for c in await store.log()]
        assert before == ["merge side into main", "main marker", "side marker", "write /b/x.md", "write /seed.md"]
        await store.purge(paths=["/b/*.md"], reason="order")
        await history(oracle, True)
        want = [c.message for c in await oracle.log()]
        assert want == ["merge side into main", "main marker", "side marker", "write /seed.md"]
        assert [c.message for c in await store.log()] == want


@pytest.mark.slow
@SETTINGS
@given(history=histories, first=predicates, second=predicates)
async def test_two_purges_are_one_purge_of_both(history, first, second):
    """Purging one predicate, then another, gives the history that never held either; an
    original id resolves through both purges' maps to its commit as it is now."""
    both = Purge(sorted({*first[0], *second[0]}), sorted({*first[1], *second[1]}))
    async with FreshStore() as store, FreshStore() as oracle:
        branches = await build(store, history, None)
        originals = {c.id: await snapshot(store, c.id) for b in branches for c in await store.log(rev=b)}
        records = 0
        for patterns, secrets in (first, second):
            report = await store.purge(paths=patterns or None, text=secrets or None, reason="one of two")
            assert report.verified, report.found
            records += report.record is not None
        oracle_revs = await build(oracle, history, both)
        for b, o in zip(branches, oracle_revs, strict=True):
            (got_line, got_all), (want_line, want_all) = await commits(store, b), await commits(oracle, o)
            assert got_line == want_line, b
            assert got_all == want_all, b
        heads = {await store.resolve(b) for b in branches}
        for old, files in originals.items():
            new = await store.resolve(old)
            assert await snapshot(store, new) == both.files(files), old
            moved = await store.rewritten(old)
            if new != old:
                assert moved is not None and moved.new == new, (old, new, moved)
        assert heads <= {c.id for b in branches for c in await store.log(rev=b)}
        assert await store.fsck() == []
        if both.secrets:
            assert await store.verify_purged(text=both.secrets) == []
        if records:  # one record per purge that changed something
            assert len(await store.log(rev="refs/purges")) == records
        else:
            assert all([await store.rewritten(old) is None for old in originals])


async def test_a_purge_keeps_the_order_of_log_all():
    """The same without a merge: ``log_all`` (every branch, newest first) after a purge that
    rewrote only the side branch's commit lists it where it was, older than main's commit
    made after it."""
    async with FreshStore() as store:
        await store.write("/seed.md", "seed\n")
        side = await store.branch("side")
        try:
            await side.write("/side.md", "hunter2 on the side\n", message="side commit")
        finally:
            side.close()
        await store.write("/main.md", "main\n", message="main commit, made after")
        order = ["main commit, made after", "side commit", "write /seed.md"]
        assert [c.message for c in await store.log_all()] == order
        report = await store.purge(text="hunter2", reason="order")
        assert report.commits_rewritten == 1 and report.verified
        assert [c.message for c in await store.log_all()] == order
