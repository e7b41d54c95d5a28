"""``memrev mcp``: the MCP server over a real store, driven by the ``mcp`` SDK's own client,
in process, over a real stdio subprocess and over real HTTP on loopback."""

import contextlib
import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import anyio
import httpx2
import mcp
import pytest
from mcp.client.streamable_http import streamable_http_client
from mcp.types import Implementation

from helpers import spawn
from memrev import errors
from memrev.mcp import ALL_TOOLS, CORE_TOOLS, READ_ONLY_TOOLS, create_server
from memrev.store import Store
from test_async_layer import Ticker

pytestmark = pytest.mark.anyio

SNAPSHOT = Path(__file__).parent / "snapshots" / "mcp_tools.json"
CLIENT = Implementation(name="test-client", version="1.2.3")


@pytest.fixture
def location(tmp_path: Path) -> str:
    return str(tmp_path / "store")


@pytest.fixture
async def store(location: str):
    s = Store(location, create=True, poll_interval=0.05)
    yield s
    s.close()


def client(server, **kw) -> mcp.Client:
    return mcp.Client(server, client_info=CLIENT, **kw)


async def call(c: mcp.Client, tool: str, /, **args):
    result = await c.call_tool(tool, args)
    assert not result.is_error, result.content[0].text
    return result.structured_content


async def fails(c: mcp.Client, tool: str, /, **args) -> str:
    result = await c.call_tool(tool, args)
    assert result.is_error, result.structured_content
    (block,) = result.content
    assert "\n" not in block.text and block.text
    return block.text


# ------------------------------------------------------------------ the tool list


def _listing(tools) -> list[dict]:
    return [
        {
            "name": t.name,
            "input": t.input_schema,
            "output": t.output_schema,
            "annotations": t.annotations.model_dump(exclude_none=True, by_alias=True) if t.annotations else None,
        }
        for t in sorted(tools, key=lambda t: t.name)
    ]


async def test_the_tool_list_and_schemas_match_the_snapshot(store: Store) -> None:
    """The tools a client sees are an interface: a change to a name, an argument or a result
    shows up here (MEMREV_UPDATE_SNAPSHOTS=1 rewrites the file after a deliberate change)."""
    async with client(create_server(store, tools="all")) as c:
        listing = _listing((await c.list_tools()).tools)
    if os.environ.get("MEMREV_UPDATE_SNAPSHOTS") == "1":
        SNAPSHOT.parent.mkdir(exist_ok=True)
        SNAPSHOT.write_text(json.dumps(listing, indent=1, sort_keys=True) + "\n")
    assert listing == json.loads(SNAPSHOT.read_text())
    by_name = {t["name"]: t for t in listing}
    for name in READ_ONLY_TOOLS:
        assert by_name[name]["annotations"]["readOnlyHint"] is True
    for name in ("memory_create", "memory_delete", "memory_str_replace", "memory_rename", "memory_restore", "memory_merge"):
        assert by_name[name]["annotations"]["destructiveHint"] is True
    assert all(t["output"] and t["input"]["type"] == "object" for t in listing)


@pytest.mark.parametrize(("options", "names"), [({}, CORE_TOOLS), ({"tools": "all"}, ALL_TOOLS),
                                                ({"read_only": True, "tools": "all"}, READ_ONLY_TOOLS)])
async def test_tool_sets(store: Store, options: dict, names: tuple[str, ...]) -> None:
    async with client(create_server(store, **options)) as c:
        assert sorted(t.name for t in (await c.list_tools()).tools) == sorted(names)
    assert not any("purge" in n for n in ALL_TOOLS)


# ------------------------------------------------------------------ the file tools


