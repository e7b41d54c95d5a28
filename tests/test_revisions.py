"""Revision parsing (issue 8 item 7): ``NAME`` then ``~``, ``~n``, ``^``, ``^n``, as in git.

``"HEAD" + "~" * 40000`` took 37 s: the parser searched the whole string with
a ``$``-anchored pattern and copied it once per step (quadratic). Parsing is
now one pass, runs of first-parent steps are walked with one recursive query,
and answers agree with a brute-force walk over commit parents.
"""

from __future__ import annotations

import asyncio

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from memrev import RevisionNotFound, VersionedStore
from memrev.cli import main


class CountingStr(str):
    """A ``str`` that counts the characters copied out of it by slicing."""

    copied = 0

    def __getitem__(self, key):
        part = str.__getitem__(self, key)
        CountingStr.copied += len(part)
        return CountingStr(part)


def _history(path, n: int) -> None:
    async def build():
        async with VersionedStore(path) as s:
            for i in range(n):
                await s.write("/a.md", f"version {i}\n")

    asyncio.run(build())


@pytest.fixture(scope="module")
def linear(tmp_path_factory):
    path = tmp_path_factory.mktemp("linear")
    _history(path, 300)
    return path


def test_parsing_copies_each_character_a_bounded_number_of_times(linear):
    # Before the fix: one copy of the remaining string per step, about n²/2
    # characters (8 million for n = 4,000); now each character once or twice.
    n = 4000
    store = VersionedStore(linear, create=False)
    try:
        CountingStr.copied = 0
        with pytest.raises(RevisionNotFound, match="shorter than 4000"):
            store.repo.resolve(CountingStr("HEAD" + "~" * n), "main")
        assert CountingStr.copied <= 2 * (n + 4)
    finally:
        store.close()


def test_steps_are_summed_in_one_pass():
    from memrev.repo.revisions import parse_revision

    assert parse_revision("HEAD" + "~" * 40000) == ("HEAD", [("~", 40000)])
    assert parse_revision("main~2^^2~3^0^1") == ("main", [("~", 3), ("^", 2), ("~", 4)])
    assert parse_revision("t1") == ("t1", [])


def test_many_tildes_are_one_walk_of_the_history(linear):
    async def check():
        async with VersionedStore(linear, create=False) as s:
            calls = []
            backend = s.repo.backend
            real = backend.first_parent
            backend.first_parent = lambda oid, steps: calls.append(steps) or real(oid, steps)
            oldest = (await s.log())[-1].id
            assert await s.resolve("HEAD" + "~" * 299) == oldest
            assert calls == [299]
            with pytest.raises(RevisionNotFound, match="shorter than 40000"):
                await s.resolve("HEAD" + "~" * 40000)
            assert calls == [299, 40000]
            assert await s.resolve("HEAD~100~99^" + "^" * 99) == oldest

    asyncio.run(check())


@pytest.mark.parametrize(
    "rev",
    ["HEAD~" + "9" * 5000, "HEAD^" + "9" * 5000, "HEAD~99999999999999999999", "HEAD~x", "HEAD^-1", "~1", "^", "HEAD~1:x"],
    ids=["5000-digit ~", "5000-digit ^", "20-digit ~", "~x", "^-1", "no name", "only ^", "colon"],
)
def test_bad_or_huge_steps_are_revision_not_found(linear, rev):
    async def check():
        async with VersionedStore(linear, create=False) as s:
            with pytest.raises(RevisionNotFound) as e:
                await s.resolve(rev)
            assert len(str(e.value)) < 200, "the message repeats a huge revision"

    asyncio.run(check())


# ----------------------------------------------------------------- against a brute-force walk


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    """A history with merges: main and side grow on different files and merge back twice."""
    path = tmp_path_factory.mktemp("graph")

    async def build():
        async with VersionedStore(path) as s:
            for i in range(4):
                await s.write("/main.md", f"m{i}\n")
            side = await s.branch("side", at="HEAD~2")
            for round_ in range(2):
                for i in range(3):
                    await side.write("/side.md", f"s{round_}.{i}\n")
                await s.merge("side")
                await s.write("/main.md", f"after merge {round_}\n")
            side.close()
            await s.tag("t1", "HEAD~2")

    asyncio.run(build())
    return path


def _brute_force(repo, oid: bytes, tokens: list[tuple[str, str]]) -> bytes | None:
    for op, digits in tokens:
        n = int(digits or "1")
        if op == "~":
            for _ in range(n):
                parents = repo.commit_data(oid)[1].parents
                if not parents:
                    return None
                oid = parents[0]
        elif n:
            parents = repo.commit_data(oid)[1].parents
            if n > len(parents):
                return None
            oid = parents[n - 1]
    return oid


_tokens = st.lists(st.tuples(st.sampled_from("~^"), st.sampled_from(["", "0", "1", "2", "3", "5", "12"])), max_size=8)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(name=st.sampled_from(["HEAD", "main", "side", "t1"]), tokens=_tokens)
def test_resolve_agrees_with_a_brute_force_walk(graph, name, tokens):
    rev = name + "".join(op + digits for op, digits in tokens)
    store = VersionedStore(graph, create=False)
    try:
        repo = store.repo
        start = repo.resolve(name, "main")
        expected = _brute_force(repo, start, tokens)
        if expected is None:
            with pytest.raises(RevisionNotFound):
                repo.resolve(rev, "main")
        else:
            assert repo.resolve(rev, "main") == expected
    finally:
        store.close()


def test_cli_takes_caret_and_tilde(graph):
    def out(*args):
        result = CliRunner().invoke(main, ["--store", str(graph), *args])
        assert result.exit_code == 0, result.output
        return result.output.strip()

    merge = out("log", "--rev", "HEAD~1", "-n", "1", "--oneline").split()[0]
    assert out("show", "HEAD~1^2:/side.md") == "s1.2"
    assert out("log", "--rev", "HEAD^", "-n", "1", "--oneline").startswith(merge)
    assert out("log", "--rev", "HEAD^^2", "-n", "1", "--oneline") == out("log", "--rev", "side", "-n", "1", "--oneline")
    result = CliRunner().invoke(main, ["--store", str(graph), "show", "HEAD" + "~" * 40000])
    assert result.exit_code == 1 and "shorter than 40000" in result.output and len(result.output) < 300
