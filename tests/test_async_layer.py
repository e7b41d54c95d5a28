"""The async layer: nothing that can wait blocks the event loop (issue 8 item 8, issue 10 item 5).

Another connection holds the store's write lock (SQLite ``BEGIN IMMEDIATE``,
PostgreSQL the branch's ref row ``FOR UPDATE``) while ``await store.write()``
waits for it: a ticker coroutine must keep ticking, ``asyncio.wait_for`` must
interrupt the waiting caller, and afterwards the write is either whole or
absent and the handle is usable. Assertions are on tick gaps and on the order
of events, not on wall-time ratios.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from pathlib import Path

import psycopg
import pytest

from memrev import VersionedStore

pytestmark = pytest.mark.anyio

HOLD = 2.0  # seconds the other connection holds the lock


class Ticker:
    """Ticks every 10 ms on the loop; ``max_gap`` is the longest the loop was unavailable."""

    def __init__(self) -> None:
        self.stamps: list[float] = []
        self._task: asyncio.Task | None = None

    async def _run(self) -> None:
        while True:
            self.stamps.append(time.monotonic())
            await asyncio.sleep(0.01)

    def __enter__(self) -> Ticker:
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    def __exit__(self, *exc: object) -> None:
        self._task.cancel()

    @property
    def max_gap(self) -> float:
        return max(b - a for a, b in zip(self.stamps, self.stamps[1:]))


def _hold_sqlite_lock(db: Path, locked: threading.Event, released: threading.Event) -> None:
    conn = sqlite3.connect(str(db), isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    locked.set()
    time.sleep(HOLD)
    released.set()
    conn.execute("ROLLBACK")
    conn.close()


def _hold_pg_ref(url: str, ref: str, locked: threading.Event, released: threading.Event) -> None:
    with psycopg.connect(url) as conn:
        conn.execute("SELECT target FROM refs WHERE name = %s FOR UPDATE", (ref,))
        locked.set()
        time.sleep(HOLD)
        released.set()
        conn.rollback()


async def _start_holder(target, *args) -> tuple[threading.Thread, threading.Event]:
    locked, released = threading.Event(), threading.Event()
    holder = threading.Thread(target=target, args=(*args, locked, released))
    holder.start()
    await asyncio.to_thread(locked.wait)
    return holder, released


async def _loop_keeps_ticking_while_a_write_waits(store: VersionedStore, target, *args) -> None:
    await store.write("/a", "1")
    holder, released = await _start_holder(target, *args)
    with Ticker() as ticker:
        started = time.monotonic()
        await store.write("/a", "2")
        waited = time.monotonic() - started
    holder.join()
    assert released.is_set(), "the write committed while the other connection held the lock"
    assert waited >= HOLD * 0.75
    assert len(ticker.stamps) > 20 and ticker.max_gap < 0.5, f"the loop stalled for {ticker.max_gap:.2f} s"
    assert await store.read("/a") == "2"


async def _wait_for_interrupts_a_waiting_write(store: VersionedStore, fresh, target, *args) -> None:
    await store.write("/a", "1")
    holder, released = await _start_holder(target, *args)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(store.write("/a", "2"), 0.5)
    assert not released.is_set(), "wait_for returned only after the lock was released"
    await asyncio.to_thread(holder.join)
    await store.write("/b", "after")  # the handle (and its lock) is usable
    assert await store.read("/b") == "after"
    other = fresh()
    try:
        assert await other.read("/a") in ("1", "2")  # whole or absent
        assert len(await other.log()) in (2, 3)
        assert await other.fsck() == []
    finally:
        other.close()


@pytest.mark.slow
async def test_sqlite_lock_wait_does_not_block_the_loop(tmp_path: Path):
    async with VersionedStore(str(tmp_path / "s")) as store:
        await _loop_keeps_ticking_while_a_write_waits(store, _hold_sqlite_lock, tmp_path / "s" / "memrev.db")


@pytest.mark.slow
async def test_sqlite_wait_for_interrupts_a_write_waiting_for_the_lock(tmp_path: Path):
    folder = str(tmp_path / "s")
    async with VersionedStore(folder) as store:
        await _wait_for_interrupts_a_waiting_write(
            store, lambda: VersionedStore(folder), _hold_sqlite_lock, tmp_path / "s" / "memrev.db"
        )


@pytest.mark.slow
async def test_postgres_lock_wait_does_not_block_the_loop(pg_url: str):
    async with VersionedStore(pg_url) as store:
        await _loop_keeps_ticking_while_a_write_waits(store, _hold_pg_ref, pg_url, "refs/heads/main")


@pytest.mark.slow
async def test_postgres_wait_for_interrupts_a_write_waiting_for_the_lock(pg_url: str):
    async with VersionedStore(pg_url) as store:
        await _wait_for_interrupts_a_waiting_write(
            store, lambda: VersionedStore(pg_url), _hold_pg_ref, pg_url, "refs/heads/main"
        )


@pytest.mark.slow
async def test_cancelled_transaction_commit_is_whole_and_strands_nothing(tmp_path: Path):
    """Cancelled while its commit waits for the lock: the transaction commits whole or not at all,
    and the task's next transaction opens normally (nothing stranded)."""
    folder = str(tmp_path / "s")
    async with VersionedStore(folder) as store:
        await store.write("/seed", "0")
        holder, released = await _start_holder(_hold_sqlite_lock, tmp_path / "s" / "memrev.db")

        async def txn() -> None:
            async with store.transaction("two files"):
                await store.write("/x", "1")
                await store.write("/y", "1")

        with pytest.raises(TimeoutError):
            await asyncio.wait_for(txn(), 0.3)
        assert not released.is_set()
        await asyncio.to_thread(holder.join)
        async with store.transaction("next"):
            await store.write("/z", "1")
        assert store.in_transaction is False
        x, y = await store.read("/x"), await store.read("/y")
        assert (x, y) in ((None, None), ("1", "1"))
        assert await store.read("/z") == "1"


