"""``VersionedStore("postgresql://...")`` on a real, throwaway server (``memrev.testing.fixtures``).

* (the KnowledgeStore semantics against ag2's ``MemoryKnowledgeStore`` and
  atomic transactions are checked by the conformance suite, TestPostgres in
  test_conformance.py);
* the history API, bad input, schema versioning and foreign databases;
* the backend's locking primitives (``lock_ref`` on a branch that does not
  exist yet, compare-and-swap, append runs shared by two branches);
* ``on_change`` pushed from another process by LISTEN/NOTIFY;
* 4 processes (standing for 4 hosts, one connection each) appending to one
  path and writing distinct paths at once.
"""

from __future__ import annotations

import json
import statistics
import threading
import time
from collections import Counter

import anyio
import pytest

import memrev
from helpers import spawn
from memrev import VersionedStore

pytestmark = pytest.mark.anyio

def _psql(url: str, sql: str) -> list[tuple]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute(sql)
        return cur.fetchall() if cur.description else []


# --------------------------------------------------------------------------
# History
# --------------------------------------------------------------------------


async def test_history_log_show_diff_and_reads_at_revisions(pg_url):
    async with VersionedStore(pg_url, author="alice") as s:
        await s.write("/memory/working.md", "goal: A\nstep 1\n", message="first", meta={"turn": 1, "x": [1, None]})
        await s.write("/memory/working.md", "goal: A\nstep 1\nstep 2\n")
        assert await s.append("/log/s.jsonl", '{"e": 1}\n') == 0
        assert await s.append("/log/s.jsonl", '{"e": "é"}\n') == 9
        await s.write("/memory/working.md", "goal: B\nstep 1\nstep 2\n")
        async with s.transaction(message="batch"):
            await s.write("/notes/a", "A")
            await s.write("/notes/b", "B")
            assert await s.append("/log/s.jsonl", "tail\n") == 21
        await s.delete("/notes/a", message="drop a")

        log = await s.log()
        assert len(log) == 7
        assert [c.message for c in (log[0], log[1], log[-1])] == ["drop a", "batch", "first"]
        assert log[-1].meta == {"turn": 1, "x": [1, None]} and log[-1].parents == ()
        assert all(c.author == "alice" for c in log)
        assert all(newer.parents == (older.id,) for newer, older in zip(log, log[1:]))
        assert log[1].paths == ("/log/s.jsonl", "/notes/a", "/notes/b")
        for c in log:
            assert await s.show(c.id[:7]) == c
            assert await s.resolve(c.id[:12]) == c.id
        assert await s.resolve("HEAD") == await s.resolve("main") == log[0].id
        assert await s.resolve("HEAD~6") == log[-1].id
        assert await s.resolve(f"{log[0].id}~2") == log[2].id

        # per-path log and reads at every revision of working.md
        wlog = await s.log("/memory/working.md")
        assert [c.id for c in wlog] == [log[2].id, log[5].id, log[6].id]
        versions = ["goal: B\nstep 1\nstep 2\n", "goal: A\nstep 1\nstep 2\n", "goal: A\nstep 1\n"]
        for c, text in zip(wlog, versions):
            assert await s.read("/memory/working.md", rev=c.id) == text
        assert await s.read("/notes/a", rev="HEAD~1") == "A"
        assert await s.read("/notes/a") is None
        assert await s.exists("/notes/a", rev="HEAD~1") and not await s.exists("/notes/a")
        assert await s.list("/notes", rev="HEAD~1") == ["a", "b"]
        assert await s.list("/notes") == ["b"]
        assert await s.list("/", rev="HEAD~6") == ["memory/"]
        assert await s.read_range("/log/s.jsonl", 9, 21, rev="HEAD~1") == '{"e": "é"}\n'
        assert await s.read_range("/log/s.jsonl", 21) == "tail\n"

        # diff of two successive versions of working.md
        (change,) = await s.diff(wlog[1].id, wlog[0].id, "/memory/working.md")
        assert (change.path, change.status) == ("/memory/working.md", "modified")
        assert "-goal: A\n+goal: B\n" in change.diff
        changes = await s.diff("HEAD~6", "HEAD")
        assert [(c.path, c.status) for c in changes] == [
            ("/log/s.jsonl", "added"),
            ("/memory/working.md", "modified"),
            ("/notes/b", "added"),
        ]
        assert [c.status for c in await s.diff("HEAD~1", "HEAD", "/notes")] == ["deleted"]
        assert await s.fsck() == []


