"""What one commit costs on SQLite, counted (statements, WAL frames, checkpoints), never timed.

Issue 14: W1's commit (rewrite the 2 KB ``/memory/working.md`` at the head)
against one bare WAL transaction, and several writer processes on one store.
Each test counts work; the speed itself is measured by ``bench/run.py``.
"""

from __future__ import annotations

import json
import os
import random
import sqlite3
import struct
from pathlib import Path

import pytest

from helpers import spawn
from memrev import VersionedStore
from memrev.backends import open_backend
from memrev.backends import sqlite as sqlite_backend
from memrev.core import delta
from memrev.repo.ops import Write
from memrev.repo.repository import Repository

pytestmark = pytest.mark.anyio

W1_PATH = "/memory/working.md"


def _w1_versions(n: int) -> list[str]:
    """W1's document: ~50 lines of which 2-3 change per version (as bench/data.py)."""
    rng = random.Random(14)
    lines = [f"- note {i}: {rng.random():.12f} and some words to make a line\n" for i in range(50)]
    out = []
    for _ in range(n):
        for _ in range(rng.choice((2, 3))):
            lines[rng.randrange(len(lines))] = f"- changed: {rng.random():.12f} and some other words\n"
        out.append("".join(lines))
    return out


def _wal_frames(db: Path) -> int:
    size = os.path.getsize(f"{db}-wal")
    return 0 if size == 0 else (size - 32) // (4096 + 24)


# ------------------------------------------------------------ one W1 commit


async def test_a_w1_commit_is_twelve_statements_and_about_twelve_wal_frames(tmp_path: Path, monkeypatch):
    """12 statements (13 before: the path's previous change was read back from the
    head index although the commit before had just written it; the tree nodes are
    one executemany now) and at most 13 pages written to the WAL per commit
    (measured 12.1: two tree nodes, the blob row and its id index, the commit row
    and its id index, the ref, the head row, the change rows and their seq index;
    the bare ``BEGIN; INSERT; COMMIT`` writes 3)."""
    versions = _w1_versions(60)
    async with VersionedStore(tmp_path / "s") as store:
        for v in versions[:10]:
            await store.write(W1_PATH, v)
        backend = store._repo.backend
        conn = backend._conn
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        # no checkpoint during the 50 commits counted here (the WAL frames are counted)
        monkeypatch.setattr(sqlite_backend, "_CHECKPOINT_BYTES", 1 << 40)
        monkeypatch.setattr(sqlite_backend, "_WAL_PRESSURE_BYTES", 1 << 40)
        seen: list[str] = []
        conn.set_trace_callback(seen.append)
        for v in versions[10:]:
            await store.write(W1_PATH, v)
        conn.set_trace_callback(None)
        frames = _wal_frames(backend.path)
    commits = len(versions) - 10
    assert sum(s == "BEGIN IMMEDIATE" for s in seen) == commits
    assert not [s for s in seen if "wal_checkpoint" in s], "no checkpoint in 50 W1 commits (~600 pages)"
    # executemany traces each row: the file's and the directory key's head and change rows count 2 each
    assert len(seen) == commits * 12, seen[:14]
    assert frames <= commits * 13, f"{frames / commits:.1f} WAL frames per commit"


def _reference_delta(old: bytes, new: bytes) -> list:
    """delta.compute as it was (line matches, then a second coalescing pass): the
    operations, hence blob ids, must not change with the one-pass version."""
    p = delta.common_prefix(old, new)
    s = delta.common_suffix(old, new, min(len(old), len(new)) - p)
    ops: list = [(0, 0, p)] if p else []
    old_mid, new_mid = old[p : len(old) - s], new[p : len(new) - s]
    if old_mid and new_mid:
        where: dict[bytes, int] = {}
        at = p
        for line in old_mid.splitlines(keepends=True):
            where.setdefault(line, at)
            at += len(line)
        for line in new_mid.splitlines(keepends=True):
            hit = where.get(line)
            ops.append((0, hit, len(line)) if hit is not None and len(line) > 2 else (1, 0, line))
    elif new_mid:
        ops.append((1, 0, new_mid))
    if s:
        ops.append((0, len(old) - s, s))
    out: list = []
    pending: list[bytes] = []
    for op in ops:
        if op[0] == 1:
            pending.append(op[2])
            continue
        if pending:
            out.append((1, 0, b"".join(pending)))
            pending = []
        if out and out[-1][0] == 0 and out[-1][1] + out[-1][2] == op[1]:
            out[-1] = (0, out[-1][1], out[-1][2] + op[2])
        else:
            out.append(op)
    if pending:
        out.append((1, 0, b"".join(pending)))
    return out