async def test_each_file_tool_is_one_commit_with_its_version(store: Store) -> None:
    async with client(create_server(store)) as c:
        made = await call(c, "memory_create", path="/memory/plan.md", content="one\ntwo\n", expected_version="absent")
        assert made["version"] == await store.head()
        seen = await call(c, "memory_view", path="/memory/plan.md")
        assert (seen["kind"], seen["version"], seen["total_lines"]) == ("file", made["version"], 3)
        assert seen["text"].splitlines()[:2] == ["     1\tone", "     2\ttwo"]
        part = await call(c, "memory_view", path="/memory/plan.md", view_range=[2, 2])
        assert (part["first_line"], part["text"]) == (2, "     2\ttwo")

        v2 = (await call(c, "memory_str_replace", path="/memory/plan.md", old_str="two", new_str="2",
                         expected_version=made["version"][:7]))["version"]
        v3 = (await call(c, "memory_insert", path="/memory/plan.md", insert_line=0, insert_text="zero"))["version"]
        appended = await call(c, "memory_append", path="/memory/plan.md", content="three\n")
        assert await store.read("/memory/plan.md") == "zero\none\n2\nthree\n"
        assert appended["offset"] == len("zero\none\n2\n")
        moved = await call(c, "memory_rename", old_path="/memory", new_path="/notes")
        assert moved["paths"] == ["/notes/plan.md"]
        folder = await call(c, "memory_view", path="/")
        assert (folder["kind"], [e["path"] for e in folder["entries"]]) == ("directory", ["/notes/", "/notes/plan.md"])
        gone = await call(c, "memory_delete", path="/notes/plan.md")
        assert gone["paths"] == ["/notes/plan.md"] and gone["version"] == await store.head()

    log = await store.log()
    assert [c.message.split()[0] for c in log] == [
        "memory_delete", "memory_rename", "memory_append", "memory_insert", "memory_str_replace", "memory_create",
    ]
    assert len({made["version"], v2, v3, appended["version"]}) == 4


async def test_history_tools(store: Store) -> None:
    async with client(create_server(store, tools="all")) as c:
        v1 = (await call(c, "memory_create", path="/facts.md", content="sky: green\nsea: blue\n"))["version"]
        v2 = (await call(c, "memory_str_replace", path="/facts.md", old_str="green", new_str="blue"))["version"]

        diff = await call(c, "memory_diff", path="/facts.md")
        assert (diff["from_rev"], diff["to_rev"]) == (v1, v2)
        assert "-sky: green\n+sky: blue\n" in diff["diff"]
        whole = await call(c, "memory_diff", from_rev=v1[:8], to_rev=v2)
        assert whole["files"] == [{"path": "/facts.md", "status": "modified", "left_out": False}]

        why = await call(c, "memory_why", path="/facts.md", line=1)
        assert (why["text"], why["commit"]["id"]) == ("sky: blue", v2)
        assert why["commit"]["provenance"]["tool"] == "memory_str_replace"
        assert (await call(c, "memory_why", path="/facts.md", line=2))["commit"]["id"] == v1

        now = await call(c, "memory_search", query="blue")
        assert [(m["path"], m["line"]) for m in now["matches"]] == [("/facts.md", 1), ("/facts.md", 2)]
        then = await call(c, "memory_search", query="green", history=True)
        assert [x["id"] for x in then["commits"]] == [v2, v1]  # it disappeared in v2, appeared in v1
        assert (await call(c, "memory_search", query="blue", limit=1))["truncated"] is True

        log = await call(c, "memory_log", path="/facts.md", tool="memory_create")
        assert [x["id"] for x in log["commits"]] == [v1]
        restored = await call(c, "memory_restore", path="/facts.md", rev=v1)
        assert await store.read("/facts.md") == "sky: green\nsea: blue\n" and restored["version"] == await store.head()

        tag = await call(c, "memory_tag", name="before", rev=v2)
        assert tag == {"name": "before", "version": v2}
        branch = await call(c, "memory_branch", name="idea")
        other = store.on_branch("idea")
        try:
            await other.write("/facts.md", "sky: grey\nsea: blue\n")
        finally:
            other.close()
        await call(c, "memory_str_replace", path="/facts.md", old_str="green", new_str="red")
        clash = await call(c, "memory_merge", source="idea")
        assert clash["version"] is None and clash["conflicts"][0]["path"] == "/facts.md"
        assert "<<<<<<<" in clash["conflicts"][0]["content"]
        merged = await call(c, "memory_merge", source="idea", strategy="theirs")
        assert merged["version"] == await store.head() != branch["version"]
        assert await store.read("/facts.md") == "sky: grey\nsea: blue\n"
        reverted = await call(c, "memory_revert", rev=merged["version"])
        assert reverted["version"] == await store.head()


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_provenance_is_stamped_by_the_server(store: Store, mode: str) -> None:
    """framework, agent (the client's name and version), session and tool come from the
    server, whatever the model sends. A connection with a handshake is one session; on the
    sessionless protocol (2026-07-28) the server is (on stdio: one client, one process)."""
    server = create_server(store)
    other = Implementation(name="other", version="9")
    async with client(server, mode=mode) as a, mcp.Client(server, client_info=other, mode=mode) as b:
        await call(a, "memory_create", path="/a.md", content="a")
        await call(b, "memory_append", path="/a.md", content="b")
        await call(a, "memory_append", path="/a.md", content="c")
    third, second, first = (c.meta for c in await store.log())
    assert first["framework"] == "mcp" and first["agent"] == "test-client 1.2.3" and first["tool"] == "memory_create"
    assert second["agent"] == "other 9" and second["tool"] == "memory_append"
    assert first["session"] == third["session"]
    assert (first["session"] != second["session"]) == (mode == "legacy")


