"""Stores and a live server for the viewer tests (issue 12).

- ``quickstart``: the store ``examples/quickstart.py`` leaves (a real AG2 agent,
  three turns), plus a tag, a branch merged back and an AutoGen memory on
  paths the quick start does not touch.
- ``hostile``: every value the viewer draws is an attack: ``<script>``,
  ``"><img src=x onerror=...>``, ``javascript:`` URLs in meta, control
  characters, a 1 MB line changed by one word.
- ``shapes`` (``build_shapes``, issue 25): a real ``TieredMemory`` that promoted chat, a
  real OpenAI Agents session forked on a branch, hostile Markdown and a hostile event log.
- ``running_viewer``: ``memrev serve`` as its own process on a free loopback port.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from autogen_core.memory import MemoryContent, MemoryMimeType

from memrev import VersionedStore
from memrev.repo.ops import Write

ROOT = Path(__file__).resolve().parents[1]
WM = "/memory/working.md"
SCRIPT = '<script>alert("script")</script>'
IMG = '"><img src=x onerror=alert("img")>'
JS_URL = 'javascript:alert("url")'
CONTROL = "bell\x07 escape\x1b[31m nul-ish\x01 del\x7f"
HOSTILE = [SCRIPT, IMG, JS_URL]
HOSTILE_PATH = f"/notes/{IMG}.md"
BIG = "/big/line.txt"


def run_async(job) -> object:
    """``asyncio.run(job())`` in its own thread: Playwright's sync API keeps a loop running in this one."""
    box: list = []
    worker = threading.Thread(target=lambda: box.append(asyncio.run(job())))
    worker.start()
    worker.join()
    if not box:
        raise RuntimeError("the store job failed (see the thread's traceback above)")
    return box[0]


def build_quickstart(state: Path) -> Path:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "quickstart.py"), str(state)],
        check=False, capture_output=True, text=True, timeout=300, cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    run_async(lambda: _extras(state))
    return state


async def _extras(state: Path) -> None:
    async with VersionedStore(state, author="sam") as store:
        await store.tag("after-chat-3")
        trial = await store.branch("trial")
        await trial.write("/artifacts/shopping.md", "# Shopping\n- chickpeas\n- tofu\n", meta={"agent": "planner"})
        await trial.write("/artifacts/shopping.md", "# Shopping\n- chickpeas\n- tofu\n- black beans\n", meta={"agent": "planner"})
        trial.close()
        await store.write("/artifacts/notes.md", "Thursday: eat out\n")
        await store.merge("trial")
        prefs = store.memory("preferences")
        await prefs.add(MemoryContent(content="Vegetarian (partner too)", mime_type=MemoryMimeType.TEXT))
        await prefs.add(MemoryContent(content="Loves spicy food", mime_type=MemoryMimeType.TEXT, metadata={"source": "chat 2"}))
        await prefs.add(MemoryContent(content={"max_minutes": 30}, mime_type=MemoryMimeType.JSON))


def huge_line(word: str) -> str:
    words = [f"w{i}" for i in range(180_000)]
    words[90_000] = word
    return " ".join(words)


def build_hostile(state: Path) -> Path:
    async def go() -> None:
        async with VersionedStore(state, author=SCRIPT) as store:
            text = "\n".join(["# notes", *HOSTILE, CONTROL, ""])
            meta = {"agent": SCRIPT, "tool": IMG, "link": JS_URL, "session": CONTROL, "nested": {"x": [SCRIPT]}}
            await store.write(HOSTILE_PATH, text, message=f"{IMG} {SCRIPT}", meta=meta)
            # memrev refuses control characters in new messages and authors; a store written
            # before that rule (or by another tool) may hold them, so this one goes in below the check.
            changed = text.replace("# notes", f"# notes {JS_URL}").encode()
            evil_author = f"{SCRIPT}{CONTROL}"
            store.repo.commit(store.branch_name, [Write(HOSTILE_PATH, changed)], author=evil_author, message=CONTROL, meta=meta)
            await store.write(BIG, huge_line("before") + "\n", message="a 1 MB line")
            await store.write(BIG, huge_line("after") + "\n", message="one word of it changed")
            await store.write(WM, f"- {SCRIPT}\n- {IMG}\n", message=SCRIPT, meta=meta)
            mem = store.memory("evil")
            await mem.add(MemoryContent(content=SCRIPT, mime_type=MemoryMimeType.TEXT, metadata={"href": JS_URL, "img": IMG}))
            await store.tag("v1")

    run_async(go)
    return state