def test_one_pass_delta_gives_the_same_operations():
    rng = random.Random(7)
    pool = [b"\n", b"a\n", b"ab\n", b"abc\n", b"same line\n", b"x", b"tail", b"\r\n", b""]
    for _ in range(5000):
        old = b"".join(rng.choice(pool) for _ in range(rng.randrange(12)))
        new = b"".join(rng.choice(pool) for _ in range(rng.randrange(12)))
        if rng.random() < 0.3:
            new = old + new
        got = delta.compute(old, new)
        assert got == _reference_delta(old, new), (old, new)
        assert delta.apply(old, delta.encode(got), len(new)) == new
    versions = [v.encode() for v in _w1_versions(30)]
    for a, b in zip(versions, versions[1:]):
        assert delta.compute(a, b) == _reference_delta(a, b)


# ------------------------------------------------------------ checkpoints


def _backfilled(db: Path) -> int:
    """Frames of the WAL copied into the database so far: ``nBackfill`` of the
    wal-index (the -shm file: two 48-byte headers, then the checkpoint info;
    https://www.sqlite.org/walformat.html)."""
    with open(f"{db}-shm", "rb") as f:
        return struct.unpack("=I", f.read(100)[96:100])[0]


def test_a_reader_around_every_commit_does_not_make_every_commit_checkpoint(tmp_path: Path):
    """Another process reading while each commit starts keeps the WAL from
    restarting. SQLite's autocheckpoint then fired on every commit once the WAL
    held 1,000 frames, each copy with two fsyncs: 299 checkpoints in 400 commits,
    and several writer processes (which read each other's WAL) wrote less than
    one. The writer's checkpoint thread now copies once per ~256 pages of its
    commits (issue 26: off the caller's path, so more often and smaller)."""
    repo = Repository(open_backend(str(tmp_path / "s")))
    db = repo.backend.path
    reader = sqlite3.connect(db, isolation_level=None)
    copies, last = 0, _backfilled(db)
    try:
        for i in range(400):
            reader.execute("BEGIN")
            reader.execute("SELECT count(*) FROM refs").fetchall()
            repo.commit("main", [Write(W1_PATH, f"{i}\n".encode() * 300)], author="t")
            reader.execute("COMMIT")
            now = _backfilled(db)
            copies += now != last
            last = now
    finally:
        reader.close()
        repo.backend.close()
    # 400 commits of ~13 pages and a 1.2 KB blob: ~5,600 pages, about 58 passes of the thread
    assert copies <= 100, f"{copies} checkpoints in 400 commits"


@pytest.mark.slow  # 0.7 s in the quick loop: 220 commits, 20 of them of 256 KB
def test_the_writer_checkpoints_by_the_pages_its_commits_wrote(tmp_path: Path):
    """Small commits: the checkpoint thread is woken once the WAL holds ~256 pages since its
    restart (~21 W1 commits), not sooner, and the writers wait for it before the WAL holds 768;
    big commits sooner (their payload counts), where checkpointing every N commits would let 20
    commits of 256 KB pile up 5 MB. The committing connection itself never runs a checkpoint (issue 26)."""
    repo = Repository(open_backend(str(tmp_path / "s")))
    conn = repo.backend._conn
    seen: list[str] = []
    conn.set_trace_callback(seen.append)
    try:
        # SQLite's own checkpoint is only a net, far above the writer's ~1,000 pages
        assert conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] >= 10_000
        counts = repo.backend.counts
        for v in _w1_versions(200):
            repo.commit("main", [Write(W1_PATH, v.encode())], author="t")
        small = counts.checkpoints_due
        rng = random.Random(1)
        for i in range(20):  # 20 commits of 256 KB that does not compress
            repo.commit("main", [Write(f"/big/{i}", rng.randbytes(256 << 10))], author="t")
        big = counts.checkpoints_due - small
    finally:
        conn.set_trace_callback(None)
        repo.backend.close()
    assert not [s for s in seen if "wal_checkpoint" in s], "a committing caller ran a checkpoint"
    assert counts.checkpoints_in_commit == 0
    # 200 commits x 12 pages: 2,400 pages, a wake-up per 256 to 768 (the thread's lag, bounded by the pressure mark)
    assert 3 <= small <= 10, small
    assert 2 <= big <= 7, big  # 20 commits x (64 pages of payload + 12): 1,520 pages