# ------------------------------------------------------------------ bad input


BAD = [
    ("memory_create", {"path": "/a\x00.md", "content": "x"}, "control character"),
    ("memory_create", {"path": "/", "content": "x"}, "File / already exists"),
    ("memory_create", {"path": "/a.md/b", "content": "x"}, "a.md"),
    ("memory_create", {"path": "/a.md", "content": "x", "expected_version": "absent"}, "already exists"),
    ("memory_create", {"path": "/a.md", "content": "x", "expected_version": "0" * 40}, "conflict: /a.md is at"),
    ("memory_create", {"path": "/a.md", "content": "x", "expected_version": "nope"}, "a version is a commit id"),
    ("memory_create", {"path": "/a.md", "content": "x" * 5000}, "over 4096 bytes"),
    ("memory_str_replace", {"path": "/a.md", "old_str": "zzz", "new_str": "y"}, "did not appear verbatim"),
    ("memory_str_replace", {"path": "/a.md", "old_str": "a", "new_str": "y"}, "Multiple occurrences"),
    ("memory_str_replace", {"path": "/missing.md", "old_str": "a", "new_str": "y"}, "does not exist"),
    ("memory_insert", {"path": "/a.md", "insert_line": 99, "insert_text": "y"}, "Invalid `insert_line`"),
    ("memory_delete", {"path": "/missing.md"}, "does not exist"),
    ("memory_rename", {"old_path": "/a.md", "new_path": "/a.md"}, "already exists"),
    ("memory_view", {"path": "/missing.md"}, "does not exist"),
    ("memory_view", {"path": "/a.md", "rev": "f" * 12}, "f" * 12),
    ("memory_view", {"path": "/a.md", "view_range": [1]}, "view_range"),
    ("memory_diff", {"path": "/a.md", "from_rev": "nosuchbranch"}, "nosuchbranch"),
    ("memory_why", {"path": "/a.md", "line": 0}, "line"),
    ("memory_why", {"path": "/missing.md", "line": 1}, "does not exist"),
    ("memory_log", {"limit": 0}, "limit"),
    ("memory_search", {"query": ""}, "query"),
    ("memory_restore", {"path": "/a.md", "rev": "deadbeef00"}, "deadbeef00"),
    ("memory_create", {"path": "/b.md"}, "invalid arguments for memory_create: content: Field required"),
    ("memory_create", {"path": "/b.md", "content": 12}, "invalid arguments for memory_create: content: Input should be a valid string"),
    ("memory_why", {"path": "/a.md", "line": 10**30}, "there is no line"),
    ("memory_merge", {"source": "nosuchbranch"}, "nosuchbranch"),
    ("memory_nope", {}, "Unknown tool"),
]