HOSTILE_MD = "\n".join([
    "# Notes <script>alert('md')</script>",
    "",
    "[click](javascript:alert('link')) [far](https://example.com/x) [near](other.md#L2)",
    "",
    "<img src=x onerror=alert('raw')> <iframe src='https://example.com'></iframe>",
    "",
    "![remote](https://example.com/track.png) ![local](pic.png)",
    "",
    "x" * 50_000,
    "",
])
SESSION = "sess-<b>1</b>"  # a session id is hostile text too
HOSTILE_EVENTS = "\n".join([
    json.dumps({"type": "ag2.events.input_events.ModelRequest", "data": {"parts": [{"content": f"please {SCRIPT}"}]}}),
    "not json at all <img src=x onerror=alert(1)>",
    json.dumps({"type": "ag2.events.types.ModelResponse", "data": {"message": {"content": "ok <b>bold</b>"}}}),
    json.dumps({"type": "ag2.events.tool_events.ToolCallEvent", "data": {"name": "knowledge", "arguments": "{\"path\": \"/x\"}"}}),
    json.dumps({"type": "<script>", "data": {}}),
    "[" * 100_000,
    "",
])
EVENT_LOG = "/log/hostile.jsonl"


def build_shapes(state: Path) -> Path:
    """A TieredMemory that promoted chat, an OpenAI session forked on a branch, hostile Markdown and an event log."""
    from autogen_core.model_context import UnboundedChatCompletionContext
    from autogen_core.models import AssistantMessage, UserMessage
    from autogen_ext.models.replay import ReplayChatCompletionClient

    from memrev.frameworks.tiered import TieredMemory

    async def go() -> None:
        async with VersionedStore(state, author="tester") as store:
            summarizer = ReplayChatCompletionClient(["Sam asked about curry and tacos", "long summary"])
            tiered = TieredMemory(store, "assistant", summarizer, context_capacity=4, short_term_capacity=10, keep_ratio=0.5)
            from autogen_core.memory import MemoryContent, MemoryMimeType

            await tiered.add(MemoryContent(content="Sam is vegetarian", mime_type=MemoryMimeType.TEXT))
            context = UnboundedChatCompletionContext()
            for i in range(3):
                await context.add_message(UserMessage(content=f"question {i}", source="user"))
                await context.add_message(AssistantMessage(content=f"answer {i}", source="bot"))
            await tiered.update_context(context)  # 6 messages > 4: the oldest are promoted

            session = store.session("chat-42")
            await session.add_items([
                {"role": "user", "content": "What should I cook tonight?"},
                {"type": "function_call", "name": "lookup", "arguments": "{\"q\": \"recipes\"}", "call_id": "c1"},
                {"type": "function_call_output", "call_id": "c1", "output": "curry, tacos"},
                {"role": "assistant", "content": [{"type": "output_text", "text": "Try the chickpea curry."}]},
            ])
            fork = await session.branch("try-tacos")
            await fork.add_items([{"role": "user", "content": "Tacos instead?"}])
            fork.close()

            with_turn = {"session": SESSION, "turn": 1, "agent": "chef"}
            await store.write("/notes/pic.png", "a store holds text: an image link to it loads it, as text/plain")
            await store.write("/notes/hostile.md", HOSTILE_MD, meta=with_turn)
            await store.write(EVENT_LOG, HOSTILE_EVENTS, meta=with_turn)

    run_async(go)
    return state


@pytest.fixture(scope="session")
def quickstart_store(tmp_path_factory) -> Path:
    return build_quickstart(tmp_path_factory.mktemp("viewer") / "quickstart")


@pytest.fixture(scope="session")
def hostile_store(tmp_path_factory) -> Path:
    return build_hostile(tmp_path_factory.mktemp("viewer") / "hostile")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def running_viewer(store: Path, *extra: str, token: str | None = None) -> Iterator[str]:
    """``memrev serve`` in a child process; yields its base URL, stops it after."""
    port = free_port()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]))
    env.pop("MEMREV_TOKEN", None)
    args = [sys.executable, "-m", "memrev.cli", "--store", str(store), "serve", "--port", str(port), *extra]
    if token:
        args += ["--token", token]
    proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base = f"http://localhost:{port}"
    try:
        _wait_until_up(proc, base, token)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wait_until_up(proc: subprocess.Popen, base: str, token: str | None) -> None:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    deadline = time.monotonic() + 60  # a readiness wait, not a speed assertion
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"memrev serve exited with {proc.returncode}: {proc.stdout.read()}")
        try:
            with urllib.request.urlopen(urllib.request.Request(base + "/api", headers=headers), timeout=5):
                return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.2)
    raise RuntimeError("memrev serve did not start")
