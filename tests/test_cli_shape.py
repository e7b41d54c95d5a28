"""The CLI's shape (issue 10, item 6): thin, quick to start, one JSON style, a pager, and the
frictions a new user met (word diff, log layout, --all, --author, help text).

Start time itself is measured by bench/cli_start.py, not here: these tests count what
is imported, never how long it takes.
"""

import asyncio
import json
import os
import pty
import select
import subprocess
import sys

import pytest
from click.testing import CliRunner

from memrev import Store, VersionedStore
from memrev.cli import main
from memrev.cli.render import pager_command as _pager_command
from memrev.store.reads import Reader

WM = "/memory/working.md"


@pytest.fixture
def store(tmp_path):
    """main: three versions of WM (an unrelated commit after the last); exp: one commit of its own."""

    async def build():
        async with VersionedStore(tmp_path, author="tester") as s:
            await s.write(WM, "# Working\n- likes tea\n")
            await s.write("/artifacts/a.md", "A\n")
            await s.write(WM, "# Working\n- likes coffee\n- lives in Oslo\n", message="turn 2")
            (await s.branch("exp", at="HEAD")).close()
            await s.write("/log/s.jsonl", '{"n": 1}\n', message="event log")
            exp = s.on_branch("exp")
            await exp.write("/notes/exp.md", "idea\n", message="exp idea")
            exp.close()

    asyncio.run(build())
    return tmp_path


def cli(store, *args, env=None):
    result = CliRunner().invoke(main, ["--store", str(store), *args], env=env)
    assert result.exit_code == 0, (result.output, result.exception)
    return result.output


def _modules_after(code: str) -> set[str]:
    """The modules loaded after running ``code`` in a fresh interpreter."""
    report = "\nimport sys; print('--modules--', *sys.modules, sep='\\n')"
    out = subprocess.run([sys.executable, "-c", code + report], capture_output=True, text=True, check=True)
    return set(out.stdout.split("--modules--\n")[-1].split())


# ----------------------------------------------------------------- start: import only what a command uses


def _run_cli(argv: list[str]) -> str:
    return (f"import sys; sys.argv = {['memrev', *argv]!r}\nfrom memrev.cli import main\n"
            "try:\n    main()\nexcept SystemExit:\n    pass")


def test_help_imports_neither_the_store_nor_asyncio_nor_the_viewer():
    # What the CLI adds to `import memrev` (whose own imports tests/test_import_layers.py checks).
    added = _modules_after(_run_cli(["--help"])) - _modules_after("import memrev")
    heavy = {"memrev.store.store", "memrev.repo.repository", "memrev.history", "memrev.viewer", "asyncio", "sqlite3", "autogen_core"}
    assert not heavy & added, sorted(heavy & added)
    assert "click" in added  # the command really ran


def test_log_does_not_import_autogen_or_the_viewer(store):
    loaded = _modules_after(_run_cli(["--store", str(store), "log", "-n", "5"]))
    added = loaded - _modules_after("import memrev")
    assert "memrev.store.reads" in loaded  # the command really ran (a read: without the async Store)
    assert not {"autogen_core", "memrev.autogen", "memrev.viewer", "starlette", "rapidfuzz"} & added


# ----------------------------------------------------------------- --version, -h, help text


def test_version_and_short_help_option(store):
    assert cli(store, "--version").startswith("memrev ")
    assert "Usage: memrev [OPTIONS] COMMAND" in cli(store, "-h")
    assert "Usage: memrev log [OPTIONS] [PATH]" in cli(store, "log", "-h")


def test_command_summaries_are_explicit_and_never_cut_mid_word(store):
    for name, command in main.commands.items():
        assert command.short_help, f"{name} has no short help"
    listing = cli(store, "--help").split("Commands:")[1]
    assert "..." not in listing, listing


# ----------------------------------------------------------------- JSON: declared once, one style


