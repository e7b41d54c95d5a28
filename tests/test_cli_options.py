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


def test_branch_create_and_delete_json(store_dir):
    made = json.loads(run(store_dir, "branch", "exp", "--json"))
    head = json.loads(run(store_dir, "log", "-n", "1", "--json"))[0]["id"]
    assert made == {"branch": "exp", "commit": head}
    assert json.loads(run(store_dir, "branch", "-d", "exp", "--json")) == {"deleted": "exp"}


def test_restore_revert_export_import_json(store_dir, tmp_path_factory):
    first = json.loads(run(store_dir, "log", "--json"))[-1]["id"]
    done = json.loads(run(store_dir, "restore", "/memory/working.md", "--rev", first, "--json"))
    assert done["path"] == "/memory/working.md" and len(done["commit"]) == 40
    again = json.loads(run(store_dir, "restore", "/memory/working.md", "--rev", first, "--json"))
    assert again["commit"] is None
    undone = json.loads(run(store_dir, "revert", "HEAD", "--json"))
    assert undone["rev"] == "HEAD" and len(undone["commit"]) == 40
    bundle = tmp_path_factory.mktemp("b") / "x.memrev"
    wrote = json.loads(run(store_dir, "export", str(bundle), "--json"))
    assert wrote["file"] == str(bundle) and wrote["objects"] > 0
    other = tmp_path_factory.mktemp("o")
    refs = json.loads(run(other, "import", str(bundle), "--json"))
    assert refs["refs/heads/main"] == undone["commit"]


def test_adopt_json(tmp_path):
    (tmp_path / "notes.md").write_text("hello\n")
    doc = json.loads(CliRunner().invoke(main, ["adopt", str(tmp_path), "--json"]).output)
    assert doc["adopted"] is True and doc["commit"]["paths"] == ["/notes.md"] and doc["skipped"] == []
    again = json.loads(CliRunner().invoke(main, ["adopt", str(tmp_path), "--json"]).output)
    assert again["adopted"] is False and again["already_a_store"] is True


def test_diff_stat_counts_and_stat_json(store_dir):
    out = run(store_dir, "diff", "--stat", "HEAD~3", "HEAD~1").splitlines()
    assert out[0].split() == ["A", "/memory/skills.md", "+1", "-0"]
    assert out[1].split() == ["M", "/memory/working.md", "+1", "-0"]
    assert out[2] == "2 files changed, 2 insertions(+), 0 deletions(-)"
    doc = json.loads(run(store_dir, "diff", "--stat", "--json", "HEAD~3", "HEAD~1"))
    assert doc["stat"] == [{"path": "/memory/skills.md", "status": "added", "added": 1, "removed": 0},
                           {"path": "/memory/working.md", "status": "modified", "added": 1, "removed": 0}]
    assert "changes" not in doc


def test_log_all_json_has_branch_labels(store_dir):
    run(store_dir, "branch", "exp", "--from", "HEAD~1")
    doc = json.loads(run(store_dir, "log", "--all", "--json"))
    assert [d["branches"] for d in doc] == [["main"], ["exp"], [], []]
    assert all("branches" not in d for d in json.loads(run(store_dir, "log", "--json")))


def test_human_output_ids_are_all_ten_hex_digits(store_dir):
    outputs = [run(store_dir, *args) for args in (
        ("log",), ("log", "--oneline"), ("show", "HEAD"), ("why", "/memory/working.md:2"), ("history", "/memory"),
        ("blame", "/memory/working.md"), ("branch",), ("revert", "HEAD"),
        ("restore", "/memory/working.md", "--rev", "HEAD~2"))]
    import re

    ids = {len(m) for out in outputs for m in re.findall(r"\b[0-9a-f]{7,40}\b", out)}
    assert ids == {10}


def test_why_prints_the_turn_as_text_and_json_as_stored(tmp_path):
    events = [
        {"type": "ag2.events.input_events.ModelRequest",
         "data": {"parts": [{"content": "Please save a plan " + "x" * 300}]}},
        {"type": "ag2.events.types.ModelResponse", "data": {"message": None, "tool_calls": {"calls": []}}},
        {"type": "ag2.events.tool_events.ToolCallEvent",
         "data": {"name": "knowledge", "arguments": json.dumps({"action": "write", "path": "/plan.md"})}},
        {"type": "ag2.events.tool_events.ToolResultEvent",
         "data": {"name": "knowledge", "result": {"data": {"parts": [{"content": "Written to /plan.md"}]}}}},
        {"type": "ag2.events.tool_events.ToolResultsEvent", "data": {"results": []}},
        {"type": "ag2.events.types.ModelResponse", "data": {"message": {"content": "Done."}}},
    ]
    meta = {"agent": "chef", "session": "s1", "turn": 1, "tool": "knowledge", "framework": "ag2", "event_log": "/log/s1.jsonl"}

    async def build():
        async with VersionedStore(tmp_path) as s:
            await s.write("/log/s1.jsonl", "".join(json.dumps(e) + "\n" for e in events), meta=meta | {"tool": None})
            await s.write("/plan.md", "Mon: curry\n", meta=meta)

    asyncio.run(build())
    text = run(tmp_path, "why", "/plan.md:1")
    assert all(len(line) <= 110 for line in text.splitlines())
    assert "user: Please save a plan xxx" in text
    assert "tool call: knowledge(action='write', path='/plan.md')" in text
    assert "tool output (knowledge): Written to /plan.md" in text
    assert "agent: Done." in text and '"type"' not in text
    doc = json.loads(run(tmp_path, "why", "/plan.md:1", "--json"))
    assert [json.loads(e) if isinstance(e, str) else e for e in doc["events"]] == events
