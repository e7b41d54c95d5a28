"""Transactions belong to the task that opened them (issue 8 items 1 and 12).

A task spawned inside ``async with store.transaction()`` commits its writes on
its own, before or after the transaction's commit, never into it; a finished
transaction can never swallow a write; the ``on_change`` poller never runs in
a subscriber's transaction; ``append`` inside a transaction returns the byte
offset where its bytes end up.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from ag2.knowledge import MemoryKnowledgeStore

import memrev
from memrev import VersionedStore

pytestmark = pytest.mark.anyio


async def test_task_spawned_in_a_transaction_writing_after_it_committed_is_durable(tmp_path: Path):
    folder = str(tmp_path / "s")
    go = asyncio.Event()
    async with VersionedStore(folder) as store:

        async def late_writer() -> None:
            await go.wait()
            await store.write("/late", "kept")

        async with store.transaction("parent"):
            await store.write("/parent", "1")
            child = asyncio.create_task(late_writer())
        go.set()
        await child
        assert await store.read("/late") == "kept"
    async with VersionedStore(folder) as fresh:
        assert await fresh.read("/late") == "kept"
        assert await fresh.read("/parent") == "1"


async def test_child_task_writing_while_the_parent_transaction_is_open_commits_on_its_own(tmp_path: Path):
    folder = str(tmp_path / "s")
    async with VersionedStore(folder) as store:
        async with store.transaction("parent"):
            await store.write("/parent", "1")
            await asyncio.create_task(store.write("/child", "c"))
            assert store.in_transaction
            async with VersionedStore(folder) as fresh:  # committed already, the parent's file not yet
                assert await fresh.read("/child") == "c"
                assert await fresh.read("/parent") is None
            assert await asyncio.create_task(_in_txn(store)) is False
        log = await store.log()
        assert [c.paths for c in log] == [("/parent",), ("/child",)]


async def _in_txn(store: VersionedStore) -> bool:
    return store.in_transaction


async def test_poller_started_inside_a_transaction_never_joins_it(tmp_path: Path):
    """on_change first called inside a transaction: a callback's write (run by
    the poller, on a change made elsewhere) is committed, not staged into the
    finished transaction."""
    folder = tmp_path / "s"
    seen = asyncio.Event()
    async with VersionedStore(str(folder), poll_interval=0.05) as store:

        async def react(path: str) -> None:
            if path == "/far":
                await store.write("/reaction", "from the callback")
                seen.set()

        async with store.transaction("subscribe"):
            await store.write("/x", "1")
            sub = await store.on_change("/", react)
        # Another handle that is not a sibling of this one (its location is
        # spelled differently): only the poller can see its commit.
        async with VersionedStore(f"sqlite://{folder / 'memrev.db'}") as elsewhere:
            await elsewhere.write("/far", "f")
        await asyncio.wait_for(seen.wait(), 10)
        await sub.close()
    async with VersionedStore(str(folder)) as fresh:
        assert await fresh.read("/reaction") == "from the callback"


async def test_appends_in_one_transaction_return_true_offsets(tmp_path: Path):
    oracle = MemoryKnowledgeStore()
    async with VersionedStore(str(tmp_path / "s")) as store:
        got, want = [], []
        for s in (store, oracle):
            await s.append("/log", "hello\n")
        async with store.transaction():
            for text in ("one two three\n", "x\n", "é日\n"):
                got.append(await store.append("/log", text))
                want.append(await oracle.append("/log", text))
        assert got == want
        assert await store.read("/log") == await oracle.read("/log")
        for offset, text in zip(got, ("one two three\n", "x\n", "é日\n")):
            assert await store.read_range("/log", offset, offset + len(text.encode())) == text


async def test_concurrent_transactions_appending_never_return_a_stale_offset(tmp_path: Path):
    """Two tasks, each in its own transaction, append to one file: each returned
    offset is where that task's bytes are, or its transaction raises and writes nothing."""
    async with VersionedStore(str(tmp_path / "s")) as store:
        await store.append("/log", "hello\n")
        both_staged = asyncio.Barrier(2)

        async def worker(text: str) -> int | None:
            try:
                async with store.transaction():
                    offset = await store.append("/log", text)
                    await both_staged.wait()
                return offset
            except memrev.ConcurrentUpdate:
                return None

        texts = ["first line here\n", "second one\n"]
        offsets = await asyncio.gather(*(worker(t) for t in texts))
        content = (await store.read("/log")).encode()
        assert offsets.count(None) == 1, offsets  # both staged at byte 6: only one may commit there
        for offset, text in zip(offsets, texts):
            if offset is not None:
                assert content[offset : offset + len(text.encode())] == text.encode()