def _json_outputs(store):
    return {
        "log": cli(store, "log", "--json"), "history": cli(store, "history", WM, "--json"),
        "blame": cli(store, "blame", WM, "--json"), "show": cli(store, "show", "--json"),
        "show-path": cli(store, "show", f"HEAD:{WM}", "--json"), "cat": cli(store, "cat", WM, "--json"),
        "diff": cli(store, "diff", "--json"), "ls": cli(store, "ls", "--json"), "branch": cli(store, "branch", "--json"),
        "tag-make": cli(store, "tag", "v1", "--json"), "tag": cli(store, "tag", "--json"),
        "why": cli(store, "why", f"{WM}:2", "--json"), "fsck": cli(store, "fsck", "--json"),
        "gc": cli(store, "gc", "--json"), "merge": cli(store, "merge", "exp", "--json"),
        "restore": cli(store, "restore", WM, "--rev", "HEAD~2", "--json"), "revert": cli(store, "revert", "HEAD", "--json"),
        "export": cli(store, "export", str(store / "b.memrev"), "--json"),
        "import": cli(store / "copy", "import", str(store / "b.memrev"), "--json"),
        "adopt": cli(store, "adopt", str(store), "--json"),
        "purge": cli(store, "purge", "--text", "likes tea", "--reason", "r", "--dry-run", "--json"),
        "purge-verify": cli(store, "purge", "--verify", "--text", "never stored", "--json"),
    }


def test_every_json_output_has_one_style(store):
    outputs = _json_outputs(store)
    json_commands = {name for name, c in main.commands.items() if any(p.name == "as_json" for p in c.params)}
    assert json_commands <= {k.split("-")[0] for k in outputs}, "a --json command is not checked here"
    for name, text in outputs.items():
        assert text == json.dumps(json.loads(text), indent=2) + "\n", f"{name} --json is not in the one style"


def test_json_option_is_declared_once():
    helps = {p.help for c in main.commands.values() for p in c.params if p.name == "as_json"}
    assert helps == {"Machine-readable output (JSON)."}


def test_diff_and_show_json_name_the_revisions_compared(store):
    ids = [c["id"] for c in json.loads(cli(store, "log", "--json"))]
    doc = json.loads(cli(store, "diff", "HEAD~2", "HEAD", "--json"))
    assert (doc["a"], doc["b"]) == (ids[2], ids[0])
    last = json.loads(cli(store, "diff", WM, "--json"))  # WM's last change, two commits back
    assert (last["a"], last["b"]) == (ids[3], ids[1]) and [c["path"] for c in last["changes"]] == [WM]
    shown = json.loads(cli(store, "show", "HEAD~1", "--json"))
    assert (shown["a"], shown["b"]) == (ids[2], ids[1])
    root = json.loads(cli(store, "show", ids[-1], "--json"))
    assert root["a"] is None and root["b"] == ids[-1] and root["changes"][0]["status"] == "added"


def test_gc_and_tag_json(store):
    assert json.loads(cli(store, "gc", "--json")) == {"commits": 0, "trees": 0, "blobs": 0, "refs": 0}
    head = json.loads(cli(store, "log", "-n", "1", "--json"))[0]["id"]
    assert json.loads(cli(store, "tag", "v1", "--json")) == {"tag": "v1", "commit": head}
    assert json.loads(cli(store, "tag", "--json")) == {"v1": head}


# ----------------------------------------------------------------- errors: memrev's are one line, bugs are not


def test_a_type_error_from_a_bug_keeps_its_traceback(store, monkeypatch):
    async def broken(self, *a, **k):
        raise TypeError("a bug in memrev")

    def broken_read(self, *a, **k):
        raise TypeError("a bug in memrev")

    monkeypatch.setattr(Store, "blame", broken)  # blame opens a framework-free Store
    result = CliRunner().invoke(main, ["--store", str(store), "blame", WM])
    assert isinstance(result.exception, TypeError)
    monkeypatch.setattr(Reader, "history", broken_read)  # history, a read-only command, a Reader
    result = CliRunner().invoke(main, ["--store", str(store), "history", WM])
    assert isinstance(result.exception, TypeError)


# ----------------------------------------------------------------- pager


