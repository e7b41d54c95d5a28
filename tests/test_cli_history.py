"""The history commands of the ``memrev`` CLI, through click's test runner (issue 4).

history, blame, restore, revert, branch, tag, merge (conflicts: exit 1, listed,
nothing written; ``--strategy``; ``--resolve``), export/import (a tampered
bundle: exit 1), gc, import-dir of a real ``DiskKnowledgeStore`` folder,
``log --graph`` with a merge, ``diff --word-diff``, and ``--json`` everywhere.

The CLI runs its own event loop (``asyncio.run``), so these tests are plain
synchronous functions; the store is prepared and checked with the Python API
through ``asyncio.run`` as well.
"""

from __future__ import annotations

import asyncio
import json
import re

import pytest
from click.testing import CliRunner

from memrev import VersionedStore
from memrev.cli import main

WM = "/memory/working.md"
ANSI = re.compile(r"\x1b\[")
HEX10 = re.compile(r"\b[0-9a-f]{10}\b")


def run(store_dir, *args, code: int = 0):
    result = CliRunner().invoke(main, ["--store", str(store_dir), *args])
    assert result.exit_code == code, (args, result.exit_code, result.output, result.exception)
    assert not ANSI.search(result.output), "colour codes on a non-terminal"
    return result


def api(store_dir, job, branch: str = "main"):
    """Run ``await job(store)`` on a fresh handle and return its result."""

    async def go():
        async with VersionedStore(store_dir, branch=branch, author="tester") as s:
            return await job(s)

    return asyncio.run(go())


def state(store_dir, branch: str = "main") -> dict:
    """Log ids, per-path log of WM and every file at head: what "nothing written" compares."""

    async def job(s):
        out: dict = {"log": [c.id for c in await s.log()], "branches": await s.branches(), "files": {}}
        out["wm_log"] = [c.id for c in await s.log(WM)] if await s.exists(WM) else []

        async def walk(folder):
            for name in await s.list(folder):
                path = folder.rstrip("/") + "/" + name.rstrip("/")
                if name.endswith("/"):
                    await walk(path)
                else:
                    out["files"][path] = await s.read(path)

        await walk("/")
        return out

    return api(store_dir, job, branch)


@pytest.fixture
def store_dir(tmp_path):
    """main: three versions of working memory; exp: branched at the second, edits another line."""

    async def build():
        async with VersionedStore(tmp_path / "store", author="tester") as s:
            await s.write(WM, "# Working\n- name: Dana\n- likes tea\n- lives in Oslo\n", message="turn 1")
            await s.write("/artifacts/a.md", "A\n", message="artifact")
            await s.write(WM, "# Working\n- name: Dana\n- likes coffee\n- lives in Oslo\n", message="turn 2")
            exp = await s.branch("exp")
            try:
                await exp.write(WM, "# Working\n- name: Dana\n- likes coffee\n- lives in Bergen\n", message="exp 1")
                await exp.write("/artifacts/b.md", "B\n", message="exp 2")
            finally:
                exp.close()
            await s.write(WM, "# Working memory\n- name: Dana\n- likes coffee\n- lives in Oslo\n", message="turn 3")

    asyncio.run(build())
    return tmp_path / "store"


def ids_of(store_dir, branch="main"):
    return api(store_dir, lambda s: _ids(s), branch)


async def _ids(s):
    return [c.id for c in await s.log()]


# --------------------------------------------------------------------------- history, blame


def test_history_text_and_json(store_dir):
    lines = run(store_dir, "history", WM).output.splitlines()
    assert len(lines) == 3
    assert [ln.rsplit("  ", 1)[-1] for ln in lines] == ["turn 3", "turn 2", "turn 1"]
    assert all(HEX10.match(ln) and "tester" in ln and " B " in ln + " " for ln in lines)
    doc = json.loads(run(store_dir, "history", WM, "--json").output)
    assert [d["message"] for d in doc] == ["turn 3", "turn 2", "turn 1"]
    assert [d["size"] for d in doc] == [
        len("# Working memory\n- name: Dana\n- likes coffee\n- lives in Oslo\n"),
        len("# Working\n- name: Dana\n- likes coffee\n- lives in Oslo\n"),
        len("# Working\n- name: Dana\n- likes tea\n- lives in Oslo\n"),
    ]
    assert all(len(d["id"]) == 40 and d["paths"] == [WM] for d in doc)
    assert len(json.loads(run(store_dir, "history", WM, "-n", "1", "--json").output)) == 1
    # A deleted version shows as deleted.
    api(store_dir, lambda s: s.delete("/artifacts/a.md"))
    doc = json.loads(run(store_dir, "history", "/artifacts/a.md", "--json").output)
    assert [d["size"] for d in doc] == [None, 2]
    assert "deleted" in run(store_dir, "history", "/artifacts/a.md").output.splitlines()[0]