async def test_second_handle_sees_commits_and_schema_is_created_once(pg_url):
    a = VersionedStore(pg_url, author="a")
    b = VersionedStore(pg_url, author="b", durability="full")
    try:
        await a.write("/x", "1")
        await b.write("/y", "2")
        await a.append("/x", "3")
        assert await b.read("/x") == "13"
        assert [c.author for c in await b.log()] == ["a", "b", "a"]
        for store in (a, b):
            conn = store.repo.backend._conn
            assert conn.execute("SHOW synchronous_commit").fetchone() == ("on",)
        assert _psql(pg_url, "SELECT version FROM memrev_schema") == [(len(memrev.backends.postgres.MIGRATIONS),)]
    finally:
        a.close()
        b.close()


# --------------------------------------------------------------------------
# Bad input
# --------------------------------------------------------------------------


async def test_bad_input_raises_typed_errors_and_writes_nothing(pg_url):
    async with VersionedStore(pg_url) as s:
        await s.write("/ok", "fine")
        for path in ["/a\x00b", "/a\nb", "/x/../y", 42]:
            with pytest.raises(memrev.InvalidPath):
                await s.write(path, "x")
        for content in [b"bytes", 3, None]:
            with pytest.raises(memrev.InvalidContent):
                await s.append("/ok", content)
        with pytest.raises(memrev.InvalidContent):
            await s.write("/ok", "\ud800")
        for rev in ["nope", "0000000", "f" * 40, "HEAD~5", "HEAD~" + "9" * 30, ""]:
            with pytest.raises(memrev.RevisionNotFound):
                await s.read("/ok", rev=rev)
        assert len(await s.log()) == 1 and await s.read("/ok") == "fine"


def test_schema_too_new_is_refused(pg_url):
    VersionedStore(pg_url).close()
    _psql(pg_url, "UPDATE memrev_schema SET version = 99")
    with pytest.raises(memrev.SchemaTooNew):
        VersionedStore(pg_url)