@pytest.mark.parametrize(
    ("no_pager", "tty", "env", "expected"),
    [
        (False, True, {}, "less"),
        (False, False, {}, None),  # piped or redirected: never
        (True, True, {}, None),  # --no-pager
        (False, True, {"PAGER": "more"}, "more"),
        (False, True, {"PAGER": "more", "MEMREV_PAGER": "most -s"}, "most -s"),
        (False, True, {"MEMREV_PAGER": ""}, None),
        (False, True, {"PAGER": "cat"}, None),
    ],
)
def test_pager_choice(no_pager, tty, env, expected):
    assert _pager_command(no_pager, tty, env) == expected


def _run_on_a_terminal(argv, env):
    """Run ``argv`` with stdout on a pseudo-terminal; everything it wrote there."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(argv, stdout=slave, stderr=subprocess.PIPE, env=env)
    os.close(slave)
    chunks = []
    while True:
        ready, _, _ = select.select([master], [], [], 60)
        if not ready:
            proc.kill()
            raise AssertionError("no output from the command on the terminal")
        try:
            data = os.read(master, 65536)
        except OSError:  # the terminal closed: every writer has exited
            break
        if not data:
            break
        chunks.append(data)
    assert proc.wait(timeout=60) == 0, proc.stderr.read()
    os.close(master)
    return b"".join(chunks).decode().replace("\r\n", "\n")


@pytest.mark.slow  # measured >= 0.3 s: kept out of the quick loop
@pytest.mark.parametrize("command", [["log", "--oneline"], ["history", WM], ["blame", WM]])
def test_long_output_goes_through_the_pager_on_a_terminal_only(store, command):
    env = dict(os.environ, MEMREV_PAGER="sed 's/^/paged: /'")
    argv = [sys.executable, "-m", "memrev.cli", "--store", str(store), *command]
    on_terminal = _run_on_a_terminal(argv, env)
    lines = [ln for ln in on_terminal.splitlines() if ln]
    assert lines and all(ln.startswith("paged: ") for ln in lines), on_terminal
    piped = subprocess.run(argv, env=env, capture_output=True, text=True, check=True).stdout
    assert piped and "paged: " not in piped
    no_pager = _run_on_a_terminal([*argv[:3], "--no-pager", *argv[3:]], env)
    assert no_pager and "paged: " not in no_pager


# ----------------------------------------------------------------- frictions


def test_word_diff_shows_only_the_changed_hunks(tmp_path):
    lines = [f"line {i}\n" for i in range(40)]
    changed = lines.copy()
    changed[20] = "line twenty\n"

    async def build():
        async with VersionedStore(tmp_path) as s:
            await s.write("/long.md", "".join(lines))
            await s.write("/long.md", "".join(changed))

    asyncio.run(build())
    out = cli(tmp_path, "diff", "--word-diff").splitlines()
    assert out == ["--- a/long.md", "+++ b/long.md", "@@ -18,7 +18,7 @@", "line 17", "line 18", "line 19",
                   "line [-20-]{+twenty+}", "line 21", "line 22", "line 23"]


def test_full_log_sets_changed_paths_apart_from_the_message(store):
    out = cli(store, "log", "-n", "1", "--rev", "HEAD~1")
    assert out.splitlines()[3:] == ["", "    turn 2", "", WM, ""]


def test_log_all_shows_every_branch_once_newest_first_with_labels(store):
    lines = cli(store, "log", "--all", "--oneline").splitlines()
    messages = [ln.split(" ", 1)[1] for ln in lines]
    assert len(lines) == 5 and len({ln.split()[0] for ln in lines}) == 5
    assert messages[0].startswith("(exp) ") and messages[0].endswith("exp idea")
    assert messages[1].startswith("(main) ") and messages[1].endswith("event log")
    as_json = json.loads(cli(store, "log", "--all", "--json"))
    assert [c["id"][:10] for c in as_json] == [ln.split()[0] for ln in lines]
    assert len(json.loads(cli(store, "log", "--all", "-n", "2", "--json"))) == 2
    assert [c["message"] for c in json.loads(cli(store, "log", "--all", "-S", "idea", "--json"))] == ["exp idea"]
    assert CliRunner().invoke(main, ["--store", str(store), "log", "--all", WM]).exit_code == 2


def _head_author(store):
    return json.loads(cli(store, "log", "-n", "1", "--json"))[0]["author"]


def test_commits_from_the_shell_name_their_author(store, monkeypatch):
    monkeypatch.delenv("MEMREV_AUTHOR", raising=False)
    monkeypatch.setenv("LOGNAME", "sam")  # getpass.getuser() reads LOGNAME first
    cli(store, "revert", "HEAD")
    assert _head_author(store) == "sam"
    cli(store, "restore", WM, "--rev", "HEAD~3", env={"MEMREV_AUTHOR": "night-job"})
    assert _head_author(store) == "night-job"
    cli(store, "merge", "exp", "--author", "reviewer", env={"MEMREV_AUTHOR": "night-job"})
    assert _head_author(store) == "reviewer"
    assert "(default: $MEMREV_AUTHOR, else your login name)" in " ".join(cli(store, "merge", "-h").split())


# ----------------------------------------------------------------- the API the CLI calls (on every backend)


@pytest.fixture
def api_store(store_location):
    """The ``store`` fixture's history, on the embedded default and on the in-memory backend."""

    async def build():
        async with VersionedStore(store_location, author="tester") as s:
            await s.write(WM, "# Working\n- likes tea\n")
            await s.write("/artifacts/a.md", "A\n")
            await s.write(WM, "# Working\n- likes coffee\n- lives in Oslo\n", message="turn 2")
            (await s.branch("exp", at="HEAD")).close()
            await s.write("/log/s.jsonl", '{"n": 1}\n', message="event log")
            exp = s.on_branch("exp")
            await exp.write("/notes/exp.md", "idea\n", message="exp idea")
            exp.close()

    asyncio.run(build())
    return store_location