def test_blame_text_and_json(store_dir):
    by_msg = {c["message"]: c["id"] for c in json.loads(run(store_dir, "log", "--json").output)}
    blamed = json.loads(run(store_dir, "blame", WM, "--json").output)
    # Each commit once (issue 11), lines refer to it by id.
    doc = [d | {"commit": blamed["commits"][d["commit"]]} for d in blamed["lines"]]
    assert [(d["line"], d["text"], d["commit"]["id"]) for d in doc] == [
        (1, "# Working memory", by_msg["turn 3"]),
        (2, "- name: Dana", by_msg["turn 1"]),
        (3, "- likes coffee", by_msg["turn 2"]),
        (4, "- lives in Oslo", by_msg["turn 1"]),
    ]
    assert sorted(blamed["commits"]) == sorted({by_msg["turn 1"], by_msg["turn 2"], by_msg["turn 3"]})
    assert all(d["commit"]["author"] == "tester" for d in doc)
    text = run(store_dir, "blame", WM).output.splitlines()
    assert len(text) == 4
    for line, d in zip(text, doc):
        assert line.startswith(d["commit"]["id"][:10])
        assert line.endswith(f"{d['line']} {d['text']}")
        assert d["commit"]["message"] in line
    # --rev, and the branch's own blame.
    old = json.loads(run(store_dir, "blame", WM, "--rev", "HEAD~1", "--json").output)
    assert [d["text"] for d in old["lines"]] == ["# Working", "- name: Dana", "- likes coffee", "- lives in Oslo"]
    exp = json.loads(run(store_dir, "--branch", "exp", "blame", WM, "--json").output)
    line4 = exp["lines"][3]
    assert line4["text"] == "- lives in Bergen" and exp["commits"][line4["commit"]]["message"] == "exp 1"
    # A missing path: one line on stderr, exit 1.
    bad = run(store_dir, "blame", "/nope.md", code=1)
    assert "/nope.md" in bad.stderr and "Traceback" not in bad.output


# --------------------------------------------------------------------------- restore, revert


def test_restore(store_dir):
    before = ids_of(store_dir)
    out = run(store_dir, "restore", WM, "--rev", "HEAD~2").output
    assert out.startswith(f"restored {WM} to HEAD~2: commit ")
    after = ids_of(store_dir)
    assert after[1:] == before and len(after) == len(before) + 1
    assert after[0][:10] in out  # human output: 10-digit ids everywhere
    assert run(store_dir, "cat", WM).output == "# Working\n- name: Dana\n- likes tea\n- lives in Oslo\n"
    # Again: nothing to do, no commit.
    out = run(store_dir, "restore", WM, "--rev", before[2]).output
    assert "already" in out
    assert ids_of(store_dir) == after
    # A directory.
    run(store_dir, "restore", "/artifacts", "--rev", before[-1])
    assert json.loads(run(store_dir, "ls", "/", "--json").output) == ["memory/"]
    # --rev is required; a bad revision exits 1 without writing.
    assert run(store_dir, "restore", WM, code=2).exit_code == 2
    run(store_dir, "restore", WM, "--rev", "nope", code=1)
    assert len(ids_of(store_dir)) == len(after) + 1


def test_revert_and_revert_of_the_revert(store_dir):
    files_before = state(store_dir)["files"]
    log = json.loads(run(store_dir, "log", "--json").output)
    turn2 = next(c["id"] for c in log if c["message"] == "turn 2")
    out = run(store_dir, "revert", turn2).output
    assert out.startswith(f"reverted {turn2}: commit ")
    assert run(store_dir, "cat", WM).output == "# Working memory\n- name: Dana\n- likes tea\n- lives in Oslo\n"
    run(store_dir, "revert", "HEAD")
    assert state(store_dir)["files"] == files_before


