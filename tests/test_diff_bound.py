"""A line diff is bounded: two versions over ``textdiff.DIFF_LINES`` lines or
``DIFF_CHARS`` characters together are not diffed line by line, in ``store.diff``,
``memrev diff``/``show`` and the viewer alike (round three's item 13: only the viewer
capped, after ``store.diff`` had already diffed the whole file)."""

from __future__ import annotations

import asyncio
import json

import pytest
from click.testing import CliRunner

import memrev.repo.model
from memrev import Store
from memrev.cli import main as cli
from memrev.core import textdiff

BIG = "/big.txt"


def _text(lines: int, tag: str) -> str:
    return "".join(f"{tag} line {i}\n" for i in range(lines))


@pytest.fixture
def never_diffed(monkeypatch):
    """Fails the test if a line diff is computed for the big file."""
    real = textdiff.unified

    def unified(a, b, fromfile, tofile, n=3):
        assert fromfile != f"a{BIG}", "a file over the bound was diffed line by line"
        return real(a, b, fromfile, tofile, n)

    monkeypatch.setattr(memrev.repo.model.textdiff, "unified", unified)


async def _two_versions(folder, lines: int) -> None:
    async with Store(folder) as s:
        await s.write(BIG, _text(lines, "old"))
        await s.write("/small.md", "one\n")
        async with s.transaction(message="both change"):
            await s.write(BIG, _text(lines, "new"))
            await s.write("/small.md", "two\n")


@pytest.mark.anyio
async def test_a_file_over_the_bound_is_left_out_and_the_others_are_diffed(tmp_path, never_diffed):
    folder = tmp_path / "s"
    await _two_versions(folder, textdiff.DIFF_LINES // 2 + 10)
    async with Store(folder) as s:
        big, small = await s.diff("HEAD~1", "HEAD")
    assert (big.path, big.status, big.left_out) == (BIG, "modified", True)
    assert big.diff.splitlines()[:2] == [f"--- a{BIG}", f"+++ b{BIG}"]
    assert "Diff left out" in big.diff and f"{textdiff.DIFF_LINES:,} lines" in big.diff and "@@" not in big.diff
    assert big.old == _text(textdiff.DIFF_LINES // 2 + 10, "old")  # the versions are still there, whole
    assert big.to_json()["left_out"] is True
    assert (small.left_out, "left_out" in small.to_json()) == (False, False)
    assert "-one" in small.diff and "+two" in small.diff


@pytest.mark.anyio
async def test_characters_count_too(tmp_path, never_diffed):
    """Few lines but many characters: one long line each side, over DIFF_CHARS together."""
    async with Store(tmp_path / "s") as s:
        await s.write(BIG, "a" * (textdiff.DIFF_CHARS // 2 + 1))
        await s.write(BIG, "b" * (textdiff.DIFF_CHARS // 2 + 1))
        (change,) = await s.diff("HEAD~1", "HEAD")
    assert change.left_out


@pytest.mark.anyio
async def test_just_under_the_bound_is_diffed(tmp_path):
    folder = tmp_path / "s"
    await _two_versions(folder, textdiff.DIFF_LINES // 2 - 10)
    async with Store(folder) as s:
        big, _ = await s.diff("HEAD~1", "HEAD")
    assert not big.left_out and "@@" in big.diff and "+new line 0" in big.diff


def test_the_cli_says_so_in_diff_show_stat_and_word_diff(tmp_path, never_diffed):
    folder = tmp_path / "s"
    asyncio.run(_two_versions(folder, textdiff.DIFF_LINES // 2 + 10))
    runner = CliRunner()
    for args in (["diff"], ["show"], ["diff", "--word-diff"]):
        result = runner.invoke(cli, ["--store", str(folder), *args])
        assert result.exit_code == 0, result.output
        assert "Diff left out" in result.output, args
        assert ("+two" in result.output) or ("{+two+}" in result.output), args  # the small file is diffed
    result = runner.invoke(cli, ["--store", str(folder), "diff", "--stat"])
    assert f"M {BIG}" in result.output and "(too large to diff)" in result.output, result.output
    assert "2 files changed, 1 insertion(+), 1 deletion(-)" in result.output  # counts: the small file's only
    result = runner.invoke(cli, ["--store", str(folder), "diff", "--stat", "--json"])
    stat = {row["path"]: row for row in json.loads(result.output)["stat"]}
    assert (stat[BIG]["added"], stat[BIG]["removed"]) == (None, None)
    assert (stat["/small.md"]["added"], stat["/small.md"]["removed"]) == (1, 1)
    result = runner.invoke(cli, ["--store", str(folder), "diff", "--json"])
    changes = {c["path"]: c for c in json.loads(result.output)["changes"]}
    assert changes[BIG]["left_out"] is True and "left_out" not in changes["/small.md"]
