"""SQLite writers (issue 26): processes queue on the write lock, checkpoints stay off the caller's path.

Every test counts work (``SqliteBackend.counts``: BEGIN IMMEDIATE attempts,
waits in the write queue, checkpoints and where they ran; WAL bytes), never
time; the speed is measured by ``bench/run.py``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import threading
from pathlib import Path

import pytest

import memrev
from helpers import spawn
from memrev import Store
from memrev.backends.sqlite import SqliteBackend
from memrev.repo.ops import Write
from memrev.repo.repository import Repository

pytestmark = pytest.mark.anyio


def _repo(db: Path) -> Repository:
    return Repository(SqliteBackend(db))


def _traced(backend: SqliteBackend) -> list[str]:
    seen: list[str] = []
    backend._conn.set_trace_callback(seen.append)
    return seen


def test_a_waiting_writer_queues_in_the_kernel_and_begins_once(tmp_path: Path):
    """A writer behind another handle's open transaction waits in the write queue (an
    ``flock``) and tries ``BEGIN IMMEDIATE`` once, when the holder is done: it does not poll."""
    db = tmp_path / "m.db"
    holder, waiter = _repo(db), _repo(db)
    holder.commit("main", [Write("/a", b"0")], author="t")
    inside, release = threading.Event(), threading.Event()

    def hold() -> None:
        with holder.backend.write():
            inside.set()
            release.wait(10)

    t = threading.Thread(target=hold)
    t.start()
    assert inside.wait(10)
    done = threading.Event()
    w = threading.Thread(target=lambda: (waiter.commit("main", [Write("/b", b"1")], author="t"), done.set()))
    w.start()
    try:
        for _ in range(200):  # until the waiter is in the queue (bounded)
            if waiter.backend.counts.lock_waits:
                break
            done.wait(0.01)
        assert not done.is_set()
        assert waiter.backend.counts.begin_attempts == 0, "no BEGIN IMMEDIATE while the queue is held"
    finally:
        release.set()
        t.join()
        w.join(10)
    assert done.is_set()
    assert waiter.backend.counts.lock_waits == 1
    assert waiter.backend.counts.begin_attempts == 1
    assert waiter.content(waiter.entry_at(waiter.head("main"), "/b").oid) == b"1"
    holder.backend.close()
    waiter.backend.close()


def test_a_queue_held_past_the_busy_timeout_is_a_transient_conflict_and_writes_nothing(tmp_path: Path):
    db = tmp_path / "m.db"
    holder, waiter = _repo(db), _repo(db)
    holder.commit("main", [Write("/a", b"0")], author="t")
    waiter.backend._busy_ms = 200
    with holder.backend.write():
        with pytest.raises(memrev.TransientConflict, match="locked by another writer"):
            waiter.commit("main", [Write("/a", b"lost")], author="t", wait=False)
        with pytest.raises(memrev.TransientConflict, match="locked by another writer"):
            with waiter.backend.write():
                raise AssertionError("the queue was taken while another handle held it")
    # the given-up wait is let go by its helper thread: the queue works again at once
    waiter.commit("main", [Write("/a", b"1")], author="t")
    assert waiter.content(waiter.entry_at(waiter.head("main"), "/a").oid) == b"1"
    assert len(waiter.log(waiter.head("main"))) == 2  # nothing of the refused writes
    holder.backend.close()
    waiter.backend.close()


HOLD_AND_DIE = """
import sys, time
from memrev.backends.sqlite import SqliteBackend
b = SqliteBackend(__import__("pathlib").Path(sys.argv[1]))
with b.write():
    print("holding", flush=True)
    time.sleep(60)
