"""``memrev purge`` (issue 22) through the real CLI: by text and by path, --dry-run,
--json, --verify, usage errors, ``show OLD``, and the confirmation on a terminal."""

import asyncio
import json
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from memrev import Store
from memrev.cli import main

SECRET = "555-0100-phone"
WM = "/memory/working.md"
REPORT_KEYS = {
    "dry_run", "kind", "patterns", "strings", "commits_rewritten", "commits_dropped", "versions_removed",
    "versions_redacted", "bytes_purged", "refs_moved", "paths_changed", "dropped", "id_map", "record", "bytes_before", "bytes_after",
    "verified", "found", "bytes_reclaimed",
}


@pytest.fixture
def store(tmp_path):
    """main: s1 (a secret file only), a1, s2, a2 (WM holds SECRET from a1 on), s3; a tag on a2.

    Newest first: s3, a2, s2, a1, s1. Purging /secret/** drops s1, s2 and s3."""
    location = tmp_path / "store"

    async def build():
        async with Store(location, create=True, author="tester") as s:
            await s.write("/secret/card.md", "card 4111\n", message="s1")
            await s.write(WM, f"# Working\n- phone {SECRET}\n", message="a1")
            await s.write("/secret/card.md", "card 4222\n", message="s2")
            await s.write(WM, f"# Working\n- phone {SECRET}\n- likes tea\n", message="a2")
            await s.tag("v1")
            await s.write("/secret/card.md", "card 4333\n", message="s3")

    asyncio.run(build())
    return location


def cli(store, *args, code=0, input=None):
    result = CliRunner().invoke(main, ["--store", str(store), *args], input=input)
    assert result.exit_code == code, (result.output, result.exception)
    return result


def log_ids(store, *args):
    return [c["id"] for c in json.loads(cli(store, "log", "--json", *args).output)]


def store_bytes(store):
    """Every byte of the store's files (the database and its journals)."""
    return {p.name: p.read_bytes() for p in sorted(Path(store).iterdir()) if p.is_file()}


def assert_no_purge_record(store):
    assert cli(store, "log", "--rev", "refs/purges", code=1).output.startswith("Error: ")


# ----------------------------------------------------------------- purge by text


def test_purge_by_text_leaves_the_string_nowhere(store):
    assert SECRET in cli(store, "cat", WM, "--rev", "v1").output
    assert len(log_ids(store, "-S", SECRET)) == 1  # a1 made it (a2 kept its count)
    out = cli(store, "purge", "--text", SECRET, "--reason", "user asked, ticket 42").output
    assert SECRET not in out  # never printed back
    lines = out.splitlines()
    # a1 and every commit after it get new ids (their trees hold the redacted file); s1 keeps its id
    assert lines[0] == "purged 1 string: 4 commits rewritten, 0 dropped"
    assert lines[1].startswith("versions: 0 removed, 2 redacted (")
    assert lines[2] == "refs moved: refs/heads/main, refs/tags/v1"
    assert lines[3].startswith("store: ") and lines[3].endswith(" B reclaimed)")
    assert lines[4] == "verified: yes, found nowhere"
    assert lines[5].startswith("record: ") and lines[5].endswith(" on refs/purges") and len(lines) == 6
    record = json.loads(cli(store, "log", "--rev", "refs/purges", "--json").output)
    assert [c["message"] for c in record] == ["purge: user asked, ticket 42"]
    assert lines[5] == f"record: {record[0]['id'][:10]} on refs/purges"
    for rev in ("HEAD", "v1", "HEAD~3"):
        text = cli(store, "cat", WM, "--rev", rev).output
        assert SECRET not in text and "- phone [purged]" in text
    assert log_ids(store, "-S", SECRET) == [] and log_ids(store, "--all", "-S", SECRET) == []
    assert len(log_ids(store, "-S", "[purged]")) == 1
    assert cli(store, "purge", "--verify", "--text", SECRET).output == "not found\n"


def test_a_pattern_is_shown_with_the_strings_hidden(store):
    out = cli(store, "purge", "--path", f"/notes/{SECRET}.md", "--text", SECRET, "--reason", "r", "--dry-run").output
    assert SECRET not in out
    assert out.splitlines()[0].startswith("dry run, nothing changed: purging /notes/[purged].md and 1 string would")


