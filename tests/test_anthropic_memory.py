"""``memrev.anthropic.MemoryTool``: Claude's memory tool on a store, checked against the SDK's own.

The reference is the ``anthropic`` package's ``BetaAsyncLocalFilesystemMemoryTool`` on a
tmp folder. Random command scripts run on both (through ``tool.call(input)``, as the
tool runner calls them); each command's result text, or error text, must be the same,
and so must the files after it. The differences kept on purpose (docs/claude-memory-tool.md):

- a folder's size in ``view``: the file system's is its inode's (4096 on ext4, other
  numbers elsewhere), the store's what its files hold; those numbers are masked;
- a folder exists while it holds a file (as in git): after each command the reference's
  empty folders are removed, so both sides hold the same tree;
- where the reference fails with a bare ``OSError`` (a file below a file, a folder moved
  into itself) memrev says so with a ``ToolError``; only that it is an error is compared;
- "Multiple occurrences ... in lines:" names the first 20 lines and how many more.

Then a real ``client.beta.messages.tool_runner`` loop drives the tool, offline: an httpx2
(the SDK's HTTP client) ``MockTransport`` answers as the Messages API would, with scripted ``tool_use`` blocks.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest
from anthropic import AsyncAnthropic
from anthropic.lib.tools import ToolError
from anthropic.tools.memory import BetaAsyncLocalFilesystemMemoryTool
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context

from memrev.anthropic import MemoryTool
from memrev.backends import memory
from memrev.store import Store

pytestmark = pytest.mark.anyio

# ------------------------------------------------------------ command scripts

@dataclass(frozen=True)
class Pick:
    """A path chosen when the command runs: the ``n``-th (cyclically) file (or folder) there is then."""

    n: int
    files: bool = False


@dataclass(frozen=True)
class Cut:
    """An ``old_str`` chosen when the command runs: ``[start:start + size]`` of the file's text."""

    start: int
    size: int


_name = st.sampled_from(["a", "b", "c.md", "a-b", "B", ".h", "é"])  # "a-b" sorts before "a/x"; .h is hidden
_plain = st.lists(_name, min_size=1, max_size=3).map(lambda parts: "/".join(["/memories", *parts]))
_odd = st.one_of(  # the root in its spellings, dot segments, outside the root
    st.lists(st.sampled_from(["a", "b", "..", "."]), max_size=4).map(lambda parts: "/".join(["/memories", *parts])),
    st.sampled_from(["/memories/", "/memories//a", "/memories/a/", "/other/a", "memories/a", "/memories/../x"]),
)
_picked = st.builds(Pick, st.integers(0, 40))
_path = st.one_of(_picked, _picked, _plain, _odd)  # mostly paths that exist: the commands succeed too
_file = st.one_of(st.builds(Pick, st.integers(0, 40), st.just(True)), _path)
_text = st.text(alphabet=st.sampled_from(["a", "b", "\n", "\r", "\t", "é", "😀"]), max_size=10)
_old = st.one_of(st.builds(Cut, st.integers(0, 12), st.integers(0, 6)), st.sampled_from(["a", "\n", ""]), _text)
_view = st.builds(lambda p, r: {"command": "view", "path": p, **({} if r is None else {"view_range": list(r)})},
                  _path, st.none() | st.tuples(st.integers(-2, 12), st.integers(-2, 12)))
_create = st.builds(lambda p, t: {"command": "create", "path": p, "file_text": t}, st.one_of(_plain, _path), _text)
_str_replace = st.builds(lambda p, o, n: {"command": "str_replace", "path": p, "old_str": o, "new_str": n},
                         _file, _old, _text)
_insert = st.builds(lambda p, n, t: {"command": "insert", "path": p, "insert_line": n, "insert_text": t},
                    _file, st.integers(-1, 6), _text)
_delete = st.builds(lambda p: {"command": "delete", "path": p}, _path)
_rename = st.builds(lambda o, n: {"command": "rename", "old_path": o, "new_path": n}, _path, st.one_of(_plain, _path))
_command = st.one_of(_view, _create, _create, _str_replace, _str_replace, _insert, _insert, _delete, _rename, _rename)
_seed = st.builds(lambda p, t: {"command": "create", "path": p, "file_text": t}, _plain, _text)
CLEAR = {"command": "clear_all_memory"}
_script = st.builds(  # a few files first, so later commands find something; at most one clear_all_memory
    lambda first, then, clear: first + then[:clear] + [CLEAR] + then[clear:] if clear is not None else first + then,
    st.lists(_seed, min_size=1, max_size=5), st.lists(_command, min_size=4, max_size=30), st.none() | st.integers(0, 30))


