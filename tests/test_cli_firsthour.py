"""Issue 20, items 26-31: what a new user meets in the first hour (CLI and the top-level package)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest
from click.testing import CliRunner

from memrev import VersionedStore
from memrev.cli import main


@pytest.fixture
def store_dir(tmp_path):
    async def build():
        async with VersionedStore(tmp_path, author="tester") as s:
            await s.write("/memory/working.md", "# Working\n- Vegetarian\n")
            await s.write("/memory/skills.md", "cooking\n")
            await s.write("/memory/working.md", "# Working\n- Vegetarian\n- eats out on Thursdays\n", message="turn 2")
            await s.delete("/memory/skills.md")

    asyncio.run(build())
    return tmp_path


def run(store_dir, *args, code=0):
    result = CliRunner().invoke(main, ["--store", str(store_dir), *args])
    assert result.exit_code == code, result.output
    return result.output


@pytest.mark.slow
def test_memrev_ag2_is_reachable_after_a_bare_import_and_import_memrev_stays_light():
    code = (
        "import sys, memrev\n"
        "assert 'memrev.ag2' not in sys.modules and 'ag2' not in sys.modules\n"
        "assert 'ag2' in dir(memrev)\n"
        "print(memrev.ag2.provenance.__name__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "provenance"


def test_log_S_ignore_case(store_dir):
    assert run(store_dir, "log", "-S", "vegetarian", "--oneline").strip() == ""
    found = run(store_dir, "log", "-S", "vegetarian", "-i", "--oneline").splitlines()
    assert len(found) == 1 and "write /memory/working.md" in found[0]
    assert len(run(store_dir, "log", "-S", "VEGETARIAN", "--ignore-case", "--json", "/memory")) > 2
    assert "goes with -S" in run(store_dir, "log", "-i", code=2)


def test_log_help_example_names_the_demo_agent():
    out = CliRunner().invoke(main, ["log", "--help"]).output
    assert "--agent chef" in out and "concierge" not in out


def test_history_of_a_folder_lists_each_file_version(store_dir):
    lines = run(store_dir, "history", "/memory").splitlines()
    assert len(lines) == 4
    assert [ln.split()[6] for ln in lines[1:]] == ["/memory/working.md", "/memory/skills.md", "/memory/working.md"]
    assert "deleted" in lines[0] and "/memory/skills.md" in lines[0]
    assert sum("deleted" in ln for ln in lines) == 1
    doc = json.loads(run(store_dir, "history", "/memory", "--json"))
    assert [(d["path"], d["size"]) for d in doc] == [
        ("/memory/skills.md", None), ("/memory/working.md", 47), ("/memory/skills.md", 8), ("/memory/working.md", 23)]
    # a file's history is unchanged: no path column
    assert all("size" in d and "path" not in d for d in json.loads(run(store_dir, "history", "/memory/working.md", "--json")))


def test_ls_of_a_file_prints_it(store_dir):
    assert run(store_dir, "ls", "/memory/working.md") == "/memory/working.md\n"
    assert json.loads(run(store_dir, "ls", "/memory/working.md", "--json")) == ["/memory/working.md"]
    assert "does not exist" in run(store_dir, "ls", "/memory/nope.md", code=1)


@pytest.mark.parametrize("args", [("log", "-n", "-1"), ("history", "/memory", "-n", "-1")])
def test_negative_limit_is_a_usage_error(store_dir, args):
    assert "-1 is not in the range" in run(store_dir, *args, code=2)


def test_a_short_prefix_says_seven_hex_digits(store_dir):
    assert "at least 7 hex digits" in run(store_dir, "show", "975a", code=1)


@pytest.mark.parametrize("when", ["yesterday", "today", "now", "3 days ago", "1 day ago"])
def test_since_takes_git_like_dates(store_dir, when):
    out = run(store_dir, "log", "--oneline", "--since", when)
    assert len(out.splitlines()) == (0 if when == "now" else 4)
    assert run(store_dir, "log", "--oneline", "--until", when).count("\n") == (4 if when == "now" else 0)


def test_since_refuses_other_words(store_dir):
    assert "yesterday" in run(store_dir, "log", "--since", "last tuesday", code=2)


def test_bare_memrev_prints_help_and_exits_0():
    result = CliRunner().invoke(main, [])
    assert result.exit_code == 0 and "Commands:" in result.output and "$MEMREV_STORE" in result.output
    assert "$MEMREV_STORE" in CliRunner().invoke(main, ["--help"]).output