def test_database_of_another_application_is_refused_untouched(pg_url):
    _psql(pg_url, "CREATE TABLE invoices(id int)")
    with pytest.raises(memrev.NotAMemrevStore):
        VersionedStore(pg_url)
    tables = _psql(pg_url, "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
    assert tables == [("invoices",)]


async def test_one_store_per_schema_via_search_path(pg_url):
    """The store lives in the first schema of search_path; others in the same database stay apart."""
    _psql(pg_url, "CREATE TABLE invoices(id int); CREATE SCHEMA agent1; CREATE SCHEMA agent2")
    urls = [f"{pg_url}?options=-csearch_path%3D{name}" for name in ("agent1", "agent2")]
    async with VersionedStore(urls[0]) as s1, VersionedStore(urls[1]) as s2:
        await s1.write("/who", "one")
        await s2.write("/who", "two")
        assert (await s1.read("/who"), await s2.read("/who")) == ("one", "two")
        assert len(await s1.log()) == len(await s2.log()) == 1


@pytest.mark.slow  # measured >= 0.3 s: kept out of the quick loop
async def test_store_survives_the_server_dropping_its_connections(pg_url):
    """After a restart or failover, reads and new commits reconnect; on_change listens again."""
    async with VersionedStore(pg_url, poll_interval=5.0) as s:
        await s.write("/a", "1")
        got: list[str] = []

        async def cb(path: str) -> None:
            got.append(path)

        await s.on_change("/", cb)
        await anyio.sleep(0.3)
        killed = _psql(
            pg_url,
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE application_name = 'memrev' AND datname = current_database()",
        )
        assert len(killed) == 2  # the store's connection and its LISTEN connection
        assert await s.read("/a") == "1"  # a read is retried on a new connection
        await s.write("/b", "2")  # BEGIN on the dead connection is retried too
        assert [c.paths for c in await s.log()] == [("/b",), ("/a",)]
        async with VersionedStore(pg_url) as other:  # a change from elsewhere is still pushed
            await other.write("/c", "3")
        with anyio.fail_after(2.0):
            while "/c" not in got:
                await anyio.sleep(0.01)


async def test_move_a_sqlite_store_to_postgres_by_bundle(pg_url, tmp_path):
    """export from SQLite, import into PostgreSQL: same commit ids, same answers, fsck clean."""
    async with VersionedStore(tmp_path / "state") as old:
        await old.write("/memory/working.md", "v1\n")
        for i in range(4):
            await old.append("/log/s.jsonl", f"{i} é\n")
        await old.write("/memory/working.md", "v2\n" + "context\n" * 40)
        (await old.branch("side")).close()
        await old.tag("t1")
        await old.delete("/log")
        await old.export_bundle(tmp_path / "state.memrev")
        ids = [c.id for c in await old.log()]
    async with VersionedStore(pg_url) as new:
        await new.import_bundle(tmp_path / "state.memrev")
        assert [c.id for c in await new.log()] == ids
        assert set(await new.branches()) == {"main", "side"} and set(await new.tags()) == {"t1"}
        assert await new.read_range("/log/s.jsonl", 5, rev="HEAD~1") == "1 é\n2 é\n3 é\n"
        assert await new.read("/memory/working.md") == "v2\n" + "context\n" * 40
        assert len(await new.log("/memory/working.md")) == 2
        assert await new.fsck() == []
        await new.append("/log/s.jsonl", "after the move\n")


def test_unreachable_server_is_a_clear_memrev_error(pg_server):
    with pytest.raises(memrev.MemrevError, match="cannot connect"):
        VersionedStore("postgresql://memrev@127.0.0.1:1/nothing?connect_timeout=2")


# --------------------------------------------------------------------------
# Backend primitives
# --------------------------------------------------------------------------


def _backend(url: str):
    from memrev.backends.postgres import PostgresBackend

    return PostgresBackend(url)


@pytest.mark.slow  # measured >= 0.3 s: kept out of the quick loop
def test_lock_ref_serializes_the_first_commits_of_a_new_branch(pg_url):
    a, b = _backend(pg_url), _backend(pg_url)
    seen: list = []
    try:
        with a.write():
            assert a.lock_ref("refs/heads/new") is None

            def other() -> None:
                with b.write():
                    old = b.lock_ref("refs/heads/new")  # waits for a's transaction
                    seen.append(old)
                    seen.append(b.set_ref_if_equals("refs/heads/new", old, b"\x02" * 20))

            t = threading.Thread(target=other)
            t.start()
            time.sleep(0.3)
            assert seen == [], "a second writer got the branch lock while the first held it"
            assert a.set_ref_if_equals("refs/heads/new", None, b"\x01" * 20)
        t.join(10)
        assert seen == [b"\x01" * 20, True], "the second writer must see the first one's commit"
        assert a.get_ref("refs/heads/new") == b"\x02" * 20
        # a compare-and-swap with a stale or a missing old value fails and changes nothing
        assert not a.set_ref_if_equals("refs/heads/new", b"\x01" * 20, b"\x03" * 20)
        assert not a.set_ref_if_equals("refs/heads/new", None, b"\x03" * 20)
        assert a.get_ref("refs/heads/new") == b"\x02" * 20
        assert a.list_refs("refs/heads/") == {"refs/heads/new": b"\x02" * 20}
        assert a.list_refs("refs/heads/n_") == {} and a.list_refs("refs/tags/") == {}
    finally:
        a.close()
        b.close()


@pytest.mark.slow  # measured >= 0.3 s: kept out of the quick loop
def test_two_branches_extending_one_append_run_do_not_lose_a_piece(pg_url):
    from memrev.backends.base import BlobRow

    a, b = _backend(pg_url), _backend(pg_url)
    lineage = b"L" * 20
    seen: list = []
    try:
        with a.write():
            assert not a.lineage_has(lineage, 10)
            a.put_blob(BlobRow(b"A" * 20, "A", b"B" * 20, lineage, 10, 15, 1, b"r12345"))

            def other() -> None:
                with b.write():
                    seen.append(b.lineage_has(lineage, 10))  # waits for a, then sees a's piece

            t = threading.Thread(target=other)
            t.start()
            time.sleep(0.3)
            assert seen == []
        t.join(10)
        assert seen == [True]
        # a piece claiming the same place in the run under another id is an error, not dropped silently
        with pytest.raises(memrev.ConcurrentUpdate):
            with b.write():
                b.put_blob(BlobRow(b"C" * 20, "A", b"B" * 20, lineage, 10, 12, 1, b"r99"))
        assert b.get_blob(b"C" * 20) is None and a.get_blob(b"A" * 20) is not None
    finally:
        a.close()
        b.close()


@pytest.mark.slow  # measured >= 0.3 s: kept out of the quick loop
async def test_two_branches_appending_to_one_log_at_once(pg_url):
    """Branches share the append run of /log; concurrent appends on both lose nothing."""
    async with VersionedStore(pg_url) as main:
        for i in range(3):
            await main.append("/log", f"base {i}\n")
        (await main.branch("side")).close()
    n = 60
    errors: list[BaseException] = []

    def worker(branch: str) -> None:
        async def run() -> None:
            async with VersionedStore(pg_url, branch=branch, author=branch) as s:
                for i in range(n):
                    await s.append("/log", f"{branch} {i}\n")

        try:
            anyio.run(run)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(b,)) for b in ("main", "side")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []
    base = "".join(f"base {i}\n" for i in range(3))
    async with VersionedStore(pg_url) as main, VersionedStore(pg_url, branch="side") as side:
        for s, name in ((main, "main"), (side, "side")):
            assert await s.read("/log") == base + "".join(f"{name} {i}\n" for i in range(n))
            assert await s.read_range("/log", len(base), len(base) + len(f"{name} 0\n")) == f"{name} 0\n"
        assert await main.fsck() == []


