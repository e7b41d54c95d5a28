"""Commit path: group commit, waiting for the write lock, statements per commit.

Speed targets live in bench/run.py; these tests count work (statements,
lock attempts, commits), never time.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from memrev import VersionedStore, errors
from memrev.backends.sqlite import SqliteBackend
from memrev.maintenance.fsck import fsck
from memrev.repo.ops import Append, Write
from memrev.repo.repository import CommitRequest, Repository

pytestmark = pytest.mark.anyio


def _traced(backend: SqliteBackend) -> list[str]:
    seen: list[str] = []
    backend._conn.set_trace_callback(seen.append)
    return seen


def test_a_waiting_writer_tries_the_lock_again_itself(tmp_path: Path):
    """SQLite's busy handler sleeps up to 100 ms between tries; memrev polls BEGIN IMMEDIATE
    itself (50 µs growing to 1 ms), so a waiting writer takes the lock soon after it is free."""
    repo = Repository(SqliteBackend(tmp_path / "m.db"))
    repo.commit("main", [Write("/a", b"1")], author="t")
    seen = _traced(repo.backend)
    holder = sqlite3.connect(tmp_path / "m.db", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    done = threading.Event()
    writer = threading.Thread(target=lambda: (repo.commit("main", [Write("/a", b"2")], author="t"), done.set()))
    writer.start()
    try:
        for _ in range(1000):  # until the writer has tried the lock several times (bounded)
            if sum(s == "BEGIN IMMEDIATE" for s in list(seen)) >= 4:
                break
            done.wait(0.01)
        tries = sum(s == "BEGIN IMMEDIATE" for s in list(seen))
    finally:
        holder.execute("ROLLBACK")
        holder.close()
        writer.join()
    assert done.is_set()
    assert tries >= 4, f"the writer tried the lock {tries} times while it was held (SQLite's busy handler: 1)"
    assert repo.content(repo.entry_at(repo.head("main"), "/a").oid) == b"2"
    repo.backend.close()


# ---------------------------------------------------------------- group commit, repository level

def _head_file(repo: Repository, path: str) -> bytes | None:
    entry = repo.entry_at(repo.head("main"), path)
    return None if entry is None else repo.content(entry.oid)


def _begins(seen: list[str]) -> int:
    return sum(s.startswith("BEGIN") for s in seen)


def test_a_group_is_one_transaction_with_one_commit_per_request(tmp_path: Path):
    repo = Repository(SqliteBackend(tmp_path / "m.db"))
    repo.commit("main", [Write("/base", b"0")], author="t")
    start = repo.head("main")
    seen = _traced(repo.backend)
    requests = [CommitRequest("main", [Write(f"/f{i}", b"%d" % i)], f"w{i}") for i in range(5)]
    outcomes = repo.commit_group(requests)
    assert _begins(seen) == 1 and sum(s == "COMMIT" for s in seen) == 1
    ids = [o.id for o in outcomes]
    assert len(set(ids)) == 5
    # Each request is its own commit, in order, each the parent of the next.
    assert [o.parent for o in outcomes] == [start, *ids[:-1]]
    assert repo.head("main") == ids[-1]
    assert [c.author for c in repo.log(ids[-1], 5)] == ["w4", "w3", "w2", "w1", "w0"]
    assert [c.paths for c in repo.log(ids[-1], 5)] == [("/f4",), ("/f3",), ("/f2",), ("/f1",), ("/f0",)]
    assert fsck(repo) == []
    repo.backend.close()


def test_a_bad_request_in_a_group_fails_alone_and_writes_nothing(tmp_path: Path):
    repo = Repository(SqliteBackend(tmp_path / "m.db"))
    repo.commit("main", [Write("/log", b"line1\n")], author="t")
    stale = repo.head("main")
    requests = [
        CommitRequest("main", [Write("/a", b"a")], "ok1"),
        # stored a piece of /log, then its second op fails: the piece must go too
        CommitRequest("main", [Append("/log", b"bad\n"), Append("/log", b"x", 999)], "bad-offset"),
        CommitRequest("main", [Write("/b", b"b")], "stale", expect_head=stale),  # the branch moved (ok1)
        CommitRequest("main", [("frobnicate", "/c")], "bad-op"),
        CommitRequest("main", [Append("/log", b"line2\n")], "ok2"),
    ]
    outcomes = repo.commit_group(requests)
    assert isinstance(outcomes[1], errors.ConcurrentUpdate)
    assert isinstance(outcomes[2], errors.ConcurrentUpdate)
    assert isinstance(outcomes[3], TypeError)  # not a memrev.repo.ops record
    ok1, ok2 = outcomes[0], outcomes[4]
    assert ok2.parent == ok1.id and repo.head("main") == ok2.id
    assert [c.author for c in repo.log(ok2.id)] == ["ok2", "ok1", "t"]
    assert _head_file(repo, "/log") == b"line1\nline2\n"
    assert _head_file(repo, "/b") is None
    assert fsck(repo) == []
    repo.backend.close()


def test_an_append_rolled_back_is_stored_again_by_the_next_commit(tmp_path: Path):
    """A commit that stored an append piece and then failed is rolled back; the
    repository remembered the piece's row, and the next commit appending the same
    bytes took it for stored: its commit named a blob that was not there."""
    repo = Repository(SqliteBackend(tmp_path / "m.db"))
    repo.commit("main", [Write("/log", b"line1\n")], author="t")
    with pytest.raises(errors.ConcurrentUpdate):
        repo.commit("main", [Append("/log", b"line2\n"), Append("/other", b"x", 5)], author="t")
    repo.commit("main", [Append("/log", b"line2\n")], author="t")
    repo.forget()
    assert _head_file(repo, "/log") == b"line1\nline2\n"
    assert fsck(repo) == []
    repo.backend.close()


# ---------------------------------------------------------------- group commit through VersionedStore

async def _queued(store: VersionedStore, n: int) -> None:
    for _ in range(2000):  # bounded: the tasks queue within a few loop turns
        if len(store._queue._waiting) >= n:
            return
        await asyncio.sleep(0.001)
    raise AssertionError(f"only {len(store._queue._waiting)} of {n} commits queued")


async def _grouped(store: VersionedStore, calls: list) -> list:
    """Run ``calls`` while the handle's worker is held, so they all wait, then let it go."""
    store._lock.acquire()
    try:
        tasks = [asyncio.ensure_future(c) for c in calls]
        await _queued(store, len(calls))
    finally:
        store._lock.release()
    return await asyncio.gather(*tasks, return_exceptions=True)


