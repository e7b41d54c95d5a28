"""The memrev CLI: every command through click's runner, one real subprocess run."""

import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from memrev import VersionedStore
from memrev.cli import main

DOCS = Path(__file__).resolve().parent.parent / "docs" / "cli.md"


@pytest.fixture
def store_dir(tmp_path):
    async def build():
        async with VersionedStore(tmp_path, author="tester") as s:
            await s.write("/memory/working.md", "# Working\n- likes tea\n")
            await s.write("/artifacts/a.md", "A\n")
            await s.write("/memory/working.md", "# Working\n- likes coffee\n- lives in Oslo\n", message="turn 2")

    asyncio.run(build())
    return tmp_path


def run(store_dir, *args, ok=True):
    result = CliRunner().invoke(main, ["--store", str(store_dir), *args])
    if ok:
        assert result.exit_code == 0, result.output
    return result


def test_log_store_and_path(store_dir):
    out = run(store_dir, "log", "--oneline").output.splitlines()
    assert len(out) == 3 and out[0].endswith("turn 2")
    path_log = run(store_dir, "log", "/memory/working.md", "--json").output
    commits = json.loads(path_log)
    assert [c["message"] for c in commits] == ["turn 2", "write /memory/working.md"]
    assert all(c["author"] == "tester" and c["paths"] == ["/memory/working.md"] for c in commits)
    assert len(json.loads(run(store_dir, "log", "-n", "1", "--json").output)) == 1


def test_diff_between_two_aggregates(store_dir):
    out = run(store_dir, "diff", "HEAD~1", "HEAD", "--", "/memory/working.md").output
    assert "--- a/memory/working.md" in out and "+++ b/memory/working.md" in out
    assert "-- likes tea" in out and "+- likes coffee" in out and "+- lives in Oslo" in out
    stat = run(store_dir, "diff", "HEAD~2", "HEAD", "--stat").output.split("\n")
    assert "A /artifacts/a.md     +1 -0" in stat and "M /memory/working.md  +2 -1" in stat
    doc = json.loads(run(store_dir, "diff", "HEAD~1", "--json").output)
    assert [(d["path"], d["status"]) for d in doc["changes"]] == [("/memory/working.md", "modified")]


def test_show_cat_ls(store_dir):
    shown = run(store_dir, "show").output
    assert "turn 2" in shown and "+- likes coffee" in shown
    first = run(store_dir, "show", "HEAD~2").output  # root commit: shown as an addition
    assert "+- likes tea" in first
    assert run(store_dir, "show", "HEAD~2:/memory/working.md").output == "# Working\n- likes tea\n"
    assert run(store_dir, "cat", "/memory/working.md", "--rev", "HEAD~1").output == "# Working\n- likes tea\n"
    assert run(store_dir, "ls").output.split() == ["artifacts/", "memory/"]
    assert json.loads(run(store_dir, "ls", "/memory", "--json").output) == ["working.md"]


def test_errors_are_one_line_and_exit_1(store_dir):
    for args in (["log", "--rev", "nosuch"], ["cat", "/nope"], ["show", "HEAD~9"], ["cat", "/a\x00b"]):
        result = run(store_dir, *args, ok=False)
        assert result.exit_code == 1
        assert result.output.startswith("Error: ") and "Traceback" not in result.output


def test_fsck_clean_and_broken(store_dir):
    assert run(store_dir, "fsck").output.strip() == "ok"
    import sqlite3

    with sqlite3.connect(store_dir / "memrev.db") as db:
        db.execute("DELETE FROM head WHERE path='/artifacts/a.md'")
    result = run(store_dir, "fsck", "--json", ok=False)
    assert result.exit_code == 1
    assert "head index" in json.loads(result.output)["problems"][0]


def test_every_command_has_help_and_docs():
    documented = DOCS.read_text()
    for name, command in main.commands.items():
        assert command.help and "Example" in command.help, name
        assert re.search(rf"^## {name}$", documented, re.M), f"docs/cli.md lacks a section for {name}"
        assert CliRunner().invoke(main, [name, "--help"]).exit_code == 0


def test_installed_console_script(store_dir):
    exe = Path(sys.executable).parent / "memrev"
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "memrev.cli"]
    # PYTHONPATH passes through: run from a worktree, the script must import the code under test
    # (the editable install points at the main checkout, which may read an older schema)
    env = {"MEMREV_STORE": str(store_dir), "PATH": "", **{k: v for k, v in os.environ.items() if k == "PYTHONPATH"}}
    proc = subprocess.run([*cmd, "log", "--oneline"], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.splitlines()) == 3
