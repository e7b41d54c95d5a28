"""``why``, provenance in ``blame`` and the ``log`` filters, from Python and the CLI (issue 11).

The CLI tests run on the real quick-start store (``examples/quickstart.py``),
the store ``docs/provenance.md`` shows.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from memrev import VersionedStore, errors
from memrev.cli import main

ROOT = Path(__file__).resolve().parents[1]
WM = "/memory/working.md"


# ------------------------------------------------------------------ Python API


@pytest.mark.anyio
async def test_why_a_line_a_file_and_the_turns_event_log(tmp_path):
    async with VersionedStore(tmp_path / "s") as store:
        async with store.provenance(agent="chef", session="s1", turn=1):
            await store.write("/log/s1.jsonl", '{"said": "hi"}\n')
            await store.write(WM, "# WM\n- name: Sam\n")
        async with store.provenance(agent="chef", session="s1", turn=2, tool="knowledge", tool_call_id="c7"):
            await store.write(WM, "# WM\n- name: Sam\n- vegetarian\n")
        async with store.provenance(agent="chef", session="s1", turn=2):
            await store.write("/log/s1.jsonl", '{"said": "hi"}\n{"said": "I am vegetarian"}\n')
        await store.write("/other.md", "unrelated")  # a later commit elsewhere changes nothing

        w = await store.why(WM, 3)
        assert (w.line, w.text) == (3, "- vegetarian")
        assert w.provenance == {"agent": "chef", "session": "s1", "turn": 2, "tool": "knowledge", "tool_call_id": "c7"}
        assert w.hunk.splitlines()[-1] == "+- vegetarian"
        assert w.event_log == "/log/s1.jsonl"
        assert w.event_commit is not None and w.event_commit.meta["turn"] == 2
        assert w.events == ['{"said": "I am vegetarian"}']

        first = await store.why(WM, 2)
        assert first.provenance["turn"] == 1 and first.events == ['{"said": "hi"}']

        last = await store.why(WM)  # no line: the file's last change
        assert last.commit.id == w.commit.id and last.line is None and "+- vegetarian" in last.hunk

        old = await store.why(WM, 2, rev=first.commit.id)
        assert old.commit.id == first.commit.id

        plain = await store.why("/other.md")
        assert (plain.provenance, plain.event_log, plain.events) == ({}, None, [])


@pytest.mark.anyio
async def test_why_bad_questions_are_typed_errors(tmp_path):
    async with VersionedStore(tmp_path / "s") as store:
        await store.write(WM, "one\ntwo\n")
        with pytest.raises(errors.InvalidPath):
            await store.why(WM, 3)
        with pytest.raises(errors.InvalidPath):
            await store.why(WM, 0)
        with pytest.raises(errors.InvalidPath):
            await store.why(WM, "1")  # type: ignore[arg-type]
        with pytest.raises(errors.RevisionNotFound):
            await store.why("/missing.md")
        await store.delete(WM)
        with pytest.raises(errors.RevisionNotFound):
            await store.why(WM)


# ------------------------------------------------------------------ CLI on the quick-start store


@pytest.fixture(scope="module")
def quickstart_store(tmp_path_factory) -> str:
    state = tmp_path_factory.mktemp("qs") / "state"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "quickstart.py"), str(state)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Why does the agent think this?" in proc.stdout
    assert "after the user said: 'News: my partner went vegetarian" in proc.stdout
    return str(state)


def cli(store: str, *args: str) -> str:
    result = CliRunner().invoke(main, ["--store", store, *args])
    assert result.exit_code == 0, result.output
    return result.output


def vegetarian_line(store: str) -> int:
    text = cli(store, "cat", WM)
    return next(i for i, line in enumerate(text.splitlines(), 1) if "Vegetarian" in line)


@pytest.mark.slow
def test_cli_blame_shows_provenance_and_json_carries_each_commit_once(quickstart_store):
    doc = json.loads(cli(quickstart_store, "blame", WM, "--json"))
    assert len(doc["commits"]) == 3 < len(doc["lines"])  # three versions wrote the 13 lines
    for c in doc["commits"].values():
        assert c["provenance"]["agent"] == "chef" and c["provenance"]["framework"] == "ag2"
        assert c["provenance"]["turn"] == 1  # each quick-start conversation is its own session
    assert {line["commit"] for line in doc["lines"]} == set(doc["commits"])
    text = cli(quickstart_store, "blame", WM).splitlines()
    for line, blamed in zip(text, doc["lines"]):
        session = doc["commits"][blamed["commit"]]["provenance"]["session"]
        assert line.startswith(f"{blamed['commit'][:10]} (chef {session[:8]} t1 "), line


@pytest.mark.slow
def test_cli_log_pickaxe_and_filters(quickstart_store):
    all_wm = json.loads(cli(quickstart_store, "log", WM, "--json"))
    learned_pork, forgot_pork = all_wm[1]["id"], all_wm[0]["id"]
    pork = json.loads(cli(quickstart_store, "log", "-S", "pork", WM, "--json"))
    assert [c["id"] for c in pork] == [forgot_pork, learned_pork]
    assert [c["id"] for c in json.loads(cli(quickstart_store, "log", "-G", "^- Vege", WM, "--json"))] == [forgot_pork]
    tool = json.loads(cli(quickstart_store, "log", "--tool", "knowledge", "--json"))
    assert [c["paths"] for c in tool] == [["/artifacts/meal-plan.md"]]
    assert tool[0]["meta"]["tool_call_id"]
    assert len(json.loads(cli(quickstart_store, "log", "--agent", "chef", "--json"))) == 7  # 3 WM, 3 logs, the plan
    assert json.loads(cli(quickstart_store, "log", "--agent", "nobody", "--json")) == []
    assert json.loads(cli(quickstart_store, "log", "--until", "2000-01-01", "--json")) == []
    assert len(json.loads(cli(quickstart_store, "log", "--since", "2000-01-01", "--json"))) > 7
    out = cli(quickstart_store, "log", "-S", "pork", WM)
    assert "Provenance: agent=chef framework=ag2 session=" in out
    bad = CliRunner().invoke(main, ["--store", quickstart_store, "log", "--since", "next tuesday"])  # "yesterday" is a date now
    assert bad.exit_code != 0 and "ISO 8601" in bad.output
    bad = CliRunner().invoke(main, ["--store", quickstart_store, "log", "-G", "(", WM])
    assert bad.exit_code == 1 and "regular expression" in bad.output


@pytest.mark.slow
def test_cli_why_answers_with_the_users_message(quickstart_store):
    n = vegetarian_line(quickstart_store)
    doc = json.loads(cli(quickstart_store, "why", f"{WM}:{n}", "--json"))
    assert doc["text"] == "- Vegetarian (partner too): no meat at all"
    assert doc["provenance"]["agent"] == "chef" and doc["provenance"]["turn"] == 1
    assert "+- Vegetarian (partner too): no meat at all" in doc["hunk"]
    assert doc["event_log"] == f"/log/{doc['provenance']['session']}.jsonl"
    requests = [json.loads(e) for e in doc["events"] if e.startswith('{"type": "ag2.events.input_events.ModelRequest"')]
    assert len(requests) == 1
    assert "my partner went vegetarian" in json.dumps(requests[0])
    text = cli(quickstart_store, "why", f"{WM}:{n}")
    assert "agent:        chef" in text and "my partner went vegetarian" in text
    whole = json.loads(cli(quickstart_store, "why", WM, "--json"))
    assert whole["line"] is None and whole["commit"]["id"] == doc["commit"]["id"]
