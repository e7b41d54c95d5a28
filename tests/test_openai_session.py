"""``store.session(id)``: the OpenAI Agents SDK ``Session`` protocol on the commit graph.

The SDK's own ``SQLiteSession`` is the oracle: hypothesis drives the same
sequence of ``add_items`` / ``get_items(limit)`` / ``pop_item`` /
``clear_session`` calls (with and without ``session_settings``) against both
and compares every answer. Example tests cover what only memrev has: one
file per item, one commit per call, tombstones readable at an earlier
revision, ``at``/``branch``/``log``, and typed errors with nothing written.
"""

from __future__ import annotations

import asyncio
import itertools
import json

import pytest
from agents.memory import Session, SessionSettings, SQLiteSession
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memrev import VersionedStore, errors
from memrev.openai_agents import InvalidSessionItem, VersionedSession, session_folder_name

pytestmark = pytest.mark.anyio

USER = {"role": "user", "content": "What is the weather in Lisbon?"}
CALL = {"type": "function_call", "call_id": "c1", "name": "weather", "arguments": '{"city": "Lisbon"}'}
OUTPUT = {"type": "function_call_output", "call_id": "c1", "output": "sunny, 24 C"}
REPLY = {"role": "assistant", "content": "Sunny and 24 C."}

# ------------------------------------------------------------------ differential, hypothesis

json_scalars = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=12)
json_values = st.recursive(
    json_scalars | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)
items = st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "system"]), "content": st.text(max_size=20)}) | (
    st.dictionaries(st.text(max_size=6), json_values, max_size=4)
)
limits = st.none() | st.integers(-3, 6)
calls = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.lists(items, max_size=4)),
        st.tuples(st.just("get"), limits),
        st.tuples(st.just("pop"), st.none()),
        st.tuples(st.just("clear"), st.none()),
    ),
    max_size=14,
)

_ids = itertools.count()


async def _run(session: Session, sequence: list) -> list:
    answers = []
    for op, arg in sequence:
        if op == "add":
            answers.append(await session.add_items(arg))
        elif op == "get":
            answers.append(await session.get_items(arg))
        elif op == "pop":
            answers.append(await session.pop_item())
        else:
            answers.append(await session.clear_session())
    answers.append(await session.get_items())
    return answers


@pytest.fixture(scope="module")
def shared_store(tmp_path_factory):
    store = VersionedStore(tmp_path_factory.mktemp("sessions") / "state")
    yield store
    store.close()


@pytest.mark.slow  # measured >= 0.3 s: kept out of the quick loop
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sequence=calls, default_limit=st.none() | st.integers(-2, 4))
def test_same_answers_as_sqlite_session(shared_store, sequence, default_limit):
    session_id = f"s{next(_ids)}"  # a fresh conversation in the shared store per example
    config = None if default_limit is None else SessionSettings(limit=default_limit)
    oracle = SQLiteSession(session_id, session_settings=config)
    ours = shared_store.session(session_id, session_settings=config)
    try:
        expected = asyncio.run(_run(oracle, sequence))
        assert asyncio.run(_run(ours, sequence)) == expected
    finally:
        oracle.close()


async def test_is_a_session_and_coerces_settings(tmp_path):
    async with VersionedStore(tmp_path / "s") as store:
        session = store.session("chat", session_settings={"limit": 2})
        assert isinstance(session, Session)
        assert session.session_settings == SessionSettings(limit=2)
        assert store.session("chat").session_settings == SessionSettings()
        await session.add_items([USER, CALL, OUTPUT])
        assert await session.get_items() == [CALL, OUTPUT]
        assert await session.get_items(limit=5) == [USER, CALL, OUTPUT]