def test_revert_conflict_exits_1_and_writes_nothing(store_dir):
    before = state(store_dir)
    # turn 2 changed "likes tea" -> "likes coffee"; change that line again, then revert turn 2.
    api(store_dir, lambda s: s.write(WM, "# Working memory\n- name: Dana\n- likes cocoa\n- lives in Oslo\n"))
    middle = state(store_dir)
    assert middle["log"][1:] == before["log"]
    result = run(store_dir, "revert", "HEAD~2", code=1)
    assert f"CONFLICT (content): {WM}" in result.output
    assert state(store_dir) == middle


# --------------------------------------------------------------------------- branch, tag


def test_branch_list_create_delete(store_dir):
    listed = run(store_dir, "branch").output.splitlines()
    heads = {"main": ids_of(store_dir)[0], "exp": ids_of(store_dir, "exp")[0]}
    assert [ln.split() for ln in listed] == [["exp", heads["exp"][:10]], ["*", "main", heads["main"][:10]]]
    assert listed[0].startswith("  exp") and listed[1].startswith("* main")
    doc = json.loads(run(store_dir, "branch", "--json").output)
    assert set(doc) == {"main", "exp"} and doc["main"] == ids_of(store_dir)[0]

    assert run(store_dir, "branch", "old", "--from", "HEAD~2").output.strip() == "created branch old at HEAD~2"
    doc = json.loads(run(store_dir, "branch", "--json").output)
    assert doc["old"] == ids_of(store_dir)[2]
    assert json.loads(run(store_dir, "--branch", "old", "log", "--json").output)[0]["id"] == doc["old"]
    run(store_dir, "branch", "old", code=1)  # exists already
    out = run(store_dir, "branch", "-d", "old").output
    assert "deleted branch old" in out
    assert set(json.loads(run(store_dir, "branch", "--json").output)) == {"main", "exp"}
    run(store_dir, "branch", "-d", "old", code=1)


def test_tag_create_and_list(store_dir):
    head = ids_of(store_dir)
    assert run(store_dir, "tag", "v1", "HEAD~1").output.strip() == f"tagged {head[1][:10]} as v1"
    run(store_dir, "tag", "now")
    assert json.loads(run(store_dir, "tag", "--json").output) == {"v1": head[1], "now": head[0]}
    text = run(store_dir, "tag").output.splitlines()
    assert [ln.split() for ln in text] == [["now", head[0][:10]], ["v1", head[1][:10]]]
    assert run(store_dir, "cat", WM, "--rev", "v1").output == "# Working\n- name: Dana\n- likes coffee\n- lives in Oslo\n"
    run(store_dir, "tag", "v1", code=1)


# --------------------------------------------------------------------------- merge


def test_merge_clean_then_up_to_date(store_dir):
    main_head, exp_head = ids_of(store_dir)[0], ids_of(store_dir, "exp")[0]
    out = run(store_dir, "merge", "exp").output
    assert out.startswith("merged exp into main: commit ")
    head = json.loads(run(store_dir, "show", "--json").output)
    assert head["parents"] == [main_head, exp_head]
    assert head["id"][:10] in out  # human output: 10-digit ids
    assert run(store_dir, "cat", WM).output == "# Working memory\n- name: Dana\n- likes coffee\n- lives in Bergen\n"
    assert run(store_dir, "cat", "/artifacts/b.md").output == "B\n"
    assert run(store_dir, "merge", "exp").output.strip() == "already up to date with exp"
    doc = json.loads(run(store_dir, "merge", "exp", "--json").output)
    assert doc == {"status": "up-to-date", "commit": None, "paths": []}
    assert ids_of(store_dir)[0] == head["id"]
    assert run(store_dir, "fsck").output.strip() == "ok"