@pytest.mark.slow
async def test_reads_wait_off_the_loop_while_the_handle_is_busy(tmp_path: Path):
    """Reads made while the handle's worker holds its connection go to the worker, not a blocked loop."""
    async with VersionedStore(str(tmp_path / "s")) as store:
        await store.write("/a", "1")
        holder, _ = await _start_holder(_hold_sqlite_lock, tmp_path / "s" / "memrev.db")
        with Ticker() as ticker:
            write = asyncio.create_task(store.write("/a", "2"))
            reads = [await store.read("/a") for _ in range(5)]
            await write
        await asyncio.to_thread(holder.join)
        assert set(reads) <= {"1", "2"}
        assert ticker.max_gap < 0.5


@pytest.mark.parametrize("initial", ["", "existing\n"])
async def test_append_is_atomic_across_store_instances(tmp_path: Path, initial: str):
    """Ported from ag2's SQLite store suite: two handles append while another
    connection holds the write lock; both appends land whole, each at the
    offset it returned (ag2's test hangs on a store that waits on the loop)."""
    folder = str(tmp_path / "s")
    async with VersionedStore(folder) as seed:
        await seed.write("/log.jsonl", initial)
    first, second = VersionedStore(folder), VersionedStore(folder)
    try:
        await first.read("/log.jsonl")
        await second.read("/log.jsonl")
        blocker = sqlite3.connect(str(tmp_path / "s" / "memrev.db"), isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")
        payloads = ["alpha\n", "\u4e2d\u6587\n"]
        appends = [asyncio.create_task(s.append("/log.jsonl", t)) for s, t in zip((first, second), payloads)]
        try:
            with Ticker() as ticker:
                await asyncio.sleep(0.25)  # both appends are waiting for the lock now
            assert ticker.max_gap < 0.2, "an append waiting for the lock blocked the loop"
            assert not any(a.done() for a in appends)
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
        offsets = await asyncio.gather(*appends)
        actual = await first.read("/log.jsonl")
        assert actual in (initial + payloads[0] + payloads[1], initial + payloads[1] + payloads[0])
        for offset, text in zip(offsets, payloads):
            assert await first.read_range("/log.jsonl", offset, offset + len(text.encode())) == text
    finally:
        first.close()
        second.close()
