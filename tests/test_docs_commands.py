"""Every command shown in README.md, docs/cli.md and docs/provenance.md runs, and prints what the docs show.

As sqlite-utils does with cog: the ```console blocks of those files are
examples run here, in document order, on a fresh copy of the quick-start
store (built by examples/quickstart.py). The rules the docs follow:

* A ``$ `` line is a command: ``memrev ...`` (run through the CLI) or
  ``export NAME=VALUE``; any other command in a console block fails the test.
  A ``# comment`` after a command is for the reader.
* The lines after a command, up to the next ``$ `` line, are its output
  (stdout and stderr as a terminal shows them), compared line by line.
  Ids (7 to 40 hex digits), dates, session UUIDs and event-log timestamps
  differ from run to run: both sides are compared with them replaced by
  ``<id>``, ``<date>``, ``<uuid>`` and ``<time>``. An id the docs show and a later command uses (``restore --rev
  18d4a13a28``) is replaced by the id the run printed at that place.
* Commands exit 0, unless the block is preceded by ``<!-- docs-test: exit N -->``;
  ``<!-- docs-test: not run: REASON -->`` shows a command that cannot run
  in a test (``serve`` serves until stopped); only ``serve`` may be so marked.
* The commands run in a folder holding the store ``.quickstart-state``
  (``$MEMREV_STORE`` points at it) and two ``DiskKnowledgeStore`` folders
  of the store's files as plain files: ``notes``, and ``journal-state``,
  which also holds a binary ``avatar.png``.

``python tests/test_docs_commands.py --update FILE`` rewrites FILE's output
blocks with what the commands print now (then review the diff).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from click.testing import CliRunner

from memrev.cli import main

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", ROOT / "docs" / "cli.md", ROOT / "docs" / "provenance.md"]
MARKER = re.compile(r"<!-- docs-test: (exit (?P<exit>\d+)|not run: (?P<why>.+?)) -->")
_NORMAL = [
    (re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"), "<uuid>"),
    (re.compile(r"\b\d{4}-\d\d-\d\d[ T]\d\d:\d\d(:\d\d(\.\d+)?)?(\+00:00)?"), "<date>"),
    (re.compile(r"\b\d{10}\.\d+\b"), "<time>"),  # event-log timestamps (seconds since 1970), before ids
    (re.compile(r"\b[0-9a-f]{7,40}\b"), "<id>"),
]
_ID = re.compile(r"\b[0-9a-f]{7,40}\b")


@dataclass
class Command:
    line: int  # 1-based line of the ``$`` in the file
    text: str
    shown: list[str] = field(default_factory=list)


@dataclass
class Block:
    start: int  # 0-based index of the ```console line
    end: int  # 0-based index of the closing ```
    commands: list[Command]
    exit_code: int = 0
    not_run: str | None = None


def console_blocks(text: str) -> list[Block]:
    lines = text.splitlines()
    blocks, i = [], 0
    while i < len(lines):
        if lines[i].strip() != "```console":
            i += 1
            continue
        marker = MARKER.fullmatch(lines[i - 1].strip()) if i else None
        j, commands = i + 1, []
        while lines[j].strip() != "```":
            if lines[j].startswith("$ "):
                commands.append(Command(j + 1, lines[j][2:]))
            elif commands:
                commands[-1].shown.append(lines[j])
            elif lines[j].strip():
                raise AssertionError(f"line {j + 1}: output before any command")
            j += 1
        block = Block(i, j, commands)
        if marker and marker.group("exit"):
            block.exit_code = int(marker.group("exit"))
        elif marker:
            block.not_run = marker.group("why")
        blocks.append(block)
        i = j + 1
    return blocks


def normalize(lines: list[str]) -> list[str]:
    out = []
    for line in lines:
        for pattern, token in _NORMAL:
            line = pattern.sub(token, line)
        out.append(line.rstrip())
    while out and not out[-1]:
        out.pop()
    return out


class Session:
    """The folder, environment and id map the commands of one file share, in order."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.env = {"MEMREV_STORE": ".quickstart-state", "MEMREV_AUTHOR": "sam"}
        self.ids: dict[str, str] = {}  # an id the docs show -> the id this run printed there

    def run(self, command: Command) -> tuple[int, list[str]]:
        argv = shlex.split(command.text, comments=True)
        if argv[0] == "export" and len(argv) == 2 and "=" in argv[1]:
            name, _, value = argv[1].partition("=")
            self.env[name] = value
            return 0, []
        if argv[0] != "memrev":
            raise AssertionError(f"line {command.line}: only memrev and export commands belong in console blocks")
        argv = [self.real_ids(a) for a in argv[1:]]
        cwd = os.getcwd()
        os.chdir(self.workdir)
        try:
            result = CliRunner().invoke(main, argv, env=self.env, prog_name="memrev", color=False)
        finally:
            os.chdir(cwd)
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise result.exception
        return result.exit_code, result.output.splitlines()

    def real_ids(self, text: str) -> str:
        """``text`` with each id the docs showed earlier replaced by the one this run printed there."""
        return _ID.sub(lambda m: self.ids.get(m.group(), m.group()), text)

    def learn_ids(self, shown: list[str], printed: list[str]) -> None:
        for doc_line, real_line in zip(shown, printed, strict=False):
            doc_ids, real_ids = _ID.findall(doc_line), _ID.findall(real_line)
            if len(doc_ids) == len(real_ids):
                self.ids.update(zip(doc_ids, real_ids, strict=True))