@pytest.mark.parametrize(("tool", "args", "said"), BAD, ids=[f"{t}-{n}" for n, (t, _, _) in enumerate(BAD)])
async def test_bad_input_is_one_error_line_and_nothing_is_written(store: Store, tool: str, args: dict, said: str) -> None:
    await store.write("/a.md", "a\na\n")
    head = await store.head()
    async with client(create_server(store, tools="all", max_content=4096)) as c:
        text = await fails(c, tool, **args)
        assert said in text
        assert (await call(c, "memory_view", path="/a.md"))["version"] == head  # still serving
    assert await store.head() == head


async def test_a_big_file_is_shown_in_part_and_says_so(store: Store) -> None:
    """memory_view of a 6 MB file returns at most ~64 KB of numbered lines and how many more there are."""
    await store.write("/big.md", "".join(f"line {n} " + "x" * 50 + "\n" for n in range(100_000)))
    async with client(create_server(store)) as c:
        seen = await call(c, "memory_view", path="/big.md")
        assert len(seen["text"]) < 70_000 and seen["total_lines"] == 100_001
        assert seen["text"].endswith("more lines: view_range shows them)")
        tail = await call(c, "memory_view", path="/big.md", view_range=[100_000, -1])
        assert tail["text"].startswith("100000\tline 99999 ")


async def test_a_stale_version_is_a_conflict_naming_both_versions(store: Store) -> None:
    """Two clients read the same version; the second write names the version it lost to."""
    server = create_server(store)
    async with client(server) as a, client(server) as b:
        v0 = (await call(a, "memory_create", path="/plan.md", content="draft\n"))["version"]
        seen_a = (await call(a, "memory_view", path="/plan.md"))["version"]
        seen_b = (await call(b, "memory_view", path="/plan.md"))["version"]
        assert seen_a == seen_b == v0
        v1 = (await call(a, "memory_create", path="/plan.md", content="a's plan\n", expected_version=seen_a))["version"]
        text = await fails(b, "memory_create", path="/plan.md", content="b's plan\n", expected_version=seen_b)
        assert text == f"conflict: /plan.md is at {v1}, not {v0}; nothing was written"
    assert await store.read("/plan.md") == "a's plan\n"


async def test_calls_never_block_the_event_loop(store: Store) -> None:
    """A view, an append and a search of a 40 MB file (900,000 lines) never hold the loop for long:
    the reads and the scan run in the store's worker, a big file is split into lines in a thread,
    and only what is shown is numbered (what stays on the loop is decoding the text)."""
    await store.write("/big.md", ("a line of about forty-five characters long\n" * 900_000) + "needle\n")
    async with client(create_server(store)) as c:
        await call(c, "memory_view", path="/")  # the server's own start-up, outside the measure
        with Ticker() as ticker:
            seen = await call(c, "memory_view", path="/big.md", view_range=[1, 3])
            await call(c, "memory_append", path="/big.md", content="more\n")
            found = await call(c, "memory_search", query="needle", limit=5)
    assert seen["total_lines"] == 900_002
    assert [m["line"] for m in found["matches"]] == [900_001]
    assert len(ticker.stamps) >= 2 and ticker.max_gap < 0.5, f"the loop stalled for {ticker.max_gap:.2f} s"


# ------------------------------------------------------------------ resources