async def test_concurrent_writers_share_one_transaction_and_each_get_a_commit(tmp_path: Path):
    async with VersionedStore(tmp_path / "s", durability="full") as store:
        await store.write("/base", "0")
        seen = _traced(store._repo.backend)
        heard: list[str] = []

        async def hear(path: str) -> None:
            heard.append(path)

        await store.on_change("/", hear)
        outcomes = await _grouped(store, [store.write(f"/w{i}", f"v{i}") for i in range(8)])
        assert outcomes == [None] * 8
        assert _begins(seen) == 1, "8 waiting writes: one transaction"
        log = await store.log()
        assert len(log) == 9 and sorted(p for c in log[:8] for p in c.paths) == sorted(f"/w{i}" for i in range(8))
        assert sorted(heard) == sorted(f"/w{i}" for i in range(8))  # every subscriber hears every commit once
        assert await store.fsck() == []


async def test_one_failing_commit_in_a_group_fails_only_its_caller(tmp_path: Path):
    async with VersionedStore(tmp_path / "s", durability="full") as store:
        await store.write("/log", "a\n")
        old = await store.head()

        async def stale_transaction() -> None:
            async with store.transaction(expect_head=old):
                await store.write("/never", "x")

        calls = [store.write("/w1", "1"), stale_transaction(), store.append("/log", "b\n"), store.write("/w2", "2")]
        outcomes = await _grouped(store, calls)
        assert outcomes[0] is None and outcomes[3] is None and outcomes[2] == 2
        assert isinstance(outcomes[1], errors.ConcurrentUpdate)
        assert await store.read("/never") is None
        assert await store.read("/log") == "a\nb\n"
        assert len(await store.log()) == 4
        assert await store.fsck() == []


async def test_a_cancelled_caller_waiting_in_the_queue_is_never_committed(tmp_path: Path):
    async with VersionedStore(tmp_path / "s", durability="full") as store:
        store._lock.acquire()
        try:
            keep = asyncio.ensure_future(store.write("/keep", "1"))
            gone = asyncio.ensure_future(store.write("/gone", "1"))
            await _queued(store, 2)
            gone.cancel()
            await asyncio.sleep(0)
            assert len(store._queue._waiting) == 1
        finally:
            store._lock.release()
        await keep
        with pytest.raises(asyncio.CancelledError):
            await gone
        assert await store.read("/keep") == "1" and await store.read("/gone") is None
        assert len(await store.log()) == 1


def _count_transactions(store: VersionedStore) -> list[int]:
    backend, count = store._repo.backend, [0]
    write = backend.write

    def counted(*a, **k):
        count[0] += 1
        return write(*a, **k)

    backend.write = counted
    return count


