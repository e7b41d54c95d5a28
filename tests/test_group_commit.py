"""Commit path: group commit, waiting for the write lock, statements per commit.

Speed targets live in bench/run.py; these tests count work (statements,
lock attempts, commits), never time.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

from memrev.backends.sqlite import SqliteBackend
from memrev.repo import Repository


def _traced(backend: SqliteBackend) -> list[str]:
    seen: list[str] = []
    backend._conn.set_trace_callback(seen.append)
    return seen


def test_a_waiting_writer_tries_the_lock_again_itself(tmp_path: Path):
    """SQLite's busy handler sleeps up to 100 ms between tries; memrev polls BEGIN IMMEDIATE
    itself (50 µs growing to 1 ms), so a waiting writer takes the lock soon after it is free."""
    repo = Repository(SqliteBackend(tmp_path / "m.db"))
    repo.commit("main", [("write", "/a", b"1")], author="t")
    seen = _traced(repo.backend)
    holder = sqlite3.connect(tmp_path / "m.db", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    done = threading.Event()
    writer = threading.Thread(target=lambda: (repo.commit("main", [("write", "/a", b"2")], author="t"), done.set()))
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