def test_merge_into_another_branch(store_dir):
    exp_head = ids_of(store_dir, "exp")[0]
    doc = json.loads(run(store_dir, "merge", "main", "--into", "exp", "--json").output)
    assert doc["status"] == "merged" and len(doc["commit"]) == 40
    assert ids_of(store_dir, "exp")[0] == doc["commit"]
    shown = json.loads(run(store_dir, "--branch", "exp", "show", "--json").output)
    assert shown["parents"][0] == exp_head


def _make_conflict(store_dir):
    api(store_dir, lambda s: s.write(WM, "# Working memory\n- name: Dana\n- likes coffee\n- lives in Lisbon\n",
                                     message="turn 4"))


def test_merge_conflict_exits_1_lists_conflicts_and_writes_nothing(store_dir):
    _make_conflict(store_dir)
    before, before_exp = state(store_dir), state(store_dir, "exp")
    result = run(store_dir, "merge", "exp", code=1)
    assert f"CONFLICT (content): {WM}" in result.stdout
    assert "<<<<<<< ours" in result.stdout and ">>>>>>> theirs" in result.stdout
    assert "- lives in Lisbon" in result.stdout and "- lives in Bergen" in result.stdout
    assert "conflict" in result.stderr
    assert state(store_dir) == before
    assert state(store_dir, "exp") == before_exp

    doc = json.loads(run(store_dir, "merge", "exp", "--json", code=1).output)
    assert doc["status"] == "conflict"
    assert [(c["path"], c["kind"]) for c in doc["conflicts"]] == [(WM, "content")]
    assert "<<<<<<<" in doc["conflicts"][0]["marked"]
    assert state(store_dir) == before


@pytest.mark.parametrize("strategy", ["ours", "theirs"])
def test_merge_strategy_settles(store_dir, strategy):
    _make_conflict(store_dir)
    main_head, exp_head = ids_of(store_dir)[0], ids_of(store_dir, "exp")[0]
    out = run(store_dir, "merge", "exp", "--strategy", strategy).output
    assert out.startswith("merged exp into main")
    kept, dropped = ("Lisbon", "Bergen") if strategy == "ours" else ("Bergen", "Lisbon")
    wm = run(store_dir, "cat", WM).output
    assert f"- lives in {kept}\n" in wm and dropped not in wm and "<<<<<<<" not in wm
    assert run(store_dir, "cat", "/artifacts/b.md").output == "B\n"
    assert json.loads(run(store_dir, "show", "--json").output)["parents"] == [main_head, exp_head]
    run(store_dir, "merge", "exp", "--strategy", "mine", code=2)


def test_merge_resolve_with_a_file(store_dir, tmp_path):
    _make_conflict(store_dir)
    chosen = tmp_path / "chosen.md"
    chosen.write_text("# Working memory\n- name: Dana\n- likes coffee\n- lives in Lisbon, moving to Bergen\n")
    run(store_dir, "merge", "exp", "--resolve", f"{WM}={chosen}")
    assert run(store_dir, "cat", WM).output == chosen.read_text()
    run(store_dir, "merge", "exp", "--resolve", "no-equals-sign", code=2)


# --------------------------------------------------------------------------- export, import


def test_export_import_round_trip(store_dir, tmp_path):
    bundle = tmp_path / "backup.memrev"
    out = run(store_dir, "export", str(bundle)).output
    assert re.fullmatch(rf"wrote \d+ objects to {re.escape(str(bundle))}\n", out)
    target = tmp_path / "restored"
    lines = run(target, "import", str(bundle)).output.splitlines()
    heads = json.loads(run(store_dir, "branch", "--json").output)
    assert sorted(lines) == sorted(f"refs/heads/{b} -> {c[:10]}" for b, c in heads.items())
    assert json.loads(run(target, "branch", "--json").output) == heads
    for branch in heads:
        assert json.loads(run(target, "--branch", branch, "log", "--json").output) == json.loads(
            run(store_dir, "--branch", branch, "log", "--json").output
        )
        assert json.loads(run(target, "--branch", branch, "history", WM, "--json").output) == json.loads(
            run(store_dir, "--branch", branch, "history", WM, "--json").output
        )
    assert json.loads(run(target, "fsck", "--json").output) == {"ok": True, "problems": []}
    # Only one branch.
    run(store_dir, "export", str(tmp_path / "exp.memrev"), "--branch", "exp")
    only = tmp_path / "only-exp"
    run(only, "--branch", "exp", "import", str(tmp_path / "exp.memrev"))
    assert set(json.loads(run(only, "branch", "--json").output)) == {"exp"}