def build_workdir(into: Path, quickstart: Path) -> Path:
    shutil.copytree(quickstart / "state", into / ".quickstart-state")
    shutil.copytree(quickstart / "files", into / "notes")
    shutil.copytree(quickstart / "files", into / "journal-state")
    (into / "journal-state" / "avatar.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    return into


def build_quickstart(into: Path) -> Path:
    """``into`` holding the quick-start store (``state``) and its head as plain files (``files``)."""
    state = into / "state"
    subprocess.run([sys.executable, str(ROOT / "examples" / "quickstart.py"), str(state)],
                   check=True, capture_output=True, timeout=300)
    _checkout(state, into / "files")
    return into


def _checkout(store: Path, files: Path) -> None:
    import asyncio

    from memrev import VersionedStore

    async def walk(s, folder: str) -> None:
        for name in await s.list(folder):
            path = folder.rstrip("/") + "/" + name.rstrip("/")
            if name.endswith("/"):
                await walk(s, path)
                continue
            target = files / path.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(await s.read(path) or "")

    async def main_() -> None:
        async with VersionedStore(store, create=False) as s:
            await walk(s, "/")

    asyncio.run(main_())


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory) -> Path:
    return build_quickstart(tmp_path_factory.mktemp("docs"))


def _check_file(doc: Path, workdir: Path) -> list[str]:
    """Run every console block of ``doc``; the differences found, as messages."""
    session, problems = Session(workdir), []
    for block in console_blocks(doc.read_text(encoding="utf-8")):
        for command in block.commands:
            if block.not_run is not None:
                assert "serve" in shlex.split(command.text), f"{doc.name}:{command.line}: only `serve` may be marked not run"
                continue
            where = f"{doc.name}:{command.line}: $ {command.text}"
            if "serve" in shlex.split(command.text) and block.exit_code == 0:
                problems.append(f"{where}\n  serves until stopped: mark its block <!-- docs-test: not run: ... -->")
                continue
            code, printed = session.run(command)
            if code != block.exit_code:
                problems.append(f"{where}\n  exit {code}, expected {block.exit_code}:\n  " + "\n  ".join(printed))
                continue
            if normalize(command.shown) != normalize(printed):
                problems.append(f"{where}\n  the docs show:\n    " + "\n    ".join(command.shown)
                                + "\n  it printed:\n    " + "\n    ".join(printed))
            session.learn_ids(command.shown, printed)
    return problems


@pytest.mark.slow  # measured >= 0.3 s: kept out of the quick loop
@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_documented_command_runs_and_prints_what_the_docs_show(doc, quickstart, tmp_path):
    problems = _check_file(doc, build_workdir(tmp_path, quickstart))
    assert not problems, "\n\n".join(problems)


def test_the_docs_have_examples_and_markers_parse():
    for doc in DOCS:
        blocks = console_blocks(doc.read_text(encoding="utf-8"))
        assert sum(len(b.commands) for b in blocks) >= 5, doc
        assert all(b.commands for b in blocks), f"{doc.name}: a console block without a command"
    assert normalize(["3f1c2a9b0e 2026-11-30 07:41:02 write /log/cddbb8d6-5cfe-488f-a5fa-8c74e82d9cbb.jsonl  "]) == [
        "<id> <date> write /log/<uuid>.jsonl"]
    assert normalize(['"created_at": 1796093993.8171504, "at": 1796093993.82']) == ['"created_at": <time>, "at": <time>']


def test_autogen_md_ranked_query_example_prints_what_it_shows(tmp_path):
    """docs/autogen.md's score_threshold example: the query, the items and the scores it shows are real."""
    import asyncio

    from autogen_core.memory import MemoryContent, MemoryMimeType

    from memrev import VersionedStore

    doc = (ROOT / "docs" / "autogen.md").read_text(encoding="utf-8")
    example = doc[doc.index('for text in ["Dana is vegetarian"') :]
    example = example[: example.index("```")]
    code, _, shown = example.rpartition("# ")

    async def run() -> str:
        async with VersionedStore(tmp_path) as store:
            memory = store.memory("user")
            scope = {"memory": memory, "MemoryContent": MemoryContent, "MemoryMimeType": MemoryMimeType}
            lines = []
            scope["print"] = lambda value: lines.append(str(value))
            exec(compile("async def example():\n" + "".join("    " + ln + "\n" for ln in code.splitlines()),
                         "autogen.md", "exec"), scope)
            await scope["example"]()
            return "\n".join(lines)

    assert asyncio.run(run()) == shown.strip()


def update(doc: Path) -> None:
    """Rewrite ``doc``'s console blocks with the output the commands print now."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        workdir = build_workdir(Path(tmp) / "work", build_quickstart(Path(tmp)))
        session = Session(workdir)
        lines = doc.read_text(encoding="utf-8").splitlines()
        out, i = [], 0
        for block in console_blocks("\n".join(lines)):
            out += lines[i : block.start + 1]
            for command in block.commands:
                out.append("$ " + session.real_ids(command.text))
                if block.not_run is None:
                    _, printed = session.run(command)
                    session.learn_ids(command.shown, printed)
                    while printed and not printed[-1]:
                        printed.pop()
                    out += printed
                    if command.shown and not command.shown[-1].strip():
                        out.append("")  # the blank line that set the next command apart
                else:
                    out += command.shown
            i = block.end
        out += lines[i:]
        doc.write_text("\n".join(out) + "\n", encoding="utf-8")


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] != "--update":
        sys.exit(f"usage: {sys.argv[0]} --update FILE...")
    for name in sys.argv[2:]:
        update(Path(name))