def test_off_a_terminal_it_does_not_ask(store):
    result = cli(store, "purge", "--text", SECRET, "--reason", "r", input="n\n")  # no terminal: no question
    assert "Purge " not in result.output and "[y/N]" not in result.output
    assert SECRET not in cli(store, "cat", WM).output


# ----------------------------------------------------------------- purge by path


def test_purge_by_path_drops_the_commits_left_empty(store):
    before = json.loads(cli(store, "log", "--json").output)
    by_message = {c["message"]: c["id"] for c in before}
    out = cli(store, "purge", "--path", "/secret/**", "--reason", "not ours").output.splitlines()
    assert out[0] == "purged /secret/**: 2 commits rewritten, 3 dropped"  # a1, a2 re-parented; s1..s3 gone
    assert out[1].startswith("versions: 3 removed, 0 redacted (")
    assert out[4] == "verified: yes, found nowhere"
    after = json.loads(cli(store, "log", "--json").output)
    assert [c["message"] for c in after] == ["a2", "a1"]
    assert not set(by_message.values()) & {c["id"] for c in after}
    assert cli(store, "ls").output.split() == ["memory/"]
    assert cli(store, "log", "/secret/card.md", code=1).output.startswith("Error: /secret/card.md has no history")
    # the old ids resolve to the commits they became; the tag moved with a2
    assert cli(store, "cat", WM, "--rev", by_message["a2"]).output == cli(store, "cat", WM, "--rev", "v1").output
    assert log_ids(store, "--rev", "v1")[0] == after[0]["id"]
    cli(store, "cat", "/secret/card.md", "--rev", by_message["s2"], code=1)


# ----------------------------------------------------------------- --dry-run


def test_dry_run_changes_nothing(store):
    ids, all_ids = log_ids(store), log_ids(store, "--all")
    content = cli(store, "cat", WM, "--rev", "v1").output
    raw = store_bytes(store)
    out = cli(store, "purge", "--path", "/secret/**", "--text", SECRET, "--reason", "r", "--dry-run").output
    assert out.splitlines() == [
        "dry run, nothing changed: purging /secret/** and 1 string would rewrite 2 commits and drop 3",
        out.splitlines()[1],
        "refs that would move: refs/heads/main, refs/tags/v1",
    ]
    assert out.splitlines()[1].startswith("versions: 3 would be removed, 2 redacted (")
    assert store_bytes(store) == raw  # not a byte written
    assert log_ids(store) == ids and log_ids(store, "--all") == all_ids
    assert cli(store, "cat", WM, "--rev", "v1").output == content and SECRET in content
    assert_no_purge_record(store)
    assert cli(store, "purge", "--verify", "--text", SECRET, code=1).output.endswith(" places\n")  # still there


# ----------------------------------------------------------------- --json


def test_json_is_the_report(store):
    old = json.loads(cli(store, "log", "--json").output)
    doc = json.loads(cli(store, "purge", "--path", "/secret/**", "--text", SECRET, "--reason", "r", "--json").output)
    assert set(doc) == REPORT_KEYS
    assert doc["dry_run"] is False and doc["kind"] == ["paths", "text"] and doc["patterns"] == ["/secret/**"]
    assert doc["strings"] == 1 and doc["verified"] is True and doc["found"] == []
    assert (doc["commits_rewritten"], doc["commits_dropped"], doc["versions_removed"]) == (2, 3, 3)
    new = json.loads(cli(store, "log", "--json").output)
    assert doc["refs_moved"] == {"refs/heads/main": new[0]["id"], "refs/tags/v1": new[0]["id"]}
    assert doc["paths_changed"] == {"refs/heads/main": ["/memory/working.md", "/secret/card.md"],
                                    "refs/tags/v1": ["/memory/working.md", "/secret/card.md"]}
    # every old id is mapped: a2 and s3 to the new a2; s2 and a1 to the new a1; s1 (the root) to null
    by_message = {c["message"]: c["id"] for c in old}
    assert doc["id_map"] == {
        by_message["s3"]: new[0]["id"], by_message["a2"]: new[0]["id"],
        by_message["s2"]: new[1]["id"], by_message["a1"]: new[1]["id"], by_message["s1"]: None,
    }
    record = json.loads(cli(store, "log", "--rev", "refs/purges", "--json").output)
    assert doc["record"] == record[0]["id"]
    assert doc["bytes_reclaimed"] == max(0, doc["bytes_before"] - doc["bytes_after"])
    assert SECRET not in json.dumps(doc)
    dry = json.loads(cli(store, "purge", "--text", "likes tea", "--reason", "r", "--dry-run", "--json").output)
    assert set(dry) == REPORT_KEYS and dry["dry_run"] is True and dry["record"] is None and dry["verified"] is False