async def test_postgres_waiting_writers_share_one_transaction(pg_url):
    async with VersionedStore(pg_url) as store:
        await store.write("/base", "0")
        old = await store.head()

        async def stale_transaction() -> None:
            async with store.transaction(expect_head=old):
                await store.write("/never", "x")

        count = _count_transactions(store)
        outcomes = await _grouped(store, [store.write("/w1", "1"), stale_transaction(), store.write("/w2", "2")])
        assert outcomes[0] is None and outcomes[2] is None and isinstance(outcomes[1], errors.ConcurrentUpdate)
        assert count == [1]
        log = await store.log()
        assert [c.paths for c in log[:2]] == [("/w2",), ("/w1",)] and log[0].parents[0] == log[1].id
        assert await store.read("/never") is None
        assert await store.fsck() == []


# ---------------------------------------------------------------- crash: acknowledged means durable

GROUP_CHILD = r"""
import asyncio, sys
from memrev import VersionedStore

async def writer(store, w):
    for i in range(100000):
        path, text = f"/w{w}/{i}", f"writer {w} version {i}\n" * (1 + i % 7)
        if i % 3 == 2:
            await store.append(f"/log{w}", text)
            path = f"/log{w}"
        else:
            await store.write(path, text)
        sys.stdout.write(f"ack {w} {i}\n")
        sys.stdout.flush()

async def main():
    store = VersionedStore(sys.argv[1], durability="full")
    print("ready", flush=True)
    await asyncio.gather(*(writer(store, w) for w in range(4)))

asyncio.run(main())
"""


def _expected(acks: list[tuple[int, int]]) -> tuple[dict[str, str], dict[int, list[str]]]:
    files: dict[str, str] = {}
    logs: dict[int, list[str]] = {}
    for w, i in acks:
        text = f"writer {w} version {i}\n" * (1 + i % 7)
        if i % 3 == 2:
            logs.setdefault(w, []).append(text)
        else:
            files[f"/w{w}/{i}"] = text
    return files, logs


@pytest.mark.slow
@pytest.mark.parametrize("kill_after", [25, 60, 140])
async def test_every_acknowledged_grouped_commit_survives_kill_9(tmp_path: Path, kill_after: int):
    """Four tasks write through one handle with durability="full" (grouped commits);
    the child is killed -9 after ``kill_after`` acknowledgements, at whatever instant
    that is; every write it acknowledged is in the store, and fsck is clean."""
    await _kill_grouped_writer(str(tmp_path / "s"), kill_after)


@pytest.mark.slow
@pytest.mark.parametrize("kill_after", [20, 70])
async def test_postgres_every_acknowledged_grouped_commit_survives_kill_9(pg_url, kill_after: int):
    """The same on PostgreSQL: grouped commits, their rows sent in pipelines."""
    await _kill_grouped_writer(pg_url, kill_after)