async def test_skips_files_that_are_not_json_like_sqlite_skips_bad_rows(tmp_path):
    oracle = SQLiteSession("chat")
    async with VersionedStore(tmp_path / "s") as store:
        ours = store.session("chat")
        for session in (oracle, ours):
            await session.add_items([USER, REPLY])
        # a corrupt newest entry in each: a raw row, a hand-written file
        with oracle._locked_connection() as conn:
            conn.execute("INSERT INTO agent_messages (session_id, message_data) VALUES ('chat', '{oops')")
            conn.commit()
        await store.write(f"{ours.path}/items/000000000003.json", "{oops")
        for session in (oracle, ours):
            assert await session.get_items(limit=1) == [REPLY]
            assert await session.pop_item() == REPLY  # the bad entry is dropped on the way
            assert await session.get_items() == [USER]
    oracle.close()


# ------------------------------------------------------------------ layout and commits


async def test_one_file_per_item_one_commit_per_call(tmp_path):
    async with VersionedStore(tmp_path / "s") as store:
        session = store.session("chat-42")
        await session.add_items([USER, CALL, OUTPUT])
        assert len(await store.log()) == 1
        folder = "/openai-agents/sessions/chat-42"
        assert await store.list(f"{folder}/items") == [f"00000000000{i}.json" for i in (1, 2, 3)]
        assert json.loads(await store.read(f"{folder}/items/000000000002.json")) == CALL
        assert await store.read(f"{folder}/last-id") == "3\n"
        await session.add_items([REPLY])

        assert await session.pop_item() == REPLY
        assert await session.pop_item() == OUTPUT
        await session.clear_session()
        await session.clear_session()  # empty: no commit
        assert await session.pop_item() is None  # empty: no commit
        messages = [c.message for c in await session.log()]
        assert messages == [
            "session 'chat-42': clear 2 items (1-2)",
            "session 'chat-42': pop item 3",
            "session 'chat-42': pop item 4",
            "session 'chat-42': add 1 item (4)",
            "session 'chat-42': add 3 items (1-3)",
        ]
        first = (await session.log())[-1]
        assert first.meta["openai_agents"] == {"session": "chat-42", "op": "add", "items": [1, 2, 3]}
        assert first.meta["framework"] == "openai-agents" and first.meta["session"] == "chat-42"
        # ids keep counting after a pop and a clear, as SQLite's AUTOINCREMENT does
        await session.add_items([USER])
        assert await store.list(f"{folder}/items") == ["000000000005.json"]
        # one item's history is one path
        assert [c.message for c in await store.log(f"{folder}/items/000000000003.json")] == [
            "session 'chat-42': pop item 3",
            "session 'chat-42': add 3 items (1-3)",
        ]


async def test_cleared_conversation_readable_at_earlier_revision(tmp_path):
    async with VersionedStore(tmp_path / "s") as store:
        session = store.session("chat")
        await session.add_items([USER, REPLY])
        await session.clear_session()
        assert await session.get_items() == []
        before = session.at("HEAD~1")
        assert await before.get_items() == [USER, REPLY]
        assert await before.get_items(limit=1) == [REPLY]
        assert [c.message for c in await before.log()] == ["session 'chat': add 2 items (1-2)"]
        for call in (before.add_items([USER]), before.pop_item(), before.clear_session()):
            with pytest.raises(errors.ReadOnlyRevision):
                await call
        assert await session.get_items() == []


async def test_branch_forks_the_conversation(tmp_path):
    async with VersionedStore(tmp_path / "s") as store:
        session = store.session("chat")
        await session.add_items([USER, REPLY])
        fork = await session.branch("try-french")
        try:
            await fork.add_items([{"role": "user", "content": "Réponds en français."}])
            assert len(await fork.get_items()) == 3
            assert await session.get_items() == [USER, REPLY]
            assert fork.store.branch_name == "try-french"
            # a fork of a past revision starts from there
            old = await session.at("HEAD").branch("from-pin")
            assert await old.get_items() == [USER, REPLY]
            old.close()
        finally:
            fork.close()
        assert await session.get_items() == [USER, REPLY]  # closing the fork leaves the store open