# ------------------------------------------------------------ comparing


async def outcome(tool: Any, command: dict) -> tuple[str, str]:
    """``("ok", text)``, ``("error", message)`` (a ``ToolError``) or ``("oserror", repr)``."""
    try:
        if command["command"] == "clear_all_memory":
            return "ok", await tool.clear_all_memory()
        return "ok", await tool.call(command)
    except ToolError as e:
        return "error", str(e)
    except OSError as e:
        return "oserror", repr(e)


_FOLDER_LINE = re.compile(r"^\S+\t(?P<path>.*)$")


def sizes_masked(text: str) -> str:
    """A ``view`` listing with each folder's size (the first line's, and every ``.../`` line's) as ``*``."""
    if not text.startswith("Here're the files and directories"):
        return text
    header, *lines = text.split("\n")
    out = [header]
    for n, line in enumerate(lines):
        m = _FOLDER_LINE.match(line)
        out.append(f"*\t{m['path']}" if m and (n == 0 or m["path"].endswith("/")) else line)
    return "\n".join(out)


def bounded(message: str) -> str:
    """The reference's "in lines: ..." as memrev bounds it: the first 20, then how many more."""
    m = re.search(r"in lines: (?P<lines>[0-9, ]+)\. Please", message)
    if not m:
        return message
    lines = m["lines"].split(", ")
    if len(lines) <= 20:
        return message
    shown = f"{', '.join(lines[:20])} and {len(lines) - 20} more"
    return message[: m.start("lines")] + shown + message[m.end("lines") :]


def prune_empty_folders(root: Path) -> None:
    """The reference's folders that hold no file removed (a store's folder exists while it holds one)."""
    for folder, _, _ in sorted(os.walk(root), key=lambda w: -len(w[0])):
        if Path(folder) != root and not os.listdir(folder):
            os.rmdir(folder)


def files_on_disk(root: Path) -> dict[str, str]:
    return {"/memories/" + p.relative_to(root).as_posix(): p.read_bytes().decode()
            for p in root.rglob("*") if p.is_file()}


async def files_in_store(store: Store, root: str = "/memories") -> dict[str, str]:
    """The files under ``root``, named as Claude names them (``/memories/...``)."""
    entries = await store.tree(root, depth=64) or []
    cut = len(root.rstrip("/"))
    return {"/memories" + e.path[cut:]: await store.read(e.path) or "" for e in entries if e.kind == "file"}


class Pair:
    """The reference on a tmp folder and a ``MemoryTool`` on a fresh store (in memory, or SQLite)."""

    def __init__(self, tmp: Path, root: str = "/memories", backend: str = "memory") -> None:
        self.folder = tmp / uuid.uuid4().hex
        self.reference = BetaAsyncLocalFilesystemMemoryTool(base_path=str(self.folder))
        self.name = f"anthropic-{uuid.uuid4().hex}"
        self.store = Store(f"memory://{self.name}" if backend == "memory" else self.folder.with_suffix(".store"))
        self.root = root
        self.tool = MemoryTool(self.store, root=root)

    def resolved(self, command: dict) -> dict:
        """``Pick`` and ``Cut`` made concrete from what the reference folder holds now."""
        root = self.folder / "memories"
        found = sorted(root.rglob("*")) if root.exists() else []

        def pick(p: Pick) -> str:
            there = ["/memories/" + f.relative_to(root).as_posix() for f in found if f.is_file() or not p.files]
            return there[p.n % len(there)] if there else "/memories/a"

        out = {k: pick(v) if isinstance(v, Pick) else v for k, v in command.items()}
        if isinstance(out.get("old_str"), Cut):
            cut, target = out["old_str"], root / out["path"].removeprefix("/memories").lstrip("/")
            text = target.read_bytes().decode() if target.is_file() else ""
            out["old_str"] = text[cut.start : cut.start + cut.size]
        return out

    async def run(self, command: dict) -> None:
        command = self.resolved(command)
        theirs = await outcome(self.reference, command)
        ours = await outcome(self.tool, command)
        where = f"after {command}"
        if currently_in_test_context():  # --hypothesis-show-statistics: what the scripts reach
            event(f"{command['command']}: {theirs[0]}")
        if theirs[0] == "oserror":
            assert ours[0] == "error", (where, theirs, ours)
        elif theirs[0] == "error":
            assert ours == ("error", bounded(theirs[1])), where
        else:
            assert (ours[0], sizes_masked(ours[1])) == ("ok", sizes_masked(theirs[1])), where
        prune_empty_folders(self.folder / "memories")
        assert await files_in_store(self.store, self.root) == files_on_disk(self.folder / "memories"), where

    def close(self) -> None:
        self.store.close()
        memory.drop(self.name)