async def test_gc_on_postgres(pg_url):
    async with VersionedStore(pg_url) as s:
        await s.write("/keep", "k")
        side = await s.branch("doomed")
        for i in range(5):
            await side.write(f"/tmp/{i}", "x" * 200 + str(i))
        side.close()
        await s.delete_branch("doomed")
        removed = await s.gc(keep_seconds=0)
        assert removed["commits"] == 5 and removed["blobs"] >= 5, removed
        assert await s.fsck() == []
        assert await s.read("/keep") == "k"
        await s.write("/after", "gc")
        assert len(await s.log()) == 2


def test_gc_refuses_when_a_commit_lands_while_it_computes(pg_url):
    """A commit may reuse an unreachable blob; gc must not delete under it."""
    a, b = _backend(pg_url), _backend(pg_url)
    try:
        with b.write():
            assert b.set_ref_if_equals("refs/heads/main", None, b"\x01" * 20)
        with pytest.raises(memrev.ConcurrentUpdate):
            with a.write():
                keep = set(a.list_refs("refs/").values())  # gc computes what is reachable ...
                with b.write():  # ... while another host commits
                    assert b.set_ref_if_equals("refs/heads/main", b"\x01" * 20, b"\x02" * 20)
                a.delete_unreachable("commits", keep)
        with a.write(exclusive=True):  # gc's own lock: other writers wait, nothing can land
            assert a.delete_unreachable("commits", set(a.list_refs("refs/").values())) == 0
    finally:
        a.close()
        b.close()