async def test_bad_items_refused_with_nothing_written(tmp_path):
    async with VersionedStore(tmp_path / "s") as store:
        session = store.session("chat")
        for bad in ([USER, {"content": object()}], [{"when": {1, 2}}]):
            with pytest.raises(InvalidSessionItem) as info:
                await session.add_items(bad)
            assert isinstance(info.value, TypeError)  # what SQLiteSession raises, via json.dumps
        with pytest.raises(errors.InvalidContent):
            await session.get_items(limit="3")
        assert await store.log() == []
        with pytest.raises(errors.InvalidPath):
            store.session(42)
        with pytest.raises(errors.InvalidPath):
            store.session("bad \udc80 surrogate")


async def test_session_ids_map_to_distinct_folders(tmp_path):
    ids = ["", ".", "..", ".hidden", "a/b", "a%2Fb", "%", "with space", "ünïcode", "tab\there", "user:1@x"]
    names = [session_folder_name(i) for i in ids]
    assert len(set(names)) == len(ids)
    assert all("/" not in n and n not in ("", ".", "..") for n in names)
    async with VersionedStore(tmp_path / "s") as store:
        for i in ids:
            await store.session(i).add_items([{"role": "user", "content": i}])
        for i in ids:
            assert await store.session(i).get_items() == [{"role": "user", "content": i}]


async def test_closed_session_refuses_like_sqlite(tmp_path):
    oracle = SQLiteSession("chat")
    oracle.close()
    async with VersionedStore(tmp_path / "s") as store:
        ours = store.session("chat")
        ours.close()
        for session in (oracle, ours):
            with pytest.raises(RuntimeError):
                await session.add_items([])
            with pytest.raises(RuntimeError):
                await session.get_items()
        with pytest.raises(errors.StoreClosed):
            await ours.pop_item()


async def test_add_items_joins_an_open_transaction(tmp_path):
    async with VersionedStore(tmp_path / "s") as store:
        session = store.session("chat")
        async with store.transaction(message="turn 1"):
            await store.write("/notes/turn.md", "turn 1\n")
            await session.add_items([USER])
            await session.add_items([REPLY])
            assert await session.get_items() == [USER, REPLY]  # reads see the transaction's own adds
        log = await store.log()
        assert [c.message for c in log] == ["turn 1"]
        assert await session.get_items() == [USER, REPLY]


@pytest.mark.slow  # measured >= 0.3 s: kept out of the quick loop
def test_openai_agents_is_imported_only_where_used():
    import subprocess
    import sys

    code = "import sys, memrev; memrev.VersionedStore; assert 'agents' not in sys.modules, 'imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_sessions_are_the_store_type(tmp_path):
    store = VersionedStore(tmp_path / "s")
    assert isinstance(store.session("x"), VersionedSession)
    store.close()
    with pytest.raises(errors.StoreClosed):
        store.session("x")


WRITER = """
import asyncio, os, sys, time
from memrev import VersionedStore

async def main(location, who, count):
    async with VersionedStore(location, author=who) as store:
        session = store.session("shared")
        open(location + "." + who + ".ready", "w").close()
        while not os.path.exists(location + ".go"):  # start together, so the calls interleave
            time.sleep(0.005)
        for i in range(count):
            await session.add_items([{"role": "user", "content": f"{who} {i} a"}, {"role": "user", "content": f"{who} {i} b"}])

asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
"""


@pytest.mark.slow
async def test_two_processes_adding_at_once_lose_nothing(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    import anyio

    location = str(tmp_path / "s")
    VersionedStore(location).close()
    names = ("alice", "bob")
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, location, who, "20"]) for who in names]
    while not all(os.path.exists(f"{location}.{who}.ready") for who in names):
        assert all(w.poll() is None for w in writers), "a writer died before starting"
        await anyio.sleep(0.01)
    Path(f"{location}.go").touch()
    assert [w.wait(timeout=300) for w in writers] == [0, 0]
    async with VersionedStore(location) as store:
        items = [i["content"] for i in await store.session("shared").get_items()]
        assert len(items) == 80
        for who in names:  # each process's items, in its order, each pair adjacent (one commit)
            mine = [c for c in items if c.startswith(who)]
            assert mine == [f"{who} {i} {x}" for i in range(20) for x in "ab"]
            assert all(items[items.index(f"{who} {i} a") + 1] == f"{who} {i} b" for i in range(20))
        assert await store.fsck() == []