async def run_script(tmp: Path, script: list[dict], root: str = "/memories", backend: str = "memory") -> Pair:
    pair = Pair(tmp, root, backend)
    try:
        for command in script:
            await pair.run(command)
        if root not in ("/memories", "/"):  # nothing outside the tool's folder
            assert set(await pair.store.list("/")) <= {root.split("/")[1] + "/"}
    finally:
        pair.close()
    return pair


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(script=_script, root=st.sampled_from(["/memories", "/agents/ada/memories"]))
@pytest.mark.slow
async def test_random_scripts_answer_as_the_filesystem_tool(tmp_path: Path, script: list[dict], root: str) -> None:
    await run_script(tmp_path, script, root)


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(script=_script)
async def test_a_few_random_scripts_answer_as_the_filesystem_tool(tmp_path: Path, script: list[dict]) -> None:
    await run_script(tmp_path, script)


def c(command: str, **fields: Any) -> dict:
    return {"command": command, **fields}


SCRIPTED = [  # the cases a previous differential found, and each command's errors, always run
    c("view", path="/memories"),  # an empty root
    c("create", path="/memories", file_text="x"),
    c("str_replace", path="/memories", old_str="a", new_str="b"),
    c("insert", path="/memories", insert_line=0, insert_text="b"),
    c("create", path="/memories/a", file_text="file"),
    c("create", path="/memories/a/b", file_text="below a file"),  # the reference: NotADirectoryError
    c("create", path="/memories/d/e.md", file_text="one\ntwo\nthree\n"),
    c("create", path="/memories/d", file_text="over a folder"),
    c("rename", old_path="/memories/a", new_path="/memories"),
    c("rename", old_path="/memories/d", new_path="/memories/d/inner"),  # the reference: EINVAL
    c("rename", old_path="/memories/a", new_path="/memories/a/x"),
    c("rename", old_path="/memories", new_path="/memories/x"),
    c("delete", path="/memories"),
    c("delete", path="/memories/nope"),
    c("view", path="/memories/d/e.md", view_range=[2, -1]),
    c("str_replace", path="/memories/d/e.md", old_str="two", new_str="2"),
    c("str_replace", path="/memories/d/e.md", old_str="t", new_str="T"),
    c("str_replace", path="/memories/d/e.md", old_str="zz", new_str="T"),
    c("insert", path="/memories/d/e.md", insert_line=9, insert_text="x"),
    c("insert", path="/memories/d/e.md", insert_line=3, insert_text="four"),
    c("view", path="/memories"),
    c("view", path="/memories/"),
    c("create", path="/memories/.hidden/x", file_text="not listed"),
    c("view", path="/memories/../etc"),
    c("view", path="/etc/passwd"),
    c("rename", old_path="/memories/d", new_path="/memories/f/g"),
    c("view", path="/memories"),
    c("delete", path="/memories/f"),
    c("view", path="/memories/f"),
]


@pytest.mark.parametrize(("root", "backend"), [("/memories", "memory"), ("/memories", "sqlite"),
                                               ("/agents/ada/memories", "memory"), ("/", "memory")])
async def test_the_scripted_cases_answer_as_the_filesystem_tool(tmp_path: Path, root: str, backend: str) -> None:
    """Also with the tool's folder elsewhere in the store: Claude still names it ``/memories``."""
    await run_script(tmp_path, SCRIPTED, root, backend)
    await run_script(tmp_path, [c("rename", old_path="/memories/a", new_path="/memories")])  # an empty store
    await run_script(tmp_path, [c("create", path="/memories/m", file_text="x\n" * 30),
                                c("str_replace", path="/memories/m", old_str="x", new_str="y")])


async def test_clear_all_memory_is_one_tombstone_commit(tmp_path: Path) -> None:
    async with Store(tmp_path / "store") as store:
        tool = MemoryTool(store)
        await tool.call(c("create", path="/memories/a.md", file_text="a"))
        await tool.call(c("create", path="/memories/d/b.md", file_text="b"))
        await store.write("/other.md", "not the tool's")
        assert await tool.clear_all_memory() == "All memory cleared"
        log = await store.log()
        assert len(log) == 4 and log[0].message == "memory clear /memories"
        assert await store.list("/") == ["other.md"]
        assert await store.read("/memories/d/b.md", rev=log[1].id) == "b"
        assert "0B\t/memories" in await tool.call(c("view", path="/memories"))