def test_import_of_a_tampered_bundle_exits_1_and_writes_nothing(store_dir, tmp_path):
    bundle = tmp_path / "backup.memrev"
    run(store_dir, "export", str(bundle))
    data = bytearray(bundle.read_bytes())
    data[len(data) // 2] ^= 0x20
    bundle.write_bytes(bytes(data))
    target = tmp_path / "target"
    result = run(target, "import", str(bundle), code=1)
    assert "bundle" in result.stderr.lower() and "Traceback" not in result.output
    assert json.loads(run(target, "branch", "--json").output) == {}
    assert json.loads(run(target, "log", "--json").output) == []
    # Truncated, and not a bundle at all.
    bundle.write_bytes(bytes(data[: len(data) // 3]))
    run(target, "import", str(bundle), code=1)
    (tmp_path / "notes.txt").write_text("just text\n")
    run(target, "import", str(tmp_path / "notes.txt"), code=1)
    run(target, "import", str(tmp_path / "missing.memrev"), code=1)
    assert json.loads(run(target, "branch", "--json").output) == {}


# --------------------------------------------------------------------------- gc, fsck


def test_gc(store_dir):
    before = {b: state(store_dir, b) for b in ("main", "exp")}
    out = run(store_dir, "gc").output.strip()
    assert out == "0 commits, 0 trees, 0 blobs, 0 refs removed"
    # A deleted branch's commits survive gc inside the window, go once it has passed.
    run(store_dir, "branch", "scratch")
    api(store_dir, lambda s: s.write("/scratch.md", "scratch only\n" * 10), branch="scratch")
    scratch = ids_of(store_dir, "scratch")[0]
    run(store_dir, "branch", "-d", "scratch")
    assert run(store_dir, "gc").output.strip() == "0 commits, 0 trees, 0 blobs, 0 refs removed"
    assert run(store_dir, "cat", "/scratch.md", "--rev", scratch).output == "scratch only\n" * 10
    out = run(store_dir, "gc", "--keep-days", "0").output.strip()
    counts = dict((what, int(n)) for n, what in re.findall(r"(\d+) (\w+)", out))
    assert counts["commits"] == 1 and counts["refs"] == 1 and counts["blobs"] >= 1 and counts["trees"] >= 1
    run(store_dir, "cat", "/scratch.md", "--rev", scratch, code=1)
    assert {b: state(store_dir, b) for b in ("main", "exp")} == before
    assert run(store_dir, "fsck").output.strip() == "ok"


# --------------------------------------------------------------------------- import-dir


def test_import_dir_of_a_disk_knowledge_store(tmp_path):
    from ag2.knowledge import DiskKnowledgeStore  # needs watchdog

    folder = tmp_path / "journal-state"
    files = {
        "/memory/working.md": "# Working\n- name: Dana\n",
        "/memory/SKILL.md": "skill\n",
        "/artifacts/lisbon.md": "# Lisbon\n- Ao 26\n",
        "/log/abc.jsonl": '{"type": "x", "data": {}}\n',
        "/.initialized": "concierge",
    }

    async def fill():
        disk = DiskKnowledgeStore(folder)
        for path, text in files.items():
            await disk.write(path, text)
        await disk.append("/log/abc.jsonl", '{"type": "y", "data": {}}\n')
        return {p: await disk.read(p) for p in files}

    expected = asyncio.run(fill())
    assert expected["/log/abc.jsonl"].count("\n") == 2

    store = tmp_path / "versioned"
    out = run(store, "import-dir", str(folder)).output
    assert out.startswith(f"imported {folder}: commit ")
    log = json.loads(run(store, "log", "--json").output)
    assert len(log) == 1
    assert sorted(log[0]["paths"]) == sorted(files)
    assert log[0]["id"][:10] in out  # human output: 10-digit ids
    for path, text in expected.items():
        assert run(store, "cat", path).output == text
    assert json.loads(run(store, "ls", "/memory", "--json").output) == ["SKILL.md", "working.md"]
    # Importing the same folder again: nothing new, no commit.
    assert run(store, "import-dir", str(folder)).output.startswith("nothing new")
    assert len(json.loads(run(store, "log", "--json").output)) == 1
    run(store, "import-dir", str(tmp_path / "no-such-folder"), code=1)
    assert run(store, "fsck").output.strip() == "ok"


# --------------------------------------------------------------------------- log --graph, diff --word-diff, --json


def test_log_graph_shows_the_merge(store_dir):
    run(store_dir, "merge", "exp")
    log = json.loads(run(store_dir, "log", "--json").output)
    merge = log[0]
    assert len(merge["parents"]) == 2
    lines = run(store_dir, "log", "--graph").output.splitlines()
    commit_lines = [ln for ln in lines if HEX10.search(ln)]
    assert len(commit_lines) == len(log)
    assert [HEX10.search(ln).group(0) for ln in commit_lines] == [c["id"][:10] for c in log]
    assert commit_lines[0].startswith("*") and commit_lines[0].endswith("merge exp into main")
    assert lines[1].strip() == "|\\"
    # The two sides are drawn in two lanes: some commit sits in the second one.
    lane = {HEX10.search(ln).group(0): ln.split("  ")[0] for ln in commit_lines}
    exp_ids = {c["id"][:10] for c in log if c["message"].startswith("exp")}
    main_side = {c["id"][:10] for c in log if c["message"] in ("turn 3",)}
    assert all(lane[i].startswith("| *") for i in exp_ids), lines
    assert all(lane[i].startswith("* |") or lane[i] == "*" for i in main_side), lines


def test_diff_word_diff(store_dir):
    out = run(store_dir, "diff", "HEAD~1", "HEAD", "--word-diff", "--", WM).output
    assert out.rstrip("\n").splitlines() == [
        f"--- a{WM}",
        f"+++ b{WM}",
        "@@ -1,4 +1,4 @@",
        "# Working{+ memory+}",
        "- name: Dana",
        "- likes coffee",
        "- lives in Oslo",
    ]
    out = run(store_dir, "diff", "exp", "HEAD", "--word-diff").output
    assert "- lives in [-Bergen-]{+Oslo+}" in out.splitlines()
    assert "# Working{+ memory+}" in out.splitlines()
    assert "--- a/artifacts/b.md" in out.splitlines()


def test_json_outputs_parse(store_dir, tmp_path):
    run(store_dir, "tag", "v1")
    docs = {
        "log": run(store_dir, "log", "--json").output,
        "log-path": run(store_dir, "log", WM, "--json").output,
        "history": run(store_dir, "history", WM, "--json").output,
        "blame": run(store_dir, "blame", WM, "--json").output,
        "branch": run(store_dir, "branch", "--json").output,
        "tag": run(store_dir, "tag", "--json").output,
        "show": run(store_dir, "show", "--json").output,
        "show-path": run(store_dir, "show", f"HEAD~1:{WM}", "--json").output,
        "diff": run(store_dir, "diff", "HEAD~2", "--json").output,
        "ls": run(store_dir, "ls", "--json").output,
        "fsck": run(store_dir, "fsck", "--json").output,
        "merge": run(store_dir, "merge", "exp", "--json").output,
    }
    parsed = {k: json.loads(v) for k, v in docs.items()}
    assert isinstance(parsed["log"], list) and all(len(c["id"]) == 40 for c in parsed["log"])
    assert parsed["tag"] == {"v1": parsed["log"][0]["id"]}
    assert parsed["show"]["id"] == parsed["log"][0]["id"]
    assert parsed["show-path"]["content"] == "# Working\n- name: Dana\n- likes coffee\n- lives in Oslo\n"
    assert [d["path"] for d in parsed["diff"]["changes"]] == [WM]
    assert parsed["ls"] == ["artifacts/", "memory/"]
    assert parsed["fsck"] == {"ok": True, "problems": []}
    assert parsed["merge"]["status"] == "merged" and WM in parsed["merge"]["paths"]
    assert len(json.loads(run(store_dir, "log", "--json").output)[0]["parents"]) == 2
