"""``VersionedStore`` as an AutoGen ``Memory`` (``memrev.autogen``).

* AutoGen's own ``ListMemory`` tests, ported to the named memory;
* differential tests against ``ListMemory`` on random add/clear/query
  sequences (same results, same model-context messages);
* what memrev adds: item paths and numbering, one commit per add/clear/delete,
  ranked queries, queries as of a past revision, ``delete(item_id)``,
  component round trip, errors that write nothing, ``close()`` both ways.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import math
import re
import tempfile
import warnings
from pathlib import Path

import pytest
from autogen_core import ComponentModel, Image
from autogen_core._component_config import is_component_instance
from autogen_core.memory import (
    ListMemory,
    Memory,
    MemoryContent,
    MemoryMimeType,
    MemoryQueryResult,
    UpdateContextResult,
)
from autogen_core.model_context import BufferedChatCompletionContext, UnboundedChatCompletionContext
from autogen_core.models import SystemMessage
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image as PILImage

import memrev
from memrev import VersionedStore
from memrev.autogen import (
    InvalidMemoryContent,
    MemoryItemError,
    MemoryItemNotFound,
    VersionedMemory,
    bm25_scores,
    item_name,
)

pytestmark = pytest.mark.anyio

TEXT = MemoryMimeType.TEXT
JSON = MemoryMimeType.JSON


@pytest.fixture
def store(tmp_path):
    s = VersionedStore(tmp_path / "store")
    yield s
    s.close()


def text(content: str, **metadata) -> MemoryContent:
    return MemoryContent(content=content, mime_type=TEXT, metadata=metadata or None)


def png(color: tuple[int, int, int], size: tuple[int, int] = (3, 2)) -> Image:
    return Image.from_pil(PILImage.new("RGB", size, color))


def canon(item: MemoryContent) -> tuple:
    """Exact identity of a MemoryContent: Python types included, images by pixels."""
    c = item.content
    body = ("image", c.to_base64()) if isinstance(c, Image) else (type(c).__name__, c)
    mime = item.mime_type
    return body, type(mime).__name__, mime, json.dumps(item.metadata, sort_keys=True)


def canon_all(items) -> list[tuple]:
    return [canon(i) for i in items]


def listmemory_text(contents: list) -> str:
    """The SystemMessage text ListMemory builds (autogen_core/memory/_list_memory.py)."""
    lines = [f"{i}. {c}" for i, c in enumerate(contents, 1)]
    return "\nRelevant memory content (in chronological order):\n" + "\n".join(lines) + "\n"


# ==========================================================================
# AutoGen's ListMemory tests, ported
# ==========================================================================


async def test_protocol_attributes(store):
    view = store.memory("user")
    for memory in (store, view):
        assert isinstance(memory, Memory)
        assert is_component_instance(memory)
        for attr in ("update_context", "query", "add", "clear", "close", "dump_component"):
            assert callable(getattr(memory, attr)), attr
    assert view.name == "user"
    assert store.memory().name == "default"
    assert view.store is store and view.prefix == "/autogen" and view.path == "/autogen/user"
    # the KnowledgeStore surface is untouched
    for attr in ("read", "write", "list", "delete", "exists", "append", "read_range", "on_change"):
        assert callable(getattr(store, attr)), attr


async def test_empty_memory(store):
    memory = store.memory("user")
    context = BufferedChatCompletionContext(buffer_size=3)
    result = await memory.update_context(context)
    assert isinstance(result, UpdateContextResult)
    assert result.memories.results == []
    assert await context.get_messages() == []
    query = await memory.query(MemoryContent(content="test", mime_type=TEXT))
    assert isinstance(query, MemoryQueryResult) and query.results == []
    assert await store.log() == []  # reading wrote nothing


async def test_add_and_query(store):
    memory = store.memory("user")
    await memory.add(MemoryContent(content="test1", mime_type=TEXT))
    await memory.add(MemoryContent(content={"key": "value"}, mime_type=JSON))
    results = (await memory.query(MemoryContent(content="query", mime_type=TEXT))).results
    assert len(results) == 2
    assert results[0].content == "test1"
    assert results[1].content == {"key": "value"}
    assert (await memory.query()).results == results
    assert (await memory.query("anything at all")).results == results  # the query text is ignored by default


async def test_update_context_adds_one_system_message_with_all_items(store):
    memory = store.memory("user")
    items = [text("test1"), text("test2"), MemoryContent(content={"k": [1, 2]}, mime_type=JSON)]
    for item in items:
        await memory.add(item)
    context = BufferedChatCompletionContext(buffer_size=3)
    result = await memory.update_context(context)
    messages = await context.get_messages()
    assert len(result.memories.results) == 3
    assert canon_all(result.memories.results) == canon_all(items)
    assert len(messages) == 1 and isinstance(messages[0], SystemMessage)
    assert messages[0].content == listmemory_text(["test1", "test2", {"k": [1, 2]}])
    # byte for byte what ListMemory produces
    oracle, oracle_context = ListMemory(), BufferedChatCompletionContext(buffer_size=3)
    for item in items:
        await oracle.add(item)
    await oracle.update_context(oracle_context)
    assert messages == await oracle_context.get_messages()


async def test_clear(store):
    memory = store.memory("user")
    await memory.add(text("test"))
    await memory.add(text("test 2"))
    before = await store.log()
    await memory.clear()
    assert (await memory.query(MemoryContent(content="query", mime_type=TEXT))).results == []
    after = await store.log()
    assert len(after) == len(before) + 1  # one tombstone commit
    clear_commit = after[0]
    assert clear_commit.paths == (memory.item_path(1), memory.item_path(2))
    # the items are gone from the head, not from history
    assert await store.read(memory.item_path(1)) is None
    assert [c.content for c in (await memory.query(rev=clear_commit.parents[0])).results] == ["test", "test 2"]
    # clearing an empty memory changes nothing, so it makes no commit
    await memory.clear()
    assert len(await store.log()) == len(after)


async def test_content_types_round_trip_exactly(store, tmp_path):
    memory = store.memory("user")
    image = png((200, 30, 90))
    items = [
        MemoryContent(content="text", mime_type=TEXT),
        MemoryContent(content={"key": "value", "n": [1, 2.5, None, True, {"deep": "er"}]}, mime_type=JSON),
        MemoryContent(content=b"binary\x00\xff", mime_type=MemoryMimeType.BINARY),
        MemoryContent(content=image, mime_type=MemoryMimeType.IMAGE),
        MemoryContent(content="# Title", mime_type=MemoryMimeType.MARKDOWN, metadata={"source": "notes"}),
        # a str mime type that equals an enum value stays a str
        MemoryContent(content="plain", mime_type="text/plain", metadata={}),
        MemoryContent(content=b"\x89PNG...", mime_type="image/png", metadata={"nested": {"a": [1, {"b": None}]}}),
        MemoryContent(content='{"a": 1}', mime_type="application/json"),
        MemoryContent(content={"z": 1, "a": 2}, mime_type="application/ld+json"),  # key order kept
        MemoryContent(content="with params", mime_type="text/plain; charset=utf-8"),
        MemoryContent(content="emoji 🦜, accents é, NUL \x00, lone surrogate \ud800", mime_type=TEXT),
    ]
    for item in items:
        await memory.add(item)
    results = (await memory.query(items[0])).results
    assert canon_all(results) == canon_all(items)
    assert [type(r.content) for r in results] == [str, dict, bytes, Image, str, str, bytes, str, dict, str, str]
    assert results[2].content == b"binary\x00\xff"
    assert results[3].content.to_base64() == image.to_base64()
    assert results[3].content.image.size == (3, 2)
    assert results[5].mime_type == "text/plain" and not isinstance(results[5].mime_type, MemoryMimeType)
    assert results[0].mime_type is MemoryMimeType.TEXT
    assert list(results[8].content) == ["z", "a"]
    assert results[5].metadata == {} and results[0].metadata is None
    # and so does a new handle on the store
    async with VersionedStore(tmp_path / "store") as again:
        assert canon_all((await again.memory("user").query()).results) == canon_all(items)


async def test_component_round_trip(store, tmp_path):
    memory = store.memory("user", prefix="/agents/memories")
    await memory.add(text("likes tea"))
    dumped = memory.dump_component()
    assert dumped.provider == "memrev.autogen.VersionedMemory"
    assert dumped.component_type == "memory"
    assert dumped.config == {
        "location": str((tmp_path / "store").resolve()),
        "branch": "main",
        "name": "user",
        "prefix": "/agents/memories",
        "author": "memrev",
    }
    # through JSON, as a config file would
    loaded = Memory.load_component(json.loads(dumped.model_dump_json()))
    try:
        assert isinstance(loaded, VersionedMemory)
        assert (loaded.name, loaded.prefix, loaded.branch) == ("user", "/agents/memories", "main")
        assert loaded.store is not store  # its own handle on the same store
        assert [c.content for c in (await loaded.query()).results] == ["likes tea"]
        await loaded.add(text("likes jazz"))
        assert [c.content for c in (await memory.query()).results] == ["likes tea", "likes jazz"]
        assert loaded.dump_component() == dumped
    finally:
        await loaded.close()
    # the loaded memory owned its handle and closed it; ours is still open
    with pytest.raises(memrev.StoreClosed):
        await loaded.store.read("/x")
    assert len((await memory.query()).results) == 2

    # the store itself dumps as its default memory
    await store.add(text("default item"))
    as_memory = Memory.load_component(ComponentModel.model_validate(store.dump_component().model_dump()))
    try:
        assert isinstance(as_memory, VersionedMemory) and as_memory.name == "default"
        assert [c.content for c in (await as_memory.query()).results] == ["default item"]
    finally:
        as_memory.close()


async def test_component_config_keeps_branch_and_author(tmp_path):
    async with VersionedStore(tmp_path / "s", branch="experiment", author="alice") as store:
        memory = store.memory("notes")
        await memory.add(text("on a branch"))
        config = memory.dump_component()
        loaded = Memory.load_component(config)
        try:
            assert loaded.branch == "experiment"
            await loaded.add(text("from the loaded one"))
            (commit, *_) = await store.log()
            assert commit.author == "alice"
            with pytest.raises(memrev.RevisionNotFound):
                await store.log(rev="main")  # nothing went to main
        finally:
            await loaded.close()
        assert [c.content for c in (await memory.query()).results] == ["on a branch", "from the loaded one"]


async def test_relative_location_is_dumped_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    async with VersionedStore("rel-store") as store:
        await store.memory("m").add(text("x"))
        config = store.memory("m").dump_component()
    assert config.config["location"] == str(tmp_path / "rel-store")
    monkeypatch.chdir("/")
    loaded = Memory.load_component(config)
    try:
        assert [c.content for c in (await loaded.query()).results] == ["x"]
    finally:
        loaded.close()


# ==========================================================================
# Layout, numbering, history
# ==========================================================================


def test_item_names_sort_numerically_across_widths():
    numbers = [1, 2, 9, 10, 11, 99, 100, 999, 1000, 1001, 99_999, 100_000, 999_999, 1_000_000, 1_000_001,
               123_456_789, 10**12 - 1]  # fmt: skip
    names = [item_name(n) for n in numbers]
    assert sorted(names) == names
    assert len({len(n) for n in names}) == 1
    assert item_name(3) == "000000000003.json"


async def test_layout_and_one_commit_per_add(store):
    memory = store.memory("user")
    contents = [f"fact {i}" for i in range(1, 13)]  # past 10
    for i, c in enumerate(contents, 1):
        assert await memory.add(text(c)) == i
    names = await store.list("/autogen/user/items")
    assert names == [f"{i:012d}.json" for i in range(1, 13)]
    assert await store.list("/autogen/user") == ["items/", "last-id"]
    assert await store.read("/autogen/user/last-id") == "12\n"
    assert [c.content for c in (await memory.query()).results] == contents
    log = await store.log()
    assert len(log) == 12
    for i, commit in enumerate(reversed(log), 1):
        assert commit.paths == (f"/autogen/user/items/{i:012d}.json", "/autogen/user/last-id")
        assert commit.message == f"memory 'user': add item {i} (text/plain)"
        assert commit.meta == {"autogen": {"memory": "user", "op": "add", "items": [i]}, "framework": "autogen"}
    # the item file is readable JSON, and has its own one-commit history
    doc = json.loads(await store.read(memory.item_path(3)))
    assert doc == {
        "memrev_item": 1,
        "type": "str",
        "mime_type": "text/plain",
        "mime_type_enum": True,
        "metadata": None,
        "content": "fact 3",
    }
    assert [c.id for c in await store.log(memory.item_path(3))] == [log[-3].id]
    assert [item.id for item in await memory.items()] == list(range(1, 13))


@pytest.mark.parametrize("start", [998, 999_998])
async def test_numbering_past_1000_and_1000000(store, start):
    """Seed the counter instead of making a million commits: the real add path crosses the boundary."""
    memory = store.memory("big")
    await memory.add(text("first"))
    await store.write("/autogen/big/last-id", f"{start}\n")
    ids = [await memory.add(text(f"item {n}")) for n in range(4)]
    assert ids == [start + 1, start + 2, start + 3, start + 4]
    assert [c.content for c in (await memory.query()).results] == ["first", "item 0", "item 1", "item 2", "item 3"]
    assert [i.id for i in await memory.items()] == [1, *ids]


async def test_numbers_are_never_reused(store):
    memory = store.memory("user")
    for c in ("a", "b", "c"):
        await memory.add(text(c))
    await memory.delete(3)
    assert await memory.add(text("d")) == 4  # not 3 again
    await memory.clear()
    assert await memory.add(text("e")) == 5
    assert [(i.id, i.content.content) for i in await memory.items()] == [(5, "e")]
    # item 1's history: added, then cleared; still readable as of its add
    added, cleared = reversed(await store.log(memory.item_path(1)))
    assert cleared.message.startswith("memory 'user': clear 3 items (1, 2, 4)")
    assert json.loads(await store.read(memory.item_path(1), rev=added.id))["content"] == "a"
    # even a counter wound back by hand never makes add() overwrite a live item
    await store.write("/autogen/user/last-id", "4\n")
    assert await memory.add(text("f")) == 6  # 5 is live
    assert [(i.id, i.content.content) for i in await memory.items()] == [(5, "e"), (6, "f")]


async def test_counter_missing_falls_back_to_the_items(store):
    memory = store.memory("user")
    await memory.add(text("a"))
    await memory.add(text("b"))
    await store.delete("/autogen/user/last-id")
    assert await memory.add(text("c")) == 3


async def test_named_memories_and_ag2_files_share_one_history(store):
    user, team = store.memory("user"), store.memory("team")
    await store.write("/memory/working.md", "# Working memory\n")
    await user.add(text("user 1"))
    await team.add(text("team 1"))
    await store.add(text("default 1"))
    await user.add(text("user 2"))
    assert [c.content for c in (await user.query()).results] == ["user 1", "user 2"]
    assert [c.content for c in (await team.query()).results] == ["team 1"]
    assert [c.content for c in (await store.query()).results] == ["default 1"]
    assert [c.content for c in (await store.memory().query()).results] == ["default 1"]
    assert [c.message for c in await store.log()] == [
        "memory 'user': add item 2 (text/plain)",
        "memory 'default': add item 1 (text/plain)",
        "memory 'team': add item 1 (text/plain)",
        "memory 'user': add item 1 (text/plain)",
        "write /memory/working.md",
    ]
    assert [c.message for c in await user.log()] == [
        "memory 'user': add item 2 (text/plain)",
        "memory 'user': add item 1 (text/plain)",
    ]
    assert await store.list("/autogen") == ["default/", "team/", "user/"]
    # clearing one memory leaves the others alone
    await team.clear()
    assert len((await user.query()).results) == 2 and (await team.query()).results == []


async def test_adds_inside_a_transaction_are_one_commit(store):
    memory = store.memory("user")
    async with store.transaction(message="onboarding"):
        assert await memory.add(text("a")) == 1
        assert await memory.add(text("b")) == 2
        await store.write("/notes.md", "hi\n")
    (commit,) = await store.log()
    assert commit.message == "onboarding"
    assert [c.content for c in (await memory.query()).results] == ["a", "b"]


async def test_concurrent_adds_get_distinct_ids(store):
    """Tasks adding at once (through several views) never pick the same number."""
    views = [store.memory("user") for _ in range(3)]
    ids = await asyncio.gather(*(views[i % 3].add(text(f"item {i}")) for i in range(30)))
    assert sorted(ids) == list(range(1, 31))
    by_id = {i: f"item {n}" for n, i in enumerate(ids)}
    assert [(i.id, i.content.content) for i in await views[0].items()] == sorted(by_id.items())
    assert len(await store.log()) == 30


async def test_on_change_sees_memory_commits(store):
    seen: list[str] = []

    async def record(path: str) -> None:
        seen.append(path)

    sub = await store.on_change("/autogen/user/items", record)
    try:
        memory = store.memory("user")
        await memory.add(text("a"))
        await memory.add(text("b"))
        await memory.delete(1)
        await memory.clear()
        await store.memory("other").add(text("c"))
    finally:
        await sub.close()
    one, two = memory.item_path(1), memory.item_path(2)
    assert seen == [one, two, one, two]


async def test_views_and_prefix_validation(store):
    for bad in ("", "a/b", "..", ".", "tab\there"):
        with pytest.raises(memrev.InvalidPath):
            store.memory(bad)
    with pytest.raises(TypeError, match="memory name must be str"):
        store.memory(3)
    with pytest.raises(ValueError):
        store.memory("ok", prefix="/a/../b")
    assert store.memory("m", prefix="custom//place/").path == "/custom/place/m"
    root = store.memory("m", prefix="/")
    await root.add(text("x"))
    assert await store.list("/m/items") == ["000000000001.json"]


async def test_foreign_files_in_the_items_folder(store):
    memory = store.memory("user")
    await memory.add(text("a"))
    await store.write("/autogen/user/items/README.md", "not an item\n")
    assert [c.content for c in (await memory.query()).results] == ["a"]  # ignored
    await store.write(memory.item_path(2), "garbage")
    with pytest.raises(MemoryItemError, match="000000000002.json"):
        await memory.query()


# ==========================================================================
# Beyond ListMemory
# ==========================================================================


async def test_ranked_query(store):
    memory = store.memory("food")
    items = [
        text("The user likes pizza with extra cheese", topic="food"),
        text("The user's dog is called Pixel"),
        MemoryContent(content={"favourite": "pizza margherita", "pizza": "always"}, mime_type=JSON),
        text("Meeting on Tuesday about the quarterly report"),
        MemoryContent(content=b"pizza pizza pizza", mime_type=MemoryMimeType.BINARY),  # bytes have no words
    ]
    for item in items:
        await memory.add(item)

    ranked = (await memory.query("pizza?", k=10)).results
    assert [r.content for r in ranked] == [items[2].content, items[0].content]
    scores = [r.metadata["score"] for r in ranked]
    assert all(type(s) is float and s > 0 for s in scores)
    assert scores == sorted(scores, reverse=True)
    assert ranked[1].metadata == {"topic": "food", "score": scores[1]}  # original metadata kept
    assert ranked[1].mime_type is TEXT

    assert [r.content for r in (await memory.query("PIZZA", k=1)).results] == [items[2].content]
    assert (await memory.query("pizza", score_threshold=scores[0] + 1)).results == []
    by_threshold = (await memory.query("pizza", score_threshold=scores[1])).results
    assert len(by_threshold) == 2
    assert (await memory.query("sushi", k=3)).results == []
    assert (await memory.query("", k=3)).results == []
    as_content = (await memory.query(MemoryContent(content="dog called", mime_type=TEXT), k=2)).results
    assert [r.content for r in as_content] == [items[1].content]

    # the default is untouched: every item, stored metadata exactly, no score
    default = (await memory.query("pizza")).results
    assert canon_all(default) == canon_all(items)
    assert (await memory.query("pizza")).results[0].metadata == {"topic": "food"}

    with pytest.raises(ValueError):
        await memory.query("pizza", k=0)
    with pytest.raises(TypeError):
        await memory.query("pizza", top_k=3)
    with pytest.raises(TypeError):
        await memory.query("pizza", score_threshold="high")


def test_bm25_matches_the_formula():
    docs = ["apple banana apple", "banana cherry", "cherry cherry cherry durian", ""]
    n, avgdl, k1, b = 4, (3 + 2 + 4 + 0) / 4, 1.2, 0.75

    def term(tf, df, length):
        idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
        return idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * length / avgdl))

    got = bm25_scores("Apple cherry apple", docs)
    expected = [term(2, 1, 3), term(1, 2, 2), term(3, 2, 4), 0.0]
    assert got == pytest.approx(expected)
    assert bm25_scores("", docs) == [0.0] * 4
    assert bm25_scores("x", []) == []
    # Lucene's IDF stays positive even in a memory of one or two items
    assert bm25_scores("apple", ["apple pie"])[0] > 0
    assert all(s > 0 for s in bm25_scores("tea", ["tea", "tea time"]))


async def test_query_as_of_a_past_revision(store):
    memory = store.memory("user")
    await memory.add(text("a"))
    await memory.add(text("b"))
    await memory.clear()
    await memory.add(text("c"))
    await store.write("/unrelated.md", "x")
    log = await store.log()
    at = {c.message: c.id for c in log}
    assert [r.content for r in (await memory.query(rev=at["memory 'user': add item 1 (text/plain)"])).results] == ["a"]
    assert [r.content for r in (await memory.query(rev=at["memory 'user': add item 2 (text/plain)"])).results] == [
        "a",
        "b",
    ]
    assert (await memory.query(rev="HEAD~2")).results == []  # right after the clear
    assert [r.content for r in (await memory.query(rev="HEAD")).results] == ["c"]
    assert [r.content for r in (await memory.query("a", k=5, rev="HEAD~3")).results] == ["a"]
    assert [i.id for i in await memory.items(rev="HEAD~3")] == [1, 2]
    with pytest.raises(memrev.RevisionNotFound):
        await memory.query(rev="no-such-rev")


async def test_delete_one_item(store):
    memory = store.memory("user")
    for c in ("a", "b", "c"):
        await memory.add(text(c))
    commits = len(await store.log())
    await memory.delete(2)
    (commit, *_) = await store.log()
    assert len(await store.log()) == commits + 1
    assert commit.paths == (memory.item_path(2),)
    assert commit.message == "memory 'user': delete item 2"
    assert commit.meta == {"autogen": {"memory": "user", "op": "delete", "items": [2]}, "framework": "autogen"}
    assert [r.content for r in (await memory.query()).results] == ["a", "c"]
    assert [r.content for r in (await memory.query(rev="HEAD~1")).results] == ["a", "b", "c"]
    await memory.delete("000000000003")  # ids as strings too
    await memory.delete("1")
    assert (await memory.query()).results == []

    commits = len(await store.log())
    with pytest.raises(MemoryItemNotFound) as info:
        await memory.delete(2)
    assert isinstance(info.value, KeyError) and "no item 2" in str(info.value)
    for bad, exc in ((0, ValueError), (-1, ValueError), ("x1", ValueError), (1.0, TypeError), (True, TypeError)):
        with pytest.raises(exc):
            await memory.delete(bad)
    assert len(await store.log()) == commits
    # the store's own delete is still the KnowledgeStore one
    await store.delete("/autogen/user")
    assert await store.list("/autogen") == []


# ==========================================================================
# Errors write nothing
# ==========================================================================


def _bad_contents():
    yield "not a MemoryContent", "plain str"
    yield "int content", MemoryContent.model_construct(content=42, mime_type=TEXT, metadata=None)
    yield "bytearray content", MemoryContent.model_construct(content=bytearray(b"x"), mime_type="application/x")
    yield "tuple in dict", MemoryContent(content={"a": (1, 2)}, mime_type=JSON)
    yield "nan in dict", MemoryContent(content={"a": float("nan")}, mime_type=JSON)
    yield "int key", MemoryContent.model_construct(content={1: "a"}, mime_type=JSON, metadata=None)
    yield "date in metadata", MemoryContent(content="x", mime_type=TEXT, metadata={"when": datetime.date(2024, 1, 1)})
    yield "metadata not a dict", MemoryContent.model_construct(content="x", mime_type=TEXT, metadata=["a"])
    yield "mime not a type", MemoryContent(content="x", mime_type="nonsense")
    yield "mime empty", MemoryContent(content="x", mime_type="")
    yield "mime with a newline", MemoryContent(content="x", mime_type="text/plain; a=\nfake log line")
    yield "mime of wrong type", MemoryContent.model_construct(content="x", mime_type=3, metadata=None)
    yield "str as image", MemoryContent(content="x", mime_type=MemoryMimeType.IMAGE)
    yield "str as binary", MemoryContent(content="x", mime_type=MemoryMimeType.BINARY)
    yield "str as JSON but not JSON", MemoryContent(content="hello", mime_type=JSON)
    yield "dict as text", MemoryContent(content={"a": 1}, mime_type=TEXT)
    yield "bytes as text", MemoryContent(content=b"x", mime_type=TEXT)
    yield "bytes as JSON", MemoryContent(content=b"{}", mime_type="application/json")
    yield "image as text", MemoryContent(content=png((1, 2, 3)), mime_type=TEXT)
    yield "image as binary", MemoryContent(content=png((1, 2, 3)), mime_type=MemoryMimeType.BINARY)


@pytest.mark.parametrize("label,bad", list(_bad_contents()), ids=[label for label, _ in _bad_contents()])
async def test_bad_content_is_refused_and_writes_nothing(store, label, bad):
    memory = store.memory("user")
    await memory.add(text("ok"))
    before = await store.log()
    with pytest.raises(InvalidMemoryContent) as info:
        await memory.add(bad)
    err = info.value
    assert isinstance(err, memrev.InvalidContent) and isinstance(err, TypeError) and isinstance(err, ValueError)
    assert str(err)
    assert await store.log() == before
    assert await store.read("/autogen/user/last-id") == "1\n"
    assert len((await memory.query()).results) == 1


async def test_closed_store_and_closed_view(tmp_path):
    store = VersionedStore(tmp_path / "s")
    memory = store.memory("user")
    await memory.add(text("a"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "coroutine was never awaited"
        result = store.close()  # the AG2 way: sync
        await store.close()  # the AutoGen way: awaited; idempotent
        await result  # the sync call's result is awaitable too
        store.close()
    for call in (
        lambda: memory.add(text("b")),
        lambda: memory.query(),
        lambda: memory.update_context(UnboundedChatCompletionContext()),
        lambda: memory.clear(),
        lambda: memory.delete(1),
        lambda: store.add(text("b")),
        lambda: store.query(),
    ):
        with pytest.raises(memrev.StoreClosed):
            await call()

    async with VersionedStore(tmp_path / "s") as reopened:
        assert [c.content for c in (await reopened.memory("user").query()).results] == ["a"]
        view = reopened.memory("user")
        await view.close()
        view.close()
        with pytest.raises(memrev.StoreClosed, match="memory 'user' is closed"):
            await view.add(text("b"))
        # a view that did not open the store leaves it open
        assert await reopened.memory("user").add(text("b")) == 2
        assert len(await reopened.log()) == 2


async def test_view_owning_its_store(tmp_path):
    own = VersionedMemory(tmp_path / "s", "user", author="bob")
    await own.add(text("a"))
    assert (await own.store.log())[0].author == "bob"
    await own.close()
    await own.close()
    with pytest.raises(memrev.StoreClosed):
        await own.store.read("/")
    with pytest.raises(TypeError):
        VersionedMemory(VersionedStore(tmp_path / "s"), "user", branch="x")
    with pytest.raises(TypeError):
        VersionedMemory(42)  # type: ignore[arg-type]


# ==========================================================================
# Differential: VersionedMemory vs ListMemory on random sequences
# ==========================================================================

_json_scalar = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=8)
)
_json = st.recursive(
    _json_scalar,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
_metadata = st.none() | st.dictionaries(st.text(max_size=5), _json, max_size=3)
_text_content = st.builds(
    MemoryContent,
    content=st.text(max_size=30),
    mime_type=st.sampled_from([TEXT, MemoryMimeType.MARKDOWN, "text/plain", "text/x-note"]),
    metadata=_metadata,
)
_dict_content = st.builds(
    MemoryContent,
    content=st.dictionaries(st.text(max_size=5), _json, max_size=4),
    mime_type=st.sampled_from([JSON, "application/json", "application/vnd.memo+json"]),
    metadata=_metadata,
)
_bytes_content = st.builds(
    MemoryContent,
    content=st.binary(max_size=20),
    mime_type=st.sampled_from([MemoryMimeType.BINARY, "application/octet-stream", "image/png"]),
    metadata=_metadata,
)
_image_content = st.builds(
    MemoryContent,
    content=st.tuples(st.integers(0, 255), st.integers(0, 255), st.integers(0, 255)).map(png),
    mime_type=st.sampled_from([MemoryMimeType.IMAGE, "image/png"]),
    metadata=st.none(),
)
_op = st.one_of(
    st.tuples(st.just("add"), st.one_of(_text_content, _dict_content, _bytes_content))
    | st.tuples(st.just("add"), _image_content),
    st.tuples(st.just("add"), _text_content),
    st.tuples(st.just("clear")),
    st.tuples(st.just("query"), st.text(max_size=10)),
    st.tuples(st.just("context")),
)

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+>")


def _messages_text(messages) -> list[tuple[str, str]]:
    """Messages as (type, content); an Image's str() holds its id(), which differs."""
    return [(type(m).__name__, _ADDRESS.sub(" at 0x…>", m.content)) for m in messages]


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(_op, min_size=1, max_size=14), use_store=st.booleans())
async def test_random_sequences_match_list_memory(ops, use_store):
    oracle = ListMemory(name="user")
    with tempfile.TemporaryDirectory() as tmp:
        store = VersionedStore(Path(tmp) / "s")
        try:
            memory = store if use_store else store.memory("user")
            oracle_ctx, memory_ctx = BufferedChatCompletionContext(buffer_size=4), BufferedChatCompletionContext(
                buffer_size=4
            )
            commits = 0
            for op in ops:
                if op[0] == "add":
                    assert await oracle.add(op[1]) is None
                    await memory.add(op[1])
                    commits += 1
                elif op[0] == "clear":
                    had_items = bool(oracle.content)
                    await oracle.clear()
                    await memory.clear()
                    commits += had_items
                elif op[0] == "query":
                    expected = (await oracle.query(op[1])).results
                    got = (await memory.query(op[1])).results
                    assert canon_all(got) == canon_all(expected)
                else:
                    expected = await oracle.update_context(oracle_ctx)
                    got = await memory.update_context(memory_ctx)
                    assert canon_all(got.memories.results) == canon_all(expected.memories.results)
                    assert _messages_text(await memory_ctx.get_messages()) == _messages_text(
                        await oracle_ctx.get_messages()
                    )
                # after every step: same items, same fresh context
                assert canon_all((await memory.query()).results) == canon_all((await oracle.query()).results)
                fresh_o, fresh_m = UnboundedChatCompletionContext(), UnboundedChatCompletionContext()
                await oracle.update_context(fresh_o)
                await memory.update_context(fresh_m)
                assert _messages_text(await fresh_m.get_messages()) == _messages_text(await fresh_o.get_messages())
            assert len(await store.log()) == commits  # one commit per add, one per non-empty clear
        finally:
            store.close()
        # a new handle sees the same memory
        async with VersionedStore(Path(tmp) / "s") as again:
            reopened = again if use_store else again.memory("user")
            assert canon_all((await reopened.query()).results) == canon_all(oracle.content)