def test_whole_store_work_checkpoints_when_done(tmp_path: Path):
    """reindex and gc rewrite or delete rows the page estimate does not count: the
    WAL they leave is copied into the database file when they commit."""
    from memrev.repo.indexes import reindex

    repo = Repository(open_backend(str(tmp_path / "s")))
    conn = repo.backend._conn
    try:
        for v in _w1_versions(20):
            repo.commit("main", [Write(W1_PATH, v.encode())], author="t")
        seen: list[str] = []
        conn.set_trace_callback(seen.append)
        reindex(repo)
        conn.set_trace_callback(None)
    finally:
        repo.backend.close()
    assert sum("wal_checkpoint" in s for s in seen) == 1


# ------------------------------------------------------------ several writer processes

WRITER = r"""
import asyncio, json, os, sys, time
import memrev.repo.commit
from memrev import VersionedStore

folder, w, n, go = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
retries = []
real_time = memrev.repo.commit.time

class CountingTime:  # Repository.commit's back-off after TransientConflict, counted
    time_ns = staticmethod(real_time.time_ns)
    @staticmethod
    def sleep(s):
        retries.append(s)
        real_time.sleep(s)

memrev.repo.commit.time = CountingTime

async def main():
    store = VersionedStore(folder, author=f"w{w}")
    conn = store._repo.backend._conn
    statements = []
    conn.set_trace_callback(statements.append)
    try:
        print("ready", flush=True)
        while not os.path.exists(go):
            time.sleep(0.001)
        for i in range(n):
            await store.write(f"/conc/w{w}.json", json.dumps({"w": w, "i": i, "pad": "x" * 200}))
        conn.set_trace_callback(None)
        print(json.dumps({
            "retries": len(retries),
            "checkpoints": sum("wal_checkpoint" in s for s in statements),
            "autocheckpoint": conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0],
        }), flush=True)
    finally:
        store.close()

asyncio.run(main())
"""


@pytest.mark.slow
async def test_four_writer_processes_neither_back_off_nor_checkpoint_per_commit(tmp_path: Path):
    """Four processes committing to one store at once: every commit lands, no
    writer falls back to ``Repository.commit``'s sleeping retry (a waiting writer
    polls ``BEGIN IMMEDIATE``), and checkpoints follow the pages written, not the
    number of commits: SQLite's per-commit autocheckpoint is only a net in every
    writer, 10,000 frames up, which these ~3,800 pages never reach."""
    folder = tmp_path / "store"
    n, writers = 80, 4
    async with VersionedStore(str(folder)) as store:
        await store.write("/conc/README", "independent writers\n")
    go = tmp_path / "go"
    procs = [spawn(WRITER, str(folder), str(w), str(n), str(go)) for w in range(writers)]
    try:
        for p in procs:
            assert p.stdout.readline().strip() == "ready", p.stderr.read()
        go.touch()
        reports = []
        for p in procs:
            out = p.stdout.read()
            p.wait(timeout=120)
            assert p.returncode == 0, p.stderr.read()
            reports.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert all(r["autocheckpoint"] >= 10_000 for r in reports), reports
    assert sum(r["retries"] for r in reports) == 0, reports
    # 320 commits of ~12 pages: ~3,800 pages; each writer checkpoints after its own ~1,000
    assert sum(r["checkpoints"] for r in reports) <= writers, reports
    async with VersionedStore(str(folder)) as store:
        for w in range(writers):
            assert len(await store.log(f"/conc/w{w}.json")) == n
            assert json.loads(await store.read(f"/conc/w{w}.json"))["i"] == n - 1
        assert await store.fsck() == []



@pytest.mark.slow
def test_writers_too_small_to_checkpoint_alone_still_bound_the_wal(tmp_path: Path):
    """One handle keeps the store open (so no closing connection checkpoints) while
    600 short-lived handles commit 3 small commits each: none writes the ~1,000
    pages after which a writer checkpoints its own commits, so the WAL grew
    without bound (66 MB). A handle that opens on a WAL grown past
    journal_size_limit checkpoints after its first commit: the WAL stays a few MB."""
    folder = str(tmp_path / "s")
    keeper = Repository(open_backend(folder))
    wal = Path(f"{keeper.backend.path}-wal")
    largest = 0
    try:
        keeper.commit("main", [Write("/seed.md", b"seed\n")], author="t")
        for i in range(600):
            short = Repository(open_backend(folder))
            try:
                for j in range(3):
                    short.commit("main", [Write(f"/f{j}.md", f"{i} {j}\n".encode() * 50)], author="t")
            finally:
                short.backend.close()
            largest = max(largest, wal.stat().st_size)
    finally:
        keeper.backend.close()
    assert largest <= 6 << 20, f"WAL reached {largest / 1e6:.1f} MB"