@pytest.mark.slow  # measured >= 0.3 s: kept out of the quick loop
def test_wait_for_change(pg_url):
    a, b = _backend(pg_url), _backend(pg_url)
    try:
        assert a.wait_for_change(5.0) is True  # LISTEN just established: "look now"
        t0 = time.monotonic()
        assert a.wait_for_change(0.2) is False
        assert 0.15 < time.monotonic() - t0 < 2.0
        with b.write():
            b.set_ref_if_equals("refs/heads/main", None, b"\x01" * 20)
        t0 = time.monotonic()
        assert a.wait_for_change(5.0) is True
        assert time.monotonic() - t0 < 1.0
        # a compare-and-swap that fails notifies nobody; a rolled-back move neither
        b.set_ref_if_equals("refs/heads/main", b"\x09" * 20, b"\x02" * 20)
        with pytest.raises(RuntimeError):
            with b.write():
                b.set_ref_if_equals("refs/heads/main", b"\x01" * 20, b"\x02" * 20)
                raise RuntimeError("roll back")
        assert a.wait_for_change(0.3) is False
        # close() from another thread wakes a waiter at once
        done: list[float] = []
        t = threading.Thread(target=lambda: done.append(a.wait_for_change(30.0)))
        t.start()
        time.sleep(0.2)
        t0 = time.monotonic()
        a.close()
        t.join(5)
        assert done == [False] and time.monotonic() - t0 < 2.0
        assert a.wait_for_change(1.0) is False
    finally:
        a.close()
        b.close()


# --------------------------------------------------------------------------
# on_change from another process
# --------------------------------------------------------------------------

REMOTE_WRITER = r"""
import asyncio, sys, time
from memrev import VersionedStore

async def main():
    store = VersionedStore(sys.argv[1], author="remote")
    try:
        print("ready", flush=True)
        for cmd in sys.stdin:
            op, path, *content = cmd.strip().split(" ", 2)
            if op == "quit":
                break
            if op == "write":
                await store.write(path, content[0])
            elif op == "append":
                await store.append(path, content[0])
            elif op == "delete":
                await store.delete(path)
            print(f"done {time.monotonic()!r}", flush=True)
    finally:
        store.close()

asyncio.run(main())
"""


@pytest.mark.slow
async def test_on_change_from_another_process_is_pushed(pg_url):
    # poll_interval 5 s: only a pushed notification can arrive within the bound
    store = VersionedStore(pg_url, poll_interval=5.0)
    await store.write("/seed", "x")
    got: list[tuple[str, float]] = []

    async def cb(path: str) -> None:
        got.append((path, time.monotonic()))

    sub = await store.on_change("/watched", cb)
    remote = spawn(REMOTE_WRITER, pg_url, stdin=True)

    async def do(cmd: str) -> float:
        remote.stdin.write(cmd + "\n")
        remote.stdin.flush()
        line = await anyio.to_thread.run_sync(remote.stdout.readline)
        assert line.startswith("done "), remote.stderr.read()
        return float(line.split()[1])  # the instant the remote call returned (CLOCK_MONOTONIC is system-wide)

    async def arrival(path: str, after: float) -> float:
        with anyio.fail_after(4.0):
            while not any(p == path and t >= after for p, t in got):
                await anyio.sleep(0.002)
        return next(t for p, t in got if p == path and t >= after)

    try:
        assert (await anyio.to_thread.run_sync(remote.stdout.readline)).strip() == "ready", remote.stderr.read()
        await anyio.sleep(0.3)  # the poller's LISTEN connection is up
        latencies = []
        for i in range(10):
            returned = await do(f"write /watched/f{i} v{i}")
            latencies.append(await arrival(f"/watched/f{i}", returned - 1.0) - returned)
        returned = await do("append /watched/log one")
        latencies.append(await arrival("/watched/log", returned - 1.0) - returned)
        await do("write /other/y outside")
        # After the delete was asked for (not after it returned: a one-round-trip commit's
        # NOTIFY can reach this process before the remote reads its clock), which still
        # tells this event from the first write's.
        asked = time.monotonic()
        returned = await do("delete /watched/f0")
        latencies.append(await arrival("/watched/f0", asked) - returned)
        await anyio.sleep(0.2)
        paths = Counter(p for p, _ in got)
        assert "/other/y" not in paths and paths["/watched/f0"] == 2 and paths["/watched/f1"] == 1, got
        ms = sorted(x * 1000 for x in latencies)
        print(
            f"\non_change across processes via LISTEN/NOTIFY (poll_interval=5 s): "
            f"median {statistics.median(ms):.1f} ms, max {ms[-1]:.1f} ms over {len(ms)} commits"
        )
        assert ms[-1] < 2000, ms
        await sub.close()
        got.clear()
        await do("write /watched/after close")
        await anyio.sleep(0.3)
        assert got == []
    finally:
        try:
            remote.stdin.write("quit\n")
            remote.stdin.flush()
            remote.wait(timeout=10)
        except Exception:  # noqa: BLE001
            remote.kill()
            remote.wait()
        await sub.close()
        store.close()