# ----------------------------------------------------------------- --verify


def test_verify_exit_codes(store):
    found = cli(store, "purge", "--verify", "--text", SECRET, code=1).output.splitlines()
    assert found[-1].startswith("found in ") and found[-1].endswith(" places")
    assert any(line.startswith("blob ") for line in found) and SECRET not in "\n".join(found)
    doc = json.loads(cli(store, "purge", "--verify", "--text", SECRET, "--json", code=1).output)
    assert doc["verified"] is False and len(doc["found"]) == len(found) - 1
    assert cli(store, "purge", "--verify", "--text", "never written anywhere").output == "not found\n"
    doc = json.loads(cli(store, "purge", "--verify", "--text", "never written", "--text", "nor this", "--json").output)
    assert doc == {"verified": True, "found": []}
    assert SECRET in cli(store, "cat", WM).output  # --verify rewrote nothing


# ----------------------------------------------------------------- usage errors write nothing


@pytest.mark.parametrize("args, code, message", [
    (["--reason", "r"], 2, "purge needs --path GLOB or --text STRING"),
    (["--text", SECRET], 2, "purge needs --reason TEXT"),
    (["--text", SECRET, "--reason", ""], 1, "Error: purge needs a reason"),
    (["--text", SECRET, "--reason", "   "], 1, "Error: purge needs a reason"),
    (["--path", "/a/[", "--reason", "r"], 1, "Error: purge path pattern"),
    (["--text", "", "--reason", "r"], 1, "Error: an empty string cannot be purged"),
    (["--verify"], 2, "purge --verify takes --text STRING"),
    (["--verify", "--text", SECRET, "--path", "/secret/**"], 2, "purge --verify takes --text STRING"),
    (["--verify", "--text", SECRET, "--reason", "r"], 2, "purge --verify takes --text STRING"),
])
def test_usage_errors_write_nothing(store, args, code, message):
    ids, raw = log_ids(store, "--all"), store_bytes(store)
    result = cli(store, "purge", *args, code=code)
    assert message in result.output and "Traceback" not in result.output
    assert store_bytes(store) == raw
    assert log_ids(store, "--all") == ids
    assert_no_purge_record(store)


def test_no_store_is_not_created(tmp_path):
    result = cli(tmp_path / "nothing", "purge", "--text", SECRET, "--reason", "r", "--yes", code=1)
    assert result.output.startswith("Error: no memrev store at") and not (tmp_path / "nothing").exists()


# ----------------------------------------------------------------- show OLD