async def test_every_command_is_one_commit_with_the_tool_s_provenance(tmp_path: Path) -> None:
    async with Store(tmp_path / "store") as store:
        tool = MemoryTool(store)
        script = [c("create", path="/memories/n.md", file_text="a\n"),
                  c("str_replace", path="/memories/n.md", old_str="a", new_str="b"),
                  c("insert", path="/memories/n.md", insert_line=1, insert_text="c"),
                  c("rename", old_path="/memories/n.md", new_path="/memories/m.md"),
                  c("delete", path="/memories/m.md")]
        for n, command in enumerate(script, 1):
            await tool.call(command)
            assert len(await store.log()) == n
        for commit in await store.log():
            assert commit.meta.get("framework") == "anthropic" and commit.meta.get("tool") == "memory", commit.meta
        with pytest.raises(ToolError, match="does not exist"):
            await tool.call(c("delete", path="/memories/m.md"))
        assert len(await store.log()) == len(script)


# ------------------------------------------------------------ a real tool runner, offline


def tool_use(*calls: dict) -> dict:
    blocks = [{"type": "tool_use", "id": f"toolu_{n}", "name": "memory", "input": call} for n, call in enumerate(calls)]
    return message(blocks, "tool_use")


def message(content: list[dict], stop: str = "end_turn") -> dict:
    return {"id": f"msg_{uuid.uuid4().hex[:8]}", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
            "content": content, "stop_reason": stop, "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 10}}


class ScriptedAPI:
    """The Messages API as an httpx transport: each request answered by the next scripted message."""

    def __init__(self, replies: list[dict]) -> None:
        self.replies = iter(replies)
        self.requests: list[dict] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        assert request.url.path == "/v1/messages", request.url
        self.requests.append(json.loads(request.content))
        return httpx2.Response(200, json=next(self.replies))

    def client(self) -> AsyncAnthropic:
        return AsyncAnthropic(api_key="offline", max_retries=0, http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(self)))


def text_of(result: dict) -> str:
    content = result["content"]
    return content if isinstance(content, str) else "".join(block["text"] for block in content)


def tool_results(request: dict) -> list[dict]:
    return [b for b in request["messages"][-1]["content"] if b.get("type") == "tool_result"]


@pytest.mark.slow  # about 1 s, nearly all of it the SDK's runner building its models
async def test_a_tool_runner_loop_remembers_in_the_store(tmp_path: Path) -> None:
    api = ScriptedAPI([
        tool_use(c("view", path="/memories")),
        tool_use(c("create", path="/memories/user.md", file_text="- prefers tea\n"),
                 c("str_replace", path="/memories/user.md", old_str="tea", new_str="green tea")),
        tool_use(c("delete", path="/memories/nope.md")),
        message([{"type": "text", "text": "Noted: green tea."}]),
    ])
    async with Store(tmp_path / "store") as store:
        client = api.client()
        runner = client.beta.messages.tool_runner(
            model="claude-sonnet-4-5", max_tokens=1024, tools=[MemoryTool(store)],
            messages=[{"role": "user", "content": "I prefer green tea."}], betas=["context-management-2025-06-27"])
        final = await runner.until_done()
        await client.close()
        assert final.content[0].text == "Noted: green tea."  # type: ignore[union-attr]
        assert await store.read("/memories/user.md") == "- prefers green tea\n"
        assert [commit.message for commit in await store.log()] == [
            "memory str_replace /memories/user.md", "memory create /memories/user.md"]
    assert len(api.requests) == 4
    assert api.requests[0]["tools"] == [{"type": "memory_20250818", "name": "memory"}]
    (listing,) = tool_results(api.requests[1])
    assert listing["tool_use_id"] == "toolu_0" and not listing.get("is_error")
    assert text_of(listing) == ("Here're the files and directories up to 2 levels deep in /memories, excluding hidden items:"
                                "\n0B\t/memories")
    made, edited = tool_results(api.requests[2])
    assert text_of(made) == "File created successfully at: /memories/user.md"
    assert text_of(edited).endswith("     1\t- prefers green tea\n     2\t")
    (error,) = tool_results(api.requests[3])
    assert error["is_error"] is True and text_of(error) == "The path /memories/nope.md does not exist"


def test_command_names_cover_the_sdk() -> None:
    """The script strategies reach every command the SDK dispatches (a new one would need a case)."""
    from anthropic.types.beta import BetaMemoryTool20250818Command

    names = {t.model_fields["command"].annotation.__args__[0] for t in BetaMemoryTool20250818Command.__args__[0].__args__}
    assert names == {"view", "create", "str_replace", "insert", "delete", "rename"}
    assert set(itertools.chain.from_iterable(
        [step["command"]] for step in SCRIPTED)) >= names