# --------------------------------------------------------------------------
# 4 processes standing for 4 hosts
# --------------------------------------------------------------------------

WORKER = r"""
import asyncio, json, os, sys, time
from memrev import VersionedStore

url, who, appends, writes, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]

async def main():
    store = VersionedStore(url, author=who)  # every worker opens the empty database at once
    try:
        print("ready", flush=True)
        while not os.path.exists(go):
            time.sleep(0.001)
        out = []
        w = 0
        for i in range(appends):
            line = f"{who} line {i:04d} é日😀\n"
            out.append([line, await store.append("/shared/stream.log", line)])
            if w < writes and i % (appends // writes) == appends // writes - 1:  # interleave writes to paths of our own
                await store.write(f"/{who}/{w}", f"{who} file {w}")
                w += 1
        print(json.dumps(out), flush=True)
    finally:
        store.close()

asyncio.run(main())
"""


@pytest.mark.slow
async def test_four_processes_append_and_write_concurrently(pg_url, tmp_path):
    n_proc, appends, writes = 4, 200, 100
    go = tmp_path / "go"
    whos = [f"h{i}" for i in range(n_proc)]
    t0 = time.monotonic()
    procs = [spawn(WORKER, pg_url, who, str(appends), str(writes), str(go)) for who in whos]
    results = []
    try:
        for p in procs:
            line = await anyio.to_thread.run_sync(p.stdout.readline)
            assert line.strip() == "ready", p.stderr.read()
        t1 = time.monotonic()
        go.touch()
        for p in procs:
            out, err = await anyio.to_thread.run_sync(lambda p=p: p.communicate(timeout=120))
            assert p.returncode == 0, err
            assert not err.strip(), err  # no error surfaced, not even a warning
            results.append(json.loads(out.strip().splitlines()[-1]))
        elapsed = time.monotonic() - t1
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    commits = n_proc * (appends + writes)
    print(
        f"\n{n_proc} processes, {commits} commits on one branch in {elapsed:.2f} s"
        f" ({commits / elapsed:.0f} commits/s; processes ready after {t1 - t0:.2f} s)"
    )

    pairs = [tuple(x) for r in results for x in r]
    async with VersionedStore(pg_url) as store:
        content = await store.read("/shared/stream.log")
        lines = content.splitlines(keepends=True)
        assert Counter(lines) == Counter(line for line, _ in pairs), "lines lost or duplicated"
        assert all(c == 1 for c in Counter(lines).values())
        for r in results:  # each process's lines in its own order
            mine = set(line for line, _ in r)
            assert [ln for ln in lines if ln in mine] == [line for line, _ in r]
        data = content.encode()
        spans = sorted((off, off + len(line.encode())) for line, off in pairs)
        assert spans[0][0] == 0 and spans[-1][1] == len(data)
        assert all(a[1] == b[0] for a, b in zip(spans, spans[1:])), "offsets do not tile the file"
        for line, off in pairs:
            assert await store.read_range("/shared/stream.log", off, off + len(line.encode())) == line
        for who in whos:
            assert await store.list(f"/{who}") == sorted(str(w) for w in range(writes))
            for w in (0, writes - 1):
                assert await store.read(f"/{who}/{w}") == f"{who} file {w}"
        log = await store.log()
        assert len(log) == commits, "a commit is not reachable from the branch"
        assert log[-1].parents == ()
        assert all(newer.parents == (older.id,) for newer, older in zip(log, log[1:]))
        assert Counter(c.author for c in log) == {who: appends + writes for who in whos}
        assert len(await store.log("/shared/stream.log")) == n_proc * appends
        assert await store.fsck() == []