async def test_resources_read_a_file_and_the_log(store: Store) -> None:
    await store.write("/memory/notes.md", "hello\n")
    async with client(create_server(store)) as c:
        templates = (await c.list_resource_templates()).resource_templates
        assert [t.uri_template for t in templates] == ["memrev://file/{+path}"]
        read = await c.read_resource("memrev://file/memory/notes.md")
        assert read.contents[0].text == "hello\n"
        log = json.loads((await c.read_resource("memrev://log")).contents[0].text)
        assert log[0]["paths"] == ["/memory/notes.md"]
        with pytest.raises(mcp.MCPError):
            await c.read_resource("memrev://file/memory/none.md")


async def test_listeners_hear_of_commits_by_another_process(store: Store, location: str) -> None:
    """A ``subscriptions/listen`` stream gets ``resources/updated`` for a file another process changed."""
    uri = "memrev://file/memory/notes.md"
    async with client(create_server(store)) as c:
        async with c.listen(resource_subscriptions=[uri]) as sub:
            child = spawn(
                "import asyncio, sys\nfrom memrev.store import Store\n"
                "async def main():\n    s = Store(sys.argv[1])\n    await s.write('/memory/notes.md', 'from afar')\n    s.close()\n"
                "asyncio.run(main())\n", location,
            )
            assert child.wait(timeout=60) == 0, child.stderr.read() if child.stderr else ""
            with anyio.fail_after(20):
                event = await sub.__anext__()
    assert str(event.uri) == uri


@pytest.mark.filterwarnings("ignore::mcp.MCPDeprecationWarning")
async def test_older_clients_subscribe_with_resources_subscribe(store: Store) -> None:
    heard: list[str] = []
    got = anyio.Event()

    async def on_message(message) -> None:
        root = getattr(message, "root", message)
        if getattr(root, "method", None) == "notifications/resources/updated":
            heard.append(str(root.params.uri))
            got.set()

    async with client(create_server(store), mode="legacy", message_handler=on_message) as c:
        assert c.server_capabilities.resources.subscribe
        await c.session.subscribe_resource("memrev://file/a.md")
        await store.write("/a.md", "x")
        with anyio.fail_after(20):
            await got.wait()
    assert heard[0] == "memrev://file/a.md"


# ------------------------------------------------------------------ real transports


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


MEMREV = [sys.executable, "-m", "memrev.cli"]