def test_show_an_old_id(store):
    old = {c["message"]: c["id"] for c in json.loads(cli(store, "log", "--json").output)}
    cli(store, "purge", "--path", "/secret/**", "--reason", "not ours")
    new = {c["message"]: c["id"] for c in json.loads(cli(store, "log", "--json").output)}
    out = cli(store, "show", old["a2"][:12]).output.splitlines()
    assert out[0].startswith(f"commit {old['a2'][:10]} was rewritten by purge /purge-")
    assert out[0].endswith(f" UTC: not ours); it is now {new['a2'][:10]}")
    assert out[1] == f"commit {new['a2'][:10]}"
    assert cli(store, "show", new["a2"]).output.splitlines() == out[1:]  # then the new commit as usual
    doc = json.loads(cli(store, "show", old["a2"], "--json").output)
    assert doc["id"] == doc["b"] == new["a2"]
    rewritten = doc["rewritten"]
    assert (rewritten["old"], rewritten["new"], rewritten["reason"]) == (old["a2"], new["a2"], "not ours")
    assert rewritten["record"].startswith("/purge-") and rewritten["time"]
    assert "rewritten" not in json.loads(cli(store, "show", "HEAD", "--json").output)
    assert "rewritten" not in json.loads(cli(store, "show", new["a2"], "--json").output)
    assert "rewritten by purge" not in cli(store, "show", "HEAD").output
    # s3 was dropped onto a2: it says so, and shows its parent; s1, the root, left nothing
    first = cli(store, "show", old["s3"]).output.splitlines()[0]
    assert first.startswith(f"commit {old['s3'][:10]} was dropped by purge /purge-")
    assert first.endswith(f"every change it made was purged; its parent is now {new['a2'][:10]}")
    assert json.loads(cli(store, "show", old["s3"], "--json").output)["rewritten"]["dropped"] is True
    gone = cli(store, "show", old["s1"], code=1).output
    assert gone.startswith(f"Error: commit {old['s1'][:10]} was removed by purge /purge-")
    assert gone.rstrip().endswith("not ours): every change it made was purged")
    assert cli(store, "show", old["s1"], "--json", code=1).output == gone


# ----------------------------------------------------------------- the question on a terminal


def _on_a_terminal(argv, answer):
    """Run ``argv`` with stdin and stdout on a pseudo-terminal; answer its question with ``answer``.

    Returns (exit status, what the terminal showed, stderr)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=dict(os.environ))
    os.close(slave)
    shown, answered = b"", False
    deadline = time.monotonic() + 120  # a bound on a hang, not a timed assertion
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 5)
        if not ready:
            continue
        try:
            data = os.read(master, 65536)
        except OSError:  # the terminal closed: the command exited
            break
        if not data:
            break
        shown += data
        if not answered and b"[y/N]" in shown:
            os.write(master, answer.encode() + b"\n")
            answered = True
    else:
        proc.kill()
    code = proc.wait(timeout=60)
    os.close(master)
    return code, shown.decode().replace("\r\n", "\n"), answered


def test_a_terminal_is_asked_first(store):
    argv = [sys.executable, "-m", "memrev.cli", "--store", str(store), "purge", "--text", SECRET, "--reason", "r"]
    ids, raw = log_ids(store, "--all"), store_bytes(store)
    code, shown, asked = _on_a_terminal(argv, "n")
    assert asked and code == 1, shown
    assert f"Purge 1 string from every revision of {store}?" in shown and "nothing purged" in shown
    assert SECRET not in shown
    assert store_bytes(store) == raw and log_ids(store, "--all") == ids
    assert_no_purge_record(store)
    code, shown, asked = _on_a_terminal([*argv, "--dry-run"], "y")  # a dry run does not ask
    assert not asked and code == 0 and shown.lstrip("\r\x1b[K").startswith("dry run, nothing changed"), shown
    code, shown, asked = _on_a_terminal(argv, "y")
    assert asked and code == 0, shown
    assert "purged 1 string: 4 commits rewritten, 0 dropped" in shown and "verified: yes" in shown
    assert SECRET not in cli(store, "cat", WM).output and log_ids(store, "--all") != ids


# ----------------------------------------------------------------- strings kept out of the shell's history


def test_text_from_a_file_or_stdin(store, tmp_path):
    """--text-from reads the strings (one per line) from a file or stdin, so they are never
    on a command line: the purge and --verify take them as --text does."""
    strings = tmp_path / "strings.txt"
    strings.write_text(f"{SECRET}\n\nlikes tea\n")
    assert cli(store, "purge", "--verify", "--text-from", str(strings), code=1).output
    cli(store, "purge", "--text-from", "-", "--reason", "ticket 9", "--yes", input=f"{SECRET}\n")
    assert SECRET not in cli(store, "cat", WM).output
    assert "likes tea" in cli(store, "cat", WM).output
    assert cli(store, "purge", "--verify", "--text-from", "-", input=f"{SECRET}\n").output.strip() == "not found"
    strings.write_bytes(b"\xff\xfe not text\n")
    before = store_bytes(store)
    assert "not UTF-8" in cli(store, "purge", "--text-from", str(strings), "--reason", "r", code=2).output
    assert store_bytes(store) == before