def _on(location, check):
    async def run():
        async with VersionedStore(location, create=False) as s:
            await check(s)

    asyncio.run(run())


def test_last_change_is_the_newest_version_against_the_one_before(api_store):
    async def check(s):
        ids = [c.id for c in await s.log()]
        assert await s.last_change(WM) == (ids[3], ids[1])  # commits of other paths came since
        assert await s.last_change("/artifacts/a.md") == (ids[3], ids[2])  # one version: its parent
        root_only = await s.last_change(WM, rev=ids[3])
        assert root_only == (None, ids[3])
        [change] = await s.diff(*root_only, WM)
        assert change.status == "added"
        with pytest.raises(KeyError):
            await s.last_change("/nope.md")

    _on(api_store, check)


def test_diff_under_several_paths(api_store):
    async def check(s):
        every = [c.path for c in await s.diff(None, "HEAD")]
        assert every == ["/artifacts/a.md", "/log/s.jsonl", WM]
        assert [c.path for c in await s.diff(None, "HEAD", [WM, "/artifacts", WM])] == ["/artifacts/a.md", WM]
        assert [c.path for c in await s.diff(None, "HEAD", "/log")] == ["/log/s.jsonl"]

    _on(api_store, check)
    out = cli(api_store, "diff", "HEAD~3", "HEAD", "--stat", "--", WM, "/log")
    assert [line.split()[:2] for line in out.splitlines()[:2]] == [["A", "/log/s.jsonl"], ["M", WM]]


def test_log_all_walks_every_branch_once(api_store):
    async def check(s):
        everything = await s.log_all()
        assert [c.message for c in everything[:2]] == ["exp idea", "event log"]
        assert len(everything) == len({c.id for c in everything}) == 5
        assert [c.id for c in await s.log_all(limit=2)] == [c.id for c in everything[:2]]
        assert [c.message for c in await s.log_all(contains="idea")] == ["exp idea"]
        assert [c.message for c in await s.log_all(contains="tea", limit=1)] == ["turn 2"]

    _on(api_store, check)