"""


@pytest.mark.slow
def test_a_writer_killed_while_holding_the_queue_lets_the_next_one_in(tmp_path: Path):
    """kill -9 of the process holding the write queue: the kernel drops its ``flock``
    (and SQLite's lock), so the next writer commits; nothing of the dead one is stored."""
    db = tmp_path / "m.db"
    repo = _repo(db)
    repo.commit("main", [Write("/a", b"0")], author="t")
    p = spawn(HOLD_AND_DIE, str(db))
    try:
        assert p.stdout.readline().strip() == "holding", p.stderr.read()
        done = threading.Event()
        w = threading.Thread(target=lambda: (repo.commit("main", [Write("/a", b"1")], author="t"), done.set()))
        w.start()
        for _ in range(200):
            if repo.backend.counts.lock_waits:
                break
            done.wait(0.01)
        assert not done.is_set()
        os.kill(p.pid, signal.SIGKILL)
        w.join(30)
        assert done.is_set()
    finally:
        if p.poll() is None:
            p.kill()
        p.wait()
    assert repo.backend.counts.begin_attempts == 2  # the first commit's, and this one's
    assert repo.content(repo.entry_at(repo.head("main"), "/a").oid) == b"1"
    repo.backend.close()


async def test_no_caller_commit_runs_a_checkpoint_and_the_wal_stays_bounded(tmp_path: Path):
    """600 commits of 2 KB through a store (on the loop, inline): the committing connection never
    runs ``wal_checkpoint``; the handle's checkpoint thread copies the WAL behind it and restarts
    it, so the WAL file stays within 4 MB above the database while the store is open."""
    folder = tmp_path / "s"
    store = Store(str(folder))
    try:
        await store.write("/seed", "x")
        backend = store.repo.backend
        assert isinstance(backend, SqliteBackend)
        seen = _traced(backend)
        wal = Path(f"{backend.path}-wal")
        largest = 0
        for i in range(600):
            await store.write(f"/d/f{i % 40}", f"{i} " + "y" * 2000)
            if i % 20 == 0:
                largest = max(largest, wal.stat().st_size - backend.path.stat().st_size)
        counts = backend.counts
        assert not [s for s in seen if "checkpoint" in s.lower()], "a caller's commit ran a checkpoint"
        assert counts.checkpoints_in_commit == 0
        assert counts.checkpoints_due >= 5
    finally:
        store.close()
    assert counts.checkpoints_behind >= 1
    assert largest <= 4 << 20, f"WAL {largest / 1e6:.1f} MB above the database"


WRITER = """
import asyncio, json, os, sys, time
from pathlib import Path
from memrev import Store

folder, w, n, go = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]

async def main():
    store = Store(folder)
    backend = store.repo.backend
    wal = Path(f"{backend.path}-wal")
    print("ready", flush=True)
    while not os.path.exists(go):
        time.sleep(0.001)
    largest = 0
    for i in range(n):
        await store.write(f"/w{w}/f{i % 20}", f"{i} " + "z" * 1500)
        if i % 10 == 0:
            largest = max(largest, wal.stat().st_size - backend.path.stat().st_size)
    c = backend.counts
    report = {"begins": c.begin_attempts, "waits": c.lock_waits, "in_commit": c.checkpoints_in_commit,
              "due": c.checkpoints_due, "wal_above_db": largest}
    store.close()
    print(json.dumps(report), flush=True)

asyncio.run(main())
"""


@pytest.mark.slow
async def test_four_writer_processes_queue_and_keep_the_wal_bounded(tmp_path: Path):
    """Four processes x 250 commits on one store: each commit tries ``BEGIN IMMEDIATE`` about
    once (a waiter sleeps in the write queue; polling tried it every 50 µs to 1 ms), no commit
    runs a checkpoint, the WAL stays within 4 MB above the database, and every commit lands."""
    folder = tmp_path / "store"
    n, writers = 250, 4
    async with Store(str(folder)) as store:
        await store.write("/README", "four writers\n")
    go = tmp_path / "go"
    procs = [spawn(WRITER, str(folder), str(w), str(n), str(go)) for w in range(writers)]
    try:
        for p in procs:
            assert p.stdout.readline().strip() == "ready", p.stderr.read()
        go.touch()
        reports = []
        for p in procs:
            out = p.stdout.read()
            p.wait(timeout=300)
            assert p.returncode == 0, p.stderr.read()
            reports.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    commits = n * writers
    begins = sum(r["begins"] for r in reports)
    assert begins <= 1.1 * commits, reports
    assert sum(r["waits"] for r in reports) >= 1, "the writers never met: not a test of the queue"
    assert all(r["in_commit"] == 0 for r in reports), reports
    assert max(r["wal_above_db"] for r in reports) <= 4 << 20, reports
    async with Store(str(folder)) as store:
        for w in range(writers):
            assert len(await store.log(f"/w{w}/")) == n
        assert await store.fsck() == []


async def test_tasks_waiting_behind_another_writer_share_one_transaction(tmp_path: Path):
    """Eight tasks of one handle commit while another handle holds the write queue: their
    commits go to the worker, queue there, and share transactions once the queue is free."""
    folder = tmp_path / "s"
    store = Store(str(folder))
    try:
        await store.write("/seed", "x")
        backend = store.repo.backend
        assert isinstance(backend, SqliteBackend)
        other = SqliteBackend(backend.path)
        begins = backend.counts.begin_attempts
        with other.write():
            writes = [asyncio.ensure_future(store.write(f"/t/{i}", str(i))) for i in range(8)]
            for _ in range(200):  # until the first has queued in the kernel (bounded)
                await asyncio.sleep(0.005)
                if backend.counts.lock_waits:
                    break
        await asyncio.gather(*writes)
        other.close()
        assert backend.counts.begin_attempts - begins <= 2, "8 waiting writes: at most two transactions"
        assert [await store.read(f"/t/{i}") for i in range(8)] == [str(i) for i in range(8)]
        assert len(await store.log()) == 9
    finally:
        store.close()


def test_a_checkpoint_thread_that_falls_behind_holds_the_writer_back_off_the_loop(tmp_path: Path, monkeypatch):
    """The checkpoint thread stuck in a pass (a machine short of CPU, simulated) while the writer
    keeps waking it: a commit that may not wait (the event loop's) is refused with nothing
    written, so the store sends it to the worker, where it waits for the thread to catch up;
    no commit runs the checkpoint itself, and the WAL does not grow past its bound meanwhile."""
    from memrev.backends.sqlite import _Checkpointer

    gate = threading.Event()
    real = _Checkpointer._checkpoint

    def stuck(self, *args):  # noqa: ANN001, ANN002 - the private method's own arguments
        gate.wait(30)
        real(self, *args)

    monkeypatch.setattr(_Checkpointer, "_checkpoint", stuck)
    repo = _repo(tmp_path / "m.db")
    counts = repo.backend.counts
    refused = None
    try:
        for i in range(300):  # ~8 commits a wake: the thread is behind after 3 wakes
            try:
                repo.commit("main", [Write(f"/f{i % 10}", f"{i} ".encode() * 500)], author="t", wait=False)
            except memrev.TransientConflict:
                refused = i
                break
        assert refused is not None and counts.checkpoints_due >= 3
        assert len(repo.log(repo.head("main"))) == refused, "the refused commit wrote nothing"
        waiter = threading.Thread(target=lambda: repo.commit("main", [Write("/after", b"x")], author="t"))
        waiter.start()
        for _ in range(200):
            if counts.checkpoint_waits:
                break
            waiter.join(0.01)
        assert counts.checkpoint_waits == 1 and waiter.is_alive(), "the worker's commit waits for the thread"
        gate.set()
        waiter.join(10)
        assert not waiter.is_alive()
        assert counts.checkpoints_in_commit == 0
        assert len(repo.log(repo.head("main"))) == refused + 1
    finally:
        gate.set()
        repo.backend.close()


def test_writers_of_every_process_share_one_count_of_the_wal(tmp_path: Path):
    """Four handles (four write queues, as four processes have) commit in turn: the WAL's count
    is one, in the lock file, so the first checkpoint thread is woken once the four together
    wrote ~1 MB, not once each of them did (each counting its own woke all four at 4 MB)."""
    db = tmp_path / "m.db"
    repos = [_repo(db) for _ in range(4)]
    try:
        repos[0].commit("main", [Write("/seed", b"0")], author="t")
        lock = Path(f"{db}-lock")
        first_wake = None
        for i in range(120):
            repo = repos[i % 4]
            repo.commit(f"w{i % 4}", [Write(f"/f{i // 4 % 10}", f"{i} ".encode() + os.urandom(1000).hex().encode())], author="t")
            if first_wake is None and any(r.backend.counts.checkpoints_due for r in repos):
                first_wake = i + 1
        counted = int.from_bytes(lock.read_bytes()[:8], "little")
        assert first_wake is not None
        # a commit counts ~2 KB of payload and 12 pages (~51 KB): ~20 commits to 1 MB, 80 to 4 MB
        assert 18 <= first_wake <= 24, first_wake
        assert sum(r.backend.counts.checkpoints_due for r in repos) >= 2
        assert counted < 3 << 20  # the threads restarted the WAL and set the count back
        assert all(r.backend.counts.checkpoints_in_commit == 0 for r in repos)
    finally:
        for r in repos:
            r.backend.close()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # the thread dying of "a bug"
def test_a_failed_checkpoint_pass_leaves_the_thread_serving_the_next_ones(tmp_path: Path, monkeypatch):
    """A pass that fails (disk full, I/O error) is counted and the next one copies the WAL.
    Before, the thread ended on the first ``sqlite3.Error``: the handle never checkpointed
    again (the WAL grew to SQLite's net, 40 MB) and, the pass owed never cleared, every other
    commit waited 1 s for a thread that was gone. One that dies of anything else is started
    again by the next wake."""
    from memrev.backends.sqlite import _Checkpointer

    real = _Checkpointer._checkpoint
    failures = [sqlite3.OperationalError("disk I/O error"), RuntimeError("a bug")]

    def failing(self, *args):  # noqa: ANN001, ANN002 - the private method's own arguments
        if failures:
            raise failures.pop(0)
        real(self, *args)

    monkeypatch.setattr(_Checkpointer, "_checkpoint", failing)
    repo = _repo(tmp_path / "m.db")
    counts = repo.backend.counts
    try:
        for i in range(200):  # ~2 MB of WAL a 60 commits: a few passes after both failures
            repo.commit("main", [Write(f"/f{i % 10}", os.urandom(8000))], author="t")
            if counts.checkpoints_behind >= 4:
                break
        assert not failures, "the thread never ran"
        assert counts.checkpoint_errors == 1
        assert counts.checkpoints_behind >= 4, "the thread stopped serving passes after one failed"
        assert counts.checkpoint_waits <= 2
    finally:
        repo.backend.close()



def _pass_beside_another_checkpoint(db: Path) -> int:
    """One try of the test below; how many of its passes found the other checkpoint running."""
    import time

    from memrev.backends.sqlite import WriteCounts, _Checkpointer, _uri, _write_queue

    _repo(db).backend.close()
    raw = sqlite3.connect(db, isolation_level=None)
    raw.execute("PRAGMA wal_autocheckpoint=0")  # nothing copied: the reader below reads the WAL
    raw.execute("CREATE TABLE scratch(x)")
    raw.execute("BEGIN")
    for _ in range(3000):  # ~9 MB of WAL
        raw.execute("INSERT INTO scratch VALUES (randomblob(3000))")
    raw.execute("COMMIT")
    queue = _write_queue(db)
    assert queue is not None
    reader = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM scratch").fetchone()
    other = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
    other.execute("PRAGMA busy_timeout=5000")  # copies the WAL, then waits for the reader, holding the lock
    calling = threading.Event()
    t = threading.Thread(target=lambda: (calling.set(), other.execute("PRAGMA wal_checkpoint(RESTART)").fetchall()))
    t.start()
    calling.wait(10)
    time.sleep(0.3)  # its copy under way or done, its wait begun (the busy count says whether)
    conn = sqlite3.connect(_uri(db, "mode=rw"), uri=True, timeout=0, isolation_level=None, check_same_thread=False)
    checkpointer = _Checkpointer(_uri(db, "mode=rw"), db, WriteCounts())
    busy = 0
    try:
        for _ in range(5):
            assert queue.try_take()
            queue.set_count(2 << 20)
            queue.release()
            found = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()[0]
            checkpointer._checkpoint(conn, queue, 4096)
            if found:
                busy += 1
                assert int.from_bytes(Path(f"{db}-lock").read_bytes()[:8], "little") == 2 << 20
    finally:
        reader.execute("COMMIT")
        t.join(10)
        for c in (conn, other, reader, raw):  # raw last: the last connection to close copies the WAL in
            c.close()
        queue.close()
    return busy


@pytest.mark.slow  # ~2.5 s: 9 MB of WAL, copied
def test_a_pass_that_finds_another_checkpoint_running_leaves_the_shared_count(tmp_path: Path):
    """``wal_checkpoint(PASSIVE)`` answers ``(1, -1, -1)`` while another connection's checkpoint
    holds SQLite's checkpoint lock: a pass must not take that for an empty WAL and set the
    processes' shared count to 0 (it did: the next wake came 1 MB late, the pressure mark too).
    Up to three tries, in case this machine let a probe take the lock before the other did."""
    for attempt in range(3):
        if _pass_beside_another_checkpoint(tmp_path / f"m{attempt}.db"):
            return
    raise AssertionError("the other connection's checkpoint never held the lock: not a test of this")


def test_a_commit_past_the_pressure_mark_rereads_the_count_before_it_waits(tmp_path: Path):
    """The count this handle saw at its last commit was past 3 MB, but another process's
    thread has restarted the WAL since (the shared count is 0): the commit does not wait."""
    repo = _repo(tmp_path / "m.db")
    try:
        repo.commit("main", [Write("/a", b"0")], author="t")
        backend = repo.backend
        assert backend._queue is not None and backend._queue.try_take()
        backend._queue.set_count(0)
        backend._queue.release()
        backend._shared_wal = 4 << 20
        repo.commit("main", [Write("/a", b"1")], author="t")
        assert backend.counts.checkpoint_waits == 0
        backend._shared_wal = 4 << 20  # and with the count still past the mark, it waits, once
        assert backend._queue.try_take()
        backend._queue.set_count(4 << 20)
        backend._queue.release()
        repo.commit("main", [Write("/a", b"2")], author="t")
        repo.commit("main", [Write("/a", b"3")], author="t")
        assert backend.counts.checkpoint_waits == 1
    finally:
        repo.backend.close()