async def _kill_grouped_writer(location: str, kill_after: int) -> None:
    src = str(Path(__file__).resolve().parents[1] / "src")
    env = {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", "")}
    child = subprocess.Popen(  # noqa: ASYNC220 - the test drives the child's pipes itself
        [sys.executable, "-c", GROUP_CHILD, location], stdout=subprocess.PIPE, text=True, env=env
    )
    acks: list[tuple[int, int]] = []
    try:
        assert child.stdout.readline() == "ready\n"
        while len(acks) < kill_after:
            line = child.stdout.readline()
            assert line.startswith("ack "), f"child said {line!r}"
            acks.append(tuple(map(int, line.split()[1:])))
    finally:
        child.send_signal(signal.SIGKILL)
        rest = child.stdout.read()  # acknowledged before the kill landed: they count too
        child.wait()
    acks += [tuple(map(int, ln.split()[1:])) for ln in rest.splitlines() if ln.startswith("ack ")]
    files, logs = _expected(acks)
    async with VersionedStore(location) as store:
        for path, text in files.items():
            assert await store.read(path) == text, f"acknowledged {path} lost"
        for w, pieces in logs.items():
            log = await store.read(f"/log{w}") or ""
            # in order; an append that was not yet acknowledged may follow
            assert log.startswith("".join(pieces)), f"acknowledged appends of /log{w} lost"
        assert await store.fsck() == []


# ---------------------------------------------------------------- statements per commit

async def test_a_rewrite_commit_is_twelve_statements_and_no_pragma(tmp_path: Path):
    """W1's commit (rewrite one file at the head, inline on SQLite): BEGIN, the ref,
    the blob, two tree nodes (one executemany), the commit, the head and change
    rows, the CAS, COMMIT. It was 13: the busy timeout was switched off and on
    around every BEGIN IMMEDIATE. Directory keys (docs/design.md) add the head
    and change rows of ``/memory/``, each an insert within the same executemany
    as the file's row (sqlite3 traces every row). The path's history link is no
    longer read back: the commit before noted it (13 -> 12)."""
    async with VersionedStore(tmp_path / "s") as store:
        for i in range(3):
            await store.write("/memory/working.md", f"line {i}\n" * 40)
        seen = _traced(store._repo.backend)
        for i in range(3, 13):
            await store.write("/memory/working.md", f"line {i}\n" * 40)
        store._repo.backend._conn.set_trace_callback(None)
    assert _begins(seen) == 10
    assert not [s for s in seen if s.startswith("PRAGMA")]
    assert len(seen) == 10 * (10 + 2), seen[:13]
    assert not [s for s in seen if s.startswith("SELECT") and "FROM head" in s]
    assert sum("'/memory/'" in s for s in seen) == 10 * 2  # the directory key's rows, nothing else


# ---------------------------------------------------------------- backend savepoints

def _savepoint_case(backend) -> None:
    with backend.write():
        backend.put_tree(b"\1" * 20, b"kept-before")
        with pytest.raises(RuntimeError), backend.savepoint():
            backend.put_tree(b"\2" * 20, b"undone")
            raise RuntimeError("this request fails")
        with backend.savepoint():
            backend.put_tree(b"\3" * 20, b"kept-after")
    assert backend.get_tree(b"\1" * 20) == b"kept-before"
    assert backend.get_tree(b"\2" * 20) is None
    assert backend.get_tree(b"\3" * 20) == b"kept-after"


def test_sqlite_savepoint_undoes_only_its_block(tmp_path: Path):
    backend = SqliteBackend(tmp_path / "m.db")
    _savepoint_case(backend)
    backend.close()


def test_postgres_savepoint_undoes_only_its_block(pg_url):
    from memrev.backends.postgres import PostgresBackend

    backend = PostgresBackend(pg_url)
    _savepoint_case(backend)
    backend.close()


async def test_writers_waiting_for_another_process_share_one_transaction(tmp_path: Path):
    """durability="normal": commits run inline while the lock is free; while another
    process holds it, they go to the worker, and the ones waiting there are batched
    ("across processes: the database lock; a process batches its own waiters")."""
    async with VersionedStore(tmp_path / "s") as store:
        await store.write("/base", "0")
        seen = _traced(store._repo.backend)
        other = sqlite3.connect(tmp_path / "s" / "memrev.db", isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # another process in the middle of a commit
        try:
            first = asyncio.ensure_future(store.write("/w0", "0"))
            for _ in range(2000):  # bounded: until the first commit is waiting in the worker
                if store._lock.locked():
                    break
                await asyncio.sleep(0.001)
            rest = [asyncio.ensure_future(store.write(f"/w{i}", str(i))) for i in range(1, 5)]
            await _queued(store, 4)
        finally:
            other.execute("ROLLBACK")
            other.close()
        await asyncio.gather(first, *rest)
        assert sum(s == "COMMIT" for s in seen) == 2, "the first waiter alone, then the four that queued behind it"
        log = await store.log()
        assert len(log) == 6 and sorted(p for c in log[:5] for p in c.paths) == [f"/w{i}" for i in range(5)]
        assert await store.fsck() == []


async def test_a_caller_cancelled_after_a_worker_took_its_commit_still_gets_it_announced(tmp_path: Path):
    """Once a worker took a commit into its transaction it has started: cancelling
    the caller does not undo it, and subscribers still hear of it."""
    async with VersionedStore(tmp_path / "s", durability="full") as store:
        await store.write("/base", "0")
        heard: list[str] = []

        async def hear(path: str) -> None:
            heard.append(path)

        await store.on_change("/", hear)
        other = sqlite3.connect(tmp_path / "s" / "memrev.db", isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # the worker will wait for this lock with both commits taken
        try:
            store._lock.acquire()
            try:
                a = asyncio.ensure_future(store.write("/a", "1"))
                b = asyncio.ensure_future(store.write("/b", "1"))
                await _queued(store, 2)
            finally:
                store._lock.release()
            for _ in range(2000):  # bounded: until the worker has taken both
                if not store._queue._waiting:
                    break
                await asyncio.sleep(0.001)
            b.cancel()
            await asyncio.sleep(0.01)
        finally:
            other.execute("ROLLBACK")
            other.close()
        await a
        with pytest.raises(asyncio.CancelledError):
            await b
        for _ in range(2000):  # bounded: b's job still runs and announces its commit
            if "/b" in heard:
                break
            await asyncio.sleep(0.001)
        assert await store.read("/b") == "1"
        assert sorted(heard) == ["/a", "/b"]