async def test_a_real_stdio_subprocess(location: str) -> None:
    params = mcp.StdioServerParameters(command=sys.executable, args=["-m", "memrev.cli", "mcp", "--store", location],
                                       env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    async with mcp.Client(params, client_info=CLIENT) as c:
        await call(c, "memory_create", path="/plan.md", content="stdio\n")
        assert (await call(c, "memory_view", path="/plan.md"))["text"].startswith("     1\tstdio")
        assert "conflict" in await fails(c, "memory_create", path="/plan.md", content="x", expected_version="0" * 40)
    async with Store(location) as s:
        (commit,) = await s.log()
        assert commit.meta["framework"] == "mcp" and commit.meta["agent"] == "test-client 1.2.3"


def _serve_http(location: str, port: int, *extra: str) -> subprocess.Popen:
    child = subprocess.Popen([*MEMREV, "mcp", "--store", location, "--http", f"127.0.0.1:{port}", *extra],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return child
        except OSError:
            if child.poll() is not None:
                raise AssertionError(child.stderr.read() if child.stderr else "memrev mcp --http exited") from None
            time.sleep(0.1)
    child.kill()
    raise AssertionError("memrev mcp --http did not listen")


async def test_real_http_with_and_without_the_token(location: str) -> None:
    port = _free_port()
    child = _serve_http(location, port, "--token", "s3cret")
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        async with httpx2.AsyncClient() as raw:
            refused = await raw.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
            assert refused.status_code == 401
            forged = await raw.post(url, json={}, headers={"Authorization": "Bearer s3cret", "Host": "evil.example:80"})
            assert forged.status_code in (400, 403, 421)
        authorized = httpx2.AsyncClient(headers={"Authorization": "Bearer s3cret"})
        async with mcp.Client(streamable_http_client(url, http_client=authorized), client_info=CLIENT) as c:
            await call(c, "memory_create", path="/web.md", content="over http\n")
            assert (await call(c, "memory_view", path="/web.md"))["total_lines"] == 2
    finally:
        child.terminate()
        child.wait(timeout=30)
    async with Store(location) as s:
        (commit,) = await s.log()
        assert commit.meta["session"]  # the HTTP session id the SDK assigned


async def test_loopback_http_needs_no_token(location: str) -> None:
    port = _free_port()
    child = _serve_http(location, port)
    try:
        async with mcp.Client(f"http://127.0.0.1:{port}/mcp", client_info=CLIENT) as c:
            await call(c, "memory_create", path="/a.md", content="a")
    finally:
        child.terminate()
        child.wait(timeout=30)


@pytest.mark.parametrize(("listen", "said"), [("0.0.0.0:8848", "wildcard"), ("10.1.2.3:8848", "needs --token"),
                                               ("localhost", "HOST:PORT")])
def test_the_cli_refuses_unsafe_binds(location: str, listen: str, said: str) -> None:
    run = subprocess.run([*MEMREV, "mcp", "--store", location, "--http", listen], capture_output=True, text=True, timeout=60)
    assert run.returncode != 0 and said in run.stderr


def test_the_cli_never_makes_a_store_beside_someone_elses_files(tmp_path: Path) -> None:
    """A folder of plain files is refused with the adopt hint (nothing created there); --read-only
    never creates a store; a new folder gets one."""
    plain = tmp_path / "notes"
    plain.mkdir()
    (plain / "a.md").write_text("mine\n")
    run = subprocess.run([*MEMREV, "mcp", "--store", str(plain)], capture_output=True, text=True, timeout=60,
                         stdin=subprocess.DEVNULL)
    assert run.returncode == 1 and "memrev adopt" in run.stderr
    assert sorted(p.name for p in plain.iterdir()) == ["a.md"]
    missing = tmp_path / "none"
    run = subprocess.run([*MEMREV, "mcp", "--read-only", "--store", str(missing)], capture_output=True, text=True,
                         timeout=60, stdin=subprocess.DEVNULL)
    assert run.returncode == 1 and "no memrev store" in run.stderr and not missing.exists()
    fresh = tmp_path / "fresh"
    run = subprocess.run([*MEMREV, "mcp", "--store", str(fresh)], capture_output=True, text=True, timeout=60,
                         stdin=subprocess.DEVNULL)
    assert run.returncode == 0 and (fresh / "memrev.db").exists()


# ------------------------------------------------------------------ lost updates


INCREMENTER = textwrap.dedent(
    """
    import asyncio, sys
    import mcp
    from memrev.mcp import create_server
    from memrev.store import Store

    async def main():
        location, n, conditional = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
        store = Store(location)
        try:
            async with mcp.Client(create_server(store)) as c:
                done = 0
                while done < n:
                    seen = (await c.call_tool("memory_view", {"path": "/counter"})).structured_content
                    value = int(seen["text"].split("\\t", 1)[1])
                    await asyncio.sleep(0.002)  # the window another writer lands in
                    args = {"path": "/counter", "content": str(value + 1)}
                    if conditional:
                        args["expected_version"] = seen["version"]
                    result = await c.call_tool("memory_create", args)
                    if result.is_error:
                        assert result.content[0].text.startswith("conflict:"), result.content[0].text
                        continue
                    done += 1
        finally:
            store.close()
        print("ok", flush=True)

    asyncio.run(main())
    """
)


async def _increments(location: str, procs: int, each: int, conditional: bool) -> tuple[int, int]:
    async with Store(location, create=True) as s:
        await s.write("/counter", "0")
        before = len(await s.log("/counter"))
    children = [spawn(INCREMENTER, location, str(each), "1" if conditional else "0") for _ in range(procs)]
    for child in children:
        out, err = child.communicate(timeout=900)
        assert child.returncode == 0 and out.strip() == "ok", err
    async with Store(location) as s:
        final = int(await s.read("/counter") or "0")
        commits = len(await s.log("/counter")) - before
        assert await s.fsck() == []
    return final, commits


async def test_no_lost_update_through_mcp_quick(tmp_path: Path) -> None:
    assert await _increments(str(tmp_path / "c"), 3, 15, conditional=True) == (45, 45)


@pytest.mark.slow
async def test_no_lost_update_through_mcp_on_sqlite(tmp_path: Path) -> None:
    """8 processes x 60 read-modify-write increments through expected_version: 480, in
    480 commits; the control (no expected_version) loses increments. (8 x 200 took 73 s on a
    loaded 2-core machine, 140 s on PostgreSQL: seven of eight attempts lose the race.)"""
    assert await _increments(str(tmp_path / "c"), 8, 60, conditional=True) == (480, 480)
    final, _ = await _increments(str(tmp_path / "control"), 8, 50, conditional=False)
    assert final < 400


@pytest.mark.slow
async def test_no_lost_update_through_mcp_on_postgresql(pg_url: str) -> None:
    assert await _increments(pg_url, 8, 60, conditional=True) == (480, 480)


def test_create_server_refuses_an_unknown_tool_set(tmp_path: Path) -> None:
    with contextlib.closing(Store(str(tmp_path / "s"), create=True)) as s:
        with pytest.raises(errors.InvalidArgument):
            create_server(s, tools="everything")  # type: ignore[arg-type]


# ------------------------------------------------------------------ docs/mcp.md's configurations

ROOT = Path(__file__).resolve().parent.parent
DOCS = (ROOT / "README.md", ROOT / "docs" / "mcp.md")  # where a server configuration is shown


def _blocks(kind: str) -> list[str]:
    out = []
    for doc in DOCS:
        for part in doc.read_text().split(f"```{kind}\n")[1:]:
            out.append(part.split("```", 1)[0])
    return out


def _doc_servers() -> list[tuple[str, list[str]]]:
    """Every way README.md and docs/mcp.md start the server: (where it is shown, argv)."""
    found = []
    for block in _blocks("sh"):
        for line in block.splitlines():
            if line.startswith("claude mcp add memrev -- "):
                found.append(("claude mcp add", line.split(" -- ", 1)[1].split()))
            elif line.startswith("memrev mcp"):
                found.append(("http", line.split()))
    for block in _blocks("json"):
        config = json.loads(block)
        for key in ("mcpServers", "servers"):
            if key in config:
                entry = config[key]["memrev"]
                found.append((key, [entry["command"], *entry["args"]]))
    return found


def test_docs_mcp_shows_every_client_configuration() -> None:
    shown = [where for where, _ in _doc_servers()]
    assert shown.count("claude mcp add") == 2 and "mcpServers" in shown and "servers" in shown and "http" in shown
    assert any("pip install 'memrev[mcp]'" in b for b in _blocks("sh"))


@pytest.mark.parametrize(("where", "argv"), _doc_servers(), ids=[w for w, _ in _doc_servers()])
async def test_each_configuration_in_docs_mcp_starts_a_working_server(tmp_path: Path, where: str, argv: list[str]) -> None:
    """The command each client configuration names (``~`` is this test's own home), run as the
    client runs it, answers the tools: over stdio, or over HTTP with the token it shows."""
    assert argv[0] == "memrev" and argv[1] == "mcp"
    env = {**os.environ, "HOME": str(tmp_path)}
    command = [*MEMREV, *argv[1:]]
    if "--http" not in argv:
        params = mcp.StdioServerParameters(command=command[0], args=command[1:], env=env)
        async with mcp.Client(params, client_info=CLIENT) as c:
            await call(c, "memory_create", path="/memory/hello.md", content="hi\n")
        assert (tmp_path / ".memrev").is_dir()  # the ~ of the config, not a folder named "~"
        return
    listen = argv[argv.index("--http") + 1]
    port = int(listen.rsplit(":", 1)[1])
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert child.poll() is None and time.monotonic() < deadline, child.stderr.read() if child.stderr else ""
                await anyio.sleep(0.1)
        token = argv[argv.index("--token") + 1] if "--token" in argv else None
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        transport = streamable_http_client(f"http://{listen}/mcp", http_client=httpx2.AsyncClient(headers=headers))
        async with mcp.Client(transport, client_info=CLIENT) as c:
            await call(c, "memory_view", path="/")
    finally:
        child.terminate()
        child.wait(timeout=30)


async def test_store_grep_is_bounded_and_typed(store: Store) -> None:
    """``Store.grep`` (what memory_search and the viewer's search share): a file or a folder, case
    folded on request, at most ``limit`` hits, PathNotFound for neither."""
    await store.write("/a/x.md", "Alpha\nbeta\nALPHA beta\n")
    await store.write("/a/y.md", "alpha\n")
    found = await store.grep("alpha", "/a")
    assert [(h.path, h.line) for h in found.hits] == [("/a/y.md", 1)] and not found.truncated
    folded = await store.grep("alpha", "/a", ignore_case=True)
    assert [(h.path, h.line) for h in folded.hits] == [("/a/x.md", 1), ("/a/x.md", 3), ("/a/y.md", 1)]
    assert (await store.grep("beta", "/a/x.md", limit=1)) == ((await store.grep("beta", "/a/x.md")).hits[:1], True)
    with pytest.raises(errors.PathNotFound):
        await store.grep("x", "/nowhere")
    with pytest.raises(errors.InvalidArgument):
        await store.grep("", "/a")


async def test_store_grep_and_a_deep_tree_run_off_the_loop(tmp_path: Path, monkeypatch) -> None:
    """``grep`` reads up to 32 MiB and a deep ``tree`` walks every folder below: both run in the
    store's worker thread, never inline on the event loop (a read at the head ran inline whenever
    the handle's lock was free at that instant). A one-folder tree stays a bounded inline read."""
    import threading

    from memrev.store import work

    where: dict[str, list[str]] = {"grep": [], "tree": []}
    real_grep, real_tree = work.grep, work.tree

    def grep_spy(*a, **k):
        where["grep"].append(threading.current_thread().name)
        return real_grep(*a, **k)

    def tree_spy(*a, **k):
        where["tree"].append(threading.current_thread().name)
        return real_tree(*a, **k)

    store = Store(str(tmp_path / "s"), create=True)  # the default poll interval: the lock is mostly free
    for k in range(8):
        await store.write(f"/big/{k}.md", "a line of about forty-five characters long\n" * 200_000)
    async with store.transaction("many small files"):
        for k in range(5_000):
            await store.write(f"/notes/{k % 50}/{k}.md", "n\n")
    monkeypatch.setattr(work, "grep", grep_spy)
    monkeypatch.setattr(work, "tree", tree_spy)
    loop_thread = threading.current_thread().name
    with Ticker() as ticker:
        for _ in range(3):  # whatever the lock's state at each call
            found = await store.grep("NEEDLE", "/", ignore_case=True)
            listed = await store.tree("/", depth=64)
    assert found.hits == [] and len([e for e in listed if e.kind == "file"]) == 5_008
    assert len(where["grep"]) == 3 and len(where["tree"]) >= 3 and loop_thread not in where["grep"] + where["tree"], where
    store.close()
    assert len(ticker.stamps) >= 3  # the loop ran meanwhile
